/* vit.c — the ViT encoder with dynamic resolution (docs/model.md "Vision encoder and projector"; names and shapes in vision.h).
 *
 * Pre-norm blocks over N packed patch rows; attention bidirectional within each image, 2-D RoPE on
 * q and k by (patch row, patch column). Forward saves everything the backward needs; the backward is
 * split into B (input gradients, block by block from the top) and W (weight gradients from what B
 * kept), or fused block by block. Every op goes through the Backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/kernel_math.h"
#include "vision/vision.h"
#include "vision/vit_lora.h"

/* ------------------------------------------------------------------------------------------------
 * Parameters */

static void vit_add(ParamTable* pt, const char* name, int ndim, int64_t d0, int64_t d1, ParamInit init, float std) {
    int64_t shape[2] = {d0, d1};
    params_add(pt, name, ndim, shape, init, std, ndim == 2);
}

int vit_max_tokens(const VitConfig* c, int max_N) {
    if (c->arch != VIT_ARCH_CLIP) return max_N;
    int mp = c->min_patches > 0 ? c->min_patches : 1;
    return max_N + (max_N + mp - 1) / mp;
}

const char* vit_always_frozen(const VitConfig* c, char* buf, size_t n) {
    buf[0] = 0;
    if (c->arch != VIT_ARCH_CLIP) return buf;
    size_t at = 0;
    for (int l = vit_blocks_run(c); l < c->L && at < n; l++) at += (size_t)snprintf(buf + at, n - at, "vision.blocks.%d,", l);
    if (at < n) snprintf(buf + at, n - at, "vision.post_ln");
    return buf;
}

