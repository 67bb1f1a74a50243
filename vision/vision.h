/* vision.h — the vision tower (docs/model.md "Vision encoder and projector"): a ViT with dynamic resolution and the LLaVA-1.5
 * `mlp2x_gelu` projector.
 *
 * Images are packed without padding: Np patch rows in all, image i owning rows
 * [img_cu[i], img_cu[i+1]). Attention is bidirectional within each image (cu_seqlens = img_cu),
 * 2-D RoPE rotates the first half of each head dim by the patch row and the second half by the column.
 *
 *   x0 = patch_embed(patches)                                   Linear(3p^2, D) with bias
 *   block: x += out(attn(rope2d(qkv(LN1(x)))));  x += fc2(gelu(fc1(LN2(x))))
 *   vout = ln_f(x_L)
 *   projector: pout = fc2(gelu(fc1(vout)))                       Linear(D, Dt), Linear(Dt, Dt)
 *
 * Parameter names (registered by vit_params_add / projector_params_add, in this order):
 *   vision.patch_embed.weight (D, 3p^2)      vision.patch_embed.bias (D)
 *   vision.blocks.{i}.ln1.weight (D)         vision.blocks.{i}.ln1.bias (D)
 *   vision.blocks.{i}.attn.qkv.weight (3D, D) vision.blocks.{i}.attn.qkv.bias (3D)   rows [q | k | v]
 *   vision.blocks.{i}.attn.out.weight (D, D) vision.blocks.{i}.attn.out.bias (D)     std 0.02/sqrt(2L)
 *   vision.blocks.{i}.ln2.weight (D)         vision.blocks.{i}.ln2.bias (D)
 *   vision.blocks.{i}.mlp.fc1.weight (4D, D) vision.blocks.{i}.mlp.fc1.bias (4D)
 *   vision.blocks.{i}.mlp.fc2.weight (D, 4D) vision.blocks.{i}.mlp.fc2.bias (D)      std 0.02/sqrt(2L)
 *   vision.ln_f.weight (D)                   vision.ln_f.bias (D)
 *   projector.0.weight (Dt, D)  projector.0.bias (Dt)  projector.2.weight (Dt, Dt)  projector.2.bias (Dt)
 * The projector keeps LLaVA-1.5's nn.Sequential indices (0 = Linear, 1 = GELU, 2 = Linear), so a
 * LLaVA `mm_projector.*` checkpoint maps by renaming the prefix. Its second linear is NOT scaled by
 * 1/sqrt(2L): that scaling keeps the variance of a residual stream fed by 2L branch outputs near 1,
 * and the projector's output is not such a branch (it is the input of the LM, a plain std 0.02 layer).
 * Weights N(0, 0.02) keyed by (seed, name); LayerNorm weights 1; all biases 0.
 *
 * The CLIP tower (arch VIT_ARCH_CLIP, model.vision_arch = clip; OpenAI's ViT as Hugging Face's
 * CLIPVisionModel and LLaVA use it). Image i's patches become 1 + n_i tokens: a class token, then its
 * patches in order (tokens packed without padding, image i at [img_cu[i] + i, img_cu[i+1] + i + 1)):
 *   e = [class | patch_embed(patches)] + pos                   patch_embed Linear(3p^2, D) without bias
 *   pos: row 0 for the class token; the patches' rows 1 .. G^2 (a G x G grid, G = image_size / p), for an
 *        image of another grid bicubic-interpolated from them (torch interpolate, align_corners=False,
 *        A = -0.75, indices clamped at the border) as Hugging Face's interpolate_pos_encoding does
 *   x0 = pre_ln(e); block: x += out(attn(q, k, v of LN1(x))); x += fc2(quick_gelu(fc1(LN2(x))))
 *   vout = the patch rows of x after L_run blocks (LLaVA's vision_feature_layer, hidden_states[L_run],
 *          select strategy `default`: without the class token); no final LayerNorm
 * Its names: vision.patch_embed.weight (D, 3p^2): CLIP's Conv2d weight (D, 3, p, p) as it is, a linear over
 * the patch's pixels in CLIP's channel-major order (the tower reorders each patch row from the loader's
 * (row, col, channel) to (channel, row, col) first), vision.class_embedding (D),
 * vision.pos_embed.weight (1 + G^2, D), vision.pre_ln.{weight,bias}, the blocks as above (CLIP's q, k, v
 * projections stacked as attn.qkv), vision.post_ln.{weight,bias} (CLIP's post_layernorm: kept for export,
 * never used, as in LLaVA). Blocks [L_run, L) and post_ln are registered but never run: the stage freezes
 * them (no gradient, no AdamW: weight decay would change tensors nothing trains).
 *
 * Backward is split as the pipeline needs: *_backward_input (B) computes only input gradients and
 * keeps what the weight gradients need in the activations; *_backward_weight (W) adds the weight
 * gradients from them. Gradients ADD into the grad pointers (accumulation across microbatches); a NULL
 * gradient pointer (a tensor frozen by train.freeze) gets nothing, and its op is skipped. */
