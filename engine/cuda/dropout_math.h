/* dropout_math.h — the keep mask of LoRA's dropout (BackendOps.dropout_forward), shared by the CPU backend and the
 * CUDA kernel (RR_HD as in kernel_math.h), so both drop the same elements.
 *
 * The mask is a pure function of (seed, element index): element i of a (rows, width) matrix of global row width
 * ld_g is kept when u >= p, with u = (w >> 8) / 2^24, w = word (i mod 4) of the Philox4x32-10 block
 *   philox4x32_10(counter = (lo32(i / 4), hi32(i / 4), lo32(seed), hi32(seed)), key = (RR_DROP_KEY0, RR_DROP_KEY1)),
 * the generator of engine/init.c under a fixed key. A kept element is scaled by 1 / (1 - p) (the f32 value of
 * 1.0f / (1.0f - p), one multiply), a dropped one is 0: torch.nn.functional.dropout's rule. The index is the
 * element's place in the whole (unsplit) matrix, so a tensor-parallel rank holding columns [c0, c0 + C) draws the
 * one-process mask of its columns. */
#ifndef RRFP_DROPOUT_MATH_H
#define RRFP_DROPOUT_MATH_H

#include "engine/cuda/kernel_math.h"

#define RR_DROP_KEY0 0x4C6F5241u /* "LoRA" */
#define RR_DROP_KEY1 0x44726F70u /* "Drop" */

/* 1 when element i of the mask keyed by seed is kept at drop probability p. */
RR_HD static inline int rr_dropout_keep(uint64_t seed, uint64_t i, float p) {
    uint64_t b = i / 4;
    uint32_t c0 = (uint32_t)b, c1 = (uint32_t)(b >> 32), c2 = (uint32_t)seed, c3 = (uint32_t)(seed >> 32);
    uint32_t k0 = RR_DROP_KEY0, k1 = RR_DROP_KEY1;
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    }
    uint32_t w = (i & 3) == 0 ? c0 : (i & 3) == 1 ? c1 : (i & 3) == 2 ? c2 : c3;
    float u = (float)(w >> 8) * (1.0f / 16777216.0f);
    return u >= p;
}

/* The kept elements' factor 1 / (1 - p). */
RR_HD static inline float rr_dropout_scale(float p) { return 1.0f / (1.0f - p); }

#endif
