/* adamw.c — AdamW, the global-norm helper and the learning-rate schedule.
 *
 * adamw_update follows PyTorch's torch.optim.AdamW (single-tensor path, amsgrad off) operation by
 * operation, so a step matches it to f32 rounding (tests/adamw_ref.py checks this):
 *   p *= 1 - lr * wd                        (only when decay: 2-D weights)
 *   m = beta1 m + (1 - beta1) g
 *   v = beta2 v + (1 - beta2) g^2
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * The bias corrections and 1 - beta are computed in double, as Python floats are in PyTorch. The
 * config holds floats, so beta1 = 0.9 means float(0.9): PyTorch given that same value agrees to a
 * few ulps; PyTorch given the double 0.9 differs in (1 - beta1) by 2.4e-7 relative. */
#include <math.h>

#include "engine/engine.h"

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, const AdamWConfig* cfg, int t,
                  int decay) {
    RR_ASSERT(t >= 1);
    double bc1 = 1.0 - pow(cfg->beta1, t);
    double bc2 = 1.0 - pow(cfg->beta2, t);
    float step_size = (float)(cfg->lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float keep = decay ? (float)(1.0 - (double)cfg->lr * cfg->weight_decay) : 1.0f;
    float b1 = cfg->beta1, b2 = cfg->beta2, eps = cfg->eps;
    /* 1 - beta in double then rounded, as PyTorch does with its Python-float betas */
    float one_minus_b1 = (float)(1.0 - (double)b1), one_minus_b2 = (float)(1.0 - (double)b2);
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        float mi = b1 * m[i] + one_minus_b1 * g;
        float vi = b2 * v[i] + one_minus_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = param[i] * keep - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
}

/* A fixed number of chunks summed in parallel, then the chunk sums in order: the result does not
 * depend on the thread count (an OpenMP reduction's order does). */
double sum_squares(const float* x, size_t n) {
    enum { CHUNKS = 64 };
    double part[CHUNKS];
#pragma omp parallel for if (n > 65536)
    for (int c = 0; c < CHUNKS; c++) {
        size_t i0 = n * c / CHUNKS, i1 = n * (c + 1) / CHUNKS;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        part[c] = s;
    }
    double s = 0.0;
    for (int c = 0; c < CHUNKS; c++) s += part[c];
    return s;
}

/* Exactly:
 *   step < warmup:  lr = max_lr * (step + 1) / warmup
 *   otherwise:      p = (step - warmup) / (total_steps - warmup), clamped to [0, 1] (p = 1 when
 *                   total_steps <= warmup), lr = min_lr + 0.5 (max_lr - min_lr) (1 + cos(pi p))
 * so the last warm-up step and the first decay step both give max_lr, and step >= total_steps gives
 * min_lr. Computed in double. */
float lr_schedule(int step, int warmup, int total_steps, float max_lr, float min_lr) {
    if (step < warmup) return (float)((double)max_lr * (step + 1) / warmup);
    double p = total_steps > warmup ? (double)(step - warmup) / (double)(total_steps - warmup) : 1.0;
    if (p < 0.0) p = 0.0;
    if (p > 1.0) p = 1.0;
    return (float)(min_lr + 0.5 * ((double)max_lr - min_lr) * (1.0 + cos(M_PI * p)));
}
