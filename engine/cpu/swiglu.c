/* swiglu.c — the SwiGLU gate, elementwise: out = silu(gate) * up, silu(g) = g * sigmoid(g).
 * The surrounding gate/up/down projections are ordinary linear ops. cpu_expf (fastmath.h) lets the
 * loops vectorise. */
/* FP exceptions are never inspected, so GCC may if-convert and vectorise cpu_expf's clamps (it
 * refuses under the default -ftrapping-math); results do not change. */
#pragma GCC optimize("no-trapping-math")
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/fastmath.h"
#include "engine/engine.h"

void cpu_swiglu_forward(const Backend* be, float* out, const float* gate, const float* up, size_t n) {
#pragma omp parallel for simd if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + cpu_expf(-g));
        out[i] = g * sig * up[i];
    }
}

/* d silu(g)/dg = sig (1 + g (1 - sig)) */
void cpu_swiglu_backward(const Backend* be, float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) {
    /* straight-line loops (no per-element NULL tests) so that they vectorise */
    if (dgate && dup) {
#pragma omp parallel for simd if (n > 16384)
        for (size_t i = 0; i < n; i++) {
            float g = gate[i];
            float sig = 1.0f / (1.0f + cpu_expf(-g));
            dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
            dup[i] += dout[i] * g * sig;
        }
    } else if (dgate) {
#pragma omp parallel for simd if (n > 16384)
        for (size_t i = 0; i < n; i++) {
            float g = gate[i];
            float sig = 1.0f / (1.0f + cpu_expf(-g));
            dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
        }
    } else if (dup) {
#pragma omp parallel for simd if (n > 16384)
        for (size_t i = 0; i < n; i++) {
            float g = gate[i];
            dup[i] += dout[i] * g / (1.0f + cpu_expf(-g));
        }
    }
}
