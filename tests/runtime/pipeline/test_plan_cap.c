/* test_plan_cap.c — adaptive's in-flight cap in the MPI runtime (docs/scheduler.md "The in-flight cap"), under mpirun: pp 4
 * on 4 ranks (no argument), or pp 4 x tp 2 on 8 (argument 2: each stage's two TP ranks run the pipeline over their
 * pipeline group with the stage's TP group in the PipelineConfig, as test_tp_dispatch.c). The pipeline's compute is
 * replayed (every task sleeps its duration from a step built here, the messages are the real ones) and the plan's
 * estimates are those durations (an estimate callback), so the plan is known: on this step (stage costs 1, 1, 2, 1 per unit
 * of a microbatch's size, sizes 0.6 .. 1.4, B twice F, a 2-unit message latency in the plan)
 * pp_plan_order_cap, the order kept, takes 1.5x, tighter than the configured 2x of 1f1b's peak. Checked on every rank:
 *   - the plan's cap is tighter than 2x (else the step checks nothing: a failure);
 *   - the adaptive step ran under it: PipelineStepStats.cap is that cap and the mode is ready or lookahead;
 *   - its in-flight peak stayed within that cap's count on every rank;
 *   - the same step in ready mode at the configured 2x peaks above the tighter cap's count on some rank, so a runtime that
 *     ran the configured cap instead of its plan's fails the peak check (rank 0's forwards take about a unit each and the
 *     first backward returns to it after about 12: it fills whatever cap it runs under, 8 at 2x, 6 at 1.5x).
 * With TP the stage's plan is its TP leader's (pipeline.c broadcasts its mode, order and cap): the TP followers' estimates
 * here are another step's (stage costs 1, 1, 1, 1), on which their own plan keeps the configured 2x (checked: else a follower
 * planning its own cap would pass), so a follower that planned its own cap, or kept the configured one, reports 2x and
 * fails the first check; the leader's cap must also be the same bits on every TP rank of the stage (an all-reduce).
 * Prints "pipeline plan cap: ok". Sleeps about 1 s in all. */
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

#define NM 16
#define SCALE 0.004 /* seconds per unit of the step's durations */

typedef struct {
    const PpDurations* d;
    PpSimOptions opt;
} CapEstimate;

