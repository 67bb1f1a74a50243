/* model.h — the LLaVA model (docs/model.md "The model, exactly") as pipeline stages.
 *
 * A Stage holds LM blocks [l0, l1). The first stage (l0 == 0) also holds the ViT, the projector and
 * the token embedding and assembles the sequence; the last stage (l1 == Lt) also holds the final
 * RMSNorm, the LM head and the loss. One process without a pipeline is one stage with [0, Lt).
 * Each stage owns its parameters in its own ParamTable, named as in vision/vision.h and text/lm.h:
 *
 *   vision.patch_embed.{weight,bias}                 vision.blocks.{i}.ln1.{weight,bias}
 *   vision.blocks.{i}.attn.qkv.{weight,bias}         vision.blocks.{i}.attn.out.{weight,bias}
 *   vision.blocks.{i}.ln2.{weight,bias}              vision.blocks.{i}.mlp.fc1.{weight,bias}
 *   vision.blocks.{i}.mlp.fc2.{weight,bias}          vision.ln_f.{weight,bias}
 *   projector.0.{weight,bias}  projector.2.{weight,bias}
 *   text.embed.weight
 *   text.blocks.{i}.norm1.weight  text.blocks.{i}.attn.{q,k,v,o}.weight  text.blocks.{i}.norm2.weight
 *   text.blocks.{i}.mlp.{gate,up,down}.weight
 *   text.norm.weight  text.lm_head.weight (absent with tie_embeddings: the head is text.embed.weight; a
 *   last stage that is not the first holds its own copy of text.embed.weight, kept equal to the first
 *   stage's by summing the two gradients each step: stage_tied_embed, as Megatron's embedding group)
 *   optional: text.blocks.{i}.attn.{q,k,v}.bias, text.blocks.{i}.attn.o.bias (text/lm.h)
 * Init (a function of (seed, name) only, so any layout gives the same model): weights N(0, 0.02);
 * vision attn.out and mlp.fc2 by 1/sqrt(2 Lv), text attn.o and mlp.down by 1/sqrt(2 Lt); the
 * projector's second linear unscaled (see vision.h); norm weights 1; biases 0.
 * AdamW weight decay applies to every 2-D tensor (Linear weights, embedding, LM head).
 *
 * Microbatches in flight: each has its own StageActs (saved activations, from one block allocated
 * at init and sized from the token budget: max LM tokens, max patches). The step allocates nothing.
 *
 * Per microbatch: stage_forward, then either stage_backward (B and W fused) or stage_backward_input
 * (B) followed later by stage_backward_weight (W). Weight gradients ADD into params.grad, so the
 * microbatches of a step accumulate; zeroing is the caller's (params_zero_grad). Split and fused
 * backward give bitwise the same gradients (tests/runtime/model/test_model.c). */
#ifndef RRFP_MODEL_H
#define RRFP_MODEL_H

#include <stdint.h>

#include "data/microbatch.h"
#include "engine/engine.h"
#include "engine/params.h"
#include "runtime/comm/comm.h"
#include "text/lm.h"
#include "vision/vision.h"

/* The ViT's LayerNorm eps (1e-5) and 2-D RoPE base (10000) are fixed (docs/model.md "Vision encoder and projector"); the LM's RMSNorm eps
 * and RoPE base are the recipe's (an imported Llama sets them). */
