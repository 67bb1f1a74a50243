/* trainer.h — single-process training: the step (plan from the loader, forward + backward of every
 * microbatch through the Stage API, global grad norm, clipping, AdamW, LR schedule), checkpoints,
 * dumps and metrics. The CLI (cmd_train.c) only parses arguments and calls these; the pipeline
 * runtime reuses the step pieces. */
#ifndef RRFP_TRAINER_H
#define RRFP_TRAINER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/microbatch.h"
#include "engine/params.h"
#include "runtime/model.h"
#include "engine/checkpoint.h"
#include "runtime/recipe.h"

/* Parameter counts of a recipe's model by component (doubles: a 7B count overflows nothing). */
typedef struct {
    double vision_embed, vision_block, vision_final, vision;
    double projector;
    double text_embed, text_block, text_final, head, text;
    double total;
} RecipeParamCounts;
void recipe_param_counts(const Recipe* r, int vocab, RecipeParamCounts* c);
/* Print parameters per component and memory per pipeline rank for the recipe's layout, without
 * allocating anything. Returns 0, or -1 (message on stderr) when the layout is invalid. */
int recipe_dry_run(const Recipe* r, int vocab, FILE* out);

/* Vocabulary size of data.tokenizer (largest id + 1 over the model vocabulary and the added
 * tokens of the tokenizer.json), without building the tokenizer. Returns it, or -1 with a message. */
int trainer_tokenizer_vocab(const Recipe* r, char* err, size_t err_len);

/* ---- metrics (metrics.c): one JSON object per step, beside the checkpoints ---- */
typedef struct {
    int64_t step;         /* 1-based step just finished */
    float loss;           /* sum CE / supervised targets of the step */
    double lr, grad_norm; /* grad_norm before clipping */
    int64_t tokens;       /* LM positions in the step */
    int64_t supervised;   /* loss denominator */
    int64_t patches;      /* image patches in the step */
    double step_time_s, tokens_per_s, data_wait_s;
    double peak_mem_mb;   /* process peak RSS */
    double eta_s;
    double bubble;        /* pipeline bubble fraction, < 0 when not pipelined */
    int64_t skipped;      /* damaged samples skipped so far */
} StepStats;

typedef struct {
    FILE* f;
    char path[4096];
} Metrics;
/* Open PATH for appending. resume_step > 0 keeps only the lines of steps <= resume_step (a resumed
 * run rewrites what came after its checkpoint); 0 starts the file afresh. Returns 0, or -1 with err. */
int metrics_open(Metrics* m, const char* path, int64_t resume_step, char* err, size_t err_len);
/* Append one line; the loss also as a C99 hex float ("loss_hex") so runs compare bit for bit. */
void metrics_write(Metrics* m, const StepStats* s);
void metrics_close(Metrics* m);
/* Format one human log line (step, loss, lr, grad norm, tokens/s, step time, bubble, peak mem, ETA). */
void metrics_log_line(char* out, size_t n, const StepStats* s, int64_t total_steps);
/* Peak resident set size of this process in MiB (from /proc/self/status VmHWM). */
double metrics_peak_rss_mb(void);

/* ---- step pieces (the pipeline runtime reuses these) ---- */
/* Sum of squares of a stage's gradients, on the stage's backend (Backend.sum_squares: the same bits
 * for any thread count, which a bit-exact resume needs of the clipping factor). */
double trainer_grad_sum_squares(const Stage* st);
/* PyTorch's clip_grad_norm_ factor: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0. */
float trainer_clip_coef(double norm, double max_norm);
/* Scale a stage's gradients by `clip` (when < 1), then AdamW on every tensor (decay per ParamSpec) at
 * optimiser step t (1-based) with learning rate lr and the recipe's betas, eps and weight decay; all
 * on the stage's backend (st->be): parameters, gradients and moments stay in its memory. */
void trainer_optimizer_step(Stage* st, const Recipe* r, float lr, int t, float clip);

/* ---- batch sources: the step plan (all microbatches of a step) ---- */
typedef struct {
    Microbatch* mbs; /* (M) */
    int M;
    int64_t n_supervised; /* loss denominator: supervised targets in the whole step */
    int64_t tokens, patches, samples;
} StepPlan;

typedef struct BatchSource {
    void* self;
    const char* name;
    /* The next step's plan; valid until the next call. Returns 0, or -1 with err. */
    int (*next)(struct BatchSource* s, StepPlan* plan, char* err, size_t err_len);
    /* Position (JSON text, malloc'd) such that seek() to it replays the same following steps. */
    char* (*position)(struct BatchSource* s);
    int (*seek)(struct BatchSource* s, const char* json, char* err, size_t err_len);
    int64_t (*skipped)(struct BatchSource* s); /* damaged samples skipped so far */
    int64_t dataset_samples; /* samples in one epoch (0 = endless, synthetic) */
    void (*free)(struct BatchSource* s);
} BatchSource;

