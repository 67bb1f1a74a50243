/* vit.c — the ViT encoder with dynamic resolution (DESIGN.md section 4; names and shapes in vision.h).
 *
 * Pre-norm blocks over N packed patch rows; attention bidirectional within each image, 2-D RoPE on
 * q and k by (patch row, patch column). Forward saves everything the backward needs; the backward is
 * split into B (input gradients, block by block from the top) and W (weight gradients from what B
 * kept), or fused block by block. Every op goes through the Backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vision/vision.h"

/* ------------------------------------------------------------------------------------------------
 * Parameters */

static void vit_add(ParamTable* pt, const char* name, int ndim, int64_t d0, int64_t d1, ParamInit init, float std) {
    int64_t shape[2] = {d0, d1};
    params_add(pt, name, ndim, shape, init, std, ndim == 2);
}

void vit_params_add(ParamTable* pt, const VitConfig* c) {
    int D = c->D, P = 3 * c->patch * c->patch;
    float std = c->init_std, std_out = c->init_std / sqrtf(2.0f * c->L);
    char n[96];
    vit_add(pt, "vision.patch_embed.weight", 2, D, P, PARAM_INIT_NORMAL, std);
    vit_add(pt, "vision.patch_embed.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
    for (int l = 0; l < c->L; l++) {
#define VADD(suffix, ndim, d0, d1, init, s)                              \
    do {                                                                 \
        snprintf(n, sizeof n, "vision.blocks.%d.%s", l, suffix);         \
        vit_add(pt, n, ndim, d0, d1, init, s);                           \
    } while (0)
        VADD("ln1.weight", 1, D, 0, PARAM_INIT_ONES, 0);
        VADD("ln1.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
        VADD("attn.qkv.weight", 2, 3 * D, D, PARAM_INIT_NORMAL, std);
        VADD("attn.qkv.bias", 1, 3 * D, 0, PARAM_INIT_ZEROS, 0);
        VADD("attn.out.weight", 2, D, D, PARAM_INIT_NORMAL, std_out);
        VADD("attn.out.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
        VADD("ln2.weight", 1, D, 0, PARAM_INIT_ONES, 0);
        VADD("ln2.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
        VADD("mlp.fc1.weight", 2, 4 * D, D, PARAM_INIT_NORMAL, std);
        VADD("mlp.fc1.bias", 1, 4 * D, 0, PARAM_INIT_ZEROS, 0);
        VADD("mlp.fc2.weight", 2, D, 4 * D, PARAM_INIT_NORMAL, std_out);
        VADD("mlp.fc2.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
#undef VADD
    }
    vit_add(pt, "vision.ln_f.weight", 1, D, 0, PARAM_INIT_ONES, 0);
    vit_add(pt, "vision.ln_f.bias", 1, D, 0, PARAM_INIT_ZEROS, 0);
}

static float* vit_ptr(const ParamTable* pt, const char* name, int grads) {
    int i = params_find(pt, name);
    if (i < 0) rr_die("internal: parameter '%s' is not registered in this stage", name);
    return grads ? params_grad(pt, i) : params_weights(pt, i);
}

void vit_weights_point(VitW* w, const ParamTable* pt, const VitConfig* c, int grads) {
    char n[96];
    w->patch_w = vit_ptr(pt, "vision.patch_embed.weight", grads);
    w->patch_b = vit_ptr(pt, "vision.patch_embed.bias", grads);
    w->blocks = callocCheck(c->L, sizeof(VitBlockW));
    for (int l = 0; l < c->L; l++) {
        VitBlockW* b = &w->blocks[l];
#define VPT(field, suffix)                                       \
    do {                                                         \
        snprintf(n, sizeof n, "vision.blocks.%d.%s", l, suffix); \
        b->field = vit_ptr(pt, n, grads);                        \
    } while (0)
        VPT(ln1_w, "ln1.weight");
        VPT(ln1_b, "ln1.bias");
        VPT(qkv_w, "attn.qkv.weight");
        VPT(qkv_b, "attn.qkv.bias");
        VPT(out_w, "attn.out.weight");
        VPT(out_b, "attn.out.bias");
        VPT(ln2_w, "ln2.weight");
        VPT(ln2_b, "ln2.bias");
        VPT(fc1_w, "mlp.fc1.weight");
        VPT(fc1_b, "mlp.fc1.bias");
        VPT(fc2_w, "mlp.fc2.weight");
        VPT(fc2_b, "mlp.fc2.bias");
#undef VPT
    }
    w->lnf_w = vit_ptr(pt, "vision.ln_f.weight", grads);
    w->lnf_b = vit_ptr(pt, "vision.ln_f.bias", grads);
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

/* The bias of a row-parallel layer: added by TP rank 0 only, so once in the all-reduced sum. */
static const float* vit_row_bias(const VitConfig* c, const float* b) { return c->tp > 1 && c->tp_rank != 0 ? NULL : b; }

void vit_acts_layout(VitActs* a, Arena* ar, const VitConfig* c, int max_N, int split, int backward) {
    int Hl, Dql, Dml;
    vit_local(c, &Hl, &Dql, &Dml);
    size_t N = (size_t)max_N, D = c->D, H = (size_t)Hl, L = c->L, Dq = (size_t)Dql, Dm = (size_t)Dml;
    if (!a->blocks) a->blocks = callocCheck(L, sizeof(VitBlockActs));
    if (!a->grads) a->grads = callocCheck(L, sizeof(VitBlockGrads));
    a->max_N = max_N;
    a->split = split;
    a->backward = backward;
    a->b_floor = 0;
    /* Without a backward (a frozen tower) nothing is kept for it: two residual slots used
     * alternately and one set of block activations that every block overwrites. */
    a->x = arena_alloc_f32(ar, (backward ? L + 1 : 2) * N * D);
    for (size_t l = 0; l < L; l++) {
        VitBlockActs* b = &a->blocks[l];
        if (!backward && l > 0) {
            *b = a->blocks[0];
            continue;
        }
        b->ln1 = arena_alloc_f32(ar, N * D);
        b->ln1_mean = arena_alloc_f32(ar, N);
        b->ln1_rstd = arena_alloc_f32(ar, N);
        b->qkv = arena_alloc_f32(ar, N * 3 * Dq);
        b->att = arena_alloc_f32(ar, N * Dq);
        b->att_lse = arena_alloc_f32(ar, N * H);
        b->xmid = arena_alloc_f32(ar, N * D);
        b->ln2 = arena_alloc_f32(ar, N * D);
        b->ln2_mean = arena_alloc_f32(ar, N);
        b->ln2_rstd = arena_alloc_f32(ar, N);
        b->fc1 = arena_alloc_f32(ar, N * Dm);
        b->gelu = arena_alloc_f32(ar, N * Dm);
    }
    a->vout = arena_alloc_f32(ar, N * D);
    a->lnf_mean = arena_alloc_f32(ar, N);
    a->lnf_rstd = arena_alloc_f32(ar, N);
    a->tmp = arena_alloc_f32(ar, N * D);
    if (!backward) {
        a->dx = a->dvout = a->dgelu = a->datt = NULL;
        for (size_t l = 0; l < L; l++) memset(&a->grads[l], 0, sizeof a->grads[l]);
        return;
    }
    a->dx = arena_alloc_f32(ar, (split ? L + 1 : 2) * N * D);
    for (size_t l = 0; l < L; l++) {
        VitBlockGrads* g = &a->grads[l];
        if (split || l == 0) {
            g->dfc1 = arena_alloc_f32(ar, N * Dm);
            g->dln2 = arena_alloc_f32(ar, N * D);
            g->dxmid = arena_alloc_f32(ar, N * D);
            g->dqkv = arena_alloc_f32(ar, N * 3 * Dq);
            g->dln1 = arena_alloc_f32(ar, N * D);
        } else {
            *g = a->grads[0]; /* fused backward: W of a block runs right after its B */
        }
    }
    a->dvout = arena_alloc_f32(ar, N * D);
    a->dgelu = arena_alloc_f32(ar, N * Dm);
    a->datt = arena_alloc_f32(ar, N * Dq);
}

int vit_backward_floor(const VitConfig* c, const VitW* g) {
    if (g->patch_w || g->patch_b) return 0;
    for (int l = 0; l < c->L; l++) {
        const VitBlockW* b = &g->blocks[l];
        if (b->ln1_w || b->ln1_b || b->qkv_w || b->qkv_b || b->out_w || b->out_b || b->ln2_w || b->ln2_b ||
            b->fc1_w || b->fc1_b || b->fc2_w || b->fc2_b)
            return l;
    }
    return c->L;
}

void vit_acts_free_tables(VitActs* a) {
    free(a->blocks);
    free(a->grads);
    a->blocks = NULL;
    a->grads = NULL;
}

/* Residual-gradient buffer at block boundary j (0 = patch-embed output, L = tower output). */
static float* vit_dx(const VitActs* a, const VitConfig* c, int j) {
    size_t slot = a->split ? (size_t)j : (size_t)(j % 2);
    return a->dx + slot * (size_t)a->max_N * c->D;
}

static float* vit_x(const VitActs* a, const VitConfig* c, int j) {
    size_t slot = a->backward ? (size_t)j : (size_t)(j % 2);
    return a->x + slot * (size_t)a->max_N * c->D;
}

/* ------------------------------------------------------------------------------------------------
 * Forward */

static void vit_block_forward(const Backend* be, const VitConfig* c, const VitBlockW* w, VitBlockActs* b,
                              VitActs* a, const float* xin, float* xout) {
    int N = a->N, D = c->D, d = D / c->H, H, Dq, Dm; /* H, Dq, Dm: this TP rank's share */
    vit_local(c, &H, &Dq, &Dm);
    be->layernorm_forward(be, b->ln1, b->ln1_mean, b->ln1_rstd, xin, w->ln1_w, w->ln1_b, N, D);
    be->linear_forward(be, b->qkv, b->ln1, w->qkv_w, w->qkv_b, N, D, 3 * Dq);
    /* q = columns [0, Dq), k = [Dq, 2Dq), v = [2Dq, 3Dq) of each row (this rank's heads) */
    be->rope2d_forward(be, b->qkv, a->prow, a->pcol, N, H, d, 3 * Dq);
    be->rope2d_forward(be, b->qkv + Dq, a->prow, a->pcol, N, H, d, 3 * Dq);
    be->attention_forward(be, b->att, b->att_lse, b->qkv, b->qkv + Dq, b->qkv + 2 * Dq, a->img_cu, a->I, N, H, H, d, 3 * Dq,
                          3 * Dq, 0);
    be->linear_forward(be, a->tmp, b->att, w->out_w, vit_row_bias(c, w->out_b), N, Dq, D);
    vit_tp_sum(c, a->tmp, (size_t)N * D); /* row-parallel attn.out */
    be->add_forward(be, b->xmid, xin, a->tmp, (size_t)N * D);
    be->layernorm_forward(be, b->ln2, b->ln2_mean, b->ln2_rstd, b->xmid, w->ln2_w, w->ln2_b, N, D);
    /* fc1 then GELU, one op (the CUDA bf16 table fuses them into the GEMM's epilogue); fc1 is saved */
    be->linear_gelu_forward(be, b->gelu, b->fc1, b->ln2, w->fc1_w, w->fc1_b, N, D, Dm);
    be->linear_forward(be, a->tmp, b->gelu, w->fc2_w, vit_row_bias(c, w->fc2_b), N, Dm, D);
    vit_tp_sum(c, a->tmp, (size_t)N * D); /* row-parallel fc2 */
    be->add_forward(be, xout, b->xmid, a->tmp, (size_t)N * D);
}

void vit_forward(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a, const float* patches,
                 const int32_t* img_cu, int I, const int32_t* prow, const int32_t* pcol, int N) {
    RR_ASSERT(N <= a->max_N);
    a->N = N;
    a->I = I;
    a->img_cu = img_cu;
    a->prow = prow;
    a->pcol = pcol;
    a->patches = patches;
    if (N == 0) return;
    int D = c->D, P = 3 * c->patch * c->patch;
    be->linear_forward(be, vit_x(a, c, 0), patches, w->patch_w, w->patch_b, N, P, D);
    for (int l = 0; l < c->L; l++)
        vit_block_forward(be, c, &w->blocks[l], &a->blocks[l], a, vit_x(a, c, l), vit_x(a, c, l + 1));
    be->layernorm_forward(be, a->vout, a->lnf_mean, a->lnf_rstd, vit_x(a, c, c->L), w->lnf_w, w->lnf_b, N, D);
}

/* ------------------------------------------------------------------------------------------------
 * Backward: B (input gradients) and W (weight gradients) per block */

/* dxin = d block input (overwritten) from dxout; keeps the gradients W needs in g. */
static void vit_block_backward_input(const Backend* be, const VitConfig* c, const VitBlockW* w,
                                     const VitBlockActs* b, VitBlockGrads* g, VitActs* a, const float* xin,
                                     const float* dxout, float* dxin) {
    int N = a->N, D = c->D, d = D / c->H, H, Dq, Dm;
    vit_local(c, &H, &Dq, &Dm);
    size_t ND = (size_t)N * D, NQ = (size_t)N * Dq, N4D = (size_t)N * Dm;
    /* MLP branch: xout = xmid + fc2(gelu(fc1(ln2(xmid)))) */
    be->memset0(be, a->dgelu, N4D * sizeof(float));
    be->linear_backward(be, a->dgelu, NULL, NULL, dxout, b->gelu, w->fc2_w, N, Dm, D);
    be->memset0(be, g->dfc1, N4D * sizeof(float));
    be->gelu_backward(be, g->dfc1, a->dgelu, b->fc1, N4D);
    be->memset0(be, g->dln2, ND * sizeof(float));
    be->linear_backward(be, g->dln2, NULL, NULL, g->dfc1, b->ln2, w->fc1_w, N, D, Dm);
    vit_tp_sum(c, g->dln2, ND); /* column-parallel fc1: partial input gradients */
    be->copy_d2d(be, g->dxmid, dxout, ND * sizeof(float));
    be->layernorm_backward(be, g->dxmid, NULL, NULL, g->dln2, b->xmid, w->ln2_w, b->ln2_mean, b->ln2_rstd, N, D);
    /* attention branch: xmid = xin + out(attn(rope2d(qkv(ln1(xin))))) */
    be->memset0(be, a->datt, NQ * sizeof(float));
    be->linear_backward(be, a->datt, NULL, NULL, g->dxmid, b->att, w->out_w, N, Dq, D);
    be->memset0(be, g->dqkv, 3 * NQ * sizeof(float));
    be->attention_backward(be, g->dqkv, g->dqkv + Dq, g->dqkv + 2 * Dq, a->datt, b->att, b->att_lse, b->qkv, b->qkv + Dq,
                           b->qkv + 2 * Dq, a->img_cu, a->I, N, H, H, d, 3 * Dq, 3 * Dq, 0);
    be->rope2d_backward(be, g->dqkv, a->prow, a->pcol, N, H, d, 3 * Dq);
    be->rope2d_backward(be, g->dqkv + Dq, a->prow, a->pcol, N, H, d, 3 * Dq);
    be->memset0(be, g->dln1, ND * sizeof(float));
    be->linear_backward(be, g->dln1, NULL, NULL, g->dqkv, b->ln1, w->qkv_w, N, D, 3 * Dq);
    vit_tp_sum(c, g->dln1, ND); /* column-parallel qkv */
    be->copy_d2d(be, dxin, g->dxmid, ND * sizeof(float));
    be->layernorm_backward(be, dxin, NULL, NULL, g->dln1, xin, w->ln1_w, b->ln1_mean, b->ln1_rstd, N, D);
}

static void vit_block_backward_weight(const Backend* be, const VitConfig* c, const VitBlockW* w, const VitBlockW* dw,
                                      const VitBlockActs* b, const VitBlockGrads* g, const VitActs* a,
                                      const float* xin, const float* dxout) {
    int N = a->N, D = c->D, H, Dq, Dm;
    vit_local(c, &H, &Dq, &Dm);
    /* the row-parallel biases' gradients (dxout, dxmid are whole) come out whole on every TP rank */
    be->linear_backward(be, NULL, dw->fc2_w, dw->fc2_b, dxout, b->gelu, w->fc2_w, N, Dm, D);
    be->linear_backward(be, NULL, dw->fc1_w, dw->fc1_b, g->dfc1, b->ln2, w->fc1_w, N, D, Dm);
    be->layernorm_backward(be, NULL, dw->ln2_w, dw->ln2_b, g->dln2, b->xmid, w->ln2_w, b->ln2_mean, b->ln2_rstd, N, D);
    be->linear_backward(be, NULL, dw->out_w, dw->out_b, g->dxmid, b->att, w->out_w, N, Dq, D);
    be->linear_backward(be, NULL, dw->qkv_w, dw->qkv_b, g->dqkv, b->ln1, w->qkv_w, N, D, 3 * Dq);
    be->layernorm_backward(be, NULL, dw->ln1_w, dw->ln1_b, g->dln1, xin, w->ln1_w, b->ln1_mean, b->ln1_rstd, N, D);
}

/* ln_f: B part from a->dvout into dx[L]. */
static void vit_lnf_backward_input(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a) {
    int N = a->N, D = c->D, L = c->L;
    float* dxL = vit_dx(a, c, L);
    be->memset0(be, dxL, (size_t)N * D * sizeof(float));
    be->layernorm_backward(be, dxL, NULL, NULL, a->dvout, vit_x(a, c, L), w->lnf_w, a->lnf_mean, a->lnf_rstd, N, D);
}

static void vit_lnf_backward_weight(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a) {
    be->layernorm_backward(be, NULL, g->lnf_w, g->lnf_b, a->dvout, vit_x(a, c, c->L), w->lnf_w, a->lnf_mean,
                           a->lnf_rstd, a->N, c->D);
}

static void vit_patch_backward_weight(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g,
                                      VitActs* a) {
    int P = 3 * c->patch * c->patch;
    be->linear_backward(be, NULL, g->patch_w, g->patch_b, vit_dx(a, c, 0), a->patches, w->patch_w, a->N, P, c->D);
}

void vit_backward_input(const Backend* be, const VitConfig* c, const VitW* w, VitActs* a) {
    RR_ASSERT(a->split && "vit_backward_input needs activations laid out with split = 1");
    RR_ASSERT(a->backward && "vit_backward_input on activations laid out without a backward");
    if (a->N == 0) return;
    vit_lnf_backward_input(be, c, w, a);
    for (int l = c->L - 1; l >= a->b_floor; l--)
        vit_block_backward_input(be, c, &w->blocks[l], &a->blocks[l], &a->grads[l], a, vit_x(a, c, l),
                                 vit_dx(a, c, l + 1), vit_dx(a, c, l));
}

void vit_backward_weight(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a) {
    RR_ASSERT(a->split);
    if (a->N == 0) return;
    vit_lnf_backward_weight(be, c, w, g, a);
    for (int l = c->L - 1; l >= a->b_floor; l--)
        vit_block_backward_weight(be, c, &w->blocks[l], &g->blocks[l], &a->blocks[l], &a->grads[l], a,
                                  vit_x(a, c, l), vit_dx(a, c, l + 1));
    if (a->b_floor == 0) vit_patch_backward_weight(be, c, w, g, a);
}

void vit_backward(const Backend* be, const VitConfig* c, const VitW* w, const VitW* g, VitActs* a) {
    RR_ASSERT(a->backward && "vit_backward on activations laid out without a backward");
    if (a->N == 0) return;
    vit_lnf_backward_input(be, c, w, a);
    vit_lnf_backward_weight(be, c, w, g, a);
    for (int l = c->L - 1; l >= a->b_floor; l--) {
        vit_block_backward_input(be, c, &w->blocks[l], &a->blocks[l], &a->grads[l], a, vit_x(a, c, l),
                                 vit_dx(a, c, l + 1), vit_dx(a, c, l));
        vit_block_backward_weight(be, c, &w->blocks[l], &g->blocks[l], &a->blocks[l], &a->grads[l], a,
                                  vit_x(a, c, l), vit_dx(a, c, l + 1));
    }
    if (a->b_floor == 0) vit_patch_backward_weight(be, c, w, g, a);
}