typedef struct {
    int patch;                    /* p: a patch has 3 p^2 values */
    int Dv, Lv, Hv;               /* ViT width, blocks, heads (MLP hidden 4 Dv; Dv/Hv % 4 == 0) */
    int Dt, Lt, Ht;               /* LM width, blocks, heads (Dt/Ht even) */
    int F;                        /* SwiGLU hidden */
    int V;                        /* vocabulary */
    int min_patches, max_patches; /* per image, the loader's smart_resize bounds */
    float init_std;               /* 0.02 */
    uint64_t seed;                /* init seed */
    double rms_eps;               /* LM RMSNorm eps (model.rms_eps); 0 = 1e-5 */
    double rope_base;             /* LM RoPE theta (model.rope_base); 0 = 10000 */
    /* the published-model variants (docs/model.md "The CLIP tower"; 0 = the default model) */
    int vision_arch;              /* VitArch: 0 = the 2-D RoPE ViT, 1 = CLIP (model.vision_arch) */
    int vision_feature_layer;     /* CLIP: hidden_states index of the features (model.vision_feature_layer, -2 as
                                   * LLaVA: negative counts from L + 1, so -1 = after the last block) */
    int vision_image_size;        /* CLIP: the position embeddings' image side (336: a 24 x 24 grid at p = 14) */
    int projector_act;            /* Act: ACT_GELU_TANH (0, the default model's) or ACT_GELU_ERF (Hugging Face's `gelu`) */
    /* the LM variants of LLaVA's successors (0: the default model's) */
    int Hkv;                      /* LM key/value heads (model.text_kv_heads, grouped-query); 0 = Ht */
    int qkv_bias, o_bias;         /* model.text_qkv_bias (Qwen2), model.text_o_bias (Llama attention_bias) */
    int tie_embeddings;           /* model.tie_embeddings: the LM head is text.embed.weight */
    int rope_llama3;              /* model.rope_type = llama3, with the four factors below */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos;
    /* LoRA ([lora]; text/lm.h, docs/training.md "LoRA"; lora_r 0 = none): adapters on the LM linears of
     * lora_targets (LmLoraTarget bits), scale lora_alpha / lora_r; with adapters every other LM tensor is frozen */
    int lora_r;
    double lora_alpha, lora_dropout;
    unsigned lora_targets;
    int lora_quant; /* lora.quant = nf4 (docs/training.md "QLoRA"): the targets' base weights stored as NF4 */
    unsigned vision_lora_targets; /* the CLIP tower's adapted linears (VitLoraTarget bits, lora.targets' vision.*) */
    /* LLaVA-NeXT's any-resolution images (docs/anyres.md; model.anyres): the tower runs over every tile of
     * vision_image_size pixels, the LM takes the base image's features, then the unpadded grid with the learned
     * `image_newline` (Dt) after each row; microbatches carry their images' layout (Microbatch.J). 0 = off, else on;
     * N >= 2 bounds an image's tower images (model_patch_budget) */
    int anyres;
} ModelConfig;

/* Image patches a microbatch of microbatch_tokens LM positions can hold: every position a patch, or with any-resolution
 * images (anyres = N >= 2 tower images an image, each image at least one tile's g^2 positions) N times that. */
int model_patch_budget(const ModelConfig* c, int microbatch_tokens);
/* 0 when the config is usable; else -1 with a message naming the field and what is allowed. */
int model_config_check(const ModelConfig* c, char* err, size_t err_len);
VitConfig model_config_vit(const ModelConfig* c);
LmConfig model_config_lm(const ModelConfig* c);

/* A stage's activation-recompute workspace (stage_set_recompute): one LM block's and one tower block's recomputed
 * activations (lm_recompute_layout, vit_recompute_layout), shared by every microbatch of the stage; what it holds is
 * valid inside one stage call only (the split backward's W recomputes again). With fused (microbatches laid out for
 * stage_backward, split = 0) it also holds the fused backward's scratch (the block gradients, the LM scratch, the
 * residual and head gradients), which each microbatch's block then leaves out: each call points the microbatch at it.
 * One backend block, sized by the largest stage_acts_init. */
typedef struct {
    void* block;
    size_t bytes;
    int max_T, max_Np;
    LmBlockActs lm;
    VitBlockActs vit;
    int fused;
    void* bwd;        /* the fused backward's scratch (bwd_bytes), inside block */
    size_t bwd_bytes;
} StageRecompute;

/* A frozen tower's forward scratch (Stage.vit_fwd, a first stage whose tower does not train): everything the tower's
 * forward writes but its output (vit_acts_layout_scratch), which each microbatch keeps (VitActs.vout, the projector's
 * input). One backend block shared by the stage's microbatches, sized by the largest stage_acts_init and carved for
 * each forward again: what it holds is valid inside one stage_forward only. */
typedef struct {
    void* block;
    size_t bytes;
    int max_Np;
    unsigned gen; /* (re)allocations so far: a microbatch bound to an older block uploads CLIP's index again */
} StageTowerScratch;

