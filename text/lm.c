/* lm.c — the decoder LM's parameters and blocks (docs/model.md "Decoder LM and RoPE"; names and shapes in lm.h).
 *
 * A block over T packed positions: RMSNorm, q/k/v/o (biases optional: Qwen2's q/k/v, Llama's
 * attention_bias), 1-D RoPE by position in the sample (Llama-3's frequency scaling optional), causal
 * attention within each sample (grouped-query: Hkv key/value heads), RMSNorm, SwiGLU. The forward saves what the backward
 * needs; the backward is B (input gradients, keeping each weight's output gradient) and W (weight
 * gradients from those). Every op goes through the Backend. The embedding, final norm, head and loss
 * are composed in runtime/model/model.c, which also splices the image rows in. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "text/lm.h"

static void lm_add(ParamTable* pt, const char* name, int ndim, int64_t d0, int64_t d1, ParamInit init, float std) {
    int64_t shape[2] = {d0, d1};
    params_add(pt, name, ndim, shape, init, std, ndim == 2);
}

void lm_embed_params_add(ParamTable* pt, const LmConfig* c) {
    lm_add(pt, "text.embed.weight", 2, c->V, c->D, PARAM_INIT_NORMAL, c->init_std);
}

void lm_blocks_params_add(ParamTable* pt, const LmConfig* c, int l0, int l1) {
    int D = c->D, F = c->F, Dkv = lm_kv_heads(c) * (c->D / c->H);
    /* L is the whole LM's depth, so a block's init does not depend on the pipeline split */
    float std = c->init_std, std_out = c->init_std / sqrtf(2.0f * c->L);
    char n[96];
    for (int l = l0; l < l1; l++) {
#define TADD(suffix, ndim, d0, d1, init, s)                        \
    do {                                                           \
        snprintf(n, sizeof n, "text.blocks.%d.%s", l, suffix);     \
        lm_add(pt, n, ndim, d0, d1, init, s);                      \
    } while (0)
/* a GEMM's bias: its compute copy in the table's bias storage (engine/params.h) */
#define TADD_BIAS(suffix, d0)                                      \
    do {                                                           \
        TADD(suffix, 1, d0, 0, PARAM_INIT_ZEROS, 0);               \
        params_mark_gemm_bias(pt, n);                              \
    } while (0)
        TADD("norm1.weight", 1, D, 0, PARAM_INIT_ONES, 0);
        TADD("attn.q.weight", 2, D, D, PARAM_INIT_NORMAL, std);
        TADD("attn.k.weight", 2, Dkv, D, PARAM_INIT_NORMAL, std);
        TADD("attn.v.weight", 2, Dkv, D, PARAM_INIT_NORMAL, std);
        if (c->qkv_bias) {
            TADD_BIAS("attn.q.bias", D);
            TADD_BIAS("attn.k.bias", Dkv);
            TADD_BIAS("attn.v.bias", Dkv);
        }
        TADD("attn.o.weight", 2, D, D, PARAM_INIT_NORMAL, std_out);
        if (c->o_bias) TADD_BIAS("attn.o.bias", D);
        TADD("norm2.weight", 1, D, 0, PARAM_INIT_ONES, 0);
        TADD("mlp.gate.weight", 2, F, D, PARAM_INIT_NORMAL, std);
        TADD("mlp.up.weight", 2, F, D, PARAM_INIT_NORMAL, std);
        TADD("mlp.down.weight", 2, D, F, PARAM_INIT_NORMAL, std_out);
        lm_lora_params_add(pt, c, l);
#undef TADD_BIAS
#undef TADD
    }
}

void lm_head_params_add(ParamTable* pt, const LmConfig* c) {
    lm_add(pt, "text.norm.weight", 1, c->D, 0, PARAM_INIT_ONES, 0);
    lm_add(pt, "text.lm_head.weight", 2, c->V, c->D, PARAM_INIT_NORMAL, c->init_std);
}

static int pt_has_block_bias(const ParamTable* pt, int l, const char* suffix) {
    char n[96];
    snprintf(n, sizeof n, "text.blocks.%d.%s", l, suffix);
    return params_find(pt, n) >= 0;
}

