/* plan.c — adaptive's plan (see plan.h): the mode and the microbatch order of a step from its estimated
 * durations, by simulating the candidates (runtime/sim/sim.c), the learner across a run's steps, and the
 * simulator's entry for every mode (adaptive: plan, then run the chosen mode). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/plan/plan.h"

int pp_sim_run(const PpDurations* d, PpHint hint, PpMode mode, PpCap cap, int chunks, PpSimResult* res, char* err,
               size_t errlen) {
    return pp_sim_run_opts(d, hint, mode, cap, chunks, NULL, res, err, errlen);
}

typedef struct {
    double w;
    int m;
} OrderKey;
static int order_key_cmp(const void* a, const void* b) {
    const OrderKey *x = a, *y = b;
    if (x->w != y->w) return x->w < y->w ? -1 : 1;
    return x->m - y->m;
}

void pp_order_ends(const PpDurations* est, int rank, int* perm) {
    int P = est->P, M = est->M;
    PpDurations fit;
    pp_durations_smooth(est, &fit);
    OrderKey* k = mallocCheck(sizeof(OrderKey) * (size_t)M);
    const double* mats[3] = {fit.F, fit.B, fit.W};
    for (int m = 0; m < M; m++) {
        k[m].w = 0, k[m].m = m;
        for (int a = 0; a < 3; a++)
            if (mats[a])
                for (int r = rank < 0 ? 0 : rank; r < (rank < 0 ? P : rank + 1); r++) k[m].w += mats[a][(size_t)r * M + m];
    }
    pp_durations_free(&fit);
    qsort(k, (size_t)M, sizeof *k, order_key_cmp);  // ascending work
    for (int i = 0; i < M; i++) perm[i % 2 == 0 ? i / 2 : M - 1 - i / 2] = k[i].m;  // alternate front / back
    free(k);
}

static double plan_run(const PpDurations* d, PpHint hint, PpMode m, PpCap cap, int chunks) {
    PpSimResult r;
    char err[256];
    double ms = NAN;
    if (pp_sim_run_policy(d, hint, m, cap, chunks, NULL, 0, &r, err, sizeof err) == 0) {
        if (!r.deadlock) ms = r.makespan;
        pp_sim_result_free(&r);
    }
    return ms;
}

/* The plan (plan.h): each candidate's prediction is the mean of its simulated makespan on the estimates as
 * given and on their denoised fit. The two err on opposite sides: independent per-task estimate error
 * looks like extra variance (which favours ready), while the fit also removes the true per-task variance
 * no cost model can see (which favours fixed); rrfp-bench-adaptive (bench/adaptive.sh, 720 cases with
 * estimates 20% off) misses the 0.5% target in 20 cases with the raw estimates alone, 20 with the fit
 * alone and 14 with the mean. With an exact cost model (the MPI runtime's, already of the fit's form) both
 * are the same simulation. lookahead is taken only when predicted more than PP_PLAN_LOOKAHEAD_MARGIN
 * faster than the better of the two: it beats both by more than 0.5% in a third of those cases and loses
 * to both by as much in a fifth, and its prediction (on estimates that are exact in the plan's world) is
 * the least reliable; with no margin it was picked where it was slowest (56 misses), with 2% it keeps 14
 * misses and makes the mean step 0.15% faster than the better of fixed and ready (1% margin: 28; 3%: 14,
 * 0.01%). */
