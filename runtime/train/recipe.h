/* recipe.h — training recipes: INI files (parsed with inih) plus `--set section.key=value`
 * overrides, validated key by key and across keys. Every key lives in one table (recipe.c) that
 * also feeds recipes/README.md's documentation test and `rrfp-mm train --print-recipe`.
 *
 * Errors name where the offending value came from: "FILE:LINE" for a recipe file, "--set" for an
 * override, "default" for an untouched default; then the key, the value and what is allowed. */
#ifndef RRFP_RECIPE_H
#define RRFP_RECIPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"

#define RECIPE_STR 512
#define RECIPE_MAX_KEYS 128

typedef struct {
    /* [model] — docs/model.md */
    int vision_width;  /* Dv */
    int vision_layers; /* Lv */
    int vision_heads;  /* Hv */
    int patch;         /* p */
    int text_width;    /* Dt */
    int text_layers;   /* Lt */
    int text_heads;    /* Ht */
    int ffn_hidden;    /* F (SwiGLU hidden) */
    int vocab;         /* V; 0 = take it from data.tokenizer */
    int64_t seed;      /* initialisation seed */
    double rms_eps;    /* the LM's RMSNorm eps (1e-5) */
    double rope_base;  /* the LM's RoPE base theta (10000) */
    char vision_arch[16];      /* rope2d | clip */
    int vision_feature_layer;  /* CLIP: hidden_states index of the features (-2) */
    int vision_image_size;     /* CLIP: the position grid's image side (336) */
    char projector_act[16];    /* gelu_tanh | gelu */
    int anyres;                /* 0, or the most tower images of one any-resolution image (docs/anyres.md) */
    int text_kv_heads; /* LM key/value heads (0 = text_heads) */
    int text_qkv_bias, text_o_bias; /* LM attention biases */
    int tie_embeddings;             /* LM head = token embedding */
    char rope_type[16];             /* default | llama3 */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;

    /* [data] */
    char source[16];            /* shards | synthetic */
    int fixed_batch;            /* every step reuses the first step's plan */
    char synthetic_plan[RECIPE_STR]; /* "" or a file of sample shapes for the synthetic source (benchmarks) */
    char shards[RECIPE_STR];    /* folder of .rrs shards (or one shard) */
    char tokenizer[RECIPE_STR]; /* tokenizer.json the shards were packed with */
    int microbatch_tokens;      /* LM tokens (text + image) per microbatch */
    int microbatches;           /* microbatches per step (per DP rank) */
    char policy[16];            /* fifo | ffd | balanced */
    int window;                 /* ffd / balanced look-ahead window in samples */
    int workers;                /* decode threads */
    int64_t data_seed;          /* shuffling seed */
    int min_patches, max_patches;
    char on_error[8];           /* skip | fatal */
    char eval_shards[RECIPE_STR]; /* shards of the held-out QA for `rrfp-mm eval` ("" = none) */

    /* [train] */
    int steps;            /* total optimiser steps (sets the LR schedule) */
    double epochs;        /* > 0: passes over the data set; steps derived from it (trainer_epochs_to_steps) */
    int eval_every;       /* held-out loss every N steps (0 = never) */
    int eval_samples;     /* held-out samples per evaluation (0 = the eval shards once; synthetic 256) */
    int stop_at;          /* stop after this step (0 = steps); for time-sliced jobs and resume tests */
    int log_every;
    int checkpoint_every; /* 0 = only at the end */
    int dump_step;        /* -1 = none */
    char run_dir[RECIPE_STR];
    char freeze[256];             /* comma-separated parameter-name prefixes that do not train ("" = none) */
    char init_from[RECIPE_STR];   /* checkpoint folder whose matching tensors start this run ("" = none) */
    int overwrite;                /* a fresh start moves a used run folder's contents aside */
    char recompute[12];           /* none | selective | full: activation recompute (recipe_recompute) */
    char recompute_lm[12], recompute_tower[12]; /* same | none | selective | full: per component */

    /* [optim] — AdamW, docs/model.md "Initialisation and the optimiser" */
    double lr, min_lr;
    char schedule[16];   /* cosine | linear | constant (after the warm-up) */
    LrSchedule lr_schedule; /* optim.schedule as the optimiser takes it, set once by recipe_validate */
    double projector_lr; /* projector.* parameters' peak LR (0 = lr) */
    int warmup;
    double beta1, beta2, eps, weight_decay, grad_clip;

    /* [parallel] */
    int pp, tp, dp, chunks;
    char layers[256]; /* LM layers per virtual stage ("" = automatic) */
    char tower_split[8];    /* off | auto: the tower over pipeline stages (layout.h train_tower_split) */
    char tower_layers[256]; /* tower blocks per virtual stage ("" = tower_split) */
    char partition[8];      /* balance | path: the automatic split's objective (partition.h partition_auto_path) */
    char hint[24]; /* gpipe | 1f1b | interleaved-1f1b | zb-h1 | bf | bfw */
    char mode[16]; /* fixed-sync | fixed | ready | lookahead | adaptive */
    int reorder;   /* adaptive may run a step's microbatches in its ends order (parallel.reorder) */

    /* [runtime] */
    char backend[8]; /* cpu | cuda */
    char precision[8]; /* fp32 | bf16 */
    char comm[8];      /* mpi | nccl: what carries activations, gradients and device collectives */
    int threads;     /* OpenMP/BLAS threads, 0 = all cores */
    char cap[32];      /* ready-mode in-flight cap: "N" or "1.5x" ("0" = the 1f1b peak) */
    int act_budget_mb; /* ready-mode activation budget (0 = none) */
    double dp_bucket_mb; /* DP gradient all-reduce bucket, MiB */
    int zero;            /* 1: the distributed optimizer (exec_zero.c) when dp > 1 */
    int dp_overlap;      /* 1: buckets start when their chunk's gradients are final; 0: after the backward */
    double stall_warn_s; /* warn after this long without a message (0 = never) */
    int allow_overcommit; /* start even when the memory check says the layout cannot fit */
    double memory_budget; /* GiB per rank the layer split must fit (0: the device's memory, train_budget_gib) */
    double device_memory; /* GiB of the device (its total, the smallest over the job's ranks; 0: none or unknown), set
                           * before the layout is computed (guard_device_memory), never by a key */
    int trace;         /* write Chrome traces */
    int profile;       /* per-step GPU time and launches per op kind (CUDA backend) */
    char cuda_graphs[8]; /* auto | off: the tower's forward recorded once per shape and replayed (CUDA backend) */
    char compute[RECIPE_STR]; /* "model", or "replay:FILE" (tasks sleep the file's durations) */
    double replay_scale;      /* seconds per time unit of the replay file */

    /* [checkpoint] */
    char ckpt_dir[RECIPE_STR]; /* "" = RUN_DIR/checkpoints */
    int keep;                  /* checkpoints kept (oldest deleted), 0 = all */
    char resume[RECIPE_STR];   /* checkpoint folder to resume from ("" = fresh start) */

    /* [lora] — docs/training.md "LoRA" */
    int lora_r;                  /* adapter rank (0 = no LoRA) */
    double lora_alpha, lora_dropout;
    char lora_targets[128];      /* comma-separated LM linears: q,k,v,o,gate,up,down */
    char lora_quant[8];          /* none | nf4: QLoRA's NF4 base weights (docs/training.md "QLoRA") */

    /* where each key's value came from (index = key table index), for error messages */
    char origin[RECIPE_MAX_KEYS][RECIPE_STR + 16];
    char path[RECIPE_STR]; /* the recipe file */
} Recipe;

