/* nf4_math.h — the dequantization of a QLoRA base weight (engine/quant.h: NF4 codes in blocks of RR_NF4_BLOCK,
 * their absmaxes double-quantized as 8-bit codes of the signed dynamic map in blocks of RR_DQ_BLOCK around an
 * offset), shared by the CPU (engine/quant.c) and the CUDA kernel (engine/cuda/quant.cu), RR_HD as in
 * kernel_math.h, so both give the same bf16 words:
 *
 *   absmax[b] = map8[q8[b]] * absmax2[b / RR_DQ_BLOCK] + offset      (an f32 product, then an f32 sum: no FMA)
 *   w[i]      = bf16(nf4[code i] * absmax[i / RR_NF4_BLOCK])          (nearest even)
 *
 * bitsandbytes' dequantize_4bit with compress_statistics: the absmaxes restored in f32 (dequantize_blockwise plus
 * the offset), then each code's value times its block's absmax, stored in the weight's dtype (bf16). */
#ifndef RRFP_NF4_MATH_H
#define RRFP_NF4_MATH_H

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "engine/quant.h"

/* The NF4 code book (rr_nf4_code) as a function both compilers inline. */
RR_HD static inline float rr_nf4_value(unsigned c) {
    const float t[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                         -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                         0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                         0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
    return t[c & 15];
}

/* f32 a * b rounded, never contracted into a following add */
RR_HD static inline float rr_mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    volatile float p = a * b;
    return p;
#endif
}

/* Block b's absmax restored from its 8-bit code (map8: rr_dynamic_map8's 256 values). q8 NULL: absmax2 holds every
 * block's absmax already restored (a tensor-parallel slice of a QLoRA base, engine/params_quant.c). */
RR_HD static inline float rr_nf4_absmax_at(const uint8_t* q8, const float* absmax2, const float* map8, float offset,
                                           size_t b) {
    if (!q8) return absmax2[b];
    return rr_mul_rn(map8[q8[b]], absmax2[b / RR_DQ_BLOCK]) + offset;
}

/* Value i of packed NF4 codes q (two a byte, value 2j in the high nibble) at its block's absmax, as bf16. */
RR_HD static inline uint16_t rr_nf4_bf16_at(const uint8_t* q, float absmax, size_t i) {
    unsigned c = i % 2 ? q[i / 2] & 15u : (unsigned)q[i / 2] >> 4;
    return rr_f32_to_bf16(rr_mul_rn(rr_nf4_value(c), absmax));
}

#ifdef __cplusplus
extern "C" {
#endif
/* engine/cuda/quant.cu: out[0 .. n) = rr_nf4_bf16_at(q, rr_nf4_absmax_at(...), i) on the backend's stream; every
 * pointer device memory (map8: the 256 map values uploaded). */
void cuda_nf4_dequantize_bf16(const Backend* be, uint16_t* out, const uint8_t* q, const uint8_t* q8,
                              const float* absmax2, const float* map8, float offset, size_t n);
#ifdef __cplusplus
}
#endif
#endif