#ifndef RRFP_VISION_H
#define RRFP_VISION_H

#include "engine/engine.h"
#include "engine/params.h"

/* The TP group's all-reduce (sum, in place, n floats of backend memory). Returns 0, or -1 when the
 * group failed (the callback keeps its message in ctx for the caller to report). */
typedef int (*VitTpReduce)(void* ctx, float* buf, size_t n);

typedef enum { VIT_ARCH_ROPE2D = 0, VIT_ARCH_CLIP = 1 } VitArch;

/* The CLIP tower's linears LoRA can adapt (vision/vit_lora.c), in the order of their bits in VitConfig.lora_targets:
 * PEFT's module names q_proj, k_proj, v_proj (the rows [q | k | v] of attn.qkv), out_proj, fc1, fc2. */
typedef enum { VIT_LORA_Q, VIT_LORA_K, VIT_LORA_V, VIT_LORA_OUT, VIT_LORA_FC1, VIT_LORA_FC2, VIT_LORA_N } VitLoraTarget;

#define VIT_POS_TAPS 16 /* bicubic: 4 x 4 source rows per interpolated position */

typedef struct {
    int patch;  /* p; a patch row has 3 p^2 values */
    int D, L, H; /* width, blocks, heads (head dim D/H, a multiple of 4 for 2-D RoPE); MLP hidden 4D */
    int Dt;     /* projector output width (the LM's) */
    float init_std; /* 0.02 */
    VitArch arch;   /* VIT_ARCH_ROPE2D (docs/model.md's ViT, the default) or VIT_ARCH_CLIP */
    int grid;       /* CLIP: G, the position embedding's grid side (image_size / patch) */
    int L_run;      /* CLIP: blocks run (the feature layer); 0 = all L */
    int min_patches; /* CLIP: the fewest patches of an image (bounds the class tokens of max_N patches) */
    Act proj_act;   /* the projector's activation: ACT_GELU_TANH (the default model's) or ACT_GELU_ERF (Hugging Face's) */
    /* Tensor parallelism of the blocks (docs/parallel.md "Tensor parallelism"; tp <= 1: unsplit). Rank tp_rank of tp holds
     * heads [tp_rank H/tp, (tp_rank+1) H/tp) of each of q, k, v: its qkv weight is those rows of the q, k
     * and v parts stacked, (3 D/tp, D), with the bias alike; the matching columns of attn.out (D, D/tp);
     * rows [tp_rank 4D/tp, ...) of fc1 (and its bias) and those columns of fc2 (D, 4D/tp); the norms,
     * the patch embedding and the biases of attn.out and fc2 whole. Activations qkv are (N, 3 D/tp),
     * att (N, D/tp), fc1 and gelu (N, 4D/tp). The row-parallel outputs (attn.out, fc2) are all-reduced
     * with their bias added by TP rank 0 only (so once); backward, the LN outputs' partial gradients are
     * all-reduced, so the residual stream and every replicated tensor's gradient are whole and equal on
     * every TP rank. */
    int tp, tp_rank;
    VitTpReduce tp_reduce;
    void* tp_ctx;
    /* Bytes of a stored activation of the tower and the projector (vit_act_dtype): 0 or 4, f32 words; 2, bf16 words
     * (only on a table whose ops take them, engine.h BackendOps.bf16_activations). Sizes the
     * activation buffers; gradients and statistics stay f32. */
    int act_bytes;
    /* Activation recompute of the blocks (Recompute, engine.h) where a backward runs: SELECTIVE keeps no GELU output
     * (fc2's input, recomputed from fc1; the RoPE tower under bf16, whose fused fc1 + GELU reads the unrounded
     * pre-activation, recomputes fc1's GEMM with it), FULL keeps each block's input only (VitActs.x) and re-runs the
     * block into the workspace VitActs.rc_ws (vit_recompute_layout), also before the split backward's W. */
    int recompute;
    /* LoRA on the tower's linears (vision/vit_lora.c; docs/training.md "LoRA"; CLIP only): lora_r > 0 adds
     * lora_scale B A dropout(x) to each linear of lora_targets (VitLoraTarget bits; 0: none) */
    int lora_r;
    float lora_scale, lora_dropout;
    unsigned lora_targets;
    /* A pipeline stage's share of the tower (docs/anyres.md "The tower over stages"): blocks [blk0, blk1) (blk1 0: all,
     * [0, L)). The patch embedding (CLIP: the class and position embeddings, pre_ln) is on the range starting at block
     * 0, the final norm (CLIP: the feature gather, post_ln) on the range ending at L; a range that does not start at 0
     * takes block blk0's input from the previous stage (vit_stage_input), one that does not end at L gives its last
     * block's output to the next (vit_stage_output), and the gradients go the other way. */
    int blk0, blk1;
} VitConfig;

