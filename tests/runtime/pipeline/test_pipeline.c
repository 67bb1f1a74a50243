/* test_pipeline.c — gradient equivalence of the pipeline runtime under mpirun.
 *
 * Every rank builds the same synthetic step (microbatches of text and images of several sizes),
 * computes the single-process reference (one Stage holding the whole model, fused backward, in
 * microbatch order), and then runs the step through the pipeline for every hint x mode x transport
 * that the shape allows, with P = the MPI world size. Each rank compares the gradients of its own
 * chunks, tensor by tensor, with the reference's same-named tensors, and the loss (summed over
 * ranks) with the reference loss.
 *
 * Tolerance: the forward and the input gradients run the same kernels on the same inputs as the
 * reference, so they are bitwise equal; weight gradients accumulate over microbatches, and the
 * runtime may run the W (or fused B) tasks of different microbatches in another order than the
 * reference, which reorders an fp32 sum of M terms. The bound is therefore M * 2^-23 relative to the
 * largest |gradient| of the tensor (plus 1e-12 absolute for all-zero tensors), i.e. fp32 round-off of
 * reordering M addends; observed differences are printed.
 *
 * With `cuda` the pipeline's stages run on the CUDA backend (the reference stays on the CPU): messages
 * then travel through host staging buffers. Built against the emulated CUDA runtime (tests/support/cuda_emu)
 * this runs here; against the real one it needs a device (exit 77 = skipped otherwise). CUDA kernels
 * are not the CPU's, so gradients are compared within 1e-5 of each tensor's largest gradient (the
 * model_gpu test's bound) instead of the reordering bound, and the training phase (several optimiser
 * steps, the step end on the device through BackendOps.sum_squares / scale / adamw_update) runs one
 * schedule with the losses within 1e-5.
 *
 * `inflight`: steps whose data change from step to step, run with many microbatches in flight at once
 * (inflight_runs): consumers held until the step's messages have landed in their receive buffers, or
 * slowed producers; each step's loss and gradients against one process.
 *
 * Usage: test_pipeline [chunks|v|inflight] [cuda]   (chunks = 2 exercises interleaved-1f1b, M a multiple of P;
 * v: two chunks per rank in a V, the zbv and dualpipev hints, M = 2P + 1) */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "runtime/model/model.h"
#include "runtime/model/partition.h"
#include "runtime/plan/plan.h"
#include "runtime/comm/comm.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/trace/trace.h"
#include "data/synth.h"

/* ---- training equivalence: several optimiser steps through the pipeline vs one process ------------ */

#define TRAIN_STEPS 3
#define CLIP_NORM 0.5 /* small enough that clipping engages on some steps of this tiny model */

/* The step end on each stage's own backend, as the trainer does (runtime/train/trainer.c). */
static Comm* test_world;
static double stages_sum_squares(Stage** st, int n) {
    double s = 0;
    for (int c = 0; c < n; c++) s += st[c]->be->ops->sum_squares(st[c]->be, st[c]->params.grad, st[c]->params.total);
    return s;
}

/* Global-norm clipping + AdamW over the stages of this rank, as the trainer does. */
static void optimizer_step(Stage** st, int n, double global_sq, int t, float lr) {
    double norm = sqrt(global_sq);
    float clip = norm > CLIP_NORM ? (float)(CLIP_NORM / (norm + 1e-6)) : 1.0f;
    AdamWConfig ac = {lr, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int c = 0; c < n; c++) {
        const Backend* be = st[c]->be;
        ParamTable* pt = &st[c]->params;
        if (clip < 1.0f) be->ops->scale(be, pt->grad, clip, pt->total);
        for (int i = 0; i < pt->n; i++) {
            const ParamSpec* sp = &pt->specs[i];
            be->ops->adamw_update(be, pt->data + sp->offset, pt->grad + sp->offset, pt->m + sp->offset, pt->v + sp->offset,
                             sp->numel, &ac, t, sp->decay);
        }
    }
}

static void step_batch(Microbatch* mbs, int M, int step, const SynthConfig* sc, int* max_T, int* max_Np, int* sup) {
    *sup = 0;
    for (int m = 0; m < M; m++) {
        synth_microbatch(&mbs[m], sc, 1000 + step, m);
        *sup += mbs[m].n_supervised;
        if (mbs[m].T > *max_T) *max_T = mbs[m].T;
        if (mbs[m].Np > *max_Np) *max_Np = mbs[m].Np;
    }
}

/* The two largest microbatches (tokens + patches) moved to the ends of the step, the rest in their order
 * between (the structs swapped): a step whose ends order (the small ones at both ends) adaptive's plan
 * predicts clearly faster, so that it reorders it (pp_plan_order). */
static void big_at_ends(Microbatch* mbs, int M) {
    for (int end = 0; end < 2 && M > 1; end++) {
        int lo = end ? 1 : 0, hi = end ? M - 1 : M; /* the first pick is not moved again */
        int best = lo;
        for (int m = lo; m < hi; m++)
            if (mbs[m].T + mbs[m].Np > mbs[best].T + mbs[best].Np) best = m;
        int to = end ? M - 1 : 0;
        Microbatch t = mbs[to];
        mbs[to] = mbs[best];
        mbs[best] = t;
    }
}

static int n_cap_tight; /* adaptive steps this rank ran under a cap tighter than the configured one */

/* Returns the number of failures (same on every rank). */
/* pbe: the pipeline stages' backend (the reference is on the CPU). */
/* ends: every step's microbatches arranged by big_at_ends (reference and pipeline alike), and adaptive must
 * reorder every step (the order does not wait for measurements: pipeline_plan_order). */
