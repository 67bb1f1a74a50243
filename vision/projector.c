/* projector.c — LLaVA-1.5's `mlp2x_gelu` projector: Linear(Dv, Dt) + GELU(tanh) + Linear(Dt, Dt),
 * with biases, applied to every patch row of the vision output (names in vision.h).
 * Tensor parallel (VitConfig.tp > 1): projector.0 column-parallel (rows [t Dt/T, (t+1) Dt/T) and its
 * bias), projector.2 row-parallel (those columns) with the TP all-reduce of its output, its bias added
 * by TP rank 0 only (once in the sum) and its gradient whole on every rank; backward the input's
 * partial gradient is all-reduced. */
#include "vision/vision.h"

static int proj_local(const VitConfig* c) { return c->tp > 1 ? c->Dt / c->tp : c->Dt; }
static void proj_tp_sum(const VitConfig* c, float* buf, size_t n) {
    if (c->tp > 1) (void)c->tp_reduce(c->tp_ctx, buf, n);
}

void projector_params_add(ParamTable* pt, const VitConfig* c) {
    int64_t w0[2] = {c->Dt, c->D}, b[1] = {c->Dt}, w2[2] = {c->Dt, c->Dt};
    /* The second linear keeps the plain std: it does not feed a residual stream (see vision.h). */
    params_add(pt, "projector.0.weight", 2, w0, PARAM_INIT_NORMAL, c->init_std, 1);
    params_add(pt, "projector.0.bias", 1, b, PARAM_INIT_ZEROS, 0, 0);
    params_add(pt, "projector.2.weight", 2, w2, PARAM_INIT_NORMAL, c->init_std, 1);
    params_add(pt, "projector.2.bias", 1, b, PARAM_INIT_ZEROS, 0, 0);
    params_mark_gemm_bias(pt, "projector.0.bias"); /* the GEMMs' biases: 2-byte where weight_dtype is */
    params_mark_gemm_bias(pt, "projector.2.bias");
}

/* the compute copy typed by its storage, or the f32 gradient */
static Buf proj_ptr(const ParamTable* pt, const char* name, int grads) {
    int i = params_find(pt, name);
    if (i < 0) rr_die("internal: parameter '%s' is not registered in this stage", name);
    return grads ? buf_f32(params_grad(pt, i)) : params_weights_buf(pt, i);
}

void projector_weights_point(ProjW* w, const ParamTable* pt, int grads) {
    w->fc1_w = proj_ptr(pt, "projector.0.weight", grads);
    w->fc1_b = proj_ptr(pt, "projector.0.bias", grads);
    w->fc2_w = proj_ptr(pt, "projector.2.weight", grads);
    w->fc2_b = proj_ptr(pt, "projector.2.bias", grads);
}

void projector_acts_layout_fwd(ProjActs* a, Arena* ar, const VitConfig* c, int max_N) {
    size_t NT = (size_t)max_N * c->Dt, NL = (size_t)max_N * proj_local(c), ab = (size_t)vit_act_bytes(c);
    /* activations in the tower's storage (VitConfig.act_bytes) */
    DType adt = ab == 2 ? DTYPE_BF16 : DTYPE_F32;
    a->fc1 = buf_of(arena_alloc(ar, NL * ab), adt);
    a->gelu = buf_of(arena_alloc(ar, NL * ab), adt);
    a->out = buf_of(arena_alloc(ar, NT * ab), adt);
    a->tp_sum = c->tp > 1 && ab == 2 ? arena_alloc_f32(ar, NT) : NULL;
}

void projector_acts_layout_bwd(ProjActs* a, Arena* ar, const VitConfig* c, int max_N) {
    size_t NT = (size_t)max_N * c->Dt, NL = (size_t)max_N * proj_local(c), ab = (size_t)vit_act_bytes(c);
    /* gradients f32 words, and their 2-byte copies with 2-byte activations */
    a->dout = arena_alloc_f32(ar, NT);
    a->dfc1 = arena_alloc_f32(ar, NL);
    a->dgelu = arena_alloc_f32(ar, NL);
    a->dvin = arena_alloc_f32(ar, (size_t)max_N * c->D);
    a->dout16 = ab == 2 ? arena_alloc(ar, NT * 2) : NULL;
    a->dfc1_16 = ab == 2 ? arena_alloc(ar, NL * 2) : NULL;
}

void projector_acts_layout(ProjActs* a, Arena* ar, const VitConfig* c, int max_N) {
    projector_acts_layout_fwd(a, ar, c, max_N);
    projector_acts_layout_bwd(a, ar, c, max_N);
}