void lm_block_weights_point(LmBlockW* w, const ParamTable* pt, int l, int grads) {
    char n[96];
/* FIND: the tensor's index; TPT: a typed field (weights as stored, gradients f32); TPF: an f32 one */
#define FIND(suffix)                                                                         \
    (snprintf(n, sizeof n, "text.blocks.%d.%s", l, suffix), params_find(pt, n) >= 0          \
         ? params_find(pt, n)                                                                \
         : (rr_die("internal: parameter '%s' is not registered in this stage", n), -1))
#define TPT(field, suffix)                                                                   \
    do {                                                                                     \
        int i = FIND(suffix);                                                                \
        w->field = grads ? buf_f32(params_grad(pt, i)) : params_weights_buf(pt, i);          \
    } while (0)
#define TPF(field, suffix)                                                                   \
    do {                                                                                     \
        int i = FIND(suffix);                                                                \
        w->field = grads ? params_grad(pt, i) : params_weights(pt, i);                       \
    } while (0)
    TPF(norm1_w, "norm1.weight");
    TPT(q_w, "attn.q.weight");
    TPT(k_w, "attn.k.weight");
    TPT(v_w, "attn.v.weight");
    TPT(o_w, "attn.o.weight");
    TPF(norm2_w, "norm2.weight");
    TPT(gate_w, "mlp.gate.weight");
    TPT(up_w, "mlp.up.weight");
    TPT(down_w, "mlp.down.weight");
    w->q_b = w->k_b = w->v_b = w->o_b = buf_none();
    if (pt_has_block_bias(pt, l, "attn.q.bias")) {
        TPT(q_b, "attn.q.bias");
        TPT(k_b, "attn.k.bias");
        TPT(v_b, "attn.v.bias");
    }
    if (pt_has_block_bias(pt, l, "attn.o.bias")) TPT(o_b, "attn.o.bias");
    lm_lora_weights_point(w, pt, l, grads);
#undef TPF
#undef TPT
#undef FIND
}

/* n activation values (c->act_bytes each: f32 words, or 2-byte bf16 words) */
static Buf lm_act_alloc(Arena* ar, const LmConfig* c, size_t n) {
    return buf_of(arena_alloc(ar, n * (size_t)lm_act_bytes(c)), lm_act_dtype(c));
}

/* A block's activations: all of them (h with h_too), or none but h (h_only) */
static void lm_block_acts_carve(LmBlockActs* a, Arena* ar, const LmConfig* c, int max_T, int h_too, int h_only) {
    int Hl, Dq, Fl, Hkvl, Dkv;
    lm_local_sizes(c, &Hl, &Dq, &Fl);
    lm_local_kv(c, &Hkvl, &Dkv);
    size_t T = (size_t)max_T, D = c->D, F = (size_t)Fl;
    memset(a, 0, sizeof *a);
    if (h_only) {
        a->h = lm_act_alloc(ar, c, T * F);
        return;
    }
    a->n1 = lm_act_alloc(ar, c, T * D);
    a->rstd1 = arena_alloc_f32(ar, T);
    a->q = lm_act_alloc(ar, c, T * Dq);
    a->k = lm_act_alloc(ar, c, T * Dkv);
    a->v = lm_act_alloc(ar, c, T * Dkv);
    a->att = lm_act_alloc(ar, c, T * Dq);
    a->lse = arena_alloc_f32(ar, T * Hl);
    a->xmid = lm_act_alloc(ar, c, T * D);
    a->n2 = lm_act_alloc(ar, c, T * D);
    a->rstd2 = arena_alloc_f32(ar, T);
    a->gate = lm_act_alloc(ar, c, T * F);
    a->up = lm_act_alloc(ar, c, T * F);
    if (h_too) a->h = lm_act_alloc(ar, c, T * F);
    lm_lora_acts_layout(a, ar, c, max_T);
}

void lm_block_acts_layout(LmBlockActs* a, Arena* ar, const LmConfig* c, int max_T) {
    if (c->recompute == RECOMPUTE_FULL) memset(a, 0, sizeof *a); /* the block's input (the stage's residual) only */
    else lm_block_acts_carve(a, ar, c, max_T, c->recompute != RECOMPUTE_SELECTIVE, 0);
}

void lm_recompute_layout(LmBlockActs* ws, Arena* ar, const LmConfig* c, int max_T) {
    if (c->recompute == RECOMPUTE_FULL) lm_block_acts_carve(ws, ar, c, max_T, 1, 0);
    else if (c->recompute == RECOMPUTE_SELECTIVE) lm_block_acts_carve(ws, ar, c, max_T, 0, 1);
    else memset(ws, 0, sizeof *ws);
}

