/* fastmath.h — an expf that the compiler can vectorise, for the CPU ops' softmax and sigmoids.
 *
 * glibc's expf is a function call per element, so loops over it stay scalar; cross-entropy's two
 * passes over (N, V) logits cost about half of the LM head's GEMMs with it. This is the Cephes
 * expf (range reduction x = n ln2 + r with ln2 split in two, degree-6 polynomial on
 * |r| <= ln2/2, 2^n built in the exponent bits): plain C with no calls, so a `#pragma omp simd`
 * loop vectorises. Error: within 1 ulp of glibc's expf on [-87, 88] (checked exhaustively on a
 * 1/256 subsample of the floats there; tests/engine/cpu/test_ops_fd.c bounds the ops that use it). Above
 * 88.73 it gives +inf, below -103.9 it gives 0, denormal results in between; NaN gives NaN. */
#ifndef RRFP_CPU_FASTMATH_H
#define RRFP_CPU_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 2^k as a float for k in [-126, 127], by writing the exponent bits. */
static inline float cpu_exp2i(int k) {
    uint32_t bits = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The Cephes expf's polynomial on the reduced argument r up to its last step: e^r = p r^2 + r + 1 with this p
 * (callers do that step, each its own way of rounding r^2) */
static inline float cpu_exp_cephes_p(float r) {
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    return p * r + 5.0000001201e-1f;
}

/* Branch-free, so that it vectorises inside `omp simd` loops: out-of-range inputs are clamped to
 * where the same arithmetic overflows to +inf (x >= 89) or underflows to 0 (x <= -104), with no
 * selects after the arithmetic (GCC will not if-convert those under -ftrapping-math). A NaN input
 * is replaced by 0 before the conversion to int (converting NaN is undefined) and put back at the
 * end by adding a term that is NaN for NaN and 0 otherwise. */
static inline float cpu_expf(float x) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    float xc = x < 89.0f ? x : 89.0f; /* false for NaN: NaN -> 89, fixed below */
    xc = xc > -104.0f ? xc : -104.0f;
    xc = x == x ? xc : 0.0f;
    float nan_in = x == x ? 0.0f : x; /* NaN for NaN, 0 otherwise (also for +-inf) */
    /* n = round(x / ln2) in [-150, 128], by truncating x/ln2 +- 0.5 */
    float t = xc * log2e;
    int n = (int)(t + (t >= 0.0f ? 0.5f : -0.5f));
    float fn = (float)n;
    float r = xc - fn * ln2_hi - fn * ln2_lo;
    float r2 = r * r;
    float p = cpu_exp_cephes_p(r) * r2 + r + 1.0f;
    /* 2^n as two halves in [-75, 64], each a normal float: the product overflows or underflows
     * exactly where expf does */
    int n1 = n / 2;
    return p * cpu_exp2i(n1) * cpu_exp2i(n - n1) + nan_in;
}

#endif
