/* test_adamw_multi.c — the multi-tensor AdamW (BackendOps.adamw_multi, engine/cuda/optim.cu) against the
 * per-tensor one (adamw_update, adamw_update_copy) on the CUDA backend's own source in the CPU emulation.
 *
 * Tensors of lengths around the chunk size (16384 values: 1, 255, 16383, 16384, 16385, 40000, and a 3-value
 * one), decay on and off, two configurations (the second a projector's learning rate), three times: no
 * compute copy (the f32 table), a 2-byte bf16 copy, an f32-word copy. Each is run through both paths from the
 * same start for three steps (t = 1, 2, 3; a new lr each step) and every parameter, moment and copy compared
 * BITWISE (both paths apply rr_adamw_element with the step scalars of the same configuration). Then:
 *   - the launches, by the profiler: the first call of a list of tensors copies its chunk table to the
 *     device (2: the copy and the kernel), every later call of the same list is one kernel launch; the
 *     per-tensor path makes one launch per tensor;
 *   - a changed list (the same buffers, the configurations swapped) makes a new table: still bitwise.
 * Usage: test_adamw_multi */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "tests/support/cuda_emu_entry.h"

static int failures;
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float rng_sym(void) {
    return (float)(2.0 * (double)(rr_splitmix64(&rng_state) >> 11) * (1.0 / 9007199254740992.0) - 1.0);
}

#define NT 7
static const size_t LENS[NT] = {1, 255, 16383, 16384, 16385, 40000, 3};

typedef struct {
    float *p, *g, *m, *v; /* device */
    void* copy;           /* device, or NULL */
} Dev;

static void* up(const Backend* be, const void* h, size_t bytes) {
    void* d = be->dev->alloc(bytes ? bytes : 4);
    be->dev->copy_h2d(be, d, h, bytes);
    return d;
}
static int same_bits(const Backend* be, const void* a, const void* b, size_t bytes, const char* what, int tensor, const char* mode) {
    unsigned char* ha = mallocCheck(bytes ? bytes : 1);
    unsigned char* hb = mallocCheck(bytes ? bytes : 1);
    be->dev->copy_d2h(be, ha, a, bytes);
    be->dev->copy_d2h(be, hb, b, bytes);
    int ok = memcmp(ha, hb, bytes) == 0;
    if (!ok) {
        fprintf(stderr, "FAIL %s: tensor %d (%zu values): %s differs between the multi-tensor and the per-tensor AdamW\n", mode,
                tensor, LENS[tensor], what);
        failures++;
    }
    free(ha);
    free(hb);
    return ok;
}

static long optimiser_launches(const Backend* be) {
    BackendProfile prof;
    be->dev->profile_take(&prof);
    return prof.launches[PROF_OPTIMISER];
}

/* copy_dt: -1 none, else the copy's dtype */
static void run_mode(const Backend* be, int copy_dt, const char* mode) {
    Dev a[NT], b[NT];
    size_t esz = copy_dt == DTYPE_BF16 ? 2 : 4;
    for (int i = 0; i < NT; i++) {
        size_t n = LENS[i];
        float* h = mallocCheck(4 * n * sizeof(float));
        for (size_t j = 0; j < 4 * n; j++) h[j] = rng_sym();
        for (size_t j = 0; j < n; j++) h[3 * n + j] = h[3 * n + j] * h[3 * n + j]; /* v >= 0 */
        Dev* d[2] = {&a[i], &b[i]};
        for (int k = 0; k < 2; k++) {
            d[k]->p = up(be, h, n * sizeof(float));
            d[k]->g = up(be, h + n, n * sizeof(float));
            d[k]->m = up(be, h + 2 * n, n * sizeof(float));
            d[k]->v = up(be, h + 3 * n, n * sizeof(float));
            d[k]->copy = copy_dt < 0 ? NULL : be->dev->alloc(n * esz);
        }
        free(h);
    }
    AdamWConfig cfgs[2] = {{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f}, {2e-5f, 0.9f, 0.999f, 1e-8f, 0.1f}};
    AdamwTensor ts[NT];
    for (int swap = 0; swap < 2; swap++) {
        for (int i = 0; i < NT; i++) {
            Buf copy = {b[i].copy, copy_dt < 0 ? DTYPE_F32 : (DType)copy_dt};
            ts[i] = (AdamwTensor){b[i].p, b[i].g, b[i].m, b[i].v, LENS[i], i % 2, (i % 3 == 1) ^ swap, copy};
        }
        for (int t = 1 + 3 * swap; t <= 3 + 3 * swap; t++) {
            cfgs[0].lr = 1e-3f / (float)t, cfgs[1].lr = 2e-5f / (float)t;
            for (int i = 0; i < NT; i++) {
                const AdamWConfig* c = &cfgs[ts[i].cfg];
                Buf ca = {a[i].copy, ts[i].copy.dt};
                if (copy_dt < 0)
                    be->ops->adamw_update(be, a[i].p, a[i].g, a[i].m, a[i].v, LENS[i], c, t, ts[i].decay);
                else
                    be->ops->adamw_update_copy(be, a[i].p, a[i].g, a[i].m, a[i].v, LENS[i], c, t, ts[i].decay, ca);
            }
            long per = optimiser_launches(be);
            if (per != NT) {
                fprintf(stderr, "FAIL %s: the per-tensor AdamW made %ld launches for %d tensors\n", mode, per, NT);
                failures++;
            }
            be->ops->adamw_multi(be, ts, NT, cfgs, 2, t);
            long multi = optimiser_launches(be);
            long want = t == 1 + 3 * swap ? 2 : 1; /* a new list: its table's copy, then the kernel */
            if (multi != want) {
                fprintf(stderr, "FAIL %s: the multi-tensor AdamW at t %d made %ld launches, want %ld\n", mode, t, multi, want);
                failures++;
            }
        }
    }
    for (int i = 0; i < NT; i++) {
        size_t n = LENS[i];
        same_bits(be, a[i].p, b[i].p, n * 4, "the parameter", i, mode);
        same_bits(be, a[i].m, b[i].m, n * 4, "m", i, mode);
        same_bits(be, a[i].v, b[i].v, n * 4, "v", i, mode);
        if (copy_dt >= 0) same_bits(be, a[i].copy, b[i].copy, n * esz, "the compute copy", i, mode);
        Dev* d[2] = {&a[i], &b[i]};
        for (int k = 0; k < 2; k++) {
            be->dev->free(d[k]->p), be->dev->free(d[k]->g), be->dev->free(d[k]->m), be->dev->free(d[k]->v);
            if (d[k]->copy) be->dev->free(d[k]->copy);
        }
    }
    printf("%s: %d tensors, 6 steps: bitwise\n", mode, NT);
}

int main(void) {
    const Backend* be = cuda_emu_backend_or_exit("test_adamw_multi");
    if (!be->ops->adamw_multi) {
        fprintf(stderr, "FAIL: the CUDA table has no adamw_multi\n");
        return 1;
    }
    be->dev->profile(1);
    run_mode(be, -1, "no copy");
    run_mode(be, DTYPE_BF16, "bf16 copy");
    run_mode(be, DTYPE_F32, "f32-word copy");
    be->dev->profile(0);
    if (failures) {
        fprintf(stderr, "adamw_multi: %d failures\n", failures);
        return 1;
    }
    printf("adamw_multi: ok\n");
    return 0;
}