void lm_block_acts_view(const LmConfig* c, const LmBlockActs* kept, const LmBlockActs* ws, LmBlockActs* view) {
    if (c->recompute == RECOMPUTE_FULL) {
        *view = *ws;
    } else {
        *view = *kept;
        if (c->recompute == RECOMPUTE_SELECTIVE) view->h = ws->h;
    }
}

int lm_block_recompute(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* view, LmScratch* s,
                       const LmSeq* seq, Buf xin) {
    int H, Dq, F;
    lm_local_sizes(c, &H, &Dq, &F);
    if (seq->T == 0 || c->recompute == RECOMPUTE_NONE) return 0;
    if (c->recompute == RECOMPUTE_FULL) lm_block_forward(be, c, w, view, s, seq, xin, buf_none());
    else be->ops->swiglu_forward(be, view->h, view->gate, view->up, (size_t)seq->T * F); /* the forward's own op */
    return 1;
}

/* n floats rounded up to 64 bytes: where the next gradient of a packed group starts (aligned as the arena's) */
static size_t lm_pack(size_t n) { return (n + 15) & ~(size_t)15; }

void lm_block_grads_layout(LmBlockGrads* g, Arena* ar, const LmConfig* c, int max_T) {
    int Hl, Dq, Fl, Hkvl, Dkv;
    lm_local_sizes(c, &Hl, &Dq, &Fl);
    lm_local_kv(c, &Hkvl, &Dkv);
    size_t T = (size_t)max_T, D = c->D, F = (size_t)Fl;
    int b16 = lm_act_bytes(c) == 2; /* 2-byte output gradients for the GEMMs (LmBlockGrads) */
    g->dxmid = arena_alloc_f32(ar, T * D);
    /* dq, dk (and dv) in one block, dgate and dup in another: the backward packs each group for its T (dk, dv right
     * after dq, dup after dgate, 64-byte aligned), so that one memset zeroes a group */
    int has_dv = !b16 || c->qkv_bias;
    g->dq = arena_alloc_f32(ar, lm_pack(T * Dq) + lm_pack(T * Dkv) + (has_dv ? T * Dkv : 0));
    g->dk = g->dq + lm_pack(T * Dq);
    g->dv = has_dv ? g->dk + lm_pack(T * Dkv) : NULL;
    g->dn1 = arena_alloc_f32(ar, T * D);
    g->dn2 = arena_alloc_f32(ar, T * D);
    g->dgate = lm_act_alloc(ar, c, lm_pack(T * F) + T * F);
    g->dup = buf_at(g->dgate, lm_pack(T * F));
    g->dxmid16 = b16 ? arena_alloc(ar, T * D * 2) : NULL;
    g->dq16 = b16 ? arena_alloc(ar, T * Dq * 2) : NULL;
    g->dk16 = b16 ? arena_alloc(ar, T * Dkv * 2) : NULL;
    g->dv16 = b16 ? arena_alloc(ar, T * Dkv * 2) : NULL;
    g->dxout16 = NULL;
    g->dxin16 = NULL;
    lm_lora_grads_layout(g, ar, c, max_T);
}

void lm_scratch_layout(LmScratch* s, Arena* ar, const LmConfig* c, int max_T) {
    s->tmp = lm_act_alloc(ar, c, (size_t)max_T * c->D); /* o's and down's outputs: activations */
    s->datt = lm_act_alloc(ar, c, (size_t)max_T * c->D); /* 2-byte with 2-byte activations: o's GEMM stores it */
    s->dh = arena_alloc_f32(ar, (size_t)max_T * c->F);
    s->tp_sum = c->tp > 1 && lm_act_bytes(c) == 2 ? arena_alloc_f32(ar, (size_t)max_T * c->D) : NULL;
    lm_lora_scratch_layout(s, ar, c, max_T);
}

/* The TP all-reduce of a partial (T, D) f32 result (an input gradient, or f32-word activations); a failure
 * is kept by the callback's ctx. */
static void lm_tp_sum(const LmConfig* c, float* buf, size_t n) {
    if (c->tp > 1) (void)c->tp_reduce(c->tp_ctx, buf, n);
}

