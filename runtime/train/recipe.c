/* recipe.c — the recipe key table, INI loading, --set overrides and validation.
 *
 * The INI reader is our own (inih's syntax: [section], key = value or key: value, whole-line ; and #
 * comments, inline comments after whitespace + ;, a UTF-8 byte-order mark) because inih's lines are
 * limited to INI_MAX_LINE bytes (200 in Debian's build), so a recipe written by --print-recipe with a
 * long path could not be read back, and inih reads a NUL byte as the end of the line. Here a line has
 * no length limit, a NUL byte is an error naming the line, and every handler call knows its line. */
#include "runtime/train/recipe.h"
#include "text/lm.h"
#include "vision/vit_lora.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/util.h"
#include "runtime/model/partition.h"

#define OFF(f) offsetof(Recipe, f)
#define SZ(f) sizeof(((Recipe*)0)->f)
#define BIG 1e18

/* The one table: section, key, type, field, default, range or choices, hashed, meaning. */
static const RecipeKey recipe_keys[] = {
    /* [model] */
    {"model", "vision_width", RKEY_INT, OFF(vision_width), 0, "128", 4, 65536, 0, 1,
     "ViT width Dv. Dv / vision_heads must be divisible by 4 (2-D RoPE rotates pairs in each half of a head)."},
    {"model", "vision_layers", RKEY_INT, OFF(vision_layers), 0, "2", 1, 1024, 0, 1, "ViT blocks Lv."},
    {"model", "vision_heads", RKEY_INT, OFF(vision_heads), 0, "4", 1, 1024, 0, 1, "ViT attention heads Hv."},
    {"model", "patch", RKEY_INT, OFF(patch), 0, "8", 1, 64, 0, 1, "Patch size p in pixels (patch rows have 3 p^2 values)."},
    {"model", "text_width", RKEY_INT, OFF(text_width), 0, "256", 2, 65536, 0, 1,
     "LM width Dt. Dt / text_heads must be even (1-D RoPE rotates halves)."},
    {"model", "text_layers", RKEY_INT, OFF(text_layers), 0, "4", 1, 1024, 0, 1, "LM blocks Lt."},
    {"model", "text_heads", RKEY_INT, OFF(text_heads), 0, "4", 1, 1024, 0, 1, "LM attention heads Ht."},
    {"model", "ffn_hidden", RKEY_INT, OFF(ffn_hidden), 0, "688", 1, 1 << 20, 0, 1, "SwiGLU hidden size F."},
    {"model", "vocab", RKEY_INT, OFF(vocab), 0, "0", 0, 1 << 24, 0, 1,
     "Vocabulary V. 0 = the size of data.tokenizer; otherwise at least that (more: a padded vocabulary, as Hugging "
     "Face checkpoints have, e.g. Qwen2's 152064 rows for 151,665 token ids; rows no token reaches)."},
    {"model", "seed", RKEY_I64, OFF(seed), 0, "1234", 0, 9007199254740991.0, 0, 1,
     "Initialisation seed; init is a function of (seed, parameter name) only."},
    {"model", "rms_eps", RKEY_FLOAT, OFF(rms_eps), 0, "1e-5", 1e-12, 1, 0, 1,
     "eps of the LM's RMSNorms, x / sqrt(mean(x^2) + eps) * w (Llama's rms_norm_eps; `rrfp-mm import llama` prints it)."},
    {"model", "rope_base", RKEY_FLOAT, OFF(rope_base), 0, "10000", 1, 1e12, 0, 1,
     "Base theta of the LM's 1-D RoPE, freq_i = theta^(-2i/n) (Llama's rope_theta). The ViT's 2-D RoPE keeps 10000."},
    {"model", "vision_arch", RKEY_ENUM, OFF(vision_arch), SZ(vision_arch), "rope2d", 0, 0, "rope2d|clip", 1,
     "`rope2d`: docs/model.md's ViT (2-D RoPE, no class token). `clip`: OpenAI's CLIP tower as LLaVA uses it (class token, "
     "learned position embeddings bicubic-interpolated to each image's grid, pre_layrnorm, QuickGELU, features of "
     "model.vision_feature_layer without the class token); `rrfp-mm import clip|llava` prints it."},
    {"model", "vision_feature_layer", RKEY_INT, OFF(vision_feature_layer), 0, "-2", -1025, 1024, 0, 1,
     "CLIP: the hidden state the projector reads (Hugging Face's hidden_states index: 0 = the embeddings after "
     "pre_layrnorm, k = after block k, negative from the end: -1 = the last block, -2 = LLaVA's). Blocks past it never run "
     "and never train."},
    {"model", "vision_image_size", RKEY_INT, OFF(vision_image_size), 0, "336", 1, 1 << 16, 0, 1,
     "CLIP: the image side the position embeddings were trained for (image_size / patch = their grid side); images of "
     "another grid get them bicubic-interpolated."},
    {"model", "anyres", RKEY_INT, OFF(anyres), 0, "0", 0, 1025, 0, 1,
     "LLaVA-NeXT's any-resolution images (docs/anyres.md): 0 = off; N >= 2 = on, an image being at most N tower images "
     "(its base image and tiles: 5 for LLaVA-1.6's pinpoints), which sizes the patch budget (N x data.microbatch_tokens). "
     "Registers image_newline; the shards must be packed with --image-preprocess anyres, tiles of model.vision_image_size."},
    {"model", "projector_act", RKEY_ENUM, OFF(projector_act), SZ(projector_act), "gelu_tanh", 0, 0, "gelu_tanh|gelu", 1,
     "The projector's activation: `gelu_tanh` (docs/model.md's) or `gelu`, the exact erf GELU of LLaVA's mlp2x_gelu and "
     "Hugging Face's projector_hidden_act."},
    {"model", "text_kv_heads", RKEY_INT, OFF(text_kv_heads), 0, "0", 0, 1024, 0, 1,
     "Key/value heads of the LM (grouped-query attention: each serves text_heads / text_kv_heads query heads, query "
     "head h reading key/value head h / (text_heads / text_kv_heads); HF's num_key_value_heads). Must divide "
     "text_heads; parallel.tp must divide it. 0 = text_heads (multi-head attention)."},
    {"model", "text_qkv_bias", RKEY_BOOL, OFF(text_qkv_bias), 0, "false", 0, 1, 0, 1,
     "Biases on the LM's q, k and v projections (Qwen2)."},
    {"model", "text_o_bias", RKEY_BOOL, OFF(text_o_bias), 0, "false", 0, 1, 0, 1,
     "A bias on the LM's attention output projection o (Llama's attention_bias = true sets this and text_qkv_bias)."},
    {"model", "tie_embeddings", RKEY_BOOL, OFF(tie_embeddings), 0, "false", 0, 1, 0, 1,
     "The LM head is the token embedding text.embed.weight (HF's tie_word_embeddings): no text.lm_head.weight. Under "
     "parallel.pp > 1 the last stage holds a copy whose gradient is summed with the first stage's every step."},
    {"model", "rope_type", RKEY_ENUM, OFF(rope_type), SZ(rope_type), "default", 0, 0, "default|llama3", 1,
     "`llama3`: Llama-3's RoPE frequency scaling (HF rope_scaling / rope_parameters rope_type llama3) with "
     "rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos; `default`: theta^(-2i/n)."},
    {"model", "rope_factor", RKEY_FLOAT, OFF(rope_factor), 0, "8", 1, 1e6, 0, 1,
     "rope_type = llama3: factor (low frequencies are divided by it)."},
    {"model", "rope_low_freq_factor", RKEY_FLOAT, OFF(rope_low_freq_factor), 0, "1", 1e-6, 1e6, 0, 1,
     "rope_type = llama3: low_freq_factor (wavelengths above rope_original_max_pos / it are scaled)."},
    {"model", "rope_high_freq_factor", RKEY_FLOAT, OFF(rope_high_freq_factor), 0, "4", 1e-6, 1e6, 0, 1,
     "rope_type = llama3: high_freq_factor (wavelengths below rope_original_max_pos / it are kept; > "
     "rope_low_freq_factor)."},
    {"model", "rope_original_max_pos", RKEY_INT, OFF(rope_original_max_pos), 0, "8192", 1, 1 << 30, 0, 1,
     "rope_type = llama3: original_max_position_embeddings."},
    /* [data] */
    {"data", "source", RKEY_ENUM, OFF(source), SZ(source), "shards", 0, 0, "shards|synthetic", 1,
     "`shards`: the loader over data.shards. `synthetic`: generated image-question-answer samples (the answer is the "
     "colour of the image) for tests without data files; needs model.vocab >= 16."},
    {"data", "fixed_batch", RKEY_BOOL, OFF(fixed_batch), 0, "false", 0, 1, 0, 1,
     "Every step trains on the first step's plan (same samples): an overfitting check and the benchmark's "
     "same-batch step. Synthetic source only."},
    {"data", "synthetic_plan", RKEY_STRING, OFF(synthetic_plan), SZ(synthetic_plan), "", 0, 0, 0, 1,
     "`\"\"` or a file giving the synthetic source's sample shapes (benchmarks: the same samples as a reference "
     "run): line k is microbatch k, its samples as `HxW+F` (an H x W patch grid and F >= 4 text tokens, LM length H "
     "W + F); microbatch m of step s is line (s M + m) mod lines. Synthetic source only."},
    {"data", "shards", RKEY_STRING, OFF(shards), SZ(shards), "demo/shards", 0, 0, 0, 0,
     "Folder of .rrs shards from `rrfp-mm pack` (or one .rrs file). Relative paths are from the working directory."},
    {"data", "tokenizer", RKEY_STRING, OFF(tokenizer), SZ(tokenizer), "demo/tokenizer.json", 0, 0, 0, 0,
     "tokenizer.json the shards were packed with (the loader checks its hash against the shard headers)."},
    {"data", "microbatch_tokens", RKEY_INT, OFF(microbatch_tokens), 0, "1024", 16, 1 << 22, 0, 1,
     "LM positions (text + image tokens) per microbatch; samples are packed up to this budget without padding."},
    {"data", "microbatches", RKEY_INT, OFF(microbatches), 0, "4", 1, 1 << 16, 0, 1,
     "Microbatches per optimiser step (per data-parallel rank)."},
    {"data", "policy", RKEY_ENUM, OFF(policy), SZ(policy), "ffd", 0, 0, "fifo|ffd|balanced", 1,
     "Microbatch packing policy (docs/data.md, Loader)."},
    {"data", "window", RKEY_INT, OFF(window), 0, "64", 1, 1 << 20, 0, 1, "Look-ahead window in samples for ffd / balanced."},
    {"data", "workers", RKEY_INT, OFF(workers), 0, "0", 0, 256, 0, 0,
     "Decode threads (does not change the data). 0 = what the cores allow: those of this rank's share of the host "
     "beside the step's own (runtime.threads on the cpu backend, one thread on cuda), 1 to 8."},
    {"data", "seed", RKEY_I64, OFF(data_seed), 0, "1", 0, 9007199254740991.0, 0, 1, "Shuffling seed."},
    {"data", "min_patches", RKEY_INT, OFF(min_patches), 0, "16", 1, 1 << 20, 0, 1,
     "Fewest patches an image is resized to (smart_resize lower bound)."},
    {"data", "max_patches", RKEY_INT, OFF(max_patches), 0, "64", 1, 1 << 20, 0, 1,
     "Most patches an image is resized to (smart_resize upper bound)."},
    {"data", "on_error", RKEY_ENUM, OFF(on_error), SZ(on_error), "skip", 0, 0, "skip|fatal", 0,
     "A damaged sample is reported and skipped (counted in the log), or stops training."},
    {"data", "eval_shards", RKEY_STRING, OFF(eval_shards), SZ(eval_shards), "", 0, 0, 0, 0,
     "Shards packed from the held-out question-answer manifest, for `rrfp-mm eval` (\"\" = none; the synthetic "
     "source makes its own held-out samples)."},
    /* [train] */
    {"train", "steps", RKEY_INT, OFF(steps), 0, "200", 1, 1e9, 0, 1, "Optimiser steps; the LR schedule ends here."},
    {"train", "epochs", RKEY_FLOAT, OFF(epochs), 0, "0", 0, 1e6, 0, 0,
     "Train this many passes over the data set instead of train.steps (data.source = shards; 0 = use "
     "train.steps): the steps are derived from the records and the packed batch, printed at the start, and "
     "take train.steps' place (in the LR schedule and the recipe hash)."},
    {"train", "eval_every", RKEY_INT, OFF(eval_every), 0, "0", 0, 1e9, 0, 0,
     "Held-out loss every N steps and at the last (0 = never): data.eval_shards (the synthetic source: its "
     "held-out stream), under any layout, written as \"eval_loss\" in that step's metrics row and on the log "
     "line; the training numbers are the same with and without it."},
    {"train", "eval_samples", RKEY_INT, OFF(eval_samples), 0, "0", 0, 1e9, 0, 0,
     "Held-out samples per evaluation of train.eval_every, the same ones each time (0 = every record of "
     "data.eval_shards once; 256 on the synthetic source)."},
    {"train", "stop_at", RKEY_INT, OFF(stop_at), 0, "0", 0, 1e9, 0, 0,
     "Stop after this step and checkpoint (0 = run to train.steps). For time-sliced jobs; resume continues."},
    {"train", "log_every", RKEY_INT, OFF(log_every), 0, "1", 1, 1e9, 0, 0, "Print a log line every N steps (metrics JSONL gets every step)."},
    {"train", "checkpoint_every", RKEY_INT, OFF(checkpoint_every), 0, "0", -1, 1e9, 0, 0,
     "Write a checkpoint every N steps (0 = only at the end / at stop_at; -1 = none, not even at the end: "
     "benchmarks. A stop by a signal still writes one)."},
    {"train", "dump_step", RKEY_INT, OFF(dump_step), 0, "-1", -1, 1e9, 0, 0,
     "Write RUN_DIR/dump-N/ for step N (1-based): microbatches, weights before the step, loss, gradients. -1 = off."},
    {"train", "run_dir", RKEY_STRING, OFF(run_dir), SZ(run_dir), "run", 0, 0, 0, 0,
     "Output folder: log, metrics.jsonl, checkpoints, dumps."},
    {"train", "freeze", RKEY_STRING, OFF(freeze), SZ(freeze), "", 0, 0, 0, 1,
     "Parameters that do not train, comma-separated: `vision`, `projector`, `text`, or any prefix of parameter names "
     "ending at a dot (`text.embed`, `vision.blocks.0`, `text.blocks.3.attn`). Frozen tensors get no gradient, no AdamW "
     "state and no update, and the backward skips what only they need (the whole ViT backward when `vision` is frozen). "
     "LLaVA stage 1: `vision,text`; stage 2: `vision`. \"\" = everything trains."},
    {"train", "overwrite", RKEY_BOOL, OFF(overwrite), 0, "false", 0, 1, 0, 0,
     "A fresh start into a run folder that holds another run's metrics or checkpoints moves its contents aside "
     "into RUN_DIR/previous-<date>-<time>/ (nothing is deleted) instead of being refused."},
    {"train", "init_from", RKEY_STRING, OFF(init_from), SZ(init_from), "", 0, 0, 0, 0,
     "Start from another run's checkpoint folder (any layout, or one written by `rrfp-mm import llama|llava|clip`): "
     "tensors whose name and shape match are loaded, the rest initialised from model.seed; prints what was loaded, "
     "initialised and left unused. Unlike checkpoint.resume: step 0, fresh optimiser state, any recipe. An import's "
     "model keys (and data.min_patches / max_patches) are taken where the recipe leaves them at their defaults; a "
     "recipe that sets a model key otherwise is refused, naming it. \"\" = none."},
    {"train", "recompute", RKEY_ENUM, OFF(recompute), SZ(recompute), "none", 0, 0, "none|selective|full", 0,
     "Activation recompute of the blocks' backward, trading compute for activation memory (docs/training.md "
     "\"Activation recompute\"): `none` keeps every activation the backward reads; `selective` drops the MLP "
     "activation's output (SwiGLU's, the tower's GELU: recomputed elementwise in the backward); `full` keeps each "
     "block's input only and re-runs the block's forward inside its microbatch's backward (B; the split backward's W "
     "re-runs it too). One block's workspace per stage holds what is recomputed, and the stage (not each microbatch "
     "in flight) the fused backward's scratch. The training numbers are bitwise those without it. Per component: train.recompute_lm, train.recompute_tower."},
    {"train", "recompute_lm", RKEY_ENUM, OFF(recompute_lm), SZ(recompute_lm), "same", 0, 0, "same|none|selective|full", 0,
     "train.recompute for the LM blocks only (`same` = train.recompute's)."},
    {"train", "recompute_tower", RKEY_ENUM, OFF(recompute_tower), SZ(recompute_tower), "same", 0, 0,
     "same|none|selective|full", 0,
     "train.recompute for the vision tower's blocks only (`same` = train.recompute's; a frozen tower keeps nothing for "
     "a backward whatever it says)."},
    /* [optim] */
    {"optim", "lr", RKEY_FLOAT, OFF(lr), 0, "3e-3", 0, 10, 0, 1, "Peak learning rate."},
    {"optim", "min_lr", RKEY_FLOAT, OFF(min_lr), 0, "3e-4", 0, 10, 0, 1, "Learning rate at the end of the cosine decay (<= lr)."},
    {"optim", "schedule", RKEY_ENUM, OFF(schedule), SZ(schedule), "cosine", 0, 0, "cosine|linear|constant", 2,
     "Learning rate after the linear warm-up: `cosine` decay to optim.min_lr at train.steps, `linear` decay to "
     "optim.min_lr, or `constant` optim.lr."},
    {"optim", "projector_lr", RKEY_FLOAT, OFF(projector_lr), 0, "0", 0, 10, 0, 2,
     "Peak learning rate of the projector's parameters (LLaVA's mm_projector_lr), on optim.lr's schedule scaled "
     "by projector_lr / lr (0 = optim.lr, one rate for every parameter)."},
    {"optim", "warmup", RKEY_INT, OFF(warmup), 0, "10", 0, 1e9, 0, 1, "Linear warm-up steps (<= train.steps)."},
    {"optim", "beta1", RKEY_FLOAT, OFF(beta1), 0, "0.9", 0, 0.999999, 0, 1, "AdamW beta1, in [0, 1)."},
    {"optim", "beta2", RKEY_FLOAT, OFF(beta2), 0, "0.95", 0, 0.999999, 0, 1, "AdamW beta2, in [0, 1)."},
    {"optim", "eps", RKEY_FLOAT, OFF(eps), 0, "1e-8", 0, 1, 0, 1, "AdamW epsilon."},
    {"optim", "weight_decay", RKEY_FLOAT, OFF(weight_decay), 0, "0.1", 0, 10, 0, 1,
     "Decoupled weight decay, applied to 2-D weights only (not norms, biases)."},
    {"optim", "grad_clip", RKEY_FLOAT, OFF(grad_clip), 0, "1.0", 0, 1e9, 0, 1, "Clip the global gradient norm to this (0 = off)."},
    /* [parallel] */
    {"parallel", "pp", RKEY_INT, OFF(pp), 0, "1", 1, 4096, 0, 0, "Pipeline stages P (at most one per model block, see chunks)."},
    {"parallel", "tp", RKEY_INT, OFF(tp), 0, "1", 1, 1024, 0, 0,
     "Tensor-parallel ranks; must divide the heads, ffn_hidden, 4 vision_width, text_width and the vocabulary."},
    {"parallel", "dp", RKEY_INT, OFF(dp), 0, "1", 1, 1 << 20, 0, 1,
     "Data-parallel replicas, each with data.microbatches microbatches: the global step has dp x microbatches "
     "(hashed as that product, so dp 2 x 2 microbatches resumes as dp 1 x 4). Left unset, `rrfp-mm train` under "
     "mpirun takes dp = world size / (pp x tp), stated on the first log line."},
    {"parallel", "dp_bucket_mb", RKEY_FLOAT, OFF(dp_bucket_mb), 0, "4", 0.001, 1e6, 0, 0,
     "Size in MiB of one bucket of the data-parallel gradient all-reduce."},
    {"parallel", "dp_overlap", RKEY_INT, OFF(dp_overlap), 0, "1", 0, 1, 0, 0,
     "1: a chunk's gradient buckets start as soon as its last weight gradient of the step is done, overlapping the "
     "rest of the backward; 0: every bucket starts after the whole backward (the benchmark's baseline). Under "
     "`parallel.zero = 1` the same for the reduce-scatters, and 1 completes the updated weights' all-gather inside "
     "the next forward (each part waiting for its own), 0 at the step end."},
    {"parallel", "zero", RKEY_INT, OFF(zero), 0, "0", 0, 1, 0, 0,
     "1: the distributed optimizer (ZeRO-1): each stage's f32 master weights and AdamW moments sharded across its dp "
     "replicas, gradients reduce-scattered and the updated weights all-gathered (docs/parallel.md \"The distributed "
     "optimizer\"); the same training to fp32 round-off, so not hashed: checkpoints resume with it on or off."},
    {"parallel", "chunks", RKEY_INT, OFF(chunks), 0, "1", 1, 64, 0, 0, "Model chunks (virtual stages) per pipeline rank."},
    {"parallel", "layers", RKEY_STRING, OFF(layers), SZ(layers), "", 0, 0, 0, 0,
     "LM layers per virtual stage by hand, e.g. `2,3,3`; a last 0 leaves the last stage the final norm, the LM head and "
     "the loss alone, e.g. `2,3,3,0` (\"\" = cost-balanced automatic split)."},
    {"parallel", "tower_split", RKEY_ENUM, OFF(tower_split), SZ(tower_split), "off", 0, 0, "off|auto", 0,
     "The vision tower over pipeline stages (docs/anyres.md \"The tower over stages\"): auto = where the tower costs more "
     "than a stage's share, the cost model's split of the chain [tower blocks][LM blocks] (the one the dry run names); "
     "off = the whole tower on stage 0. Bitwise the same training, so not hashed."},
    {"parallel", "tower_layers", RKEY_STRING, OFF(tower_layers), SZ(tower_layers), "", 0, 0, 0, 0,
     "Tower blocks per virtual stage by hand, e.g. `2,1,0` with parallel.layers `0,1,1`: the stages before the first "
     "with LM layers hold tower blocks alone, that one the rest of the tower (\"\" = parallel.tower_split)."},
    {"parallel", "partition", RKEY_ENUM, OFF(partition), SZ(partition), "path", 0, 0, "balance|path", 0,
     "The objective of the automatic split (parallel.layers unset; also parallel.tower_split = auto's; "
     "docs/anyres.md \"Path-aware split\"): balance = the least max stage cost of the cost model; path = the least "
     "longest stage path, a stage's cost plus 1/M of the earlier stages' (the first microbatch's forward to it and "
     "the last one's backward from it, M = data.microbatches), which bounds every schedule with a whole backward "
     "(one chunk per rank; with parallel.chunks > 1 balance). Bitwise the same training, so not hashed."},
    {"parallel", "hint", RKEY_ENUM, OFF(hint), SZ(hint), "1f1b", 0, 0, "gpipe|1f1b|interleaved-1f1b|zb-h1|bf|bfw|zbv|dualpipev", 0,
     "Schedule hint (docs/scheduler.md; zbv and dualpipev place parallel.chunks = 2 chunks per rank in a V: "
     "docs/scheduler.md)."},
    {"parallel", "mode", RKEY_ENUM, OFF(mode), SZ(mode), "adaptive", 0, 0, "fixed-sync|fixed|ready|lookahead|adaptive", 0,
     "Dispatch mode (docs/scheduler.md; lookahead = ready + producers' start notices and a duration estimate; "
     "adaptive (the default) = per step, ready or the hint's sequence, whichever a simulation of the step on "
     "the cost model's estimates predicts faster, or lookahead where predicted 2% faster still; and the step's "
     "microbatches in \"ends\" order, small ones at both ends, where that is predicted more than 1% faster: "
     "docs/scheduler.md)."},
    {"parallel", "reorder", RKEY_BOOL, OFF(reorder), 0, "true", 0, 1, 0, 0,
     "`parallel.mode = adaptive`: may run a step's microbatches in its \"ends\" order (decided from the step's "
     "tokens and patches alone, so every run of the same data reorders the same steps). `false`: always in the "
     "data's order; the pipeline then sums each weight gradient over the microbatches in the order one process "
     "does (bit for bit the one-process step wherever the mode keeps that order too)."},
    /* [runtime] */
    {"runtime", "backend", RKEY_ENUM, OFF(backend), SZ(backend), "cpu", 0, 0, "cpu|cuda", 0, "Compute backend."},
    {"runtime", "precision", RKEY_ENUM, OFF(precision), SZ(precision), "auto", 0, 0, "auto|fp32|bf16", 1,
     "Compute precision. `auto`: `bf16` with `runtime.backend = cuda`, `fp32` on the cpu (the recipe as trained, "
     "`RUN_DIR/recipe.ini`, records which). `bf16`: mixed precision as Megatron runs it (f32 master weights, "
     "gradients and AdamW moments; a bf16 compute copy of the weights written by the optimiser step itself (2-byte "
     "bf16 for the 2-D weights on CUDA); bf16 GEMM operands and stored activations; norm statistics, softmax, RoPE "
     "angles and cross-entropy in f32), with the same rounding points on the CPU and CUDA backends "
     "(engine/engine.h, `Precision`). Changes the math."},
    {"runtime", "comm", RKEY_ENUM, OFF(comm), SZ(comm), "mpi", 0, 0, "mpi|nccl", 0,
     "What carries the pipeline's activations and gradients and the data-parallel gradient all-reduce. `nccl` needs "
     "`runtime.backend = cuda`: NCCL on device memory (FIFO protocol, one communicator per pipeline direction, "
     "completions polled as CUDA events; docs/cuda.md); scalars stay on MPI. Does not change the math."},
    {"runtime", "threads", RKEY_INT, OFF(threads), 0, "0", 0, 1024, 0, 0, "CPU threads (OpenMP and BLAS); 0 = all cores."},
    {"runtime", "cap", RKEY_STRING, OFF(cap), SZ(cap), "0", 0, 0, 0, 0,
     "In-flight cap of `ready` mode: microbatches (F started, B not finished) per rank: N, or a multiple of the hint's "
     "own peak such as `1.5x`; 0 = the 1f1b peak P - r. Under `adaptive` a multiple is the most: each step's plan may "
     "run a tighter multiple (1x to 1.75x) where predicted faster (docs/scheduler.md)."},
    {"runtime", "act_budget_mb", RKEY_INT, OFF(act_budget_mb), 0, "0", 0, 1 << 30, 0, 0,
     "Activation byte budget per rank in MiB for `ready` mode (0 = none)."},
    {"runtime", "trace", RKEY_BOOL, OFF(trace), 0, "false", 0, 1, 0, 0,
     "Write a Chrome trace per rank into RUN_DIR (trace-rank<r>.json, for `rrfp-mm trace`) in a pipeline or "
     "tensor-parallel run (parallel.pp or parallel.tp > 1); a one-stage run writes none and says so."},
    {"runtime", "profile", RKEY_BOOL, OFF(profile), 0, "false", 0, 1, 0, 0,
     "Per step, the GPU time (CUDA events) and launches of each op kind (gemm, attention, norm, elementwise, "
     "optimiser, copies, communication) in `metrics.jsonl` (`\"profile\"`), the summary at the end of the log and "
     "the report's Device section (communication: NCCL's operations with `runtime.comm = nccl`); each step waits "
     "for the device once more. Needs `runtime.backend = cuda` (docs/cuda.md, \"Profiler\")."},
    {"runtime", "cuda_graphs", RKEY_ENUM, OFF(cuda_graphs), SZ(cuda_graphs), "auto", 0, 0, "auto|off", 0,
     "`auto`: on the CUDA backend the vision tower's forward and backward are each recorded as a CUDA graph the "
     "second time a shape (patches, images) comes and replayed after that, one launch instead of one per kernel "
     "(docs/cuda.md, \"CUDA graphs\"; the backward stays eager under activation recompute and TP); not while "
     "`runtime.profile` times each op. `off`: every kernel launched one by one. Does not change the math."},
    {"runtime", "compute", RKEY_STRING, OFF(compute), SZ(compute), "model", 0, 0, 0, 0,
     "`model`, or `replay:FILE` (docs/scheduler.md, parallel.pp > 1): every task sleeps its duration from the "
     "duration file FILE (stages = parallel.pp, microbatches >= data.microbatches; W present exactly when the hint "
     "splits the backward) times runtime.replay_scale seconds instead of computing, with the real messages of the "
     "real sizes between the ranks (losses and gradients are then 0)."},
    {"runtime", "replay_scale", RKEY_FLOAT, OFF(replay_scale), 0, "1", 1e-9, 1e6, 0, 0,
     "Seconds per time unit of the replay file (runtime.compute = replay:FILE)."},
    {"runtime", "stall_warn_s", RKEY_FLOAT, OFF(stall_warn_s), 0, "30", 0, 1e6, 0, 0,
     "Warn, naming the rank waited for, after this many seconds without a message (0 = never)."},
    {"runtime", "allow_overcommit", RKEY_BOOL, OFF(allow_overcommit), 0, "false", 0, 1, 0, 0,
     "Start even when the parameters, optimiser state and activations (the dry run's figures) exceed the memory "
     "available (host MemAvailable, or the GPU's free memory): the start-up check warns instead of refusing, and "
     "runtime.memory_budget unset takes no default from the device."},
    {"runtime", "memory_budget", RKEY_FLOAT, OFF(memory_budget), 0, "0", 0, 1e6, 0, 0,
     "GiB one rank may hold (the dry run's figures: weights, gradients, AdamW state, activations, workspace; 0 = the "
     "device's memory less a 5% reserve on the cuda backend, the smallest device of the job; none on the cpu). The LM "
     "layer split (with parallel.tower_split = auto, the tower's blocks too) balances time among the splits whose "
     "every rank fits; where none does, or parallel.layers exceeds "
     "it, the run is refused with the smallest changes that fit."},
    /* [checkpoint] */
    {"checkpoint", "dir", RKEY_STRING, OFF(ckpt_dir), SZ(ckpt_dir), "", 0, 0, 0, 0,
     "Checkpoint folder (\"\" = RUN_DIR/checkpoints); each checkpoint is a subfolder step-NNNNNNNN."},
    {"checkpoint", "keep", RKEY_INT, OFF(keep), 0, "3", 0, 1 << 20, 0, 0, "Checkpoints kept; older ones are deleted (0 = keep all)."},
    {"checkpoint", "resume", RKEY_STRING, OFF(resume), SZ(resume), "", 0, 0, 0, 0,
     "Resume from this checkpoint folder; `latest`: the newest checkpoint of this run (an error when there is "
     "none); `auto`: the newest checkpoint of this run if there is one, else a fresh start (one job line for the "
     "first start and every requeue); \"\" = a fresh start, refused in a run folder that holds another run's "
     "metrics or checkpoints (see train.overwrite)."},
    /* [lora] */
    {"lora", "r", RKEY_INT, OFF(lora_r), 0, "0", 0, 65536, 0, 2,
     "LoRA rank (0 = no LoRA: every weight trains as train.freeze says). r > 0 adds to each LM linear of lora.targets "
     "y += (lora.alpha / r) B A dropout(x), A (r, in) Kaiming-uniform and B (out, r) zero as PEFT initialises them, "
     "and freezes every other LM tensor (the tower and the projector follow train.freeze): docs/training.md \"LoRA\"."},
    {"lora", "alpha", RKEY_FLOAT, OFF(lora_alpha), 0, "16", 1e-6, 1e6, 0, 2, "LoRA's alpha: the adapters' scale is alpha / r."},
    {"lora", "dropout", RKEY_FLOAT, OFF(lora_dropout), 0, "0", 0, 0.95, 0, 2,
     "Dropout on each adapter's input in training (PEFT's lora_dropout); the mask is a function of (model.seed, step, "
     "microbatch, layer, linear), so every layout and a resume draw the same; none in evaluation and generation."},
    {"lora", "targets", RKEY_STRING, OFF(lora_targets), SZ(lora_targets), "q,k,v,o,gate,up,down", 0, 0, 0, 2,
     "The LM linears that get adapters, comma-separated from q, k, v, o, gate, up, down (or `all`); the default is every "
     "linear of the LM, LLaVA's find_all_linear_names. The CLIP tower's too with vision.q, vision.k, vision.v, vision.out, "
     "vision.fc1, vision.fc2 (or vision.all): its base is then frozen, its adapters train whatever train.freeze says."},
    {"lora", "quant", RKEY_ENUM, OFF(lora_quant), SZ(lora_quant), "none", 0, 0, "none|nf4", 2,
     "QLoRA: nf4 stores the base weights of the lora.targets linears as bitsandbytes' NF4 (blocks of 64, absmaxes "
     "double-quantised), quantised once from the loaded or initialised weights and dequantised to the compute dtype "
     "before each block's GEMMs (docs/training.md \"QLoRA\"); needs lora.r > 0; under parallel.tp > 1 each rank "
     "keeps its slice of the whole weight's quantisation (a tp whose slices cut a block of 64 is refused)."},
};
static const int n_recipe_keys = (int)(sizeof(recipe_keys) / sizeof(recipe_keys[0]));

