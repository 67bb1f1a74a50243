/* test_plan.c — adaptive's plan (runtime/plan/: the mode, in-flight cap and microbatch order chosen by simulating
 * the candidates, the denoising fit it plans on, the learner) and the runtime's pre-step dry run, without MPI.
 * Usage: test_plan [case-name-substring]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/plan/plan.h"
#include "tests/support/check.h"
#include "tests/support/sched_fixtures.h"

/* ---- helpers ------------------------------------------------------------------------------------ */

/* d's columns in `order` (NULL: as they are), in arrays of their own */
static void permuted_copy(const PpDurations* d, const int* order, PpDurations* out) {
    *out = *d;
    size_t n = (size_t)d->P * (size_t)d->M;
    out->F = mallocCheck(sizeof(double) * n), memcpy(out->F, d->F, sizeof(double) * n);
    out->B = mallocCheck(sizeof(double) * n), memcpy(out->B, d->B, sizeof(double) * n);
    if (d->W) out->W = mallocCheck(sizeof(double) * n), memcpy(out->W, d->W, sizeof(double) * n);
    if (order) pp_durations_permute(out, order);
}

/* adaptive's result r carries the plan's order and cap choice: pp_plan_order_cap on the step's estimates says
 * reorder exactly when r.order is set, with the same permutation (a valid one, not the identity), predictions, mode
 * and in-flight cap (no learner) */
static void check_plan_order(const PpDurations* d, PpHint h, PpCap cap, const PpSimOptions* o, const PpSimResult* r) {
    PpDurations est;
    pp_sim_estimated_durations(d, 1, o, &est);
    int* perm = mallocCheck(sizeof(int) * (size_t)d->M);
    int* seen = callocCheck((size_t)d->M, sizeof(int));
    double pred[3];
    PpMode m;
    PpCap pc;
    int re = pp_plan_order_cap(&est, o->estimate_error, h, cap, 1, 1, 0, pred, &m, perm, &pc);
    CHECK(pc.kind == r->plan_cap.kind && pc.value == r->plan_cap.value, "cap %g (kind %d) vs the plan's %g (kind %d)",
          r->plan_cap.value, r->plan_cap.kind, pc.value, pc.kind);
    CHECK(re == (r->order != NULL), "%s: pp_plan_order says %d, the step ran %s", pp_hint_name(h), re,
          r->order ? "reordered" : "as it is");
    int ident = 1;
    for (int s = 0; s < d->M; s++) {
        if (!re) CHECK(perm[s] == s, "not reordered but perm[%d] = %d", s, perm[s]);
        if (re && r->order) {
            CHECK(perm[s] == r->order[s], "order[%d]: %d vs the plan's %d", s, r->order[s], perm[s]);
            CHECK(r->order[s] >= 0 && r->order[s] < d->M && !seen[r->order[s]], "order[%d] = %d", s, r->order[s]);
            if (r->order[s] >= 0 && r->order[s] < d->M) seen[r->order[s]] = 1;
            ident &= r->order[s] == s;
        }
    }
    if (re) CHECK(!ident, "reordered into the identity");
    CHECK(m == r->chosen, "mode %s vs the plan's %s", pp_mode_name(r->chosen), pp_mode_name(m));
    for (int i = 0; i < 3; i++)
        CHECK(isnan(pred[i]) ? isnan(r->predicted[i]) : pred[i] == r->predicted[i], "predicted[%d] %g vs %g", i,
              r->predicted[i], pred[i]);
    free(perm);
    free(seen);
    pp_durations_free(&est);
}

/* ---- cases -------------------------------------------------------------------------------------- */

