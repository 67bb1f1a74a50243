/* optim.c — the optimiser step of one stage (see optim.h). */
#include "runtime/train/optim.h"

#include "engine/engine.h"
#include "engine/util.h"

#include <stdlib.h>
#include <string.h>

double optim_grad_sum_squares(const Stage* st) {
    RR_ASSERT(st->params.be == st->be);
    RR_ASSERT(st->params.grad && "a gradient norm of a forward-only table (params_forward_only)");
    const ParamTable* pt = &st->params;
    int copies = 0;
    for (int i = 0; i < pt->n; i++) copies += pt->specs[i].shared_copy;
    if (st->tp_rank == 0 && !copies) return st->be->ops->sum_squares(st->be, pt->grad, pt->gtotal); /* frozen tensors have no gradient */
    /* another TP rank: its slices only; a replicated tensor (equal on every TP rank) counts once, on TP rank 0;
     * the tied embedding's copy on the last stage (equal to the first stage's) counts once, there */
    double ss = 0.0;
    const float** xs = mallocCheck((pt->n ? pt->n : 1) * sizeof *xs);
    size_t* ns = mallocCheck((pt->n ? pt->n : 1) * sizeof *ns);
    int n = 0;
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (!s->frozen && !s->shared_copy && (st->tp_rank == 0 || params_is_slice(s)))
            xs[n] = pt->grad + s->goff, ns[n++] = s->numel;
    }
    if (st->be->ops->sum_squares_multi) { /* one pass (one launch on CUDA), the loop's bits */
        ss = st->be->ops->sum_squares_multi(st->be, xs, ns, n);
    } else {
        for (int k = 0; k < n; k++) ss += st->be->ops->sum_squares(st->be, xs[k], ns[k]);
    }
    free(xs);
    free(ns);
    return ss;
}

float optim_clip_coef(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    double c = max_norm / (norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

void optim_step(Stage* st, const Recipe* r, float lr, int t, float clip) {
    const Backend* be = st->be;
    ParamTable* pt = &st->params;
    RR_ASSERT(pt->be == be);
    RR_ASSERT(pt->grad && "an optimiser step on a forward-only table (params_forward_only)");
    if (clip < 1.0f) be->ops->scale(be, pt->grad, clip, pt->gtotal);
    AdamWConfig cfg = {lr, (float)r->beta1, (float)r->beta2, (float)r->eps, (float)r->weight_decay};
    /* optim.projector_lr: the projector's parameters on the same schedule, scaled (LLaVA's mm_projector_lr) */
    AdamWConfig pcfg = cfg;
    if (r->projector_lr > 0 && r->lr > 0) pcfg.lr = (float)((double)lr * r->projector_lr / r->lr);
    if (be->ops->adamw_multi) { /* every trainable tensor in one pass (one launch on CUDA), the same bits */
        AdamWConfig cfgs[2] = {cfg, pcfg};
        AdamwTensor* ts = mallocCheck((pt->n ? pt->n : 1) * sizeof *ts);
        int n = 0;
        for (int i = 0; i < pt->n; i++) {
            const ParamSpec* s = &pt->specs[i];
            if (s->frozen) continue;
            Buf none = {0};
            ts[n++] = (AdamwTensor){params_data(pt, i), pt->grad + s->goff, pt->m + s->goff, pt->v + s->goff, s->numel,
                                    s->decay, !strncmp(s->name, "projector.", 10),
                                    pt->compute ? params_compute_buf(pt, i) : none};
        }
        be->ops->adamw_multi(be, ts, n, cfgs, 2, t);
        free(ts);
        return;
    }
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (s->frozen) continue; /* train.freeze: no state, no update, no weight decay */
        int proj = !strncmp(s->name, "projector.", 10);
        const AdamWConfig* c = proj ? &pcfg : &cfg;
        if (pt->compute) /* bf16: the compute copy written by the update itself, one pass */
            be->ops->adamw_update_copy(be, params_data(pt, i), pt->grad + s->goff, pt->m + s->goff, pt->v + s->goff,
                                  s->numel, c, t, s->decay, params_compute_buf(pt, i));
        else
            be->ops->adamw_update(be, params_data(pt, i), pt->grad + s->goff, pt->m + s->goff, pt->v + s->goff, s->numel,
                             c, t, s->decay);
    }
}
