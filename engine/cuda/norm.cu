// norm.cu — LayerNorm and RMSNorm on CUDA (ggml norm.cu style: both norms in one file).
//
// Forward and the input gradient: one block per row; the row sums are block reductions and every
// value comes from kernel_math.h (rr_layernorm_*, rr_rmsnorm_*), the same functions
// tests/test_kernel_math.c checks against the CPU backend. Weight / bias gradients are
// deterministic column sums over the rows (cuda_common.cuh). Sums are in float (the CPU reference
// uses double): for the widths here (C <= a few thousand) the difference is a few float eps.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

// threads for a per-row block: a multiple of 32, no more than 256, no more than C needs
static int norm_block_size(int C) {
    int t = ((C + 31) / 32) * 32;
    return t < 32 ? 32 : (t > 256 ? 256 : t);
}

// ---- LayerNorm -----------------------------------------------------------------------------------

// R: round the stored output to bf16 in the store (the bf16 table's rounding point, no separate pass)
// A: the activations' storage (float, or uint16_t bf16 words on the bf16-activation table; cuda_common.cuh)
template <bool R, typename A>
static __global__ void layernorm_forward_kernel(A* out, float* mean, float* rstd, const A* inp,
                                                const float* weight, const float* bias, int C) {
    __shared__ float shared[32];
    const A* x = inp + (size_t)blockIdx.x * C;
    A* y = out + (size_t)blockIdx.x * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += act_ld(x, c);
    float m = rr_layernorm_mean(block_sum(s, shared), C);
    float ssd = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dx = act_ld(x, c) - m;
        ssd += dx * dx;
    }
    float r = rr_layernorm_rstd(block_sum(ssd, shared), C);
    for (int c = threadIdx.x; c < C; c += blockDim.x) act_st<R>(y, c, rr_layernorm_out(act_ld(x, c), m, r, weight[c], bias[c]));
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
}
static void layernorm_forward_cuda(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                   const float* bias, int N, int C, bool round, cudaStream_t stream) {
    if (N == 0) return;
    if (round) {
        layernorm_forward_kernel<true><<<N, norm_block_size(C), 0, stream>>>(out, mean, rstd, inp, weight, bias, C);
    } else {
        layernorm_forward_kernel<false><<<N, norm_block_size(C), 0, stream>>>(out, mean, rstd, inp, weight, bias, C);
    }
    cudaCheck(cudaGetLastError());
}
static void layernorm_forward_bf16a_cuda(uint16_t* out, float* mean, float* rstd, const uint16_t* inp, const float* weight,
                                         const float* bias, int N, int C, cudaStream_t stream) {
    if (N == 0) return;
    layernorm_forward_kernel<true><<<N, norm_block_size(C), 0, stream>>>(out, mean, rstd, inp, weight, bias, C);
    cudaCheck(cudaGetLastError());
}

template <typename A>
static __global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const A* inp,
                                                       const float* weight, const float* mean, const float* rstd,
                                                       int C) {
    __shared__ float shared[32];
    size_t row = (size_t)blockIdx.x * C;
    const A* x = inp + row;
    const float* dy = dout + row;
    float* dx = dinp + row;
    float m = mean[blockIdx.x], r = rstd[blockIdx.x];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float g = dy[c] * weight[c];
        g_sum += g;
        gx_sum += g * (act_ld(x, c) - m) * r;
    }
    float g_mean = block_sum(g_sum, shared) / C;
    float gx_mean = block_sum(gx_sum, shared) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dx[c] += rr_layernorm_dx(dy[c], act_ld(x, c), weight[c], m, r, g_mean, gx_mean);
}
template <typename A>
static void layernorm_backward_input_cuda(float* dinp, const float* dout, const A* inp, const float* weight,
                                          const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
    if (N == 0) return;
    layernorm_backward_input_kernel<<<N, norm_block_size(C), 0, stream>>>(dinp, dout, inp, weight, mean, rstd, C);
    cudaCheck(cudaGetLastError());
}

template <typename A>
struct LayernormDweight { // dout * xhat
    const float* dout;
    const A* inp;
    const float *mean, *rstd;
    int C;
    __device__ float operator()(int n, int c) const {
        size_t i = (size_t)n * C + c;
        return dout[i] * (act_ld(inp, i) - mean[n]) * rstd[n];
    }
};
struct RowsOfDout {
    const float* dout;
    int C;
    __device__ float operator()(int n, int c) const { return dout[(size_t)n * C + c]; }
};

void cuda_layernorm_forward(const Backend* be, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int N, int C) {
    layernorm_forward_cuda(out, mean, rstd, inp, weight, bias, N, C, false, cuda_stream(be));
}
void cuda_bf16_layernorm_forward(const Backend* be, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int N, int C) {
    layernorm_forward_cuda(out, mean, rstd, inp, weight, bias, N, C, true, cuda_stream(be));
}

