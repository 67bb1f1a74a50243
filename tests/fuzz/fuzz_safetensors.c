/* fuzz_safetensors.c — libFuzzer target for the safetensors reader (engine/safetensors.c) with
 * tensor-parallel slice metadata ("slice.<name>": dim, global shape, ranges; engine/params.c) and the
 * assembly of sliced tensors (checkpoint_read_assembled, what `rrfp-mm tensors ls|diff` and resume
 * across TP layouts run). Any bytes must load or give a message naming the file; a file that loads
 * reads every tensor (F32/BF16/F16 widened, I32) without a fault; a slice description parses or is
 * refused; assembly of what parses answers or refuses. Built by tests/fuzz/run_fuzz_files.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "engine/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    StFile f;
    char err[1024];
    if (st_load_buffer(&f, "fuzz.safetensors", data, size, err, sizeof err) != 0) {
        if (!strstr(err, "fuzz.safetensors")) {
            fprintf(stderr, "fuzz_safetensors: a refusal that does not name the file: %s\n", err);
            abort();
        }
        return 0;
    }
    for (int i = 0; i < f.n; i++) {
        const StTensor* t = &f.tensors[i];
        size_t numel = (t->end - t->begin) / dtype_size(t->dtype); /* validated: shape x dtype = bytes */
        void* out = malloc(numel * 4 + 4);
        int rc = t->dtype == DTYPE_I32 ? st_read_i32(&f, t->name, out, t->ndim, t->shape, err, sizeof err)
                                       : st_read_f32(&f, t->name, out, t->ndim, t->shape, err, sizeof err);
        if (rc != 0 && t->ndim <= TENSOR_MAX_DIMS) {
            fprintf(stderr, "fuzz_safetensors: a loaded tensor '%s' does not read back: %s\n", t->name, err);
            abort();
        }
        /* the whole tensor through the assembly path too (resume reads every parameter this way): a
         * tensor of more dimensions than a parameter holds is refused, never copied into its shape */
        ParamSlice whole = {.dim = -1};
        int nd4 = t->ndim < TENSOR_MAX_DIMS ? t->ndim : TENSOR_MAX_DIMS;
        checkpoint_read_assembled(&f, 1, t->name, &whole, nd4, t->shape, out, 1, 0, err, sizeof err);
        free(out);
        char key[600];
        snprintf(key, sizeof key, "slice.%s", t->name);
        const char* v = st_meta(&f, key);
        ParamSlice sl;
        int nd;
        if (!v || params_slice_parse(v, &sl, &nd) != 0) continue;
        /* the harness allocates the global tensor only when the description's shape is small: what a
         * caller does after checking it (the library must not trust it either) */
        int64_t gn = 1;
        int ok = nd >= 1 && nd <= TENSOR_MAX_DIMS;
        for (int d = 0; ok && d < nd; d++) ok = sl.gshape[d] >= 0 && sl.gshape[d] <= (1 << 20) && (gn *= sl.gshape[d] ? sl.gshape[d] : 1) <= (1 << 20);
        if (!ok) continue;
        float* g = malloc((size_t)gn * 4 + 4);
        checkpoint_read_assembled(&f, 1, t->name, &whole, nd, sl.gshape, g, 1, 0, err, sizeof err);
        free(g);
    }
    st_free(&f);
    return 0;
}