/* The range's bounds, whether it holds the embedding (starts at 0) and the top (ends at L), and the blocks it runs
 * ([lo, run_hi): CLIP runs none past the feature layer) */
static inline int vit_block_lo(const VitConfig* c) { return c->blk1 > 0 ? c->blk0 : 0; }
static inline int vit_block_hi(const VitConfig* c) { return c->blk1 > 0 ? c->blk1 : c->L; }
static inline int vit_has_embed(const VitConfig* c) { return vit_block_lo(c) == 0; }
static inline int vit_has_top(const VitConfig* c) { return vit_block_hi(c) == c->L; }

/* Bytes of one stored activation value of the tower / projector (VitConfig.act_bytes; 0 means f32 words). */
static inline int vit_act_bytes(const VitConfig* c) { return c->act_bytes == 2 ? 2 : 4; }
/* Their dtype: the activation buffers' (VitBlockActs, VitActs, ProjActs) */
static inline DType vit_act_dtype(const VitConfig* c) { return vit_act_bytes(c) == 2 ? DTYPE_BF16 : DTYPE_F32; }

/* Pointers to one block's tensors, either the values or the gradients of a ParamTable: the GEMMs' weights and
 * biases typed by their storage (the compute copies: engine/params.h; the gradients f32), the LayerNorms' f32 words
 * either way. */
typedef struct {
    float *ln1_w, *ln1_b;   /* (D) */
    Buf qkv_w, qkv_b;       /* (3D, D), (3D) */
    Buf out_w, out_b;       /* (D, D), (D) */
    float *ln2_w, *ln2_b;   /* (D) */
    Buf fc1_w, fc1_b;       /* (4D, D), (4D) */
    Buf fc2_w, fc2_b;       /* (D, 4D), (D) */
    Buf lora_A[VIT_LORA_N], lora_B[VIT_LORA_N]; /* LoRA factors (r, in), (out, r); NULL: no adapter (or frozen) */
} VitBlockW;