int recipe_key_count(void) { return n_recipe_keys; }
const RecipeKey* recipe_key_get(int i) { return (i >= 0 && i < n_recipe_keys) ? &recipe_keys[i] : NULL; }

const char* recipe_key_type_name(RecipeKeyType t) {
    switch (t) {
    case RKEY_INT:
    case RKEY_I64: return "int";
    case RKEY_FLOAT: return "float";
    case RKEY_STRING: return "string";
    case RKEY_ENUM: return "enum";
    case RKEY_BOOL: return "bool";
    }
    return "?";
}


static int recipe_key_find(const char* section, const char* key) {
    for (int i = 0; i < n_recipe_keys; i++)
        if (!strcmp(recipe_keys[i].section, section) && !strcmp(recipe_keys[i].key, key)) return i;
    return -1;
}

/* The key a mistyped section.key most likely meant, for "did you mean": the same key name in another section
 * (train.lr for optim.lr), or the key named by both words (checkpoint.every for train.checkpoint_every), else the
 * nearest full name within 2 edits (1 for names under 6 characters) and under half the name; -1 when none. */
static int recipe_key_nearest(const char* section, const char* key) {
    int same = -1, n_same = 0, best = -1, best_d = 1 << 30;
    char want[160], name[160], joined[160];
    snprintf(want, sizeof want, "%s.%s", section, key);
    snprintf(joined, sizeof joined, "%s_%s", section, key);
    for (int i = 0; i < n_recipe_keys; i++) {
        if (!strcmp(recipe_keys[i].key, key) || !strcmp(recipe_keys[i].key, joined)) same = i, n_same++;
        snprintf(name, sizeof name, "%s.%s", recipe_keys[i].section, recipe_keys[i].key);
        int d = rr_edit_distance(want, name);
        if (d < best_d) best_d = d, best = i;
    }
    if (n_same == 1) return same;
    size_t len = strlen(key);
    int limit = len >= 6 ? 2 : 1;
    return best >= 0 && best_d <= limit && 2 * (size_t)best_d < len ? best : -1;
}