static void test_plan_caps(void) {
    PpShape p4 = {4, 8, 1, 1, 0};
    PpCap two = {PP_CAP_COUNT, 2};
    /* adaptive's candidate caps (pp_plan_caps): the configured one first, then the multiples 1, 1.25, 1.5, 1.75 of
     * the hint's peak below it, each differing on some rank from the earlier ones; a count or the default as given */
    PpCap cands[PP_PLAN_CAPS_MAX];
    PpShape p8 = {8, 16, 1, 0, 0};
    int nc = pp_plan_caps((PpCap){PP_CAP_MULTIPLE, 2.0}, PP_HINT_1F1B, &p8, cands);
    CHECK(nc == 5 && cands[0].value == 2.0 && cands[1].value == 1.0 && cands[2].value == 1.25 && cands[3].value == 1.5 &&
              cands[4].value == 1.75,
          "2x at P = 8: %d candidates", nc);
    nc = pp_plan_caps((PpCap){PP_CAP_MULTIPLE, 1.5}, PP_HINT_1F1B, &p4, cands);
    /* P = 4, 1f1b peaks 4, 3, 2, 1: 1.25x resolves to 5, 3, 2, 1 (differs from 1x on rank 0) */
    CHECK(nc == 3 && cands[0].value == 1.5 && cands[1].value == 1.0 && cands[2].value == 1.25, "1.5x at P = 4: %d", nc);
    PpShape p2 = {2, 4, 1, 0, 0};
    nc = pp_plan_caps((PpCap){PP_CAP_MULTIPLE, 1.5}, PP_HINT_1F1B, &p2, cands);
    CHECK(nc == 2 && cands[1].value == 1.0, "1.5x at P = 2 (1.25x resolves as 1x): %d", nc);
    CHECK(pp_plan_caps(two, PP_HINT_1F1B, &p8, cands) == 1 && cands[0].kind == PP_CAP_COUNT, "a count as given");
    CHECK(pp_plan_caps(CAP_DEFAULT, PP_HINT_1F1B, &p8, cands) == 1, "the default as given");
}

/* The runtime's pre-step dry run: every hint x mode x cap either finishes or is refused with a reason. */
static void test_dry_run(void) {
    char err[512];
    int ok = 0, refused = 0;
    for (int h = 0; h < PP_HINT_COUNT; h++)
        for (int m = 0; m < PP_MODE_COUNT; m++)
            for (int c = 0; c < 6; c++)
                for (int P = 1; P <= 6; P++) {
                    PpCap cap = CAP_DEFAULT;
                    if (CAP_SPECS[c]) pp_cap_parse(CAP_SPECS[c], &cap, err, sizeof err);
                    int vh = pp_hint_vshape((PpHint)h);
                    PpShape s = {P, 2 * P, h == PP_HINT_INTERLEAVED || vh ? 2 : 1, vh ? 1 : (P + h) % 2, vh};
                    if (h == PP_HINT_INTERLEAVED && P < 2) continue;
                    if (pp_dry_run((PpHint)h, &s, (PpMode)m, cap, err, sizeof err) == 0) ok++;
                    else {
                        refused++;
                        CHECK(!pp_hint_is_sequence(h) && m != PP_MODE_READY && strstr(err, "use --mode ready"),
                              "%s %s P=%d: %s", pp_hint_name(h), pp_mode_name(m), P, err);
                    }
                }
    CHECK(ok > 400 && refused > 0, "ok %d refused %d", ok, refused);
    // The dispatcher refuses what the dry run refuses.
    PpDispatcher d;
    PpShape s = {4, 8, 1, 1, 0};
    CHECK(pp_dispatcher_init_hint(&d, PP_HINT_BFW, &s, 0, PP_MODE_FIXED_SYNC, CAP_DEFAULT, 0, NULL, err, sizeof err) == -1,
          "bfw under fixed-sync");
    PpCap c15 = {PP_CAP_MULTIPLE, 1.5};
    CHECK(pp_dispatcher_init_hint(&d, PP_HINT_ZBH1, &s, 1, PP_MODE_READY, c15, 0, NULL, err, sizeof err) == 0 &&
              d.cap == 4, "zb-h1 rank 1 cap 1.5 x 3 = 4, got %d", d.cap);
    pp_dispatcher_free(&d);
}

/* pp_order_ends / pp_durations_permute (the microbatch-order experiment, bench_adaptive
 * --order-choice): a permutation; on exactly low-rank durations (a stage's rate x a microbatch's size,
 * which the fit keeps as they are) the two smallest microbatches take the two end slots and the largest a
 * middle slot, the work never falls from an end to the middle; permuting moves whole columns. */
