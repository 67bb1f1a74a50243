/* sched.h — RRFP scheduler core: pipeline tasks, hints, the per-rank dispatcher (ready-set
 * arbitration) and validity checks. Pure: no MPI, no CUDA, no clock. The discrete-event simulator
 * that drives the same dispatcher is runtime/sim/sim.h.
 *
 * docs/scheduler.md "Tasks, hints and dispatch modes" is the contract. The split is Megatron's: hints (pure functions, hints.c) know
 * nothing of time; the dispatcher (dispatch.c) knows one rank's ready set and nothing of transports;
 * the simulator (sim.c) and the MPI runtime each feed the dispatcher the same three notifications
 * (input arrived, task started, task finished) and ask it what to run next.
 *
 * Names: P pipeline ranks, M microbatches, V = chunks (model chunks per rank, virtual stages); the
 * virtual stage of chunk c on rank r is c*P + r (Megatron's layout). A task's printable form follows
 * PyTorch's _Action: "<stage><kind><microbatch>", e.g. "2F0" = forward of microbatch 0 on virtual
 * stage 2; kinds F (forward), B (backward to the input; the whole backward when not split), W (weight
 * gradient of a split backward). */
#ifndef RRFP_SCHED_H
#define RRFP_SCHED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tasks -------------------------------------------------------------------------------------- */

typedef enum { PP_F = 0, PP_B = 1, PP_W = 2 } PpKind;

typedef struct {
    int32_t chunk;  // model chunk on this rank, 0 .. V-1
    int32_t kind;   // PpKind
    int32_t mb;     // microbatch, 0 .. M-1
} PpTask;

/* The shape every rank of a pipeline agrees on. */
typedef struct {
    int P;       // pipeline ranks
    int M;       // microbatches per step
    int chunks;  // model chunks per rank (V); 1 unless interleaved
    int split;   // 1: backward split into B (input grad) and W (weight grad); W tasks exist
    int vshape;  // 1: the V layout (zbv, dualpipev): chunk 0 of rank r is stage r, chunk 1 is stage
                 // 2P - 1 - r; 0: Megatron's, chunk c of rank r is stage c*P + r (pp_hint_vshape)
} PpShape;

/* The virtual stage of (rank, chunk) under the shape's layout, and back (v in 0 .. P*chunks - 1). */
int pp_vstage(const PpShape* s, int rank, int chunk);
void pp_vstage_owner(const PpShape* s, int v, int* rank, int* chunk);

/* Number of tasks on one rank: V * M * (split ? 3 : 2). */
int pp_shape_tasks(const PpShape* s);
/* Dense index of a task on its rank: (kind * V + chunk) * M + mb. */
int pp_task_index(const PpShape* s, PpTask t);
PpTask pp_task_from_index(const PpShape* s, int index);
/* Printable form "<stage><kind><mb>" with stage = chunk*P + rank (PyTorch's _Action). Returns buf. */
char* pp_task_format(PpTask t, int rank, int P, char* buf, size_t n);
/* The same with the stage of the shape's layout (the V layout's chunk 1 of rank r is stage 2P-1-r). */
char* pp_task_label(const PpShape* s, PpTask t, int rank, char* buf, size_t n);
/* Parse that form back for `rank`; returns 0, or -1 when malformed or the stage is not on `rank`. */
int pp_task_parse(const char* s, int rank, int P, PpTask* out);

/* Cross-rank dependencies (Megatron's virtual-stage chain). F(c,m) on virtual stage v > 0 needs the
 * activation of F on stage v-1; B(c,m) on v < P*V-1 needs the gradient of B on stage v+1; W has no
 * cross-rank input. Return 1 and fill rank + task when the dependency exists, else 0. */
int pp_task_input(const PpShape* s, int rank, PpTask t, int* src_rank, PpTask* src);
int pp_task_output(const PpShape* s, int rank, PpTask t, int* dst_rank, PpTask* dst);

/* ---- hints -------------------------------------------------------------------------------------- */

