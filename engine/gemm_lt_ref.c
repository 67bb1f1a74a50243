/* gemm_lt_ref.c — gemm_lt_desc_run_ref: a GemmLtDesc executed on the CPU (bf16-rounded operands, f32
 * BLAS, the epilogue), so tests/engine/test_gemm_desc.c checks every cuBLASLt call the CUDA backend makes. */
#include <stdlib.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "engine/gemm_lt_desc.h"

/* elements of a column-major operand stored (rows, cols) with leading dimension ld */
static size_t span(int rows, int cols, int ld) { return rows <= 0 || cols <= 0 ? 0 : (size_t)(cols - 1) * ld + rows; }

void gemm_lt_desc_run_ref(const GemmLtDesc* d, const float* A, const float* B, float* C, const float* bias) {
    RR_ASSERT(d->epilogue != GEMM_LT_EPI_GELU_AUX_BIAS); /* it has an Aux output: gemm_lt_desc_run_ref_aux */
    gemm_lt_desc_run_ref_aux(d, A, B, C, bias, NULL);
}

void gemm_lt_desc_run_ref_aux(const GemmLtDesc* d, const float* A, const float* B, float* C, const float* bias,
                              float* aux) {
    const GemmDesc* g = &d->g;
    RR_ASSERT(gemm_desc_valid(g));
    size_t na = span(g->opA ? g->k : g->m, g->opA ? g->m : g->k, g->lda);
    size_t nb = span(g->opB ? g->n : g->k, g->opB ? g->k : g->n, g->ldb);
    float* ar = mallocCheck((na ? na : 1) * sizeof(float));
    float* br = mallocCheck((nb ? nb : 1) * sizeof(float));
    cpu_round_bf16(&backend_cpu, ar, A, na);
    cpu_round_bf16(&backend_cpu, br, B, nb);
    /* column-major C (m, n) = op(A) op(B) is row-major C^T (n, m) = op(B)^T op(A)^T */
    cpu_sgemm(g->opB, g->opA, g->n, g->m, g->k, g->alpha, br, g->ldb, ar, g->lda, g->beta, C, g->ldc);
    if (d->epilogue == GEMM_LT_EPI_BIAS || d->epilogue == GEMM_LT_EPI_GELU_AUX_BIAS) {
        RR_ASSERT(bias);
        for (int j = 0; j < g->n; j++)
            for (int i = 0; i < g->m; i++) C[(size_t)j * g->ldc + i] += bias[i];
    }
    if (d->epilogue == GEMM_LT_EPI_GELU_AUX_BIAS) {
        RR_ASSERT(aux && d->aux_ld >= g->m);
        for (int j = 0; j < g->n; j++)
            for (int i = 0; i < g->m; i++) {
                float pre = C[(size_t)j * g->ldc + i];
                aux[(size_t)j * d->aux_ld + i] = pre;
                C[(size_t)j * g->ldc + i] = rr_gelu_tanh(pre);
            }
    }
    free(ar);
    free(br);
}