typedef struct {
    Buf patch_w, patch_b;     /* (D, 3p^2), (D); CLIP: no bias (NULL) */
    VitBlockW* blocks;        /* (L), owned (malloc'd by vit_weights_point) */
    float *lnf_w, *lnf_b;     /* (D); CLIP: NULL */
    /* CLIP only (NULL otherwise) */
    Buf cls;                  /* (D) */
    Buf pos;                  /* (1 + G^2, D) */
    float *pre_w, *pre_b;     /* (D) */
    float *post_w, *post_b;   /* (D), never used */
    int tables16;             /* CLIP: cls and pos are 2-byte bf16 compute copies (params_mark_act_table) */
} VitW;

typedef struct { /* typed as VitBlockW's */
    Buf fc1_w, fc1_b; /* projector.0: (Dt, D), (Dt) */
    Buf fc2_w, fc2_b; /* projector.2: (Dt, Dt), (Dt) */
} ProjW;

/* Saved forward activations of one block (N rows): the activations in vit_act_dtype, the statistics f32. */
typedef struct {
    Buf ln1;                          /* (N, D) */
    float *ln1_mean, *ln1_rstd;       /* (N), (N) */
    Buf qkv;                          /* (N, 3D), q and k after RoPE */
    Buf att;                          /* (N, D) */
    float* att_lse;                   /* (N, H) */
    Buf xmid;                         /* (N, D) residual after the attention branch */
    Buf ln2;                          /* (N, D) */
    float *ln2_mean, *ln2_rstd;       /* (N), (N) */
    Buf fc1, gelu;                    /* (N, 4D) before / after GELU */
    float* lora_u[VIT_LORA_N];        /* (N, r) LoRA: scale A dropout(x) of each adapted linear (else NULL) */
} VitBlockActs;

/* What the weight gradients of one block need from B: the gradient at each weight's output. With a
 * fused backward all blocks share one set (the W part runs right after the B part of each block). */
typedef struct {
    float* dfc1;  /* (N, 4D) d fc1 output */
    float* dln2;  /* (N, D)  d LN2 output */
    float* dxmid; /* (N, D)  d attn.out output (= d residual after attention) */
    float* dqkv;  /* (N, 3D) d qkv output (RoPE undone) */
    float* dln1;  /* (N, D)  d LN1 output */
    /* 2-byte activations (VitConfig.act_bytes 2, 2-byte gradient Bufs; else NULL): the 2-byte copies of dfc1
     * (stored by the GELU backward) and dxmid (by ln2's backward) that fc1's and attn.out's GEMMs read */
    uint16_t *dfc1_16, *dxmid16;
    uint16_t* dqkv16; /* (N, 3D) dqkv's 2-byte mirror (the attention backward's and RoPE's stores) for qkv's GEMMs */
    float* lora_du[VIT_LORA_N]; /* (N, r) LoRA: scale B^T dy of each adapted linear, kept for A's gradient */
} VitBlockGrads;

