/* swiglu.c — the SwiGLU gate, elementwise: out = silu(gate) * up, silu(g) = g * sigmoid(g).
 * The surrounding gate/up/down projections are ordinary linear ops. */
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

void cpu_swiglu_forward(float* out, const float* gate, const float* up, size_t n) {
#pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        out[i] = g * sig * up[i];
    }
}

/* d silu(g)/dg = sig (1 + g (1 - sig)) */
void cpu_swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) {
#pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        if (dgate) dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
        if (dup) dup[i] += dout[i] * g * sig;
    }
}
