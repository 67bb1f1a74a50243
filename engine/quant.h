/* quant.h — bitsandbytes' blockwise quantization, as QLoRA stores a frozen base weight (docs/engine.md,
 * "Quantized weights"): NF4 (4-bit NormalFloat) codes in blocks of 64 values with one f32 absmax each, and
 * optionally the absmaxes themselves quantized again ("double quantization": 8-bit codes of the signed dynamic
 * map in blocks of 256, after subtracting their mean). The CPU reference of every rule; the device kernels
 * dequantize the same bytes. */
#ifndef RRFP_QUANT_H
#define RRFP_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RR_NF4_BLOCK 64   /* values per absmax (bitsandbytes' default blocksize for 4-bit) */
#define RR_DQ_BLOCK 256   /* absmaxes per second-level absmax (double quantization) */

/* The 16 NF4 values, code 0 .. 15 (bitsandbytes' get_4bit_type("nf4")). */
extern const float rr_nf4_code[16];
/* The 256 values of bitsandbytes' signed dynamic 8-bit map (create_dynamic_map(signed=True)), ascending;
 * code 127 is 0 and code 255 is 1. */
extern const float rr_dynamic_map8[256];

/* The NF4 code of x in [-1, 1] (x already divided by its block's absmax): bitsandbytes' decision tree, whose
 * thresholds are the midpoints of neighbouring codes; a value on a threshold takes the lower code, NaN code 0. */
uint8_t rr_nf4_code_of(float x);
/* The 8-bit code of x in [-1, 1] on the ascending 256-value map: bitsandbytes' binary search to the nearest
 * value (a value on a midpoint takes the code nearer 0 from above, the code below from below, as its search). */
uint8_t rr_map8_code_of(const float* map, float x);

/* Number of blocks of `block` values covering n. */
size_t rr_quant_blocks(size_t n, size_t block);

/* Quantize n values (x[i]: f32) to NF4 in blocks of `block`: absmax[b] = max |x| over block b (f32),
 * each value's code rr_nf4_code_of(x * (1 / absmax)); out holds (n + 1) / 2 bytes, value 2j in the high nibble
 * of byte j and 2j + 1 in the low one. */
void rr_nf4_quantize(const float* x, size_t n, size_t block, uint8_t* out, float* absmax);
/* out[i] = rr_nf4_code[code i] * absmax[i / block] (f32). */
void rr_nf4_dequantize(const uint8_t* q, const float* absmax, size_t n, size_t block, float* out);

/* Blockwise 8-bit quantization on the dynamic map (bitsandbytes' quantize_blockwise): absmax per block,
 * out[i] = rr_map8_code_of(map, x * (1 / absmax)). */
void rr_map8_quantize(const float* x, size_t n, size_t block, uint8_t* out, float* absmax);
void rr_map8_dequantize(const uint8_t* q, const float* absmax, size_t n, size_t block, float* out);

/* Double quantization of NF4 absmaxes a[0 .. nb): *offset = their mean (summed in double, rounded to f32),
 * then rr_map8_quantize of a - offset in blocks of RR_DQ_BLOCK into q8 and absmax2 (rr_quant_blocks(nb,
 * RR_DQ_BLOCK) of them). rr_nf4_absmax_restore gives back a[i] ~ map[q8[i]] * absmax2[i / 256] + offset. */
void rr_nf4_absmax_compress(const float* a, size_t nb, uint8_t* q8, float* absmax2, float* offset);
void rr_nf4_absmax_restore(const uint8_t* q8, const float* absmax2, float offset, size_t nb, float* a);
/* A double-quantized NF4 weight of n values back to bf16, as QLoRA computes with it (engine/cuda/nf4_math.h, the
 * same words as the CUDA kernel cuda_nf4_dequantize_bf16): each block's absmax restored from q8 / absmax2 / offset,
 * then out[i] = bf16(rr_nf4_code[code i] * absmax). */
void rr_nf4_dq_dequantize_bf16(const uint8_t* q, const uint8_t* q8, const float* absmax2, float offset, size_t n,
                               uint16_t* out);

#ifdef __cplusplus
}
#endif
#endif
