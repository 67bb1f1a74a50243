/* lm.h — the decoder LM of docs/model.md "Decoder LM and RoPE", as blocks that a pipeline stage can hold a range of.
 *
 *   x0 = embed(ids) (image positions: the projector's output, spliced in by runtime/model.c)
 *   block: x += o(attn(rope(q(n)), rope(k(n)), v(n))) with n = RMSNorm1(x);
 *          x += down(silu(gate(m)) * up(m))               with m = RMSNorm2(x)
 *   logits = lm_head(RMSNorm(x_L)); loss = sum of CE over supervised targets
 * Attention is causal within each packed sample (cu_seqlens), 1-D RoPE by the position inside the
 * sample. No biases anywhere in the LM.
 *
 * Parameter names (registered by lm_*_params_add, in this order):
 *   text.embed.weight (V, D)                        [first stage]
 *   text.blocks.{i}.norm1.weight (D)
 *   text.blocks.{i}.attn.q.weight (D, D)  .attn.k.weight (Dkv, D)  .attn.v.weight (Dkv, D)
 *   text.blocks.{i}.attn.{q,k,v}.bias (D / Dkv / Dkv)   [qkv_bias: Qwen2]                 init 0
 *   text.blocks.{i}.attn.o.weight (D, D)                                      std 0.02/sqrt(2L)
 *   text.blocks.{i}.attn.o.bias (D)                     [o_bias: Llama's attention_bias]  init 0
 *   text.blocks.{i}.norm2.weight (D)
 *   text.blocks.{i}.mlp.gate.weight (F, D)  .mlp.up.weight (F, D)
 *   text.blocks.{i}.mlp.down.weight (D, F)                                    std 0.02/sqrt(2L)
 *   text.norm.weight (D)  text.lm_head.weight (V, D)                [last stage; no head when tied]
 * Dkv = Hkv * D / H: grouped-query attention (Hkv key/value heads, each shared by H / Hkv query heads;
 * Hkv = H is multi-head attention). With tied embeddings (runtime/model) the head is text.embed.weight.
 * L is the LM's total block count (not the stage's), so init does not depend on the pipeline split.
 * Weights N(0, 0.02) keyed by (seed, name); norm weights 1. */
#ifndef RRFP_LM_H
#define RRFP_LM_H

#include "engine/engine.h"
#include "engine/params.h"

/* The TP group's all-reduce (sum, in place, n floats of backend memory). Returns 0, or -1 when the
 * group failed (the callback keeps its message in ctx for the caller to report after the block). */
typedef int (*LmTpReduce)(void* ctx, float* buf, size_t n);

typedef struct {
    int D, L, H, F, V; /* width, total blocks, heads (head dim D/H, even), SwiGLU hidden, vocabulary */
    float init_std;    /* 0.02 */
    double rms_eps;    /* RMSNorm eps (model.rms_eps, 1e-5) */
    RopeFreq rope;     /* RoPE theta (model.rope_base, 10000) and Llama-3 scaling (model.rope_type) */
    int Hkv;           /* key/value heads (model.text_kv_heads; divides H); 0 = H */
    int qkv_bias;      /* q, k, v have biases (model.text_qkv_bias) */
    int o_bias;        /* o has a bias (model.text_o_bias) */
    /* Tensor parallelism of the blocks (docs/parallel.md "Tensor parallelism"; tp <= 1: unsplit). Rank tp_rank of tp holds
     * heads [tp_rank H/tp, (tp_rank+1) H/tp) of q and key/value heads [tp_rank Hkv/tp, ...) of k, v (their
 * weights' and biases' rows: column-parallel, (D/tp, D) and (Dkv/tp, D); rank t's query heads read its
 * own key/value heads, since both split in order),
     * the matching columns of o (row-parallel, (D, D/tp)), rows [tp_rank F/tp, ...) of gate and up and
     * those columns of down; the norms whole. Activations q, k, v, att are (T, D/tp), gate, up, h
     * (T, F/tp); the block calls tp_reduce after o and down (the partial outputs) and, backward, on the
     * norm outputs' gradients (the column-parallel inputs' partial gradients), so the residual stream,
     * the norms and their gradients are whole and equal on every TP rank. */
    int tp, tp_rank;
    LmTpReduce tp_reduce;
    void* tp_ctx;
    /* Bytes of a stored activation (engine.h, Backend.act_dtype): 0 or 4, f32 words; 2, bf16 words (the
     * blocks then run on a table with act_dtype = DTYPE_BF16; tp must be 1, and no KV cache). Sizes the
     * activation buffers of lm_block_acts_layout and lm_scratch_layout's tmp; gradients stay f32. */
    int act_bytes;
    /* LoRA (text/lm_lora.c; docs/training.md "LoRA"): lora_r > 0 adds to each linear of lora_targets (a bit per
     * LmLoraTarget) y += lora_scale * B A dropout(x), A (r, in) and B (out, r) trained, the base frozen. lora_dropout
     * applies where LmSeq.lora_seed is not 0 (training). f32-word activations only (act_bytes 4). */
    int lora_r;
    float lora_scale, lora_dropout;
    unsigned lora_targets;
    int lora_quant; /* QLoRA (text/lm_qlora.h): the targets' base weights stored as NF4, dequantised per block */
    /* Activation recompute of the blocks (Recompute, engine.h): what lm_block_acts_layout keeps per microbatch and
     * what lm_recompute_layout's one-block workspace holds instead (lm_block_acts_view, lm_block_recompute). */
    int recompute;
} LmConfig;