/* out = res + the row-parallel output part (T, D) summed over the TP group. With 2-byte activations the
 * partials (rounded to bf16 by their GEMM, as the f32-word bf16 table rounds them) are widened (exact) into
 * the f32 scratch, summed there in f32, and add_f32_forward stores res + sum in 2 bytes: the f32-word run's
 * values and rounding points. */
static void lm_tp_residual(const Backend* be, const LmConfig* c, LmScratch* s, Buf out, Buf res, Buf part, size_t n) {
    if (c->tp > 1 && part.dt == DTYPE_BF16) {
        RR_ASSERT(s->tp_sum && be->ops->from_bf16 && be->ops->add_f32_forward);
        be->ops->from_bf16(be, s->tp_sum, buf_bf16p(part), n);
        lm_tp_sum(c, s->tp_sum, n);
        be->ops->add_f32_forward(be, out, res, s->tp_sum, n);
        return;
    }
    if (c->tp > 1) lm_tp_sum(c, buf_f32p(part), n);
    be->ops->add_forward(be, out, res, part, n);
}

/* RoPE over q and k: one pass where the table has rope_qk_forward (the same values as the two calls), else
 * rope_forward on each (the backward: lm_rope_qk_backward) */
static void lm_rope_qk_forward(const Backend* be, const LmConfig* c, Buf q, Buf k, const int* pos, int T, int H, int Hkv,
                               int d, int ld_q, int ld_k) {
    if (be->ops->rope_qk_forward) {
        be->ops->rope_qk_forward(be, q, k, pos, T, H, Hkv, d, ld_q, ld_k, &c->rope);
    } else {
        be->ops->rope_forward(be, q, pos, T, H, d, ld_q, &c->rope);
        be->ops->rope_forward(be, k, pos, T, Hkv, d, ld_k, &c->rope);
    }
}

void lm_block_forward(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* a, LmScratch* s,
                      const LmSeq* seq, Buf xin, Buf xout) {
    int T = seq->T, D = c->D, d = D / c->H, H, Dq, F, Hkv, Dkv; /* H, Dq, F, Hkv, Dkv: this TP rank's share */
    lm_local_sizes(c, &H, &Dq, &F);
    lm_local_kv(c, &Hkv, &Dkv);
    if (T == 0) return;
    be->ops->rmsnorm_forward(be, a->n1, a->rstd1, xin, w->norm1_w, T, D, c->rms_eps);
    be->ops->linear_forward(be, a->q, a->n1, w->q_w, w->q_b, T, D, Dq);
    be->ops->linear_forward(be, a->k, a->n1, w->k_w, w->k_b, T, D, Dkv);
    be->ops->linear_forward(be, a->v, a->n1, w->v_w, w->v_b, T, D, Dkv);
    lm_lora_forward(be, c, w, a, s, seq, LM_LORA_Q, a->n1, a->q); /* no-ops without LoRA */
    lm_lora_forward(be, c, w, a, s, seq, LM_LORA_K, a->n1, a->k);
    lm_lora_forward(be, c, w, a, s, seq, LM_LORA_V, a->n1, a->v);
    lm_rope_qk_forward(be, c, a->q, a->k, seq->pos, T, H, Hkv, d, Dq, Dkv);
    if (seq->kv_k) {
        RR_ASSERT(lm_act_bytes(c) == 4 && "generation's KV cache holds f32 words");
        /* generation: append this call's keys and values to the cache (Dkv wide), attend to every cached row */
        be->dev->copy_d2d(be, seq->kv_k + (size_t)seq->kv_past * Dkv, a->k.p, (size_t)T * Dkv * sizeof(float));
        be->dev->copy_d2d(be, seq->kv_v + (size_t)seq->kv_past * Dkv, a->v.p, (size_t)T * Dkv * sizeof(float));
        if (seq->kv_past == 0)
            be->ops->attention_forward(be, a->att, a->lse, a->q, a->k, a->v, seq->cu_seqlens, seq->S, T, H, Hkv, d, Dq, Dkv, 1);
        else
            be->ops->attention_decode(be, buf_f32p(a->att), buf_f32p(a->q), seq->kv_k, seq->kv_v, T, seq->kv_past + T, H, Hkv, d, Dq, Dkv);
    } else {
        be->ops->attention_forward(be, a->att, a->lse, a->q, a->k, a->v, seq->cu_seqlens, seq->S, T, H, Hkv, d, Dq, Dkv, 1);
    }
    /* row-parallel o: the heads' partial sums; its bias added once (by TP rank 0, before the sum) */
    be->ops->linear_forward(be, s->tmp, a->att, w->o_w, c->tp > 1 && c->tp_rank != 0 ? buf_none() : w->o_b, T, Dq, D);
    lm_lora_forward(be, c, w, a, s, seq, LM_LORA_O, a->att, s->tmp);
    lm_tp_residual(be, c, s, a->xmid, xin, s->tmp, (size_t)T * D);
    be->ops->rmsnorm_forward(be, a->n2, a->rstd2, a->xmid, w->norm2_w, T, D, c->rms_eps);
    be->ops->linear_forward(be, a->gate, a->n2, w->gate_w, buf_none(), T, D, F);
    be->ops->linear_forward(be, a->up, a->n2, w->up_w, buf_none(), T, D, F);
    lm_lora_forward(be, c, w, a, s, seq, LM_LORA_GATE, a->n2, a->gate);
    lm_lora_forward(be, c, w, a, s, seq, LM_LORA_UP, a->n2, a->up);
    be->ops->swiglu_forward(be, a->h, a->gate, a->up, (size_t)T * F);
    if (!xout.p) { /* a recompute: the backward reads nothing past h but the down projection's LoRA input */
        lm_lora_forward_input(be, c, w, a, s, seq, LM_LORA_DOWN, a->h);
        return;
    }
    be->ops->linear_forward(be, s->tmp, a->h, w->down_w, buf_none(), T, F, D);
    lm_lora_forward(be, c, w, a, s, seq, LM_LORA_DOWN, a->h, s->tmp);
    lm_tp_residual(be, c, s, xout, a->xmid, s->tmp, (size_t)T * D); /* row-parallel down */
}

