// dropout.cu — LoRA's dropout on CUDA (BackendOps.dropout_forward / dropout_backward): one thread per element,
// the keep mask from engine/cuda/dropout_math.h (the CPU backend's, engine/cpu/dropout.c), so both backends drop
// the same elements and compute the same values. f32-word activations (the fp32 and bf16 tables; the bf16
// table's forward rounds its output to bf16 in the store).
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"
#include "engine/cuda/dropout_math.h"

#define DROPOUT_BLOCK 256

template <bool R>
static __global__ void dropout_forward_kernel(float* out, const float* inp, int N, int C, int ld_g, int c0, float p,
                                              uint64_t seed) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= (size_t)N * C) return;
    size_t n = j / (size_t)C, c = j % (size_t)C;
    float v = rr_dropout_keep(seed, (uint64_t)n * ld_g + c0 + c, p) ? inp[j] * rr_dropout_scale(p) : 0.0f;
    out[j] = R ? rr_bf16_round(v) : v;
}

static __global__ void dropout_backward_kernel(float* dinp, const float* dout, int N, int C, int ld_g, int c0, float p,
                                               uint64_t seed) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= (size_t)N * C) return;
    size_t n = j / (size_t)C, c = j % (size_t)C;
    if (rr_dropout_keep(seed, (uint64_t)n * ld_g + c0 + c, p)) dinp[j] += dout[j] * rr_dropout_scale(p);
}

static void dropout_forward_cuda(const Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p,
                                 uint64_t seed, bool round) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    RR_ASSERT(out.dt == DTYPE_F32 && inp.dt == DTYPE_F32 && "LoRA's dropout takes f32-word activations");
    unsigned grid = ceil_div_z(n, DROPOUT_BLOCK);
    float* o = (float*)out.p;
    const float* x = (const float*)inp.p;
    if (round) {
        dropout_forward_kernel<true><<<grid, DROPOUT_BLOCK, 0, cuda_stream(be)>>>(o, x, N, C, ld_g, c0, p, seed);
    } else {
        dropout_forward_kernel<false><<<grid, DROPOUT_BLOCK, 0, cuda_stream(be)>>>(o, x, N, C, ld_g, c0, p, seed);
    }
    cudaCheck(cudaGetLastError());
}

void cuda_dropout_forward(const Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p, uint64_t seed) {
    dropout_forward_cuda(be, out, inp, N, C, ld_g, c0, p, seed, false);
}
void cuda_bf16_dropout_forward(const Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p,
                               uint64_t seed) {
    dropout_forward_cuda(be, out, inp, N, C, ld_g, c0, p, seed, true);
}
void cuda_dropout_backward(const Backend* be, float* dinp, const float* dout, int N, int C, int ld_g, int c0, float p,
                           uint64_t seed) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    unsigned grid = ceil_div_z(n, DROPOUT_BLOCK);
    dropout_backward_kernel<<<grid, DROPOUT_BLOCK, 0, cuda_stream(be)>>>(dinp, dout, N, C, ld_g, c0, p, seed);
    cudaCheck(cudaGetLastError());
}
