/* gelu.c — GELU with the tanh approximation (as in GPT-2 / LLaVA's projector), elementwise.
 *   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBIC 0.044715f

void cpu_gelu_forward(float* out, const float* inp, size_t n) {
#pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

void cpu_gelu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
#pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        float t = tanhf(u);
        float sech2 = 1.0f - t * t;
        float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        float grad = 0.5f * (1.0f + t) + 0.5f * x * sech2 * du_dx;
        dinp[i] += grad * dout[i];
    }
}