/* The allowed values of a key, for error messages. */
static void recipe_key_allowed(const RecipeKey* k, char* s, size_t n) {
    switch (k->type) {
    case RKEY_INT:
    case RKEY_I64: snprintf(s, n, "an integer in [%.0f, %.0f]", k->min, k->max); break;
    case RKEY_FLOAT: snprintf(s, n, "a number in [%g, %g]", k->min, k->max); break;
    case RKEY_STRING: snprintf(s, n, "a string of at most %zu bytes", k->size - 1); break;
    case RKEY_ENUM: snprintf(s, n, "one of %s", k->choices); break;
    case RKEY_BOOL: snprintf(s, n, "true or false"); break;
    }
}

/* Parse value into the field of key k. Returns 0, or -1 with "KEY = VALUE: why; allowed: ..."
 * The value is normalised here, where every value is read (file, --set, defaults): white space around it
 * is no part of it, as the INI reader has always read it. `--set "parallel.layers= 2"` kept " 2", printed
 * as `layers =  2`, which loaded back as "2": a printed recipe that did not print the same again. */
static int recipe_key_parse_trimmed(Recipe* r, const RecipeKey* k, const char* value, char* err, size_t n);
static int recipe_key_parse(Recipe* r, const RecipeKey* k, const char* value, char* err, size_t n) {
    while (isspace((unsigned char)*value)) value++;
    size_t len = strlen(value);
    while (len > 0 && isspace((unsigned char)value[len - 1])) len--;
    char* v = mallocCheck(len + 1);
    memcpy(v, value, len);
    v[len] = 0;
    int rc = recipe_key_parse_trimmed(r, k, v, err, n);
    free(v);
    return rc;
}

