/* act.c — the elementwise activations of Backend.act_forward / act_backward (engine.h's Act):
 *   GELU_TANH   gelu_forward's tanh approximation (gelu.c);
 *   GELU_ERF    0.5 x (1 + erf(x / sqrt 2)), torch's nn.GELU() (Hugging Face LLaVA's projector `gelu`);
 *               d/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi);
 *   QUICK_GELU  x sigmoid(1.702 x), OpenAI CLIP's; d/dx = s + 1.702 x s (1 - s).
 * Computed in double per element (erf has no vector form here; the CLIP tower's MLP is a few percent of
 * its GEMM time), rounded once to float. */
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

const char* act_name(Act a) {
    switch (a) {
    case ACT_GELU_TANH: return "gelu_tanh";
    case ACT_GELU_ERF: return "gelu";
    case ACT_QUICK_GELU: return "quick_gelu";
    }
    return "?";
}

#define QUICK_GELU_K 1.702

void cpu_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        cpu_gelu_forward(be, out, inp, n);
        return;
    }
    if (act == ACT_GELU_ERF) {
#pragma omp parallel for if (n > 16384)
        for (size_t i = 0; i < n; i++) {
            double x = inp[i];
            out[i] = (float)(0.5 * x * (1.0 + erf(x * M_SQRT1_2)));
        }
        return;
    }
    RR_ASSERT(act == ACT_QUICK_GELU);
#pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (float)(x / (1.0 + exp(-QUICK_GELU_K * x)));
    }
}

void cpu_act_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        cpu_gelu_backward(be, dinp, dout, inp, n);
        return;
    }
    if (act == ACT_GELU_ERF) {
        const double inv_sqrt_2pi = 0.3989422804014327;
#pragma omp parallel for if (n > 16384)
        for (size_t i = 0; i < n; i++) {
            double x = inp[i];
            double g = 0.5 * (1.0 + erf(x * M_SQRT1_2)) + x * inv_sqrt_2pi * exp(-0.5 * x * x);
            dinp[i] += (float)(g * dout[i]);
        }
        return;
    }
    RR_ASSERT(act == ACT_QUICK_GELU);
#pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double s = 1.0 / (1.0 + exp(-QUICK_GELU_K * x));
        dinp[i] += (float)((s + QUICK_GELU_K * x * s * (1.0 - s)) * dout[i]);
    }
}

void cpu_bf16_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act) {
    cpu_act_forward(be, out, inp, n, act);
    cpu_round_bf16(be, out, out, n);
}
