/* vit_lora.c — LoRA on the CLIP tower's linears (docs/training.md "LoRA"), PEFT's math as text/lm_lora.c's:
 *
 *   y = W x + s B A dropout(x),  s = lora_alpha / r,  A (r, in) ~ U(-1/sqrt(in), 1/sqrt(in)),  B (out, r) = 0
 *
 * on CLIP's q_proj, k_proj, v_proj (stacked here as the rows [q | k | v] of attn.qkv: each adapter reads and writes
 * its own columns of the (T, 3 D/tp) qkv rows, through rows_gather over the rows viewed as a (3 T, D/tp) table),
 * out_proj, fc1 and fc2. Forward: u = s A drop(x) (T, r), kept; y += B u. With du = s B^T dy:
 *   dB += dy^T u,  dA += du^T drop(x),  dx += drop^T(A^T du).
 * The dropout mask is redrawn from its key where needed, never stored; its key is the microbatch's (the LM's), mixed
 * with the tower's own tag, block and target. Tensor parallelism as text/lm_lora.c: a column-parallel base (q, k, v,
 * fc1) has B split with its rows and A whole, du all-reduced (T x r) and dx added after the block's own sum; a
 * row-parallel base (out, fc2) has A split with its columns and B whole, u all-reduced and B u added by TP rank 0
 * only, before the block's sum of the partial outputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vision/vit_lora.h"

static int vl_row_parallel(VitLoraTarget t) { return t == VIT_LORA_OUT || t == VIT_LORA_FC2; }
static int vl_qkv(VitLoraTarget t) { return t <= VIT_LORA_V; }
static int vl_on(const VitConfig* c, int t) { return c->lora_r > 0 && (c->lora_targets >> t & 1); }

/* The whole (unsplit) base's in and out widths of target t. */
static void vl_dims(const VitConfig* c, VitLoraTarget t, int* in, int* out) {
    *in = t == VIT_LORA_FC2 ? 4 * c->D : c->D;
    *out = t == VIT_LORA_FC1 ? 4 * c->D : c->D;
}

/* This TP rank's in and out widths of target t (the base's split). */
static void vl_local_dims(const VitConfig* c, VitLoraTarget t, int* in, int* out) {
    int T = c->tp > 1 ? c->tp : 1;
    vl_dims(c, t, in, out);
    if (vl_row_parallel(t)) *in /= T;
    else *out /= T;
}

void vit_lora_params_add(ParamTable* pt, const VitConfig* c) {
    if (c->lora_r <= 0 || !c->lora_targets) return;
    char n[128];
    for (int l = vit_block_lo(c); l < vit_run_hi(c); l++) /* the stage's blocks (VitConfig.blk0 / blk1) */
        for (int t = 0; t < VIT_LORA_N; t++) {
            if (!vl_on(c, t)) continue;
            int in, out;
            vl_dims(c, (VitLoraTarget)t, &in, &out);
            int64_t sa[2] = {c->lora_r, in}, sb[2] = {out, c->lora_r};
            snprintf(n, sizeof n, "vision.blocks.%d.%s.lora_A.weight", l, vit_lora_target_module((VitLoraTarget)t));
            params_add(pt, n, 2, sa, PARAM_INIT_UNIFORM, 1.0f / sqrtf((float)in), 1);
            snprintf(n, sizeof n, "vision.blocks.%d.%s.lora_B.weight", l, vit_lora_target_module((VitLoraTarget)t));
            params_add(pt, n, 2, sb, PARAM_INIT_ZEROS, 0, 1);
        }
}

void vit_lora_weights_point(VitBlockW* w, const ParamTable* pt, int l, int grads) {
    char n[128];
    for (int t = 0; t < VIT_LORA_N; t++) {
        w->lora_A[t] = w->lora_B[t] = buf_none();
        snprintf(n, sizeof n, "vision.blocks.%d.%s.lora_A.weight", l, vit_lora_target_module((VitLoraTarget)t));
        int ia = params_find(pt, n);
        snprintf(n, sizeof n, "vision.blocks.%d.%s.lora_B.weight", l, vit_lora_target_module((VitLoraTarget)t));
        int ib = params_find(pt, n);
        if (ia < 0 || ib < 0) continue;
        w->lora_A[t] = grads ? buf_f32(params_grad(pt, ia)) : params_weights_buf(pt, ia);
        w->lora_B[t] = grads ? buf_f32(params_grad(pt, ib)) : params_weights_buf(pt, ib);
    }
}

void vit_lora_acts_carve(VitBlockActs* b, Arena* ar, const VitConfig* c, size_t N) {
    for (int t = 0; t < VIT_LORA_N; t++) b->lora_u[t] = vl_on(c, t) ? arena_alloc_f32(ar, N * (size_t)c->lora_r) : NULL;
}