typedef enum {
    PP_HINT_GPIPE = 0,
    PP_HINT_1F1B,
    PP_HINT_INTERLEAVED,  // "interleaved-1f1b": Megatron's schedule table, V > 1, M % P == 0
    PP_HINT_ZBH1,         // Zero Bubble H1 (Qi et al.), as Megatron-DeepSpeed's ZeroBubbleH1Pipeline
    PP_HINT_BF,
    PP_HINT_BFW,
    PP_HINT_ZBV,        // zero-bubble V (Qi et al. section 6), as torch's ScheduleZBVZeroBubble orders it
    PP_HINT_DUALPIPEV,  // DualPipe's V variant, as torch's ScheduleDualPipeV orders it (overlapped pairs run
                        // one after the other: F, then the full backward B W)
    PP_HINT_COUNT
} PpHint;

const char* pp_hint_name(PpHint h);
/* Returns 0 and sets *h, or -1 for an unknown name. */
int pp_hint_parse(const char* name, PpHint* h);
/* 1 when the hint's order is an executable sequence (every F before its B before its W on the
 * rank), so the fixed modes can run it; bf and bfw are rankings only (every B ranked before every F)
 * and run under `ready` only. */
int pp_hint_is_sequence(PpHint h);
/* 1 for the hints that place two chunks per rank in a V (zbv, dualpipev): the shape's vshape. */
int pp_hint_vshape(PpHint h);
/* Check that the hint is defined for the shape (interleaved needs V > 1 and M % P == 0; zbv and
 * dualpipev need V == 2 in the V layout and a split backward, dualpipev also M >= 2P; the others need
 * V == 1). Returns 0, or -1 with a message in err. */
int pp_hint_check_shape(PpHint h, const PpShape* s, char* err, size_t errlen);
/* Fill order[0 .. pp_shape_tasks(s)-1] with rank `rank`'s tasks, most preferred first (the hint
 * rank of order[i] is i). Pure function of (h, s, rank). Returns the task count, or -1 with a
 * message in err when the hint is not defined for the shape. */
int pp_hint_build(PpHint h, const PpShape* s, int rank, PpTask* order, char* err, size_t errlen);
/* The hint's own peak in-flight count on a rank (microbatches admitted: F(0, m) started, B(0, m) not
 * finished; with one chunk simply F started, B not finished), by replaying its order.
 * For the rankings bf and bfw, which are not sequences, the 1F1B peak min(P - r, M) (they are meant
 * to run at 1F1B's memory). */
int pp_hint_peak(PpHint h, const PpShape* s, int rank);
/* Max over prefixes of order of (#F - #B) counting first-chunk tasks only. */
int pp_order_peak(const PpTask* order, int n);
/* Print the rank x step grid of the hint, one row per rank ("r0: 0F0 0F1 ..."). */
void pp_hint_print_grid(PpHint h, const PpShape* s, void* file /* FILE* */);

/* ---- validity checks (usable by tests, the simulator and the runtime) --------------------------- */

/* Each task of the rank exactly once. When `sequence` is set, also every F before its B before its W
 * (what the fixed modes need). Returns 0, or -1 with the first problem in err. */
int pp_order_check(const PpShape* s, int rank, const PpTask* order, int n, int sequence, char* err,
                   size_t errlen);

/* One executed task (what a trace or the simulator records). */
typedef struct {
    PpTask task;
    double start, end;
} PpExec;

/* Check an executed schedule of all ranks: each task exactly once, F(c,m) ends before B(c,m) starts
 * before... W(c,m) starts, tasks on a rank do not overlap, and every cross-rank input's producer ended
 * at least `latency` before its consumer started (tolerance 1e-9 relative, for round-off in sums).
 * exec[r] holds n_exec[r] records. Returns 0, or -1 with the first problem in err. */
int pp_exec_check(const PpShape* s, PpExec* const* exec, const int* n_exec, double latency, char* err,
                  size_t errlen);

/* ---- dispatcher: one rank's ready-set arbitration ----------------------------------------------- */

