/* bench_adaptive.c — the check of the default dispatch mode's target (or another mode's, --mode): its makespan within
 * 0.5% of the better of `fixed` and `ready` at the same hint and cap, in every case, with duration
 * estimates off by up to E (the simulator's cost model: the true duration times a per-task factor in
 * [1 - E, 1 + E], seeded), using only what a rank knows (the estimates; the true durations only run the
 * step).
 *
 * Cases: bench/sim.sh's table (its generator: text-like variance 0.1, multimodal 1.0; P in --ps; M = 4P;
 * latency 0.02) and a second, varied generator of our own (below: text-like and multimodal at several
 * variances, stage imbalance, stragglers, M = 2P and 4P), each at caps 1x, 1.5x, 2x, hints 1f1b (whole
 * backward, B = 2F) and zb-h1 (split, B = W = F), over --seeds seeds. For each case: makespan(MODE) /
 * min(makespan(fixed), makespan(ready)). Prints the worst ratio per group, the cases above 1.005 and the
 * worst overall; exits 1 when any case is above --target (default: report only).
 *
 * --steps K: a case is a run of K steps (fresh durations and estimates per step) and the ratio is of the
 * run totals; adaptive keeps one learner over the run (sim.h, PpPlanLearn: it learns the choice from each
 * finished step's measured durations; --no-learn plans each step on its own). K = 1: the one-step case.
 *
 * Usage: rrfp-bench-adaptive [--seeds N] [--seed0 S] [--ps "8 32"] [--error E] [--mode MODE] [--target T] [--all]
 *                            [--simsh] [--steps K] [--no-learn] [--keep-order] [--mode-cap C]
 *   --seed0 S runs seeds S + 1 .. S + N (default 0: seeds 1 .. N; e.g. --seed0 6 for seeds the tables were
 *   not tuned on); --all prints every case (TSV) on stderr: generator, P, M, hint, cap, seed, fixed, ready,
 *   MODE (makespans or run totals), MODE / min(fixed, ready), then MODE's predicted makespans of ready,
 *   lookahead and fixed and the mode it ran, for its last step (adaptive; nan and the mode itself
 *   otherwise): bench/adaptive_pred.py reads it; --mode-cap C runs MODE at cap C instead of the case's
 *   (to compare policies); --simsh: bench/sim.sh's two generators only (its table:
 *   --simsh --ps "4 8 32 128" --seeds 5); --rollout-variant N: rollout's variant (sim.h, PP_ROLLOUT_* bits: 1
 *   continuations on the estimates' fit, 2 the plan's choice as the only base), and its counters and time per
 *   case are printed at the end. Every run's schedule is checked (pp_exec_check). adaptive chooses the step's
 *   microbatch order too (pp_plan_order): the count of steps it reordered is printed at the end; --keep-order
 *   keeps the order (the mode and the in-flight cap still planned; the third round's experiment, --order-choice
 *   MARGIN, is at e345bb6; its reordered steps had fresh estimate draws). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/plan/plan.h"

static double u01(uint64_t* x) { return ((rr_splitmix64(x) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double gauss(uint64_t* x) {
    double u = u01(x), v = u01(x);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
static double logn1(uint64_t* x, double s) { return exp(s * gauss(x) - 0.5 * s * s); }

/* The varied generator, in units of one mean forward.
 * text: a microbatch's size a_m ~ lognormal(v) shared by every stage (packing to a token budget leaves
 *   some spread), a stage's rate ~ lognormal(0.05) (an imperfect partition), per-task noise
 *   lognormal(v/4), stragglers (an episode starts with probability 0.01 per (stage, microbatch) and runs
 *   the next 4 microbatches 1.3x slower).
 * mm: LM stages as text at v = 0.1; stage 0 also runs the ViT: 10% of microbatches text-only, else 1..4
 *   images of lognormal(0.6) size: F[0][m] = (1 - v) lm + v X_m (X mean one), v the ViT's share.
 * B = 2F x lognormal(0.03) (whole backward) or B = F x lognormal(0.03), W = F x lognormal(0.03) (split). */