static int train_equivalence(const ModelConfig* cfg, const SynthConfig* sc, int M, int P, int rank, int chunks,
                             PpHint hint, PpMode mode, const char* cap_text, const Backend* pbe, int ends) {
    const Backend* be = &backend_cpu;
    int on_cuda = pbe != &backend_cpu;
    char err[512];
    Microbatch* mbs = callocCheck((size_t)M, sizeof *mbs);
    int max_T = 0, max_Np = 0, sup = 0;
    for (int k = 0; k < TRAIN_STEPS; k++) { /* sizes of every step, for the buffers */
        step_batch(mbs, M, k, sc, &max_T, &max_Np, &sup);
        for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
    }
    /* reference: one process */
    Stage ref;
    stage_init(&ref, cfg, 0, cfg->Lt, be);
    params_alloc_optimizer(&ref.params);
    Stage* refp = &ref;
    StageActs ra;
    stage_acts_init(&ra, &ref, max_T, max_Np, 0);
    PipelineConfig pc = {.P = P, .rank = rank, .chunks = chunks, .hint = hint, .mode = mode,
                         .cap = {PP_CAP_DEFAULT, 0}, .transport = TRANSPORT_TAGGED, .timeout_s = 60,
                         .max_tokens = max_T, .max_patches = max_Np};
    if (cap_text && pp_cap_parse(cap_text, &pc.cap, err, sizeof err) != 0) rr_die("%s", err);
    /* adaptive's order is a function of the step's microbatches and the configuration (pipeline_plan_order):
     * the reference runs every step in it, and the pipeline must run that order on every step, the first
     * (nothing measured) and the later ones (measured timings) alike */
    double ref_loss[TRAIN_STEPS];
    int plan_perm[TRAIN_STEPS][64], plan_re[TRAIN_STEPS];
    RR_ASSERT(M <= 64);
    for (int k = 0; k < TRAIN_STEPS; k++) {
        step_batch(mbs, M, k, sc, &max_T, &max_Np, &sup);
        if (ends) big_at_ends(mbs, M);
        plan_re[k] = 0;
        for (int m = 0; m < M; m++) plan_perm[k][m] = m;
        if (mode == PP_MODE_ADAPTIVE) plan_re[k] = pipeline_plan_order(&pc, mbs, M, plan_perm[k]);
        params_zero_grad(&ref.params);
        double ls_sum = 0;
        for (int s = 0; s < M; s++) {
            int m = plan_perm[k][s];
            float ls = 0;
            stage_forward(&ref, &ra, &mbs[m], NULL, NULL, &ls);
            stage_backward(&ref, &ra, NULL, 1.0f / (float)sup, NULL);
            ls_sum += ls;
        }
        ref_loss[k] = ls_sum / sup;
        optimizer_step(&refp, 1, stages_sum_squares(&refp, 1), k + 1, 1e-2f);
        for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
    }
    /* pipeline */
    int S = P * chunks, layers[64], l0s[64];
    partition_auto(cfg->Lt, S, (PartitionCost){0, 0, 1}, layers);
    for (int v = 0, l = 0; v < S; v++) l0s[v] = l, l += layers[v];
    Stage* stages = callocCheck((size_t)chunks, sizeof *stages);
    Stage** sp = callocCheck((size_t)chunks, sizeof *sp);
    PpShape layout = {P, M, chunks, 0, pp_hint_vshape(hint)};
    for (int c = 0; c < chunks; c++) {
        int v = pp_vstage(&layout, rank, c);
        stage_init(&stages[c], cfg, l0s[v], l0s[v] + layers[v], pbe);
        params_alloc_optimizer(&stages[c].params);
        sp[c] = &stages[c];
    }
    Pipeline* pl = pipeline_create(&pc, sp, test_world, M, err, sizeof err);
    if (!pl) rr_die("pipeline_create: %s", err);
    int bad = 0, reordered = 0;
    double worst_loss = 0, worst_param = 0, sum_param = 0, n_param = 0;
    for (int k = 0; k < TRAIN_STEPS; k++) {
        step_batch(mbs, M, k, sc, &max_T, &max_Np, &sup);
        if (ends) big_at_ends(mbs, M);
        for (int c = 0; c < chunks; c++) params_zero_grad(&stages[c].params);
        PipelineStepStats st;
        if (pipeline_step(pl, mbs, M, 1.0f / (float)sup, NULL, k, NULL, &st, err, sizeof err) != 0)
            rr_die("pipeline_step: %s", err);
        reordered += st.reordered != 0;
        if (mode == PP_MODE_ADAPTIVE) { /* the in-flight cap: one of the plan's candidates, and the step kept to it */
            PpShape sh = {P, M, chunks, pipeline_hint_splits(hint), pp_hint_vshape(hint)};
            PpCap cands[PP_PLAN_CAPS_MAX];
            int nc = pp_plan_caps(pc.cap, hint, &sh, cands), known = 0;
            for (int i = 0; i < nc; i++) known |= cands[i].kind == st.cap.kind && cands[i].value == st.cap.value;
            int lim = pp_cap_for(st.cap, hint, &sh, rank);
            if (!known || (pp_mode_is_ready(st.mode) && st.peak_inflight > lim)) {
                fprintf(stderr, "rank %d: %s adaptive step %d: cap %g (kind %d) not a candidate, or %d in flight > %d\n",
                        rank, pp_hint_name(hint), k, st.cap.value, st.cap.kind, st.peak_inflight, lim);
                bad++;
            }
            n_cap_tight += st.cap.kind != pc.cap.kind || st.cap.value != pc.cap.value;
        }
        const int* ord = pipeline_step_order(pl);
        int same = (st.reordered != 0) == (plan_re[k] != 0) && (ord != NULL) == (plan_re[k] != 0);
        for (int s = 0; same && ord && s < M; s++) same = ord[s] == plan_perm[k][s];
        if (!same) {
            fprintf(stderr, "rank %d: %s %s step %d: the order run (reordered %d) is not pipeline_plan_order's (%d)\n",
                    rank, pp_hint_name(hint), pp_mode_name(mode), k, st.reordered, plan_re[k]);
            bad++;
        }
        if (ends && !st.reordered) {
            fprintf(stderr, "rank %d: %s %s step %d (planned: predicted ready %g fixed %g) was not reordered\n", rank,
                    pp_hint_name(hint), pp_mode_name(mode), k, st.predicted[0], st.predicted[2]);
            bad++;
        }
        double sq = stages_sum_squares(sp, chunks), gsq = 0, loss = 0, ls = st.loss_sum;
        MPI_Allreduce(&sq, &gsq, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&ls, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        loss /= sup;
        optimizer_step(sp, chunks, gsq, k + 1, 1e-2f);
        double d = fabs(loss - ref_loss[k]) / fabs(ref_loss[k]);
        worst_loss = fmax(worst_loss, d);
        /* Losses: the forward is bitwise the reference's while the parameters agree, and after an
         * update they differ by at most the round-off bound below, so 1e-6 relative. On CUDA the
         * kernels are not the CPU's: the one-step bound above, 1e-5. */
        if (d > (on_cuda ? 1e-5 : 1e-6)) bad++;
        for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
    }
    /* Parameters after TRAIN_STEPS updates. Gradients agree to fp32 reordering round-off; the global
     * norm is a sum of per-rank partial sums (another double summation order: ~1e-16 relative); AdamW
     * normalises the update, so a relative gradient error e moves a parameter by about lr * e per
     * step. Bound: 1e-6 absolute = lr (1e-2) x 1e-4, far above fp32 reorder effects (~1e-7 relative)
     * and far below one update (~1e-2).
     * On CUDA the gradients agree only within 1e-5 of each tensor's largest, so an element whose own
     * gradient is near that level (|g| ~ 1e-7 .. 1e-5 of the tensor's largest) has a large relative
     * error, and AdamW, which normalises every element's update to about lr, turns it into a move of
     * up to ~lr per step: the largest difference is reported, not bounded (seen: 2.5e-5 = lr x 2.5e-3).
     * An element with gradient g and error delta moves about lr x min(1, delta / |g|) off per step;
     * with delta = 1e-5 of the tensor's largest gradient G and gradients spread evenly over [0, G]
     * (the worst plausible case), the mean over elements is lr x 1e-5 x (1 + ln 1e5) ~ lr x 1.3e-4.
     * So the MEAN |difference| must stay below TRAIN_STEPS x lr x 2e-4 = 6e-6 (seen: 8e-8). A device
     * AdamW without weight decay gives a mean of 4.7e-5 here (tried by hand), and its losses would
     * still pass. */
    for (int c = 0; c < chunks; c++) {
        ParamTable* pt = &stages[c].params;
        float* host = mallocCheck(pt->total * sizeof(float)); /* the stage's parameters may be on the device */
        pbe->dev->copy_d2h(pbe, host, pt->data, pt->total * sizeof(float));
        for (int i = 0; i < pt->n; i++) {
            int j = params_find(&ref.params, pt->specs[i].name);
            const float* a = host + pt->specs[i].offset;
            const float* b = params_data(&ref.params, j);
            for (size_t e = 0; e < pt->specs[i].numel; e++) {
                double diff = fabs((double)a[e] - b[e]);
                worst_param = fmax(worst_param, diff);
                sum_param += diff;
            }
            n_param += (double)pt->specs[i].numel;
        }
        free(host);
    }
    double sums[2] = {sum_param, n_param}, all_sums[2];
    MPI_Allreduce(sums, all_sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double mean_param = all_sums[0] / all_sums[1];
    if (on_cuda ? mean_param > TRAIN_STEPS * 1e-2 * 2e-4 : worst_param > 1e-6) bad++;
    int all_bad = 0;
    double wl = 0, wp = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&worst_loss, &wl, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&worst_param, &wp, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("train %d steps %-16s %-10s cap %-4s%s: losses", TRAIN_STEPS, pp_hint_name(hint), pp_mode_name(mode),
               cap_text ? cap_text : "P-r", ends ? " big microbatches at the ends" : "");
    if (rank == 0 && ends) printf(" (%d steps reordered)", reordered);
    if (rank == 0) {
        for (int k = 0; k < TRAIN_STEPS; k++) printf(" %.6f", ref_loss[k]);
        printf(" | max loss rel diff %.2g, max param diff %.2g (mean %.2g) %s\n", wl, wp, mean_param,
               all_bad ? "FAIL" : "ok");
    }
    pipeline_free(pl);
    for (int c = 0; c < chunks; c++) stage_free(&stages[c]);
    free(stages);
    free(sp);
    stage_acts_free(&ra, &ref);
    stage_free(&ref);
    free(mbs);
    return all_bad ? 1 : 0;
}

/* ---- several microbatches in flight at once: every receive buffer holds its own message ------------ */

/* The task hook of the in-flight runs (pipeline_set_task_hook). hold: a consumer stops before its first
 * task of a kind until its producer has sent all but its last message of that kind (the producer signals
 * from its hook before its last such task, on a tag of its own), driving MPI's progress meanwhile, so the
 * step's activations (or gradients) land in their posted receive buffers together, all in flight before
 * the first is consumed. delay_s: the producer sleeps before each forward, so the consumer waits on every
 * input and runs it the moment it lands. */
typedef struct {
    int rank, P, M, step, hold;
    double delay_s;
    int nF, nB, timeouts;
} InflightHook;

enum { INFLIGHT_TAG = 30000 };

static void inflight_signal(const InflightHook* h, int peer, int dir) {
    int one = 1;
    MPI_Send(&one, 1, MPI_INT, peer, INFLIGHT_TAG + 2 * h->step + dir, MPI_COMM_WORLD);
}

static void inflight_hold(InflightHook* h, int peer, int dir) {
    int got = 0, flag = 0;
    MPI_Request rq;
    MPI_Irecv(&got, 1, MPI_INT, peer, INFLIGHT_TAG + 2 * h->step + dir, MPI_COMM_WORLD, &rq);
    double t0 = rr_now(), done_at = 0;
    for (;;) {
        if (!done_at) {
            MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);
            if (flag) done_at = rr_now();
        } else {
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE); /* progress only */
        }
        /* after the signal, 20 ms more of progress: the producer's last sends land too */
        if (done_at && rr_now() - done_at > 0.02) break;
        if (!done_at && rr_now() - t0 > 10) { /* never under gpipe: every forward precedes every backward */
            h->timeouts++;
            MPI_Cancel(&rq);
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
            break;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

static int inflight_task_hook(void* ctx, PpTask t, char* err, size_t err_len) {
    (void)err, (void)err_len;
    InflightHook* h = ctx;
    if (t.kind == PP_F) {
        if (h->hold && h->nF == 0 && h->rank > 0) inflight_hold(h, h->rank - 1, 0);
        if (++h->nF == h->M && h->hold && h->rank < h->P - 1) inflight_signal(h, h->rank + 1, 0);
        if (h->delay_s > 0 && h->rank < h->P - 1) {
            struct timespec ts = {0, (long)(h->delay_s * 1e9)};
            nanosleep(&ts, NULL);
        }
    } else if (t.kind == PP_B) {
        if (h->hold && h->nB == 0 && h->rank < h->P - 1) inflight_hold(h, h->rank + 1, 1);
        if (++h->nB == h->M && h->hold && h->rank > 0) inflight_signal(h, h->rank - 1, 1);
    }
    return 0;
}

/* Steps of M = 3P microbatches whose data differ from step to step, run with many microbatches in flight:
 * gpipe (fixed and ready, both transports) with each consumer holding until all but the last of the
 * step's messages have landed in their receive buffers, and 1f1b (ready) with the producers slowed so that
 * each input is consumed as soon as it arrives. Every step's loss and gradients against the one-process
 * step of the same microbatches (the bound of the equivalence runs above). A receive buffer shared by
 * microbatches, or an input read before its message landed (the previous step's, or another microbatch's),
 * changes them. Returns the number of failed runs (the same on every rank). */
static int inflight_runs(const ModelConfig* cfg, const SynthConfig* sc, int P, int rank) {
    enum { STEPS = 2 };
    int M = 3 * P;
    char err[512];
    Microbatch* mbs = callocCheck((size_t)M, sizeof *mbs);
    int max_T = 0, max_Np = 0, sup[STEPS];
    for (int k = 0; k < STEPS; k++) {
        step_batch(mbs, M, 50 + k, sc, &max_T, &max_Np, &sup[k]);
        for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
    }
    /* the reference: each step's gradients and loss in one process */
    Stage ref;
    stage_init(&ref, cfg, 0, cfg->Lt, &backend_cpu);
    StageActs ra;
    stage_acts_init(&ra, &ref, max_T, max_Np, 0);
    float* ref_grad[STEPS];
    double ref_loss[STEPS];
    for (int k = 0; k < STEPS; k++) {
        int mt = 0, mn = 0, s2;
        step_batch(mbs, M, 50 + k, sc, &mt, &mn, &s2);
        params_zero_grad(&ref.params);
        double ls_sum = 0;
        for (int m = 0; m < M; m++) {
            float ls = 0;
            stage_forward(&ref, &ra, &mbs[m], NULL, NULL, &ls);
            stage_backward(&ref, &ra, NULL, 1.0f / (float)sup[k], NULL);
            ls_sum += ls;
        }
        ref_loss[k] = ls_sum / sup[k];
        ref_grad[k] = mallocCheck(sizeof(float) * ref.params.gtotal);
        memcpy(ref_grad[k], ref.params.grad, sizeof(float) * ref.params.gtotal);
        for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
    }
    int layers[64], l0 = 0;
    partition_auto(cfg->Lt, P, (PartitionCost){0, 0, 1}, layers);
    for (int v = 0; v < rank; v++) l0 += layers[v];
    Stage st;
    stage_init(&st, cfg, l0, l0 + layers[rank], &backend_cpu);
    Stage* sp = &st;
    static const struct {
        PpHint hint;
        PpMode mode;
        TransportKind tk;
        int hold;
        double delay_s;
        const char* what;
    } runs[] = {{PP_HINT_GPIPE, PP_MODE_FIXED, TRANSPORT_TAGGED, 1, 0, "all but one landed before the first is read"},
                {PP_HINT_GPIPE, PP_MODE_FIXED, TRANSPORT_FIFO, 1, 0, "all but one landed before the first is read"},
                {PP_HINT_GPIPE, PP_MODE_READY, TRANSPORT_TAGGED, 1, 0, "all but one landed before the first is read"},
                {PP_HINT_GPIPE, PP_MODE_READY, TRANSPORT_FIFO, 1, 0, "all but one landed before the first is read"},
                {PP_HINT_1F1B, PP_MODE_READY, TRANSPORT_TAGGED, 0, 0.005, "each read as it lands (slow producers)"},
                {PP_HINT_1F1B, PP_MODE_FIXED, TRANSPORT_FIFO, 0, 0.005, "each read as it lands (slow producers)"}};
    int failures = 0;
    double worst = 0;
    for (size_t v = 0; v < sizeof runs / sizeof runs[0]; v++) {
        /* held runs in ready mode: a cap of M, so that the held consumer's producer runs every forward first
         * as gpipe's sequence does (the default cap P - r would wait for a backward the hold keeps back) */
        PpCap cap = {runs[v].hold ? PP_CAP_COUNT : PP_CAP_DEFAULT, runs[v].hold ? M : 0};
        PipelineConfig pc = {.P = P, .rank = rank, .chunks = 1, .hint = runs[v].hint, .mode = runs[v].mode,
                             .cap = cap, .transport = runs[v].tk, .timeout_s = 60,
                             .max_tokens = max_T, .max_patches = max_Np};
        Pipeline* pl = pipeline_create(&pc, &sp, test_world, M, err, sizeof err);
        if (!pl) rr_die("pipeline_create: %s", err);
        InflightHook h = {.rank = rank, .P = P, .M = M, .hold = runs[v].hold, .delay_s = runs[v].delay_s};
        pipeline_set_task_hook(pl, inflight_task_hook, &h);
        int bad = 0, peak = 0;
        for (int k = 0; k < STEPS; k++) {
            int mt = 0, mn = 0, s2;
            step_batch(mbs, M, 50 + k, sc, &mt, &mn, &s2);
            h.step = (int)v * STEPS + k, h.nF = h.nB = 0;
            params_zero_grad(&st.params);
            PipelineStepStats ps;
            if (pipeline_step(pl, mbs, M, 1.0f / (float)sup[k], NULL, k, NULL, &ps, err, sizeof err) != 0)
                rr_die("pipeline_step: %s", err);
            peak = ps.peak_inflight > peak ? ps.peak_inflight : peak;
            double ls = ps.loss_sum, loss = 0;
            MPI_Allreduce(&ls, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            loss /= sup[k];
            if (fabs(loss - ref_loss[k]) > 1e-6 * fabs(ref_loss[k])) {
                if (rank == 0) fprintf(stderr, "in flight %s %s step %d: loss %.9g, one process %.9g\n",
                                       pp_hint_name(runs[v].hint), pp_mode_name(runs[v].mode), k, loss, ref_loss[k]);
                bad++;
            }
            for (int i = 0; i < st.params.n; i++) {
                int j = params_find(&ref.params, st.params.specs[i].name);
                if (j < 0) rr_die("parameter %s not in the reference", st.params.specs[i].name);
                const float* g = params_grad(&st.params, i);
                const float* gr = ref_grad[k] + ref.params.specs[j].offset;
                double maxg = 0, maxd = 0;
                for (size_t e = 0; e < st.params.specs[i].numel; e++) {
                    maxg = fmax(maxg, fabs(gr[e]));
                    maxd = fmax(maxd, fabs((double)g[e] - (double)gr[e]));
                }
                if (maxg > 0) worst = fmax(worst, maxd / maxg);
                if (!(maxd <= M * ldexp(1.0, -23) * maxg + 1e-12)) {
                    fprintf(stderr, "rank %d in flight %s %s %s step %d: %s differs by %.3g (max |g| %.3g)\n", rank,
                            pp_hint_name(runs[v].hint), pp_mode_name(runs[v].mode),
                            transport_kind_name(runs[v].tk), k, st.params.specs[i].name, maxd, maxg);
                    bad++;
                }
            }
            for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
        }
        if (h.timeouts) {
            fprintf(stderr, "rank %d in flight %s %s: a producer's signal did not come in 10 s\n", rank,
                    pp_hint_name(runs[v].hint), pp_mode_name(runs[v].mode));
            bad++;
        }
        int all_bad = 0;
        MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
            printf("in flight: %-5s %-6s %-6s %d steps of %d microbatches, %s (rank 0 peak in flight %d) %s\n",
                   pp_hint_name(runs[v].hint), pp_mode_name(runs[v].mode), transport_kind_name(runs[v].tk), STEPS, M,
                   runs[v].what, peak, all_bad ? "FAIL" : "ok");
        failures += all_bad ? 1 : 0;
        pipeline_free(pl);
    }
    double w = 0;
    MPI_Allreduce(&worst, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("in flight: largest gradient difference %.3g of max |g|\n", w);
    for (int k = 0; k < STEPS; k++) free(ref_grad[k]);
    stage_free(&st);
    stage_acts_free(&ra, &ref);
    stage_free(&ref);
    free(mbs);
    return failures;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    char werr[256];
    test_world = comm_mpi_world(werr, sizeof werr);
    if (!test_world) rr_die("%s", werr);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (argc > 1 && !strcmp(argv[1], "inflight")) {
        ModelConfig ic = {.patch = 2, .Dv = 16, .Lv = 2, .Hv = 2, .Dt = 32, .Lt = 2 * P, .Ht = 4, .F = 48, .V = 97,
                          .min_patches = 4, .max_patches = 16, .init_std = 0.02f, .seed = 1234};
        SynthConfig isc = {.patch = ic.patch, .V = ic.V, .max_samples = 3, .min_text = 3, .max_text = 22,
                           .min_grid = 2, .max_grid = 4, .image_prob = 0.67, .supervised_prob = 0.6};
        int failed = inflight_runs(&ic, &isc, P, rank);
        if (rank == 0 && !failed) printf("pipeline in flight: ok\n");
        MPI_Finalize();
        return failed ? 1 : 0;
    }
    int vshape = argc > 1 && !strcmp(argv[1], "v");
    int chunks = vshape ? 2 : argc > 1 ? atoi(argv[1]) : 1;
    int on_cuda = argc > 2 && !strcmp(argv[2], "cuda");
    const Backend* be = &backend_cpu;  /* the reference */
    const Backend* pbe = &backend_cpu; /* the pipeline's stages */
    if (on_cuda) {
        char why[256];
        pbe = backend_cuda_get(why, sizeof why);
        if (!pbe) {
            if (rank == 0) printf("skipped: %s\n", why);
            MPI_Finalize();
            return 77;
        }
    }
    ModelConfig cfg = {.patch = 2, .Dv = 16, .Lv = 2, .Hv = 2, .Dt = 32, .Lt = 2 * P * chunks, .Ht = 4, .F = 48,
                       .V = 97, .min_patches = 4, .max_patches = 16, .init_std = 0.02f, .seed = 1234};
    char err[512];
    if (model_config_check(&cfg, err, sizeof err) != 0) rr_die("test config: %s", err);
    int M = chunks > 1 && !vshape ? 2 * P : 2 * P + 1; /* interleaved needs M % P == 0, dualpipev M >= 2P */
    Microbatch* mbs = callocCheck((size_t)M, sizeof *mbs);
    int max_T = 0, max_Np = 0, sup = 0;
    SynthConfig sc = {.patch = cfg.patch, .V = cfg.V, .max_samples = 3, .min_text = 3, .max_text = 22,
                      .min_grid = 2, .max_grid = 4, .image_prob = 0.67, .supervised_prob = 0.6};
    for (int m = 0; m < M; m++) {
        synth_microbatch(&mbs[m], &sc, 7, m);
        sup += mbs[m].n_supervised;
        if (mbs[m].T > max_T) max_T = mbs[m].T;
        if (mbs[m].Np > max_Np) max_Np = mbs[m].Np;
    }
    float scale = 1.0f / (float)sup;

    /* The single-process reference. */
    Stage ref;
    stage_init(&ref, &cfg, 0, cfg.Lt, be);
    StageActs ra;
    stage_acts_init(&ra, &ref, max_T, max_Np, 0);
    double ref_loss = 0;
    for (int m = 0; m < M; m++) {
        float ls = 0;
        stage_forward(&ref, &ra, &mbs[m], NULL, NULL, &ls);
        stage_backward(&ref, &ra, NULL, scale, NULL);
        ref_loss += ls;
    }
    ref_loss *= scale;

    /* This rank's chunks: virtual stage v = c*P + rank (the V: r and 2P-1-r) holds an equal share of the
     * layers. */
    int S = P * chunks, layers[64], l0s[64];
    partition_auto(cfg.Lt, S, (PartitionCost){0, 0, 1}, layers);
    for (int v = 0, l = 0; v < S; v++) l0s[v] = l, l += layers[v];
    Stage* stages = callocCheck((size_t)chunks, sizeof *stages);
    Stage** sp = callocCheck((size_t)chunks, sizeof *sp);
    PpShape layout = {P, M, chunks, 0, vshape};
    for (int c = 0; c < chunks; c++) {
        int v = pp_vstage(&layout, rank, c);
        stage_init(&stages[c], &cfg, l0s[v], l0s[v] + layers[v], pbe);
        sp[c] = &stages[c];
    }

    int failures = 0, runs = 0, adaptive_learned = 0, adaptive_planned = 0, adaptive_reordered = 0, n_reordered_runs = 0;
    /* the same microbatches with the two largest at the ends (shallow copies, variant 5 below) */
    Microbatch* mbs_ends = mallocCheck(sizeof(Microbatch) * (size_t)M);
    memcpy(mbs_ends, mbs, sizeof(Microbatch) * (size_t)M);
    big_at_ends(mbs_ends, M);
    double worst_rel = 0;
    for (int h = 0; h < PP_HINT_COUNT; h++) {
        if (vshape ? !pp_hint_vshape((PpHint)h)
                   : ((h == PP_HINT_INTERLEAVED) != (chunks > 1) || pp_hint_vshape((PpHint)h)))
            continue;
        for (int mode = 0; mode < PP_MODE_COUNT; mode++) {
            if (!pp_mode_is_ready((PpMode)mode) && !pp_hint_is_sequence((PpHint)h)) continue;
            /* variants: 0,1 = tagged / fifo transport at the default cap; 2 = cap 1 (one microbatch in
             * flight); 3 = cap 2x the hint's peak with a tiny activation byte budget (admits one F at a
             * time once anything is in flight); 4 = cap 1x the hint's own peak (P - r, M for gpipe), which
             * must resolve as in the simulator. 2..4 only matter under ready. */
            for (int var = 0; var < 6; var++) {
                if (on_cuda && (var != 0 || !(h == PP_HINT_1F1B || h == PP_HINT_BFW || h == PP_HINT_INTERLEAVED)))
                    continue; /* the emulated device is slow: a fused and a split schedule suffice */
                int tk = var == 1 ? TRANSPORT_FIFO : TRANSPORT_TAGGED;
                if (var == 1 && mode != PP_MODE_READY && mode != PP_MODE_LOOKAHEAD && h != PP_HINT_1F1B) continue; /* keep it quick */
                if (var >= 2 && var <= 4 && !pp_mode_is_ready((PpMode)mode)) continue;
                /* 5: adaptive on the step with its two largest microbatches at the ends (mbs_ends): the plan must
                 * reorder it (the order choice), and the gradients still match the reference's (computed in
                 * the plan's order: reordering sums M terms in another order, the bound below) */
                if (var == 5 && (mode != PP_MODE_ADAPTIVE || chunks > 1 || vshape || on_cuda)) continue;
                const Microbatch* run_mbs = var == 5 ? mbs_ends : mbs;
                PpCap cap = {PP_CAP_DEFAULT, 0};
                if (var == 2) cap = (PpCap){PP_CAP_COUNT, 1};
                if (var == 3) cap = (PpCap){PP_CAP_MULTIPLE, 2.0};
                if (var == 4) cap = (PpCap){PP_CAP_MULTIPLE, 1.0};
                PipelineConfig pc = {.P = P, .rank = rank, .chunks = chunks, .hint = (PpHint)h, .mode = (PpMode)mode,
                                     .cap = cap, .act_budget = var == 3 ? 1.0 : 0, .split = 0,
                                     .transport = (TransportKind)tk, .timeout_s = 60, .max_tokens = max_T,
                                     .max_patches = max_Np};
                Pipeline* pl = pipeline_create(&pc, sp, test_world, M, err, sizeof err);
                if (!pl) rr_die("pipeline_create: %s", err);
                PipelineStepStats st;
                if (pp_mode_waits((PpMode)mode)) {
                    /* a first step calibrates the cost model, so the checked step runs with estimates
                     * (its notices, predictions and waits; adaptive: its plan over every rank's cost
                     * model), as every step after the first does */
                    if (pipeline_step(pl, run_mbs, M, scale, NULL, 0, NULL, &st, err, sizeof err) != 0)
                        rr_die("pipeline_step (warm-up): %s", err);
                    /* adaptive: a second planned step, so the checked step's choice is its learner's
                     * (it has observed one step in hindsight) */
                    if (mode == PP_MODE_ADAPTIVE && (var == 0 || var == 5)) {
                        if (pipeline_step(pl, run_mbs, M, scale, NULL, 0, NULL, &st, err, sizeof err) != 0)
                            rr_die("pipeline_step (warm-up 2): %s", err);
                        if (st.predicted[0] > 0 && st.predicted[2] > 0) adaptive_planned++;
                    }
                }
                for (int c = 0; c < chunks; c++) params_zero_grad(&stages[c].params);
                /* variant 5's checked step is traced: a reordered step's trace names the data's microbatches */
                char tpath[256];
                snprintf(tpath, sizeof tpath, "%s/rrfp-test-pipeline-%ld-%d.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                         (long)getpid(), rank);
                PpTrace* tr = var == 5 ? pp_trace_open(tpath, rr_now()) : NULL;
                if (tr) pp_trace_rank(tr, rank);
                if (pipeline_step(pl, run_mbs, M, scale, tr, 0, NULL, &st, err, sizeof err) != 0)
                    rr_die("pipeline_step: %s", err);
                if (tr && pp_trace_close(tr, err, sizeof err) != 0) rr_die("trace: %s", err);
                if (tr && pipeline_step_order(pl)) {
                    /* every microbatch's F and B (and W) once, named as in the data: the first forward is the order's first
                     * microbatch (slot 0 runs microbatch ord[0], never 0 in variant 5) */
                    const int* o5 = pipeline_step_order(pl);
                    PpTraceSet ts;
                    memset(&ts, 0, sizeof ts);
                    if (pp_trace_load(&ts, tpath, err, sizeof err) != 0) rr_die("trace: %s", err);
                    int* seen = callocCheck((size_t)M * 3, sizeof(int));
                    double first_ts = INFINITY;
                    int first_mb = -1, bad_span = 0;
                    for (int i = 0; i < ts.n; i++) {
                        const PpTraceSpan* sp5 = &ts.spans[i];
                        int k = sp5->kind == 'F' ? 0 : sp5->kind == 'B' ? 1 : sp5->kind == 'W' ? 2 : -1;
                        if (k < 0 || sp5->mb < 0 || sp5->mb >= M || sp5->rank != rank) {
                            bad_span = 1;
                            continue;
                        }
                        seen[k * M + sp5->mb]++;
                        if (k == 0 && sp5->ts < first_ts) first_ts = sp5->ts, first_mb = sp5->mb;
                    }
                    int any_w = 0; /* a split backward: every W once too */
                    for (int i = 2 * M; i < 3 * M; i++) any_w |= seen[i] != 0;
                    for (int i = 0; i < (any_w ? 3 : 2) * M; i++) bad_span |= seen[i] != 1;
                    if (bad_span || first_mb != o5[0] || o5[0] == 0) {
                        fprintf(stderr, "rank %d %s: the reordered step's trace does not name the data's microbatches "
                                "(first forward %d, the order's first %d)\n", rank, pp_hint_name((PpHint)h), first_mb, o5[0]);
                        failures++;
                    }
                    free(seen);
                    pp_trace_set_free(&ts);
                }
                if (tr) remove(tpath);
                if (mode == PP_MODE_ADAPTIVE && (var == 0 || var == 5) && st.learned > 0) adaptive_learned++;
                /* a step adaptive reordered (variant 5 always; the others where its plan chose to): the reference
                 * for the gradients is the one-process step over the microbatches in the order the step ran them
                 * (pipeline_step_order), so that the runtime's own reordering of the W (or fused B) tasks gives
                 * the bound below, as for every other run. The reference in the plan's order differs from it by
                 * sums of whole microbatches in another order, where elements whose terms cancel move by more
                 * than that bound (observed up to 1.2x it); the training phase compares reordered steps with the
                 * plan's order (its bound is on the parameters). The loss is compared with the plan's order. */
                float* keep = NULL;
                const int* ord = pipeline_step_order(pl);
                n_reordered_runs += ord != NULL;
                if (ord) {
                    keep = mallocCheck(sizeof(float) * ref.params.gtotal);
                    memcpy(keep, ref.params.grad, sizeof(float) * ref.params.gtotal);
                    params_zero_grad(&ref.params);
                    for (int s5 = 0; s5 < M; s5++) {
                        float ls = 0;
                        stage_forward(&ref, &ra, &run_mbs[ord[s5]], NULL, NULL, &ls);
                        stage_backward(&ref, &ra, NULL, scale, NULL);
                    }
                }
                if (var == 5 && (h == PP_HINT_1F1B || h == PP_HINT_ZBH1)) {
                    /* the checked step ran reordered, on every rank (under the other hints the plan may keep the
                     * order: bf did here) */
                    int mine = st.reordered != 0, all = 0;
                    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
                    if (!all) {
                        fprintf(stderr, "rank %d %s: adaptive did not reorder the step with its big microbatches at the "
                                "ends (this rank: %d; predicted ready %g fixed %g)\n", rank, pp_hint_name((PpHint)h),
                                mine, st.predicted[0], st.predicted[2]);
                        failures++;
                    }
                    adaptive_reordered += all;
                }
                double loss = 0, my = st.loss_sum * scale;
                MPI_Allreduce(&my, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                int bad = 0;
                if (fabs(loss - ref_loss) > (on_cuda ? 1e-5 : 1e-6) * fabs(ref_loss)) {
                    if (rank == 0) fprintf(stderr, "loss %.9g != reference %.9g\n", loss, ref_loss);
                    bad++;
                }
                for (int c = 0; c < chunks; c++) {
                    ParamTable* pt = &stages[c].params;
                    for (int i = 0; i < pt->n; i++) {
                        int j = params_find(&ref.params, pt->specs[i].name);
                        if (j < 0) rr_die("parameter %s not in the reference", pt->specs[i].name);
                        float* gh = mallocCheck(sizeof(float) * pt->specs[i].numel);
                        pbe->dev->copy_d2h(pbe, gh, params_grad(pt, i), sizeof(float) * pt->specs[i].numel);
                        const float* g = gh;
                        const float* gr = params_grad(&ref.params, j);
                        double maxg = 0, maxd = 0;
                        for (size_t k = 0; k < pt->specs[i].numel; k++) {
                            maxg = fmax(maxg, fabs(gr[k]));
                            maxd = fmax(maxd, fabs((double)g[k] - (double)gr[k]));
                        }
                        free(gh);
                        double tol = (on_cuda ? 1e-5 : M * ldexp(1.0, -23)) * maxg + 1e-12;
                        if (maxg > 0 && maxd / maxg > worst_rel) worst_rel = maxd / maxg;
                        if (!(maxd <= tol)) {
                            fprintf(stderr, "rank %d %s %s %s: %s max diff %.3g > tol %.3g (max |g| %.3g)\n", rank,
                                    pp_hint_name((PpHint)h), pp_mode_name((PpMode)mode),
                                    transport_kind_name((TransportKind)tk), pt->specs[i].name, maxd, tol, maxg);
                            bad++;
                        }
                    }
                }
                if (keep) {
                    memcpy(ref.params.grad, keep, sizeof(float) * ref.params.gtotal);
                    free(keep);
                }
                int all_bad = 0;
                MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
                if (rank == 0)
                    printf("%-18s %-10s %-6s %-14s loss %.7f (ref %.7f) peak in flight %d waits %ld %s\n",
                           pp_hint_name((PpHint)h), pp_mode_name((PpMode)mode), transport_kind_name((TransportKind)tk),
                           var == 2 ? "cap 1" : var == 3 ? "cap 2x budget" : var == 4 ? "cap 1x" :
                           var == 5 ? (st.reordered ? "ends,reordered" : "ends,as is") : "default cap",
                           loss, ref_loss,
                           st.peak_inflight, st.waits, all_bad ? "FAIL" : "ok");
                if (var == 2 && st.peak_inflight > 1) {
                    fprintf(stderr, "rank %d: cap 1 but %d microbatches were in flight\n", rank, st.peak_inflight);
                    failures++;
                }
                if (var == 4) {
                    /* Under cap 1x rank 0 may hold pp_cap_for(...) >= 2 microbatches (P >= 2, M >= 2), and it
                     * does: right after F0 no gradient can have come back yet (B0 needs F0's output to
                     * travel the whole pipeline), so it starts F1 at once. A cap resolved against no peak
                     * (1) held it to one. */
                    PpShape shape = {P, M, chunks, pipeline_hint_splits((PpHint)h), 0};
                    int want = pp_cap_for(cap, (PpHint)h, &shape, rank);
                    if (st.peak_inflight > want || (rank == 0 && chunks == 1 && st.peak_inflight < 2)) {
                        fprintf(stderr, "rank %d %s: cap 1x = %d but peak in flight %d\n", rank,
                                pp_hint_name((PpHint)h), want, st.peak_inflight);
                        failures++;
                    }
                }
                failures += all_bad ? 1 : 0;
                runs++;
                pipeline_free(pl);
            }
        }
    }
    /* Errors are returned, not fatal (they used to be discarded, or to kill the rank): a plan whose
     * microbatch exceeds the token budget is refused on every rank before any message moves, and the
     * same pipeline then still runs a valid step. */
    if (!on_cuda) {
        PipelineConfig pc = {.P = P, .rank = rank, .chunks = chunks,
                             .hint = vshape ? PP_HINT_ZBV : chunks > 1 ? PP_HINT_INTERLEAVED : PP_HINT_1F1B,
                             .mode = PP_MODE_READY, .cap = {PP_CAP_DEFAULT, 0}, .transport = TRANSPORT_TAGGED,
                             .timeout_s = 60, .max_tokens = max_T - 1, .max_patches = max_Np};
        Pipeline* pl = pipeline_create(&pc, sp, test_world, M, err, sizeof err);
        if (!pl) rr_die("pipeline_create: %s", err);
        PipelineStepStats st;
        int rc = pipeline_step(pl, mbs, M, scale, NULL, 0, NULL, &st, err, sizeof err);
        if (rc == 0 || !strstr(err, "more than data.microbatch_tokens")) {
            fprintf(stderr, "rank %d: an over-budget microbatch gave rc %d, '%s'\n", rank, rc, err);
            failures++;
        }
        pipeline_free(pl);
        runs++;
    }
    /* Several optimiser steps: the same loss curve and parameters as one process. */
    if (on_cuda) {
        /* the step end (norm, clipping, AdamW) on the device: one schedule (the emulation is slow) */
        failures += train_equivalence(&cfg, &sc, M, P, rank, chunks, chunks > 1 ? PP_HINT_INTERLEAVED : PP_HINT_1F1B,
                                      PP_MODE_READY, NULL, pbe, 0);
    } else if (vshape) { /* both V hints under every mode */
        for (int mode = 0; mode < PP_MODE_COUNT; mode++) {
            failures += train_equivalence(&cfg, &sc, M, P, rank, chunks, PP_HINT_ZBV, (PpMode)mode, NULL, pbe, 0);
            failures += train_equivalence(&cfg, &sc, M, P, rank, chunks, PP_HINT_DUALPIPEV, (PpMode)mode, NULL, pbe, 0);
        }
    } else if (chunks > 1) {
        failures += train_equivalence(&cfg, &sc, M, P, rank, chunks, PP_HINT_INTERLEAVED, PP_MODE_READY, NULL, pbe, 0);
        failures += train_equivalence(&cfg, &sc, M, P, rank, chunks, PP_HINT_INTERLEAVED, PP_MODE_FIXED_SYNC, NULL, pbe, 0);
    } else {
        failures += train_equivalence(&cfg, &sc, M, P, rank, 1, PP_HINT_1F1B, PP_MODE_FIXED_SYNC, NULL, pbe, 0);
        failures += train_equivalence(&cfg, &sc, M, P, rank, 1, PP_HINT_ZBH1, PP_MODE_FIXED, NULL, pbe, 0);
        failures += train_equivalence(&cfg, &sc, M, P, rank, 1, PP_HINT_BFW, PP_MODE_READY, "1.5x", pbe, 0);
        /* adaptive reorders every planned step (the order choice, pp_plan_order) and still trains as one process, under
         * a 2x cap of which its plan may run a tighter multiple (pp_plan_order_cap) */
        failures += train_equivalence(&cfg, &sc, M, P, rank, 1, PP_HINT_1F1B, PP_MODE_ADAPTIVE, "2x", pbe, 1);
    }
    runs += on_cuda ? 1 : vshape ? 2 * PP_MODE_COUNT : chunks > 1 ? 2 : 4;
    double worst = 0;
    MPI_Allreduce(&worst_rel, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("pipeline P=%d chunks=%d M=%d: %d runs (%d reordered by adaptive; %d adaptive steps at a tighter in-flight cap "
               "on rank 0), %d failed, largest gradient difference %.3g of max |g|\n", P, chunks, M, runs, n_reordered_runs,
               n_cap_tight, failures, worst);
    /* the verdict is every rank's: a failure seen on any rank fails the test on all of them */
    /* adaptive's learner ran: every step after a planned one (ready and fixed both predicted) learned */
    if (adaptive_learned < adaptive_planned || (adaptive_planned == 0 && chunks == 1 && !vshape && !on_cuda)) {
        fprintf(stderr, "rank %d: adaptive's learner observed %d of %d planned warm-up steps\n", rank, adaptive_learned,
                adaptive_planned);
        failures++;
    }
    /* the order choice ran (variant 5: one adaptive run per sequence hint of one chunk) */
    if (chunks == 1 && !vshape && !on_cuda && adaptive_reordered == 0) {
        fprintf(stderr, "rank %d: no adaptive step was reordered\n", rank);
        failures++;
    }
    free(mbs_ends);
    int all_failures = 0;
    MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    failures = all_failures;
    if (rank == 0 && !failures && runs > 0) printf("pipeline equivalence: ok\n");
    for (int c = 0; c < chunks; c++) stage_free(&stages[c]);
    stage_acts_free(&ra, &ref);
    stage_free(&ref);
    for (int m = 0; m < M; m++) microbatch_free(&mbs[m]);
    free(mbs);
    free(stages);
    free(sp);
    MPI_Finalize();
    return failures || runs == 0 ? 1 : 0;
}
