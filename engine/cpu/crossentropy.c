/* crossentropy.c — softmax cross-entropy over V classes with ignore index -100, SUM reduction.
 *
 * The caller divides by the number of supervised targets in the whole step (docs/model.md "Sequence assembly and the loss") by
 * passing scale = 1 / count to the backward, so the loss of a step does not depend on how samples
 * are split into microbatches. lse (N) is saved for every row, supervised or not.
 * Both passes are loops of exponentials over (N, V): cpu_expf (fastmath.h) lets them vectorise. */
/* FP exceptions are never inspected, so GCC may if-convert and vectorise cpu_expf's clamps (it
 * refuses under the default -ftrapping-math); results do not change. */
#pragma GCC optimize("no-trapping-math")
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/fastmath.h"
#include "engine/engine.h"

#define CE_IGNORE_INDEX (-100)

static void crossentropy_check_target(int t, int n, int V) {
    if (t != CE_IGNORE_INDEX && (t < 0 || t >= V))
        rr_die("cross-entropy: target %d of row %d is outside [0, %d) and is not the ignore index -100", t, n, V);
}

void cpu_crossentropy_forward(const Backend* be, float* loss_sum, float* lse, const float* logits, const int* targets, int N, int V) {
    for (int n = 0; n < N; n++) crossentropy_check_target(targets[n], n, V);
#pragma omp parallel for if ((size_t)N * V > 16384)
    for (int n = 0; n < N; n++) {
        const float* z = logits + (size_t)n * V;
        float zmax = -INFINITY;
#pragma omp simd reduction(max : zmax)
        for (int v = 0; v < V; v++) zmax = z[v] > zmax ? z[v] : zmax;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) sum += cpu_expf(z[v] - zmax);
        lse[n] = (float)(zmax + log(sum));
    }
    /* the sum over rows in row order, so the loss does not depend on the thread count */
    double total = 0.0;
    for (int n = 0; n < N; n++)
        if (targets[n] != CE_IGNORE_INDEX) total += (double)lse[n] - logits[(size_t)n * V + targets[n]];
    *loss_sum = (float)total;
}

void cpu_crossentropy_backward(const Backend* be, float* dlogits, const float* logits, const float* lse, const int* targets, float scale,
                               int N, int V) {
#pragma omp parallel for if ((size_t)N * V > 16384)
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (t == CE_IGNORE_INDEX) continue;
        const float* z = logits + (size_t)n * V;
        float* dz = dlogits + (size_t)n * V;
        float row_lse = lse[n];
#pragma omp simd
        for (int v = 0; v < V; v++) dz[v] += scale * cpu_expf(z[v] - row_lse);
        dz[t] -= scale;
    }
}