void vit_lora_grads_carve(VitBlockGrads* g, Arena* ar, const VitConfig* c, size_t N) {
    for (int t = 0; t < VIT_LORA_N; t++) g->lora_du[t] = vl_on(c, t) ? arena_alloc_f32(ar, N * (size_t)c->lora_r) : NULL;
}

void vit_lora_scratch_layout(VitActs* a, Arena* ar, const VitConfig* c, int max_T) {
    a->lora_xd = a->lora_z = a->lora_dy = a->lora_dx = NULL;
    a->lora_cols = NULL;
    if (c->lora_r <= 0 || !c->lora_targets) return;
    size_t w = (size_t)4 * c->D * (size_t)max_T; /* the widest input or output of an adapted linear */
    a->lora_xd = c->lora_dropout > 0 ? arena_alloc_f32(ar, w) : NULL;
    a->lora_z = arena_alloc_f32(ar, w);
    a->lora_dy = arena_alloc_f32(ar, w);
    a->lora_dx = c->lora_dropout > 0 ? arena_alloc_f32(ar, w) : NULL;
    a->lora_cols = (int32_t*)arena_alloc_f32(ar, 3 * (size_t)max_T);
}

void vit_lora_prepare(const Backend* be, const VitConfig* c, VitActs* a) {
    if (!a->lora_cols || a->lora_cols_ready) return;
    size_t n = (size_t)a->max_T;
    int32_t* h = mallocCheck(3 * n * sizeof(int32_t));
    for (int j = 0; j < 3; j++)
        for (size_t i = 0; i < n; i++) h[j * n + i] = (int32_t)(3 * i + (size_t)j);
    be->dev->copy_h2d(be, a->lora_cols, h, 3 * n * sizeof(int32_t));
    be->dev->synchronize(be);
    free(h);
    a->lora_cols_ready = 1;
    (void)c;
}