/* The LM linears LoRA can adapt, in the order of their bits in LmConfig.lora_targets (PEFT's module names
 * q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj). */
typedef enum { LM_LORA_Q = 0, LM_LORA_K, LM_LORA_V, LM_LORA_O, LM_LORA_GATE, LM_LORA_UP, LM_LORA_DOWN, LM_LORA_N } LmLoraTarget;

/* Bytes of one stored activation value (LmConfig.act_bytes; 0 means f32 words). */
static inline int lm_act_bytes(const LmConfig* c) { return c->act_bytes == 2 ? 2 : 4; }
/* Their dtype: the activation buffers' (LmBlockActs) */
static inline DType lm_act_dtype(const LmConfig* c) { return lm_act_bytes(c) == 2 ? DTYPE_BF16 : DTYPE_F32; }

/* This rank's heads, attention width (heads x head dim) and SwiGLU hidden. */
static inline void lm_local_sizes(const LmConfig* c, int* H, int* Dq, int* F) {
    int T = c->tp > 1 ? c->tp : 1;
    *H = c->H / T;
    *Dq = c->D / T;
    *F = c->F / T;
}
/* Key/value heads of the whole LM (Hkv, 0 meaning H) and their width Dkv = Hkv * D / H. */
static inline int lm_kv_heads(const LmConfig* c) { return c->Hkv > 0 ? c->Hkv : c->H; }
/* This rank's key/value heads and their width. */
static inline void lm_local_kv(const LmConfig* c, int* Hkv, int* Dkv) {
    int T = c->tp > 1 ? c->tp : 1;
    *Hkv = lm_kv_heads(c) / T;
    *Dkv = *Hkv * (c->D / c->H);
}

/* A block's parameters (the compute copies, typed by their storage: engine/params.h) or their gradients
 * (f32). The norm weights are f32 words either way. */
typedef struct {
    float* norm1_w;            /* (D) */
    Buf q_w, k_w, v_w, o_w;    /* (D, D), (Dkv, D), (Dkv, D), (D, D) */
    float* norm2_w;            /* (D) */
    Buf gate_w, up_w;          /* (F, D) */
    Buf down_w;                /* (D, F) */
    Buf q_b, k_b, v_b, o_b;    /* (D), (Dkv), (Dkv), (D); NULL without qkv_bias / o_bias (or frozen) */
    /* LoRA's factors of each LmLoraTarget (NULL where it has none): A (r, in), B (out, r), this TP rank's shares
     * (text/lm_lora.c); the block's global index (the dropout mask's key) */
    Buf lora_A[LM_LORA_N], lora_B[LM_LORA_N];
    int layer;
} LmBlockW;

/* The activations a forward saves (lm_act_dtype) and its f32 statistics. */
typedef struct {
    Buf n1;                 /* (T, D) */
    float* rstd1;           /* (T) */
    Buf q, k, v;            /* (T, D), (T, Dkv), (T, Dkv); q and k after RoPE */
    Buf att;                /* (T, D) */
    float* lse;             /* (T, H) */
    Buf xmid;               /* (T, D) residual after the attention branch */
    Buf n2;                 /* (T, D) */
    float* rstd2;           /* (T) */
    Buf gate, up, h;        /* (T, F) each; h = silu(gate) * up */
    float* lora_u[LM_LORA_N]; /* (T, r) lora_scale A dropout(x) of each adapted linear (summed over TP for o, down) */
} LmBlockActs;

