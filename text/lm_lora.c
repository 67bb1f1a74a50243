/* lm_lora.c — LoRA on the LM's linears (docs/training.md "LoRA"), PEFT's math:
 *
 *   y = W x + s B A dropout(x),  s = lora_alpha / r,  A (r, in) ~ U(-1/sqrt(in), 1/sqrt(in)),  B (out, r) = 0
 *
 * composed from BackendOps (linear_forward / linear_backward, scale, add_forward, dropout_*), so every backend
 * runs it. Forward: u = s A drop(x) (T, r), kept; z = B u; y += z. With du = s B^T dy:
 *   dB += dy^T u,  dA += du^T drop(x),  dx += drop^T(A^T du)
 * (drop^T: the same mask and 1/(1-p) on the gradient). The dropout mask is redrawn from its key where needed, never
 * stored. Tensor parallelism (docs/parallel.md "Tensor parallelism"): a column-parallel base (q, k, v, gate, up;
 * rows split) has B split like it (its rows) and A whole: u is whole on every rank, du is a partial sum over the
 * ranks' rows of B and is all-reduced (T x r), after which dA and dx are whole on every rank (dx is added after
 * the block's own all-reduce of the input gradient). A row-parallel base (o, down; columns split) has A split
 * like it (its columns) and B whole: u is a partial sum, all-reduced (T x r), and B u is added by TP rank 0 only,
 * before the block's all-reduce of the partial outputs; du, dA and dx are then local. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "text/lm_lora.h"

static const char* const LORA_NAME[LM_LORA_N] = {"q", "k", "v", "o", "gate", "up", "down"};
static const char* const LORA_MODULE[LM_LORA_N] = {"attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.up", "mlp.down"};

const char* lm_lora_target_name(LmLoraTarget t) { return LORA_NAME[t]; }
const char* lm_lora_target_module(LmLoraTarget t) { return LORA_MODULE[t]; }

static int lora_row_parallel(LmLoraTarget t) { return t == LM_LORA_O || t == LM_LORA_DOWN; }

int lm_lora_targets_parse(const char* list, unsigned* bits, char* err, size_t err_len) {
    *bits = 0;
    const char* p = list;
    int tower = 0;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        size_t n = strcspn(p, ", ");
        if (n > 7 && !strncmp(p, "vision.", 7)) { /* the tower's (vision/vit_lora.c parses them) */
            tower = 1;
            p += n;
            continue;
        }
        int found = 0;
        if (n == 3 && !strncmp(p, "all", 3)) {
            *bits |= (1u << LM_LORA_N) - 1;
            found = 1;
        }
        for (int t = 0; t < LM_LORA_N && !found; t++)
            if (strlen(LORA_NAME[t]) == n && !strncmp(p, LORA_NAME[t], n)) *bits |= 1u << t, found = 1;
        if (!found) {
            snprintf(err, err_len, "'%.*s' is not an LM linear; allowed: q, k, v, o, gate, up, down (comma-separated) or all, "
                     "and the tower's vision.q, vision.k, vision.v, vision.out, vision.fc1, vision.fc2 or vision.all", (int)n, p);
            return -1;
        }
        p += n;
    }
    if (!*bits && !tower) {
        snprintf(err, err_len, "no target: name at least one of q, k, v, o, gate, up, down (or all), or of the tower's "
                 "vision.q, vision.k, vision.v, vision.out, vision.fc1, vision.fc2");
        return -1;
    }
    return 0;
}

/* The whole (unsplit) base's in and out widths of target t. */
static void lora_dims(const LmConfig* c, LmLoraTarget t, int* in, int* out) {
    int Dkv = lm_kv_heads(c) * (c->D / c->H);
    switch (t) {
    case LM_LORA_Q: *in = c->D, *out = c->D; break;
    case LM_LORA_K:
    case LM_LORA_V: *in = c->D, *out = Dkv; break;
    case LM_LORA_O: *in = c->D, *out = c->D; break;
    case LM_LORA_GATE:
    case LM_LORA_UP: *in = c->D, *out = c->F; break;
    default: *in = c->F, *out = c->D; break;
    }
}

/* This TP rank's in and out widths of target t (the base's split). */
static void lora_local_dims(const LmConfig* c, LmLoraTarget t, int* in, int* out) {
    int T = c->tp > 1 ? c->tp : 1;
    lora_dims(c, t, in, out);
    if (lora_row_parallel(t)) *in /= T;
    else *out /= T;
}

