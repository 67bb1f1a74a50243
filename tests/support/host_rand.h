/* host_rand.h — the op tests' seeded host data: one splitmix64 stream per test executable, started at RNG_SEED (a
 * test defines its own before including this header, so each keeps its numbers), uniform values in [-1, 1) drawn
 * from its top 53 bits, and host buffers of them. Header-only, one copy per test executable. */
#ifndef RRFP_TESTS_HOST_RAND_H
#define RRFP_TESTS_HOST_RAND_H

#include <stdint.h>
#include <string.h>

#include "engine/util.h"

#ifndef RNG_SEED
#define RNG_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t rng_state = RNG_SEED;
static inline uint64_t rng_u64(void) { return rr_splitmix64(&rng_state); }
static inline float rng_sym(void) { return (float)(2.0 * (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0) - 1.0); }
/* n values in [-scale, scale) */
static inline float* hrand(size_t n, float scale) {
    float* x = mallocCheck((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_sym();
    return x;
}
/* a host copy of n floats */
static inline float* hdup(const float* x, size_t n) {
    float* y = mallocCheck((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

#endif
