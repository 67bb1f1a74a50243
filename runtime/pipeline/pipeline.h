/* pipeline.h — one pipeline rank's step under RRFP: the dispatcher (runtime/sched/) picks tasks, the
 * transport (runtime/comm/) moves activations and gradients, the Stage API (runtime/model/)
 * computes. Megatron's separation: the schedule, the communicator and the step know little of each
 * other; this file is the one interpreter that joins them.
 *
 * Every rank of the pipeline holds the same step plan (the same microbatches, in the same order,
 * with the same sizes), so every receive is posted ahead with its exact size (fixed, ready), or just
 * before the task that needs it (fixed-sync, where sends are paired and blocking as Megatron's are).
 * A completed receive marks its task ready; in `ready` mode the rank runs, of the ready tasks, the
 * one the hint prefers; with nothing ready it sleeps in the transport until a message arrives.
 *
 * Gradients of the step accumulate into each chunk's Stage params.grad; the optimiser step (global
 * norm over all ranks, clipping, AdamW) is the trainer's. */
#ifndef RRFP_PIPELINE_H
#define RRFP_PIPELINE_H

#include "data/microbatch.h"
#include "runtime/model/model.h"
#include "runtime/sched/sched.h"
#include "runtime/sim/sim.h"
#include "runtime/trace/trace.h"
#include "runtime/comm/transport.h"

typedef struct {
    int P, rank;            /* pipeline ranks and this rank */
    int chunks;             /* model chunks per rank (virtual stages per rank) */
    PpHint hint;
    PpMode mode;
    int keep_order;         /* adaptive: never reorder the step's microbatches (parallel.reorder = false) */
    PpCap cap;              /* ready: in-flight cap */
    double act_budget;      /* ready: activation bytes in flight, <= 0 = none */
    int split;              /* split backward into B and W (forced on for zb-h1 and bfw) */
    TransportKind transport;
    double timeout_s;       /* a rank waiting this long for any message fails naming what it waits for */
    double stall_warn_s;    /* ... and warns every this many seconds before that (0 = never) */
    int max_tokens, max_patches; /* microbatch budget (sizes the activation pool) */
    /* virtual stages 0 .. tower_vstages - 1 run tower blocks (the tower over stages, docs/anyres.md; 0 or 1: virtual stage
     * 0 alone): adaptive's cost models count a microbatch's patches on each of them */
    int tower_vstages;
    /* lookahead, adaptive: the estimated duration in seconds of pipeline rank `rank`'s task t (<= 0:
     * unknown); lookahead asks for this rank's tasks, adaptive's plan for every rank's. NULL = the
     * pipeline's own cost model: per (chunk, kind) seconds per unit of work (tokens, plus patches on the
     * stages with tower blocks), from the durations measured so far, this step's and earlier steps' (adaptive shares
     * every rank's model over the pipeline group at the start of each step). */
    double (*estimate)(void* ctx, int rank, PpTask t);
    void* estimate_ctx;
    /* adaptive: the message latency (s) its plan assumes between ranks (0 = none) */
    double plan_latency_s;
    /* Replay (docs/scheduler.md "The simulator's semantics"): when set, a task sleeps for replay[kind][rank * M + mb] * replay_scale
     * seconds (kind F, B, W; W NULL unless split) instead of computing; messages are the real ones. The
     * arrays must cover this rank's M of every step. */
    const double* replay[3];
    int replay_M;
    double replay_scale;
    /* Tensor parallelism: the TP ranks of this stage (NULL or one rank: none). They must run the same
     * task sequence (their split layers issue collectives). Leader-decides in `ready` mode: TP rank 0
     * runs the dispatcher and sends each choice (kind, chunk, microbatch) to its peers before it starts
     * the task; a peer keeps a receive for the next choice posted and runs exactly that task, waiting
     * for its inputs if they have not arrived there. The fixed modes need no messages (every TP rank
     * follows the same sequence). */
    Comm* tp;
    int tp_independent; /* tests only (the negative control): every TP rank dispatches on its own */
} PipelineConfig;