/* Gradients at each weight's output, kept by B for W (shared by all blocks in a fused backward).
 * With 2-byte activations (act_bytes 2: the table's BackendOps.b16 ops) the GEMMs read 2-byte output gradients
 * stored by their producers: dgate, dup are 2-byte words (SwiGLU's backward stores them), dq16, dk16 (RoPE's backward),
 * dv16 (the attention backward) and dxmid16 (norm2's backward, beside the f32 dxmid) are 2-byte; dv is then f32 only
 * with q/k/v biases (v's bias gradient sums it; the attention backward stores dv16 as its mirror), else NULL.
 * Elsewhere the 16 buffers are NULL. */
typedef struct {
    float *dxmid;            /* (T, D) d o output */
    float *dq, *dk, *dv;     /* (T, D), (T, Dkv), (T, Dkv) d q/k/v output (RoPE undone); one block, dk and dv right
                              * after dq for the microbatch's T (64-byte aligned; lm_block_backward_input sets them) */
    float *dn1, *dn2;        /* (T, D) d norm outputs */
    Buf dgate, dup;          /* (T, F), in lm_act_dtype; one block, dup right after dgate for the microbatch's T (as dk, dv) */
    uint16_t *dxmid16, *dq16, *dk16, *dv16; /* (T, D), (T, Dq), (T, Dkv), (T, Dkv): 2-byte, see above */
    /* Set by the caller (not laid out here), 2-byte activations only, each may be NULL: dxout16 holds
     * rr_f32_to_bf16(dxout) (the down projection's GEMMs read it; NULL: they convert dxout), and B stores
     * rr_f32_to_bf16(dxin) into dxin16 in norm1's backward pass (the next block's dxout16). */
    const uint16_t* dxout16;
    uint16_t* dxin16;
    float* lora_du[LM_LORA_N]; /* (T, r) lora_scale B^T dy of each adapted linear, kept by B for W */
    float* lora_x; /* set by the caller (not laid out here): the microbatch's LmScratch.lora_x, where W redraws dropout(x) */
} LmBlockGrads;

/* Scratch shared by every block of one microbatch's forward or backward. */
typedef struct {
    Buf tmp;     /* (T, D) activations */
    Buf datt;    /* (T, D) o's input gradient: f32, or 2-byte with 2-byte activations (stored by its GEMM) */
    float* dh;   /* (T, F) */
    /* (T, D) f32 words where tp > 1 and activations are 2-byte (else NULL): the row-parallel partial outputs
     * (o, down), widened, all-reduced in f32 and added to the 2-byte residual by add_f32_forward */
    float* tp_sum;
    /* LoRA (lora_r > 0; else NULL): (T, max(D, F)) the dropped-out input, B's output, A's input gradient */
    float *lora_x, *lora_z, *lora_dx;
} LmScratch;

/* One packed sequence batch as the blocks see it (backend memory). */
typedef struct {
    int T, S;
    const int32_t* cu_seqlens; /* (S+1) */
    const int32_t* pos;        /* (T) */
    /* Generation with a KV cache (runtime/model/model.h, stage_forward; NULL in training): this block's
     * cache of keys (after RoPE) and values, (max rows, Dkv) each, with kv_past rows filled by earlier
     * calls. The forward writes its T rows' k and v after them and its queries attend to all
     * kv_past + T rows (one sample, S = 1): the prompt (kv_past = 0) through attention_forward as in
     * training, each new token through BackendOps.attention_decode. */
    float *kv_k, *kv_v;
    int kv_past;
    /* LoRA's dropout key of this microbatch (lm_lora_seed; 0: no dropout, as in evaluation and generation) */
    uint64_t lora_seed;
} LmSeq;

void lm_embed_params_add(ParamTable* pt, const LmConfig* c);
/* Registers blocks [l0, l1) under their global indices. */
void lm_blocks_params_add(ParamTable* pt, const LmConfig* c, int l0, int l1);
void lm_head_params_add(ParamTable* pt, const LmConfig* c);
/* Point at the values (grads = 0) or gradients (grads = 1) of block `l` (global index). */
void lm_block_weights_point(LmBlockW* w, const ParamTable* pt, int l, int grads);

/* What one microbatch keeps of a block: everything (RECOMPUTE_NONE), everything but h (SELECTIVE), nothing (FULL: the
 * block's input, the stage's residual, is all a backward needs). The fields not kept are NULL. */
void lm_block_acts_layout(LmBlockActs* a, Arena* ar, const LmConfig* c, int max_T);
/* The recompute workspace of one block, shared by every block and microbatch of a stage: FULL, a whole block's
 * activations; SELECTIVE, h only; NONE, nothing. Valid from a forward or recompute of a block to the end of the block's
 * backward call (so the split backward's W recomputes what it reads: lm_block_recompute before W too). */
