/* bench_pipeline.c — real pipeline steps under mpirun: step time of each dispatch mode and hint
 * against `fixed-sync 1f1b`, measured in the same invocation, with real model compute on the CPU.
 *
 * The step is synthetic but shaped like multimodal data (data/synth.h): microbatches whose samples
 * carry images of very different sizes, so the first stage (which runs the ViT) sees heavy
 * per-microbatch variance. Configurations are run round-robin, `--repeats` times each after one
 * warm-up, so machine noise spreads over all of them; the reported time is the median step time
 * (slowest rank). Bubble = 1 - sum(busy) / (P * step time).
 *
 * Usage: mpirun -np P bench_pipeline [--microbatches M] [--repeats R] [--threads T] [--kind mm|text]
 *                                    [--dt D] [--layers L] [--trace DIR]
 * --trace DIR writes DIR/<mode>-<hint>-<cap>-rank<r>.json (Chrome trace of the last repetition of each
 * configuration) for `rrfp-mm trace` (timeline SVG, or --durations to replay it in the simulator). */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/synth.h"
#include "engine/engine.h"
#include "runtime/model/model.h"
#include "runtime/model/partition.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/comm.h"
#include "runtime/pipeline/pipeline.h"

typedef struct {
    const char* mode;
    const char* hint;
    const char* cap; /* "" = default */
} BenchCfg;

