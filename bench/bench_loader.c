/* bench_loader.c — loader throughput for bench/loader.sh: one epoch of a shard folder through the
 * loader (frame read + zstd + JPEG decode + resize + patchify + fifo microbatch assembly), one decode
 * worker. Prints one line: samples, wall seconds, CPU seconds (all threads), compressed MiB read.
 * usage: rrfp-bench-loader SHARDS P MIN_PATCHES MAX_PATCHES MICROBATCH_TOKENS [WORKERS] */
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
    c.policy = LOADER_POLICY_FIFO;
    c.microbatches = 1;
    char err[1024];
    double w0 = rr_now(), c0 = cpu_s();
    Loader* L = loader_open(&c, NULL, err, sizeof err);
    if (!L) rr_die("%s", err);
    int64_t N = loader_sample_count(L), samples = 0, tokens = 0;
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
