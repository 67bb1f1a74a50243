/* exec.h — the step executor: one signature for every way of running a training step (after
 * Megatron's get_forward_backward_func). The trainer loop calls forward_backward, then the hooks (the
 * data-parallel gradient reduction goes there), then the gradient norm and the optimiser step over
 * the executor's stages, and never asks how the step was run.
 *
 * Implementations: one process (exec_single.c) and the RRFP pipeline (exec_pipeline.c). */
#ifndef RRFP_TRAIN_EXEC_H
#define RRFP_TRAIN_EXEC_H

#include <stddef.h>

#include "data/batch.h"
#include "engine/checkpoint.h"
#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/train/recipe.h"

typedef struct StepExec StepExec;
typedef struct ZeroOpt ZeroOpt; /* the distributed optimizer (exec_zero.c) */

/* A step of its own after forward-backward and before the gradient norm (the DP all-reduce). */
typedef struct {
    int (*fn)(StepExec* ex, void* ctx, char* err, size_t err_len);
    void* ctx;
    void (*free)(void* ctx); /* may be NULL; step_exec_free_hooks */
} StepHook;

/* Called by an executor during forward_backward as soon as chunk c's gradients of the step are final
 * (its last W, or fused B, has run), so the step end can start on them early; more_work = 1 when the
 * executor still has work of the step left (the start overlaps it). Returns 0, or -1 with a
 * message (the step fails). */
typedef int (*StepGradsDone)(void* ctx, int chunk, int more_work, char* err, size_t err_len);
#define STEP_EXEC_MAX_HOOKS 4

struct StepExec {
    const char* name;   /* "one process", "pipeline" */
    Stage** stages;     /* this rank's model chunks (one in one process) */
    int n_stages;
    Comm* norm_group;   /* sums the gradient norm over the ranks that hold distinct tensors */
    int log_rank;       /* 1: this rank writes the log and the metrics */
    int decode_images;  /* this rank's stages use pixels (the first pipeline stage) */
    double bubble;      /* of the last step, across the pipeline; < 0 when not pipelined */
    int quiet;          /* 1 while the trainer runs a held-out evaluation through forward_backward: no trace
                         * events (the timeline shows training steps only) */
    StepHook hooks[STEP_EXEC_MAX_HOOKS];
    int n_hooks;
    ZeroOpt* zero;      /* parallel.zero = 1 under dp > 1 (step_exec_add_zero), else NULL */

    /* Zero the gradients, then forward + backward of every microbatch of the plan, gradients scaled by
     * `scale` (1 / supervised targets of the step). *loss_sum: the step's summed loss, the same on
     * every rank. dump_dir (may be NULL): write this executor's microbatch files of the step dump.
     * Returns 0, or -1 with a message. */
    int (*forward_backward)(StepExec* ex, const StepPlan* plan, float scale, int step, const char* dump_dir,
                            double* loss_sum, char* err, size_t err_len);
    /* Write this executor's parameters (grads = 0) or gradients (grads = 1) into dump folder dir. */
    int (*dump_params)(StepExec* ex, const char* dir, int grads, char* err, size_t err_len);
    /* Save a checkpoint of every stage under root (the step folder committed atomically, written in
     * *out); load one of any layout from dir. Collective over the executor's ranks. */
    int (*save)(StepExec* ex, const char* root, const CheckpointState* cs, char* out, size_t out_len, char* err,
                size_t err_len);
    int (*load)(StepExec* ex, const char* dir, CheckpointState* cs, char* err, size_t err_len);
    /* May be NULL (the executor knows no earlier point than the end of forward_backward): from the
     * next step on, call fn(ctx, c) when chunk c's gradients are final. */
    void (*set_grads_done)(StepExec* ex, StepGradsDone fn, void* ctx);
    void (*free)(StepExec* ex);
    /* May be NULL: write what the executor keeps for the end of the run (the pipeline's trace file).
     * Returns 0, or -1 with a message naming the file; free() still frees what is left. */
    int (*finish)(StepExec* ex, char* err, size_t err_len);
};