typedef struct {
    ModelConfig cfg;
    VitConfig vc;
    LmConfig lc;
    int l0, l1;      /* LM blocks [l0, l1) */
    int first, last; /* l0 == 0, l1 == Lt */
    /* The stage's table, for every part of it. Its activations' storage is the stage's choice (stage_init_tp):
     * lc.act_bytes = 2 (the LM's, 2-byte bf16 words) where be's ops take them (BackendOps.bf16_activations:
     * runtime.precision = bf16 on CUDA), RRFP_BF16_ACTIVATIONS is not 0 and no LoRA; vc.act_bytes = 2 (the tower's and
     * the projector's) with it (model_bf16_vision). The stage's hidden_in / hidden_out and every gradient stay f32. */
    const Backend* be;
    ParamTable params;
    /* pointers into params_weights (w: the bf16 compute copy under runtime.precision = bf16, else params.data) and params.grad (g) */
    VitW vit_w, vit_g;
    ProjW proj_w, proj_g;
    Buf embed_w;               /* (V, Dt) the compute copy, typed by its storage (engine/params.h) */
    float* embed_g;            /* (V, Dt) */
    LmBlockW *blk_w, *blk_g;   /* (l1 - l0) */
    struct LmQloraWs* qlora;   /* QLoRA's dequantised base weights (text/lm_qlora.h; NULL without lora.quant) */
    float *normf_w, *normf_g;  /* (Dt) */
    Buf head_w;                /* (V, Dt) the compute copy, typed by its storage */
    float* head_g;             /* (V, Dt) */
    Buf newline_w;             /* (Dt) image_newline (ModelConfig.anyres; first stage), typed by its storage */
    float* newline_g;
    int newline16;             /* its compute copy holds 2-byte words (params_mark_act_table) */
    /* train.freeze: a frozen tensor's gradient pointer (*_g) is NULL and its weight gradient is never
     * computed. First stage: */
    int vit_train;   /* some vision.* tensor trains: the ViT backward runs (else its acts keep nothing) */
    int vit_floor;   /* the ViT's B goes down to this block only (vit_backward_floor) */
    int proj_train;  /* some projector.* tensor trains (its B runs when this or vit_train) */
    long n_vit_backward; /* ViT backward passes run (a frozen tower: stays 0; checked by tests) */
    /* The tower over pipeline stages (docs/anyres.md "The tower over stages"): the stage's tower blocks [tv0, tv1)
     * (VitConfig.blk0 / blk1). tower: it runs a share of the tower: the first stage (tv1 = Lv; the whole tower where
     * tv0 = 0), or a tower-only stage before it (tower_only: l0 == l1 == 0, no LM block, no projector, tv1 < Lv). A
     * tower stage with tv0 > 0 takes the tower's hidden state (rows x Dv: the patches, CLIP's tokens with the class
     * rows) from the previous stage as its hidden_in, a tower-only stage gives its own as hidden_out; the gradients go
     * back only where some block below trains (stage_takes_grad, stage_gives_grad). vit_floor is then the whole
     * tower's (model_vit_floor): a stage whose own blocks are frozen still runs their B for the blocks below. */
    int tv0, tv1, tower, tower_only;
    /* Activation recompute (train.recompute; lc.recompute and vc.recompute say what): the workspace (NULL: none) and
     * the blocks (LM and tower) whose activations a backward recomputed so far */
    StageRecompute* rc;
    long n_recomputed;
    StageTowerScratch* vit_fwd; /* a frozen tower's forward scratch (NULL: the tower trains, or no tower) */
    /* Tensor parallelism (docs/parallel.md "Tensor parallelism"; tp = 1: unsplit). This stage is TP rank tp_rank of tp over
     * the group tp_comm (not owned): its ParamTable holds only this rank's slice of each split tensor
     * (global names, slices recorded; runtime/model/tp.h says which), the ViT, projector and LM blocks
     * all-reduce their row-parallel outputs and column-parallel input gradients over tp_comm, the token
     * embedding is the vocabulary rows [v0, v0 + Vs) (masked lookup + all-reduce) and the LM head those
     * rows too (vocabulary-parallel logits and cross-entropy: the full logits never exist here). A
     * failed all-reduce (a lost TP peer) is kept in tp_err and fails every later one at once; the caller
     * checks stage_tp_error after each forward / backward call. */
    int tp, tp_rank, v0, Vs;
    Comm* tp_comm;
    int tp_on_host;      /* the backend's memory is host memory (else the all-reduces go through tp_host) */
    float* tp_host;
    size_t tp_host_n;
    void* tp_ev;         /* a device TP group (NCCL): the event the all-reduce's stream waits for */
    int tp_failed;
    char tp_err[1024];
    /* LoRA's dropout: the optimiser step (1-based) the next forwards train in, set by the step executors; 0 (the
     * default: evaluation, generation, checks) runs without dropout */
    int64_t lora_step;
    /* runtime.cuda_graphs: the tower's forward and backward recorded once per shape and replayed (runtime/model/vit_graph.c);
     * 0 (the default): launched op by op. vit_graphs: the recorded graphs (owned; stage_free releases them). */
    int cuda_graphs;
    struct VitGraphs* vit_graphs;
    /* The distributed optimizer's overlapped weight all-gather (runtime/train/exec_zero.c; NULL: none): stage_forward
     * calls param_wait(param_ctx, part) before a part's first read of its trainable weights: part 0 the tower, the
     * projector and the embedding (every stage calls it first), 1 + j LM block j, 1 + (l1 - l0) the rest (called
     * after the blocks: every weight of the stage is current when it returns). Nonzero fails the forward like a
     * lost TP peer (stage_tp_error gives the message). */
    int (*param_wait)(void* ctx, int part, char* err, size_t err_len);
    void* param_ctx;
} Stage;