static uint64_t vl_mix(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The mask key of target t in block l under the microbatch's key: the tower's tag keeps it apart from the LM's. */
static uint64_t vl_key(uint64_t seed, int l, VitLoraTarget t) {
    return vl_mix(seed ^ vl_mix(0x5649540000000000ull ^ ((uint64_t)l * 8 + (uint64_t)t)));
}

/* The dropped-out input of target t (x itself without dropout), into xs. */
static const float* vl_dropped(const Backend* be, const VitConfig* c, const VitActs* a, int l, VitLoraTarget t,
                               const float* x, float* xs, int in_local) {
    if (!(c->lora_dropout > 0) || a->lora_seed == 0) return x;
    RR_ASSERT(xs && be->ops->dropout_forward);
    int in, out, c0 = 0;
    vl_dims(c, t, &in, &out);
    if (vl_row_parallel(t) && c->tp > 1) c0 = c->tp_rank * in_local;
    else in = in_local;
    be->ops->dropout_forward(be, buf_f32(xs), buf_f32((float*)x), a->T, in_local, in, c0, c->lora_dropout,
                             vl_key(a->lora_seed, l, t));
    return xs;
}

void vit_lora_forward_input(const Backend* be, const VitConfig* c, const VitBlockW* w, VitBlockActs* b, VitActs* a,
                            int l, VitLoraTarget t, const float* x) {
    if (!vl_on(c, t) || !w->lora_A[t].p) return;
    RR_ASSERT(vit_act_bytes(c) == 4 && "the tower's LoRA runs on f32-word activations");
    int T = a->T, r = c->lora_r, in, out;
    vl_local_dims(c, t, &in, &out);
    float* u = b->lora_u[t];
    const float* xd = vl_dropped(be, c, a, l, t, x, a->lora_xd, in);
    be->ops->linear_forward(be, buf_f32(u), buf_f32((float*)xd), w->lora_A[t], buf_none(), T, in, r);
    be->ops->scale(be, u, c->lora_scale, (size_t)T * r);
    if (vl_row_parallel(t) && c->tp > 1) (void)c->tp_reduce(c->tp_ctx, u, (size_t)T * r); /* A x's column shares */
}

void vit_lora_forward(const Backend* be, const VitConfig* c, const VitBlockW* w, VitBlockActs* b, VitActs* a, int l,
                      VitLoraTarget t, const float* x, float* y) {
    if (!vl_on(c, t) || !w->lora_A[t].p || a->T == 0) return;
    vit_lora_forward_input(be, c, w, b, a, l, t, x);
    if (vl_row_parallel(t) && c->tp > 1 && c->tp_rank != 0) return; /* B u added once, before the block's sum */
    int T = a->T, r = c->lora_r, in, out;
    vl_local_dims(c, t, &in, &out);
    be->ops->linear_forward(be, buf_f32(a->lora_z), buf_f32(b->lora_u[t]), w->lora_B[t], buf_none(), T, r, out);
    if (vl_qkv(t)) /* its columns of qkv: rows 3n + t of the (3 T, out) view */
        be->ops->rows_gather_backward(be, y, a->lora_z, a->lora_cols + (size_t)t * a->max_T, NULL, T, 1, out);
    else
        be->ops->add_forward(be, buf_f32(y), buf_f32(y), buf_f32(a->lora_z), (size_t)T * out);
}

/* The base output's gradient of t: dy itself, or q's / k's / v's columns of dqkv gathered into a->lora_dy. */
static const float* vl_dy(const Backend* be, const VitActs* a, VitLoraTarget t, const float* dy, int out) {
    if (!vl_qkv(t)) return dy;
    be->dev->memset0(be, a->lora_dy, (size_t)a->T * out * sizeof(float));
    be->ops->rows_gather_forward(be, buf_f32(a->lora_dy), a->lora_cols + (size_t)t * a->max_T, NULL, buf_f32((float*)dy),
                                 a->T, 1, out);
    return a->lora_dy;
}

void vit_lora_backward_input(const Backend* be, const VitConfig* c, const VitBlockW* w, const VitBlockActs* b,
                             VitBlockGrads* g, VitActs* a, int l, VitLoraTarget t, const float* x, const float* dy,
                             float* dx) {
    if (!vl_on(c, t) || !w->lora_A[t].p || a->T == 0) return;
    int T = a->T, r = c->lora_r, in, out;
    vl_local_dims(c, t, &in, &out);
    float* du = g->lora_du[t];
    const float* dyt = vl_dy(be, a, t, dy, out);
    be->dev->memset0(be, du, (size_t)T * r * sizeof(float));
    be->ops->linear_backward(be, buf_f32(du), NULL, NULL, buf_f32(dyt), NULL, buf_f32(b->lora_u[t]), w->lora_B[t], T, r, out, 0);
    be->ops->scale(be, du, c->lora_scale, (size_t)T * r);
    if (!vl_row_parallel(t) && c->tp > 1) (void)c->tp_reduce(c->tp_ctx, du, (size_t)T * r); /* B's row shares */
    if (c->lora_dropout > 0 && a->lora_seed != 0) {
        int gin, gout, c0 = 0;
        vl_dims(c, t, &gin, &gout);
        if (vl_row_parallel(t) && c->tp > 1) c0 = c->tp_rank * in;
        else gin = in;
        be->dev->memset0(be, a->lora_dx, (size_t)T * in * sizeof(float));
        be->ops->linear_backward(be, buf_f32(a->lora_dx), NULL, NULL, buf_f32(du), NULL, buf_f32((float*)x), w->lora_A[t], T, in, r, 0);
        be->ops->dropout_backward(be, dx, a->lora_dx, T, in, gin, c0, c->lora_dropout, vl_key(a->lora_seed, l, t));
    } else {
        be->ops->linear_backward(be, buf_f32(dx), NULL, NULL, buf_f32(du), NULL, buf_f32((float*)x), w->lora_A[t], T, in, r, 0);
    }
}

void vit_lora_backward_weight(const Backend* be, const VitConfig* c, const VitBlockW* w, const VitBlockW* dw,
                              const VitBlockActs* b, const VitBlockGrads* g, const VitActs* a, int l, VitLoraTarget t,
                              const float* x, const float* dy) {
    if (!vl_on(c, t) || !w->lora_A[t].p || a->T == 0) return;
    int T = a->T, r = c->lora_r, in, out;
    vl_local_dims(c, t, &in, &out);
    if (dw->lora_B[t].p) { /* every TP rank: u and dy are whole where B is replicated */
        const float* dyt = vl_dy(be, a, t, dy, out);
        be->ops->linear_backward(be, buf_none(), buf_f32p(dw->lora_B[t]), NULL, buf_f32(dyt), NULL, buf_f32(b->lora_u[t]), w->lora_B[t], T, r, out, 0);
    }
    if (dw->lora_A[t].p) {
        const float* xd = vl_dropped(be, c, a, l, t, x, a->lora_xd, in);
        be->ops->linear_backward(be, buf_none(), buf_f32p(dw->lora_A[t]), NULL, buf_f32(g->lora_du[t]), NULL, buf_f32((float*)xd), w->lora_A[t], T,
                                 in, r, 0);
    }
}