typedef struct {
    double loss_sum;    /* this rank's share of the loss sum (non-zero on the last stage only) */
    double busy_s;      /* time computing tasks */
    double wall_s;      /* step wall time on this rank (first task start .. last task end, incl. waits) */
    double wait_s;      /* time waiting for messages */
    int peak_inflight;  /* max microbatches in flight (F started, B not finished), first chunk */
    long decisions;
    long waits;         /* lookahead: decisions that stayed idle for an announced input */
    PpMode mode;        /* the mode the step ran under (adaptive: the plan's choice) */
    int reordered;      /* adaptive: the plan ran the step's microbatches in ends order (pp_plan_order): task,
                         * message and trace microbatch numbers were slots, slot s the plan's microbatch of
                         * the order (never under replay or with cfg.estimate) */
    double predicted[3];/* adaptive: predicted makespans (s) of ready, lookahead, fixed; NAN = none */
    PpCap cap;          /* the in-flight cap the step's ready / lookahead ran under (adaptive: its plan's, at most cfg.cap) */
    int learned;        /* adaptive: past steps its learner has observed (plan.h, PpPlanLearn) */
    double t_start;     /* rr_now() at the step's start on this rank (replay: makespans across ranks) */
    /* leader-decides (tp > 1, ready): choices sent (leader) or received (peer); the peer's time from a
     * choice's arrival until the chosen task's inputs were there; the time spent sending/receiving
     * choices (the coordination's own cost) */
    long tp_choices;
    double tp_wait_s, tp_coord_s;
} PipelineStepStats;

typedef struct Pipeline Pipeline;

/* stages[c] is chunk c of this rank (virtual stage c*P + rank), already initialised by the caller
 * with its layer range; `pipe` is the pipeline group (rank cfg->rank of cfg->P; not owned). Returns NULL
 * with a message in err when the hint, mode and shape do not fit, or when the combination would
 * deadlock (found by a dry run of the simulator on uniform durations for `M` microbatches). */
Pipeline* pipeline_create(const PipelineConfig* cfg, Stage** stages, Comm* pipe, int M, char* err, size_t err_len);
void pipeline_free(Pipeline* p);

/* From the next step on, call fn(ctx, c) during pipeline_step as soon as chunk c's weight gradients of
 * the step are final (its M-th W, or fused B, has run and its output is sent): the data-parallel
 * all-reduce of those gradients can start while the rank still runs other chunks' work (more_work = 1:
 * this rank has tasks of the step left). fn returning
 * -1 (with a message in err) fails the step. fn = NULL: no calls. */
typedef int (*PipelineGradsDone)(void* ctx, int chunk, int more_work, char* err, size_t err_len);
void pipeline_set_grads_done(Pipeline* p, PipelineGradsDone fn, void* ctx);

/* From the next step on, call fn(ctx, t) just before each task t runs (tests: a TP collective per task,
 * as split layers issue, and the record of the sequence). fn returning -1 (message in err) fails the
 * step. */
typedef int (*PipelineTaskHook)(void* ctx, PpTask t, char* err, size_t err_len);
void pipeline_set_task_hook(Pipeline* p, PipelineTaskHook fn, void* ctx);

/* The order the last successful pipeline_step ran its microbatches in: slot s held the plan's microbatch
 * order[s] (M entries, valid until the next step or pipeline_free), or NULL when it ran them as given
 * (PipelineStepStats.reordered = 0). */
const int* pipeline_step_order(const Pipeline* p);

/* adaptive's microbatch order for a step of mbs (M) under cfg (parallel.mode adaptive, neither replay nor an
 * estimate callback): returns 1 with perm (M; slot s runs microbatch perm[s]) the ends order, or 0 with perm
 * the identity. A function of the microbatches' sizes and cfg alone (pp_plan_order on fixed per-unit costs,
 * never the measured cost model), so the same on every rank, run and resume: docs/scheduler.md. */
int pipeline_plan_order(const PipelineConfig* cfg, const Microbatch* mbs, int M, int* perm);
/* pipeline_plan_order's deterministic cost model: det gets P x M durations (F, B, and W where the backward splits) of
 * each rank's tasks, its work units (tokens, plus patches on each virtual stage that runs tower blocks, plus 1, summed
 * over its chunks) times a weight per kind (F 1, B 2; split: B 1, W 1). Free with pp_durations_free. */
void pipeline_order_costs(const PipelineConfig* cfg, const Microbatch* mbs, int M, PpDurations* det);

/* Whether a hint needs the split backward (it schedules W tasks). */
int pipeline_hint_splits(PpHint h);

/* Run every task of this rank for the M microbatches of one step (mbs: the whole plan, identical on
 * every rank; adaptive may run them in another order, the same on every rank: PipelineStepStats.reordered,
 * pipeline_step_order). loss_scale = 1 / supervised targets of the whole step. `trace` (may be NULL) records
 * tasks and messages, `step` numbers them. dump_dir (may be NULL): the first and the last stage write
 * microbatch-{m}.pp{rank}c{chunk}.safetensors there after each forward (inputs; logits and loss on the
 * last stage: README "Step dumps"). Returns 0, or -1 with a message naming the rank (a protocol error,
 * a microbatch over the budget, a lost peer); the pipeline is then unusable. */
int pipeline_step(Pipeline* p, const Microbatch* mbs, int M, float loss_scale, PpTrace* trace, int step,
                  const char* dump_dir, PipelineStepStats* out, char* err, size_t err_len);

#endif