void lm_recompute_layout(LmBlockActs* ws, Arena* ar, const LmConfig* c, int max_T);
/* The activations a block's forward writes and its backward reads: the kept ones, with the recomputed ones from ws. */
void lm_block_acts_view(const LmConfig* c, const LmBlockActs* kept, const LmBlockActs* ws, LmBlockActs* view);
/* Recompute what the block's microbatch did not keep into its view (lm_block_acts_view) from the block's input xin
 * (FULL: the forward up to h, its output not written; SELECTIVE: h = SwiGLU(gate, up)), bitwise the forward's values.
 * Returns 1 when it recomputed anything (FULL or SELECTIVE with T > 0), 0 otherwise. */
int lm_block_recompute(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* view, LmScratch* s,
                       const LmSeq* seq, Buf xin);
void lm_block_grads_layout(LmBlockGrads* g, Arena* ar, const LmConfig* c, int max_T);
void lm_scratch_layout(LmScratch* s, Arena* ar, const LmConfig* c, int max_T);

/* xout = block(xin). xin must stay valid (unchanged) until the block's backward ends. xout none (buf_none()): the
 * forward stops after h (the recompute: the down projection and the residual are not needed by the backward). */
void lm_block_forward(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* a, LmScratch* s,
                      const LmSeq* seq, Buf xin, Buf xout);
/* B: dxin = d block input, OVERWRITTEN (not added), from dxout; fills g for W. */
void lm_block_backward_input(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockActs* a,
                             LmBlockGrads* g, LmScratch* s, const LmSeq* seq, Buf xin, const float* dxout,
                             float* dxin);
/* W: adds the block's weight gradients into dw from g, the saved activations and dxout. */
void lm_block_backward_weight(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockW* dw,
                              const LmBlockActs* a, const LmBlockGrads* g, const LmSeq* seq, Buf xin, const float* dxout);

/* ---- LoRA (text/lm_lora.c) ---- */
/* "q" .. "down": PEFT's target name of t without "_proj"; the tensor suffix of its base weight ("attn.q", ...) */
const char* lm_lora_target_name(LmLoraTarget t);
const char* lm_lora_target_module(LmLoraTarget t);
/* Parse a comma-separated target list (q,k,v,o,gate,up,down, or "all") into bits; -1 on an unknown name. */
int lm_lora_targets_parse(const char* list, unsigned* bits, char* err, size_t err_len);
/* Registers block l's adapters: text.blocks.{l}.<module>.lora_A.weight (r, in), Kaiming-uniform (bound 1/sqrt(in),
 * PEFT's kaiming_uniform_(a = sqrt(5))), and .lora_B.weight (out, r), zeros. */
void lm_lora_params_add(ParamTable* pt, const LmConfig* c, int l);
/* 1 when `name` is a LoRA factor (ends in .lora_A.weight or .lora_B.weight). */
int lm_lora_is_adapter(const char* name);
void lm_lora_weights_point(LmBlockW* w, const ParamTable* pt, int l, int grads);
void lm_lora_acts_layout(LmBlockActs* a, Arena* ar, const LmConfig* c, int max_T);
void lm_lora_grads_layout(LmBlockGrads* g, Arena* ar, const LmConfig* c, int max_T);
void lm_lora_scratch_layout(LmScratch* s, Arena* ar, const LmConfig* c, int max_T);
/* The dropout key of a microbatch: a function of (model seed, step, the microbatch's index in the global step);
 * never 0. */
uint64_t lm_lora_seed(uint64_t model_seed, int64_t step, int mb_index);
/* One adapted linear (target t of block w, input x (T, in_local), base output y): forward y += scale B A drop(x);
 * B: dx += its input gradient (lm_lora_backward_input; keeps du for W); W: the factors' gradients. No-ops where
 * the block has no adapter t. */
void lm_lora_forward(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* a, LmScratch* s,
                     const LmSeq* seq, LmLoraTarget t, Buf x, Buf y);
/* The forward's first half alone: a->lora_u[t] = scale A drop(x) (TP-summed for o, down), what t's W pass reads
 * (a recompute that stops before the down projection). Returns 0 where the block has no adapter t. */
int lm_lora_forward_input(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* a, LmScratch* s,
                          const LmSeq* seq, LmLoraTarget t, Buf x);
void lm_lora_backward_input(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockActs* a,
                            LmBlockGrads* g, LmScratch* s, const LmSeq* seq, LmLoraTarget t, Buf x, const float* dy,
                            float* dx);
void lm_lora_backward_weight(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockW* dw,
                             const LmBlockActs* a, const LmBlockGrads* g, const LmSeq* seq, LmLoraTarget t, Buf x,
                             const float* dy);

#endif
