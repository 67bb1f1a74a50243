/* linear.c — y = x W^T + b on the CPU, every product through cpu_sgemm (BLIS / OpenBLAS).
 *
 * Shapes: inp (N, C), weight (OC, C) (PyTorch's nn.Linear layout), bias (OC), out (N, OC).
 * The GEMMs are row-major; cpu_sgemm takes transpose flags, so no copy of W^T is ever made. */
#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

void cpu_linear_forward(const Backend* be, float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                        int OC) {
    if (N == 0 || OC == 0) return;
    /* out (N, OC) = inp (N, C) @ weight^T (C, OC) */
    cpu_sgemm(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (bias) {
#pragma omp parallel for if ((size_t)N * OC > 16384)
        for (int n = 0; n < N; n++) {
            float* out_n = out + (size_t)n * OC;
            for (int o = 0; o < OC; o++) out_n[o] += bias[o];
        }
    }
}

void cpu_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int C, int OC) {
    if (N == 0) return;
    /* dinp (N, C) += dout (N, OC) @ weight (OC, C); beta = 1 accumulates */
    if (dinp) cpu_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    /* dweight (OC, C) += dout^T (OC, N) @ inp (N, C) */
    if (dweight) cpu_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) {
        /* Column blocks in parallel, rows in order inside each block: no two threads touch the same
         * dbias entry and each thread still reads dout row by row. */
        enum { BLOCK = 64 };
#pragma omp parallel for if ((size_t)N * OC > 16384)
        for (int o0 = 0; o0 < OC; o0 += BLOCK) {
            int o1 = o0 + BLOCK < OC ? o0 + BLOCK : OC;
            for (int n = 0; n < N; n++) {
                const float* dout_n = dout + (size_t)n * OC;
                for (int o = o0; o < o1; o++) dbias[o] += dout_n[o];
            }
        }
    }
}
