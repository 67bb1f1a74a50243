/* act.c — the elementwise activations of BackendOps.act_forward / act_backward (engine.h's Act):
 *   GELU_TANH   gelu_forward's tanh approximation (gelu.c);
 *   GELU_ERF    0.5 x (1 + erf(x / sqrt 2)), torch's nn.GELU() (Hugging Face LLaVA's projector `gelu`);
 *               d/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi);
 *   QUICK_GELU  x sigmoid(1.702 x), OpenAI CLIP's; d/dx = s + 1.702 x s (1 - s).
 * Computed in double per element through kernel_math.h (the CUDA kernels' functions; erf has no vector
 * form here, and the CLIP tower's MLP is a few percent of its GEMM time), rounded once to float. */
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"

const char* act_name(Act a) {
    switch (a) {
    case ACT_GELU_TANH: return "gelu_tanh";
    case ACT_GELU_ERF: return "gelu";
    case ACT_QUICK_GELU: return "quick_gelu";
    }
    return "?";
}

void cpu_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        cpu_gelu_forward(be, out, inp, n);
        return;
    }
    if (act == ACT_GELU_ERF) {
#pragma omp parallel for if (n > 16384)
        for (size_t i = 0; i < n; i++) out[i] = rr_gelu_erf(inp[i]);
        return;
    }
    RR_ASSERT(act == ACT_QUICK_GELU);
#pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) out[i] = rr_quick_gelu(inp[i]);
}

void cpu_act_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        cpu_gelu_backward(be, dinp, dout, inp, n);
        return;
    }
    if (act == ACT_GELU_ERF) {
#pragma omp parallel for if (n > 16384)
        for (size_t i = 0; i < n; i++) dinp[i] += (float)(rr_gelu_erf_grad(inp[i]) * dout[i]);
        return;
    }
    RR_ASSERT(act == ACT_QUICK_GELU);
#pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) dinp[i] += (float)(rr_quick_gelu_grad(inp[i]) * dout[i]);
}

void cpu_bf16_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act) {
    cpu_act_forward(be, out, inp, n, act);
    cpu_round_bf16(be, out, out, n);
}
