/* trainer.h — the training job (runtime/train/, docs/design.md "Layout"): the loop of steps (the plan from
 * the batch source, the step executor's forward-backward, its hooks, the global gradient norm,
 * clipping, AdamW, the LR schedule), checkpoints, step dumps, metrics and held-out evaluation. The
 * loop is the same for every layout: how a step runs is the StepExec's business (exec.h).
 *
 * Errors are returned with a message; runtime/cli/ decides to exit (and, under mpirun, to end every
 * rank). */
#ifndef RRFP_TRAINER_H
#define RRFP_TRAINER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/batch.h"
#include "engine/checkpoint.h"
#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/train/exec.h"
#include "runtime/train/layout.h"
#include "runtime/train/metrics.h"
#include "runtime/train/recipe.h"
#include "runtime/train/rundir.h"

/* ---- batch sources from the recipe (data/batch.h) ---- */
/* Both give data-parallel replica dp_rank of dp_size its own share of every step (0 and 1 without DP).
 * The synthetic colour task with the recipe's shapes; heldout = 1: the held-out stream. Replica d draws
 * microbatches d, d + dp_size, ... of the global step, so the replicas' union is the one-process step
 * with dp_size x data.microbatches microbatches. */
int trainer_source_synthetic(BatchSource* src, const Recipe* r, int vocab, int heldout, int dp_rank, int dp_size,
                             char* err, size_t err_len);
/* The loader over `shards` with the recipe's packing; eval = 1 packs in stream order (fifo);
 * decode_images = 0 leaves the pixels out (pipeline ranks after the first never use them). Like the
 * synthetic source, replica d keeps microbatches d, d + dp_size, ... of the global step, packed as one
 * process with dp_size x data.microbatches packs it (data/loader.h), and decodes only those. */
int trainer_source_shards(BatchSource* src, const Recipe* r, const char* shards, uint64_t tok_hash, int eval,
                          int decode_images, int dp_rank, int dp_size, char* err, size_t err_len);

/* train.epochs > 0: set train.steps (origin "train.epochs") to the steps that pass that many times over
 * data.shards at data.microbatches x dp microbatches per step (one epoch packed from the index's costs
 * with the recipe's policy: an estimate, as the loader packs a shuffled stream) and print how on `log`
 * (may be NULL). Call before recipe_validate's last pass. Returns 0, or -1 with a message. */
int trainer_epochs_to_steps(Recipe* r, int dp, FILE* log, char* err, size_t err_len);

typedef struct {
    const Recipe* r;
    ModelConfig mc;
    CommGrid grid;    /* the rank grid (a world of one without mpirun) */
    StepExec* ex;     /* how a step runs: one process or the pipeline */
    BatchSource src;  /* training data (none for eval) */
    int64_t step;     /* steps completed */
    int64_t opt_step; /* AdamW t */
    int64_t last_step; /* train.stop_at or train.steps */
    uint64_t tok_hash; /* data.tokenizer's hash (0 for the synthetic source) */
    char run_dir[RECIPE_STR], ckpt_root[RECIPE_STR + 32];
    Metrics metrics;
    double t_begin;
    int64_t steps_timed;
    double time_timed;
    int lock_fd;      /* RUN_DIR/.lock held by world rank 0 (-1: none) */
    int ckpt_lock_fd; /* the checkpoint folder's .lock held by world rank 0 (-1: none, or the run folder's) */
    uint64_t run_id;  /* this job's identity in its checkpoints' files (world rank 0's, broadcast) */
    BatchSource eval_src; /* train.eval_every: the held-out stream, this replica's share (free NULL: none) */
    char* eval_pos;       /* its position at the start: every evaluation scores the same samples */
    int64_t eval_target;  /* samples per evaluation (all replicas') */
    int64_t samples_seen; /* samples of every replica trained on so far (the epoch's numerator) */
    RunStart start;   /* this run's identity and the checkpoint it resumes ("" = fresh), from world rank 0 */
    char* data_record; /* what shaped data.shards (runtime/train/trained.h), each checkpoint's "data" (NULL: none) */
    /* runtime.profile: on since the first step; totals of the steps after this process's first */
    int profiling;
    int64_t prof_steps;
    double prof_ms[PROF_KINDS];
    long prof_launches[PROF_KINDS];
    int data_bound_said; /* the warning that a step waited for the loader, given once a run */
} Trainer;

/* Build the model (this rank's part of it), the batch source and the run folder; resume when
 * checkpoint.resume is set. `world` is the job's world group (comm_mpi_world, or comm_self). eval_only:
 * one process, no training data, the checkpoint's parameters whatever the recipe hash (any checkpoint, an
 * import included: its values only, checkpoint_load_model), the metrics file left alone. Collective over
 * world. Returns 0, or -1 with a message. */
int trainer_init(Trainer* t, const Recipe* r, Comm* world, int eval_only, char* err, size_t err_len);
/* One optimiser step (and the dump when train.dump_step is this step). Fills s. */
int trainer_step(Trainer* t, StepStats* s, char* err, size_t err_len);
/* Checkpoint the state after t->step steps (and prune). */
int trainer_checkpoint(Trainer* t, char* err, size_t err_len);
void trainer_free(Trainer* t);
/* The whole run: init, steps with log lines and metrics, checkpoints. Log lines go to `log` on the log
 * rank. `stop` (may be NULL) is set by a signal handler: at the end of the step in which any rank of the
 * world has it set, every rank writes a checkpoint and returns 1. Returns 0 when the run is done, 1 when
 * stopped that way, or -1 with a message (the caller ends the job). */
int trainer_run(const Recipe* r, Comm* world, FILE* log, const volatile sig_atomic_t* stop, char* err,
                size_t err_len);

/* Held-out evaluation. Greedy answer = the argmax token at every answer position given the reference
 * prefix (teacher forcing), which is exactly greedy decoding's exact match: a sample is correct
 * when all its supervised targets are argmax predictions. Chance: synthetic, 1 / 8 colours (and the
 * same answers scored as 8 candidates); shards, per question (the tokens between the last image
 * position and the answer) 1 / number of distinct answers to it among the held-out samples. */
typedef struct {
    int64_t samples, greedy_correct, candidate_correct;
    double chance;       /* expected accuracy of a uniform guess among the candidates */
    double loss;         /* mean CE over supervised targets */
    int64_t supervised;
    int candidates;      /* 0 when candidate scoring does not apply */
    int64_t skipped;     /* held-out samples skipped (damaged): each sample counts once, never twice */
    /* any-resolution models (model.anyres), over the samples counted, as the model's forward laid them out
     * (its per-position gather indices, docs/anyres.md "The model"): images, tower images (base images and
     * tiles), LM positions taking a tower feature, and those taking image_newline; 0 otherwise */
    int64_t ar_images, ar_tower_images, ar_features, ar_newlines;
} EvalResult;
/* Evaluate t's current parameters (t from trainer_init with eval_only) on up to max_samples held-out
 * samples: the synthetic source's held-out stream, or data.eval_shards. predictions (may be NULL) gets
 * one JSON line per sample: {"sample_index", "correct", "predicted": [token ids]}. Returns 0, or -1
 * with a message. */
int trainer_eval(Trainer* t, int64_t max_samples, FILE* predictions, EvalResult* res, char* err, size_t err_len);

/* Set OpenMP and BLAS threads (0 = one per core). */
void trainer_set_threads(int n);

#endif