static void test_order_ends(void) {
    for (int M = 1; M <= 9; M++) {
        int P = 3;
        PpDurations d = {.P = P, .M = M, .split = 1, .latency = 0};
        d.F = mallocCheck(sizeof(double) * P * M), d.B = mallocCheck(sizeof(double) * P * M);
        d.W = mallocCheck(sizeof(double) * P * M);
        double size[9] = {5, 1, 9, 3, 7, 2, 8, 4, 6};
        for (int r = 0; r < P; r++)
            for (int m = 0; m < M; m++) {
                d.F[r * M + m] = (1 + r) * size[m];
                d.B[r * M + m] = 2 * (1 + r) * size[m];
                d.W[r * M + m] = 0.5 * (1 + r) * size[m] + 1e-3 * r;
            }
        int perm[9], seen[9] = {0};
        pp_order_ends(&d, -1, perm);
        for (int s = 0; s < M; s++) {
            CHECK(perm[s] >= 0 && perm[s] < M && !seen[perm[s]], "M=%d: perm[%d] = %d is not a permutation", M, s, perm[s]);
            if (perm[s] >= 0 && perm[s] < M) seen[perm[s]] = 1;
        }
        double lo = 1e9, hi = 0;
        for (int m = 0; m < M; m++) lo = fmin(lo, size[m]), hi = fmax(hi, size[m]);
        CHECK(size[perm[0]] == lo, "M=%d: slot 0 holds size %g, the smallest is %g", M, size[perm[0]], lo);
        if (M > 1) {
            double second = 1e9;
            for (int m = 0; m < M; m++)
                if (size[m] > lo) second = fmin(second, size[m]);
            CHECK(size[perm[M - 1]] == second, "M=%d: the last slot holds %g, not the second smallest %g", M,
                  size[perm[M - 1]], second);
        }
        int peak = 0;
        for (int s = 0; s < M; s++)
            if (size[perm[s]] == hi) peak = s;
        for (int s = 1; s <= peak; s++) CHECK(size[perm[s]] >= size[perm[s - 1]], "M=%d: falls before the peak at %d", M, s);
        for (int s = peak + 1; s < M; s++) CHECK(size[perm[s]] <= size[perm[s - 1]], "M=%d: rises after the peak at %d", M, s);
        PpDurations q = d;
        q.F = mallocCheck(sizeof(double) * P * M), q.B = mallocCheck(sizeof(double) * P * M);
        q.W = mallocCheck(sizeof(double) * P * M);
        memcpy(q.F, d.F, sizeof(double) * P * M), memcpy(q.B, d.B, sizeof(double) * P * M);
        memcpy(q.W, d.W, sizeof(double) * P * M);
        pp_durations_permute(&q, perm);
        for (int r = 0; r < P; r++)
            for (int s = 0; s < M; s++)
                CHECK(q.F[r * M + s] == d.F[r * M + perm[s]] && q.B[r * M + s] == d.B[r * M + perm[s]] &&
                          q.W[r * M + s] == d.W[r * M + perm[s]],
                      "M=%d: slot %d of rank %d is not microbatch %d", M, s, r, perm[s]);
        /* on one rank's work alone: that rank's sizes decide */
        pp_order_ends(&d, 2, perm);
        CHECK(size[perm[0]] == lo, "M=%d: rank 2's order: slot 0 holds %g", M, size[perm[0]]);
        pp_durations_free(&q);
        pp_durations_free(&d);
    }
}

/* The order choice on steps built for it: a stage's rate x a microbatch's size (low rank: the fit keeps it).
 * - shape 0, the big ones at the ends: sizes 1 except 6 at both ends; the ends order moves them to the middle,
 *   shortening the fill (F of slot 0 crosses every stage alone) and the drain (B of the last slot): the plan
 *   must reorder (E = 0 and 0.2) and the step run faster than the best of ready, fixed and lookahead on the
 *   step as it is.
 * - shape 1, already in ends order (sizes rising to the middle and falling, the two smallest at the ends): the
 *   ends order is the identity at E = 0 and a few swaps of near sizes at E = 0.2: it must not reorder.
 * - shape 2, every microbatch alike: at E = 0 the ends order predicts the same makespan: it must not reorder;
 *   at E = 0.2 the estimates' noise alone orders them and may predict a gain (the plan cannot tell), but the
 *   step as reordered then costs nothing: within 0.5% of the best mode on the step as it is. */
