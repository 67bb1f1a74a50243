/* gpu_timing.h — the device benchmarks' clock (bench/gpu_attn_bench.c, bench/gpu_bw_bench.c): after `warm` calls,
 * 5 batches of `reps` calls, each batch between two synchronizes on the host clock; a call's time is the median
 * batch / reps. */
#ifndef RRFP_BENCH_GPU_TIMING_H
#define RRFP_BENCH_GPU_TIMING_H

#include <stdlib.h>
#include <time.h>

#include "engine/engine.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmp_d(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

typedef void (*Call)(void* ctx);
/* milliseconds per call of f(ctx) on be's device */
static double time_ms(const Backend* be, Call f, void* ctx, int warm, int reps) {
    for (int i = 0; i < warm; i++) f(ctx);
    be->dev->synchronize(be);
    double b[5];
    for (int i = 0; i < 5; i++) {
        double t0 = now_s();
        for (int r = 0; r < reps; r++) f(ctx);
        be->dev->synchronize(be);
        b[i] = (now_s() - t0) * 1e3 / reps;
    }
    qsort(b, 5, sizeof b[0], cmp_d);
    return b[2];
}

#endif
