/* add.c — residual add, out = a + b elementwise; out may alias a or b (x += f(x)).
 * Its backward is the identity into both inputs, which the model does by passing the same gradient
 * buffer on, so there is no add_backward. */
#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

void cpu_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