/* RoPE undone over dq and dk (one pass where the table has rope_qk_backward). With their 2-byte mirrors dq16, dk16
 * (2-byte activations) the rotated values go there for the q and k GEMMs, and the f32 ones are rotated too only where
 * a bias gradient sums them. */
static void lm_rope_qk_backward(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockGrads* g, const int* pos,
                                int T, int H, int Hkv, int d, int ld_q, int ld_k) {
    if (be->ops->rope_qk_backward) {
        int m = g->dq16 != NULL; /* (q and k in one launch) */
        be->ops->rope_qk_backward(be, g->dq16, m ? ld_q : 0, g->dq, g->dk16, m ? ld_k : 0, g->dk, pos, T, H, Hkv, d, ld_q,
                                  ld_k, &c->rope, m && w->q_b.p != NULL, m && w->k_b.p != NULL);
    } else {
        RR_ASSERT(!g->dq16 && !g->dk16 && "2-byte RoPE gradients need rope_qk_backward");
        be->ops->rope_backward(be, g->dq, pos, T, H, d, ld_q, &c->rope);
        be->ops->rope_backward(be, g->dk, pos, T, Hkv, d, ld_k, &c->rope);
    }
}

/* B. Each GEMM reads its output gradient as the producer stored it (buf_grad: the 2-byte mirror with 2-byte
 * activations, no conversion pass; else f32 words), and each input gradient's first write is be_dinp_first's
 * (written by a GEMM that reads a 2-byte gradient, else zeroed and added into): one path for both storages, the
 * same values and rounding points. */