static int recipe_key_parse_trimmed(Recipe* r, const RecipeKey* k, const char* value, char* err, size_t n) {
    char allowed[256];
    recipe_key_allowed(k, allowed, sizeof allowed);
    char* field = (char*)r + k->offset;
    switch (k->type) {
    case RKEY_INT:
    case RKEY_I64:
    case RKEY_FLOAT: {
        char* end = NULL;
        errno = 0;
        double v;
        if (k->type == RKEY_FLOAT) {
            v = strtod(value, &end);
        } else {
            long long iv = strtoll(value, &end, 10);
            v = (double)iv;
        }
        while (end && isspace((unsigned char)*end)) end++;
        /* a well-formed number that does not fit (1e-400 underflows, 1e400 and 2^63 overflow) is out of range,
         * not "not a number" */
        if (*value && end && end != value && !*end && errno == ERANGE) {
            rr_fail(err, n, "%s.%s = %s is out of range (beyond what a %s holds); allowed: %s", k->section, k->key, value,
                 k->type == RKEY_FLOAT ? "double" : "64-bit integer", allowed);
            return -1;
        }
        if (!*value || !end || *end || errno == ERANGE || !isfinite(v)) {
            rr_fail(err, n, "%s.%s = '%s' is not %s", k->section, k->key, value,
                 k->type == RKEY_FLOAT ? "a number" : "an integer");
            rr_fail(err + strlen(err), n - strlen(err), "; allowed: %s", allowed);
            return -1;
        }
        if (v < k->min || v > k->max) {
            rr_fail(err, n, "%s.%s = %s is out of range; allowed: %s", k->section, k->key, value, allowed);
            return -1;
        }
        if (k->type == RKEY_INT) *(int*)field = (int)v;
        else if (k->type == RKEY_I64) *(int64_t*)field = strtoll(value, NULL, 10);
        else *(double*)field = v;
        return 0;
    }
    case RKEY_STRING:
        /* a line break ends the recipe line it is printed on: the rest would read back as another line */
        if (strpbrk(value, "\n\r")) {
            rr_fail(err, n, "%s.%s: a value with a line break cannot be written as one recipe line and read back; "
                 "allowed: %s on one line", k->section, k->key, allowed);
            return -1;
        }
        /* a ';' at the start or after white space starts a comment when the recipe is read back (the run's
         * RUN_DIR/recipe.ini, --print-recipe): `init_from =; x` loaded as "; x" and came back empty */
        for (const char* q = value; *q; q++)
            if (*q == ';' && (q == value || isspace((unsigned char)q[-1]))) {
                rr_fail(err, n, "%s.%s = '%s': a ';' at the start or after a space would start a comment when the "
                     "recipe is written and read back; allowed: %s without such a ';'", k->section, k->key, value,
                     allowed);
                return -1;
            }
        if (strlen(value) >= k->size) {
            rr_fail(err, n, "%s.%s is too long (%zu bytes); allowed: %s", k->section, k->key, strlen(value), allowed);
            return -1;
        }
        strcpy(field, value);
        return 0;
    case RKEY_ENUM: {
        const char* c = k->choices;
        size_t vl = strlen(value);
        while (*c) {
            const char* bar = strchr(c, '|');
            size_t cl = bar ? (size_t)(bar - c) : strlen(c);
            if (cl == vl && !strncmp(c, value, cl)) {
                strcpy(field, value);
                return 0;
            }
            c += cl + (bar ? 1 : 0);
        }
        rr_fail(err, n, "%s.%s = '%s' is not allowed; allowed: %s", k->section, k->key, value, allowed);
        return -1;
    }
    case RKEY_BOOL:
        if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes")) *(int*)field = 1;
        else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "no")) *(int*)field = 0;
        else {
            rr_fail(err, n, "%s.%s = '%s' is not a boolean; allowed: %s", k->section, k->key, value, allowed);
            return -1;
        }
        return 0;
    }
    return -1;
}

