/* adamw.c — the CPU backend's AdamW and sum of squares (the global gradient norm), and the
 * learning-rate schedule.
 *
 * adamw_update follows PyTorch's torch.optim.AdamW (single-tensor path, amsgrad off) operation by
 * operation, so a step matches it to f32 rounding (tests/engine/adamw_ref.py checks this):
 *   p *= 1 - lr * wd                        (only when decay: 2-D weights)
 *   m = beta1 m + (1 - beta1) g
 *   v = beta2 v + (1 - beta2) g^2
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * The bias corrections and 1 - beta are computed in double, as Python floats are in PyTorch. The
 * config holds floats, so beta1 = 0.9 means float(0.9): PyTorch given that same value agrees to a
 * few ulps; PyTorch given the double 0.9 differs in (1 - beta1) by 2.4e-7 relative. */
#include <math.h>
#include <stdlib.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"

/* backend_cpu.ops->adamw_update. The step's scalars and the per-element math are kernel_math.h's
 * rr_adamw_step / rr_adamw_element, which the CUDA backend's kernel calls too. */
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, const AdamWConfig* cfg, int t,
                  int decay) {
    RR_ASSERT(t >= 1);
    RrAdamwStep c = rr_adamw_step(cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, t, decay);
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) rr_adamw_element(&param[i], &m[i], &v[i], grad[i], &c);
}

/* backend_cpu.ops->sum_squares: the chunks of rr_sumsq_chunk_range summed in parallel, each in index
 * order, then the chunk sums in order, so the result does not depend on the thread count (an OpenMP
 * reduction's order does) — and a bit-exact resume needs the clipping factor not to. */
double sum_squares(const float* x, size_t n) {
    size_t nc = rr_sumsq_chunks(n);
    double small[RR_SUMSQ_SMALL_CHUNKS];
    double* part = nc <= RR_SUMSQ_SMALL_CHUNKS ? small : mallocCheck(nc * sizeof(double));
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t c = 0; c < nc; c++) {
        size_t i0, i1;
        rr_sumsq_chunk_range(n, c, &i0, &i1);
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += rr_sumsq_term(x[i]);
        part[c] = s;
    }
    double s = rr_sumsq_partials(part, nc);
    if (part != small) free(part);
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

float lr_schedule_kind(LrSchedule kind, int step, int warmup, int total_steps, float max_lr, float min_lr) {
    if (kind == LR_SCHEDULE_COSINE || step < warmup) return lr_schedule(step, warmup, total_steps, max_lr, min_lr);
    if (kind == LR_SCHEDULE_CONSTANT) return max_lr;
    double p = total_steps > warmup ? (double)(step - warmup) / (double)(total_steps - warmup) : 1.0;
    if (p < 0.0) p = 0.0;
    if (p > 1.0) p = 1.0;
    return (float)((double)max_lr + ((double)min_lr - max_lr) * p);
}