typedef struct {
    int max_N, split;
    int backward; /* 0: laid out for the forward only (a frozen tower: nothing kept, no gradient buffers) */
    int b_floor;  /* B runs down to block b_floor only: the lowest block with a trainable tensor (the caller
                     sets it, vit_backward_floor; 0 when everything trains) */
    const int32_t* img_cu; /* (I+1) backend memory, set by vit_forward's caller */
    const int32_t *prow, *pcol; /* (N) */
    int I, N;
    Buf patches;             /* (N, 3p^2) backend memory in the tower's activation storage (vit_forward's), kept for
                              * the patch-embed weight gradient (the GEMM's input; CLIP's channel-major gather's table) */
    uint16_t *cls16, *pos16; /* CLIP, 2-byte activations: the class and position embeddings' bf16 words, the
                              * gather's tables (their compute copies hold bf16 values: exact), (D), (1 + G^2, D) */
    Buf x;                   /* (L+1, max_N, D) residual stream at block boundaries */
    VitBlockActs* blocks;    /* (L) */
    Buf vout;                /* (N, D) ln_f output = the tower's output */
    float *lnf_mean, *lnf_rstd; /* (N), (N) */
    /* backward */
    float* dx;               /* split: (L+1, max_N, D) d residual at each boundary; fused: 2 ping-pong */
    uint16_t* dx16;          /* 2-byte activations: their 2-byte copies (the same slots), stored by the LayerNorm backward
                              * that finishes each one, for the fc2 / patch-embedding GEMMs (else NULL) */
    VitBlockGrads* grads;    /* (L) */
    float* dvout;            /* (N, D) d ln_f output (given by the caller of vit_backward_input) */
    float* dgelu;            /* (N, 4D) scratch */
    Buf datt;                /* (N, D) scratch: f32, or 2-byte with 2-byte activations (attn.out's GEMM stores it) */
    Buf tmp;                 /* (N, D) scratch activations (the attn.out / fc2 products); CLIP: room for N D f32 words
                              * too, the patch gradient's f32 scratch (clip_embed_backward_weight) */
    /* CLIP: T = N + I token rows (blocks, x and dx are laid out for max_T of them) */
    int max_T, T, max_I;
    int32_t *tok_cu;         /* (I+1) backend memory: the images' token ranges */
    int32_t *tok_of_patch;   /* (N) token row of each patch */
    int32_t *patch_of_tok;   /* (T) patch row of each token, -1 for a class token */
    int32_t *cls_of_tok;     /* (T) 0 for a class token, else -1 */
    int32_t* pos_idx;        /* (T, 16) position-embedding rows of each token's taps (-1: none) */
    float* pos_w;            /* (T, 16) their bicubic weights */
    Buf emb;                 /* (T, D) the embeddings before pre_ln */
    float *pre_mean, *pre_rstd; /* (T), (T) */
    float* demb;             /* (T, D) d embeddings (W of the embedding tensors) */
    Buf patches_cm;          /* (N, 3p^2) the patches in CLIP's channel-major order (the patch embedding's input) */
    int32_t* cm_idx;         /* (max_N 3p^2) source of each channel-major value (rows_gather of 1-wide rows) */
    int cm_ready;            /* cm_idx uploaded */
    /* host scratch (malloc'd by the layout, freed by vit_acts_free_tables) */
    int32_t *h_img_cu, *h_prow, *h_pcol, *h_idx, *h_cm;
    float* h_w;
    /* (N, D) f32 words where tp > 1 and activations are 2-byte (else NULL): the row-parallel partials (attn.out,
     * fc2) widened, all-reduced in f32 and added to the 2-byte residual by add_f32_forward */
    float* tp_sum;
    /* Activation recompute (VitConfig.recompute): the one-block workspace (vit_recompute_layout; not owned, shared by
     * every microbatch of the stage, set by the caller before the forward) and the blocks recomputed so far */
    VitBlockActs* rc_ws;
    long n_recomputed;
    /* LoRA (vision/vit_lora.c; NULL without): scratch of the widest adapted input (the dropped-out input, B's input
     * gradient before dropout's), of an output (B u, an output gradient's columns), the columns of q, k and v in a
     * row of qkv as rows of a (3 T, D/tp) table (lora_cols, 3 x max_T: 3n + j), uploaded once (lora_cols_ready); the
     * microbatch's dropout key (0: no dropout; set by the caller before the forward, as LmSeq.lora_seed) */
    float *lora_xd, *lora_z, *lora_dy, *lora_dx;
    int32_t* lora_cols;
    int lora_cols_ready;
    uint64_t lora_seed;
} VitActs;