/* runtime/model/vit_graph.c: the tower's device work of a forward (vit_forward_run, after vit_forward_prepare) as a
 * CUDA graph where st->cuda_graphs is set and vbe's device has graphs: a shape (the activations, N, I, the token
 * count) seen for the first time runs eagerly, the second time it is recorded and replayed, later it is replayed
 * (one launch). Elsewhere vit_forward_run. vit_graphs_replays: the replays so far (tests). */
void vit_forward_graphed(Stage* st, const Backend* vbe, VitActs* a);
/* The tower's backward the same way: input and weight both (vit_backward), or the split backward's B
 * (vit_backward_input) or W (vit_backward_weight), each kind its own graph; eager under activation recompute and TP. */
void vit_backward_graphed(Stage* st, const Backend* vbe, VitActs* a, int input, int weight);
long vit_graphs_replays(const Stage* st);
void vit_graphs_free(Stage* st);
/* Drop the recorded graphs (their pointers changed: a frozen tower's scratch reallocated), keeping the count. */
void vit_graphs_forget(struct VitGraphs* gs);

/* stage_init_tp with the tower over stages: LM blocks [l0, l1) and tower blocks [tv0, tv1) (Stage.tv0): a first stage
 * (l0 == 0) holds [tv0, Lv), a tower-only stage (l0 == l1 == 0) [tv0, tv1) with tv1 < Lv, the others none (0, 0). A
 * head-only last stage (l0 == l1 == Lt) holds the final norm, the LM head and the loss alone. */
void stage_init_tower(Stage* st, const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, const char* freeze,
                      const Backend* be, int tp, int tp_rank, Comm* tp_comm);
/* stage_init_tower with head saying whether the stage holds the final norm, the LM head and the loss (l1 == Lt): 0 for
 * the stage ending at Lt when a head-only last stage (l0 == l1 == Lt, head 1) follows it; stage_init_tower takes
 * l1 == Lt */
void stage_init_split(Stage* st, const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int head, const char* freeze,
                      const Backend* be, int tp, int tp_rank, Comm* tp_comm);
/* The lowest tower block whose input gradient a backward needs under the train.freeze list (with the tensors that
 * never train): 0 when the embedding trains, vit_blocks_run when no block does. */
int model_vit_floor(const ModelConfig* cfg, const char* freeze);
/* A stage's edges: whether stage_forward takes hidden_in (the LM's (T, Dt), or the tower's where tv0 > 0), whether
 * its backward takes dhidden_out and gives dhidden_in; the floats of hidden_in and hidden_out (their gradients alike)
 * for a microbatch (0: none), and the most of either at a budget. */
