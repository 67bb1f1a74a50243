/* plan.h — adaptive's plan: the mode (ready, lookahead or fixed) and the microbatch order of a step, chosen
 * before it runs from the estimated durations by simulating the candidates (runtime/sim/), and the choice
 * learned across the steps of a run. The live pipeline (runtime/pipeline/) plans every step with it; the
 * simulator's entry for every mode (pp_sim_run: adaptive plans, then runs the chosen mode) is here too, so
 * the chain reads pipeline -> plan -> sim. */
#ifndef RRFP_PLAN_H
#define RRFP_PLAN_H

#include <stddef.h>

#include "runtime/sched/sched.h"
#include "runtime/sim/sim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Run one step under the virtual clock. Returns 0 with *res filled (res->deadlock set when stuck), or
 * -1 with a message in err when the hint/mode/shape combination is invalid. */
int pp_sim_run(const PpDurations* d, PpHint hint, PpMode mode, PpCap cap, int chunks, PpSimResult* res,
               char* err, size_t errlen);
/* As pp_sim_run, with the cost model's estimates (adaptive plans on them, lookahead and rollout predict with
 * them) and adaptive's learner and order in opt (may be NULL: exact estimates). */
int pp_sim_run_opts(const PpDurations* d, PpHint hint, PpMode mode, PpCap cap, int chunks, const PpSimOptions* opt,
                    PpSimResult* res, char* err, size_t errlen);

/* adaptive's plan (sched.h): predict the step's makespan from the estimated durations `est` (what every
 * rank of the pipeline knows before the step: the plan's microbatches through the cost model) under
 * ready, lookahead (sequence hints) and, when the hint is a sequence, allow_fixed is set and the hint's
 * own in-flight peak stays within the cap on every rank (the cap bounds memory), fixed. Of ready and
 * fixed it takes the one predicted faster (fixed unless ready is predicted faster by more than
 * PP_PLAN_MARGIN, relative), and lookahead instead only when predicted faster than that one by more than
 * PP_PLAN_LOOKAHEAD_MARGIN. A prediction is the mean of the simulated makespans on `est` itself and on
 * its denoised fit (pp_durations_smooth): independent per-task estimate error makes the raw prediction
 * see more variance than the step has, the fit sees less (sim.c). est_error: the estimates' stated
 * relative error bound (the simulator's --estimate-error), < 0 when unknown (the MPI runtime's cost
 * model); at 0 the estimates are the durations and both simulations run on them (no fit: it would only
 * remove true per-task variance). pred (may be NULL) receives the
 * predicted makespans of ready, lookahead and fixed (NAN when not a candidate). Deterministic: every
 * rank computes the same choice from the same inputs. Measured by bench/adaptive.sh (docs/scheduler.md). */
#define PP_PLAN_MARGIN 0.0
#define PP_PLAN_LOOKAHEAD_MARGIN 0.02
PpMode pp_sim_plan(const PpDurations* est, double est_error, PpHint hint, PpCap cap, int chunks, int allow_fixed,
                   double pred[3]);
/* adaptive's plan with the microbatch order (docs/scheduler.md "The microbatch order"): pp_sim_plan on
 * est as it is and on est permuted into "ends" order (pp_order_ends(est, -1, ...): the same estimates
 * permuted). Returns 1 with perm (M) the ends order, pred / *mode the reordered plan's, when the reordered
 * prediction of its chosen mode is below the other's (of its chosen mode) by more than PP_PLAN_ORDER_MARGIN
 * (relative; no margin when est_error == 0: exact estimates, where every prediction is the makespan the step
 * will have), else 0 with perm the identity and pred / *mode the plan on the step as it is. pred and mode
 * are always filled. Deterministic: every rank computes the same choice from the same inputs. */
#define PP_PLAN_ORDER_MARGIN 0.01
int pp_plan_order(const PpDurations* est, double est_error, PpHint hint, PpCap cap, int chunks, int allow_fixed,
                  double pred[3], PpMode* mode, int* perm);
