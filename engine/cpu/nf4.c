/* nf4.c — QLoRA's base weights dequantized on the CPU (BackendOps.nf4_dequantize): the bf16 words of
 * engine/cuda/nf4_math.h (the CUDA kernel's, bit for bit), widened to the f32 words every CPU table stores
 * weights in. */
#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/nf4_math.h"
#include "engine/engine.h"

void cpu_nf4_dequantize(const Backend* be, Buf out, const uint8_t* q, const uint8_t* q8, const float* absmax2,
                        const float* map8, float offset, size_t n) {
    (void)be;
    RR_ASSERT(out.dt == DTYPE_F32 && "the CPU tables store weights as f32 words");
    float* o = buf_f32p(out);
    size_t nb = (n + RR_NF4_BLOCK - 1) / RR_NF4_BLOCK;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t b = 0; b < nb; b++) {
        float a = rr_nf4_absmax_at(q8, absmax2, map8, offset, b);
        for (size_t i = b * RR_NF4_BLOCK; i < n && i < (b + 1) * RR_NF4_BLOCK; i++) o[i] = rr_bf16_to_f32(rr_nf4_bf16_at(q, a, i));
    }
}