void lm_lora_params_add(ParamTable* pt, const LmConfig* c, int l) {
    if (c->lora_r <= 0) return;
    char n[128];
    for (int t = 0; t < LM_LORA_N; t++) {
        if (!(c->lora_targets >> t & 1)) continue;
        int in, out;
        lora_dims(c, (LmLoraTarget)t, &in, &out);
        int64_t sa[2] = {c->lora_r, in}, sb[2] = {out, c->lora_r};
        snprintf(n, sizeof n, "text.blocks.%d.%s.lora_A.weight", l, LORA_MODULE[t]);
        params_add(pt, n, 2, sa, PARAM_INIT_UNIFORM, 1.0f / sqrtf((float)in), 1);
        snprintf(n, sizeof n, "text.blocks.%d.%s.lora_B.weight", l, LORA_MODULE[t]);
        params_add(pt, n, 2, sb, PARAM_INIT_ZEROS, 0, 1);
    }
}

int lm_lora_is_adapter(const char* name) {
    size_t n = strlen(name);
    return n > 14 && (!strcmp(name + n - 14, ".lora_A.weight") || !strcmp(name + n - 14, ".lora_B.weight"));
}

void lm_lora_weights_point(LmBlockW* w, const ParamTable* pt, int l, int grads) {
    char n[128];
    w->layer = l;
    for (int t = 0; t < LM_LORA_N; t++) {
        w->lora_A[t] = w->lora_B[t] = buf_none();
        snprintf(n, sizeof n, "text.blocks.%d.%s.lora_A.weight", l, LORA_MODULE[t]);
        int ia = params_find(pt, n);
        snprintf(n, sizeof n, "text.blocks.%d.%s.lora_B.weight", l, LORA_MODULE[t]);
        int ib = params_find(pt, n);
        if (ia < 0 || ib < 0) continue;
        w->lora_A[t] = grads ? buf_f32(params_grad(pt, ia)) : params_weights_buf(pt, ia);
        w->lora_B[t] = grads ? buf_f32(params_grad(pt, ib)) : params_weights_buf(pt, ib);
    }
}

void lm_lora_acts_layout(LmBlockActs* a, Arena* ar, const LmConfig* c, int max_T) {
    for (int t = 0; t < LM_LORA_N; t++)
        a->lora_u[t] = c->lora_r > 0 && (c->lora_targets >> t & 1) ? arena_alloc_f32(ar, (size_t)max_T * c->lora_r) : NULL;
}

void lm_lora_grads_layout(LmBlockGrads* g, Arena* ar, const LmConfig* c, int max_T) {
    for (int t = 0; t < LM_LORA_N; t++)
        g->lora_du[t] = c->lora_r > 0 && (c->lora_targets >> t & 1) ? arena_alloc_f32(ar, (size_t)max_T * c->lora_r) : NULL;
    g->lora_x = NULL;
}

void lm_lora_scratch_layout(LmScratch* s, Arena* ar, const LmConfig* c, int max_T) {
    s->lora_x = s->lora_z = s->lora_dx = NULL;
    if (c->lora_r <= 0) return;
    size_t w = (size_t)(c->D > c->F ? c->D : c->F) * (size_t)max_T;
    s->lora_x = c->lora_dropout > 0 ? arena_alloc_f32(ar, w) : NULL;
    s->lora_z = arena_alloc_f32(ar, w);
    s->lora_dx = c->lora_dropout > 0 ? arena_alloc_f32(ar, w) : NULL;
}

