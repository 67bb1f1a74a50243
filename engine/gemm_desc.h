/* gemm_desc.h — every cuBLAS GEMM of the CUDA backend, described as plain data.
 *
 * cuBLAS is column-major; our tensors are row-major. A row-major (R, C) matrix is, byte for byte, a
 * column-major (C, R) matrix: its transpose. So a row-major product Y = X W^T is computed as the
 * column-major product Y^T = W X^T with the operands swapped (the usual transpose trick), and the
 * (op, m, n, k, ld) of each call is where layout bugs live. Each call is therefore built by one
 * function below, as a GemmDesc, and:
 *   - the CUDA backend calls cuBLAS only through a GemmDesc (engine/cuda/linear.cu);
 *   - tests/engine/test_gemm_desc.c executes the same descs through column-major cblas_sgemm on the CPU
 *     and compares with the row-major CPU linear op, for many shapes, so the layout logic is tested
 *     on machines without a GPU.
 * Plain C; compiled in both builds. */
#ifndef RRFP_GEMM_DESC_H
#define RRFP_GEMM_DESC_H

#include "engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which tensor of the op plays the role of a GEMM operand. */
typedef enum {
    GEMM_PTR_INP = 0,  /* (N, C) row-major */
    GEMM_PTR_WEIGHT,   /* (OC, C) row-major, nn.Linear layout */
    GEMM_PTR_OUT,      /* (N, OC) row-major */
    GEMM_PTR_DOUT,     /* (N, OC) */
    GEMM_PTR_DINP,     /* (N, C) */
    GEMM_PTR_DWEIGHT,  /* (OC, C) */
    GEMM_PTR_COUNT
} GemmPtr;

/* One column-major GEMM: C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C, as cublasSgemm and
 * cblas_sgemm(CblasColMajor, ...) take it. opA / opB: 0 = no transpose, 1 = transpose. */
typedef struct {
    int opA, opB;
    int m, n, k;
    int lda, ldb, ldc;
    float alpha, beta;
    GemmPtr a, b, c;
} GemmDesc;

/* The tensors of one linear call, indexed by GemmPtr (unused ones buf_none()): each a typed buffer, so an
 * operand's storage (f32 words, 2-byte bf16 words) travels with its address. The fp32 GEMMs take f32 operands only
 * (linear.cu); the bf16 GEMMs convert an f32 operand to bf16 and pass a 2-byte one as it is (bf16.cu). */
typedef struct {
    Buf ptr[GEMM_PTR_COUNT];
} GemmOperands;

/* out (N, OC) = inp (N, C) @ weight (OC, C)^T           (beta 0: overwrites out; bias added apart) */
GemmDesc gemm_desc_linear_forward(int N, int C, int OC);
/* dinp (N, C) += dout (N, OC) @ weight (OC, C)           (beta 1: backward adds) */
GemmDesc gemm_desc_linear_backward_input(int N, int C, int OC);
/* dweight (OC, C) += dout (N, OC)^T @ inp (N, C)         (beta 1) */
GemmDesc gemm_desc_linear_backward_weight(int N, int C, int OC);

/* The A, B and C buffers of `g` taken from `ops`. Dies (RR_ASSERT) if one is NULL: a caller
 * must not build a desc for a product it skips. */
void gemm_desc_operands(const GemmDesc* g, const GemmOperands* ops, Buf* A, Buf* B, Buf* C);

/* 1 if the desc satisfies the BLAS argument rules (m, n, k >= 0; lda >= max(1, rows of A as stored),
 * ldb likewise, ldc >= max(1, m)); 0 otherwise. cuBLAS rejects such a call with
 * CUBLAS_STATUS_INVALID_VALUE, so the CUDA path asserts it and the CPU test checks it. */
int gemm_desc_valid(const GemmDesc* g);

/* "opA=T opB=N m=.. n=.. k=.. lda=.. ldb=.. ldc=.. alpha=.. beta=.. A=weight B=inp C=out" into buf. */
const char* gemm_desc_format(const GemmDesc* g, char* buf, int len);
const char* gemm_ptr_name(GemmPtr p);

#ifdef __cplusplus
}
#endif
#endif