PpMode pp_sim_plan(const PpDurations* est, double est_error, PpHint hint, PpCap cap, int chunks, int allow_fixed,
                   double pred[3]) {
    double ms[3] = {NAN, NAN, NAN};  // ready, (lookahead: no longer a candidate), fixed
    int seq = pp_hint_is_sequence(hint);
    if (seq && allow_fixed) {  // the hint's sequence is a candidate only where it stays within the cap
        PpShape sh = {est->P, est->M, chunks, est->split, pp_hint_vshape(hint)};
        for (int r = 0; r < est->P && allow_fixed; r++)
            if (pp_hint_peak(hint, &sh, r) > pp_cap_for(cap, hint, &sh, r)) allow_fixed = 0;
    }
    PpDurations fit;
    pp_durations_smooth(est, &fit);
    /* exact estimates: the simulation on them is the step itself, and the fit would only remove true variance */
    const PpDurations* d2 = est_error == 0 ? est : &fit;
    ms[0] = 0.5 * (plan_run(est, hint, PP_MODE_READY, cap, chunks) + plan_run(d2, hint, PP_MODE_READY, cap, chunks));
    if (seq)
        ms[1] = 0.5 * (plan_run(est, hint, PP_MODE_LOOKAHEAD, cap, chunks) +
                       plan_run(d2, hint, PP_MODE_LOOKAHEAD, cap, chunks));
    if (seq && allow_fixed)
        ms[2] = 0.5 * (plan_run(est, hint, PP_MODE_FIXED, cap, chunks) + plan_run(d2, hint, PP_MODE_FIXED, cap, chunks));
    pp_durations_free(&fit);
    if (pred)
        for (int i = 0; i < 3; i++) pred[i] = ms[i];
    PpMode m = PP_MODE_READY;
    double best = ms[0];
    if (!isnan(ms[2]) && !(ms[0] < ms[2] * (1 - PP_PLAN_MARGIN))) m = PP_MODE_FIXED, best = ms[2];
    /* exact estimates: every prediction is the makespan the step will have, so no margin either */
    if (!isnan(ms[1]) && ms[1] < best * (1 - (est_error == 0 ? 0 : PP_PLAN_LOOKAHEAD_MARGIN))) m = PP_MODE_LOOKAHEAD;
    return m;
}

/* d with its microbatches in `perm` (slot s = microbatch perm[s]), in arrays of its own (pp_durations_free) */
static void durations_permuted(const PpDurations* d, const int* perm, PpDurations* out) {
    pp_durations_copy(d, out);
    pp_durations_permute(out, perm);
}

static int pred_index(PpMode m) { return m == PP_MODE_READY ? 0 : m == PP_MODE_LOOKAHEAD ? 1 : 2; }

/* The order's choice (plan.h): the ends order shortens the fill and the drain (the first microbatch's forward and
 * the last one's backward cross every stage with nothing to overlap them) when the step's microbatches differ
 * in size; it costs nothing where they do not, so it runs only where the plan predicts it faster, by more than
 * the margin where the estimates are not exact (0.01 gave fewer one-step misses than 0.005 and 0.02, in the
 * experiment at e345bb6 and on this rule: bench/README.md). */
int pp_plan_order(const PpDurations* est, double est_error, PpHint hint, PpCap cap, int chunks, int allow_fixed,
                  double pred[3], PpMode* mode, int* perm) {
    int M = est->M;
    double p0[3];
    PpMode m0 = pp_sim_plan(est, est_error, hint, cap, chunks, allow_fixed, p0);
    pp_order_ends(est, -1, perm);
    int moved = 0;
    for (int s = 0; s < M; s++) moved |= perm[s] != s;
    int reorder = 0;
    if (moved) {
        PpDurations q;
        durations_permuted(est, perm, &q);
        double p1[3];
        PpMode m1 = pp_sim_plan(&q, est_error, hint, cap, chunks, allow_fixed, p1);
        pp_durations_free(&q);
        double margin = est_error == 0 ? 0 : PP_PLAN_ORDER_MARGIN;
        if (p1[pred_index(m1)] < p0[pred_index(m0)] * (1 - margin)) {
            reorder = 1;
            m0 = m1;
            for (int i = 0; i < 3; i++) p0[i] = p1[i];
        }
    }
    if (!reorder)
        for (int s = 0; s < M; s++) perm[s] = s;
    for (int i = 0; i < 3; i++) pred[i] = p0[i];
    *mode = m0;
    return reorder;
}

static const double PP_PLAN_CAP_MULTS[] = {1.0, 1.25, 1.5, 1.75};

int pp_plan_caps(PpCap cap, PpHint hint, const PpShape* sh, PpCap* out) {
    int n = 0;
    out[n++] = cap;
    if (cap.kind != PP_CAP_MULTIPLE) return n;
    for (size_t i = 0; i < sizeof PP_PLAN_CAP_MULTS / sizeof PP_PLAN_CAP_MULTS[0] && n < PP_PLAN_CAPS_MAX; i++) {
        PpCap c = {PP_CAP_MULTIPLE, PP_PLAN_CAP_MULTS[i]};
        if (!(c.value < cap.value)) continue;
        int dup = 0;
        for (int j = 0; j < n && !dup; j++) {
            int same = 1;
            for (int r = 0; r < sh->P && same; r++) same = pp_cap_for(c, hint, sh, r) == pp_cap_for(out[j], hint, sh, r);
            dup = same;
        }
        if (!dup) out[n++] = c;
    }
    return n;
}

