/* rows_gather.c — the weighted row gather of BackendOps.rows_gather_forward / _backward (engine.h):
 * out[n] += sum_k w[n K + k] table[idx[n K + k]]. The forward splits rows across threads (each writes
 * its own rows); the backward scatters into table rows that many n share, so threads split the
 * channels and every thread walks all rows in order: no atomics, the same sums whatever the threads. */
#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

void cpu_rows_gather_forward(const Backend* be, float* out, const int* idx, const float* w, const float* table, int N, int K,
                             int C) {
#pragma omp parallel for if ((size_t)N * K * C > 65536)
    for (int n = 0; n < N; n++) {
        float* o = out + (size_t)n * C;
        for (int k = 0; k < K; k++) {
            int r = idx[(size_t)n * K + k];
            if (r < 0) continue;
            float a = w ? w[(size_t)n * K + k] : 1.0f;
            const float* t = table + (size_t)r * C;
            for (int c = 0; c < C; c++) o[c] += a * t[c];
        }
    }
}

void cpu_rows_gather_backward(const Backend* be, float* dtable, const float* dout, const int* idx, const float* w, int N, int K,
                              int C) {
    enum { BLOCK = 64 };
#pragma omp parallel for if ((size_t)N * K * C > 16384)
    for (int c0 = 0; c0 < C; c0 += BLOCK) {
        int c1 = c0 + BLOCK < C ? c0 + BLOCK : C;
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                int r = idx[(size_t)n * K + k];
                if (r < 0) continue;
                float a = w ? w[(size_t)n * K + k] : 1.0f;
                float* dt = dtable + (size_t)r * C;
                const float* dy = dout + (size_t)n * C;
                for (int c = c0; c < c1; c++) dt[c] += a * dy[c];
            }
    }
}

/* bf16 tables: the sum is an activation the GPU would store in bf16 */
void cpu_bf16_rows_gather_forward(const Backend* be, float* out, const int* idx, const float* w, const float* table, int N, int K,
                                  int C) {
    cpu_rows_gather_forward(be, out, idx, w, table, N, K, C);
    cpu_round_bf16(be, out, out, (size_t)N * C);
}