/* Projector activations (N rows). */
typedef struct {
    Buf vin;                 /* (N, D) the forward's input (the ViT output), kept for W */
    Buf fc1, gelu, out;      /* (N, Dt) each, in the tower's activation storage */
    float *dout, *dfc1, *dgelu; /* (N, Dt): d output (given), d fc1 output (kept for W), scratch */
    /* 2-byte activations (else NULL): dout's 2-byte copy (given with dout, rows of the LM's 2-byte residual gradient)
     * and dfc1's (stored by the GELU backward), what projector.2's and projector.0's GEMMs read */
    uint16_t *dout16, *dfc1_16;
    float* dvin;             /* (N, D) d projector input = d vision output */
    float* tp_sum;           /* (N, Dt) f32 where tp > 1 and activations are 2-byte: projector.2's sum (else NULL) */
} ProjActs;

void vit_params_add(ParamTable* pt, const VitConfig* c);
/* Blocks the forward runs (L, or the CLIP tower's L_run). */
static inline int vit_blocks_run(const VitConfig* c) { return c->arch == VIT_ARCH_CLIP && c->L_run > 0 ? c->L_run : c->L; }
static inline int vit_run_hi(const VitConfig* c) {
    int h = vit_block_hi(c), r = vit_blocks_run(c);
    return h < r ? h : r;
}
/* CLIP: token rows of a microbatch of at most max_N patches (a class token per image of >= min_patches). */
int vit_max_tokens(const VitConfig* c, int max_N);
/* Bicubic taps (torch interpolate, align_corners=False, A = -0.75) of output index o of out_n from in_n:
 * idx[4] source indices clamped to [0, in_n), w[4] weights. */
void vit_bicubic_taps(int o, int out_n, int in_n, int* idx, double* w);
/* The registered tensors that never train (CLIP: blocks [L_run, L) and post_ln), as a train.freeze list
 * ("" when none); written into buf. */
const char* vit_always_frozen(const VitConfig* c, char* buf, size_t n);
void projector_params_add(ParamTable* pt, const VitConfig* c);
/* Point w at the values (grads = 0) or gradients (grads = 1) of an allocated ParamTable. */
void vit_weights_point(VitW* w, const ParamTable* pt, const VitConfig* c, int grads);
void vit_weights_free(VitW* w);
void projector_weights_point(ProjW* w, const ParamTable* pt, int grads);

/* Carve the activations for up to max_N patches out of arena `a` (a measuring arena with base NULL
 * gives the size). split = 1 keeps per-block gradients so B and W can run apart. backward = 0: the
 * forward only (a frozen tower): no activation is kept for a backward and none may run. The arrays of
 * block structs are malloc'd (freed by vit_acts_free_tables). */
void vit_acts_layout(VitActs* a, Arena* ar, const VitConfig* c, int max_N, int split, int backward);
/* A frozen tower's activations (backward = 0) in two parts, whose sum is vit_acts_layout's: its output a->vout, the
 * projector's input, kept by each microbatch (layout_out), and everything else, scratch that one forward writes and
 * nothing reads after it (layout_scratch), which the microbatches of a stage may share: carved again before each
 * forward (the CLIP channel-major index counts as uploaded while it is where it was: its values depend on the patch
 * index only). */
void vit_acts_layout_out(VitActs* a, Arena* out, const VitConfig* c, int max_N);
void vit_acts_layout_scratch(VitActs* a, Arena* scratch, const VitConfig* c, int max_N);
/* The recompute workspace of VitConfig.recompute for up to max_N patches (FULL: one block's activations; SELECTIVE: a
 * GELU output; NONE: nothing), carved out of ar. */
void vit_recompute_layout(VitBlockActs* ws, Arena* ar, const VitConfig* c, int max_N);
/* The lowest block whose input gradient a backward needs, given gradient pointers g (NULL = frozen
 * tensor): 0 when the patch embedding trains, L when no block does (ln_f alone, or nothing). */