/* adaptive's in-flight cap (docs/scheduler.md "The in-flight cap"): the cap a step's ready and lookahead run under,
 * at most the configured one (which bounds memory; a tighter cap never needs more). Candidates (pp_plan_caps): `cap`
 * itself first, then, when it is a multiple of the hint's peak, the multiples PP_PLAN_CAP_MULTS below it whose caps
 * differ on some rank from every earlier candidate's; out gets at most PP_PLAN_CAPS_MAX, the count is returned.
 * pp_plan_order_cap runs pp_plan_order (keep_order: pp_sim_plan, the order kept) under each and takes a tighter cap
 * where its chosen mode's prediction is below the best so far by more than PP_PLAN_CAP_MARGIN (relative; none when
 * est_error == 0). Returns pp_plan_order's result for that cap, with pred, *mode, perm and *out_cap. At as many stages
 * as LM blocks a tighter cap keeps the ranks after a bottleneck stage from starting forwards that the first backward,
 * on its way to that stage, then waits behind (bench/README.md "Adaptive's in-flight cap"). */
#define PP_PLAN_CAPS_MAX 5
#define PP_PLAN_CAP_MARGIN 0.005
int pp_plan_caps(PpCap cap, PpHint hint, const PpShape* sh, PpCap* out);
int pp_plan_order_cap(const PpDurations* est, double est_error, PpHint hint, PpCap cap, int chunks, int allow_fixed,
                      int keep_order, double pred[3], PpMode* mode, int* perm, PpCap* out_cap);
/* A step's microbatches in "ends" order (docs/scheduler.md "The microbatch order", bench/README.md; adaptive's plan chooses
 * it, pp_plan_order): perm[slot] = the microbatch to run in that slot, the smallest microbatches (by their
 * work, F + B + W from the estimates' low-rank fit, summed over every rank, or on rank `rank` alone when
 * rank >= 0) at both ends of the step and the largest in the middle, which shortens the pipeline's fill
 * and drain. Deterministic (ties by index). */
void pp_order_ends(const PpDurations* est, int rank, int* perm);

/* adaptive's online choice across the steps of a run (docs/scheduler.md, "Learning the choice").
 * After a step every rank knows the durations its tasks took; the step's hindsight is the simulated
 * makespan of ready and of fixed on those measured durations (pp_plan_learn_observe), free of the
 * estimate error the plan suffered. Two estimates of the next step's log(ready / fixed) follow: the mean
 * hindsight ratio of the past steps (steps of a run draw from the same workload), and the plan's
 * prediction for the step plus the plan's mean past error on that ratio. pp_plan_learn_choose weighs them
 * by the inverse of their variances over the past steps (one step: the hindsight alone; none: the plan
 * as pp_sim_plan) and takes ready when the blend says it is faster (lookahead as pp_sim_plan). Every
 * step gives one sample, whichever mode ran: no exploratory steps. A run starts zeroed (memset);
 * deterministic, so ranks that share the measured durations keep the same state. */
struct PpPlanLearn {
    int n;                  // steps observed
    double h_sum, h_sq;     // sums of log(h_ready / h_fixed) (hindsight) and of its square
    double d_sum, d_sq;     // sums of the plan's error on it, log(h_r / h_f) - log(pred_r / pred_f), and its square
};
/* The mode to run given the plan's predictions pred[3] (pp_sim_plan; NAN = not a candidate) */
PpMode pp_plan_learn_choose(const PpPlanLearn* L, const double pred[3]);
/* Record a finished step: the plan's predictions pred[3] and `measured`, the durations its tasks took
 * (what the ranks measured; in the simulator the true durations). Returns 0, or -1 when the step had no
 * ready-vs-fixed choice or a hindsight simulation failed (nothing recorded). */
int pp_plan_learn_observe(PpPlanLearn* L, const PpDurations* measured, PpHint hint, PpCap cap, int chunks,
                          const double pred[3]);

/* Dry run before a real step: simulate the hint x mode x cap on uniform durations (F = 1, B = 2, or
 * B = W = 1 when split; latency 0) and report whether every rank finishes. Returns 0, or -1 with the
 * reason (invalid combination, or where it deadlocks) in err. */
int pp_dry_run(PpHint h, const PpShape* s, PpMode mode, PpCap cap, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