static double cap_estimate(void* ctx, int rank, PpTask t) {
    const CapEstimate* e = ctx;
    return pp_sim_estimate(e->d, 1, &e->opt, rank, t) * SCALE;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    char err[1024];
    Comm* world = comm_mpi_world(err, sizeof err);
    if (!world) rr_die("%s", err);
    int T = argc > 1 ? atoi(argv[1]) : 1;
    if ((T != 1 && T != 2) || world->size != 4 * T)
        rr_die("test_plan_cap: run it as pp 4 (mpirun -np 4 test_plan_cap) or pp 4 x tp 2 (mpirun -np 8 test_plan_cap 2), "
               "not %d ranks and tp %d", world->size, T);
    enum { NP = 4 };
    CommGrid g;
    if (comm_grid_init(&g, world, NP, T, 1, err, sizeof err) != 0) rr_die("test_plan_cap: %s", err);
    int rank = g.p, leader = g.t == 0;

    /* the step, in seconds (the plan's estimates and the replayed durations alike); the TP followers' estimates are
     * another step's (fcost) */
    static const double stage_cost[NP] = {1, 1, 2, 1}, fcost[NP] = {1, 1, 1, 1};
    PpDurations d = {.P = NP, .M = NM, .split = 0, .latency = 2 * SCALE}, fd = d;
    d.F = mallocCheck(sizeof(double) * NP * NM);
    d.B = mallocCheck(sizeof(double) * NP * NM);
    fd.F = mallocCheck(sizeof(double) * NP * NM);
    fd.B = mallocCheck(sizeof(double) * NP * NM);
    d.W = fd.W = NULL;
    for (int r = 0; r < NP; r++)
        for (int m = 0; m < NM; m++) {
            double size = 0.6 + 0.8 * (double)((m * 7) % NM) / (NM - 1); /* microbatch sizes 0.6 .. 1.4 */
            d.F[r * NM + m] = stage_cost[r] * size * SCALE;
            d.B[r * NM + m] = 2 * stage_cost[r] * size * SCALE;
            fd.F[r * NM + m] = fcost[r] * size * SCALE;
            fd.B[r * NM + m] = 2 * fcost[r] * size * SCALE;
        }
    /* the plan the runtime must make on them (plan_step: pp_plan_order_cap, the order kept, unknown estimate error) */
    const PpHint hint = PP_HINT_1F1B;
    const PpCap cap = {PP_CAP_MULTIPLE, 2.0};
    PpShape sh = {NP, NM, 1, 0, 0};
    double pred[3];
    PpMode plan_mode;
    int ident[NM];
    PpCap want;
    pp_plan_order_cap(&d, -1, hint, cap, 1, 1, 1, pred, &plan_mode, ident, &want);
    int fails = 0;
    if (!(want.kind == PP_CAP_MULTIPLE && want.value < cap.value) || !pp_mode_is_ready(plan_mode)) {
        if (g.rank == 0)
            fprintf(stderr, "test_plan_cap: the plan runs %s at cap %gx on this step, not ready at a cap tighter than 2x: "
                    "nothing to check\n", pp_mode_name(plan_mode), want.value);
        fails++;
    }
    if (T > 1) { /* a follower's own plan must differ from its leader's, or the follower checks below cannot fail */
        PpMode fm;
        PpCap fwant;
        double fpred[3];
        pp_plan_order_cap(&fd, -1, hint, cap, 1, 1, 1, fpred, &fm, ident, &fwant);
        if (fwant.kind == want.kind && fwant.value == want.value) {
            if (g.rank == 0)
                fprintf(stderr, "test_plan_cap: the TP followers' own plan takes the leader's cap %gx: the check cannot "
                        "tell a follower that plans its own cap\n", want.value);
            fails++;
        }
    }
    int tight = pp_cap_for(want, hint, &sh, rank), wide = pp_cap_for(cap, hint, &sh, rank);

    /* a model of one LM layer per stage: only the message sizes matter (compute is replayed) */
    ModelConfig mc = {.patch = 4, .Dv = 16, .Lv = 1, .Hv = 1, .Dt = 64, .Lt = NP, .Ht = 1, .F = 128, .V = 256,
                      .min_patches = 4, .max_patches = 64, .init_std = 0.02f, .seed = 1};
    if (model_config_check(&mc, err, sizeof err) != 0) rr_die("test_plan_cap model: %s", err);
    SynthConfig sc = {.patch = 4, .V = mc.V, .max_samples = 2, .min_text = 16, .max_text = 64, .min_grid = 2,
                      .max_grid = 2, .image_prob = 0.0, .supervised_prob = 0.5};
    Microbatch mbs[NM];
    int max_T = 1;
    for (int m = 0; m < NM; m++) {
        synth_microbatch(&mbs[m], &sc, 7, m);
        if (mbs[m].T > max_T) max_T = mbs[m].T;
    }
    Stage stage;
    stage_init(&stage, &mc, rank, rank + 1, &backend_cpu);
    Stage* sp = &stage;
    /* the replayed durations are in units of SCALE seconds */
    double* rF = mallocCheck(sizeof(double) * NP * NM);
    double* rB = mallocCheck(sizeof(double) * NP * NM);
    for (int i = 0; i < NP * NM; i++) rF[i] = d.F[i] / SCALE, rB[i] = d.B[i] / SCALE;
    PpDurations unit = d;
    unit.F = rF, unit.B = rB, unit.latency = 2;
    CapEstimate ce = {&unit, {0, 1, NULL, 0, NULL, 0}};
    double* fF = mallocCheck(sizeof(double) * NP * NM);
    double* fB = mallocCheck(sizeof(double) * NP * NM);
    for (int i = 0; i < NP * NM; i++) fF[i] = fd.F[i] / SCALE, fB[i] = fd.B[i] / SCALE;
    PpDurations funit = unit;
    funit.F = fF, funit.B = fB;
    CapEstimate fce = {&funit, {0, 1, NULL, 0, NULL, 0}};

    int peak[2] = {0, 0}; /* adaptive, ready at 2x */
    for (int run = 0; run < 2; run++) {
        PipelineConfig pc = {.P = NP, .rank = rank, .chunks = 1, .hint = hint, .cap = cap,
                             .mode = run == 0 ? PP_MODE_ADAPTIVE : PP_MODE_READY, .transport = TRANSPORT_TAGGED,
                             .timeout_s = 60, .max_tokens = max_T, .max_patches = 1, .replay = {rF, rB, NULL},
                             .replay_M = NM, .replay_scale = SCALE, .plan_latency_s = d.latency, .tp = g.tp_group};
        if (run == 0) pc.estimate = cap_estimate, pc.estimate_ctx = leader ? &ce : &fce;
        Pipeline* pl = pipeline_create(&pc, &sp, g.pipe, NM, err, sizeof err);
        if (!pl) rr_die("pipeline_create: %s", err);
        PipelineStepStats st;
        MPI_Barrier(MPI_COMM_WORLD);
        if (pipeline_step(pl, mbs, NM, 1.0f, NULL, 0, NULL, &st, err, sizeof err) != 0) rr_die("pipeline_step: %s", err);
        pipeline_free(pl);
        peak[run] = st.peak_inflight;
        if (run == 0) {
            if (st.cap.kind != want.kind || st.cap.value != want.value || st.mode != plan_mode) {
                fprintf(stderr, "rank %d (TP rank %d): adaptive ran %s at cap %gx (kind %d), its leader's plan is %s at "
                        "%gx\n", rank, g.t, pp_mode_name(st.mode), st.cap.value, st.cap.kind, pp_mode_name(plan_mode),
                        want.value);
                fails++;
            }
            /* every TP rank of the stage the same cap, to the bit */
            int64_t mm[4] = {st.cap.kind, 0, -(int64_t)st.cap.kind, 0};
            memcpy(&mm[1], &st.cap.value, sizeof(double));
            mm[3] = -mm[1];
            if (comm_allreduce(g.tp_group, mm, 4, COMM_I64, COMM_MAX, err, sizeof err) != 0) rr_die("%s", err);
            if (mm[0] != -mm[2] || mm[1] != -mm[3]) {
                fprintf(stderr, "rank %d (TP rank %d): the stage's TP ranks ran different caps\n", rank, g.t);
                fails++;
            }
            if (st.peak_inflight > tight) {
                fprintf(stderr, "rank %d: adaptive at cap %gx (%d in flight here) had %d microbatches in flight\n", rank,
                        want.value, tight, st.peak_inflight);
                fails++;
            }
        } else if (st.peak_inflight > wide) {
            fprintf(stderr, "rank %d: ready at cap 2x (%d) had %d microbatches in flight\n", rank, wide, st.peak_inflight);
            fails++;
        }
    }
    /* ready at the configured cap must go above the tighter cap somewhere, or the peak check above could not fail */
    int above = peak[1] > tight, any_above = 0, all_fails = 0;
    MPI_Allreduce(&above, &any_above, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any_above && g.rank == 0) {
        fprintf(stderr, "test_plan_cap: ready at 2x stayed within the %gx cap on every rank: the check cannot tell them "
                "apart\n", want.value);
        fails++;
    }
    printf("rank %d (TP rank %d): plan %s at cap %gx (predicted ready %.4f s), in flight: adaptive %d (cap %d), ready 2x "
           "%d (cap %d)\n", rank, g.t, pp_mode_name(plan_mode), want.value, pred[0], peak[0], tight, peak[1], wide);
    fflush(stdout);
    MPI_Allreduce(&fails, &all_fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g.rank == 0 && all_fails == 0) printf("pipeline plan cap: ok\n");
    stage_free(&stage);
    for (int m = 0; m < NM; m++) microbatch_free(&mbs[m]);
    free(rF);
    free(rB);
    free(fF);
    free(fB);
    pp_durations_free(&d);
    pp_durations_free(&fd);
    comm_grid_free(&g);
    MPI_Finalize();
    return all_fails ? 1 : 0;
}