static void test_adaptive_order(void) {
    int P = 4, M = 12;
    PpCap cap = {PP_CAP_DEFAULT, 0};
    static const double ends[12] = {1, 3, 5, 7, 9, 11, 12, 10, 8, 6, 4, 2};
    for (int shape = 0; shape < 3; shape++)
        for (int split = 0; split < 2; split++)
            for (int e = 0; e < 2; e++) {
                PpDurations d = {.P = P, .M = M, .split = split, .latency = 0.02};
                d.F = mallocCheck(sizeof(double) * P * M), d.B = mallocCheck(sizeof(double) * P * M);
                if (split) d.W = mallocCheck(sizeof(double) * P * M);
                for (int r = 0; r < P; r++)
                    for (int m = 0; m < M; m++) {
                        double sz = shape == 0 ? ((m == 0 || m == M - 1) ? 6 : 1) : shape == 1 ? ends[m] : 1;
                        double rate = 1 + 0.1 * r;
                        d.F[r * M + m] = rate * sz;
                        d.B[r * M + m] = (split ? 1 : 2) * rate * sz;
                        if (split) d.W[r * M + m] = rate * sz;
                    }
                PpHint h = split ? PP_HINT_ZBH1 : PP_HINT_1F1B;
                PpSimOptions o = {e ? 0.2 : 0.0, 3, NULL, 0, NULL, 0};
                PpSimResult r;
                char err[256];
                CHECK(pp_sim_run_opts(&d, h, PP_MODE_ADAPTIVE, cap, 1, &o, &r, err, sizeof err) == 0 && !r.deadlock, "%s",
                      err);
                PpShape sh = {P, M, 1, split, 0};
                CHECK(pp_exec_check(&sh, r.exec, r.n_exec, d.latency, err, sizeof err) == 0, "%s", err);
                check_plan_order(&d, h, cap, &o, &r);
                double bx = fmin(sim_makespan(&d, h, PP_MODE_READY, cap, 1), sim_makespan(&d, h, PP_MODE_FIXED, cap, 1));
                bx = fmin(bx, sim_makespan(&d, h, PP_MODE_LOOKAHEAD, cap, 1));
                if (shape == 0) {
                    /* keep_order: the plan of the mode alone, on the step as it is */
                    PpSimOptions ok = o;
                    ok.keep_order = 1;
                    PpSimResult rk;
                    CHECK(pp_sim_run_opts(&d, h, PP_MODE_ADAPTIVE, cap, 1, &ok, &rk, err, sizeof err) == 0 && !rk.order &&
                              rk.makespan >= bx, "%s E=%g keep_order: reordered or faster than the best mode (%g < %g)",
                          pp_hint_name(h), o.estimate_error, rk.makespan, bx);
                    pp_sim_result_free(&rk);
                    CHECK(r.order && r.order[0] != 0 && r.order[0] != M - 1 && r.order[M - 1] != 0 && r.order[M - 1] != M - 1,
                          "%s E=%g: big microbatches at the ends, not reordered (or still at an end)", pp_hint_name(h),
                          o.estimate_error);
                    CHECK(r.makespan < 0.95 * bx, "%s E=%g: reordered step %g, best as it is %g", pp_hint_name(h),
                          o.estimate_error, r.makespan, bx);
                    printf("  adaptive order (%s, E = %.1f): reordered, %.4f x the best mode on the step as it is\n",
                           pp_hint_name(h), o.estimate_error, r.makespan / bx);
                } else if (shape == 1 || e == 0) {
                    CHECK(!r.order, "%s E=%g shape %d: reordered", pp_hint_name(h), o.estimate_error, shape);
                } else {
                    CHECK(r.makespan <= 1.005 * bx, "%s E=%g alike: adaptive%s %g, best as it is %g", pp_hint_name(h),
                          o.estimate_error, r.order ? " (reordered)" : "", r.makespan, bx);
                    printf("  adaptive order (%s, E = %.1f, alike microbatches): %s, %.4f x the best mode as it is\n",
                           pp_hint_name(h), o.estimate_error, r.order ? "reordered" : "as it is", r.makespan / bx);
                }
                pp_sim_result_free(&r);
                pp_durations_free(&d);
            }
}

/* adaptive: the plan picks ready or fixed by the predicted makespans (the PP_PLAN_MARGIN rule), lookahead
 * instead only when predicted faster than that by PP_PLAN_LOOKAHEAD_MARGIN, and the step then runs exactly
 * the chosen mode (the same makespan as running that mode); under a ranking (bfw) the only candidate is ready; on the anomaly (text
 * 1f1b cap 1x, P = 32, ready ~8% behind fixed) it does not pick ready, with estimates exact or 20% off;
 * with exact estimates its step is never slower than the best of ready, fixed and lookahead (its
 * predictions are those modes' makespans, and it takes the best with no margin); every run valid. */