void recipe_defaults(Recipe* r) {
    memset(r, 0, sizeof *r);
    char err[512];
    RR_ASSERT(n_recipe_keys <= RECIPE_MAX_KEYS);
    for (int i = 0; i < n_recipe_keys; i++) {
        int rc = recipe_key_parse(r, &recipe_keys[i], recipe_keys[i].def, err, sizeof err);
        if (rc != 0) rr_die("internal error: default of %s.%s: %s", recipe_keys[i].section, recipe_keys[i].key, err);
        strcpy(r->origin[i], "default");
    }
}

/* ---- INI loading with line numbers ---- */

typedef struct {
    int line;
    Recipe* r;
    const char* path;
    char* err;
    size_t err_len;
    int failed;
    char seen[RECIPE_MAX_KEYS];
} IniCtx;

static char* ini_strip(char* a, char* end) { /* trims [a, end) in place, returns the start */
    while (a < end && isspace((unsigned char)*a)) a++;
    while (end > a && isspace((unsigned char)end[-1])) end--;
    *end = 0;
    return a;
}

static int recipe_ini_handler(void* user, const char* section, const char* name, const char* value) {
    IniCtx* c = user;
    if (c->failed) return 1; /* keep only the first error */
    int i = recipe_key_find(section, name);
    if (i < 0) {
        char sec[64] = "";
        int known_section = 0;
        for (int j = 0; j < n_recipe_keys; j++)
            if (!strcmp(recipe_keys[j].section, section)) known_section = 1;
        if (!known_section) {
            snprintf(sec, sizeof sec, "%s", section);
            rr_fail(c->err, c->err_len,
                 "%s:%d: unknown section [%s] (key '%s'); allowed sections: model, data, train, optim, parallel, "
                 "runtime, checkpoint (see recipes/README.md)",
                 c->path, c->line, sec, name);
        } else {
            int near = recipe_key_nearest(section, name);
            char hint[160] = "";
            if (near >= 0 && strcmp(recipe_keys[near].section, section))
                snprintf(hint, sizeof hint, " (did you mean '%s' in [%s]?)", recipe_keys[near].key,
                         recipe_keys[near].section);
            else if (near >= 0)
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", recipe_keys[near].key);
            int k = snprintf(c->err, c->err_len, "%s:%d: unknown key '%s' in [%s]%s; allowed keys:", c->path, c->line,
                             name, section, hint);
            for (int j = 0; j < n_recipe_keys && k > 0 && (size_t)k < c->err_len; j++)
                if (!strcmp(recipe_keys[j].section, section))
                    k += snprintf(c->err + k, c->err_len - (size_t)k, " %s", recipe_keys[j].key);
        }
        c->failed = 1;
        return 1;
    }
    if (c->seen[i]) {
        rr_fail(c->err, c->err_len, "%s:%d: %s.%s is set twice (first at %s)", c->path, c->line, section, name,
             c->r->origin[i]);
        c->failed = 1;
        return 1;
    }
    char msg[1024];
    if (recipe_key_parse(c->r, &recipe_keys[i], value, msg, sizeof msg) != 0) {
        rr_fail(c->err, c->err_len, "%s:%d: %s", c->path, c->line, msg);
        c->failed = 1;
        return 1;
    }
    c->seen[i] = 1;
    snprintf(c->r->origin[i], sizeof c->r->origin[i], "%s:%d", c->path, c->line);
    return 1;
}