void vit_params_add(ParamTable* pt, const VitConfig* c) {
    int D = c->D, P = 3 * c->patch * c->patch;
    float std = c->init_std, std_out = c->init_std / sqrtf(2.0f * c->L);
    char n[96];
    int clip = c->arch == VIT_ARCH_CLIP;
    if (!vit_has_embed(c)) goto blocks; /* a later stage's share of the tower (VitConfig.blk0) */
    vit_add(pt, "vision.patch_embed.weight", 2, D, P, PARAM_INIT_NORMAL, std);
    if (clip) {
        vit_add(pt, "vision.class_embedding", 1, D, 0, PARAM_INIT_NORMAL, std);
        vit_add(pt, "vision.pos_embed.weight", 2, 1 + (int64_t)c->grid * c->grid, D, PARAM_INIT_NORMAL, std);
        /* read by rows_gather (interpolated taps), neither a GEMM weight nor an embedding table: f32 words in
         * the bf16 compute copy (engine/params.h) */
        params_keep_f32_compute(pt, "vision.pos_embed.weight");
        /* with 2-byte activations both tables' compute copies are 2-byte words (ParamTable.act_tables_bf16) */
        params_mark_act_table(pt, "vision.class_embedding");
        params_mark_act_table(pt, "vision.pos_embed.weight");
        vit_add(pt, "vision.pre_ln.weight", 1, D, 0, PARAM_INIT_ONES, 0);
        vit_add(pt, "vision.pre_ln.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
    } else {
        vit_add(pt, "vision.patch_embed.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
        params_mark_gemm_bias(pt, "vision.patch_embed.bias"); /* the GEMMs' biases: 2-byte where weight_dtype is */
    }
blocks:
    for (int l = vit_block_lo(c); l < vit_block_hi(c); l++) {
#define VADD(suffix, ndim, d0, d1, init, s)                              \
    do {                                                                 \
        snprintf(n, sizeof n, "vision.blocks.%d.%s", l, suffix);         \
        vit_add(pt, n, ndim, d0, d1, init, s);                           \
    } while (0)
        VADD("ln1.weight", 1, D, 0, PARAM_INIT_ONES, 0);
        VADD("ln1.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
        VADD("attn.qkv.weight", 2, 3 * D, D, PARAM_INIT_NORMAL, std);
        VADD("attn.qkv.bias", 1, 3 * D, 0, PARAM_INIT_ZEROS, 0);
        params_mark_gemm_bias(pt, n);
        VADD("attn.out.weight", 2, D, D, PARAM_INIT_NORMAL, std_out);
        VADD("attn.out.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
        params_mark_gemm_bias(pt, n);
        VADD("ln2.weight", 1, D, 0, PARAM_INIT_ONES, 0);
        VADD("ln2.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
        VADD("mlp.fc1.weight", 2, 4 * D, D, PARAM_INIT_NORMAL, std);
        VADD("mlp.fc1.bias", 1, 4 * D, 0, PARAM_INIT_ZEROS, 0);
        params_mark_gemm_bias(pt, n);
        VADD("mlp.fc2.weight", 2, D, 4 * D, PARAM_INIT_NORMAL, std_out);
        VADD("mlp.fc2.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
        params_mark_gemm_bias(pt, n);
#undef VADD
    }
    const char* fin = clip ? "vision.post_ln" : "vision.ln_f";
    if (vit_has_top(c)) {
        snprintf(n, sizeof n, "%s.weight", fin);
        vit_add(pt, n, 1, D, 0, PARAM_INIT_ONES, 0);
        snprintf(n, sizeof n, "%s.bias", fin);
        vit_add(pt, n, 1, D, 0, PARAM_INIT_ZEROS, 0);
    }
    vit_lora_params_add(pt, c); /* none without tower targets */
}

static int vit_find(const ParamTable* pt, const char* name) {
    int i = params_find(pt, name);
    if (i < 0) rr_die("internal: parameter '%s' is not registered in this stage", name);
    return i;
}
/* a tensor read by the GEMMs or the gathers: its compute copy typed by its storage, or its f32 gradient */
static Buf vit_buf(const ParamTable* pt, const char* name, int grads) {
    int i = vit_find(pt, name);
    return grads ? buf_f32(params_grad(pt, i)) : params_weights_buf(pt, i);
}
/* a LayerNorm's weight or bias: f32 words either way */
static float* vit_ptr(const ParamTable* pt, const char* name, int grads) {
    Buf b = vit_buf(pt, name, grads);
    return buf_f32p(b);
}

void vit_weights_point(VitW* w, const ParamTable* pt, const VitConfig* c, int grads) {
    char n[96];
    memset(w, 0, sizeof *w);
    w->blocks = callocCheck(c->L, sizeof(VitBlockW));
    if (!vit_has_embed(c)) goto blocks; /* the stage's share of the tower (VitConfig.blk0 / blk1) */
    w->patch_w = vit_buf(pt, "vision.patch_embed.weight", grads);
    if (c->arch == VIT_ARCH_CLIP) {
        w->cls = vit_buf(pt, "vision.class_embedding", grads);
        w->tables16 = !grads && pt->compute && params_compute_dtype(pt, params_find(pt, "vision.class_embedding")) == DTYPE_BF16 &&
                      params_compute_dtype(pt, params_find(pt, "vision.pos_embed.weight")) == DTYPE_BF16;
        w->pos = vit_buf(pt, "vision.pos_embed.weight", grads);
        w->pre_w = vit_ptr(pt, "vision.pre_ln.weight", grads);
        w->pre_b = vit_ptr(pt, "vision.pre_ln.bias", grads);
    } else {
        w->patch_b = vit_buf(pt, "vision.patch_embed.bias", grads);
    }
blocks:
    if (c->arch == VIT_ARCH_CLIP && vit_has_top(c)) {
        w->post_w = vit_ptr(pt, "vision.post_ln.weight", grads);
        w->post_b = vit_ptr(pt, "vision.post_ln.bias", grads);
    }
    for (int l = vit_block_lo(c); l < vit_block_hi(c); l++) {
        VitBlockW* b = &w->blocks[l];
#define VPT(field, suffix, get)                                  \
    do {                                                         \
        snprintf(n, sizeof n, "vision.blocks.%d.%s", l, suffix); \
        b->field = get(pt, n, grads);                            \
    } while (0)
        VPT(ln1_w, "ln1.weight", vit_ptr);
        VPT(ln1_b, "ln1.bias", vit_ptr);
        VPT(qkv_w, "attn.qkv.weight", vit_buf);
        VPT(qkv_b, "attn.qkv.bias", vit_buf);
        VPT(out_w, "attn.out.weight", vit_buf);
        VPT(out_b, "attn.out.bias", vit_buf);
        VPT(ln2_w, "ln2.weight", vit_ptr);
        VPT(ln2_b, "ln2.bias", vit_ptr);
        VPT(fc1_w, "mlp.fc1.weight", vit_buf);
        VPT(fc1_b, "mlp.fc1.bias", vit_buf);
        VPT(fc2_w, "mlp.fc2.weight", vit_buf);
        VPT(fc2_b, "mlp.fc2.bias", vit_buf);
#undef VPT
        vit_lora_weights_point(b, pt, l, grads);
    }
    if (c->arch != VIT_ARCH_CLIP && vit_has_top(c)) {
        w->lnf_w = vit_ptr(pt, "vision.ln_f.weight", grads);
        w->lnf_b = vit_ptr(pt, "vision.ln_f.bias", grads);
    }
}

void vit_weights_free(VitW* w) {
    free(w->blocks);
    w->blocks = NULL;
}

/* ------------------------------------------------------------------------------------------------
 * Activations */

/* This TP rank's heads, attention width and MLP hidden. */
static void vit_local(const VitConfig* c, int* H, int* Dq, int* Dm) {
    int T = c->tp > 1 ? c->tp : 1;
    *H = c->H / T;
    *Dq = c->D / T;
    *Dm = 4 * c->D / T;
}

/* The TP all-reduce of a partial (N, D) result; a failure is kept by the callback's ctx. */
static void vit_tp_sum(const VitConfig* c, float* buf, size_t n) {
    if (c->tp > 1) (void)c->tp_reduce(c->tp_ctx, buf, n);
}

/* out = res + the row-parallel output part (N, D) summed over the TP group; with 2-byte activations the partials
 * (rounded by their GEMM, as the f32-word bf16 table rounds them) are widened into the f32 scratch, summed in f32,
 * and add_f32_forward stores res + sum in 2 bytes: the f32-word run's values (text/lm.c, lm_tp_residual) */
static void vit_tp_residual(const Backend* be, const VitConfig* c, VitActs* a, Buf out, Buf res, size_t n) {
    if (c->tp > 1 && a->tmp.dt == DTYPE_BF16) {
        RR_ASSERT(a->tp_sum && be->ops->from_bf16 && be->ops->add_f32_forward);
        be->ops->from_bf16(be, a->tp_sum, buf_bf16p(a->tmp), n);
        vit_tp_sum(c, a->tp_sum, n);
        be->ops->add_f32_forward(be, out, res, a->tp_sum, n);
        return;
    }
    if (c->tp > 1) vit_tp_sum(c, buf_f32p(a->tmp), n);
    be->ops->add_forward(be, out, res, a->tmp, n);
}

/* The bias of a row-parallel layer: added by TP rank 0 only, so once in the all-reduced sum. */
static Buf vit_row_bias(const VitConfig* c, Buf b) { return c->tp > 1 && c->tp_rank != 0 ? buf_none() : b; }

/* One block's activations for N rows (its GELU output with gelu) */
static void vit_block_carve(VitBlockActs* b, Arena* ar, const VitConfig* c, size_t N, int gelu) {
    int Hl, Dql, Dml;
    vit_local(c, &Hl, &Dql, &Dml);
    size_t ab = (size_t)vit_act_bytes(c), D = c->D, H = (size_t)Hl, Dq = (size_t)Dql, Dm = (size_t)Dml;
#define VACT(n) buf_of(arena_alloc(ar, (size_t)(n) * ab), vit_act_dtype(c)) /* n activation values */
    memset(b, 0, sizeof *b);
    b->ln1 = VACT(N * D);
    b->ln1_mean = arena_alloc_f32(ar, N);
    b->ln1_rstd = arena_alloc_f32(ar, N);
    b->qkv = VACT(N * 3 * Dq);
    b->att = VACT(N * Dq);
    b->att_lse = arena_alloc_f32(ar, N * H);
    b->xmid = VACT(N * D);
    b->ln2 = VACT(N * D);
    b->ln2_mean = arena_alloc_f32(ar, N);
    b->ln2_rstd = arena_alloc_f32(ar, N);
    b->fc1 = VACT(N * Dm);
    if (gelu) b->gelu = VACT(N * Dm);
#undef VACT
    vit_lora_acts_carve(b, ar, c, N);
}

void vit_recompute_layout(VitBlockActs* ws, Arena* ar, const VitConfig* c, int max_N) {
    size_t N = (size_t)vit_max_tokens(c, max_N);
    memset(ws, 0, sizeof *ws);
    if (c->recompute == RECOMPUTE_FULL) {
        vit_block_carve(ws, ar, c, N, 1);
    } else if (c->recompute == RECOMPUTE_SELECTIVE) {
        int Hl, Dql, Dml;
        vit_local(c, &Hl, &Dql, &Dml);
        ws->gelu = buf_of(arena_alloc(ar, N * (size_t)Dml * (size_t)vit_act_bytes(c)), vit_act_dtype(c));
    }
}

/* vit_acts_layout with the output (vout) carved out of `out` (NULL: left as it is) and everything else out of ar */
static void vit_layout(VitActs* a, Arena* ar, Arena* out, const VitConfig* c, int max_N, int split, int backward) {
    int Hl, Dql, Dml;
    vit_local(c, &Hl, &Dql, &Dml);
    int clip = c->arch == VIT_ARCH_CLIP;
    int max_T = vit_max_tokens(c, max_N);
    size_t ab = (size_t)vit_act_bytes(c);
    DType adt = vit_act_dtype(c);
#define VACT(n) buf_of(arena_alloc(ar, (size_t)(n) * ab), adt) /* n activation values */
    /* N: the rows of the blocks (tokens; the patches themselves for the RoPE ViT) */
    size_t N = (size_t)max_T, D = c->D, L = (size_t)vit_blocks_run(c), Dq = (size_t)Dql, Dm = (size_t)Dml;
    if (!a->blocks) a->blocks = callocCheck((size_t)c->L, sizeof(VitBlockActs));
    if (!a->grads) a->grads = callocCheck((size_t)c->L, sizeof(VitBlockGrads));
    a->max_N = max_N;
    a->max_T = max_T;
    if (clip) {
        size_t NP = (size_t)max_N, MI = (size_t)(max_T - max_N);
        a->max_I = (int)MI;
        a->tok_cu = (int32_t*)arena_alloc_f32(ar, MI + 1);
        a->tok_of_patch = (int32_t*)arena_alloc_f32(ar, NP);
        a->patch_of_tok = (int32_t*)arena_alloc_f32(ar, N);
        a->cls_of_tok = (int32_t*)arena_alloc_f32(ar, N);
        a->pos_idx = (int32_t*)arena_alloc_f32(ar, N * VIT_POS_TAPS);
        a->pos_w = arena_alloc_f32(ar, N * VIT_POS_TAPS);
        a->emb = VACT(N * D);
        a->pre_mean = arena_alloc_f32(ar, N);
        a->pre_rstd = arena_alloc_f32(ar, N);
        a->demb = backward ? arena_alloc_f32(ar, N * D) : NULL;
        size_t P = 3 * (size_t)c->patch * c->patch;
        a->patches_cm = VACT(NP * P);
        a->cls16 = ab == 2 ? arena_alloc(ar, D * 2) : NULL;
        a->pos16 = ab == 2 ? arena_alloc(ar, (1 + (size_t)c->grid * c->grid) * D * 2) : NULL;
        a->cm_idx = (int32_t*)arena_alloc_f32(ar, NP * P);
        a->cm_ready = 0;
        if (!a->h_idx) {
            a->h_cm = callocCheck((NP * P) > 0 ? NP * P : 1, sizeof(int32_t));
            a->h_img_cu = callocCheck(MI + 1, sizeof(int32_t));
            a->h_prow = callocCheck(NP ? NP : 1, sizeof(int32_t));
            a->h_pcol = callocCheck(NP ? NP : 1, sizeof(int32_t));
            a->h_idx = callocCheck(N * (VIT_POS_TAPS + 3) + NP + MI + 1, sizeof(int32_t));
            a->h_w = callocCheck(N * VIT_POS_TAPS, sizeof(float));
        }
    }
    a->split = split;
    a->backward = backward;
    a->b_floor = 0;
    /* Without a backward (a frozen tower) nothing is kept for it: two residual slots used
     * alternately and one set of block activations that every block overwrites. */
    a->x = VACT((backward ? L + 1 : 2) * N * D);
    int rc = backward ? c->recompute : RECOMPUTE_NONE; /* a forward-only tower recomputes nothing */
    size_t lo = (size_t)vit_block_lo(c), hi = (size_t)vit_run_hi(c); /* the stage's blocks: carved for these only */
    for (size_t l = 0; l < L; l++) {
        VitBlockActs* b = &a->blocks[l];
        if (l < lo || l >= hi) {
            memset(b, 0, sizeof *b);
            continue;
        }
        if ((!backward && l > lo) || rc == RECOMPUTE_FULL) {
            if (rc == RECOMPUTE_FULL) memset(b, 0, sizeof *b); /* the block's input (x) only */
            else *b = a->blocks[lo];
            continue;
        }
        vit_block_carve(b, ar, c, N, rc != RECOMPUTE_SELECTIVE);
    }
    if (out) a->vout = buf_of(arena_alloc(out, (size_t)max_N * D * ab), adt);
    a->lnf_mean = arena_alloc_f32(ar, N);
    a->lnf_rstd = arena_alloc_f32(ar, N);
    /* the out and fc2 products before the residual add (activations); CLIP's patch-embedding products and the
     * patch gradient's scratch (f32 words) too: room for either */
    a->tmp = buf_of(arena_alloc(ar, N * D * (clip ? 4 : ab)), adt);
    a->tp_sum = c->tp > 1 && ab == 2 ? arena_alloc_f32(ar, N * D) : NULL;
    vit_lora_scratch_layout(a, ar, c, max_T);
    a->lora_cols_ready = 0;
    if (!backward) {
        a->dx = a->dvout = a->dgelu = NULL;
        a->datt = buf_none();
        a->dx16 = NULL;
        for (size_t l = 0; l < L; l++) memset(&a->grads[l], 0, sizeof a->grads[l]);
        return;
    }
    a->dx = arena_alloc_f32(ar, (split ? L + 1 : 2) * N * D);
    a->dx16 = ab == 2 ? arena_alloc(ar, (split ? L + 1 : 2) * N * D * 2) : NULL;
    for (size_t l = 0; l < L; l++) {
        VitBlockGrads* g = &a->grads[l];
        if (l < lo || l >= hi) {
            memset(g, 0, sizeof *g);
            continue;
        }
        if (split || l == lo) {
            g->dfc1 = arena_alloc_f32(ar, N * Dm);
            g->dln2 = arena_alloc_f32(ar, N * D);
            g->dxmid = arena_alloc_f32(ar, N * D);
            g->dqkv = arena_alloc_f32(ar, N * 3 * Dq);
            g->dln1 = arena_alloc_f32(ar, N * D);
            g->dfc1_16 = ab == 2 ? arena_alloc(ar, N * Dm * 2) : NULL;
            g->dxmid16 = ab == 2 ? arena_alloc(ar, N * D * 2) : NULL;
            g->dqkv16 = ab == 2 ? arena_alloc(ar, N * 3 * Dq * 2) : NULL;
            vit_lora_grads_carve(g, ar, c, N);
        } else {
            *g = a->grads[lo]; /* fused backward: W of a block runs right after its B */
        }
    }
    a->dvout = arena_alloc_f32(ar, (size_t)max_N * D);
    a->dgelu = arena_alloc_f32(ar, N * Dm);
    a->datt = VACT(N * Dq);
#undef VACT
}

void vit_acts_layout(VitActs* a, Arena* ar, const VitConfig* c, int max_N, int split, int backward) {
    vit_layout(a, ar, ar, c, max_N, split, backward);
}

void vit_acts_layout_out(VitActs* a, Arena* out, const VitConfig* c, int max_N) {
    a->vout = buf_of(arena_alloc(out, (size_t)max_N * c->D * (size_t)vit_act_bytes(c)), vit_act_dtype(c));
}

void vit_acts_layout_scratch(VitActs* a, Arena* scratch, const VitConfig* c, int max_N) {
    const int32_t* cm = a->cm_idx;
    const int32_t* cols = a->lora_cols;
    int ready = a->cm_ready, cols_ready = a->lora_cols_ready;
    vit_layout(a, scratch, NULL, c, max_N, 0, 0);
    if (a->cm_idx == cm) a->cm_ready = ready; /* the same index where it was: still uploaded */
    if (a->lora_cols && a->lora_cols == cols) a->lora_cols_ready = cols_ready; /* likewise LoRA's column table */
}

int vit_backward_floor(const VitConfig* c, const VitW* g) {
    if (g->patch_w.p || g->patch_b.p || g->cls.p || g->pos.p || g->pre_w || g->pre_b) return 0;
    for (int l = 0; l < vit_blocks_run(c); l++) {
        const VitBlockW* b = &g->blocks[l];
        if (b->ln1_w || b->ln1_b || b->qkv_w.p || b->qkv_b.p || b->out_w.p || b->out_b.p || b->ln2_w || b->ln2_b ||
            b->fc1_w.p || b->fc1_b.p || b->fc2_w.p || b->fc2_b.p)
            return l;
        for (int t = 0; t < VIT_LORA_N; t++)
            if (b->lora_A[t].p || b->lora_B[t].p) return l; /* the tower's adapters (vision/vit_lora.c) */
    }
    return vit_blocks_run(c);
}

void vit_acts_free_tables(VitActs* a) {
    free(a->blocks);
    free(a->grads);
    a->blocks = NULL;
    a->grads = NULL;
    free(a->h_img_cu), free(a->h_prow), free(a->h_pcol), free(a->h_idx), free(a->h_w), free(a->h_cm);
    a->h_img_cu = a->h_prow = a->h_pcol = a->h_idx = a->h_cm = NULL;
    a->h_w = NULL;
}

/* Residual-gradient buffer at block boundary j (0 = patch-embed output, L = tower output). */
static float* vit_dx(const VitActs* a, const VitConfig* c, int j) {
    size_t slot = a->split ? (size_t)j : (size_t)(j % 2);
    return a->dx + slot * (size_t)a->max_T * c->D;
}

/* its 2-byte copy (2-byte activations; else NULL) */
static uint16_t* vit_dx16(const VitActs* a, const VitConfig* c, int j) {
    size_t slot = a->split ? (size_t)j : (size_t)(j % 2);
    return a->dx16 ? a->dx16 + slot * (size_t)a->max_T * c->D : NULL;
}
/* the copy of block l's output gradient, where a pass stored it: CLIP's last block's comes from the feature gather
 * (rows_gather_backward, f32 only): NULL, its GEMMs convert */
static const uint16_t* vit_dxout16(const VitActs* a, const VitConfig* c, int l) {
    return c->arch == VIT_ARCH_CLIP && l + 1 == vit_blocks_run(c) ? NULL : vit_dx16(a, c, l + 1);
}
/* block l's input gradient copy to store: the next GEMM's (block l - 1's fc2, or the RoPE tower's patch embedding) */
static uint16_t* vit_dxin16(const VitActs* a, const VitConfig* c, int l) {
    return c->arch == VIT_ARCH_CLIP && l == 0 ? NULL : vit_dx16(a, c, l);
}

static Buf vit_x(const VitActs* a, const VitConfig* c, int j) {
    size_t slot = a->backward ? (size_t)j : (size_t)(j % 2);
    return buf_at(a->x, slot * (size_t)a->max_T * c->D);
}

/* ------------------------------------------------------------------------------------------------
 * Forward */

static void vit_block_forward(const Backend* be, const VitConfig* c, const VitBlockW* w, int l, VitBlockActs* b,
                              VitActs* a, Buf xin, Buf xout) {
    int N = a->T, D = c->D, d = D / c->H, H, Dq, Dm; /* H, Dq, Dm: this TP rank's share */
    int clip = c->arch == VIT_ARCH_CLIP;
    const int32_t* seq = clip ? a->tok_cu : a->img_cu;
    vit_local(c, &H, &Dq, &Dm);
    be->ops->layernorm_forward(be, b->ln1, b->ln1_mean, b->ln1_rstd, xin, w->ln1_w, w->ln1_b, N, D);
    be->ops->linear_forward(be, b->qkv, b->ln1, w->qkv_w, w->qkv_b, N, D, 3 * Dq);
    for (int t = VIT_LORA_Q; t <= VIT_LORA_V && c->lora_r > 0; t++) /* LoRA (f32 activations): no-ops without adapters */
        vit_lora_forward(be, c, w, b, a, l, (VitLoraTarget)t, buf_f32p(b->ln1), buf_f32p(b->qkv));
    /* q = columns [0, Dq), k = [Dq, 2Dq), v = [2Dq, 3Dq) of each row (this rank's heads); CLIP has no RoPE */
    if (!clip) {
        /* q and k in one pass: their 2H heads are adjacent in each row, rotated by the same positions */
        be->ops->rope2d_forward(be, b->qkv, a->prow, a->pcol, N, 2 * H, d, 3 * Dq);
    }
    be->ops->attention_forward(be, b->att, b->att_lse, b->qkv, buf_at(b->qkv, Dq), buf_at(b->qkv, 2 * (size_t)Dq),
                          seq, a->I, N, H, H, d, 3 * Dq, 3 * Dq, 0);
    be->ops->linear_forward(be, a->tmp, b->att, w->out_w, vit_row_bias(c, w->out_b), N, Dq, D);
    if (c->lora_r > 0) vit_lora_forward(be, c, w, b, a, l, VIT_LORA_OUT, buf_f32p(b->att), buf_f32p(a->tmp));
    vit_tp_residual(be, c, a, b->xmid, xin, (size_t)N * D); /* row-parallel attn.out */
    be->ops->layernorm_forward(be, b->ln2, b->ln2_mean, b->ln2_rstd, b->xmid, w->ln2_w, w->ln2_b, N, D);
    /* fc1 then GELU, one op (the CUDA bf16 table fuses them into the GEMM's epilogue); fc1 is saved.
     * CLIP: fc1, then QuickGELU. */
    if (clip) {
        be->ops->linear_forward(be, b->fc1, b->ln2, w->fc1_w, w->fc1_b, N, D, Dm);
        if (c->lora_r > 0) vit_lora_forward(be, c, w, b, a, l, VIT_LORA_FC1, buf_f32p(b->ln2), buf_f32p(b->fc1));
        be->ops->act_forward(be, b->gelu, b->fc1, (size_t)N * Dm, ACT_QUICK_GELU);
    } else {
        be->ops->linear_gelu_forward(be, b->gelu, b->fc1, b->ln2, w->fc1_w, w->fc1_b, N, D, Dm);
    }
    if (!xout.p) { /* a recompute: the backward reads nothing past the GELU but fc2's LoRA input */
        if (c->lora_r > 0) vit_lora_forward_input(be, c, w, b, a, l, VIT_LORA_FC2, buf_f32p(b->gelu));
        return;
    }
    be->ops->linear_forward(be, a->tmp, b->gelu, w->fc2_w, vit_row_bias(c, w->fc2_b), N, Dm, D);
    if (c->lora_r > 0) vit_lora_forward(be, c, w, b, a, l, VIT_LORA_FC2, buf_f32p(b->gelu), buf_f32p(a->tmp));
    vit_tp_residual(be, c, a, xout, b->xmid, (size_t)N * D); /* row-parallel fc2 */
}

/* The activations block l's forward writes and its backward reads: the kept ones, with the recomputed ones from the
 * workspace (VitConfig.recompute) */
static void vit_block_view(const VitConfig* c, const VitActs* a, int l, VitBlockActs* v) {
    int rc = a->backward ? c->recompute : RECOMPUTE_NONE;
    if (rc == RECOMPUTE_FULL) {
        RR_ASSERT(a->rc_ws && "activation recompute needs the workspace (VitActs.rc_ws)");
        *v = *a->rc_ws;
        return;
    }
    *v = a->blocks[l];
    if (rc == RECOMPUTE_SELECTIVE) {
        RR_ASSERT(a->rc_ws && "activation recompute needs the workspace (VitActs.rc_ws)");
        v->gelu = a->rc_ws->gelu;
    }
}

/* Recompute what block l's microbatch did not keep into its view, bitwise the forward's values (the same ops on the
 * same inputs): FULL, the forward up to the GELU; SELECTIVE, the GELU output (the RoPE tower under bf16: fc1 + GELU
 * again, the fused op's GELU reading its unrounded pre-activation; fc1 is rewritten with the same bits) */
static void vit_block_recompute(const Backend* be, const VitConfig* c, const VitBlockW* w, int l, VitBlockActs* v,
                                VitActs* a, Buf xin) {
    int H, Dq, Dm;
    vit_local(c, &H, &Dq, &Dm);
    if (!a->backward || c->recompute == RECOMPUTE_NONE || a->T == 0) return;
    if (c->recompute == RECOMPUTE_FULL) {
        vit_block_forward(be, c, w, l, v, a, xin, buf_none());
    } else if (c->arch == VIT_ARCH_CLIP) {
        be->ops->act_forward(be, v->gelu, v->fc1, (size_t)a->T * Dm, ACT_QUICK_GELU);
    } else if (be->precision == PRECISION_BF16) {
        be->ops->linear_gelu_forward(be, v->gelu, v->fc1, v->ln2, w->fc1_w,
                                     w->fc1_b, a->T, c->D, Dm);
    } else {
        be->ops->gelu_forward(be, v->gelu, v->fc1, (size_t)a->T * Dm);
    }
    a->n_recomputed++;
}

/* ------------------------------------------------------------------------------------------------
 * CLIP: token layout, position taps and the embeddings */

void vit_bicubic_taps(int o, int out_n, int in_n, int* idx, double* w) {
    /* torch's upsample_bicubic2d, align_corners=False with an output size: scale = in / out, source
     * x = (o + 0.5) scale - 0.5 (not clamped for cubic), taps floor(x) - 1 .. floor(x) + 2 clamped to the
     * border, Keys' cubic convolution with A = -0.75 */
    const double A = -0.75;
    double scale = (double)in_n / (double)out_n;
    double x = (o + 0.5) * scale - 0.5;
    double fl = floor(x), t = x - fl;
    int i0 = (int)fl;
    double x1 = t + 1.0, x2 = 1.0 - t, x3 = 2.0 - t;
    w[0] = ((A * x1 - 5.0 * A) * x1 + 8.0 * A) * x1 - 4.0 * A;
    w[1] = ((A + 2.0) * t - (A + 3.0)) * t * t + 1.0;
    w[2] = ((A + 2.0) * x2 - (A + 3.0)) * x2 * x2 + 1.0;
    w[3] = ((A * x3 - 5.0 * A) * x3 + 8.0 * A) * x3 - 4.0 * A;
    for (int k = 0; k < 4; k++) {
        int i = i0 - 1 + k;
        idx[k] = i < 0 ? 0 : i >= in_n ? in_n - 1 : i;
    }
}

/* The token rows of the microbatch (host), then in backend memory: each image's class token and patches,
 * and each token's position-embedding taps (one tap of weight 1 where the grid is the checkpoint's). */
static void clip_layout_tokens(const Backend* be, const VitConfig* c, VitActs* a) {
    int N = a->N, I = a->I, G = c->grid, T = N + I;
    RR_ASSERT(I <= a->max_I && T <= a->max_T);
    a->T = T;
    be->dev->copy_d2h(be, a->h_img_cu, a->img_cu, (size_t)(I + 1) * sizeof(int32_t));
    be->dev->copy_d2h(be, a->h_prow, a->prow, (size_t)N * sizeof(int32_t));
    be->dev->copy_d2h(be, a->h_pcol, a->pcol, (size_t)N * sizeof(int32_t));
    int32_t* tok_cu = a->h_idx;               /* (I+1) */
    int32_t* tok_of_patch = tok_cu + I + 1;   /* (N) */
    int32_t* patch_of_tok = tok_of_patch + N; /* (T) */
    int32_t* cls_of_tok = patch_of_tok + T;   /* (T) */
    int32_t* pos_idx = cls_of_tok + T;        /* (T, 16) */
    float* pos_w = a->h_w;
    for (int i = 0; i < I; i++) {
        int p0 = a->h_img_cu[i], p1 = a->h_img_cu[i + 1], t0 = p0 + i;
        RR_ASSERT(p1 > p0);
        /* the grid from the last patch (patches are row-major over the image's grid) */
        int gh = a->h_prow[p1 - 1] + 1, gw = a->h_pcol[p1 - 1] + 1;
        RR_ASSERT(gh * gw == p1 - p0);
        tok_cu[i] = t0;
        patch_of_tok[t0] = -1;
        cls_of_tok[t0] = 0;
        for (int k = 0; k < VIT_POS_TAPS; k++) pos_idx[(size_t)t0 * VIT_POS_TAPS + k] = -1;
        pos_idx[(size_t)t0 * VIT_POS_TAPS] = 0;
        pos_w[(size_t)t0 * VIT_POS_TAPS] = 1.0f;
        for (int p = p0; p < p1; p++) {
            int t = t0 + 1 + (p - p0), r = a->h_prow[p], col = a->h_pcol[p];
            tok_of_patch[p] = t;
            patch_of_tok[t] = p;
            cls_of_tok[t] = -1;
            int32_t* ix = pos_idx + (size_t)t * VIT_POS_TAPS;
            float* wx = pos_w + (size_t)t * VIT_POS_TAPS;
            for (int k = 0; k < VIT_POS_TAPS; k++) ix[k] = -1, wx[k] = 0.0f;
            if (gh == G && gw == G) { /* Hugging Face does not interpolate here: the row itself */
                ix[0] = 1 + r * G + col;
                wx[0] = 1.0f;
                continue;
            }
            int ri[4], ci[4];
            double rw[4], cw[4];
            vit_bicubic_taps(r, gh, G, ri, rw);
            vit_bicubic_taps(col, gw, G, ci, cw);
            for (int u = 0; u < 4; u++)
                for (int v = 0; v < 4; v++) {
                    ix[u * 4 + v] = 1 + ri[u] * G + ci[v];
                    wx[u * 4 + v] = (float)(rw[u] * cw[v]);
                }
        }
    }
    tok_cu[I] = T;
    be->dev->copy_h2d(be, a->tok_cu, tok_cu, (size_t)(I + 1) * sizeof(int32_t));
    be->dev->copy_h2d(be, a->tok_of_patch, tok_of_patch, (size_t)N * sizeof(int32_t));
    be->dev->copy_h2d(be, a->patch_of_tok, patch_of_tok, (size_t)T * sizeof(int32_t));
    be->dev->copy_h2d(be, a->cls_of_tok, cls_of_tok, (size_t)T * sizeof(int32_t));
    be->dev->copy_h2d(be, a->pos_idx, pos_idx, (size_t)T * VIT_POS_TAPS * sizeof(int32_t));
    be->dev->copy_h2d(be, a->pos_w, pos_w, (size_t)T * VIT_POS_TAPS * sizeof(float));
}

/* The patch rows in CLIP's channel-major order: value (ch, r, c) of patch n from the loader's (r, c, ch),
 * a gather of 1-wide rows whose index (the same for every microbatch) is uploaded once. */
static void clip_patches_channel_major_index(const Backend* be, const VitConfig* c, VitActs* a) {
    int p = c->patch, P = 3 * p * p;
    size_t NP = (size_t)a->max_N * P;
    for (size_t n = 0; n < (size_t)a->max_N; n++)
        for (int ch = 0; ch < 3; ch++)
            for (int r = 0; r < p; r++)
                for (int col = 0; col < p; col++)
                    a->h_cm[n * P + ((size_t)ch * p + r) * p + col] = (int32_t)(n * P + ((size_t)r * p + col) * 3 + ch);
    be->dev->copy_h2d(be, a->cm_idx, a->h_cm, NP * sizeof(int32_t));
    a->cm_ready = 1;
}
static void clip_patches_channel_major(const Backend* be, const VitConfig* c, VitActs* a) {
    int p = c->patch, P = 3 * p * p;
    if (!a->cm_ready) clip_patches_channel_major_index(be, c, a);
    size_t n = (size_t)a->N * P;
    /* the gather's table: the patches in the activation storage (2-byte: narrowed on the host, the rounding the
     * bf16 table's gather store gives them) */
    be->dev->memset0(be, a->patches_cm.p, n * (size_t)vit_act_bytes(c));
    be->ops->rows_gather_forward(be, a->patches_cm, a->cm_idx, NULL, a->patches, (int)n, 1, 1);
}

/* e = [class | patch_embed(patches)] + pos; x0 = pre_ln(e). tmp holds the patch embeddings. */
static void clip_embed_forward(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a) {
    int N = a->N, D = c->D, P = 3 * c->patch * c->patch;
    clip_patches_channel_major(be, c, a); /* the token layout: vit_forward_prepare's */
    int T = a->T;
    be->ops->linear_forward(be, a->tmp, a->patches_cm, w->patch_w, buf_none(), N, P, D);
    be->dev->memset0(be, a->emb.p, (size_t)T * D * (size_t)vit_act_bytes(c));
    Buf cls = w->cls, pos = w->pos;
    RR_ASSERT((!w->tables16 || vit_act_bytes(c) == 2) && "2-byte gather tables on a tower with f32-word activations");
    if (w->tables16) { /* the gather's tables are the 2-byte compute copies AdamW writes: no narrowing */
        RR_ASSERT(cls.dt == DTYPE_BF16 && pos.dt == DTYPE_BF16);
    } else if (a->emb.dt == DTYPE_BF16) { /* the gather's tables in 2-byte words (exact: bf16 values) */
        be->ops->to_bf16(be, a->cls16, buf_f32p(w->cls), (size_t)D);
        be->ops->to_bf16(be, a->pos16, buf_f32p(w->pos), (1 + (size_t)c->grid * c->grid) * D);
        cls = buf_bf16(a->cls16), pos = buf_bf16(a->pos16);
    }
    be->ops->rows_gather_forward(be, a->emb, a->patch_of_tok, NULL, a->tmp, T, 1, D);
    be->ops->rows_gather_forward(be, a->emb, a->cls_of_tok, NULL, cls, T, 1, D);
    be->ops->rows_gather_forward(be, a->emb, a->pos_idx, a->pos_w, pos, T, VIT_POS_TAPS, D);
    be->ops->layernorm_forward(be, vit_x(a, c, 0), a->pre_mean, a->pre_rstd, a->emb, w->pre_w, w->pre_b, T, D);
}

/* W of the embedding tensors (pre_ln, class, position, patch embedding) from dx[0]. */
static void clip_embed_backward_weight(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a) {
    int N = a->N, T = a->T, D = c->D, P = 3 * c->patch * c->patch;
    int need_demb = g->cls.p || g->pos.p || g->patch_w.p;
    if (need_demb) be->dev->memset0(be, a->demb, (size_t)T * D * sizeof(float));
    if (need_demb || g->pre_w || g->pre_b)
        be->ops->layernorm_backward(be, need_demb ? a->demb : NULL, NULL, g->pre_w, g->pre_b, vit_dx(a, c, 0), a->emb, w->pre_w,
                               a->pre_mean, a->pre_rstd, T, D);
    if (g->cls.p) be->ops->rows_gather_backward(be, buf_f32p(g->cls), a->demb, a->cls_of_tok, NULL, T, 1, D);
    if (g->pos.p) be->ops->rows_gather_backward(be, buf_f32p(g->pos), a->demb, a->pos_idx, a->pos_w, T, VIT_POS_TAPS, D);
    if (g->patch_w.p) {
        float* dpatch = (float*)a->tmp.p; /* the patch rows' f32 gradient: tmp has room for N D f32 words (CLIP) */
        be->dev->memset0(be, dpatch, (size_t)N * D * sizeof(float));
        be->ops->rows_gather_backward(be, dpatch, a->demb, a->patch_of_tok, NULL, T, 1, D);
        be->ops->linear_backward(be, buf_none(), buf_f32p(g->patch_w), NULL, buf_f32(dpatch), NULL, a->patches_cm, w->patch_w, N, P, D, 0);
    }
}

/* B at the top of the CLIP tower: the features' gradient (patch rows) into dx[L_run] (class rows 0). */
static void clip_out_backward_input(const Backend* be, const VitConfig* c, VitActs* a) {
    int Lr = vit_blocks_run(c), D = c->D;
    float* dxL = vit_dx(a, c, Lr);
    be->dev->memset0(be, dxL, (size_t)a->T * D * sizeof(float));
    be->ops->rows_gather_backward(be, dxL, a->dvout, a->tok_of_patch, NULL, a->N, 1, D);
}

void vit_patches_to_bf16(uint16_t* out, const float* in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = rr_f32_to_bf16(in[i]);
}

void vit_forward_prepare(const Backend* be, const VitConfig* c, VitActs* a, Buf patches, const int32_t* img_cu,
                         int I, const int32_t* prow, const int32_t* pcol, int N) {
    RR_ASSERT(N <= a->max_N);
    RR_ASSERT((!patches.p || patches.dt == vit_act_dtype(c)) && "the patches in the tower's activation storage");
    a->N = N;
    a->I = I;
    a->img_cu = img_cu;
    a->prow = prow;
    a->pcol = pcol;
    a->patches = patches;
    a->T = N;
    if (N == 0 || c->arch != VIT_ARCH_CLIP) return;
    clip_layout_tokens(be, c, a); /* reads the images' grids back, writes the token tables */
    if (!a->cm_ready && vit_has_embed(c)) clip_patches_channel_major_index(be, c, a);
    vit_lora_prepare(be, c, a);
}

void vit_forward(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a, Buf patches,
                 const int32_t* img_cu, int I, const int32_t* prow, const int32_t* pcol, int N) {
    vit_forward_prepare(be, c, a, patches, img_cu, I, prow, pcol, N);
    vit_forward_run(be, c, w, a);
}

void vit_forward_run(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a) {
    int N = a->N;
    if (N == 0) return;
    Buf patches = a->patches;
    int D = c->D, P = 3 * c->patch * c->patch;
    int lo = vit_block_lo(c), hi = vit_run_hi(c); /* the stage's blocks; block lo's input given where lo > 0 */
    if (c->arch == VIT_ARCH_CLIP) {
        if (lo == 0) clip_embed_forward(be, c, w, a);
        int Lr = vit_blocks_run(c);
        for (int l = lo; l < hi; l++) {
            VitBlockActs v;
            vit_block_view(c, a, l, &v);
            vit_block_forward(be, c, &w->blocks[l], l, &v, a, vit_x(a, c, l), vit_x(a, c, l + 1));
        }
        if (!vit_has_top(c)) return; /* the next stage's input: vit_stage_output */
        /* the features: hidden_states[L_run] without the class tokens */
        be->dev->memset0(be, a->vout.p, (size_t)N * D * (size_t)vit_act_bytes(c));
        be->ops->rows_gather_forward(be, a->vout, a->tok_of_patch, NULL, vit_x(a, c, Lr), N, 1, D);
        return;
    }
    if (lo == 0) be->ops->linear_forward(be, vit_x(a, c, 0), patches, w->patch_w, w->patch_b, N, P, D);
    for (int l = lo; l < hi; l++) {
        VitBlockActs v;
        vit_block_view(c, a, l, &v);
        vit_block_forward(be, c, &w->blocks[l], l, &v, a, vit_x(a, c, l), vit_x(a, c, l + 1));
    }
    if (!vit_has_top(c)) return;
    be->ops->layernorm_forward(be, a->vout, a->lnf_mean, a->lnf_rstd, vit_x(a, c, c->L), w->lnf_w, w->lnf_b, N, D);
}

/* ------------------------------------------------------------------------------------------------
 * Backward: B (input gradients) and W (weight gradients) per block */

/* dxin = d block input (overwritten) from dxout; keeps the gradients W needs in g. Each GEMM reads its output gradient
 * as the producer stored it (buf_grad: the 2-byte mirror with 2-byte activations, no conversion pass; else f32 words),
 * and each input gradient's first write is be_dinp_first's: one path for both storages, the same numerics. */
static void vit_block_backward_input(const Backend* be, const VitConfig* c, const VitBlockW* w, int l,
                                     const VitBlockActs* b, VitBlockGrads* g, VitActs* a, Buf xin,
                                     const float* dxout, float* dxin) {
    int N = a->T, D = c->D, d = D / c->H, H, Dq, Dm;
    int clip = c->arch == VIT_ARCH_CLIP;
    const int32_t* seq = clip ? a->tok_cu : a->img_cu;
    vit_local(c, &H, &Dq, &Dm);
    size_t ND = (size_t)N * D, NQ = (size_t)N * Dq, N4D = (size_t)N * Dm;
    RR_ASSERT((c->lora_r <= 0 || vit_act_dtype(c) == DTYPE_F32) && "the tower's LoRA runs on f32-word activations");
    /* MLP branch: xout = xmid + fc2(gelu(fc1(ln2(xmid)))) */
    Buf dout = buf_grad(dxout, vit_dxout16(a, c, l));
    be->ops->linear_backward(be, buf_f32(a->dgelu), NULL, NULL, dout, NULL, b->gelu, w->fc2_w, N, Dm, D,
                             be_dinp_first(be, buf_f32(a->dgelu), dout, N4D));
    if (c->lora_r > 0) /* local: fc2's split input */
        vit_lora_backward_input(be, c, w, b, g, a, l, VIT_LORA_FC2, buf_f32p(b->gelu), dxout, a->dgelu);
    be->dev->memset0(be, g->dfc1, N4D * sizeof(float));
    /* with dfc1's 2-byte mirror (fc1's GEMMs read it) the activation's backward stores it in the same pass */
    if (clip || g->dfc1_16)
        be->ops->act_backward(be, g->dfc1, g->dfc1_16, a->dgelu, b->fc1, N4D, clip ? ACT_QUICK_GELU : ACT_GELU_TANH);
    else be->ops->gelu_backward(be, g->dfc1, a->dgelu, b->fc1, N4D);
    Buf dfc1 = buf_grad(g->dfc1, g->dfc1_16);
    be->ops->linear_backward(be, buf_f32(g->dln2), NULL, NULL, dfc1, NULL, b->ln2, w->fc1_w, N, D, Dm,
                             be_dinp_first(be, buf_f32(g->dln2), dfc1, ND));
    vit_tp_sum(c, g->dln2, ND); /* column-parallel fc1: partial input gradients */
    if (c->lora_r > 0) /* whole: after the sum */
        vit_lora_backward_input(be, c, w, b, g, a, l, VIT_LORA_FC1, buf_f32p(b->ln2), g->dfc1, g->dln2);
    be->dev->copy_d2d(be, g->dxmid, dxout, ND * sizeof(float));
    be->ops->layernorm_backward(be, g->dxmid, g->dxmid16, NULL, NULL, g->dln2, b->xmid, w->ln2_w, b->ln2_mean, b->ln2_rstd,
                                N, D);
    /* attention branch: xmid = xin + out(attn(rope2d(qkv(ln1(xin))))); out's input gradient in the activation storage
     * (2-byte: the GEMM stores it, the attention backward reads it as it is) */
    Buf dmid = buf_grad(g->dxmid, g->dxmid16);
    be->ops->linear_backward(be, a->datt, NULL, NULL, dmid, NULL, b->att, w->out_w, N, Dq, D,
                             be_dinp_first(be, a->datt, dmid, NQ));
    if (c->lora_r > 0) vit_lora_backward_input(be, c, w, b, g, a, l, VIT_LORA_OUT, buf_f32p(b->att), g->dxmid, buf_f32p(a->datt));
    be->dev->memset0(be, g->dqkv, 3 * NQ * sizeof(float));
    /* dqkv f32 (qkv's bias sums it), with 2-byte activations with its 2-byte mirror dqkv16 for qkv's GEMMs: the
     * attention kernels store dv's (and CLIP's dq, dk's), RoPE's backward the rotated dq, dk's */
    uint16_t* m16 = g->dqkv16;
    be->ops->attention_backward(be, g->dqkv, g->dqkv + Dq, g->dqkv + 2 * Dq, clip ? m16 : NULL, clip && m16 ? m16 + Dq : NULL,
                                m16 ? m16 + 2 * Dq : NULL, m16 ? 3 * Dq : 0, a->datt, b->att, b->att_lse, b->qkv,
                                buf_at(b->qkv, Dq), buf_at(b->qkv, 2 * (size_t)Dq), seq, a->I, N, H, H, d, 3 * Dq, 3 * Dq, 0);
    if (!clip) /* dq and dk in one pass: their 2H heads are adjacent in each row of dqkv (and of its mirror) */
        be->ops->rope2d_backward(be, m16, m16 ? 3 * Dq : 0, g->dqkv, a->prow, a->pcol, N, 2 * H, d, 3 * Dq, m16 != NULL);
    Buf dqkv = buf_grad(g->dqkv, m16);
    be->ops->linear_backward(be, buf_f32(g->dln1), NULL, NULL, dqkv, NULL, b->ln1, w->qkv_w, N, D, 3 * Dq,
                             be_dinp_first(be, buf_f32(g->dln1), dqkv, ND));
    vit_tp_sum(c, g->dln1, ND); /* column-parallel qkv */
    for (int t = VIT_LORA_Q; t <= VIT_LORA_V && c->lora_r > 0; t++) /* whole: after the sum */
        vit_lora_backward_input(be, c, w, b, g, a, l, (VitLoraTarget)t, buf_f32p(b->ln1), g->dqkv, g->dln1);
    be->dev->copy_d2d(be, dxin, g->dxmid, ND * sizeof(float));
    be->ops->layernorm_backward(be, dxin, vit_dxin16(a, c, l), NULL, NULL, g->dln1, xin, w->ln1_w, b->ln1_mean, b->ln1_rstd,
                                N, D);
}

static void vit_block_backward_weight(const Backend* be, const VitConfig* c, const VitBlockW* w, const VitBlockW* dw,
                                      int l, const VitBlockActs* b, const VitBlockGrads* g, const VitActs* a,
                                      Buf xin, const float* dxout) {
    int N = a->T, D = c->D, H, Dq, Dm;
    vit_local(c, &H, &Dq, &Dm);
    /* the output gradients as B left them (buf_grad: the 2-byte mirrors where B stored them, the biases summing the f32
     * ones); the row-parallel biases' gradients (dxout, dxmid are whole) come out whole on every TP rank */
    const uint16_t* dxout16 = vit_dxout16(a, c, l);
    be->ops->linear_backward(be, buf_none(), buf_f32p(dw->fc2_w), buf_f32p(dw->fc2_b), buf_grad(dxout, dxout16),
                             buf_grad32(dxout, dxout16), b->gelu, w->fc2_w, N, Dm, D, 0);
    be->ops->linear_backward(be, buf_none(), buf_f32p(dw->fc1_w), buf_f32p(dw->fc1_b), buf_grad(g->dfc1, g->dfc1_16),
                             buf_grad32(g->dfc1, g->dfc1_16), b->ln2, w->fc1_w, N, D, Dm, 0);
    be->ops->layernorm_backward(be, NULL, NULL, dw->ln2_w, dw->ln2_b, g->dln2, b->xmid, w->ln2_w, b->ln2_mean, b->ln2_rstd, N, D);
    be->ops->linear_backward(be, buf_none(), buf_f32p(dw->out_w), buf_f32p(dw->out_b), buf_grad(g->dxmid, g->dxmid16),
                             buf_grad32(g->dxmid, g->dxmid16), b->att, w->out_w, N, Dq, D, 0);
    be->ops->linear_backward(be, buf_none(), buf_f32p(dw->qkv_w), buf_f32p(dw->qkv_b), buf_grad(g->dqkv, g->dqkv16),
                             buf_grad32(g->dqkv, g->dqkv16), b->ln1, w->qkv_w, N, D, 3 * Dq, 0);
    be->ops->layernorm_backward(be, NULL, NULL, dw->ln1_w, dw->ln1_b, g->dln1, xin, w->ln1_w, b->ln1_mean, b->ln1_rstd, N, D);
    for (int t = 0; t < VIT_LORA_N && c->lora_r > 0; t++) { /* the adapters' gradients (f32 activations; no-ops where none) */
        static const int x_of[VIT_LORA_N] = {0, 0, 0, 1, 2, 3};
        const float* xs[4] = {buf_f32p(b->ln1), buf_f32p(b->att), buf_f32p(b->ln2), buf_f32p(b->gelu)};
        const float* dys[4] = {g->dqkv, g->dxmid, g->dfc1, dxout};
        vit_lora_backward_weight(be, c, w, dw, b, g, a, l, (VitLoraTarget)t, xs[x_of[t]], dys[x_of[t]]);
    }
}

/* ln_f: B part from a->dvout into dx[L]. */
static void vit_lnf_backward_input(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a) {
    int N = a->N, D = c->D, L = c->L;
    float* dxL = vit_dx(a, c, L);
    be->dev->memset0(be, dxL, (size_t)N * D * sizeof(float));
    /* with 2-byte activations, the 2-byte copy for the last block's fc2 (NULL: none) */
    be->ops->layernorm_backward(be, dxL, vit_dx16(a, c, L), NULL, NULL, a->dvout, vit_x(a, c, L), w->lnf_w, a->lnf_mean,
                                a->lnf_rstd, N, D);
}

static void vit_lnf_backward_weight(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a) {
    be->ops->layernorm_backward(be, NULL, NULL, g->lnf_w, g->lnf_b, a->dvout, vit_x(a, c, c->L), w->lnf_w, a->lnf_mean,
                           a->lnf_rstd, a->N, c->D);
}

static void clip_embed_backward_weight(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a);

static void vit_patch_backward_weight(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g,
                                      VitActs* a) {
    if (c->arch == VIT_ARCH_CLIP) {
        clip_embed_backward_weight(be, c, w, g, a);
        return;
    }
    int P = 3 * c->patch * c->patch;
    /* the output gradient as block 0's B stored it: its 2-byte copy with 2-byte activations (the bias sums the f32 one),
     * else the f32 one */
    uint16_t* d16 = vit_dx16(a, c, 0);
    float* d32 = vit_dx(a, c, 0);
    be->ops->linear_backward(be, buf_none(), buf_f32p(g->patch_w), buf_f32p(g->patch_b), d16 ? buf_bf16(d16) : buf_f32(d32),
                             d16 ? d32 : NULL, a->patches, w->patch_w, a->N, P, c->D, 0);
}

/* the lowest block a backward of the stage's range runs: the tower's floor, or the range's first block */
static int vit_b_lo(const VitConfig* c, const VitActs* a) { return a->b_floor > vit_block_lo(c) ? a->b_floor : vit_block_lo(c); }

void vit_backward_input(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a) {
    RR_ASSERT(a->split && "vit_backward_input needs activations laid out with split = 1");
    RR_ASSERT(a->backward && "vit_backward_input on activations laid out without a backward");
    if (a->N == 0) return;
    if (!vit_has_top(c)) { /* the top's gradient given: vit_stage_doutput */
    } else if (c->arch == VIT_ARCH_CLIP) clip_out_backward_input(be, c, a);
    else vit_lnf_backward_input(be, c, w, a);
    for (int l = vit_run_hi(c) - 1; l >= vit_b_lo(c, a); l--) {
        VitBlockActs v; /* B reads no GELU output: SELECTIVE recomputes it for W only */
        vit_block_view(c, a, l, &v);
        if (c->recompute == RECOMPUTE_FULL) vit_block_recompute(be, c, &w->blocks[l], l, &v, a, vit_x(a, c, l));
        vit_block_backward_input(be, c, &w->blocks[l], l, &v, &a->grads[l], a, vit_x(a, c, l), vit_dx(a, c, l + 1),
                                 vit_dx(a, c, l));
    }
}

void vit_backward_weight(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a) {
    RR_ASSERT(a->split);
    if (a->N == 0) return;
    if (c->arch != VIT_ARCH_CLIP && vit_has_top(c)) vit_lnf_backward_weight(be, c, w, g, a);
    for (int l = vit_run_hi(c) - 1; l >= vit_b_lo(c, a); l--) {
        VitBlockActs v; /* the workspace holds another block or microbatch since B: recomputed again */
        vit_block_view(c, a, l, &v);
        vit_block_recompute(be, c, &w->blocks[l], l, &v, a, vit_x(a, c, l));
        vit_block_backward_weight(be, c, &w->blocks[l], &g->blocks[l], l, &v, &a->grads[l], a, vit_x(a, c, l),
                                  vit_dx(a, c, l + 1));
    }
    if (a->b_floor == 0 && vit_has_embed(c)) vit_patch_backward_weight(be, c, w, g, a);
}

void vit_backward(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a) {
    RR_ASSERT(a->backward && "vit_backward on activations laid out without a backward");
    if (a->N == 0) return;
    if (!vit_has_top(c)) { /* the top's gradient given: vit_stage_doutput */
    } else if (c->arch == VIT_ARCH_CLIP) {
        clip_out_backward_input(be, c, a);
    } else {
        vit_lnf_backward_input(be, c, w, a);
        vit_lnf_backward_weight(be, c, w, g, a);
    }
    for (int l = vit_run_hi(c) - 1; l >= vit_b_lo(c, a); l--) {
        VitBlockActs v;
        vit_block_view(c, a, l, &v);
        vit_block_recompute(be, c, &w->blocks[l], l, &v, a, vit_x(a, c, l));
        vit_block_backward_input(be, c, &w->blocks[l], l, &v, &a->grads[l], a, vit_x(a, c, l), vit_dx(a, c, l + 1),
                                 vit_dx(a, c, l));
        vit_block_backward_weight(be, c, &w->blocks[l], &g->blocks[l], l, &v, &a->grads[l], a, vit_x(a, c, l),
                                  vit_dx(a, c, l + 1));
    }
    if (a->b_floor == 0 && vit_has_embed(c)) vit_patch_backward_weight(be, c, w, g, a);
}

/* ------------------------------------------------------------------------------------------------
 * A stage's edges (VitConfig.blk0 / blk1): f32 words on the pipeline, the tower's activation storage here */

static void vit_edge_in(const Backend* be, const VitConfig* c, Buf x, const float* h, size_t n) {
    if (x.dt == DTYPE_BF16) be->ops->to_bf16(be, buf_bf16p(x), h, n); /* exact: bf16 values */
    else be->dev->copy_d2d(be, buf_f32p(x), h, n * sizeof(float));
}

void vit_stage_input(const Backend* be, const VitConfig* c, VitActs* a, const float* h) {
    RR_ASSERT(!vit_has_embed(c) && h);
    vit_edge_in(be, c, vit_x(a, c, vit_block_lo(c)), h, (size_t)a->T * c->D);
}

void vit_stage_output(const Backend* be, const VitConfig* c, const VitActs* a, float* h) {
    RR_ASSERT(!vit_has_top(c) && h);
    size_t n = (size_t)a->T * c->D;
    Buf x = vit_x(a, c, vit_run_hi(c));
    if (x.dt == DTYPE_BF16) be->ops->from_bf16(be, h, buf_bf16p(x), n); /* widened, exact */
    else be->dev->copy_d2d(be, h, buf_f32p(x), n * sizeof(float));
}

void vit_stage_doutput(const Backend* be, const VitConfig* c, VitActs* a, const float* dh) {
    RR_ASSERT(!vit_has_top(c) && dh && a->backward);
    int hi = vit_run_hi(c);
    size_t n = (size_t)a->T * c->D;
    be->dev->copy_d2d(be, vit_dx(a, c, hi), dh, n * sizeof(float));
    /* the 2-byte copy the last block's GEMMs read, as the next block's LayerNorm backward stores it */
    if (vit_dx16(a, c, hi)) be->ops->to_bf16(be, vit_dx16(a, c, hi), dh, n);
}

void vit_stage_dinput(const Backend* be, const VitConfig* c, const VitActs* a, float* dh) {
    RR_ASSERT(!vit_has_embed(c) && dh && a->backward);
    be->dev->copy_d2d(be, dh, vit_dx(a, c, vit_block_lo(c)), (size_t)a->T * c->D * sizeof(float));
}