static void gen_varied(PpDurations* d, int P, int M, int mm, double v, uint64_t seed, int split) {
    memset(d, 0, sizeof *d);
    d->P = P, d->M = M, d->split = split, d->latency = 0.02;
    size_t n = (size_t)P * M;
    d->F = mallocCheck(sizeof(double) * n);
    d->B = mallocCheck(sizeof(double) * n);
    if (split) d->W = mallocCheck(sizeof(double) * n);
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + (mm ? 77 : 13) + (uint64_t)(v * 1000) * 131;
    double tv = mm ? 0.1 : v;
    double* a = mallocCheck(sizeof(double) * M);
    double* x = mallocCheck(sizeof(double) * M);
    for (int m = 0; m < M; m++) {
        a[m] = logn1(&st, tv);
        x[m] = 0;
        if (mm && u01(&st) >= 0.1) {
            int k = 1 + (int)(u01(&st) * 4);
            for (int i = 0; i < k && i < 4; i++) x[m] += logn1(&st, 0.6);
            x[m] /= 2.5 * 0.9;  // mean about one
        }
    }
    for (int s = 0; s < P; s++) {
        double rate = logn1(&st, 0.05);
        int strag = 0;
        for (int m = 0; m < M; m++) {
            if (strag == 0 && u01(&st) < 0.01) strag = 4;
            double f = rate * a[m] * logn1(&st, tv / 4);
            if (mm && s == 0) f = (1 - v > 0.1 ? 1 - v : 0.1) * f + v * x[m];
            if (strag > 0) f *= 1.3, strag--;
            d->F[(size_t)s * M + m] = f;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (split) {
            d->B[i] = d->F[i] * logn1(&st, 0.03);
            d->W[i] = d->F[i] * logn1(&st, 0.03);
        } else {
            d->B[i] = 2 * d->F[i] * logn1(&st, 0.03);
        }
    }
    free(a);
    free(x);
}

typedef struct {
    const char* name;
    int varied, mm;
    double v;
    int m_per_p;
} Gen;

static const Gen gens[] = {
    {"sim.sh text 0.1", 0, 0, 0.1, 4}, {"sim.sh mm 1.0", 0, 1, 1.0, 4},   {"sim.sh text 0.3", 0, 0, 0.3, 4},
    {"sim.sh mm 0.5", 0, 1, 0.5, 4},   {"varied text 0.1", 1, 0, 0.1, 4}, {"varied text 0.3", 1, 0, 0.3, 4},
    {"varied text 0.5", 1, 0, 0.5, 2}, {"varied mm 0.3", 1, 1, 0.3, 4},   {"varied mm 0.5", 1, 1, 0.5, 2},
    {"varied mm 0.8", 1, 1, 0.8, 4},
};

/* the last run's predictions (adaptive's plan; NAN otherwise) and the mode it ran, for --all */
static double last_pred[3];
static PpMode last_chosen;
static int keep_order;                // --keep-order: adaptive never reorders (PpSimOptions.keep_order)
static int last_reordered;            // the last run's step ran reordered (adaptive's order choice)
static long n_reordered, n_mode_steps; // over MODE's steps

/* rollout's variant (--rollout-variant: PP_ROLLOUT_* bits) and its counters over the runs of MODE */
static int rollout_variant;
static long n_rollouts, n_waits;
static double max_rise;  // the largest rollout_rise / makespan
static double mode_seconds;

static double run(const PpDurations* d, PpHint h, PpMode mode, const char* cap, double err_e, uint64_t seed,
                  PpPlanLearn* learn) {
    PpCap c = {PP_CAP_DEFAULT, 0};
    char err[512];
    if (cap && pp_cap_parse(cap, &c, err, sizeof err)) rr_die("bad cap %s", cap);
    PpSimOptions o = {err_e, seed, learn, mode == PP_MODE_ROLLOUT ? rollout_variant : 0, NULL, keep_order};
    PpSimResult r;
    double t0 = rr_now();
    if (pp_sim_run_opts(d, h, mode, c, 1, &o, &r, err, sizeof err)) rr_die("sim: %s", err);
    if (mode == PP_MODE_ROLLOUT) {
        mode_seconds += rr_now() - t0;
        n_rollouts += r.rollouts;
        n_waits += r.waits;
        if (r.rollout_rise / r.makespan > max_rise) max_rise = r.rollout_rise / r.makespan;
    }
    if (r.deadlock) rr_die("sim: deadlock: %s", r.msg);
    PpShape sh = {d->P, d->M, 1, d->split, pp_hint_vshape(h)};  // a reordered step's exec is by slot: as valid
    if (pp_exec_check(&sh, r.exec, r.n_exec, d->latency, err, sizeof err))
        rr_die("sim: %s %s: invalid schedule: %s", pp_hint_name(h), pp_mode_name(mode), err);
    double ms = r.makespan;
    for (int i = 0; i < 3; i++) last_pred[i] = r.predicted[i];
    last_chosen = r.chosen;
    last_reordered = r.order != NULL;
    pp_sim_result_free(&r);
    return ms;
}

int main(int argc, char** argv) {
    int seeds = 6, seed0 = 0, all = 0, simsh = 0, steps = 1, learn_on = 1;
    const char* mode_cap = NULL;
    const char* ps = "8 32";
    double e = 0.2, target = 0;
    PpMode mode = PP_MODE_ADAPTIVE;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed0") && i + 1 < argc) seed0 = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ps") && i + 1 < argc) ps = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-learn")) learn_on = 0;
        else if (!strcmp(argv[i], "--keep-order")) keep_order = 1;
        else if (!strcmp(argv[i], "--error") && i + 1 < argc) e = atof(argv[++i]);
        else if (!strcmp(argv[i], "--target") && i + 1 < argc) target = atof(argv[++i]);
        else if (!strcmp(argv[i], "--all")) all = 1;
        else if (!strcmp(argv[i], "--simsh")) simsh = 1;
        else if (!strcmp(argv[i], "--mode-cap") && i + 1 < argc) mode_cap = argv[++i];
        else if (!strcmp(argv[i], "--order-choice")) {
            fprintf(stderr, "rrfp-bench-adaptive: --order-choice is gone: adaptive chooses the microbatch order itself "
                            "(pp_plan_order; the experiment is at e345bb6)\n");
            return 2;
        }
        else if (!strcmp(argv[i], "--rollout-variant") && i + 1 < argc) rollout_variant = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            if (pp_mode_parse(argv[++i], &mode)) {
                fprintf(stderr, "rrfp-bench-adaptive: unknown mode %s\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: rrfp-bench-adaptive [--seeds N] [--seed0 S] [--ps \"8 32\"] [--error E] [--mode MODE] "
                            "[--target T] [--all] [--simsh] [--mode-cap C] [--steps K] [--no-learn] "
                            "[--keep-order] [--rollout-variant N]\n");
            return 2;
        }
    }
    int Ps[16], nP = 0;
    for (const char* p = ps; *p && nP < 16;) {
        char* end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v < 2 || v > 256) rr_die("P %ld out of [2, 256]", v);
        Ps[nP++] = (int)v;
        p = end;
    }
    static const char* caps[3] = {"1x", "1.5x", "2x"};
    static const PpHint hints[2] = {PP_HINT_1F1B, PP_HINT_ZBH1};
    double worst = 0, logsum = 0;
    char worst_case[256] = "";
    int n_cases = 0, n_over = 0, n_above1 = 0;
    if (steps < 1 || steps > 10000) rr_die("--steps %d out of [1, 10000]", steps);
    if (seeds < 1 || seeds > 100000 || seed0 < 0 || seed0 > 1000000) rr_die("--seeds %d / --seed0 %d out of range", seeds, seed0);
    printf("mode %s, estimate error %g, %d seeds (%d .. %d), P in {%s}, %d step%s per case (run totals)\n\n",
           pp_mode_name(mode), e, seeds, seed0 + 1, seed0 + seeds, ps, steps, steps > 1 ? "s" : "");
    printf("| generator | P | M | hint | cap | worst %s / best(fixed, ready) | mean | fixed/ready range |\n",
           pp_mode_name(mode));
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t g = 0; g < (simsh ? 2 : sizeof gens / sizeof *gens); g++)
        for (int ip = 0; ip < nP; ip++)
            for (int ih = 0; ih < 2; ih++)
                for (int ic = 0; ic < 3; ic++) {
                    int P = Ps[ip], M = gens[g].m_per_p * P, split = hints[ih] == PP_HINT_ZBH1;
                    double gw = 0, gsum = 0, frmin = INFINITY, frmax = 0;
                    for (int s = seed0 + 1; s <= seed0 + seeds; s++) {
                        /* a run of `steps` steps: fresh durations and estimates per step (step k's seed
                         * s + 1000 k; step 0 is the one-step case), one learner for the run; the totals */
                        double f = 0, r = 0, a = 0;
                        PpPlanLearn learn;
                        memset(&learn, 0, sizeof learn);
                        for (int k = 0; k < steps; k++) {
                            uint64_t sk = (uint64_t)s + 1000u * (uint64_t)k;
                            PpDurations d;
                            if (gens[g].varied) gen_varied(&d, P, M, gens[g].mm, gens[g].v, sk, split);
                            else pp_durations_generate(&d, P, M, gens[g].v, gens[g].mm ? PP_GEN_MM : PP_GEN_TEXT, sk,
                                                       split, 0.02);
                            f += run(&d, hints[ih], PP_MODE_FIXED, NULL, e, sk, NULL);
                            r += run(&d, hints[ih], PP_MODE_READY, caps[ic], e, sk, NULL);
                            a += run(&d, hints[ih], mode, mode_cap ? mode_cap : caps[ic], e, sk,
                                     mode == PP_MODE_ADAPTIVE && learn_on ? &learn : NULL);
                            n_reordered += last_reordered, n_mode_steps++;
                            pp_durations_free(&d);
                        }
                        double best = f < r ? f : r, ratio = a / best;
                        if (f / r < frmin) frmin = f / r;
                        if (f / r > frmax) frmax = f / r;
                        gsum += ratio;
                        logsum += log(ratio);
                        if (ratio > gw) gw = ratio;
                        n_cases++;
                        if (ratio > 1.005) n_over++;
                        if (ratio > 1 + 1e-12) n_above1++;
                        if (all)
                            fprintf(stderr, "%s\t%d\t%d\t%s\t%s\t%d\t%.6f\t%.6f\t%.6f\t%.6f\t%.6f\t%.6f\t%.6f\t%s\n",
                                    gens[g].name, P, M, pp_hint_name(hints[ih]), caps[ic], s, f, r, a, ratio, last_pred[0],
                                    last_pred[1], last_pred[2], pp_mode_name(last_chosen));
                        if (ratio > worst) {
                            worst = ratio;
                            snprintf(worst_case, sizeof worst_case, "%s P=%d M=%d %s %s seed %d (fixed %.4f ready %.4f %s %.4f)",
                                     gens[g].name, P, M, pp_hint_name(hints[ih]), caps[ic], s, f, r, pp_mode_name(mode), a);
                        }
                    }
                    printf("| %s | %d | %d | %s | %s | %.4f%s | %.4f | %.3f .. %.3f |\n", gens[g].name, P, M,
                           pp_hint_name(hints[ih]), caps[ic], gw, gw > 1.005 ? " **" : "", gsum / seeds, frmin, frmax);
                    fflush(stdout);
                }
    printf("\n%d cases, %d above 1.005; geometric mean %.4f; worst %.4f: %s\n", n_cases, n_over,
           exp(logsum / (n_cases > 0 ? n_cases : 1)), worst, worst_case);
    if (mode == PP_MODE_ADAPTIVE)
        printf("adaptive reordered the microbatches (pp_plan_order) in %ld of %ld steps\n", n_reordered, n_mode_steps);
    if (mode == PP_MODE_ROLLOUT)
        printf("rollout (variant %d): %d cases slower than the better of fixed and ready at all (ratio > 1 + 1e-12); "
               "%ld decisions simulated their continuations, %ld of them waited; the chosen continuation's makespan "
               "rose by at most %.3g of the step's (0: exact continuations); %.3f s per case\n", rollout_variant,
               n_above1, n_rollouts, n_waits, max_rise, mode_seconds / (n_cases > 0 ? n_cases : 1));
    if (target > 0 && worst > target) {
        printf("target %.4f: NOT MET\n", target);
        return 1;
    }
    if (target > 0) printf("target %.4f: met\n", target);
    return 0;
}