int stage_takes_hidden(const Stage* st);
int stage_takes_grad(const Stage* st);
int stage_gives_grad(const Stage* st);
size_t stage_in_floats(const Stage* st, const Microbatch* mb);
size_t stage_out_floats(const Stage* st, const Microbatch* mb);
size_t stage_edge_max_floats(const Stage* st, int max_tokens, int max_patches);
/* Register this stage's parameters, allocate them on `be` and initialise from cfg->seed. */
void stage_init(Stage* st, const ModelConfig* cfg, int l0, int l1, const Backend* be);
/* The same with the tensors under the comma-separated prefixes of `freeze` frozen (train.freeze; NULL
 * or "" = none): no gradient, no AdamW state (params_alloc_optimizer skips them), no backward work that
 * nothing else needs. Check the list first with model_freeze_check. */
void stage_init_frozen(Stage* st, const ModelConfig* cfg, int l0, int l1, const char* freeze, const Backend* be);
/* The whole model (LM blocks [0, Lt), the tower, the head) for the forward only (eval, generate): every tensor frozen
 * on a params_forward_only table, so it holds its values alone: no gradient buffer (params.grad NULL), no AdamW state,
 * and on a bf16 backend no f32 master (each tensor its compute copy only; the forward reads nothing else). The
 * forward is stage_init_frozen's, bit for bit, whatever train.freeze trained it; stage_backward and the split
 * backward on it are programmer errors (RR_ASSERT). */
void stage_init_forward(Stage* st, const ModelConfig* cfg, const Backend* be);
/* Check a train.freeze list against the whole model: every item must name at least one parameter
 * (exactly, or as a prefix ending at a dot), and something must remain trainable. *n_frozen (may be
 * NULL) gets the count of frozen tensors. Returns 0, or -1 with a message naming the bad item. */
int model_freeze_check(const ModelConfig* cfg, const char* freeze, int* n_frozen, char* err, size_t err_len);
/* The same as TP rank tp_rank of tp over group tp_comm (tp 1: stage_init_frozen). Check the split with
 * model_tp_check first. */
void stage_init_tp(Stage* st, const ModelConfig* cfg, int l0, int l1, const char* freeze, const Backend* be, int tp,
                   int tp_rank, Comm* tp_comm);
/* 0 when every split dimension of the model divides by tp (heads, widths, hidden sizes, vocabulary);
 * else -1 with a message naming the model field and the allowed values. */
int model_tp_check(const ModelConfig* cfg, int tp, char* err, size_t err_len);
/* runtime/model/tp_quant.c, QLoRA under tensor parallelism (docs/training.md "QLoRA"): model_tp_quant_check refuses
 * (0, or -1 with a message) a quantised base weight `name` whose TP slices would cut a block of 64 (model_tp_check
 * calls it); stage_quant_finish quantises every NF4 slice whose values were written since (initialisation, a
 * full-precision init_from) as the whole weight is (its TP ranks' slices gathered: collective over the stage's TP
 * group, after every write of the values and before they are read). Returns 0, or -1 with a message. */
int model_tp_quant_check(const ModelConfig* cfg, const char* name, int ndim, const int64_t* shape, int tp, char* err,
                         size_t err_len);
int stage_quant_finish(Stage* st, char* err, size_t err_len);
/* The error of a failed TP all-reduce during the last stage call (NULL when none). */
const char* stage_tp_error(const Stage* st);
void stage_free(Stage* st);
/* Activation recompute of the LM blocks and of the tower's (Recompute, engine.h; docs/training.md "Activation
 * recompute"): what each microbatch keeps, with one workspace for the stage. Call before stage_acts_init. A tower that
 * does not train (no backward) keeps nothing already: its mode is then RECOMPUTE_NONE. Bitwise the same training
 * numbers as without. */
void stage_set_recompute(Stage* st, Recompute lm, Recompute tower);
/* Run the LM on st->be with f32-word activations (generation's KV cache; call before stage_acts_init); activation
 * recompute off (no backward follows). */
void stage_keep_f32_activations(Stage* st);

