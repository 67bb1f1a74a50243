/* gemm_lt_desc.c — the cuBLASLt descriptions of the bf16 linear layer (see gemm_lt_desc.h). */
#include <stdio.h>
#include <stdlib.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"
#include "engine/gemm_lt_desc.h"

GemmLtDesc gemm_lt_desc_linear_forward(int N, int C, int OC, int has_bias) {
    GemmLtDesc d = {gemm_desc_linear_forward(N, C, OC), has_bias ? GEMM_LT_EPI_BIAS : GEMM_LT_EPI_NONE};
    return d;
}
GemmLtDesc gemm_lt_desc_linear_backward_input(int N, int C, int OC) {
    GemmLtDesc d = {gemm_desc_linear_backward_input(N, C, OC), GEMM_LT_EPI_NONE};
    return d;
}
GemmLtDesc gemm_lt_desc_linear_backward_weight(int N, int C, int OC) {
    GemmLtDesc d = {gemm_desc_linear_backward_weight(N, C, OC), GEMM_LT_EPI_NONE};
    return d;
}

/* elements of a column-major operand stored (rows, cols) with leading dimension ld */
static size_t span(int rows, int cols, int ld) { return rows <= 0 || cols <= 0 ? 0 : (size_t)(cols - 1) * ld + rows; }

void gemm_lt_desc_run_ref(const GemmLtDesc* d, const float* A, const float* B, float* C, const float* bias) {
    const GemmDesc* g = &d->g;
    RR_ASSERT(gemm_desc_valid(g));
    size_t na = span(g->opA ? g->k : g->m, g->opA ? g->m : g->k, g->lda);
    size_t nb = span(g->opB ? g->n : g->k, g->opB ? g->k : g->n, g->ldb);
    float* ar = mallocCheck((na ? na : 1) * sizeof(float));
    float* br = mallocCheck((nb ? nb : 1) * sizeof(float));
    cpu_round_bf16(ar, A, na);
    cpu_round_bf16(br, B, nb);
    /* column-major C (m, n) = op(A) op(B) is row-major C^T (n, m) = op(B)^T op(A)^T */
    cpu_sgemm(g->opB, g->opA, g->n, g->m, g->k, g->alpha, br, g->ldb, ar, g->lda, g->beta, C, g->ldc);
    if (d->epilogue == GEMM_LT_EPI_BIAS) {
        RR_ASSERT(bias);
        for (int j = 0; j < g->n; j++)
            for (int i = 0; i < g->m; i++) C[(size_t)j * g->ldc + i] += bias[i];
    }
    free(ar);
    free(br);
}

const char* gemm_lt_desc_format(const GemmLtDesc* d, char* buf, int len) {
    char g[256];
    snprintf(buf, (size_t)len, "cublasLt A=bf16 B=bf16 C=D=f32 compute=32F %s epilogue=%s",
             gemm_desc_format(&d->g, g, sizeof g), d->epilogue == GEMM_LT_EPI_BIAS ? "BIAS" : "DEFAULT");
    return buf;
}