/* The trainer's side of a step, the same for every executor. */
int step_exec_run_hooks(StepExec* ex, char* err, size_t err_len);
/* Every stage's bf16 compute copy is current (engine/params.h, params_compute_stale): 0, or -1 with a
 * message naming the first stale tensor. The trainer calls it before every step and evaluation. */
int step_exec_check_compute(const StepExec* ex, char* err, size_t err_len);
/* Free every hook's ctx (before ex->free). */
void step_exec_free_hooks(StepExec* ex);

/* Tied embeddings under a pipeline (exec_tied.c, model.tie_embeddings): add the step-end hook that sums the
 * gradient of text.embed.weight held by the first stage (the lookup) and its copy on the last stage (the LM
 * head), so both hold the one-process gradient; add it after step_exec_add_dp_reduce (the DP buckets may
 * still be in flight on those gradients until its hook ends). pipe: the pipeline group of this (t, d) rank
 * (NULL when P = 1), p of P its rank; collective over pipe (the first and last rank are split off as the
 * embedding group). Does nothing for an untied model or a stage holding both ends. Returns 0, or -1 with a
 * message. */
int step_exec_add_tied_embed(StepExec* ex, const ModelConfig* mc, Comm* pipe, int p, int P, char* err,
                             size_t err_len);

/* Data parallelism (exec_dp.c): add the step-end hook that sums every stage's gradients over the
 * replicas of `dp` (in place; the loss scale already divides by the global step's supervised targets,
 * so the sum is the one-process gradient). The gradient block of each stage is cut into buckets of
 * bucket_mb MiB, each all-reduced with one CommOps.iallreduce; when the executor reports a chunk's
 * gradients final (set_grads_done) its buckets start at once, during the rest of forward_backward,
 * otherwise (or with overlap = 0, parallel.dp_overlap) the hook starts them. Buckets start in one fixed order on every replica (chunks from the
 * last to the first, the order their backwards finish), so the collectives match whatever order the
 * replicas' dispatchers ran. The hook waits for all of them (at most timeout_s, then an error naming
 * the group). Device backends reduce through a host copy (MPI is not assumed CUDA-aware).
 * Returns 0, or -1 with a message (no hook slot left). Does nothing when dp has one rank. */
int step_exec_add_dp_reduce(StepExec* ex, Comm* dp, double bucket_mb, int overlap, double timeout_s, char* err,
                            size_t err_len);
/* Buckets of the last step: how many, and how many started while the executor still had work of the
 * step left (overlapping it). */
void step_exec_dp_stats(const StepExec* ex, int* buckets, int* early);
/* The distributed optimizer (exec_zero.c, parallel.zero = 1; docs/parallel.md "The distributed optimizer"):
 * each stage's trainable elements (grad order) cut into dp contiguous shards, this replica holding its
 * shard's AdamW moments (and, in bf16, its f32 masters: pt->data is freed, the frozen tensors' masters
 * kept packed). Adds the step-end hook that reduce-scatters the grad blocks over `dp` (in place, started
 * early as step_exec_add_dp_reduce's buckets are when overlap = 1; add it after step_exec_add_tied_embed,
 * whose sum must precede it) and makes step_exec_grad_norm / step_exec_optimizer work on the shard (the
 * norm summed over the replicas too, AdamW on the shard, then the updated weights all-gathered). The
 * executor's tables must have no moments (params_alloc_optimizer not called); resume_dir (NULL: fresh
 * zeros) gives the shard's moments (checkpoint_load_moments_range) after the executor loaded its values.
 * Does nothing when dp has one rank. Returns 0, or -1 with a message. */
int step_exec_add_zero(StepExec* ex, Comm* dp, const Recipe* r, int overlap, const char* resume_dir, char* err,
                       size_t err_len);