typedef enum { ACTS_EMPTY = 0, ACTS_FORWARD = 1, ACTS_INPUT_GRAD = 2 } ActsState;

typedef struct {
    int max_T, max_Np, split;
    ActsState state;
    void* block; /* the one backend allocation */
    size_t bytes;
    /* the microbatch, as the forward saw it */
    int T, S, I, Np, n_supervised;
    int32_t *cu_seqlens, *pos, *ids, *targets;  /* backend memory: (S+1), (T), (T), (T) */
    int32_t *img_cu, *prow, *pcol;              /* backend memory: (I+1), (Np), (Np) */
    Buf patches;                                /* backend memory: (Np, 3p^2) in the tower's activation storage (2-byte
                                                 * bf16 words where Stage.vc.act_bytes is 2: narrowed on the host) */
    int32_t *h_img_cu, *h_img_lm_start;         /* host: (I+1), (I) */
    int32_t* h_seg;                             /* host: (2 * n_seg) text runs [start, end) */
    /* any-resolution images (ModelConfig.anyres): per LM position the projector row it takes (-1: none) and
     * 0 where it takes image_newline (-1 elsewhere), backend memory (T) each, and host copies; n_ar the
     * microbatch's J; nl16 the newline's 2-byte words with 2-byte activations (Dt) */
    int32_t *ar_idx, *ar_nl, *h_ar_idx, *h_ar_nl;
    int n_ar;
    uint16_t* nl16;
    int n_seg;
    /* first stage */
    VitActs vit;                /* a frozen tower: its vout here, the rest Stage.vit_fwd's (bound at each forward) */
    unsigned vit_fwd_gen;       /* the Stage.vit_fwd block it was last bound to (StageTowerScratch.gen) */
    ProjActs proj;
    /* LM blocks of this stage */
    Buf res;               /* (nL+1, max_T, Dt) residual at block boundaries (LM activations); res[0] = stage input */
    LmBlockActs* blocks;   /* (nL) */
    LmBlockGrads* grads;   /* (nL); all alias one set when not split */
    LmScratch scratch;
    float* dres;           /* split: (nL+1, max_T, Dt); fused: two buffers used alternately */
    uint16_t* dres16;      /* their 2-byte copies with 2-byte LM activations (else NULL), the same slots */
    /* last stage */
    Buf nf;                /* (T, Dt) final RMSNorm (an LM activation) */
    float* rstdf;          /* (T) */
    Buf logits;            /* (T, V) an LM activation */
    float* lse;            /* (T) */
    Buf dlogits;           /* (T, V) kept by B for the head's W: f32, or 2-byte with 2-byte activations at tp 1 */
    float* dnf;            /* (T, Dt) kept by B for the final norm's W */
    float* loss_dev;       /* (1) backend memory */
    /* tensor parallel: this rank's vocabulary rows' local ids (first stage, backend memory (T)), the
     * runs [start, end) of positions whose token it owns (host), the targets (last stage, host (T)) */
    int32_t* lids;
    int32_t* h_own;
    int n_own;
    int32_t* h_targets;
    uint16_t* h_patches16; /* host: (max_patches, 3p^2) the patches narrowed to bf16 for the upload (2-byte tower only) */
    float loss_sum;        /* host: sum of CE over this microbatch's supervised targets */
    /* Generation (runtime/train/generate.c; NULL in training): block j's KV cache kv_k[j], kv_v[j]
     * ((rows, Dkv) each: the key/value heads' width) with kv_past rows filled; stage_forward appends the
     * microbatch's (one sample) and attends to all of them (text/lm.h, LmSeq). */
    float **kv_k, **kv_v;
    int kv_past;
    uint64_t lora_seed; /* LoRA's dropout key of the microbatch (text/lm.h LmSeq.lora_seed), set by its forward */
} StageActs;

/* The first n values of a last stage's logits (a->logits, after stage_forward) into host f32 words dst: a copy,
 * widened (exact) where the LM stores 2-byte bf16 activations. */