/* Generated samples (data.source = synthetic): each image is one of 8 colours plus noise, the prompt
 * a few filler tokens and a question token, the supervised answer the colour's token and an end
 * token, so a model learns only by looking at the image. Deterministic in (data.seed, step). */
int batch_source_synthetic(BatchSource* src, const Recipe* r, int vocab, char* err, size_t err_len);
/* The loader over data.shards (data.source = shards), checking the shards against data.tokenizer. */
int batch_source_shards(BatchSource* src, const Recipe* r, char* err, size_t err_len);
/* The loader over `shards` with the recipe's packing; eval = 1 packs in stream order (fifo). */
int batch_source_shards_ex(BatchSource* src, const Recipe* r, const char* shards, uint64_t tok_hash, int eval,
                           char* err, size_t err_len);

/* ---- the single-process trainer ---- */
typedef struct {
    const Recipe* r;
    ModelConfig mc;
    Stage st;        /* the whole model: LM blocks [0, Lt) */
    StageActs acts;  /* one microbatch in flight */
    BatchSource src;
    int64_t step;     /* steps completed */
    int64_t opt_step; /* AdamW t */
    int64_t last_step; /* train.stop_at or train.steps */
    uint64_t tok_hash; /* data.tokenizer's hash (0 for the synthetic source) */
    char run_dir[RECIPE_STR], ckpt_root[RECIPE_STR + 32];
    Metrics metrics;
    double t_begin;
    int64_t steps_timed;
    double time_timed;
    /* pipeline (parallel.pp > 1, under mpirun; runtime/trainer_pp.c): st is this rank's chunk 0,
     * chunks[c] (c >= 1) its further chunks; pl the runtime; trace the Chrome trace (runtime.trace) */
    int pp, pp_rank, n_chunks;
    Stage** chunks;
    struct Pipeline* pl;
    struct PpTrace* trace;
    double bubble; /* of the last step, across all ranks */
} Trainer;

/* ---- pipeline training (runtime/trainer_pp.c); every call is collective over the pipeline ---- */
/* MPI must be initialised. Builds this rank's chunks (layers from parallel.layers or the cost
 * model), the runtime and the trace. Returns 0, or -1 with a message. */
int trainer_pp_init(Trainer* t, const Backend* be, char* err, size_t err_len);
/* Load this rank's tensors from a checkpoint of any layout. */
int trainer_pp_load(Trainer* t, const char* dir, CheckpointState* cs, char* err, size_t err_len);
/* Forward + backward of the plan through the pipeline; *loss_sum and *norm (global gradient norm
 * before clipping) are the same on every rank; t->bubble is set. */
int trainer_pp_compute(Trainer* t, const StepPlan* plan, float scale, double* loss_sum, double* norm, char* err,
                       size_t err_len);
/* Clip by `clip` and AdamW on every chunk of this rank. */
void trainer_pp_optimizer(Trainer* t, float lr, float clip);
/* Every rank writes its shards; rank 0 commits the folder. */
int trainer_pp_checkpoint(Trainer* t, const CheckpointState* cs, char* out, size_t out_len, char* err,
                          size_t err_len);
void trainer_pp_free(Trainer* t);

/* Model config of a recipe (vocab resolved). */
ModelConfig trainer_model_config(const Recipe* r, int vocab);
/* Build the model, the batch source and the run folder; resume when checkpoint.resume is set.
 * eval_only: load the checkpoint's parameters whatever the recipe hash, and leave the metrics file
 * alone. Returns 0, or -1 with a message. */
int trainer_init(Trainer* t, const Recipe* r, int eval_only, char* err, size_t err_len);
/* One optimiser step (and the dump when train.dump_step is this step). Fills s. */
int trainer_step(Trainer* t, StepStats* s, char* err, size_t err_len);
/* Checkpoint the state after t->step steps (and prune). */
int trainer_checkpoint(Trainer* t, char* err, size_t err_len);
void trainer_free(Trainer* t);
/* The whole run: init, steps with log lines and metrics, checkpoints. Returns the exit status. */
int trainer_run(const Recipe* r, FILE* log);
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
} EvalResult;
/* Evaluate t's current parameters on up to max_samples held-out samples: the synthetic source's
 * held-out stream, or data.eval_shards. predictions (may be NULL) gets one JSON line per sample:
 * {"sample_index", "correct", "predicted": [token ids]}. Returns 0, or -1 with a message. */
int trainer_eval(Trainer* t, int64_t max_samples, FILE* predictions, EvalResult* res, char* err, size_t err_len);

/* Set OpenMP and BLAS threads (0 = one per core). */
void trainer_set_threads(int n);

#endif