int pp_plan_order_cap(const PpDurations* est, double est_error, PpHint hint, PpCap cap, int chunks, int allow_fixed,
                      int keep_order, double pred[3], PpMode* mode, int* perm, PpCap* out_cap) {
    int M = est->M;
    PpShape sh = {est->P, M, chunks, est->split, pp_hint_vshape(hint)};
    PpCap caps[PP_PLAN_CAPS_MAX];
    int n = pp_plan_caps(cap, hint, &sh, caps), reorder = 0;
    int* pk = mallocCheck(sizeof(int) * (size_t)M);
    double best = NAN, margin = est_error == 0 ? 0 : PP_PLAN_CAP_MARGIN;
    for (int i = 0; i < n; i++) {
        double pi[3];
        PpMode mi;
        int ri = 0;
        if (keep_order) {
            mi = pp_sim_plan(est, est_error, hint, caps[i], chunks, allow_fixed, pi);
            for (int s = 0; s < M; s++) pk[s] = s;
        } else {
            ri = pp_plan_order(est, est_error, hint, caps[i], chunks, allow_fixed, pi, &mi, pk);
        }
        double v = pi[pred_index(mi)];
        if (i == 0 || v < best * (1 - margin)) {
            best = v, reorder = ri, *mode = mi, *out_cap = caps[i];
            for (int k = 0; k < 3; k++) pred[k] = pi[k];
            memcpy(perm, pk, sizeof(int) * (size_t)M);
        }
    }
    free(pk);
    return reorder;
}

PpMode pp_plan_learn_choose(const PpPlanLearn* L, const double pred[3]) {
    double c[3] = {pred[0], pred[1], pred[2]};
    if (L->n > 0 && c[0] > 0 && c[2] > 0) {
        int n = L->n;
        double hm = L->h_sum / n, dm = L->d_sum / n;
        double pc = log(c[0] / c[2]) + dm;  // the plan's log(ready / fixed), corrected by its mean past error
        double est = hm;                    // one step: the hindsight alone (no variance yet)
        if (n >= 2) {
            double vh = (L->h_sq - n * hm * hm) / (n - 1), vd = (L->d_sq - n * dm * dm) / (n - 1);
            if (!(vh > 1e-12)) vh = 1e-12;
            if (!(vd > 1e-12)) vd = 1e-12;
            est = (hm / vh + pc / vd) / (1 / vh + 1 / vd);
        }
        c[0] = c[2] * exp(est);
    }
    PpMode m = PP_MODE_READY;
    double best = c[0];
    if (!isnan(c[2]) && !(c[0] < c[2] * (1 - PP_PLAN_MARGIN))) m = PP_MODE_FIXED, best = c[2];
    if (!isnan(c[1]) && c[1] < best * (1 - PP_PLAN_LOOKAHEAD_MARGIN)) m = PP_MODE_LOOKAHEAD;
    return m;
}

int pp_plan_learn_observe(PpPlanLearn* L, const PpDurations* measured, PpHint hint, PpCap cap, int chunks,
                          const double pred[3]) {
    if (!(pred[0] > 0) || !(pred[2] > 0)) return -1;
    double hr = plan_run(measured, hint, PP_MODE_READY, cap, chunks);
    double hf = plan_run(measured, hint, PP_MODE_FIXED, cap, chunks);
    if (!(hr > 0) || !(hf > 0)) return -1;
    double h = log(hr / hf), dd = h - log(pred[0] / pred[2]);
    L->h_sum += h, L->h_sq += h * h;
    L->d_sum += dd, L->d_sq += dd * dd;
    L->n++;
    return 0;
}