void stage_logits_d2h(const Stage* st, const StageActs* a, float* dst, size_t n);
/* 1 when a stage of a TP group of tp ranks runs its LM on 2-byte bf16 activations, given that its backend's ops
 * take them (BackendOps.bf16_activations: the CUDA backend under runtime.precision = bf16): RRFP_BF16_ACTIVATIONS is not 0 (any
 * tp: the TP sums of 2-byte partials run in f32, text/lm.c). stage_init_tp and the dry run's estimate (runtime/train/layout.c) both ask it. */
int model_bf16_activations(int tp);
/* 1 when a first stage's ViT and projector run on 2-byte activations with its LM (model_bf16_activations): every
 * tower and projector of the model config today (the RoPE tower and CLIP's, the tanh- and the exact-GELU
 * projector); kept as the one place that decides. */
int model_bf16_vision(const ModelConfig* cfg);
/* model_stage_acts_bytes_tp with the LM's activations lm_act_bytes (2 or 4) bytes each (LmConfig.act_bytes), and the
 * tower's too where model_bf16_vision says so. vit_train = 0: the tower is frozen (train.freeze leaves none of its
 * tensors trainable), and keeps nothing for a backward, as stage_init_tp lays it out. */
size_t model_stage_acts_bytes_lm(const ModelConfig* cfg, int l0, int l1, int max_tokens, int max_patches, int split, int tp,
                                 int lm_act_bytes, int vit_train);
/* model_stage_acts_bytes_lm under activation recompute (lm, tower: Recompute), with *ws (may be NULL) the bytes of
 * the stage's one recompute workspace (StageRecompute) and a frozen tower's forward scratch (StageTowerScratch)
 * beside the microbatches' blocks. */
size_t model_stage_acts_bytes_rc(const ModelConfig* cfg, int l0, int l1, int max_tokens, int max_patches, int split, int tp,
                                 int lm_act_bytes, int vit_train, int lm, int tower, size_t* ws);
/* model_params_register_tp and model_stage_acts_bytes_rc of a stage with tower blocks [tv0, tv1) (stage_init_tower; tv1 < 0:
 * the tower on the first stage, as those) */
void model_params_register_tower(const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int tp, int t, ParamTable* pt);
/* the same with head as stage_init_split's (the _tower ones take l1 == Lt) */
void model_params_register_split(const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int head, int tp, int t,
                                 ParamTable* pt);
size_t model_stage_acts_bytes_split(const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int head, int max_tokens,
                                    int max_patches, int split, int tp, int lm_act_bytes, int vit_train, int lm, int tower,
                                    size_t* ws);
size_t model_stage_acts_bytes_tower(const ModelConfig* cfg, int l0, int l1, int tv0, int tv1, int max_tokens, int max_patches,
                                    int split, int tp, int lm_act_bytes, int vit_train, int lm, int tower, size_t* ws);
/* Bytes of one StageActs (for the memory plan). */
size_t stage_acts_bytes(const Stage* st, int max_tokens, int max_patches, int split);
/* The stage's largest attention calls at a microbatch of at most max_tokens LM tokens and max_patches image
 * patches, for BackendDevice.reserve: the ViT's (the first stage; one sequence per image, each of at least
 * min_patches patches) and the LM's (any LM blocks; at most one sequence per token), with this TP rank's
 * heads. Returns how many entries of out it filled (0 .. 2). */
int stage_attn_reserve(const Stage* st, int max_tokens, int max_patches, AttnReserve out[2]);
/* Exact sizes of the stage holding LM blocks [l0, l1) without allocating anything (--dry-run of a
 * full-size recipe): parameter floats, and bytes of one StageActs at the given budget. */
/* Parameter counts of a model by component (doubles: a 7B count overflows nothing); sizes.c. */
typedef struct {
    double vision_embed, vision_block, vision_final, vision;
    double projector;
    double text_embed, text_block, text_final, head, text;
    double total;
} ModelParamCounts;
void model_param_counts(const ModelConfig* mc, ModelParamCounts* c);

size_t model_stage_param_count(const ModelConfig* cfg, int l0, int l1);
/* Register (params_init, then names and shapes; nothing allocated) the parameters of the stage holding
 * LM blocks [l0, l1): with [0, Lt) the whole model. Free with params_free. */