void lm_block_backward_input(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockActs* a,
                             LmBlockGrads* g, LmScratch* s, const LmSeq* seq, Buf xin, const float* dxout,
                             float* dxin) {
    const BackendOps* b = be->ops;
    int T = seq->T, D = c->D, d = D / c->H, H, Dq, F, Hkv, Dkv;
    lm_local_sizes(c, &H, &Dq, &F);
    lm_local_kv(c, &Hkv, &Dkv);
    if (T == 0) return;
    RR_ASSERT((c->lora_r <= 0 || lm_act_dtype(c) == DTYPE_F32) && "LoRA runs on f32-word activations");
    int lora = c->lora_r > 0;
    size_t TD = (size_t)T * D, TQ = (size_t)T * Dq, TK = (size_t)T * Dkv, TF = (size_t)T * F;
    /* MLP branch: xout = xmid + down(silu(gate(n2)) * up(n2)) */
    Buf dout = buf_grad(dxout, g->dxout16);
    b->linear_backward(be, buf_f32(s->dh), NULL, NULL, dout, NULL, a->h, w->down_w, T, F, D,
                       be_dinp_first(be, buf_f32(s->dh), dout, TF));
    lm_lora_backward_input(be, c, w, a, g, s, seq, LM_LORA_DOWN, a->h, dxout, s->dh);
    /* the gradients packed for this T in their blocks (lm_block_grads_layout; W reads the same pointers), so that one
     * memset zeroes a group: dk (and dv) right after dq, dup right after dgate */
    g->dk = g->dq + lm_pack(TQ);
    if (g->dv) g->dv = g->dk + lm_pack(TK);
    g->dup = buf_at(g->dgate, lm_pack(TF));
    /* SwiGLU's backward adds into f32 dgate and dup, and overwrites 2-byte ones (read only by the GEMMs) */
    if (g->dgate.dt == DTYPE_F32) be->dev->memset0(be, g->dgate.p, (lm_pack(TF) + TF) * sizeof(float));
    b->swiglu_backward(be, g->dgate, g->dup, s->dh, a->gate, a->up, TF);
    b->linear_backward(be, buf_f32(g->dn2), NULL, NULL, g->dgate, NULL, a->n2, w->gate_w, T, D, F,
                       be_dinp_first(be, buf_f32(g->dn2), g->dgate, TD));
    b->linear_backward(be, buf_f32(g->dn2), NULL, NULL, g->dup, NULL, a->n2, w->up_w, T, D, F, 0);
    lm_tp_sum(c, g->dn2, TD); /* column-parallel gate, up: partial input gradients */
    if (lora) { /* whole: after the sum */
        lm_lora_backward_input(be, c, w, a, g, s, seq, LM_LORA_GATE, a->n2, buf_f32p(g->dgate), g->dn2);
        lm_lora_backward_input(be, c, w, a, g, s, seq, LM_LORA_UP, a->n2, buf_f32p(g->dup), g->dn2);
    }
    be->dev->copy_d2d(be, g->dxmid, dxout, TD * sizeof(float));
    b->rmsnorm_backward(be, g->dxmid, g->dxmid16, NULL, g->dn2, a->xmid, w->norm2_w, a->rstd2, T, D);
    /* attention branch: xmid = xin + o(attn(rope(q(n1)), rope(k(n1)), v(n1))); o's input gradient in the activation
     * storage (2-byte: the GEMM stores it, the attention backward reads it as it is) */
    Buf dmid = buf_grad(g->dxmid, g->dxmid16);
    b->linear_backward(be, s->datt, NULL, NULL, dmid, NULL, a->att, w->o_w, T, Dq, D, be_dinp_first(be, s->datt, dmid, TQ));
    if (lora) lm_lora_backward_input(be, c, w, a, g, s, seq, LM_LORA_O, a->att, g->dxmid, buf_f32p(s->datt));
    /* dq, dk (and dv): the attention adds. With 2-byte activations dv may be 2-byte only (dv16: zeroed, the kernel
     * stores dv16 + its gradient narrowed); with q/k/v biases f32 (v's bias sums it) with its 2-byte mirror */
    be->dev->memset0(be, g->dq, (lm_pack(TQ) + (g->dv ? lm_pack(TK) + TK : TK)) * sizeof(float));
    if (!g->dv) be->dev->memset0(be, g->dv16, TK * sizeof(uint16_t));
    b->attention_backward(be, g->dq, g->dk, g->dv, NULL, NULL, g->dv16, g->dv16 ? Dkv : 0, s->datt, a->att, a->lse, a->q,
                          a->k, a->v, seq->cu_seqlens, seq->S, T, H, Hkv, d, Dq, Dkv, 1);
    lm_rope_qk_backward(be, c, w, g, seq->pos, T, H, Hkv, d, Dq, Dkv);
    Buf dq = buf_grad(g->dq, g->dq16);
    b->linear_backward(be, buf_f32(g->dn1), NULL, NULL, dq, NULL, a->n1, w->q_w, T, D, Dq, be_dinp_first(be, buf_f32(g->dn1), dq, TD));
    b->linear_backward(be, buf_f32(g->dn1), NULL, NULL, buf_grad(g->dk, g->dk16), NULL, a->n1, w->k_w, T, D, Dkv, 0);
    b->linear_backward(be, buf_f32(g->dn1), NULL, NULL, buf_grad(g->dv, g->dv16), NULL, a->n1, w->v_w, T, D, Dkv, 0);
    lm_tp_sum(c, g->dn1, TD); /* column-parallel q, k, v */
    if (lora) { /* whole: after the sum */
        lm_lora_backward_input(be, c, w, a, g, s, seq, LM_LORA_Q, a->n1, g->dq, g->dn1);
        lm_lora_backward_input(be, c, w, a, g, s, seq, LM_LORA_K, a->n1, g->dk, g->dn1);
        lm_lora_backward_input(be, c, w, a, g, s, seq, LM_LORA_V, a->n1, g->dv, g->dn1);
    }
    be->dev->copy_d2d(be, dxin, g->dxmid, TD * sizeof(float));
    b->rmsnorm_backward(be, dxin, g->dxin16, NULL, g->dn1, xin, w->norm1_w, a->rstd1, T, D);
}

