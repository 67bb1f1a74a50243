/* bench_loader.c — loader throughput for bench/loader.sh: one epoch of a shard folder through the
 * loader (frame read + zstd + JPEG decode + resize + patchify + fifo microbatch assembly), one decode
 * worker. Prints one line: samples, wall seconds, CPU seconds (all threads), compressed MiB read.
 * With STEP_MS > 0 it instead plays a trainer: STEP_MS of busy compute per step of MICROBATCHES
 * microbatches (the consumer thread spinning, as a forward/backward would keep a core busy), for
 * STEPS steps, and prints the fraction of wall time spent waiting in loader_next_step.
 * usage: rrfp-bench-loader SHARDS P MIN_PATCHES MAX_PATCHES MICROBATCH_TOKENS [WORKERS [STEP_MS MICROBATCHES STEPS]] */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "data/loader.h"
#include "engine/util.h"

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + 1e-6 * u.ru_utime.tv_usec + u.ru_stime.tv_sec + 1e-6 * u.ru_stime.tv_usec;
}

int main(int argc, char** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: rrfp-bench-loader SHARDS P MIN MAX BUDGET [WORKERS]\n");
        return 2;
    }
    LoaderConfig c;
    loader_config_default(&c);
    c.shards = argv[1];
    c.patch = atoi(argv[2]), c.min_patches = atoi(argv[3]), c.max_patches = atoi(argv[4]);
    c.microbatch_tokens = atoi(argv[5]);
    c.workers = argc > 6 ? atoi(argv[6]) : 1;
    double step_ms = argc > 7 ? atof(argv[7]) : 0;
    c.policy = step_ms > 0 ? LOADER_POLICY_FFD : LOADER_POLICY_FIFO;
    c.microbatches = argc > 8 ? atoi(argv[8]) : 1;
    /* BENCH_DP=D: replica 0 of D (it plans the global step, decodes only its microbatches' images) */
    c.dp_size = getenv("BENCH_DP") ? atoi(getenv("BENCH_DP")) : 1, c.dp_rank = 0;
    int steps = argc > 9 ? atoi(argv[9]) : 50;
    char err[1024];
    double w0 = rr_now(), c0 = cpu_s();
    Loader* L = loader_open(&c, NULL, err, sizeof err);
    if (!L) rr_die("%s", err);
    int64_t N = loader_sample_count(L), samples = 0, tokens = 0;
    if (step_ms > 0) {
        double wait = 0, wmax = 0, t_start = rr_now();
        int waited = 0;
        for (int s = 0; s < steps; s++) {
            double t0 = rr_now();
            LoaderStep st;
            if (loader_next_step(L, &st, err, sizeof err) != 0) rr_die("%s", err);
            double t1 = rr_now();
            if (s > 0) { /* step 1 waits for the pipeline to fill: reported apart */
                wait += t1 - t0;
                waited += t1 - t0 > 1e-3;
                if (getenv("BENCH_VERBOSE") && t1 - t0 > 1e-3) printf("step %d waited %.1f ms\n", s, 1e3 * (t1 - t0));
                if (t1 - t0 > wmax) wmax = t1 - t0;
            }
            else printf("first step: %.1f ms to fill\n", 1e3 * (t1 - t0));
            volatile double x = 0;
            while (rr_now() - t1 < step_ms * 1e-3) x += 1; /* the step's compute */
            samples += st.samples;
        }
        double total = rr_now() - t_start;
        LoaderStats ls;
        loader_stats(L, &ls);
        printf("loader-side wait (blocked on the planner): %.4f s\n", ls.wait_s);
        printf("steps %d step_ms %.1f samples/step %.1f wait %.4f s of %.3f s = %.3f%% (steps waiting > 1 ms: %d, "
               "longest %.1f ms)\n", steps, step_ms, (double)samples / steps, wait, total, 100 * wait / total, waited,
               1e3 * wmax);
        loader_close(L);
        return 0;
    }
    while (samples < N) {
        LoaderStep st;
        if (loader_next_step(L, &st, err, sizeof err) != 0) rr_die("%s", err);
        samples += st.samples;
        tokens += st.tokens;
    }
    double wall = rr_now() - w0, cpu = cpu_s() - c0;
    LoaderStats s;
    loader_stats(L, &s);
    printf("samples %lld wall %.4f cpu %.4f mib %.4f tokens %lld wait %.4f\n", (long long)samples, wall, cpu,
           (double)s.bytes_read / 1048576.0, (long long)tokens, s.wait_s);
    loader_close(L);
    return 0;
}
