/* scale.c — x *= s elementwise (the trainer's gradient clipping; moved here from runtime/train/trainer.c
 * so that it runs where the gradients live). One IEEE multiply per value: the same bits on every
 * backend and thread count. */
#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

void cpu_scale(const Backend* be, float* x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}
