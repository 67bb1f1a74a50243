/* projector.c — LLaVA-1.5's `mlp2x_gelu` projector: Linear(Dv, Dt) + GELU(tanh) + Linear(Dt, Dt),
 * with biases, applied to every patch row of the vision output (names in vision.h). */
#include "vision/vision.h"

void projector_params_add(ParamTable* pt, const VitConfig* c) {
    int64_t w0[2] = {c->Dt, c->D}, b[1] = {c->Dt}, w2[2] = {c->Dt, c->Dt};
    /* The second linear keeps the plain std: it does not feed a residual stream (see vision.h). */
    params_add(pt, "projector.0.weight", 2, w0, PARAM_INIT_NORMAL, c->init_std, 1);
    params_add(pt, "projector.0.bias", 1, b, PARAM_INIT_ZEROS, 0, 0);
    params_add(pt, "projector.2.weight", 2, w2, PARAM_INIT_NORMAL, c->init_std, 1);
    params_add(pt, "projector.2.bias", 1, b, PARAM_INIT_ZEROS, 0, 0);
}

static float* proj_ptr(const ParamTable* pt, const char* name, int grads) {
    int i = params_find(pt, name);
    if (i < 0) rr_die("internal: parameter '%s' is not registered in this stage", name);
    return grads ? params_grad(pt, i) : params_weights(pt, i);
}

void projector_weights_point(ProjW* w, const ParamTable* pt, int grads) {
    w->fc1_w = proj_ptr(pt, "projector.0.weight", grads);
    w->fc1_b = proj_ptr(pt, "projector.0.bias", grads);
    w->fc2_w = proj_ptr(pt, "projector.2.weight", grads);
    w->fc2_b = proj_ptr(pt, "projector.2.bias", grads);
}

void projector_acts_layout(ProjActs* a, Arena* ar, const VitConfig* c, int max_N) {
    size_t NT = (size_t)max_N * c->Dt;
    a->fc1 = arena_alloc_f32(ar, NT);
    a->gelu = arena_alloc_f32(ar, NT);
    a->out = arena_alloc_f32(ar, NT);
    a->dout = arena_alloc_f32(ar, NT);
    a->dfc1 = arena_alloc_f32(ar, NT);
    a->dgelu = arena_alloc_f32(ar, NT);
    a->dvin = arena_alloc_f32(ar, (size_t)max_N * c->D);
}

void projector_forward(const Backend* be, const VitConfig* c, const ProjW* w, ProjActs* a, const float* vin, int N) {
    a->vin = vin;
    if (N == 0) return;
    be->linear_forward(a->fc1, vin, w->fc1_w, w->fc1_b, N, c->D, c->Dt);
    be->gelu_forward(a->gelu, a->fc1, (size_t)N * c->Dt);
    be->linear_forward(a->out, a->gelu, w->fc2_w, w->fc2_b, N, c->Dt, c->Dt);
}

void projector_backward_input(const Backend* be, const VitConfig* c, const ProjW* w, ProjActs* a, int N,
                              int need_dvin) {
    if (N == 0) return;
    size_t NT = (size_t)N * c->Dt;
    be->memset0(a->dgelu, NT * sizeof(float));
    be->linear_backward(a->dgelu, NULL, NULL, a->dout, a->gelu, w->fc2_w, N, c->Dt, c->Dt);
    be->memset0(a->dfc1, NT * sizeof(float));
    be->gelu_backward(a->dfc1, a->dgelu, a->fc1, NT);
    if (!need_dvin) return; /* a frozen vision tower takes no gradient */
    be->memset0(a->dvin, (size_t)N * c->D * sizeof(float));
    be->linear_backward(a->dvin, NULL, NULL, a->dfc1, a->vin, w->fc1_w, N, c->D, c->Dt);
}

void projector_backward_weight(const Backend* be, const VitConfig* c, const ProjW* w, const ProjW* g, ProjActs* a,
                               int N) {
    if (N == 0) return;
    be->linear_backward(NULL, g->fc2_w, g->fc2_b, a->dout, a->gelu, w->fc2_w, N, c->Dt, c->Dt);
    be->linear_backward(NULL, g->fc1_w, g->fc1_b, a->dfc1, a->vin, w->fc1_w, N, c->D, c->Dt);
}
