// linear.cu — y = x W^T + b on CUDA. Every product goes to cuBLAS through a GemmDesc
// (engine/gemm_desc.h), whose layout logic tests/engine/test_gemm_desc.c checks on the CPU; this file only
// hands a desc's fields to cublasSgemm. The bias is added by a kernel, and its gradient is a
// deterministic column sum (cuda_common.cuh).
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"
#include "engine/gemm_desc.h"

// Run one described GEMM on the backend's stream.
static void gemm_desc_run_cuda(const Backend* be, const GemmDesc* g, const GemmOperands* ops) {
    Buf A, B, C;
    RR_ASSERT(gemm_desc_valid(g));
    gemm_desc_operands(g, ops, &A, &B, &C);
    cublasCheck(cublasSetStream(cuda_ctx.cublas, cuda_stream(be))); // the handle is shared by every stream
    cublasCheck(cublasSgemm(cuda_ctx.cublas, g->opA ? CUBLAS_OP_T : CUBLAS_OP_N, g->opB ? CUBLAS_OP_T : CUBLAS_OP_N,
                            g->m, g->n, g->k, &g->alpha, buf_f32p(A), g->lda, buf_f32p(B), g->ldb, &g->beta, buf_f32p(C),
                            g->ldc)); // f32 operands only (a 2-byte one is refused)
}

// out (N, OC) += bias (OC) broadcast over rows
static __global__ void bias_add_kernel(float* out, const float* bias, int N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC) out[i] += bias[i % OC];
}
static void bias_add_cuda(float* out, const float* bias, int N, int OC, cudaStream_t stream) {
    size_t n = (size_t)N * OC;
    bias_add_kernel<<<ceil_div_z(n, 256), 256, 0, stream>>>(out, bias, N, OC);
    cudaCheck(cudaGetLastError());
}

// column n of dout for the dbias column sum
struct RowsOf {
    const float* x;
    int ld;
    __device__ float operator()(int n, int c) const { return x[(size_t)n * ld + c]; }
};

void cuda_linear_forward(const Backend* be, float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    GemmOperands ops = {};
    ops.ptr[GEMM_PTR_INP] = buf_f32(inp);
    ops.ptr[GEMM_PTR_WEIGHT] = buf_f32(weight);
    ops.ptr[GEMM_PTR_OUT] = buf_f32(out);
    if (C == 0) { // cuBLAS with k = 0 scales C by beta = 0: out = 0, as the CPU's BLAS gives
        cudaCheck(cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(float), cuda_stream(be)));
    } else {
        GemmDesc g = gemm_desc_linear_forward(N, C, OC);
        gemm_desc_run_cuda(be, &g, &ops);
    }
    if (bias) bias_add_cuda(out, bias, N, OC, cuda_stream(be));
}

void cuda_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    GemmOperands ops = {};
    ops.ptr[GEMM_PTR_INP] = buf_f32(inp);
    ops.ptr[GEMM_PTR_WEIGHT] = buf_f32(weight);
    ops.ptr[GEMM_PTR_DOUT] = buf_f32(dout);
    ops.ptr[GEMM_PTR_DINP] = buf_f32(dinp);
    ops.ptr[GEMM_PTR_DWEIGHT] = buf_f32(dweight);
    if (dinp && C > 0) {
        GemmDesc g = gemm_desc_linear_backward_input(N, C, OC);
        gemm_desc_run_cuda(be, &g, &ops);
    }
    if (dweight && C > 0) {
        GemmDesc g = gemm_desc_linear_backward_weight(N, C, OC);
        gemm_desc_run_cuda(be, &g, &ops);
    }
    if (dbias) column_sum_cuda(dbias, RowsOf{dout, OC}, N, OC, cuda_stream(be));
}

// Linear then GELU in fp32 (engine.h): the two ops (cuBLAS, then the GELU kernel), so the results are the
// unfused model's. The fused form is the bf16 table's (bf16.cu: cuBLASLt's GELU_AUX_BIAS epilogue, which
// takes bf16 operands only).
void cuda_linear_gelu_forward(const Backend* be, float* out, float* pre, const float* inp, const float* weight,
                              const float* bias, int N, int C, int OC) {
    cuda_linear_forward(be, pre, inp, weight, bias, N, C, OC);
    cuda_gelu_forward(be, out, pre, (size_t)N * OC);
}