static void test_adaptive(void) {
    const char* caps[] = {"1x", "1.5x", "2x"};
    int n_reordered[2] = {0, 0}, n_steps[2] = {0, 0};
    for (int kind = 0; kind < 2; kind++)
        for (uint64_t seed = 1; seed <= 2; seed++) {
            PpDurations dw, ds;
            pp_durations_generate(&dw, 8, 32, kind ? 1.0 : 0.1, (PpGenKind)kind, seed, 0, 0.02);
            pp_durations_generate(&ds, 8, 32, kind ? 1.0 : 0.1, (PpGenKind)kind, seed, 1, 0.02);
            for (int c = 0; c < 3; c++)
                for (int h = 0; h < PP_HINT_COUNT; h++) {
                    if (h == PP_HINT_INTERLEAVED || pp_hint_vshape((PpHint)h)) continue;
                    PpCap cap;
                    char err[512];
                    pp_cap_parse(caps[c], &cap, err, sizeof err);
                    const PpDurations* d = (h == PP_HINT_ZBH1 || h == PP_HINT_BFW) ? &ds : &dw;
                    PpSimOptions o = {0.2, seed, NULL, 0, NULL, 0};
                    PpSimResult r, q;
                    CHECK(pp_sim_run_opts(d, (PpHint)h, PP_MODE_ADAPTIVE, cap, 1, &o, &r, err, sizeof err) == 0 &&
                              !r.deadlock, "%s: %s %s", pp_hint_name((PpHint)h), err, r.msg);
                    PpShape sh = {8, 32, 1, d->split, 0};
                    CHECK(pp_exec_check(&sh, r.exec, r.n_exec, d->latency, err, sizeof err) == 0, "%s", err);
                    const double* p = r.predicted;
                    PpMode want = PP_MODE_READY;
                    double best = p[0];
                    if (!isnan(p[2]) && !(p[0] < p[2] * (1 - PP_PLAN_MARGIN))) want = PP_MODE_FIXED, best = p[2];
                    if (!isnan(p[1]) && p[1] < best * (1 - PP_PLAN_LOOKAHEAD_MARGIN)) want = PP_MODE_LOOKAHEAD;
                    CHECK(r.chosen == want, "%s %s: chose %s, the rule on %g %g %g says %s", pp_hint_name((PpHint)h),
                          caps[c], pp_mode_name(r.chosen), p[0], p[1], p[2], pp_mode_name(want));
                    if (!pp_hint_is_sequence((PpHint)h))
                        CHECK(r.chosen == PP_MODE_READY && isnan(p[1]) && isnan(p[2]), "a ranking has one candidate");
                    /* the order: the plan's (pp_plan_order on the estimates), and the step is the chosen mode's
                     * run on the step in that order (its estimates the same draws, permuted) */
                    check_plan_order(d, (PpHint)h, cap, &o, &r);
                    PpDurations dp;
                    permuted_copy(d, r.order, &dp);
                    PpSimOptions op = o;
                    op.order = r.order;
                    CHECK(pp_sim_run_opts(&dp, (PpHint)h, r.chosen, cap, 1, &op, &q, err, sizeof err) == 0 &&
                              q.makespan == r.makespan, "adaptive's step is not the chosen mode's: %g vs %g", r.makespan,
                          q.makespan);
                    n_reordered[0] += r.order != NULL, n_steps[0]++;
                    pp_sim_result_free(&q);
                    pp_durations_free(&dp);
                    pp_sim_result_free(&r);
                    /* exact estimates: the plan's simulations are the step itself, so adaptive is never
                     * slower than the best of its candidates (ready; fixed and lookahead where they are ones) */
                    PpSimOptions ox = {0.0, seed, NULL, 0, NULL, 0};
                    CHECK(pp_sim_run_opts(d, (PpHint)h, PP_MODE_ADAPTIVE, cap, 1, &ox, &r, err, sizeof err) == 0 &&
                              !r.deadlock, "%s", err);
                    check_plan_order(d, (PpHint)h, cap, &ox, &r);
                    /* the predictions are the makespans of the order that ran ... */
                    permuted_copy(d, r.order, &dp);
                    double rd = sim_makespan(&dp, (PpHint)h, PP_MODE_READY, cap, 1);
                    if (!isnan(r.predicted[2])) {
                        double fx = sim_makespan(&dp, (PpHint)h, PP_MODE_FIXED, cap, 1);
                        CHECK(r.predicted[2] == fx && r.predicted[0] == rd, "exact estimates: predicted %g %g, ran %g %g",
                              r.predicted[0], r.predicted[2], rd, fx);
                    }
                    if (!isnan(r.predicted[1])) { /* lookahead, a candidate under a sequence hint, with no margin */
                        double la = sim_makespan(&dp, (PpHint)h, PP_MODE_LOOKAHEAD, cap, 1);
                        CHECK(r.predicted[1] == la, "exact estimates: lookahead predicted %g, ran %g", r.predicted[1], la);
                    }
                    pp_durations_free(&dp);
                    /* ... and the step is never slower than the best of the candidates on the step as it is
                     * (strictly faster when it reordered: no margin, so only a shorter prediction reorders) */
                    double bx = sim_makespan(d, (PpHint)h, PP_MODE_READY, cap, 1);
                    if (!isnan(r.predicted[2])) bx = fmin(bx, sim_makespan(d, (PpHint)h, PP_MODE_FIXED, cap, 1));
                    if (!isnan(r.predicted[1])) bx = fmin(bx, sim_makespan(d, (PpHint)h, PP_MODE_LOOKAHEAD, cap, 1));
                    CHECK(r.order ? r.makespan < bx : r.makespan <= bx * (1 + 1e-12),
                          "%s %s exact estimates: adaptive (%s%s) %g > best %g on the step as it is",
                          pp_hint_name((PpHint)h), caps[c], pp_mode_name(r.chosen), r.order ? ", reordered" : "",
                          r.makespan, bx);
                    n_reordered[1] += r.order != NULL, n_steps[1]++;
                    pp_sim_result_free(&r);
                }
            pp_durations_free(&dw);
            pp_durations_free(&ds);
        }
    printf("  adaptive: reordered %d of %d steps with estimates 20%% off, %d of %d with exact ones\n", n_reordered[0],
           n_steps[0], n_reordered[1], n_steps[1]);
    PpDurations d;
    pp_durations_generate(&d, 32, 128, 0.1, PP_GEN_TEXT, 1, 0, 0.02);
    PpCap c1 = {PP_CAP_MULTIPLE, 1.0};
    double fixed = sim_makespan(&d, PP_HINT_1F1B, PP_MODE_FIXED, CAP_DEFAULT, 1);
    for (int e = 0; e < 2; e++) {
        PpSimOptions o = {e ? 0.2 : 0.0, 1, NULL, 0, NULL, 0};
        PpSimResult r;
        char err[256];
        CHECK(pp_sim_run_opts(&d, PP_HINT_1F1B, PP_MODE_ADAPTIVE, c1, 1, &o, &r, err, sizeof err) == 0 && !r.deadlock,
              "%s", err);
        CHECK(r.chosen != PP_MODE_READY && r.makespan <= 1.005 * fixed, "anomaly, error %d: chose %s, %g vs fixed %g",
              e, pp_mode_name(r.chosen), r.makespan, fixed);
        printf("  adaptive on the anomaly (estimate error %.1f): ran %s, %.4f x fixed\n", o.estimate_error,
               pp_mode_name(r.chosen), r.makespan / fixed);
        pp_sim_result_free(&r);
    }
    pp_durations_free(&d);
}