static const BenchCfg configs[] = {
    {"fixed-sync", "1f1b", ""}, {"fixed", "1f1b", ""},   {"ready", "1f1b", ""},     {"fixed", "zb-h1", ""},
    {"ready", "zb-h1", ""},     {"ready", "bfw", "1x"}, {"ready", "bfw", "1.5x"}, {"ready", "bfw", "2x"},
};
#define N_CONFIGS ((int)(sizeof configs / sizeof configs[0]))

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    char werr[256];
    Comm* world = comm_mpi_world(werr, sizeof werr);
    if (!world) {
        fprintf(stderr, "%s\n", werr);
        return 1;
    }
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    int M = 4 * P, repeats = 3, threads = 1, Dt = 128, Lt = 4 * P;
    const char* kind = "mm";
    const char* trace_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--microbatches") && i + 1 < argc) M = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kind") && i + 1 < argc) kind = argv[++i];
        else if (!strcmp(argv[i], "--dt") && i + 1 < argc) Dt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) Lt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace_dir = argv[++i];
        else {
            if (rank == 0) fprintf(stderr, "bench_pipeline: unknown argument '%s'\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    omp_set_num_threads(threads);
    int mm = !strcmp(kind, "mm");
    ModelConfig cfg = {.patch = 4, .Dv = 64, .Lv = 2, .Hv = 2, .Dt = Dt, .Lt = Lt, .Ht = Dt / 32, .F = 3 * Dt,
                       .V = 1024, .min_patches = 4, .max_patches = 1024, .init_std = 0.02f, .seed = 1};
    char err[512];
    if (model_config_check(&cfg, err, sizeof err) != 0) rr_die("bench config: %s", err);
    /* Multimodal: 1-2 samples, images from 2x2 to 20x20 patches (100x spread), text 16..96.
     * Text-like: 1-4 samples of 32..192 tokens, no images (mild variance). */
    SynthConfig sc = mm ? (SynthConfig){.patch = 4, .V = cfg.V, .max_samples = 2, .min_text = 16, .max_text = 96,
                                        .min_grid = 2, .max_grid = 20, .image_prob = 0.9, .supervised_prob = 0.5}
                        : (SynthConfig){.patch = 4, .V = cfg.V, .max_samples = 4, .min_text = 32, .max_text = 192,
                                        .min_grid = 2, .max_grid = 2, .image_prob = 0.0, .supervised_prob = 0.5};
    Microbatch* mbs = callocCheck((size_t)M, sizeof *mbs);
    int max_T = 1, max_Np = 1, sup = 0, tokens = 0;
    for (int m = 0; m < M; m++) {
        synth_microbatch(&mbs[m], &sc, 42, m);
        if (mbs[m].T > max_T) max_T = mbs[m].T;
        if (mbs[m].Np > max_Np) max_Np = mbs[m].Np;
        sup += mbs[m].n_supervised;
        tokens += mbs[m].T;
    }
    /* Balanced split by the cost model with this step's token and patch counts. */
    int layers[256], l0 = 0;
    double patches = 0, images = 0, samples = 0;
    for (int m = 0; m < M; m++) patches += mbs[m].Np, images += mbs[m].I, samples += mbs[m].S;
    PartitionCost pc = partition_cost_model(cfg.Dv, cfg.Lv, cfg.Dt, cfg.F, cfg.V, tokens, patches,
                                            images > 0 ? patches / images : 0, tokens / samples, cfg.patch);
    partition_auto(cfg.Lt, P, pc, layers);
    for (int r = 0; r < rank; r++) l0 += layers[r];
    Stage stage;
    stage_init(&stage, &cfg, l0, l0 + layers[rank], &backend_cpu);
    Stage* sp = &stage;
    if (rank == 0) {
        printf("# bench_pipeline: P=%d M=%d kind=%s threads/rank=%d Dt=%d Lt=%d Dv=%d Lv=%d; tokens/step %d, "
               "patches/step %.0f; layers per stage", P, M, kind, threads, Dt, Lt, cfg.Dv, cfg.Lv, tokens, patches);
        for (int r = 0; r < P; r++) printf("%s%d", r ? "," : " ", layers[r]);
        printf("\n");
    }

    double times[N_CONFIGS][16], bubbles[N_CONFIGS][16];
    Pipeline* pls[N_CONFIGS];
    for (int c = 0; c < N_CONFIGS; c++) {
        PipelineConfig pcfg = {.P = P, .rank = rank, .chunks = 1, .cap = {PP_CAP_DEFAULT, 0}, .transport = TRANSPORT_TAGGED,
                               .timeout_s = 300, .max_tokens = max_T, .max_patches = max_Np};
        pp_mode_parse(configs[c].mode, &pcfg.mode);
        pp_hint_parse(configs[c].hint, &pcfg.hint);
        if (configs[c].cap[0] && pp_cap_parse(configs[c].cap, &pcfg.cap, err, sizeof err) != 0) rr_die("%s", err);
        pls[c] = pipeline_create(&pcfg, &sp, world, M, err, sizeof err);
        if (!pls[c]) rr_die("%s", err);
    }
    if (repeats > 16) repeats = 16;
    for (int rep = -1; rep < repeats; rep++)
        for (int c = 0; c < N_CONFIGS; c++) {
            params_zero_grad(&stage.params);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            PipelineStepStats st;
            PpTrace* tr = NULL;
            if (trace_dir && rep == repeats - 1) {
                char path[1024];
                snprintf(path, sizeof path, "%s/%s-%s-%s-rank%d.json", trace_dir, configs[c].mode, configs[c].hint,
                         configs[c].cap[0] ? configs[c].cap : "default", rank);
                double origin = rr_now(); /* the trace clock, rank 0's, as the trainer's traces */
                MPI_Bcast(&origin, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
                tr = pp_trace_open(path, origin);
                if (!tr) rr_die("cannot open trace '%s'", path);
                pp_trace_rank(tr, rank);
            }
            if (pipeline_step(pls[c], mbs, M, 1.0f / (float)sup, tr, rep, NULL, &st, err, sizeof err) != 0) {
                fprintf(stderr, "bench_pipeline: %s\n", err);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            double wall = MPI_Wtime() - t0, max_wall = 0, busy = 0;
            if (tr && pp_trace_close(tr, err, sizeof err) != 0) rr_die("trace: %s", err);
            MPI_Allreduce(&wall, &max_wall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(&st.busy_s, &busy, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            if (rep >= 0) {
                times[c][rep] = max_wall;
                bubbles[c][rep] = 1.0 - busy / (P * max_wall);
            }
        }
    if (rank == 0) {
        double base = 0;
        printf("%-11s %-6s %-5s %12s %9s %8s\n", "mode", "hint", "cap", "step (ms)", "speedup", "bubble");
        for (int c = 0; c < N_CONFIGS; c++) {
            double sorted[16];
            memcpy(sorted, times[c], sizeof(double) * (size_t)repeats);
            qsort(sorted, (size_t)repeats, sizeof(double), cmp_double);
            double med = sorted[repeats / 2], bub = 0;
            for (int r = 0; r < repeats; r++) bub += bubbles[c][r] / repeats;
            if (c == 0) base = med;
            printf("%-11s %-6s %-5s %12.1f %8.2fx %7.1f%%\n", configs[c].mode, configs[c].hint,
                   configs[c].cap[0] ? configs[c].cap : "P-r", 1e3 * med, base / med, 100 * bub);
        }
    }
    for (int c = 0; c < N_CONFIGS; c++) pipeline_free(pls[c]);
    stage_free(&stage);
    for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
    free(mbs);
    MPI_Finalize();
    return 0;
}