static uint64_t lora_mix(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t lm_lora_seed(uint64_t model_seed, int64_t step, int mb_index) {
    uint64_t k = lora_mix(model_seed ^ lora_mix(((uint64_t)step << 24) ^ (uint64_t)(uint32_t)mb_index));
    return k ? k : 1;
}

/* The mask key of target t in block l under the microbatch's key. */
static uint64_t lora_key(uint64_t seed, int l, LmLoraTarget t) { return lora_mix(seed ^ lora_mix((uint64_t)l * 8 + t)); }

/* The dropped-out input of target t (x itself without dropout): into s's lora_x buffer xs. */
static Buf lora_dropped(const Backend* be, const LmConfig* c, const LmSeq* seq, int l, LmLoraTarget t, Buf x, float* xs,
                        int in_local) {
    if (!(c->lora_dropout > 0) || seq->lora_seed == 0) return x;
    RR_ASSERT(xs && be->ops->dropout_forward);
    int in, out, c0 = 0;
    lora_dims(c, t, &in, &out);
    if (lora_row_parallel(t) && c->tp > 1) c0 = c->tp_rank * in_local;
    else in = in_local;
    be->ops->dropout_forward(be, buf_f32(xs), x, seq->T, in_local, in, c0, c->lora_dropout, lora_key(seq->lora_seed, l, t));
    return buf_f32(xs);
}

/* u = s A drop(x) into a->lora_u[t] (summed over the TP ranks for a row-parallel base); 0 when t has no adapter */
int lm_lora_forward_input(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* a, LmScratch* s,
                          const LmSeq* seq, LmLoraTarget t, Buf x) {
    if (!w->lora_A[t].p) return 0;
    RR_ASSERT(x.dt == DTYPE_F32 && "LoRA runs on f32-word activations");
    int T = seq->T, r = c->lora_r, in, out;
    lora_local_dims(c, t, &in, &out);
    float* u = a->lora_u[t];
    Buf xd = lora_dropped(be, c, seq, w->layer, t, x, s->lora_x, in);
    be->ops->linear_forward(be, buf_f32(u), xd, w->lora_A[t], buf_none(), T, in, r);
    be->ops->scale(be, u, c->lora_scale, (size_t)T * r);
    if (lora_row_parallel(t) && c->tp > 1) (void)c->tp_reduce(c->tp_ctx, u, (size_t)T * r); /* A x's column shares summed */
    return 1;
}

void lm_lora_forward(const Backend* be, const LmConfig* c, const LmBlockW* w, LmBlockActs* a, LmScratch* s,
                     const LmSeq* seq, LmLoraTarget t, Buf x, Buf y) {
    if (!lm_lora_forward_input(be, c, w, a, s, seq, t, x)) return;
    if (lora_row_parallel(t) && c->tp > 1 && c->tp_rank != 0) return; /* B u added once, before the block's sum */
    int T = seq->T, r = c->lora_r, in, out;
    lora_local_dims(c, t, &in, &out);
    be->ops->linear_forward(be, buf_f32(s->lora_z), buf_f32(a->lora_u[t]), w->lora_B[t], buf_none(), T, r, out);
    be->ops->add_forward(be, y, y, buf_f32(s->lora_z), (size_t)T * out);
}

void lm_lora_backward_input(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockActs* a,
                            LmBlockGrads* g, LmScratch* s, const LmSeq* seq, LmLoraTarget t, Buf x, const float* dy,
                            float* dx) {
    if (!w->lora_A[t].p) return;
    int T = seq->T, r = c->lora_r, in, out;
    lora_local_dims(c, t, &in, &out);
    float* du = g->lora_du[t];
    be->dev->memset0(be, du, (size_t)T * r * sizeof(float));
    be->ops->linear_backward(be, buf_f32(du), NULL, NULL, buf_f32(dy), NULL, buf_f32(a->lora_u[t]), w->lora_B[t], T, r, out, 0);
    be->ops->scale(be, du, c->lora_scale, (size_t)T * r);
    if (!lora_row_parallel(t) && c->tp > 1) (void)c->tp_reduce(c->tp_ctx, du, (size_t)T * r); /* B's row shares */
    if (c->lora_dropout > 0 && seq->lora_seed != 0) {
        int gin, gout, c0 = 0;
        lora_dims(c, t, &gin, &gout);
        if (lora_row_parallel(t) && c->tp > 1) c0 = c->tp_rank * in;
        else gin = in;
        be->dev->memset0(be, s->lora_dx, (size_t)T * in * sizeof(float));
        be->ops->linear_backward(be, buf_f32(s->lora_dx), NULL, NULL, buf_f32(du), NULL, x, w->lora_A[t], T, in, r, 0);
        be->ops->dropout_backward(be, dx, s->lora_dx, T, in, gin, c0, c->lora_dropout, lora_key(seq->lora_seed, w->layer, t));
    } else {
        be->ops->linear_backward(be, buf_f32(dx), NULL, NULL, buf_f32(du), NULL, x, w->lora_A[t], T, in, r, 0);
    }
}

void lm_lora_backward_weight(const Backend* be, const LmConfig* c, const LmBlockW* w, const LmBlockW* dw,
                             const LmBlockActs* a, const LmBlockGrads* g, const LmSeq* seq, LmLoraTarget t, Buf x,
                             const float* dy) {
    if (!w->lora_A[t].p) return;
    int T = seq->T, r = c->lora_r, in, out;
    lora_local_dims(c, t, &in, &out);
    if (dw->lora_B[t].p) /* every TP rank: u and dy are whole where B is replicated */
        be->ops->linear_backward(be, buf_none(), buf_f32p(dw->lora_B[t]), NULL, buf_f32(dy), NULL, buf_f32(a->lora_u[t]), w->lora_B[t], T, r, out, 0);
    if (dw->lora_A[t].p) {
        Buf xd = lora_dropped(be, c, seq, w->layer, t, x, g->lora_x, in);
        be->ops->linear_backward(be, buf_none(), buf_f32p(dw->lora_A[t]), NULL, buf_f32(g->lora_du[t]), NULL, xd, w->lora_A[t], T, in, r, 0);
    }
}