/* adaptive's plan runs on denoised estimates (pp_durations_smooth): an exactly low-rank matrix (the MPI
 * runtime's cost model: rate x (tokens + 1) per stage, + patches on stage 0) comes back unchanged; noisy
 * estimates of a multimodal step come back closer to the truth, stage 0's ViT variance kept; and on the
 * cell the raw estimates got wrong (mm 1f1b cap 1x, P = 32: per-task noise made the step look text-like)
 * adaptive keeps at least 98% of ready's speedup (simulated makespans, deterministic). */
static void test_plan_fit(void) {
    int P = 8, M = 32;
    PpDurations x = {.P = P, .M = M, .split = 0, .latency = 0.01};
    x.F = mallocCheck(sizeof(double) * P * M);
    x.B = mallocCheck(sizeof(double) * P * M);
    uint64_t st = 7;
    for (int m = 0; m < M; m++) {
        double T = 100 + (double)(rr_splitmix64(&st) % 900), Np = (double)(rr_splitmix64(&st) % 600);
        for (int s = 0; s < P; s++) {
            double rate = 1e-4 * (1 + 0.1 * s);
            x.F[s * M + m] = rate * (T + (s == 0 ? Np : 0) + 1);
            x.B[s * M + m] = 2.1 * x.F[s * M + m];
        }
    }
    PpDurations y;
    pp_durations_smooth(&x, &y);
    double worst = 0;
    for (int i = 0; i < P * M; i++) {
        worst = fmax(worst, fabs(y.F[i] - x.F[i]) / x.F[i]);
        worst = fmax(worst, fabs(y.B[i] - x.B[i]) / x.B[i]);
    }
    CHECK(worst < 1e-6 && !y.W, "an exactly low-rank cost model changed by the fit: %g", worst);
    pp_durations_free(&y);
    pp_durations_free(&x);

    PpDurations d, est, fit;
    pp_durations_generate(&d, 32, 128, 1.0, PP_GEN_MM, 1, 0, 0.02);
    PpSimOptions o = {0.2, 1, NULL, 0, NULL, 0};
    pp_sim_estimated_durations(&d, 1, &o, &est);
    pp_durations_smooth(&est, &fit);
    double raw = 0, fitted = 0, c0 = 0, n0 = 0, n1 = 0;
    double mt = 0, mf = 0;
    for (int m = 0; m < 128; m++) mt += d.F[m] / 128, mf += fit.F[m] / 128;
    for (int i = 0; i < 32 * 128; i++) {
        raw += pow(est.F[i] / d.F[i] - 1, 2);
        fitted += pow(fit.F[i] / d.F[i] - 1, 2);
    }
    for (int m = 0; m < 128; m++) {  // stage 0: the fit follows the ViT's per-microbatch cost
        c0 += (d.F[m] - mt) * (fit.F[m] - mf);
        n0 += (d.F[m] - mt) * (d.F[m] - mt);
        n1 += (fit.F[m] - mf) * (fit.F[m] - mf);
    }
    double corr = c0 / sqrt(n0 * n1);
    raw = sqrt(raw / (32 * 128)), fitted = sqrt(fitted / (32 * 128));
    CHECK(fitted < 0.6 * raw && corr > 0.95, "fit: relative RMS %.4f (raw %.4f), stage 0 correlation %.4f", fitted, raw,
          corr);
    printf("  mm P=32: estimates' relative RMS error %.4f raw, %.4f fitted; stage 0 fit/truth correlation %.4f\n", raw,
           fitted, corr);
    pp_durations_free(&fit);
    pp_durations_free(&est);
    PpCap c1 = {PP_CAP_MULTIPLE, 1.0};
    double ready = sim_makespan(&d, PP_HINT_1F1B, PP_MODE_READY, c1, 1);
    double fixed = sim_makespan(&d, PP_HINT_1F1B, PP_MODE_FIXED, CAP_DEFAULT, 1);
    PpSimResult r;
    char err[256];
    CHECK(pp_sim_run_opts(&d, PP_HINT_1F1B, PP_MODE_ADAPTIVE, c1, 1, &o, &r, err, sizeof err) == 0 && !r.deadlock, "%s",
          err);
    CHECK(ready < fixed && ready / r.makespan >= 0.98, "mm 1f1b 1x P=32: adaptive (%s) %g, ready %g, fixed %g",
          pp_mode_name(r.chosen), r.makespan, ready, fixed);
    printf("  mm 1f1b 1x P=32: adaptive ran %s, ready/adaptive %.4f, ready/fixed %.4f\n", pp_mode_name(r.chosen),
           ready / r.makespan, ready / fixed);
    pp_sim_result_free(&r);
    pp_durations_free(&d);
}