/* lookahead: `ready` that may leave a rank idle for a better-ranked task whose input is predicted to
 * arrive before the best ready task would finish (pp_dispatcher_next_at).
 * adaptive: per step, of ready (never wait) and, under a sequence hint, the hint's sequence (always wait
 * for the next task: fixed), the one the step's plan and the duration estimates predict faster, or
 * lookahead where predicted clearly faster than both (pp_sim_plan in runtime/plan/: every rank of the
 * pipeline computes the same choice from the same plan and estimates), corrected from the second step on
 * by what the past steps' measured durations say in hindsight (PpPlanLearn); a dispatcher given `adaptive`
 * itself, without a plan, behaves as lookahead. */
typedef enum {
    PP_MODE_FIXED_SYNC = 0,
    PP_MODE_FIXED,
    PP_MODE_READY,
    PP_MODE_LOOKAHEAD,
    PP_MODE_ADAPTIVE,
    PP_MODE_COUNT,  // the modes every runner runs (the MPI runtime, the simulator); rollout follows
    /* rollout (simulator only, an experiment: docs/scheduler.md, "Rollout"): at each decision where ready's pick
     * is not the hint's next task, the simulator runs the rest of the step for "start it now" and for "wait",
     * each followed by fixed and by ready, on the estimates, and takes the action whose better continuation
     * ends first. It sees every rank's state, so the MPI runtime refuses it; a dispatcher given it alone
     * behaves as ready. */
    PP_MODE_ROLLOUT = PP_MODE_COUNT,
    PP_MODE_ALL_COUNT  // every mode the simulator knows (names, parsing)
} PpMode;
const char* pp_mode_name(PpMode m);
int pp_mode_parse(const char* name, PpMode* m);
/* 1 for the modes that arbitrate a ready set under a cap (ready, lookahead, adaptive); 0 for the
 * sequences. */
static inline int pp_mode_is_ready(PpMode m) {
    return m == PP_MODE_READY || m == PP_MODE_LOOKAHEAD || m == PP_MODE_ADAPTIVE || m == PP_MODE_ROLLOUT;
}
/* 1 for the modes whose ranks send start notices and may wait for an announced input. */
static inline int pp_mode_waits(PpMode m) { return m == PP_MODE_LOOKAHEAD || m == PP_MODE_ADAPTIVE; }

/* In-flight cap: unset (default P - r), an absolute count, or a multiple of the hint's own peak. */
typedef struct {
    int kind;      // PP_CAP_DEFAULT, PP_CAP_COUNT, PP_CAP_MULTIPLE
    double value;  // count, or multiple
} PpCap;
enum { PP_CAP_DEFAULT = 0, PP_CAP_COUNT = 1, PP_CAP_MULTIPLE = 2 };
/* "4" or "1.5x". Returns 0, or -1 with a message in err. */
int pp_cap_parse(const char* text, PpCap* cap, char* err, size_t errlen);
/* The cap of rank r: a count as given; a multiple k of the hint's peak p gives floor(k * p + 1e-9), at
 * least 1; the default is P - r (the 1F1B peak) when hint_peak is 0, else hint_peak. */
int pp_cap_resolve(PpCap cap, int hint_peak, int P, int rank);
/* The hint_peak to pass for the default cap: 0 with one chunk (the contract's default P - r), the hint's own
 * peak with several chunks (1F1B's P - r admits too few microbatches for Megatron's interleaved
 * warm-up). */
int pp_cap_default_peak(PpHint h, const PpShape* s, int rank);
/* The cap a rank runs under: `cap` resolved against the hint's own peak (for multiples such as 1.5x)
 * or the default. The one place the simulator and the MPI runtime take it from. */
int pp_cap_for(PpCap cap, PpHint h, const PpShape* s, int rank);
/* "P-r", "4" or "1.5x" into buf. */
char* pp_cap_format(PpCap cap, char* buf, size_t n);