static int recipe_ini_handler(void* user, const char* section, const char* name, const char* value);

/* Parse text (n bytes) line by line, calling the handler; the first error stops it. */
static void recipe_ini_parse(IniCtx* c, char* text, size_t n) {
    char section[64] = "";
    size_t at = 0;
    if (n >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) at = 3; /* UTF-8 byte-order mark */
    while (at < n && !c->failed) {
        char* line = text + at;
        char* nl = memchr(line, '\n', n - at);
        size_t len = nl ? (size_t)(nl - line) : n - at;
        at += len + (nl ? 1 : 0);
        c->line++;
        if (memchr(line, 0, len)) {
            rr_fail(c->err, c->err_len, "%s:%d: a NUL byte inside the line (byte %zu); a recipe is text", c->path,
                 c->line, (size_t)((char*)memchr(line, 0, len) - line) + 1);
            c->failed = 1;
            return;
        }
        char* s = ini_strip(line, line + len);
        if (!*s || *s == ';' || *s == '#') continue;
        if (*s == '[') {
            char* close = strchr(s, ']');
            if (!close) {
                rr_fail(c->err, c->err_len, "%s:%d: syntax error: '[' without ']' (expected [section])", c->path, c->line);
                c->failed = 1;
                return;
            }
            char* name = ini_strip(s + 1, close);
            snprintf(section, sizeof section, "%s", name);
            continue;
        }
        char* eq = s + strcspn(s, "=:");
        if (!*eq) {
            rr_fail(c->err, c->err_len,
                 "%s:%d: syntax error (expected [section], key = value, or a ; / # comment)", c->path, c->line);
            c->failed = 1;
            return;
        }
        char* vend = eq + 1 + strlen(eq + 1);
        /* inline comment: ; after whitespace */
        for (char* q = eq + 1; *q; q++)
            if (*q == ';' && q > eq + 1 && isspace((unsigned char)q[-1])) {
                vend = q;
                break;
            }
        char* value = ini_strip(eq + 1, vend);
        char* key = ini_strip(s, eq);
        recipe_ini_handler(c, section, key, value);
    }
}

int recipe_load(Recipe* r, const char* path, char* err, size_t err_len) {
    recipe_defaults(r);
    snprintf(r->path, sizeof r->path, "%s", path);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        rr_fail(err, err_len, "recipe '%s' is a directory, expected a recipe .ini file (see recipes/)", path);
        return -1;
    }
    size_t n = 0;
    char* text = rr_read_file(path, &n, RR_MAX_INI);
    if (!text) {
        char why[160], hint[PATH_MAX + 128] = "";
        int e = errno;
        if (e == ENOENT) { /* a shipped recipe named without its folder, or a path from elsewhere */
            const char* base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
            char there[PATH_MAX];
            snprintf(there, sizeof there, "recipes/%s", base);
            if (strcmp(there, path) != 0 && stat(there, &sb) == 0 && S_ISREG(sb.st_mode))
                snprintf(hint, sizeof hint, "\n---> HINT: did you mean '%s'?", there);
            else
                snprintf(hint, sizeof hint, "\n---> HINT: the path is from the working directory; the shipped recipes "
                         "are the repository's recipes/*.ini (recipes/README.md)");
        }
        rr_fail(err, err_len, "cannot open recipe '%s': %s%s", path, rr_read_file_why(e, "a recipe .ini file", why, sizeof why),
                hint);
        return -1;
    }
    IniCtx c;
    memset(&c, 0, sizeof c);
    c.r = r;
    c.path = path;
    c.err = err;
    c.err_len = err_len;
    recipe_ini_parse(&c, text, n);
    free(text);
    return c.failed ? -1 : 0;
}

int recipe_set(Recipe* r, const char* assignment, char* err, size_t err_len) {
    const char* eq = strchr(assignment, '=');
    const char* dot = strchr(assignment, '.');
    if (!eq || !dot || dot > eq) {
        rr_fail(err, err_len, "--set %s: expected section.key=value (e.g. --set train.steps=10)", assignment);
        return -1;
    }
    char section[64], key[64];
    size_t sl = (size_t)(dot - assignment), kl = (size_t)(eq - dot - 1);
    if (sl == 0 || sl >= sizeof section || kl == 0 || kl >= sizeof key) {
        rr_fail(err, err_len, "--set %s: expected section.key=value", assignment);
        return -1;
    }
    memcpy(section, assignment, sl);
    section[sl] = 0;
    memcpy(key, dot + 1, kl);
    key[kl] = 0;
    int i = recipe_key_find(section, key);
    if (i < 0) {
        int near = recipe_key_nearest(section, key);
        if (near >= 0)
            rr_fail(err, err_len, "--set %s: unknown key '%s.%s'; did you mean '%s.%s'? (recipes/README.md lists the keys)",
                    assignment, section, key, recipe_keys[near].section, recipe_keys[near].key);
        else
            rr_fail(err, err_len, "--set %s: unknown key '%s.%s' (see recipes/README.md for the keys)", assignment,
                    section, key);
        return -1;
    }
    char msg[1024];
    if (recipe_key_parse(r, &recipe_keys[i], eq + 1, msg, sizeof msg) != 0) {
        rr_fail(err, err_len, "--set %s: %s", assignment, msg);
        return -1;
    }
    snprintf(r->origin[i], sizeof r->origin[i], "--set");
    return 0;
}

int recipe_set_derived(Recipe* r, const char* assignment, const char* origin, char* err, size_t err_len) {
    if (recipe_set(r, assignment, err, err_len) != 0) return -1;
    char section[64] = "";
    const char* dot = strchr(assignment, '.');
    const char* eq = strchr(assignment, '=');
    RR_ASSERT(dot && eq && dot < eq && (size_t)(dot - assignment) < sizeof section);
    memcpy(section, assignment, (size_t)(dot - assignment));
    char key[64] = "";
    RR_ASSERT((size_t)(eq - dot - 1) < sizeof key);
    memcpy(key, dot + 1, (size_t)(eq - dot - 1));
    int i = recipe_key_find(section, key);
    snprintf(r->origin[i], sizeof r->origin[i], "%s", origin);
    return 0;
}

int recipe_recompute(const Recipe* r, int tower) {
    const char* v = tower ? r->recompute_tower : r->recompute_lm;
    if (!v[0] || !strcmp(v, "same")) v = r->recompute;
    return !strcmp(v, "full") ? RECOMPUTE_FULL : !strcmp(v, "selective") ? RECOMPUTE_SELECTIVE : RECOMPUTE_NONE;
}

const char* recipe_origin(const Recipe* r, const char* section, const char* key) {
    int i = recipe_key_find(section, key);
    RR_ASSERT(i >= 0);
    return r->origin[i];
}

/* "ORIGIN: section.key = VALUE: " prefix for cross-key errors. */
#define VFAIL(sec, key, value_fmt, value, ...)                                                             \
    do {                                                                                                     \
        int k_ = snprintf(err, err_len, "%s: %s.%s = " value_fmt ": ", recipe_origin(r, sec, key), sec, key, \
                          value);                                                                            \
        if (k_ > 0 && (size_t)k_ < err_len) snprintf(err + k_, err_len - (size_t)k_, __VA_ARGS__);          \
        return -1;                                                                                           \
    } while (0)

