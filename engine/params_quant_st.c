/* params_quant_st.c — the NF4 form of a table's quantised tensors (engine/params_quant.h) in safetensors
 * files: checkpoints and step dumps store it beside the tensor's dequantised values, so a QLoRA run resumes the
 * very codes it trained on (a re-quantisation of dequantised values would move the absmaxes). For tensor NAME:
 *   NAME.nf4.codes           U8  ((numel + 1) / 2)  NF4 codes, two a byte, value 2j in the high nibble
 *   NAME.nf4.absmax          U8  (blocks)           8-bit dynamic-map codes of the block absmaxes minus offset
 *   NAME.nf4.nested_absmax   F32 (blocks / 256)     the second-level absmaxes
 *   NAME.nf4.offset          F32 (1)                the absmaxes' mean
 * with metadata "nf4.NAME" = "shape=OC,IC;block=64;nested_block=256" and an xxh64 checksum of each, as every
 * checkpoint tensor has. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/params_quant_st.h"
#include "engine/quant.h"
#include "engine/safetensors.h"
#include "engine/util.h"

static const char* const PART[4] = {"codes", "absmax", "nested_absmax", "offset"};

typedef struct {
    int n;
    void** bufs;
} QuantHost;

static void add_checked(StWriter* w, const char* name, DType dt, int64_t n, const void* x) {
    char key[256], hx[24];
    st_writer_add(w, name, dt, 1, &n, x);
    snprintf(key, sizeof key, "xxh64.%s", name);
    snprintf(hx, sizeof hx, "%016" PRIx64, rr_xxh64(x, (size_t)n * dtype_size(dt), 0));
    st_writer_meta(w, key, hx);
}

void* params_quant_st_add(StWriter* w, const ParamTable* pt) {
    QuantHost* h = callocCheck(1, sizeof *h);
    if (!pt->quant) return h;
    h->bufs = callocCheck((size_t)pt->n * 4 + 1, sizeof(void*));
    char name[200], val[128];
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (!s->quant) continue;
        /* a tensor-parallel slice: the whole weight's form, which every TP rank holds, written by TP rank 0 */
        if (params_is_slice(s) && pt->omit_replicated) continue;
        size_t gn, nb, nb2;
        params_quant_sizes(pt, i, &gn, &nb, &nb2);
        int64_t len[4] = {(int64_t)(gn + 1) / 2, (int64_t)nb, (int64_t)nb2, 1};
        DType dt[4] = {DTYPE_U8, DTYPE_U8, DTYPE_F32, DTYPE_F32};
        void* b[4];
        for (int k = 0; k < 4; k++) b[k] = h->bufs[h->n++] = mallocCheck((size_t)len[k] * dtype_size(dt[k]) + 1);
        params_quant_get(pt, i, b[0], b[1], b[2], b[3]);
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof name, "%s.nf4.%s", s->name, PART[k]);
            add_checked(w, name, dt[k], len[k], b[k]);
        }
        snprintf(name, sizeof name, "nf4.%s", s->name);
        const int64_t* shape = params_is_slice(s) ? s->slice.gshape : s->shape;
        snprintf(val, sizeof val, "shape=%" PRId64 ",%" PRId64 ";block=%d;nested_block=%d", shape[0], shape[1],
                 RR_NF4_BLOCK, RR_DQ_BLOCK);
        st_writer_meta(w, name, val);
    }
    return h;
}

void params_quant_st_free(void* host) {
    QuantHost* h = host;
    if (!h) return;
    for (int k = 0; k < h->n; k++) free(h->bufs[k]);
    free(h->bufs);
    free(h);
}

int params_quant_st_read(const StFile* f, int nf, ParamTable* pt, int require, char* err, size_t err_len) {
    if (!pt->quant) return 0;
    char name[200], want[128];
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (!s->quant) continue;
        int k = 0;
        const StTensor* t[4] = {NULL};
        snprintf(name, sizeof name, "%s.nf4.codes", s->name);
        for (k = 0; k < nf && !(t[0] = st_find(&f[k], name)); k++) {
        }
        if (!t[0]) {
            if (!require) continue; /* quantised from the values read (a full-precision checkpoint) */
            rr_fail(err, err_len, "%s: tensor '%s' has no NF4 form ('%s' missing): not a QLoRA checkpoint of this model",
                    nf > 0 ? f[0].path : "?", s->name, name);
            return -1;
        }
        const StFile* F = &f[k];
        size_t gn, nb, nb2; /* the whole weight's form (a tensor-parallel slice keeps its part) */
        params_quant_sizes(pt, i, &gn, &nb, &nb2);
        int64_t len[4] = {(int64_t)(gn + 1) / 2, (int64_t)nb, (int64_t)nb2, 1};
        DType dt[4] = {DTYPE_U8, DTYPE_U8, DTYPE_F32, DTYPE_F32};
        const int64_t* shape = params_is_slice(s) ? s->slice.gshape : s->shape;
        snprintf(name, sizeof name, "nf4.%s", s->name);
        snprintf(want, sizeof want, "shape=%" PRId64 ",%" PRId64 ";block=%d;nested_block=%d", shape[0], shape[1],
                 RR_NF4_BLOCK, RR_DQ_BLOCK);
        const char* meta = st_meta(F, name);
        if (!meta || strcmp(meta, want)) {
            rr_fail(err, err_len, "%s: tensor '%s': NF4 description \"%s\" is %s%s%s; expected \"%s\" (this model's shape, "
                    "bitsandbytes' blocks)", F->path, s->name, name, meta ? "\"" : "missing", meta ? meta : "",
                    meta ? "\"" : "", want);
            return -1;
        }
        void* b[4] = {NULL}; /* each part read from the file (engine/safetensors.h: read on demand) */
        int rc = 0;
        for (int p = 0; p < 4 && rc == 0; p++) {
            snprintf(name, sizeof name, "%s.nf4.%s", s->name, PART[p]);
            t[p] = st_find(F, name);
            if (!t[p] || t[p]->dtype != dt[p] || t[p]->ndim != 1 || t[p]->shape[0] != len[p]) {
                rr_fail(err, err_len, "%s: tensor '%s' is %s; expected %s (%" PRId64 ") for %s's NF4 form", F->path, name,
                        t[p] ? "of another dtype or shape" : "missing", dtype_name(dt[p]), len[p], s->name);
                rc = -1;
                break;
            }
            b[p] = mallocCheck((size_t)len[p] * dtype_size(dt[p]) + 1);
            if (st_read_raw(F, t[p], 0, t[p]->end - t[p]->begin, b[p], err, err_len) != 0) {
                rc = -1;
                break;
            }
            char key[256];
            snprintf(key, sizeof key, "xxh64.%s", name);
            const char* sum = st_meta(F, key);
            char* end = NULL;
            uint64_t stored = sum ? strtoull(sum, &end, 16) : 0;
            if (!sum || strlen(sum) != 16 || *end || stored != rr_xxh64(b[p], t[p]->end - t[p]->begin, 0)) {
                rr_fail(err, err_len, "%s: tensor '%s' %s: the file is damaged, refusing to load it", F->path, name,
                        sum ? "fails its checksum" : "has no checksum");
                rc = -1;
            }
        }
        if (rc == 0) {
            float off;
            memcpy(&off, b[3], sizeof off);
            params_quant_set(pt, i, b[0], b[1], b[2], off);
        }
        for (int p = 0; p < 4; p++) free(b[p]);
        if (rc != 0) return -1;
    }
    return 0;
}
