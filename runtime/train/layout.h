/* layout.h — a recipe's model and parallel layout, computed in one place (layout.c). */
#ifndef RRFP_TRAIN_LAYOUT_H
#define RRFP_TRAIN_LAYOUT_H

#include <stddef.h>
#include <stdio.h>

#include "runtime/model/model.h"
#include "runtime/train/recipe.h"

/* Model config of a recipe (vocab resolved). */
ModelConfig train_model_config(const Recipe* r, int vocab);
/* Vocabulary size of data.tokenizer, as the trainer's tokenizer gives it (the file's ids checked as training
 * checks them). Returns it, or -1 with a message. */
int train_tokenizer_vocab(const Recipe* r, char* err, size_t err_len);
/* LM layers per virtual stage (pp x chunks of them): parallel.layers, or balanced by the cost model at the
 * step's token budget, assuming half of the LM positions are image patches, images of (min + max) / 2
 * patches and samples of 256 positions. The one split the trainer and the dry run use. Returns 0, or -1
 * with a message. */
int train_layer_split(const Recipe* r, const ModelConfig* mc, int* layers, char* err, size_t err_len);
/* The tower over pipeline stages (docs/anyres.md "The tower over stages"), after train_layer_split: tower[S] gets the tower
 * blocks of each virtual stage (parallel.tower_layers, or with parallel.tower_split = auto the cost model's split of
 * the chain, whose LM layers then replace layers[]; under a memory budget it does not meet, the refit's split of the
 * chain where one moving tower blocks fits and is the shortest). Returns 1 when the tower runs over stages (stages before the first
 * with LM layers hold tower blocks alone: Stage.tower_only), 0 when it stays on stage 0 (tower = Lv, 0, ...; note may
 * say why the cost model's split is not run), -1 with a message (a split that does not exist). */
int train_tower_split(const Recipe* r, const ModelConfig* mc, int* layers, int* tower, char* note, size_t note_len, char* err,
                      size_t err_len);
/* Bytes one pipeline rank allocates for the recipe's layout (f32 weights, gradients, AdamW m + v of its
 * stages; activations of its stages for a microbatch of patches only, times the microbatches in flight),
 * as the dry run prints them. `rank` is the pipeline stage (0 .. pp - 1). Returns 0, or -1 with a
 * message (a layer split that does not exist). */
typedef struct {
    double params;   /* parameter count of the rank's stages (/ tp) */
    double trainable; /* of which not frozen (train.freeze): they alone have gradients and AdamW moments */
    double weights, grads, adam, acts, total; /* bytes (weights: the f32 master and, under bf16, the compute copy) */
    double compute_copy, scratch; /* bf16: the compute copy (in weights); the backend's scratch (the CUDA GEMM operands')
                                   * and, at pp > 1, the pipeline's message buffers (in total) */
    int layers;      /* LM layers of the rank */
} TrainRankBytes;
int train_rank_bytes(const Recipe* r, const ModelConfig* mc, int rank, TrainRankBytes* out, char* err, size_t err_len);
/* The memory one rank may hold, in GiB, that the layer split must fit: runtime.memory_budget when set; otherwise,
 * on a device (Recipe.device_memory, from guard_device_memory), its memory less TRAIN_DEVICE_RESERVE of it, unless
 * runtime.allow_overcommit; otherwise 0 (no budget: the cpu backend has no default). */
#define TRAIN_DEVICE_RESERVE 0.05 /* of the device's memory: the CUDA context, cuBLAS / cuDNN workspaces, NCCL's buffers
                                   * and the allocator's rounding, none of which the dry run's figures count */
double train_budget_gib(const Recipe* r);
/* "12.3 MiB" / "1.50 GiB" */
void train_fmt_bytes(char* s, size_t n, double x);

/* Print parameters per component and memory per pipeline rank for the recipe's layout, allocating
 * nothing. Returns 0, or -1 with a message. */
int train_dry_run(const Recipe* r, int vocab, FILE* out, char* err, size_t err_len);

#endif
