/* layernorm.c — LayerNorm over the last dimension C (eps 1e-5), weight and bias, as in llm.c.
 *
 * Forward saves mean and rstd (N) so the backward needs no second pass over the statistics.
 * Statistics are accumulated in double: C is a few hundred to a few thousand here and the variance
 * of activations with a large mean loses digits in float (E[x^2] - E[x]^2 is avoided anyway). */
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

#define LAYERNORM_EPS 1e-5

void cpu_layernorm_forward(const Backend* be, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                           const float* bias, int N, int C) {
#pragma omp parallel for if ((size_t)N * C > 16384)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* y = out + (size_t)n * C;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += x[c];
        double m = sum / C;
        double var = 0.0;
        for (int c = 0; c < C; c++) {
            double dx = x[c] - m;
            var += dx * dx;
        }
        var /= C;
        float s = (float)(1.0 / sqrt(var + LAYERNORM_EPS));
        float mf = (float)m;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - mf) * s;
            y[c] = xhat * weight[c] + bias[c];
        }
        mean[n] = mf;
        rstd[n] = s;
    }
}

/* With xhat = (x - mean) * rstd and g = dout * weight:
 *   dinp   = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
 *   dweight = sum_n dout * xhat,  dbias = sum_n dout. */
void cpu_layernorm_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, const float* mean, const float* rstd, int N, int C) {
    if (dinp) {
#pragma omp parallel for if ((size_t)N * C > 16384)
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* dy = dout + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            double g_mean = 0.0, gx_mean = 0.0;
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * s;
                float g = dy[c] * weight[c];
                g_mean += g;
                gx_mean += g * xhat;
            }
            float gm = (float)(g_mean / C), gxm = (float)(gx_mean / C);
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * s;
                float g = dy[c] * weight[c];
                dx[c] += s * (g - gm - xhat * gxm);
            }
        }
    }
    cpu_norm_params_backward(dweight, dbias, dout, inp, mean, rstd, N, C);
}

void cpu_norm_params_backward(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                              const float* rstd, int N, int C) {
    if (!dweight && !dbias) return;
    /* column blocks in parallel so that no two threads add into the same entry */
    enum { BLOCK = 64 };
#pragma omp parallel for if ((size_t)N * C > 16384)
    for (int c0 = 0; c0 < C; c0 += BLOCK) {
        int c1 = c0 + BLOCK < C ? c0 + BLOCK : C;
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* dy = dout + (size_t)n * C;
            float m = mean ? mean[n] : 0.0f, s = rstd[n]; /* x - 0 is x exactly: RMSNorm's dy x r */
            for (int c = c0; c < c1; c++) {
                if (dweight) dweight[c] += dy[c] * (x[c] - m) * s;
                if (dbias) dbias[c] += dy[c];
            }
        }
    }
}