void projector_forward(const Backend* be, const VitConfig* c, const ProjW* w, ProjActs* a, Buf vin, int N) {
    a->vin = vin;
    if (N == 0) return;
    int L = proj_local(c);
    if (c->proj_act != ACT_GELU_TANH) { /* Hugging Face's exact GELU (model.projector_act = gelu) */
        be->ops->linear_forward(be, a->fc1, vin, w->fc1_w, w->fc1_b, N, c->D, L);
        be->ops->act_forward(be, a->gelu, a->fc1, (size_t)N * L, c->proj_act);
    } else {
        be->ops->linear_gelu_forward(be, a->gelu, a->fc1, vin, w->fc1_w, w->fc1_b, N, c->D, L); /* fused where it can be */
    }
    be->ops->linear_forward(be, a->out, a->gelu, w->fc2_w, c->tp > 1 && c->tp_rank != 0 ? buf_none() : w->fc2_b, N, L, c->Dt);
    size_t n = (size_t)N * c->Dt;
    if (c->tp > 1 && a->out.dt == DTYPE_BF16) { /* 2-byte partials widened, summed in f32, rounded into 2 bytes */
        RR_ASSERT(a->tp_sum && be->ops->from_bf16 && be->ops->to_bf16);
        be->ops->from_bf16(be, a->tp_sum, buf_bf16p(a->out), n);
        proj_tp_sum(c, a->tp_sum, n); /* row-parallel projector.2 */
        be->ops->to_bf16(be, buf_bf16p(a->out), a->tp_sum, n);
        return;
    }
    if (c->tp > 1) proj_tp_sum(c, buf_f32p(a->out), n); /* row-parallel projector.2 */
    /* bf16 (engine.h, Precision): the summed output is a stored activation, rounded as the GEMM rounds it at
     * tp = 1 (the LM's image rows: a 2-byte residual stream holds exactly these values) */
    if (c->tp > 1 && be->precision == PRECISION_BF16) be->ops->round_bf16(be, buf_f32p(a->out), buf_f32p(a->out), n);
}

/* Each GEMM reads its output gradient as it was stored (buf_grad: the 2-byte copy with 2-byte activations, ProjActs;
 * else f32 words), and each input gradient's first write is be_dinp_first's: one path for both storages. */
void projector_backward_input(const Backend* be, const VitConfig* c, const ProjW* w, ProjActs* a, int N,
                              int need_dvin) {
    if (N == 0) return;
    int L = proj_local(c);
    size_t NL = (size_t)N * L;
    Buf dout = buf_grad(a->dout, a->dout16);
    be->ops->linear_backward(be, buf_f32(a->dgelu), NULL, NULL, dout, NULL, a->gelu, w->fc2_w, N, L, c->Dt,
                             be_dinp_first(be, buf_f32(a->dgelu), dout, NL));
    be->dev->memset0(be, a->dfc1, NL * sizeof(float));
    /* with dfc1's 2-byte copy (projector.0's GEMMs read it) the activation's backward stores it in the same pass */
    if (c->proj_act != ACT_GELU_TANH || a->dfc1_16) be->ops->act_backward(be, a->dfc1, a->dfc1_16, a->dgelu, a->fc1, NL, c->proj_act);
    else be->ops->gelu_backward(be, a->dfc1, a->dgelu, a->fc1, NL);
    if (!need_dvin) return; /* a frozen vision tower takes no gradient */
    Buf dfc1 = buf_grad(a->dfc1, a->dfc1_16);
    be->ops->linear_backward(be, buf_f32(a->dvin), NULL, NULL, dfc1, NULL, a->vin, w->fc1_w, N, c->D, L,
                             be_dinp_first(be, buf_f32(a->dvin), dfc1, (size_t)N * c->D));
    proj_tp_sum(c, a->dvin, (size_t)N * c->D); /* column-parallel projector.0 */
}

void projector_backward_weight(const Backend* be, const VitConfig* c, const ProjW* w, const ProjW* g, ProjActs* a,
                               int N) {
    if (N == 0) return;
    int L = proj_local(c);
    /* the output gradients as B read them; the biases sum the f32 ones */
    be->ops->linear_backward(be, buf_none(), buf_f32p(g->fc2_w), buf_f32p(g->fc2_b), buf_grad(a->dout, a->dout16),
                             buf_grad32(a->dout, a->dout16), a->gelu, w->fc2_w, N, L, c->Dt, 0);
    be->ops->linear_backward(be, buf_none(), buf_f32p(g->fc1_w), buf_f32p(g->fc1_b), buf_grad(a->dfc1, a->dfc1_16),
                             buf_grad32(a->dfc1, a->dfc1_16), a->vin, w->fc1_w, N, c->D, L, 0);
}
