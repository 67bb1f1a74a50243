/* init.c — parameter initialisation from the counter-based Philox4x32-10 generator.
 *
 * Philox4x32-10 is the Random123 algorithm (Salmon et al., SC'11): 10 rounds of two 32x32->64-bit
 * multiplies, with a Weyl-sequence key schedule. Being counter-based, value i of a stream is a pure
 * function of (key, i), so any slice of a parameter (a TP shard, a pipeline stage's layers) can be
 * generated alone and matches the whole.
 *
 * init_normal's stream, exactly (so that an outside implementation can reproduce every weight):
 *   h = rr_fnv1a64(name bytes), key = (lo32(h), hi32(h));
 *   element i comes from block b = i / 4: counter = (lo32(b), hi32(b), lo32(seed), hi32(seed));
 *   the block's words w0..w3 give two Box-Muller pairs (w0, w1) and (w2, w3):
 *     u1 = (w + 1) / 2^32 in (0, 1], u2 = w' / 2^32, r = sqrt(-2 ln u1),
 *     z = r cos(2 pi u2), z' = r sin(2 pi u2)      (computed in double)
 *   element i = (float)(std * z_{i mod 4}) with z_0, z_1 from the first pair, z_2, z_3 from the second. */
#include <math.h>
#include <string.h>

#include "engine/engine.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

static inline uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t key0, uint32_t key1) {
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            key0 += PHILOX_W0;
            key1 += PHILOX_W1;
        }
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo32(PHILOX_M0, ctr.v[0], &hi0);
        uint32_t lo1 = mulhilo32(PHILOX_M1, ctr.v[2], &hi1);
        Philox4x32 next = {{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
        ctr = next;
    }
    return ctr;
}

/* The 4 normals of block b (see the header comment). */
static void init_normal_block(double z[4], uint64_t b, uint64_t seed, uint32_t key0, uint32_t key1) {
    Philox4x32 ctr = {{(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)seed, (uint32_t)(seed >> 32)}};
    Philox4x32 w = philox4x32_10(ctr, key0, key1);
    for (int pair = 0; pair < 2; pair++) {
        double u1 = ((double)w.v[2 * pair] + 1.0) / 4294967296.0;
        double u2 = (double)w.v[2 * pair + 1] / 4294967296.0;
        double r = sqrt(-2.0 * log(u1));
        z[2 * pair] = r * cos(2.0 * M_PI * u2);
        z[2 * pair + 1] = r * sin(2.0 * M_PI * u2);
    }
}

void init_normal_slice(float* out, const char* name, int ndim, const int64_t* gshape, int dim, int n,
                       const int64_t* off, const int64_t* len, uint64_t seed, float std) {
    RR_ASSERT(dim == 0 || (dim == 1 && ndim == 2));
    int64_t cols = ndim > 1 ? gshape[1] : 1;
    if (dim == 0) { /* row ranges are contiguous in the whole tensor */
        for (int k = 0; k < n; k++) {
            init_normal(out, (size_t)(len[k] * cols), (size_t)(off[k] * cols), seed, name, std);
            out += len[k] * cols;
        }
        return;
    }
    int64_t w = 0; /* column ranges: one run per row */
    for (int k = 0; k < n; k++) w += len[k];
    for (int64_t i = 0; i < gshape[0]; i++) {
        float* dst = out + i * w;
        for (int k = 0; k < n; k++) {
            init_normal(dst, (size_t)len[k], (size_t)(i * cols + off[k]), seed, name, std);
            dst += len[k];
        }
    }
}

void init_normal(float* out, size_t n, size_t offset, uint64_t seed, const char* name, float std) {
    uint64_t h = rr_fnv1a64(name, strlen(name));
    uint32_t key0 = (uint32_t)h, key1 = (uint32_t)(h >> 32);
    if (n == 0) return;
    /* Blocks in parallel; each block fills the elements of [offset, offset + n) that it owns. */
    int64_t b_first = (int64_t)(offset / 4), b_last = (int64_t)((offset + n - 1) / 4);
#pragma omp parallel for if (n > 65536)
    for (int64_t b = b_first; b <= b_last; b++) {
        double z[4];
        init_normal_block(z, (uint64_t)b, seed, key0, key1);
        for (int j = 0; j < 4; j++) {
            size_t i = 4 * (size_t)b + j;
            if (i >= offset && i < offset + n) out[i - offset] = (float)(std * z[j]);
        }
    }
}

void init_uniform(float* out, size_t n, size_t offset, uint64_t seed, const char* name, float bound) {
    uint64_t h = rr_fnv1a64(name, strlen(name));
    uint32_t key0 = (uint32_t)h, key1 = (uint32_t)(h >> 32);
    for (size_t k = 0; k < n; k++) {
        uint64_t i = offset + k, b = i / 4;
        Philox4x32 ctr = {{(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)seed, (uint32_t)(seed >> 32)}};
        Philox4x32 w = philox4x32_10(ctr, key0, key1);
        double u = ((double)w.v[i % 4] + 0.5) / 4294967296.0;
        out[k] = (float)(bound * (2.0 * u - 1.0));
    }
}
