/* gelu.c — GELU with the tanh approximation (as in GPT-2 / LLaVA's projector), elementwise.
 *   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 * computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)): the same
 * function, one exponential instead of tanhf (glibc's tanhf is several times slower), and no
 * cancellation (for very negative x, exp(-2u) overflows to inf and the result is -0, gelu's limit).
 * cpu_expf (fastmath.h) lets the loops vectorise.
 * Backward: d/dx [x s(2u)] = s + 2 x s (1 - s) du/dx. */
/* FP exceptions are never inspected, so GCC may if-convert and vectorise cpu_expf's clamps (it
 * refuses under the default -ftrapping-math); results do not change. */
#pragma GCC optimize("no-trapping-math")
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/fastmath.h"
#include "engine/engine.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBIC 0.044715f

void cpu_gelu_forward(const Backend* be, float* out, const float* inp, size_t n) {
#pragma omp parallel for simd if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        out[i] = x / (1.0f + cpu_expf(-2.0f * u));
    }
}

void cpu_gelu_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n) {
#pragma omp parallel for simd if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        float s = 1.0f / (1.0f + cpu_expf(-2.0f * u));
        float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        dinp[i] += (s + 2.0f * x * s * (1.0f - s) * du_dx) * dout[i];
    }
}