int step_exec_zero_grad_norm(ZeroOpt* z, double* norm, char* err, size_t err_len);
int step_exec_zero_step(ZeroOpt* z, const Recipe* r, float lr, int t, float clip, char* err, size_t err_len);
/* Around a step dump (collective over dp): grads = 1 gathers every replica's reduced shard into each grad
 * block (the whole step's gradients); grads = 0 makes each bf16 table's pt->data whole on the backend
 * until dump_end. */
int step_exec_zero_dump_begin(ZeroOpt* z, int grads, char* err, size_t err_len);
void step_exec_zero_dump_end(ZeroOpt* z);
/* Around replica 0's checkpoint write (collective over dp): the masters and moments gathered into host
 * arrays that replica 0's tables point at (ParamTable.be NULL: checkpoint.c reads them as they are) until
 * save_end, so the checkpoint is the one zero = 0 writes. */
int step_exec_zero_save_begin(ZeroOpt* z, char* err, size_t err_len);
void step_exec_zero_save_end(ZeroOpt* z);
/* Stage `stage`'s trainable elements, this replica's shard of them (the moments it holds) and the f32
 * masters it holds (the shard in bf16, every value in fp32). */
void step_exec_zero_sizes(const ZeroOpt* z, int stage, size_t* total, size_t* shard, size_t* masters);
/* Stages whose reduce-scatter started while the executor still had work of the last step left. */
int step_exec_zero_early(const ZeroOpt* z);
/* The updated weights' all-gather (started at the end of step_exec_zero_step, in rounds of parallel.dp_bucket_mb
 * MiB per replica, in place in the grad block): with parallel.dp_overlap (the default) it completes inside the
 * next forward, each part of a stage (the tower and embedding, each LM block, the rest) waiting only for the rounds
 * holding its own tensors (Stage.param_wait); then the grad block is zeroed. pending: stage `stage`'s gather is not
 * all in (the executor leaves its grad block alone). complete: every stage's in now (collective-free: every replica
 * issued them; anything reading the weights outside a forward calls it: checkpoint, dump). stats: over the run so
 * far, rounds issued, rounds unpacked inside a forward, of them after the stage's first LM block had run (the later
 * blocks waiting for theirs), rounds still in flight when first needed. */
int step_exec_zero_pending(const ZeroOpt* z, int stage);
int step_exec_zero_complete(ZeroOpt* z, char* err, size_t err_len);
void step_exec_zero_gather_stats(const ZeroOpt* z, long* rounds, long* in_forward, long* late, long* in_flight);
void step_exec_zero_free(void* z);
/* Global gradient norm before clipping: sum of squares over the stages (on their backend), summed over
 * norm_group. Returns 0, or -1 with a message. */
int step_exec_grad_norm(StepExec* ex, double* norm, char* err, size_t err_len);
/* Clip by `clip` (< 1) and AdamW at optimiser step t on every stage (under the distributed optimizer: on
 * the shards, then the all-gather). Returns 0, or -1 with a message. */
int step_exec_optimizer(StepExec* ex, const Recipe* r, float lr, int t, float clip, char* err, size_t err_len);

/* One process: the whole model in one Stage with one microbatch in flight. optimizer = 0 (eval, generate): the
 * forward only (stage_init_forward): no gradient buffer and no AdamW moments (three copies of the model's trainable
 * values, zeroed, never read by a forward); forward_backward on it is a programmer error (RR_ASSERT). */
StepExec* step_exec_single_create(const Recipe* r, const ModelConfig* mc, const Backend* be, int optimizer, char* err,
                                  size_t err_len);
/* The single executor's activations (eval runs the model through them). */
StageActs* step_exec_single_acts(StepExec* ex);

/* The RRFP pipeline over the grid's pipeline group: this rank's chunks, the runtime and (when
 * runtime.trace) the Chrome trace in run_dir. Collective over the pipeline. */
StepExec* step_exec_pipeline_create(const Recipe* r, const ModelConfig* mc, const Backend* be, CommGrid* grid,
                                    const char* run_dir, char* err, size_t err_len);

#endif