int recipe_validate(Recipe* r, char* err, size_t err_len) {
    /* the defaults that depend on another key, resolved before anything reads or hashes them */
    if (!strcmp(r->precision, "auto")) {
        snprintf(r->precision, sizeof r->precision, "%s", backend_name_host_addressable(r->backend) == 0 ? "bf16" : "fp32");
    }
    if (r->anyres == 1)
        VFAIL("model", "anyres", "%d", r->anyres, "an image is its base image and at least one tile; allowed: 0 (off) or 2 .. 1025");
    if (r->anyres && r->vision_image_size % r->patch)
        VFAIL("model", "vision_image_size", "%d", r->vision_image_size,
              "not a multiple of model.patch (%d): any-resolution tiles are image_size / patch patches a side", r->patch);
    if (!strcmp(r->vision_arch, "clip")) {
        if (r->vision_image_size % r->patch)
            VFAIL("model", "vision_image_size", "%d", r->vision_image_size,
                  "not a multiple of model.patch (%d): CLIP's position grid is image_size / patch; allowed: a multiple of %d",
                  r->patch, r->patch);
        int f = r->vision_feature_layer, run = f < 0 ? r->vision_layers + 1 + f : f;
        if (run < 1 || run > r->vision_layers)
            VFAIL("model", "vision_feature_layer", "%d", f,
                  "selects hidden state %d of model.vision_layers + 1 = %d; allowed: 1 .. %d or -1 .. -%d", run,
                  r->vision_layers + 1, r->vision_layers, r->vision_layers);
    }
    /* heads divide widths; head dims fit the RoPE variants */
    if (r->vision_width % r->vision_heads)
        VFAIL("model", "vision_heads", "%d", r->vision_heads,
              "model.vision_width (%d) is not divisible by it; allowed: a divisor of %d", r->vision_width,
              r->vision_width);
    if (strcmp(r->vision_arch, "clip") && (r->vision_width / r->vision_heads) % 4)
        VFAIL("model", "vision_width", "%d", r->vision_width,
              "head dim %d / %d = %d is not divisible by 4 (2-D RoPE rotates pairs within each half of a head); "
              "allowed: vision_width a multiple of 4 x vision_heads",
              r->vision_width, r->vision_heads, r->vision_width / r->vision_heads);
    if (r->text_width % r->text_heads)
        VFAIL("model", "text_heads", "%d", r->text_heads,
              "model.text_width (%d) is not divisible by it; allowed: a divisor of %d", r->text_width, r->text_width);
    if ((r->text_width / r->text_heads) % 2)
        VFAIL("model", "text_width", "%d", r->text_width,
              "head dim %d / %d = %d is odd (1-D RoPE rotates halves); allowed: a multiple of 2 x text_heads",
              r->text_width, r->text_heads, r->text_width / r->text_heads);
    if (r->text_kv_heads > 0 && r->text_heads % r->text_kv_heads)
        VFAIL("model", "text_kv_heads", "%d", r->text_kv_heads,
              "does not divide model.text_heads (%d): each key/value head serves a whole group of query heads; "
              "allowed: a divisor of %d, or 0", r->text_heads, r->text_heads);
    if (!strcmp(r->rope_type, "llama3") && !(r->rope_high_freq_factor > r->rope_low_freq_factor))
        VFAIL("model", "rope_high_freq_factor", "%g", r->rope_high_freq_factor,
              "not above model.rope_low_freq_factor (%g); allowed: > %g", r->rope_low_freq_factor,
              r->rope_low_freq_factor);
    if (r->min_patches > r->max_patches)
        VFAIL("data", "min_patches", "%d", r->min_patches, "greater than data.max_patches (%d); allowed: <= %d",
              r->max_patches, r->max_patches);
    if (r->max_patches > r->microbatch_tokens)
        VFAIL("data", "max_patches", "%d", r->max_patches,
              "an image of that many patches cannot fit data.microbatch_tokens (%d); allowed: <= %d",
              r->microbatch_tokens, r->microbatch_tokens);
    if (r->epochs > 0 && strcmp(r->source, "shards") != 0)
        VFAIL("train", "epochs", "%g", r->epochs, "data.source = %s has no data set to pass over; allowed: 0 (use "
              "train.steps), or data.source = shards", r->source);
    if (r->eval_every > 0 && !strcmp(r->source, "shards") && !r->eval_shards[0])
        VFAIL("train", "eval_every", "%d", r->eval_every, "no held-out data: data.eval_shards is not set; allowed: "
              "0, or set data.eval_shards (shards packed from held-out records)");
    if (!strcmp(r->source, "synthetic") && r->vocab < 16)
        VFAIL("model", "vocab", "%d", r->vocab, "data.source = synthetic has no tokenizer; allowed: model.vocab >= 16");
    if (r->synthetic_plan[0] && strcmp(r->source, "synthetic") != 0)
        VFAIL("data", "synthetic_plan", "'%s'", r->synthetic_plan, "only the synthetic source takes a plan; allowed: \"\" "
              "with data.source = %s", r->source);
    if (r->fixed_batch && strcmp(r->source, "synthetic") != 0)
        VFAIL("data", "fixed_batch", "%s", "true", "only the synthetic source repeats a step; allowed: false with "
                                                   "data.source=%s", r->source);
    if (r->lora_r > 0) {
        unsigned bits;
        char e[256];
        if (lm_lora_targets_parse(r->lora_targets, &bits, e, sizeof e) != 0 ||
            vit_lora_targets_parse(r->lora_targets, &bits, e, sizeof e) != 0)
            VFAIL("lora", "targets", "'%s'", r->lora_targets, "%s", e);
        if (bits && strcmp(r->vision_arch, "clip") != 0)
            VFAIL("lora", "targets", "'%s'", r->lora_targets, "the tower's targets (vision.*) adapt the CLIP tower's "
                  "linears and model.vision_arch is %s; allowed: LM targets only, or model.vision_arch = clip",
                  r->vision_arch);
    }
    if (!strcmp(r->lora_quant, "nf4") && r->lora_r <= 0)
        VFAIL("lora", "quant", "%s", r->lora_quant, "QLoRA quantises the base of LoRA's adapters and lora.r is %d; "
              "allowed: none, or nf4 with lora.r > 0", r->lora_r);
    /* optimiser vs schedule; the schedule parsed once, for every step */
    r->lr_schedule = !strcmp(r->schedule, "linear") ? LR_SCHEDULE_LINEAR
                     : !strcmp(r->schedule, "constant") ? LR_SCHEDULE_CONSTANT : LR_SCHEDULE_COSINE;
    if (r->min_lr > r->lr)
        VFAIL("optim", "min_lr", "%g", r->min_lr, "greater than optim.lr (%g); allowed: <= %g", r->lr, r->lr);
    if (r->projector_lr > 0 && r->lr <= 0)
        VFAIL("optim", "projector_lr", "%g", r->projector_lr, "its schedule is optim.lr's scaled by projector_lr / lr, "
              "and optim.lr is 0; allowed: 0, or optim.lr > 0");
    if (r->warmup > r->steps)
        VFAIL("optim", "warmup", "%d", r->warmup, "longer than train.steps (%d); allowed: <= %d", r->steps, r->steps);
    if (r->stop_at > r->steps)
        VFAIL("train", "stop_at", "%d", r->stop_at, "after train.steps (%d); allowed: 0 .. %d", r->steps, r->steps);
    if (r->dump_step == 0 || r->dump_step > r->steps)
        VFAIL("train", "dump_step", "%d", r->dump_step, "not a step of this run; allowed: -1 or 1 .. %d", r->steps);
    if (!strcmp(r->comm, "nccl") && backend_name_host_addressable(r->backend) != 0)
        VFAIL("runtime", "comm", "%s", r->comm, "carries device memory: it needs runtime.backend = cuda (got %s); "
              "allowed with %s: mpi", r->backend, r->backend);
    /* parallel layout: the LM layers are split over pp x chunks virtual stages (runtime/model/partition.h; the
     * first also holds the ViT and projector), each with at least one layer; TP splits heads, hidden
     * sizes and the vocabulary */
    int S = r->pp * r->chunks;
    /* with parallel.tower_layers stages before the first LM one hold tower blocks alone, with parallel.layers the last
     * may hold the head alone (train_tower_split checks them) */
    if (S > r->text_layers + (r->tower_layers[0] ? r->vision_layers : 0) + (r->layers[0] ? 1 : 0))
        VFAIL("parallel", "pp", "%d", r->pp,
              "pp x chunks = %d virtual stages but the LM has only %d layers (model.text_layers); "
              "allowed: pp x chunks <= %d%s",
              S, r->text_layers, r->text_layers + (r->layers[0] ? 1 : 0),
              r->layers[0] ? " (a last stage with the head alone)" : "");
    if (r->layers[0]) {
        int* split = mallocCheck((size_t)S * sizeof(int));
        char why[512];
        int rc = partition_parse(r->layers, r->text_layers, S, split, why, (int)sizeof why);
        free(split);
        if (rc != 0)
            VFAIL("parallel", "layers", "%s", r->layers, "%s; allowed: %d comma-separated layer counts summing to %d",
                  why, S, r->text_layers);
    }
    int vhint = !strcmp(r->hint, "zbv") || !strcmp(r->hint, "dualpipev");
    if (vhint && r->chunks != 2)
        VFAIL("parallel", "chunks", "%d", r->chunks, "hint %s places exactly 2 model chunks per rank in a V; allowed: 2",
              r->hint);
    if (r->chunks > 1 && !vhint && strcmp(r->hint, "interleaved-1f1b") != 0)
        VFAIL("parallel", "chunks", "%d", r->chunks, "only the interleaved-1f1b, zbv and dualpipev hints run several "
                                                     "chunks per rank; allowed: 1, or set parallel.hint=interleaved-1f1b");
    const struct {
        const char* what;
        int v;
    } tp_div[] = {{"model.vision_heads", r->vision_heads},
                  {"model.text_heads", r->text_heads},
                  {"model.text_kv_heads (tensor parallelism splits grouped-query attention by key/value head)",
                   r->text_kv_heads},
                  {"model.ffn_hidden", r->ffn_hidden},
                  {"model.text_width (projector hidden)", r->text_width},
                  {"model.vocab", r->vocab}};
    for (size_t i = 0; i < sizeof tp_div / sizeof tp_div[0]; i++)
        if (r->tp > 1 && tp_div[i].v > 0 && tp_div[i].v % r->tp)
            VFAIL("parallel", "tp", "%d", r->tp, "%s (%d) is not divisible by it; allowed: a common divisor", tp_div[i].what,
                  tp_div[i].v);
    {
        /* runtime.cap: "N" (N >= 0) or "Kx" (K > 0, a multiple of the hint's own peak) */
        char* end = NULL;
        double v = strtod(r->cap, &end);
        int ok = end != r->cap && isfinite(v) && v >= 0;
        if (ok && *end == 'x' && end[1] == 0) ok = v > 0;
        else if (ok) ok = *end == 0 && v <= 1e9 && v == floor(v); /* range before any cast */
        if (!ok)
            VFAIL("runtime", "cap", "'%s'", r->cap,
                  "not a cap; allowed: a whole number of microbatches (0 = the 1f1b peak) or a multiple such as 1.5x");
        if (strcmp(r->cap, "0") != 0 && strcmp(r->mode, "ready") != 0 && strcmp(r->mode, "lookahead") != 0 &&
            strcmp(r->mode, "adaptive") != 0)
            VFAIL("runtime", "cap", "%s", r->cap,
                  "only `ready`, `lookahead` and `adaptive` modes use a cap; allowed: 0 with parallel.mode=%s", r->mode);
    }
    if (r->profile && backend_name_host_addressable(r->backend) != 0)
        VFAIL("runtime", "profile", "%s", "true", "the profiler times CUDA events; allowed: true with runtime.backend = cuda "
              "(got %s)", r->backend);
    if (strcmp(r->compute, "model") != 0) {
        if (strncmp(r->compute, "replay:", 7) != 0 || r->compute[7] == 0)
            VFAIL("runtime", "compute", "'%s'", r->compute, "allowed: model, or replay:FILE (a duration file)");
        if (r->pp < 2)
            VFAIL("runtime", "compute", "'%s'", r->compute,
                  "replay runs the pipeline runtime; allowed with parallel.pp > 1 (got parallel.pp = %d)", r->pp);
    }
    return 0;
}