/* adaptive's learner (sim.h, PpPlanLearn): with nothing learned the choice is the plan's rule; a step
 * observed records the hindsight log(ready / fixed) of the simulated modes on the measured durations and
 * the plan's error on it; after one step the hindsight decides; after more, the estimate with the smaller
 * spread over the past steps dominates (the hindsight when the steps are alike, the corrected plan when
 * its error is steady); a step without both predictions is not recorded. */
static void test_plan_learn(void) {
    PpPlanLearn L;
    memset(&L, 0, sizeof L);
    double pf[3] = {1.01, NAN, 1.0}, pr[3] = {0.99, NAN, 1.0}, pl[3] = {1.0, 0.9, 1.0}, pn[3] = {1.0, NAN, NAN};
    CHECK(pp_plan_learn_choose(&L, pf) == PP_MODE_FIXED && pp_plan_learn_choose(&L, pr) == PP_MODE_READY,
          "nothing learned: the plan's choice");
    CHECK(pp_plan_learn_choose(&L, pl) == PP_MODE_LOOKAHEAD && pp_plan_learn_choose(&L, pn) == PP_MODE_READY,
          "lookahead past its margin; ready when fixed is not a candidate");
    PpDurations d;
    pp_durations_generate(&d, 4, 16, 0.1, PP_GEN_TEXT, 2, 1, 0.02);
    PpCap c15 = {PP_CAP_MULTIPLE, 1.5};
    double r = sim_makespan(&d, PP_HINT_ZBH1, PP_MODE_READY, c15, 1), f = sim_makespan(&d, PP_HINT_ZBH1, PP_MODE_FIXED, c15, 1);
    double p0[3] = {2.0, NAN, 1.0};
    CHECK(pp_plan_learn_observe(&L, &d, PP_HINT_ZBH1, c15, 1, pn) == -1 && L.n == 0, "no fixed prediction: not recorded");
    CHECK(pp_plan_learn_observe(&L, &d, PP_HINT_ZBH1, c15, 1, p0) == 0 && L.n == 1, "a step recorded");
    CHECK(fabs(L.h_sum - log(r / f)) < 1e-12 && fabs(L.d_sum - (log(r / f) - log(2.0))) < 1e-12,
          "hindsight %g (ready %g fixed %g), plan error %g", L.h_sum, r, f, L.d_sum);
    pp_durations_free(&d);
    /* one step: the hindsight alone decides, whatever the plan predicts */
    memset(&L, 0, sizeof L);
    L.n = 1, L.h_sum = log(0.97), L.d_sum = -0.05;
    CHECK(pp_plan_learn_choose(&L, pf) == PP_MODE_READY, "hindsight says ready 3%% faster");
    L.h_sum = log(1.03);
    CHECK(pp_plan_learn_choose(&L, pr) == PP_MODE_FIXED, "hindsight says fixed 3%% faster");
    /* two steps alike (hindsight -3%, -2.9%), the plan's error spread wide: the hindsight decides */
    memset(&L, 0, sizeof L);
    double hs[2] = {-0.03, -0.029}, ds[2] = {-0.05, 0.04};
    for (int i = 0; i < 2; i++) L.n++, L.h_sum += hs[i], L.h_sq += hs[i] * hs[i], L.d_sum += ds[i], L.d_sq += ds[i] * ds[i];
    CHECK(pp_plan_learn_choose(&L, pf) == PP_MODE_READY, "alike steps: the hindsight");
    /* steps that differ (hindsight -5%, +5%), the plan's error steady (+1%): the corrected plan decides */
    memset(&L, 0, sizeof L);
    double hs2[2] = {-0.05, 0.05}, ds2[2] = {0.01, 0.0101};
    for (int i = 0; i < 2; i++)
        L.n++, L.h_sum += hs2[i], L.h_sq += hs2[i] * hs2[i], L.d_sum += ds2[i], L.d_sq += ds2[i] * ds2[i];
    double p98[3] = {0.98, NAN, 1.0}, p100[3] = {1.0, NAN, 1.0};
    CHECK(pp_plan_learn_choose(&L, p98) == PP_MODE_READY && pp_plan_learn_choose(&L, p100) == PP_MODE_FIXED,
          "steady plan error: the corrected plan");
}

int main(int argc, char** argv) {
    static const SchedCase cases[] = {
        {"plan_caps", test_plan_caps},
        {"dry_run", test_dry_run},
        {"adaptive", test_adaptive},
        {"adaptive_order", test_adaptive_order},
        {"order_ends", test_order_ends},
        {"plan_fit", test_plan_fit},
        {"plan_learn", test_plan_learn},
    };
    return sched_run_cases(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
