/* embedding.c — token embedding lookup: out (N, C) = table[ids[n]], table (V, C).
 * The backward scatters dout rows into dtable; the same id may occur many times in a microbatch, so
 * threads split the channels, not the rows (no atomics, deterministic sums). */
#include <string.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

void cpu_embedding_forward(const Backend* be, float* out, const int* ids, const float* table, int N, int C) {
#pragma omp parallel for if ((size_t)N * C > 65536)
    for (int n = 0; n < N; n++) {
        RR_ASSERT(ids[n] >= 0);
        memcpy(out + (size_t)n * C, table + (size_t)ids[n] * C, (size_t)C * sizeof(float));
    }
}

void cpu_embedding_backward(const Backend* be, float* dtable, const float* dout, const int* ids, int N, int C) {
    enum { BLOCK = 64 };
#pragma omp parallel for if ((size_t)N * C > 16384)
    for (int c0 = 0; c0 < C; c0 += BLOCK) {
        int c1 = c0 + BLOCK < C ? c0 + BLOCK : C;
        for (int n = 0; n < N; n++) {
            float* dt = dtable + (size_t)ids[n] * C;
            const float* dy = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) dt[c] += dy[c];
        }
    }
}