void lm_block_backward_weight(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockW* dw,
                              const LmBlockActs* a, const LmBlockGrads* g, const LmSeq* seq, Buf xin, const float* dxout) {
    const BackendOps* b = be->ops;
    int T = seq->T, D = c->D, H, Dq, F, Hkv, Dkv;
    lm_local_sizes(c, &H, &Dq, &F);
    lm_local_kv(c, &Hkv, &Dkv);
    if (T == 0) return;
    for (int t = 0; t < LM_LORA_N && c->lora_r > 0; t++) { /* the adapters' gradients (no-ops where none) */
        static const int on_n2[LM_LORA_N] = {0, 0, 0, 0, 1, 1, 0};
        Buf x = t == LM_LORA_O ? a->att : t == LM_LORA_DOWN ? a->h : on_n2[t] ? a->n2 : a->n1;
        const float* dy = t == LM_LORA_Q ? g->dq : t == LM_LORA_K ? g->dk : t == LM_LORA_V ? g->dv
                        : t == LM_LORA_O ? g->dxmid : t == LM_LORA_GATE ? buf_f32p(g->dgate)
                        : t == LM_LORA_UP ? buf_f32p(g->dup) : dxout;
        lm_lora_backward_weight(be, c, w, dw, a, g, seq, (LmLoraTarget)t, x, dy);
    }
    /* the output gradients as B left them (buf_grad: the 2-byte mirrors where B stored them; the biases sum the f32
     * ones); the biases' gradients (NULL: none or frozen): o's from the whole dxmid, equal on every TP rank */
    b->linear_backward(be, buf_none(), buf_f32p(dw->down_w), NULL, buf_grad(dxout, g->dxout16), NULL, a->h, w->down_w, T, F, D, 0);
    b->linear_backward(be, buf_none(), buf_f32p(dw->gate_w), NULL, g->dgate, NULL, a->n2, w->gate_w, T, D, F, 0);
    b->linear_backward(be, buf_none(), buf_f32p(dw->up_w), NULL, g->dup, NULL, a->n2, w->up_w, T, D, F, 0);
    b->rmsnorm_backward(be, NULL, NULL, dw->norm2_w, g->dn2, a->xmid, w->norm2_w, a->rstd2, T, D);
    b->linear_backward(be, buf_none(), buf_f32p(dw->o_w), buf_f32p(dw->o_b), buf_grad(g->dxmid, g->dxmid16),
                       buf_grad32(g->dxmid, g->dxmid16), a->att, w->o_w, T, Dq, D, 0);
    b->linear_backward(be, buf_none(), buf_f32p(dw->q_w), buf_f32p(dw->q_b), buf_grad(g->dq, g->dq16), buf_grad32(g->dq, g->dq16),
                       a->n1, w->q_w, T, D, Dq, 0);
    b->linear_backward(be, buf_none(), buf_f32p(dw->k_w), buf_f32p(dw->k_b), buf_grad(g->dk, g->dk16), buf_grad32(g->dk, g->dk16),
                       a->n1, w->k_w, T, D, Dkv, 0);
    b->linear_backward(be, buf_none(), buf_f32p(dw->v_w), buf_f32p(dw->v_b), buf_grad(g->dv, g->dv16), buf_grad32(g->dv, g->dv16),
                       a->n1, w->v_w, T, D, Dkv, 0);
    b->rmsnorm_backward(be, NULL, NULL, dw->norm1_w, g->dn1, xin, w->norm1_w, a->rstd1, T, D);
}