typedef struct {
    PpShape shape;
    int rank;
    PpMode mode;
    const PpTask* order;      // (n) the hint order of this rank; copied
    int n;
    int cap;                  // resolved in-flight cap (ready only); <= 0 means no cap
    double act_budget;        // activation bytes allowed in flight (ready only); <= 0: none
    const double* act_bytes;  // (M) activation bytes per microbatch on this rank, or NULL
    /* lookahead only: the estimated duration of one of this rank's tasks, in the caller's time unit
     * (<= 0: unknown, then the rank does not wait on its account). A cost model, never the truth. */
    double (*estimate)(void* ctx, int rank, PpTask t);
    void* estimate_ctx;
} PpDispatchConfig;

/* Tasks are addressed inside by their hint rank (position in the order). The ready set is two
 * binary min-heaps of hint ranks, one for ready forwards (gated by the cap and the byte budget) and
 * one for ready B/W tasks, so a decision costs O(log n), never a scan of every task. */
typedef struct {
    PpShape shape;
    int rank, n;
    PpMode mode;
    int cap;
    double act_budget;
    double* act_bytes;  // (M) or NULL
    PpTask* order;      // (n) hint rank -> task
    int* hrank;         // (n) dense task index -> hint rank
    uint8_t* need;      // (n) by hint rank: unmet dependencies (cross-rank input, local predecessor)
    uint8_t* state;     // (n) by hint rank: PP_TS_*
    int* heap_f;        // ready forwards, min-heap of hint ranks
    int nf;
    int* heap_o;        // ready B and W, min-heap of hint ranks
    int no;
    int pos;            // fixed modes: hint rank of the next task in sequence
    int* next_fb;       // (n + 1, 2) fixed modes: first F / B at or after each hint rank, -1 if none
    int inflight;       // admitted microbatches: F(0, m) started, B(0, m) not finished
    int peak_inflight;
    double inflight_bytes;
    int n_started, n_done;
    long n_decisions;
    /* lookahead: tasks whose producer has started (a notice came) and whose input has not arrived */
    double (*estimate)(void* ctx, int rank, PpTask t);
    void* estimate_ctx;
    double* pred;       // (n) by hint rank: predicted arrival of the cross-rank input, NAN = no notice
    int* noticed;       // hint ranks with a prediction and the input not yet in
    int n_noticed;
    long n_waits;       // decisions that left the rank idle for a predicted task
    int sequence_hint;  // lookahead: the order is an executable sequence (it only waits then)
    int first;          // hint rank at or before the first task not yet started (pp_dispatcher_first_unstarted)
} PpDispatcher;

enum { PP_TS_WAIT = 0, PP_TS_READY = 1, PP_TS_RUNNING = 2, PP_TS_DONE = 3 };

/* Returns 0, or -1 with a message in err (order not a valid set of this rank's tasks; a fixed mode
 * given an order that is not a sequence). Nothing is allocated on error. */
int pp_dispatcher_init(PpDispatcher* d, const PpDispatchConfig* cfg, char* err, size_t errlen);
/* The usual way in (simulator and runtime alike): build rank `rank`'s order of hint h, resolve the cap
 * (default, count or multiple of the hint's peak; ready only) and init. act_bytes may be NULL. Returns
 * 0, or -1 with a message in err. */
int pp_dispatcher_init_hint(PpDispatcher* d, PpHint h, const PpShape* s, int rank, PpMode mode, PpCap cap,
                            double act_budget, const double* act_bytes, char* err, size_t errlen);
void pp_dispatcher_free(PpDispatcher* d);
/* The cross-rank input of t has arrived (activation for F, gradient for B). */
void pp_dispatcher_input_arrived(PpDispatcher* d, PpTask t);
/* What to run now: returns 1 with *t, 0 when nothing may run now (wait for an arrival or a
 * completion), -1 when every task of the rank has been started. fixed/fixed-sync: the next task of the
 * sequence once its inputs are in; ready: of the eligible tasks the smallest hint rank, where an F is
 * eligible only while in-flight < cap and the byte budget allows (always when nothing is in flight).
 * Forwards are admitted in hint order: when the most preferred ready F does not fit the byte budget,
 * no later F overtakes it (a large microbatch is never starved by small ones). */
