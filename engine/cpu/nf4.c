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
    /* A block's 64 values take one of 16 words: those 16 computed once (the very rr_nf4_bf16_at of each code) and
     * looked up per packed byte, two values at a time, instead of one rounded product per value. */
    static const uint8_t CODE_BYTE[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                          0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF};
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t b = 0; b < nb; b++) {
        float a = rr_nf4_absmax_at(q8, absmax2, map8, offset, b), t[16];
        for (unsigned c = 0; c < 16; c++) t[c] = rr_bf16_to_f32(rr_nf4_bf16_at(CODE_BYTE, a, 2 * c));
        size_t i0 = b * RR_NF4_BLOCK, i1 = i0 + RR_NF4_BLOCK < n ? i0 + RR_NF4_BLOCK : n, i = i0;
        for (; i + 1 < i1; i += 2) { /* RR_NF4_BLOCK is even: i is even here, its byte holds values i and i + 1 */
            unsigned byte = q[i / 2];
            o[i] = t[byte >> 4];
            o[i + 1] = t[byte & 15u];
        }
        if (i < i1) o[i] = t[q[i / 2] >> 4];
    }
}
