/* lm_types.h — the decoder LM's configuration and a block's weights, activations, gradients and scratch (text/lm.h
 * describes the model): the types both the block (text/lm.c) and its LoRA adapters (text/lm_lora.c) work on. */
#ifndef RRFP_LM_TYPES_H
#define RRFP_LM_TYPES_H

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
    /* Bytes of a stored activation (lm_act_dtype): 0 or 4, f32 words; 2, bf16 words (only on a table whose ops take
     * them, engine.h BackendOps.bf16_activations; no KV cache). Sizes the
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
 * With 2-byte activations (act_bytes 2: 2-byte gradient Bufs, engine.h) the GEMMs read 2-byte output gradients
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

#endif