int pp_dispatcher_next(PpDispatcher* d, PpTask* t);
/* lookahead's decision at time `now` (the caller's clock; the dispatcher has none): ready's choice c,
 * unless a task x ranked better than c, whose producer's start has been announced
 * (pp_dispatcher_notice) and which would be eligible once its input is in, is predicted to arrive
 * before c would finish by its estimate: now + estimate(c) > predicted arrival of x. Then it returns 0
 * (wait for x; an arrival re-asks). An overdue prediction keeps the wait (the producer has started,
 * so the input does come). In every other mode, and with now = NAN, exactly pp_dispatcher_next. */
int pp_dispatcher_next_at(PpDispatcher* d, double now, PpTask* t);
/* lookahead: the producer of t's cross-rank input has started; the input is predicted at `arrive_at`
 * (the caller's clock: the notice's receipt time plus the producer's own duration estimate, which
 * the notice carries). Ignored when the input is already in or by the other modes. */
void pp_dispatcher_notice(PpDispatcher* d, PpTask t, double arrive_at);
/* Reference arbitration by scanning every task (tests cross-check next() against it; the bench uses
 * it as the baseline for the cost per decision). Same contract as pp_dispatcher_next. */
int pp_dispatcher_next_scan(const PpDispatcher* d, PpTask* t);
/* t starts now (it must be ready; TP followers may start a task other than next()'s). */
void pp_dispatcher_started(PpDispatcher* d, PpTask t);
/* t has finished computing (its sends may still be in progress). */
void pp_dispatcher_finished(PpDispatcher* d, PpTask t);
/* The hint's first task not yet started on the rank, in any mode (under the ready modes tasks start out of
 * the hint's order): returns 1 with *t and *eligible = 1 when it may start now (its inputs are in and, a
 * gated forward, the cap and the byte budget admit it), or 0 when every task of the rank has started. */
int pp_dispatcher_first_unstarted(PpDispatcher* d, PpTask* t, int* eligible);
/* A copy of a dispatcher's decision state for a simulated continuation (the simulator's rollout): dst = src
 * with its own copies of the tables a decision changes (the dependency counts, the task states and the two
 * ready heaps) in `mem`, pp_dispatcher_clone_bytes(src) bytes aligned for an int; everything else (the hint
 * order, lookahead's notices) is src's, read-only, so the clone runs ready or fixed and is freed with mem
 * alone, never with pp_dispatcher_free. The size is a multiple of sizeof(double): clones can sit end to end. */
size_t pp_dispatcher_clone_bytes(const PpDispatcher* src);
void pp_dispatcher_clone(PpDispatcher* dst, const PpDispatcher* src, void* mem);
/* The task the sequence runs next (fixed modes). Returns 1 with *t, or 0 at the end. */
int pp_dispatcher_peek_sequence(const PpDispatcher* d, PpTask* t);
/* fixed-sync: the tasks whose cross-rank receives are to be posted now, i.e. at time 0 and each time
 * the rank finishes computing a task (whether or not that task's own send is still blocked). With one
 * chunk: the next task of the sequence (docs/scheduler.md "Tasks, hints and dispatch modes"). With several: the next forward and the
 * next backward of the sequence, as Megatron's interleaved schedule posts both in one batched exchange
 * (one receive ahead deadlocks its table); in the V layout the next forward and backward of each chunk
 * (a V rank feeds itself at the tip, and one receive per kind deadlocks zbv's warm-up). Tasks without a
 * cross-rank input are left out; a receive may be returned again on a later call (the caller posts each
 * once). Returns the count (0..4). */
int pp_dispatcher_sequence_receives(const PpDispatcher* d, PpTask out[4]);
static inline int pp_dispatcher_all_done(const PpDispatcher* d) { return d->n_done == d->n; }

#ifdef __cplusplus
}
#endif
#endif