void model_params_register(const ModelConfig* cfg, int l0, int l1, ParamTable* pt);
/* The same for TP rank t of tp (its slices only; tp 1: the above). */
void model_params_register_tp(const ModelConfig* cfg, int l0, int l1, int tp, int t, ParamTable* pt);
/* Bytes of one StageActs of a TP rank of tp (the split activations; tp 1: model_stage_acts_bytes). */
size_t model_stage_acts_bytes_tp(const ModelConfig* cfg, int l0, int l1, int max_tokens, int max_patches, int split,
                                 int tp);
/* Mark the tensors of a registered (not yet allocated) table under the train.freeze list frozen; returns
 * the trainable values left. */
size_t model_params_freeze(ParamTable* pt, const char* freeze);
size_t model_stage_acts_bytes(const ModelConfig* cfg, int l0, int l1, int max_tokens, int max_patches, int split);
/* split = 1 allows stage_backward_input/_weight (keeps per-block gradients); 0 only stage_backward. */
void stage_acts_init(StageActs* a, const Stage* st, int max_tokens, int max_patches, int split);
void stage_acts_free(StageActs* a, const Stage* st);

/* Forget the microbatch held by `a` without a backward (forward-only use: evaluation, checks). */
void stage_acts_release(StageActs* a);

/* Forward one microbatch. hidden_in (T, Dt) in backend memory: the previous stage's output (NULL on
 * the first stage). hidden_out (T, Dt): written with this stage's output (NULL on the last stage).
 * On the last stage *loss_sum (host) = sum of CE over the microbatch's supervised targets.
 * A microbatch that does not fit the budget or is inconsistent (image spans, ids) is reported
 * naming the sample and exits. */
void stage_forward(Stage* st, StageActs* a, const Microbatch* mb, const float* hidden_in, float* hidden_out,
                   float* loss_sum);
/* B: input gradients only. dhidden_out (T, Dt): gradient of this stage's output from the next stage
 * (NULL on the last stage, which starts from the loss scaled by loss_scale = 1 / supervised targets
 * in the step). dhidden_in (T, Dt) is OVERWRITTEN with the gradient of this stage's input (NULL on
 * the first stage). Keeps what W needs; needs split = 1. */
void stage_backward_input(Stage* st, StageActs* a, const float* dhidden_out, float loss_scale, float* dhidden_in);
/* W: adds this microbatch's weight gradients into st->params.grad; frees the StageActs for reuse. */
void stage_backward_weight(Stage* st, StageActs* a);
/* B and W fused (block by block); same gradients, bitwise, as B then W. */
void stage_backward(Stage* st, StageActs* a, const float* dhidden_out, float loss_scale, float* dhidden_in);

/* ---- dumps for external checking (layout in README.md, "Step dumps") ---------------------------- */
/* The stage's parameter values (grads = 0) or gradients (grads = 1), every tensor by name. */
/* Check a microbatch against the stage (ids, targets, positions, images, patches) and the capacity of
 * `a` (made for this stage). Returns 0, or -1 with a message naming the sample and what is wrong: a loader
 * bug or a damaged shard must not turn into a silent wrong step. Callers of stage_forward run it once
 * per microbatch (stage_forward itself only asserts the capacity). */
int stage_check_microbatch(const Stage* st, const StageActs* a, const Microbatch* mb, char* err, size_t err_len);

int stage_dump_params(const Stage* st, int grads, const char* path, char* err, size_t err_len);
/* The stage's compute copy (runtime.precision = bf16; engine/params.h) as the ops read it, every tensor by
 * name and in its storage: BF16 for the 2-byte copies, F32 words holding bf16 values for the others. Returns
 * 1 when the stage has no compute copy (fp32: nothing written), 0 when written, -1 with a message. */
int stage_dump_compute(const Stage* st, const char* path, char* err, size_t err_len);
/* The microbatch as the model saw it (all its inputs), plus, on the last stage, the logits (T, V)
 * of its forward (a must be forwarded) and its loss_sum. */
int stage_dump_microbatch(const Stage* st, const StageActs* a, const Microbatch* mb, const char* path, char* err,
                          size_t err_len);
/* config.json: the ModelConfig and `extra` key/values (a JSON object text, may be NULL). */
int model_dump_config(const ModelConfig* c, const char* extra_json, const char* path, char* err, size_t err_len);

#endif
