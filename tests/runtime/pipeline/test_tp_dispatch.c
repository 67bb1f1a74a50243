/* test_tp_dispatch.c — leader-decides under mpirun (docs/parallel.md "Tensor parallelism"): pp P x tp T ranks (world =
 * P T), each TP rank of a stage running the pipeline over its own pipeline group with the stage's TP
 * group in the PipelineConfig. The split layers are not what is tested here, the dispatch is: every TP
 * rank holds the whole (unsplit) stage, and a task hook stands in for a split layer's collectives: it
 * all-reduces the task's id over the TP group (max and min) before the task runs, so TP ranks that run
 * different sequences are caught at the first task where they differ, and then delays TP rank 1 by a
 * random 0 .. 4 ms, so the messages that rank sends downstream arrive at the next stage's TP rank 1
 * later than at its leader (the injected arrival delays).
 *
 * Checked, over several steps of `ready` with the bf hint and a cap of M (many ready-set choices that
 * depend on arrival order), `fixed 1f1b` and `adaptive 1f1b`: no TP rank ever ran another task than its
 * leader (0 mismatches), every peer received exactly its stage's task count of choices (in a
 * ready-family mode), the gradients of the TP ranks of a stage are bitwise equal (same sequence, same
 * kernels), and nothing deadlocked (the run ends under the CTest timeout; a stuck rank fails after the
 * pipeline's 60 s timeout).
 * adaptive: each TP index's pipeline group plans the step on its own estimates, and the stage runs its
 * leader's plan (the mode is broadcast over the TP group). The cases give the two groups estimates whose
 * plans differ: known uniform durations on one side (the plan keeps the hint's sequence, `fixed`: ready
 * and lookahead are predicted no faster) and unknown ones on the other (no plan: `lookahead`). Each TP
 * rank's step must report the leader's mode, the peers' own plan is checked to differ from it (so the
 * case exercises the broadcast), and under lookahead the peers run the leader's choices.
 * `independent` is the negative control: the same run with every TP rank dispatching on its own must
 * show mismatches (else the delays do not exercise the protocol and the test could not fail): it exits
 * 0 only when they diverged.
 * The verdict is reduced over every rank; rank 0 prints it and every rank exits with it.
 * Usage: mpirun -np P*T test_tp_dispatch T [independent] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/synth.h"
#include "engine/engine.h"
#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/model/partition.h"
#include "runtime/pipeline/pipeline.h"

typedef struct {
    CommGrid* g;
    long tasks, mismatches;
    uint64_t rng;
} HookCtx;

/* adaptive's estimates (seconds): uniform F = 1 ms, B = 2 ms on every rank, or unknown (0). */
static double est_known(void* ctx, int rank, PpTask t) {
    (void)ctx, (void)rank;
    return t.kind == PP_F ? 1e-3 : 2e-3;
}
static double est_unknown(void* ctx, int rank, PpTask t) {
    (void)ctx, (void)rank, (void)t;
    return 0.0;
}

