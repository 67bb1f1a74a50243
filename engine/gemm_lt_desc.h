/* gemm_lt_desc.h — the cuBLASLt GEMMs of the bf16 path (runtime.precision = bf16), as plain data.
 *
 * Each bf16 linear product is one cublasLtMatmul: A and B bf16 (CUDA_R_16BF), C = D f32
 * (CUDA_R_32F, beta accumulates into f32 gradients), compute CUBLAS_COMPUTE_32F, scale f32, with
 * the column-major layout of the fp32 GemmDesc of the same product (engine/gemm_desc.h: the operand
 * roles, op, m, n, k and ld are those, so the layout logic is tested once) and an epilogue:
 *   GEMM_LT_EPI_BIAS: D (m, n) += bias (m) broadcast over the n columns, in f32, before D is written
 *   (CUBLASLT_EPILOGUE_BIAS). In the forward, m = OC: the bias of y = x W^T + b.
  GEMM_LT_EPI_GELU_AUX_BIAS: pre = D + bias as above; Aux (m, n, leading dimension aux_ld) = pre and
 *   D = gelu(pre), GELU's tanh approximation in f32 (rr_gelu_tanh, what backend_cpu's gelu_forward
 *   computes) (CUBLASLT_EPILOGUE_GELU_AUX_BIAS, f32 Aux: the pre-activation the GELU backward needs).
 *   Note the rounding point: the fused GELU reads the f32 pre-activation, where the bf16 table's two
 *   ops (linear, then GELU) round the linear's output to bf16 first; a model that calls the fused form
 *   needs a Backend slot for it and the CPU bf16 table to round the same way (not done: the model
 *   calls linear and GELU as two ops). Described and checked on the CPU (tests/engine/test_gemm_desc.c);
 *   bf16.cu maps it onto cuBLASLt, no op uses it yet.
 * tests/engine/test_gemm_desc.c executes every desc on the CPU (gemm_lt_desc_run_ref: bf16-rounded A and B,
 * column-major cblas_sgemm, then the epilogue) and compares with backend_cpu_bf16's linear op; the
 * CUDA backend (engine/cuda/bf16.cu) and the emulation's cublasLtMatmul (tests/support/cuda_emu) take the
 * same struct's fields. Plain C; compiled in both builds. */
#ifndef RRFP_GEMM_LT_DESC_H
#define RRFP_GEMM_LT_DESC_H

#include "engine/gemm_desc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GEMM_LT_EPI_NONE = 0, GEMM_LT_EPI_BIAS = 1, GEMM_LT_EPI_GELU_AUX_BIAS = 2 } GemmLtEpilogue;

typedef struct {
    GemmDesc g;              /* layout and operand roles (A, B read as bf16; C = D f32) */
    GemmLtEpilogue epilogue; /* BIAS, GELU_AUX_BIAS: the bias vector has g.m values */
    int aux_ld;              /* GELU_AUX_BIAS: leading dimension of Aux (>= g.m); 0 otherwise */
} GemmLtDesc;

/* out (N, OC) = bf16(inp) @ bf16(W)^T (+ bias)     beta 0; epilogue BIAS when has_bias */
GemmLtDesc gemm_lt_desc_linear_forward(int N, int C, int OC, int has_bias);
/* pre (N, OC) = bf16(inp) @ bf16(W)^T + bias into Aux, out = gelu(pre)   beta 0 (aux_ld = OC) */
GemmLtDesc gemm_lt_desc_linear_gelu_forward(int N, int C, int OC);
/* dinp (N, C) += bf16(dout) @ bf16(W)               beta 1 */
GemmLtDesc gemm_lt_desc_linear_backward_input(int N, int C, int OC);
/* dW (OC, C) += bf16(dout)^T @ bf16(inp)            beta 1 */
GemmLtDesc gemm_lt_desc_linear_backward_weight(int N, int C, int OC);

/* The reference executor: C = alpha op(bf16(A)) op(bf16(B)) + beta C (f32, column-major, through
 * cblas_sgemm on rounded copies), then the epilogue with `bias` (NULL unless BIAS). A and B are f32
 * buffers whose values are rounded here, as the CUDA path converts them before the call. */
void gemm_lt_desc_run_ref(const GemmLtDesc* d, const float* A, const float* B, float* C, const float* bias);
/* The same with the Aux output of GELU_AUX_BIAS (aux: column-major (g.m, g.n), leading dimension aux_ld). */
void gemm_lt_desc_run_ref_aux(const GemmLtDesc* d, const float* A, const float* B, float* C, const float* bias,
                              float* aux);

const char* gemm_lt_desc_format(const GemmLtDesc* d, char* buf, int len);

#ifdef __cplusplus
}
#endif
#endif