int vit_backward_floor(const VitConfig* c, const VitW* g);
void vit_acts_free_tables(VitActs* a);
void projector_acts_layout(ProjActs* a, Arena* ar, const VitConfig* c, int max_N);
/* Its two parts: the forward's activations, kept from the forward to the backward (fc1, gelu, out, tp_sum), and the
 * backward's buffers (dout, dfc1, dgelu, dvin and their 2-byte copies), which a fused backward uses within its call
 * only (dfc1 from B to W under the split backward). */
void projector_acts_layout_fwd(ProjActs* a, Arena* ar, const VitConfig* c, int max_N);
void projector_acts_layout_bwd(ProjActs* a, Arena* ar, const VitConfig* c, int max_N);

/* Forward over N patches of I images. patches, img_cu, prow, pcol in backend memory; they must stay
 * valid until the backward ends. Writes a->vout. The patches are an activation: f32 words, or with 2-byte
 * activations (VitConfig.act_bytes = 2) bf16 words, rr_f32_to_bf16 of the loader's values, narrowed where they
 * are produced (vit_patches_to_bf16 on the host before the upload: no conversion pass on the device). */
/* out[i] = rr_f32_to_bf16(in[i]) for n host values: the patches in 2-byte activation words, for the upload. */
void vit_patches_to_bf16(uint16_t* out, const float* in, size_t n);
void vit_forward(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a, Buf patches,
                 const int32_t* img_cu, int I, const int32_t* prow, const int32_t* pcol, int N);
/* vit_forward in two parts: prepare sets the microbatch's host state and uploads what the host derives from its
 * images (CLIP's token tables: it reads the grids back, so it synchronises); run enqueues the device work only,
 * whose host values (pointers, N, I, the token count) depend on nothing else: what a CUDA graph may record
 * (runtime/model/vit_graph.c). */
void vit_forward_prepare(const Backend* be, const VitConfig* c, VitActs* a, Buf patches, const int32_t* img_cu,
                         int I, const int32_t* prow, const int32_t* pcol, int N);
void vit_forward_run(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a);
/* B: from a->dvout (filled by the caller) down to the patch-embed output; keeps the block gradients. */
void vit_backward_input(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a);
/* W: adds every vision weight gradient into g. */
void vit_backward_weight(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a);
/* Fused B + W, block by block (shares the block-gradient scratch when not split). Bitwise the same
 * gradients as B then W. */
void vit_backward(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a);

/* A stage's tower edges (VitConfig.blk0 / blk1; a->T rows of D: the patches, CLIP's tokens with the class rows),
 * the pipeline's words f32 (the activations' bf16 values widened, exactly): block lo's input from h (before
 * vit_forward_run), the last run block's output into h (after it), that output's gradient from dh (before
 * vit_backward_input / vit_backward), block lo's input gradient into dh (after it). */
void vit_stage_input(const Backend* be, const VitConfig* c, VitActs* a, const float* h);
void vit_stage_output(const Backend* be, const VitConfig* c, const VitActs* a, float* h);
void vit_stage_doutput(const Backend* be, const VitConfig* c, VitActs* a, const float* dh);
void vit_stage_dinput(const Backend* be, const VitConfig* c, const VitActs* a, float* dh);

void projector_forward(const Backend* be, const VitConfig* c, const ProjW* w, ProjActs* a, Buf vin, int N);
/* B: from a->dout to a->dfc1 (kept for W) and, with need_dvin (the vision tower trains), a->dvin
 * (overwritten). */
void projector_backward_input(const Backend* be, const VitConfig* c, const ProjW* w, ProjActs* a, int N,
                              int need_dvin);
/* W: adds the projector's weight gradients into g. vin (the forward input) must still be valid. */
void projector_backward_weight(const Backend* be, const VitConfig* c, const ProjW* w, const ProjW* g, ProjActs* a,
                               int N);

#endif
