/* gemm.c — the CPU backend's one GEMM entry, row-major, through CBLAS (BLIS or OpenBLAS). */
#include <cblas.h>

#include "engine/engine.h"

void cpu_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc) {
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

const char* cpu_blas_name(void) {
#if defined(RRFP_BLAS_BLIS)
    return "blis";
#elif defined(RRFP_BLAS_OPENBLAS)
    return "openblas";
#else
    return "unknown";
#endif
}