template <typename A>
static void layernorm_backward_any(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout,
                                   const A* inp, const float* weight, const float* mean, const float* rstd, int N, int C) {
    if (dinp) layernorm_backward_input_cuda(dinp, dout, inp, weight, mean, rstd, N, C, cuda_stream(be));
    if (dweight && dbias) // one pass over dout and inp for both
        column_sum2_cuda(dweight, LayernormDweight<A>{dout, inp, mean, rstd, C}, dbias, RowsOfDout{dout, C}, N, C,
                         cuda_stream(be));
    else if (dweight)
        column_sum_cuda(dweight, LayernormDweight<A>{dout, inp, mean, rstd, C}, N, C, cuda_stream(be));
    else if (dbias)
        column_sum_cuda(dbias, RowsOfDout{dout, C}, N, C, cuda_stream(be));
}
void cuda_layernorm_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_any(be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
// the bf16-activation table (Backend.act_dtype = DTYPE_BF16): inp / out are 2-byte bf16 words
void cuda_bf16a_layernorm_forward(const Backend* be, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                  const float* bias, int N, int C) {
    layernorm_forward_bf16a_cuda((uint16_t*)out, mean, rstd, (const uint16_t*)inp, weight, bias, N, C, cuda_stream(be));
}
void cuda_bf16a_layernorm_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                   const float* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_any(be, dinp, dweight, dbias, dout, (const uint16_t*)inp, weight, mean, rstd, N, C);
}

// ---- RMSNorm -------------------------------------------------------------------------------------

template <bool R, typename A>
static __global__ void rmsnorm_forward_kernel(A* out, float* rstd, const A* inp, const float* weight, int C,
                                              float eps) {
    __shared__ float shared[32];
    const A* x = inp + (size_t)blockIdx.x * C;
    A* y = out + (size_t)blockIdx.x * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float xc = act_ld(x, c);
        ss += xc * xc;
    }
    float r = rr_rmsnorm_rstd(block_sum(ss, shared), C, eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) act_st<R>(y, c, rr_rmsnorm_out(act_ld(x, c), r, weight[c]));
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}
static void rmsnorm_forward_cuda(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                 double eps, bool round, cudaStream_t stream) {
    if (N == 0) return;
    if (round) {
        rmsnorm_forward_kernel<true><<<N, norm_block_size(C), 0, stream>>>(out, rstd, inp, weight, C, (float)eps);
    } else {
        rmsnorm_forward_kernel<false><<<N, norm_block_size(C), 0, stream>>>(out, rstd, inp, weight, C, (float)eps);
    }
    cudaCheck(cudaGetLastError());
}

template <typename A>
static __global__ void rmsnorm_backward_input_kernel(float* dinp, const float* dout, const A* inp,
                                                     const float* weight, const float* rstd, int C) {
    __shared__ float shared[32];
    size_t row = (size_t)blockIdx.x * C;
    const A* x = inp + row;
    const float* dy = dout + row;
    float* dx = dinp + row;
    float r = rstd[blockIdx.x];
    float gx = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) gx += dy[c] * weight[c] * act_ld(x, c);
    float gx_mean = block_sum(gx, shared) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dx[c] += rr_rmsnorm_dx(dy[c], act_ld(x, c), weight[c], r, gx_mean);
}
template <typename A>
static void rmsnorm_backward_input_cuda(float* dinp, const float* dout, const A* inp, const float* weight,
                                        const float* rstd, int N, int C, cudaStream_t stream) {
    if (N == 0) return;
    rmsnorm_backward_input_kernel<<<N, norm_block_size(C), 0, stream>>>(dinp, dout, inp, weight, rstd, C);
    cudaCheck(cudaGetLastError());
}

template <typename A>
struct RmsnormDweight { // dout * x * rstd
    const float* dout;
    const A* inp;
    const float* rstd;
    int C;
    __device__ float operator()(int n, int c) const {
        size_t i = (size_t)n * C + c;
        return dout[i] * act_ld(inp, i) * rstd[n];
    }
};

void cuda_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, int N, int C, double eps) {
    rmsnorm_forward_cuda(out, rstd, inp, weight, N, C, eps, false, cuda_stream(be));
}
void cuda_bf16_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                               double eps) {
    rmsnorm_forward_cuda(out, rstd, inp, weight, N, C, eps, true, cuda_stream(be));
}