/* Key k's line of the recipe hash, "section.key=value\n" (its length), or 0 when k does not count. */
static int recipe_hash_line(const Recipe* r, const RecipeKey* k, char* line, size_t size) {
    if (!k->hashed) return 0;
    const char* field = (const char*)r + k->offset;
    int n = 0;
    switch (k->type) {
    case RKEY_INT:
    case RKEY_BOOL: {
        /* The global batch, not its split over replicas: data.microbatches x parallel.dp as the
         * microbatches and dp as 1 (a dp = 1 recipe hashes as before). */
        int v = *(const int*)field;
        if (!strcmp(k->section, "data") && !strcmp(k->key, "microbatches")) v *= r->dp;
        if (!strcmp(k->section, "parallel") && !strcmp(k->key, "dp")) v = 1;
        n = snprintf(line, size, "%s.%s=%d\n", k->section, k->key, v);
        break;
    }
    case RKEY_I64:
        n = snprintf(line, size, "%s.%s=%lld\n", k->section, k->key, (long long)*(const int64_t*)field);
        break;
    case RKEY_FLOAT: n = snprintf(line, size, "%s.%s=%a\n", k->section, k->key, *(const double*)field); break;
    case RKEY_STRING:
    case RKEY_ENUM: n = snprintf(line, size, "%s.%s=%s\n", k->section, k->key, field); break;
    }
    n = n > 0 ? n : 0;
    if (k->hashed == 2) {
        /* A key added after checkpoints were written counts only away from its default, so that the
         * recipes of those checkpoints hash as before. */
        static Recipe def;
        static int have_def;
        if (!have_def) {
            recipe_defaults(&def);
            have_def = 1;
        }
        char d[RECIPE_STR + 128];
        RecipeKey plain = *k;
        plain.hashed = 1;
        int dn = recipe_hash_line(&def, &plain, d, sizeof d);
        if (dn == n && !memcmp(d, line, (size_t)n)) return 0;
    }
    return n;
}

uint64_t recipe_hash(const Recipe* r) {
    /* FNV-1a over "section.key=value\n" of hashed keys, in table order: stable across runs and
     * independent of which file or override set the value. */
    char line[RECIPE_STR + 128];
    uint64_t h = RR_FNV1A64_INIT;
    for (int i = 0; i < n_recipe_keys; i++) {
        int n = recipe_hash_line(r, &recipe_keys[i], line, sizeof line);
        if (n > 0) h = rr_fnv1a64_add(h, line, (size_t)n);
    }
    return h;
}

void recipe_key_format(const Recipe* r, const RecipeKey* k, char* out, size_t size) {
    const char* field = (const char*)r + k->offset;
    switch (k->type) {
    case RKEY_INT: snprintf(out, size, "%d", *(const int*)field); break;
    case RKEY_BOOL: snprintf(out, size, "%s", *(const int*)field ? "true" : "false"); break;
    case RKEY_I64: snprintf(out, size, "%lld", (long long)*(const int64_t*)field); break;
    case RKEY_FLOAT: {
        /* the shortest form that reads back as the same double (3e-3, not 0.0030000000000000001) */
        double v = *(const double*)field;
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(out, size, "%.*g", prec, v);
            if (strtod(out, NULL) == v) break;
        }
        break;
    }
    case RKEY_STRING:
    case RKEY_ENUM: snprintf(out, size, "%s", field); break;
    }
}

int recipe_hash_diff(const Recipe* a, const Recipe* b, char* out, size_t size) {
    char la[RECIPE_STR + 128], lb[RECIPE_STR + 128], va[RECIPE_STR + 16], vb[RECIPE_STR + 16];
    int n = 0;
    size_t o = 0;
    if (size) out[0] = 0;
    for (int i = 0; i < n_recipe_keys; i++) {
        const RecipeKey* k = &recipe_keys[i];
        int na = recipe_hash_line(a, k, la, sizeof la), nb = recipe_hash_line(b, k, lb, sizeof lb);
        if (na == nb && !memcmp(la, lb, (size_t)na)) continue;
        n++;
        if (!strcmp(k->section, "data") && !strcmp(k->key, "microbatches")) {
            /* the global batch is what counts: a dp change with the same product is no difference */
            snprintf(va, sizeof va, "%d (x parallel.dp %d = %d)", a->microbatches, a->dp, a->microbatches * a->dp);
            snprintf(vb, sizeof vb, "%d (x parallel.dp %d = %d)", b->microbatches, b->dp, b->microbatches * b->dp);
        } else {
            recipe_key_format(a, k, va, sizeof va);
            recipe_key_format(b, k, vb, sizeof vb);
        }
        if (o < size)
            o += (size_t)snprintf(out + o, size - o, "%s  %s.%s: %s -> %s", o ? "\n" : "", k->section, k->key, va, vb);
    }
    return n;
}

void recipe_print(const Recipe* r, FILE* f) {
    const char* sec = "";
    for (int i = 0; i < n_recipe_keys; i++) {
        const RecipeKey* k = &recipe_keys[i];
        const char* field = (const char*)r + k->offset;
        if (strcmp(sec, k->section)) {
            fprintf(f, "%s[%s]\n", i ? "\n" : "", k->section);
            sec = k->section;
        }
        switch (k->type) {
        case RKEY_INT: fprintf(f, "%s = %d\n", k->key, *(const int*)field); break;
        case RKEY_BOOL: fprintf(f, "%s = %s\n", k->key, *(const int*)field ? "true" : "false"); break;
        case RKEY_I64: fprintf(f, "%s = %lld\n", k->key, (long long)*(const int64_t*)field); break;
        case RKEY_FLOAT: fprintf(f, "%s = %.17g\n", k->key, *(const double*)field); break;
        case RKEY_STRING:
        case RKEY_ENUM: fprintf(f, "%s = %s\n", k->key, field); break;
        }
    }
}
