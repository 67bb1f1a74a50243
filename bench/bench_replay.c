/* bench_replay.c — the real pipeline runtime with its compute replaced by waiting (docs/scheduler.md "The simulator's semantics",
 * "Replay"): every task sleeps (nanosleep) for its duration from a duration file times --scale seconds,
 * while the runtime's own dispatcher, transport and messages (real MPI messages of the microbatches'
 * real activation sizes) run between real ranks. Sleeping ranks leave the cores free, so P = 8 .. 32
 * ranks share this machine's two cores. For each configuration it prints the measured makespan next
 * to the simulator's (same file, mode, hint, cap and estimate error) and their ratio.
 *
 * Usage: mpirun -np P rrfp-bench-replay --durations FILE [--scale S] [--repeats R] [--tolerance T]
 *            [--estimate-error E] [--dt D] MODE:HINT:CAP ...
 *   the file's stages must equal P; CAP is "-" (the default / fixed modes), "N" or "Nx";
 *   --scale: seconds per time unit of the file (default 0.01); --repeats: steps per configuration,
 *   the median is reported (default 1); --tolerance T: exit 1 when any |measured / simulated - 1| > T
 *   (default: no check); --estimate-error: lookahead's estimates, as `rrfp-mm sim --estimate-error`
 *   (seed 1); --dt: hidden width, so a message of a T-token microbatch is T x D floats (default 256).
 * The makespan of a step: the latest rank's end minus the earliest rank's start (clocks are the same
 * machine's). Prints "replay: ok" when every configuration finished (and, with --tolerance, agreed). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/synth.h"
#include "engine/engine.h"
#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/plan/plan.h"

typedef struct {
    const PpDurations* d;
    PpSimOptions opt;
    double scale;
} ReplayEstimate;

/* lookahead's cost model in replay: the simulator's (true duration x a seeded factor), in seconds. */
static double replay_estimate(void* ctx, int rank, PpTask t) {
    const ReplayEstimate* e = ctx;
    return pp_sim_estimate(e->d, 1, &e->opt, rank, t) * e->scale;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    char err[1024];
    Comm* world = comm_mpi_world(err, sizeof err);
    if (!world) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int rank = world->rank, P = world->size;
    const char* path = NULL;
    double scale = 0.01, tolerance = -1, est_error = 0;
    int repeats = 1, Dt = 256;
    const char* cfgs[64];
    int n_cfg = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--durations") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(a, "--scale") && i + 1 < argc) scale = atof(argv[++i]);
        else if (!strcmp(a, "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(a, "--tolerance") && i + 1 < argc) tolerance = atof(argv[++i]);
        else if (!strcmp(a, "--estimate-error") && i + 1 < argc) est_error = atof(argv[++i]);
        else if (!strcmp(a, "--dt") && i + 1 < argc) Dt = atoi(argv[++i]);
        else if (a[0] != '-' && n_cfg < 64) cfgs[n_cfg++] = a;
        else {
            if (rank == 0) fprintf(stderr, "bench_replay: unknown or incomplete argument '%s'\n", a);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (repeats < 1) repeats = 1;
    if (repeats > 16) repeats = 16;
    PpDurations d;
    if (!path || pp_durations_load(path, &d, err, sizeof err) != 0) {
        if (rank == 0) fprintf(stderr, "bench_replay: %s\n", path ? err : "--durations FILE is required");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (d.P != P || n_cfg == 0 || !(scale > 0)) {
        if (rank == 0)
            fprintf(stderr, "bench_replay: %s\n", d.P != P ? "the file's stages differ from the ranks mpirun started"
                                                           : n_cfg == 0 ? "no MODE:HINT:CAP given" : "--scale must be > 0");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int M = d.M;

    /* A model of one LM layer per stage: only its sizes matter (messages of T x Dt floats). */
    ModelConfig mc = {.patch = 4, .Dv = 16, .Lv = 1, .Hv = 1, .Dt = Dt, .Lt = P, .Ht = Dt / 64 > 0 ? Dt / 64 : 1,
                      .F = 2 * Dt, .V = 256, .min_patches = 4, .max_patches = 64, .init_std = 0.02f, .seed = 1};
    if (model_config_check(&mc, err, sizeof err) != 0) rr_die("bench_replay model: %s", err);
    SynthConfig sc = {.patch = 4, .V = mc.V, .max_samples = 4, .min_text = 32, .max_text = 192, .min_grid = 2,
                      .max_grid = 2, .image_prob = 0.0, .supervised_prob = 0.5};
    Microbatch* mbs = callocCheck((size_t)M, sizeof *mbs);
    int max_T = 1;
    for (int m = 0; m < M; m++) {
        synth_microbatch(&mbs[m], &sc, 42, m);
        if (mbs[m].T > max_T) max_T = mbs[m].T;
    }
    Stage stage;
    stage_init(&stage, &mc, rank, rank + 1, &backend_cpu);
    Stage* sp = &stage;
    ReplayEstimate re = {&d, {est_error, 1, NULL, 0, NULL, 0}, scale};
    if (rank == 0)
        printf("# bench_replay: P=%d M=%d file=%s scale=%g s/unit latency=%g units, Dt=%d, %d repeat(s), estimate error "
               "%g\n%-10s %-6s %-5s %12s %12s %8s %6s %9s\n", P, M, path, scale, d.latency, Dt, repeats, est_error, "mode",
               "hint", "cap", "measured s", "simulated s", "ratio", "waits", "busy/work");
    int bad = 0;
    for (int c = 0; c < n_cfg; c++) {
        char mode_s[32], hint_s[32], cap_s[32];
        if (sscanf(cfgs[c], "%31[^:]:%31[^:]:%31s", mode_s, hint_s, cap_s) != 3) rr_die("bad configuration '%s'", cfgs[c]);
        PipelineConfig pc = {.P = P, .rank = rank, .chunks = 1, .cap = {PP_CAP_DEFAULT, 0}, .transport = TRANSPORT_TAGGED,
                             .timeout_s = 600, .max_tokens = max_T, .max_patches = 1, .split = d.split,
                             .replay = {d.F, d.B, d.W}, .replay_M = M, .replay_scale = scale};
        if (pp_mode_parse(mode_s, &pc.mode) || pp_hint_parse(hint_s, &pc.hint)) rr_die("unknown mode or hint in '%s'", cfgs[c]);
        if (strcmp(cap_s, "-") && pp_cap_parse(cap_s, &pc.cap, err, sizeof err)) rr_die("%s", err);
        if (pp_mode_waits(pc.mode)) pc.estimate = replay_estimate, pc.estimate_ctx = &re;
        pc.plan_latency_s = d.latency * scale;
        if (pipeline_hint_splits(pc.hint) && !d.split) {
            if (rank == 0) printf("%-10s %-6s %-5s skipped: the hint needs a split backward (a file with W)\n", mode_s,
                                  hint_s, cap_s);
            continue;
        }
        Pipeline* pl = pipeline_create(&pc, &sp, world, M, err, sizeof err);
        if (!pl) rr_die("%s", err);
        double spans[16], busy = 0;
        long waits = 0;
        for (int rep = 0; rep < repeats; rep++) {
            PipelineStepStats st;
            MPI_Barrier(MPI_COMM_WORLD);
            if (pipeline_step(pl, mbs, M, 1.0f, NULL, rep, NULL, &st, err, sizeof err) != 0) {
                fprintf(stderr, "bench_replay: %s\n", err);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            double se[2] = {-st.t_start, st.t_start + st.wall_s}, all[2];
            MPI_Allreduce(se, all, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            spans[rep] = all[1] + all[0];
            long w = 0;
            double b = 0;
            MPI_Allreduce(&st.waits, &w, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            MPI_Allreduce(&st.busy_s, &b, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            waits += w;
            busy += b / repeats;
        }
        pipeline_free(pl);
        qsort(spans, (size_t)repeats, sizeof(double), cmp_double);
        if (rank == 0) {
            PpSimResult r;
            PpSimOptions so = {est_error, 1, NULL, 0, NULL, 1};  // adaptive keeps the order under replay, as the runtime
            if (pp_sim_run_opts(&d, pc.hint, pc.mode, pc.cap, 1, &so, &r, err, sizeof err) != 0 || r.deadlock)
                rr_die("simulator: %s %s", err, r.msg);
            double sim = r.makespan * scale, ratio = spans[repeats / 2] / sim;
            double work = 0;  /* the file's total task time: busy / work - 1 is the sleeps' overshoot */
            for (int i = 0; i < P * M; i++) work += d.F[i] + d.B[i] + (d.W ? d.W[i] : 0);
            work *= scale;
            pp_sim_result_free(&r);
            int off = tolerance >= 0 && fabs(ratio - 1) > tolerance;
            bad += off;
            printf("%-10s %-6s %-5s %12.4f %12.4f %8.4f %6ld %9.3f%s\n", mode_s, hint_s, cap_s, spans[repeats / 2], sim,
                   ratio, waits / repeats, busy / work, off ? "  OUT OF TOLERANCE" : "");
            fflush(stdout);
        }
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0 && !bad) printf("replay: ok\n");
    stage_free(&stage);
    for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
    free(mbs);
    pp_durations_free(&d);
    MPI_Finalize();
    return bad ? 1 : 0;
}