int pp_sim_run_opts(const PpDurations* d, PpHint hint, PpMode mode, PpCap cap, int chunks, const PpSimOptions* opt,
                    PpSimResult* res, char* err, size_t errlen) {
    int plan_base = mode == PP_MODE_ROLLOUT && opt && (opt->rollout & PP_ROLLOUT_PLAN_BASE);
    if (mode != PP_MODE_ADAPTIVE && !plan_base)
        return pp_sim_run_policy(d, hint, mode, cap, chunks, opt, 0, res, err, errlen);
    memset(res, 0, sizeof *res);
    PpShape sh = {d->P, d->M, chunks, d->split, pp_hint_vshape(hint)};
    if (pp_hint_check_shape(hint, &sh, err, errlen)) return -1;
    if (mode == PP_MODE_ADAPTIVE) {
        /* plan on what the ranks know (the estimates), then run the step for real under the choice */
        PpDurations est;
        double pred[3];
        PpMode chosen;
        int* perm = mallocCheck(sizeof(int) * (size_t)d->M);
        pp_sim_estimated_durations(d, chunks, opt, &est);
        int reorder = 0;
        PpCap run_cap = cap; /* the in-flight cap the step runs under (pp_plan_order_cap) */
        /* keep_order: the mode and the cap planned on the step as it is (as the MPI runtime under replay, with an
         * estimate callback or parallel.reorder = false) */
        reorder = pp_plan_order_cap(&est, opt ? opt->estimate_error : 0, hint, cap, chunks, 1, opt && opt->keep_order,
                                    pred, &chosen, perm, &run_cap);
        pp_durations_free(&est);
        PpPlanLearn* L = opt ? opt->learn : NULL;
        /* exact estimates: the plan's choice is the best of its candidates, nothing to learn. The learner picks
         * the mode for the order the plan chose (its sample is that order's prediction and executed step). */
        if (L && !(opt->estimate_error == 0)) chosen = pp_plan_learn_choose(L, pred);
        /* reordered: the step runs on the true durations permuted, its estimates the same draws permuted */
        PpDurations dd = *d;
        PpSimOptions o2;
        memset(&o2, 0, sizeof o2);
        if (opt) o2 = *opt;
        int* key = NULL;  // the estimate draws of the slots: perm, composed with a reordering d already had
        if (reorder) {
            durations_permuted(d, perm, &dd);
            key = mallocCheck(sizeof(int) * (size_t)d->M);
            for (int s = 0; s < d->M; s++) key[s] = opt && opt->order ? opt->order[perm[s]] : perm[s];
            o2.order = key;
        }
        int rc = pp_sim_run_opts(&dd, hint, chosen, run_cap, chunks, &o2, res, err, errlen);
        if (rc == 0) {
            for (int i = 0; i < 3; i++) res->predicted[i] = pred[i];
            res->plan_cap = run_cap;
        }
        if (rc == 0 && L && !res->deadlock) pp_plan_learn_observe(L, &dd, hint, run_cap, chunks, pred);
        if (reorder) pp_durations_free(&dd);
        free(key);
        if (rc == 0 && reorder) res->order = perm;
        else free(perm);
        return rc;
    }
    /* rollout: the plan's choice as the only base (lookahead, which a continuation cannot run: both) */
    PpDurations est;
    double pred[3];
    pp_sim_estimated_durations(d, chunks, opt, &est);
    PpMode pm = pp_sim_plan(&est, opt->estimate_error, hint, cap, chunks, 1, pred);
    pp_durations_free(&est);
    int bases = pm == PP_MODE_READY ? 2 : pm == PP_MODE_FIXED ? 1 : 3;
    int rc = pp_sim_run_policy(d, hint, mode, cap, chunks, opt, bases, res, err, errlen);
    if (rc == 0)
        for (int i = 0; i < 3; i++) res->predicted[i] = pred[i];
    return rc;
}

int pp_dry_run(PpHint h, const PpShape* s, PpMode mode, PpCap cap, char* err, size_t errlen) {
    PpDurations d;
    memset(&d, 0, sizeof d);
    d.P = s->P;
    d.M = s->M;
    d.split = s->split;
    d.F = mallocCheck(sizeof(double) * s->P * s->M);
    d.B = mallocCheck(sizeof(double) * s->P * s->M);
    if (s->split) d.W = mallocCheck(sizeof(double) * s->P * s->M);
    for (int i = 0; i < s->P * s->M; i++) {
        d.F[i] = 1;
        d.B[i] = s->split ? 1 : 2;
        if (s->split) d.W[i] = 1;
    }
    PpSimResult r;
    int rc = pp_sim_run(&d, h, mode, cap, s->chunks, &r, err, errlen);
    if (rc == 0) {
        if (r.deadlock) {
            snprintf(err, errlen, "hint %s under mode %s does not finish: %s", pp_hint_name(h), pp_mode_name(mode), r.msg);
            rc = -1;
        }
        pp_sim_result_free(&r);
    }
    pp_durations_free(&d);
    return rc;
}
