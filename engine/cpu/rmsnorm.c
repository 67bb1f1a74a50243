/* rmsnorm.c — RMSNorm over the last dimension C: out = x / sqrt(mean(x^2) + eps) * w (no bias; eps is
 * model.rms_eps, 1e-5 by default).
 *
 * Forward saves rstd (N). The sum of squares is accumulated in double (see layernorm.c). */
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

void cpu_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, int N, int C, double eps) {
#pragma omp parallel for if ((size_t)N * C > 16384)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* y = out + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        float s = (float)(1.0 / sqrt(ss / C + eps));
        for (int c = 0; c < C; c++) y[c] = x[c] * s * weight[c];
        rstd[n] = s;
    }
}

/* With g = dout * w and r = rstd: d/dx_i of sum_j g_j x_j r = r g_i - x_i r^3 / C * sum_j g_j x_j. */
void cpu_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                          const float* rstd, int N, int C) {
    if (dinp) {
#pragma omp parallel for if ((size_t)N * C > 16384)
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* dy = dout + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            float r = rstd[n];
            double gx = 0.0;
            for (int c = 0; c < C; c++) gx += (double)dy[c] * weight[c] * x[c];
            float k = (float)(gx / C) * r * r * r;
            for (int c = 0; c < C; c++) dx[c] += r * dy[c] * weight[c] - x[c] * k;
        }
    }
    cpu_norm_params_backward(dweight, NULL, dout, inp, NULL, rstd, N, C);
}