static int tp_hook(void* ctx, PpTask t, char* err, size_t err_len) {
    HookCtx* h = ctx;
    int64_t id[2] = {((int64_t)t.kind * 64 + t.chunk) * 4096 + t.mb, 0};
    id[1] = -id[0];
    if (comm_allreduce(h->g->tp_group, id, 2, COMM_I64, COMM_MAX, err, err_len) != 0) return -1;
    /* max == min  <=>  every TP rank is about to run this same task */
    int64_t mine = ((int64_t)t.kind * 64 + t.chunk) * 4096 + t.mb;
    if (id[0] != mine || -id[1] != mine) h->mismatches++;
    h->tasks++;
    if (h->g->t == 1) {
        h->rng = h->rng * 6364136223846793005ull + 1442695040888963407ull;
        struct timespec ts = {0, (long)((h->rng >> 33) % 4000000)};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* leader_knows (adaptive only): 1 = the leaders' group has the known estimates and the peers' group none,
 * 0 = the reverse, -1 = not adaptive. *bad_mode counts steps where this rank's mode is not its leader's,
 * or where its own group's plan would not have differed from the leader's (the case tests nothing). */
static int run_case(CommGrid* g, PpHint hint, PpMode mode, const char* cap, int independent, int leader_knows, int M,
                    long* mism, int* bad_choices, int* grads_differ, int* bad_mode, char* err, size_t err_len) {
    int P = g->pp, p = g->p;
    ModelConfig cfg = {.patch = 2, .Dv = 16, .Lv = 1, .Hv = 2, .Dt = 32, .Lt = 2 * P, .Ht = 4, .F = 48, .V = 61,
                       .min_patches = 4, .max_patches = 16, .init_std = 0.02f, .seed = 99};
    SynthConfig sc = {.patch = cfg.patch, .V = cfg.V, .max_samples = 3, .min_text = 3, .max_text = 22,
                      .min_grid = 2, .max_grid = 4, .image_prob = 0.67, .supervised_prob = 0.6};
    enum { STEPS = 3 };
    Microbatch* mbs = callocCheck((size_t)M, sizeof *mbs);
    int max_T = 0, max_Np = 0;
    for (int k = 0; k < STEPS; k++)
        for (int m = 0; m < M; m++) {
            Microbatch mb;
            synth_microbatch(&mb, &sc, 50 + k, m);
            if (mb.T > max_T) max_T = mb.T;
            if (mb.Np > max_Np) max_Np = mb.Np;
            microbatch_free(&mb);
        }
    int layers[16], l0 = 0;
    partition_auto(cfg.Lt, P, (PartitionCost){0, 0, 1}, layers);
    for (int v = 0; v < p; v++) l0 += layers[v];
    Stage st;
    stage_init(&st, &cfg, l0, l0 + layers[p], &backend_cpu);
    Stage* sp = &st;
    PipelineConfig pc = {.P = P, .rank = p, .chunks = 1, .hint = hint, .mode = mode, .cap = {PP_CAP_DEFAULT, 0},
                         .transport = TRANSPORT_TAGGED, .timeout_s = 60, .max_tokens = max_T, .max_patches = max_Np,
                         .tp = g->tp_group, .tp_independent = independent};
    if (cap && pp_cap_parse(cap, &pc.cap, err, err_len) != 0) return -1;
    if (leader_knows >= 0) pc.estimate = (g->t == 0) == (leader_knows == 1) ? est_known : est_unknown;
    Pipeline* pl = pipeline_create(&pc, &sp, g->pipe, M, err, err_len);
    if (!pl) return -1;
    HookCtx h = {.g = g, .rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)g->rank};
    pipeline_set_task_hook(pl, tp_hook, &h);
    int rc = 0;
    for (int k = 0; k < STEPS && rc == 0; k++) {
        int sup = 0;
        for (int m = 0; m < M; m++) {
            synth_microbatch(&mbs[m], &sc, 50 + k, m);
            sup += mbs[m].n_supervised;
        }
        params_zero_grad(&st.params);
        PipelineStepStats ps;
        rc = pipeline_step(pl, mbs, M, 1.0f / (float)sup, NULL, k, NULL, &ps, err, err_len);
        for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
        if (rc != 0) break;
        /* a leader sends, a peer receives, one choice per task of this rank (ready family, leader-decides) */
        long want = pp_mode_is_ready(ps.mode) && !independent ? (long)h.tasks / (k + 1) : 0;
        if (ps.tp_choices != want) (*bad_choices)++;
        if (leader_knows >= 0) {
            /* the leader's plan: fixed from the known estimates, lookahead without any */
            PpMode lead = leader_knows ? PP_MODE_FIXED : PP_MODE_LOOKAHEAD;
            PpMode own = (g->t == 0) == (leader_knows == 1) ? PP_MODE_FIXED : PP_MODE_LOOKAHEAD;
            int64_t mm[2] = {(int64_t)ps.mode, -(int64_t)ps.mode};
            if (comm_allreduce(g->tp_group, mm, 2, COMM_I64, COMM_MAX, err, err_len) != 0) return -1;
            if (ps.mode != lead || mm[0] != -mm[1] || (g->t != 0 && own == lead)) (*bad_mode)++;
            /* the plan's predictions: this rank's own group's (NAN without estimates) */
            if ((own == PP_MODE_FIXED) != !isnan(ps.predicted[2])) (*bad_mode)++;
        }
        /* the TP ranks' gradients: bitwise equal when they ran the same sequence */
        double sum = 0;
        for (size_t i = 0; i < st.params.total; i++) sum += st.params.grad[i] * (1.0 + 1e-3 * (double)(i % 7));
        double mm[2] = {sum, -sum};
        if (comm_allreduce(g->tp_group, mm, 2, COMM_F64, COMM_MAX, err, err_len) != 0) return -1;
        if (mm[0] != -mm[1]) (*grads_differ)++;
        if (g->rank == 0 && k == STEPS - 1 && !independent)
            printf("  stage 0 leader: %ld choices sent per step; TP rank 0 coordination %.3g ms per step\n",
                   ps.tp_choices, ps.tp_coord_s * 1e3);
    }
    *mism = h.mismatches;
    pipeline_free(pl);
    stage_free(&st);
    free(mbs);
    return rc;
}

int main(int argc, char** argv) {
    char err[512];
    Comm* world = comm_mpi_world(err, sizeof err);
    if (!world) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int T = argc > 1 ? atoi(argv[1]) : 2, independent = argc > 2 && !strcmp(argv[2], "independent");
    if (T < 2 || world->size % T) {
        fprintf(stderr, "usage: mpirun -np P*T test_tp_dispatch T [independent] (world %d)\n", world->size);
        return 1;
    }
    CommGrid g;
    if (comm_grid_init(&g, world, world->size / T, T, 1, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    cpu_set_num_threads(1);
    const struct {
        PpHint hint;
        PpMode mode;
        const char* cap;
        int leader_knows;
    } cases[] = {{PP_HINT_BF, PP_MODE_READY, "6", -1},
                 {PP_HINT_BFW, PP_MODE_READY, "6", -1},
                 {PP_HINT_1F1B, PP_MODE_FIXED, NULL, -1},
                 {PP_HINT_1F1B, PP_MODE_ADAPTIVE, NULL, 1},
                 {PP_HINT_1F1B, PP_MODE_ADAPTIVE, NULL, 0}};
    int M = 6, fails = 0;
    long total_mism = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (independent && cases[c].mode != PP_MODE_READY) continue;
        long mism = 0;
        int bad_choices = 0, grads_differ = 0, bad_mode = 0;
        int rc = run_case(&g, cases[c].hint, cases[c].mode, cases[c].cap, independent, cases[c].leader_knows, M, &mism,
                          &bad_choices, &grads_differ, &bad_mode, err, sizeof err);
        if (rc != 0) fprintf(stderr, "rank %d: %s\n", g.rank, err);
        int64_t v[5] = {rc != 0, mism, bad_choices, grads_differ, bad_mode};
        char e2[256];
        if (comm_allreduce(world, v, 5, COMM_I64, COMM_SUM, e2, sizeof e2) != 0) {
            fprintf(stderr, "rank %d: %s\n", g.rank, e2);
            return 1;
        }
        total_mism += v[1];
        if (g.rank == 0)
            printf("pp %d x tp %d, %s %s%s%s: %lld failed rank(s), %lld task mismatch(es), %lld bad choice count(s), "
                   "%lld stage(s) with differing TP gradients%s\n",
                   g.pp, T, pp_mode_name(cases[c].mode), pp_hint_name(cases[c].hint),
                   cases[c].leader_knows < 0 ? "" : cases[c].leader_knows ? " (leader plans fixed, peers lookahead)"
                                                                            : " (leader plans lookahead, peers fixed)",
                   independent ? " (independent dispatch)" : "", (long long)v[0], (long long)v[1], (long long)v[2],
                   (long long)v[3], cases[c].leader_knows < 0 ? "" : v[4] ? ", MODE CHECK FAILED (a rank's mode not its leader's, or the plans did not differ)" : ", every TP rank ran the leader's mode");
        if (v[0] != 0) fails++;
        if (!independent && (v[1] != 0 || v[2] != 0 || v[3] != 0 || v[4] != 0)) fails++;
    }
    if (independent && total_mism == 0) {
        if (g.rank == 0) printf("negative control: independent dispatch never diverged; the delays exercise nothing\n");
        fails++;
    }
    if (g.rank == 0) {
        if (fails) printf("tp dispatch%s: FAIL\n", independent ? " negative control" : "");
        else if (independent) printf("tp dispatch negative control: ok, independent dispatch diverged (%ld mismatches)\n",
                                     total_mism);
        else printf("tp dispatch: ok\n");
    }
    comm_grid_free(&g);
    world->ops->free(world);
    comm_mpi_finalize();
    return fails ? 1 : 0;
}