typedef enum { RKEY_INT = 0, RKEY_I64, RKEY_FLOAT, RKEY_STRING, RKEY_ENUM, RKEY_BOOL } RecipeKeyType;

typedef struct {
    const char* section;
    const char* key;
    RecipeKeyType type;
    size_t offset; /* into Recipe */
    size_t size;   /* strings: buffer size */
    const char* def;
    double min, max;     /* numbers: allowed range (inclusive) */
    const char* choices; /* enums: "a|b|c" */
    int hashed;          /* part of the recipe hash (changes the math of a run); 2: only when not at its
                          * default (keys added after checkpoints were written: their hash is kept) */
    const char* doc;
} RecipeKey;

int recipe_key_count(void);
const RecipeKey* recipe_key_get(int i);
const char* recipe_key_type_name(RecipeKeyType t);

/* Defaults for every key (origin "default"). This function can't fail. */
void recipe_defaults(Recipe* r);
/* Defaults, then the file. Returns 0, or -1 with "FILE:LINE: ..." in err. */
int recipe_load(Recipe* r, const char* path, char* err, size_t err_len);
/* One override "section.key=value". Returns 0, or -1 with "--set ...: ..." in err. */
int recipe_set(Recipe* r, const char* assignment, char* err, size_t err_len);
/* recipe_set, then record `origin` (e.g. "the mpirun world size") as where the value came from. */
int recipe_set_derived(Recipe* r, const char* assignment, const char* origin, char* err, size_t err_len);
/* Cross-key checks (sizes that must divide, layers vs stages, schedule vs steps), after resolving the
 * defaults that depend on another key (runtime.precision = auto). Call after the file and every
 * override, before anything reads the recipe. Returns 0, or -1 with the origin of the offending key in err. */
int recipe_validate(Recipe* r, char* err, size_t err_len);
/* Hash of every key that changes the math of a run (model, data plan, optimiser, seeds). A resume
 * refuses a checkpoint written under another hash. */
uint64_t recipe_hash(const Recipe* r);
/* The hashed keys whose values differ between a and b (hash semantics: data.microbatches counts as
 * the global batch, microbatches x dp), one "  section.key: A -> B" per line into out. Returns the count. */
int recipe_hash_diff(const Recipe* a, const Recipe* b, char* out, size_t size);
/* Key k's value of r as recipe_print writes it. */
void recipe_key_format(const Recipe* r, const RecipeKey* k, char* out, size_t size);
/* Every key as "section.key = value", one per line, in table order (an INI file that loads back). */
void recipe_print(const Recipe* r, FILE* f);
/* The activation recompute (Recompute, engine/engine.h) of the LM blocks (tower 0) or the vision tower's (1):
 * train.recompute_lm / _tower, or train.recompute where they say `same`. */
int recipe_recompute(const Recipe* r, int tower);
/* "FILE:LINE", "--set" or "default" for key section.key. */
const char* recipe_origin(const Recipe* r, const char* section, const char* key);

#endif