void cuda_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                           const float* rstd, int N, int C) {
    if (dinp) rmsnorm_backward_input_cuda(dinp, dout, inp, weight, rstd, N, C, cuda_stream(be));
    if (dweight) column_sum_cuda(dweight, RmsnormDweight<float>{dout, inp, rstd, C}, N, C, cuda_stream(be));
}
// the bf16-activation table: inp / out 2-byte bf16 words, rstd and the gradients f32
void cuda_bf16a_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                double eps) {
    if (N == 0) return;
    rmsnorm_forward_kernel<true><<<N, norm_block_size(C), 0, cuda_stream(be)>>>((uint16_t*)out, rstd, (const uint16_t*)inp,
                                                                              weight, C, (float)eps);
    cudaCheck(cudaGetLastError());
}
void cuda_bf16a_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, int N, int C) {
    const uint16_t* x = (const uint16_t*)inp;
    if (dinp) rmsnorm_backward_input_cuda(dinp, dout, x, weight, rstd, N, C, cuda_stream(be));
    if (dweight) column_sum_cuda(dweight, RmsnormDweight<uint16_t>{dout, x, rstd, C}, N, C, cuda_stream(be));
}

// ---- 2-byte output gradients (the bf16-activation table, issue 20) -------------------------------------------
// RMSNorm backward adding into the f32 dinp and storing its final value as 2-byte bf16 too (dinp16 =
// rr_f32_to_bf16(dinp), in the same store): the copy a GEMM reads next (the residual stream's gradient)
static __global__ void rmsnorm_backward_input_b16_kernel(float* dinp, uint16_t* dinp16, const float* dout,
                                                         const uint16_t* inp, const float* weight, const float* rstd,
                                                         int C) {
    __shared__ float shared[32];
    size_t row = (size_t)blockIdx.x * C;
    const uint16_t* x = inp + row;
    const float* dy = dout + row;
    float* dx = dinp + row;
    uint16_t* dx16 = dinp16 + row;
    float r = rstd[blockIdx.x];
    float gx = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) gx += dy[c] * weight[c] * act_ld(x, c);
    float gx_mean = block_sum(gx, shared) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = dx[c] + rr_rmsnorm_dx(dy[c], act_ld(x, c), weight[c], r, gx_mean);
        dx[c] = v;
        dx16[c] = rr_f32_to_bf16(v);
    }
}
void cuda_bf16a_rmsnorm_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, const float* dout,
                                     const float* inp, const float* weight, const float* rstd, int N, int C) {
    const uint16_t* x = (const uint16_t*)inp;
    if (dinp && dinp16 && N > 0) {
        rmsnorm_backward_input_b16_kernel<<<N, norm_block_size(C), 0, cuda_stream(be)>>>(dinp, dinp16, dout, x, weight, rstd,
                                                                                         C);
        cudaCheck(cudaGetLastError());
    } else if (dinp) {
        rmsnorm_backward_input_cuda(dinp, dout, x, weight, rstd, N, C, cuda_stream(be));
    }
    if (dweight) column_sum_cuda(dweight, RmsnormDweight<uint16_t>{dout, x, rstd, C}, N, C, cuda_stream(be));
}

// LayerNorm backward adding into the f32 dinp and storing its final value as 2-byte bf16 too (as the RMSNorm one)
static __global__ void layernorm_backward_input_b16_kernel(float* dinp, uint16_t* dinp16, const float* dout,
                                                           const uint16_t* inp, const float* weight, const float* mean,
                                                           const float* rstd, int C) {
    __shared__ float shared[32];
    size_t row = (size_t)blockIdx.x * C;
    const uint16_t* x = inp + row;
    const float* dy = dout + row;
    float* dx = dinp + row;
    uint16_t* dx16 = dinp16 + row;
    float m = mean[blockIdx.x], r = rstd[blockIdx.x];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float g = dy[c] * weight[c];
        g_sum += g;
        gx_sum += g * (act_ld(x, c) - m) * r;
    }
    float g_mean = block_sum(g_sum, shared) / C;
    float gx_mean = block_sum(gx_sum, shared) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = dx[c] + rr_layernorm_dx(dy[c], act_ld(x, c), weight[c], m, r, g_mean, gx_mean);
        dx[c] = v;
        dx16[c] = rr_f32_to_bf16(v);
    }
}
void cuda_bf16a_layernorm_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                       const float* dout, const float* inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C) {
    if (!(dinp && dinp16)) {
        cuda_bf16a_layernorm_backward(be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
        return;
    }
    if (N > 0) {
        layernorm_backward_input_b16_kernel<<<N, norm_block_size(C), 0, cuda_stream(be)>>>(
            dinp, dinp16, dout, (const uint16_t*)inp, weight, mean, rstd, C);
        cudaCheck(cudaGetLastError());
    }
    layernorm_backward_any(be, NULL, dweight, dbias, dout, (const uint16_t*)inp, weight, mean, rstd, N, C);
}
