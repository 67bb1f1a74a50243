/* gemm_lt_desc.h — the cuBLASLt GEMMs of the bf16 path (runtime.precision = bf16), as plain data.
 *
 * Each bf16 linear product is one cublasLtMatmul: A and B bf16 (CUDA_R_16BF), C = D f32
 * (CUDA_R_32F, beta accumulates into f32 gradients), compute CUBLAS_COMPUTE_32F, scale f32, with
 * the column-major layout of the fp32 GemmDesc of the same product (engine/gemm_desc.h: the operand
 * roles, op, m, n, k and ld are those, so the layout logic is tested once) and an epilogue:
 *   GEMM_LT_EPI_BIAS: D (m, n) += bias (m) broadcast over the n columns, in f32, before D is written
 *   (CUBLASLT_EPILOGUE_BIAS). In the forward, m = OC: the bias of y = x W^T + b.
 * A GELU epilogue (CUBLASLT_EPILOGUE_GELU_AUX_BIAS) needs a fused linear + GELU slot in the Backend
 * (the model calls them as two ops today), so it is not described here.
 * tests/test_gemm_desc.c executes every desc on the CPU (gemm_lt_desc_run_ref: bf16-rounded A and B,
 * column-major cblas_sgemm, then the epilogue) and compares with backend_cpu_bf16's linear op; the
 * CUDA backend (engine/cuda/bf16.cu) and the emulation's cublasLtMatmul (tests/cuda_emu) take the
 * same struct's fields. Plain C; compiled in both builds. */
#ifndef RRFP_GEMM_LT_DESC_H
#define RRFP_GEMM_LT_DESC_H

#include "engine/gemm_desc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GEMM_LT_EPI_NONE = 0, GEMM_LT_EPI_BIAS = 1 } GemmLtEpilogue;

typedef struct {
    GemmDesc g;              /* layout and operand roles (A, B read as bf16; C = D f32) */
    GemmLtEpilogue epilogue; /* BIAS: the bias vector has g.m values */
} GemmLtDesc;

/* out (N, OC) = bf16(inp) @ bf16(W)^T (+ bias)     beta 0; epilogue BIAS when has_bias */
GemmLtDesc gemm_lt_desc_linear_forward(int N, int C, int OC, int has_bias);
/* dinp (N, C) += bf16(dout) @ bf16(W)               beta 1 */
GemmLtDesc gemm_lt_desc_linear_backward_input(int N, int C, int OC);
/* dW (OC, C) += bf16(dout)^T @ bf16(inp)            beta 1 */
GemmLtDesc gemm_lt_desc_linear_backward_weight(int N, int C, int OC);

/* The reference executor: C = alpha op(bf16(A)) op(bf16(B)) + beta C (f32, column-major, through
 * cblas_sgemm on rounded copies), then the epilogue with `bias` (NULL unless BIAS). A and B are f32
 * buffers whose values are rounded here, as the CUDA path converts them before the call. */
void gemm_lt_desc_run_ref(const GemmLtDesc* d, const float* A, const float* B, float* C, const float* bias);

const char* gemm_lt_desc_format(const GemmLtDesc* d, char* buf, int len);

#ifdef __cplusplus
}
#endif
#endif
