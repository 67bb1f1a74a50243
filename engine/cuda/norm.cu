// norm.cu — LayerNorm and RMSNorm on CUDA (ggml norm.cu style: both norms in one file).
//
// Forward and the input gradient: one block per row; the row sums are block reductions and every
// value comes from kernel_math.h (rr_layernorm_*, rr_rmsnorm_*), the same functions
// tests/engine/cuda/test_kernel_math.c checks against the CPU backend. Weight / bias gradients are
// deterministic column sums over the rows (cuda_common.cuh). Sums are in float (the CPU reference
// uses double): for the widths here (C <= a few thousand) the difference is a few float eps.
//
// The forward kernels read a row once: thread t of the block owns the 8-value groups t, t + T, ... of the
// row (T = norm_forward_block(C), a function of C only), loads them with 16-byte vectors where the row and
// the weights are 16-byte aligned and C a multiple of 8 (cuda_common.cuh, ldg8), keeps the first
// NORM_GROUPS_REG of them in registers for the second pass (C up to 8192 at T = 256: the row is read from
// memory once) and stores the output the same way. A thread adds its values group by group in index order;
// the block sum adds the thread sums (block_sum): the same order for every storage (f32 words or 2-byte bf16),
// so the bf16 table's two storages give the same bits.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

// threads for a per-row block: a multiple of 32, no more than 256, no more than C needs
static int norm_block_size(int C) {
    int t = ((C + 31) / 32) * 32;
    return t < 32 ? 32 : (t > 256 ? 256 : t);
}

// threads for a forward row: one per 8-value group up to 256, a multiple of 32 (C only: the sum order)
static int norm_forward_block(int C) {
    int t = ((C + 7) / 8 + 31) / 32 * 32;
    return t < 32 ? 32 : (t > 256 ? 256 : t);
}
#define NORM_GROUPS_REG 4 // 8-value groups a thread keeps in registers between the passes

// ---- LayerNorm -----------------------------------------------------------------------------------

// R: round the stored output to bf16 in the store (the bf16 table's rounding point, no separate pass)
// A: the activations' storage (float, or uint16_t bf16 words with 2-byte activations; cuda_common.cuh)
// VEC: 16-byte loads and stores (C a multiple of 8, every pointer 16-byte aligned); the same values either way
// group g of the output row y from its inputs v
template <bool VEC, bool R, typename A>
static __device__ inline void layernorm_out8(A* y, const float v[8], const float* weight, const float* bias, int g, int C,
                                             float m, float r) {
    float w[8], b[8], o[8];
    ldg8<VEC>(weight, (size_t)g * 8, C, w);
    ldg8<VEC>(bias, (size_t)g * 8, C, b);
    for (int j = 0; j < 8; j++) o[j] = rr_layernorm_out(v[j], m, r, w[j], b[j]);
    stg8<VEC, R>(y, (size_t)g * 8, C, o);
}
template <bool R, bool VEC, typename A>
static __global__ void layernorm_forward_kernel(A* out, float* mean, float* rstd, const A* inp,
                                                const float* weight, const float* bias, int C) {
    __shared__ float shared[32];
    const A* x = inp + (size_t)blockIdx.x * C;
    A* y = out + (size_t)blockIdx.x * C;
    int ng = (C + 7) / 8, T = blockDim.x;
    float xr[NORM_GROUPS_REG][8];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_GROUPS_REG; k++) {
        int g = threadIdx.x + k * T;
        if (g < ng) {
            ldg8<VEC>(x, (size_t)g * 8, C, xr[k]);
            for (int j = 0; j < 8; j++)
                if (g * 8 + j < C) s += xr[k][j];
        }
    }
    for (int g = threadIdx.x + NORM_GROUPS_REG * T; g < ng; g += T) {
        float v[8];
        ldg8<VEC>(x, (size_t)g * 8, C, v);
        for (int j = 0; j < 8; j++)
            if (g * 8 + j < C) s += v[j];
    }
    float m = rr_layernorm_mean(block_sum(s, shared), C);
    float ssd = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_GROUPS_REG; k++) {
        int g = threadIdx.x + k * T;
        if (g < ng)
            for (int j = 0; j < 8; j++)
                if (g * 8 + j < C) {
                    float dx = xr[k][j] - m;
                    ssd += dx * dx;
                }
    }
    for (int g = threadIdx.x + NORM_GROUPS_REG * T; g < ng; g += T) {
        float v[8];
        ldg8<VEC>(x, (size_t)g * 8, C, v);
        for (int j = 0; j < 8; j++)
            if (g * 8 + j < C) {
                float dx = v[j] - m;
                ssd += dx * dx;
            }
    }
    float r = rr_layernorm_rstd(block_sum(ssd, shared), C);
#pragma unroll
    for (int k = 0; k < NORM_GROUPS_REG; k++) {
        int g = threadIdx.x + k * T;
        if (g < ng) layernorm_out8<VEC, R>(y, xr[k], weight, bias, g, C, m, r);
    }
    for (int g = threadIdx.x + NORM_GROUPS_REG * T; g < ng; g += T) {
        float v[8];
        ldg8<VEC>(x, (size_t)g * 8, C, v);
        layernorm_out8<VEC, R>(y, v, weight, bias, g, C, m, r);
    }
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
}
template <bool R, typename A>
static void layernorm_forward_launch(A* out, float* mean, float* rstd, const A* inp, const float* weight,
                                     const float* bias, int N, int C, cudaStream_t stream) {
    if (N == 0) return;
    int T = norm_forward_block(C);
    bool vec = C % 8 == 0 && aligned16(out) && aligned16(inp) && aligned16(weight) && aligned16(bias);
    cuda_bw_path_note(vec ? RR_BW_VEC : RR_BW_SCALAR);
    if (vec) {
        layernorm_forward_kernel<R, true><<<N, T, 0, stream>>>(out, mean, rstd, inp, weight, bias, C);
    } else {
        layernorm_forward_kernel<R, false><<<N, T, 0, stream>>>(out, mean, rstd, inp, weight, bias, C);
    }
    cudaCheck(cudaGetLastError());
}
static void layernorm_forward_cuda(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                   const float* bias, int N, int C, bool round, cudaStream_t stream) {
    if (round)
        layernorm_forward_launch<true>(out, mean, rstd, inp, weight, bias, N, C, stream);
    else
        layernorm_forward_launch<false>(out, mean, rstd, inp, weight, bias, N, C, stream);
}
static void layernorm_forward_bf16a_cuda(uint16_t* out, float* mean, float* rstd, const uint16_t* inp, const float* weight,
                                         const float* bias, int N, int C, cudaStream_t stream) {
    layernorm_forward_launch<true>(out, mean, rstd, inp, weight, bias, N, C, stream);
}

// dinp += the input gradient; dinp16 (NULL: none) the sum's final value as 2-byte bf16 too, in the same store (the
// 2-byte copy a GEMM reads next: engine.h, "2-byte output gradients")
template <typename A>
static __global__ void layernorm_backward_input_kernel(float* dinp, uint16_t* dinp16, const float* dout, const A* inp,
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
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = dx[c] + rr_layernorm_dx(dy[c], act_ld(x, c), weight[c], m, r, g_mean, gx_mean);
        dx[c] = v;
        if (dinp16) dinp16[row + c] = rr_f32_to_bf16(v);
    }
}
template <typename A>
static void layernorm_backward_input_cuda(float* dinp, uint16_t* dinp16, const float* dout, const A* inp, const float* weight,
                                          const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
    if (N == 0) return;
    layernorm_backward_input_kernel<<<N, norm_block_size(C), 0, stream>>>(dinp, dinp16, dout, inp, weight, mean, rstd, C);
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
    // columns c .. c + 7 (column_sum's 16-byte path): the values operator() gives
    __device__ void vec8(int n, int c, float v[8]) const {
        size_t i = (size_t)n * C + c;
        float d[8], x[8], m = mean[n], r = rstd[n];
        ld8(dout + i, d);
        ld8(inp + i, x);
        for (int j = 0; j < 8; j++) v[j] = d[j] * (x[j] - m) * r;
    }
    bool vec_ok(int C_) const { return C_ % 8 == 0 && aligned16(dout) && aligned16(inp); }
};
struct RowsOfDout {
    const float* dout;
    int C;
    __device__ float operator()(int n, int c) const { return dout[(size_t)n * C + c]; }
    __device__ void vec8(int n, int c, float v[8]) const { ld8(dout + (size_t)n * C + c, v); }
    bool vec_ok(int C_) const { return C_ % 8 == 0 && aligned16(dout); }
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
    if (dinp) layernorm_backward_input_cuda(dinp, (uint16_t*)NULL, dout, inp, weight, mean, rstd, N, C, cuda_stream(be));
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
// 2-byte activations (Bufs of DTYPE_BF16 on the bf16 table): inp / out are 2-byte bf16 words
void cuda_bf16a_layernorm_forward(const Backend* be, uint16_t* out, float* mean, float* rstd, const uint16_t* inp, const float* weight,
                                  const float* bias, int N, int C) {
    layernorm_forward_bf16a_cuda(out, mean, rstd, inp, weight, bias, N, C, cuda_stream(be));
}
void cuda_bf16a_layernorm_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp,
                                   const float* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_any(be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

// ---- RMSNorm -------------------------------------------------------------------------------------

// R, A, VEC: as layernorm_forward_kernel's
template <bool VEC, bool R, typename A>
static __device__ inline void rmsnorm_out8(A* y, const float v[8], const float* weight, int g, int C, float r) {
    float w[8], o[8];
    ldg8<VEC>(weight, (size_t)g * 8, C, w);
    for (int j = 0; j < 8; j++) o[j] = rr_rmsnorm_out(v[j], r, w[j]);
    stg8<VEC, R>(y, (size_t)g * 8, C, o);
}
template <bool R, bool VEC, typename A>
static __global__ void rmsnorm_forward_kernel(A* out, float* rstd, const A* inp, const float* weight, int C,
                                              float eps) {
    __shared__ float shared[32];
    const A* x = inp + (size_t)blockIdx.x * C;
    A* y = out + (size_t)blockIdx.x * C;
    int ng = (C + 7) / 8, T = blockDim.x;
    float xr[NORM_GROUPS_REG][8];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_GROUPS_REG; k++) {
        int g = threadIdx.x + k * T;
        if (g < ng) {
            ldg8<VEC>(x, (size_t)g * 8, C, xr[k]);
            for (int j = 0; j < 8; j++)
                if (g * 8 + j < C) ss += xr[k][j] * xr[k][j];
        }
    }
    for (int g = threadIdx.x + NORM_GROUPS_REG * T; g < ng; g += T) {
        float v[8];
        ldg8<VEC>(x, (size_t)g * 8, C, v);
        for (int j = 0; j < 8; j++)
            if (g * 8 + j < C) ss += v[j] * v[j];
    }
    float r = rr_rmsnorm_rstd(block_sum(ss, shared), C, eps);
#pragma unroll
    for (int k = 0; k < NORM_GROUPS_REG; k++) {
        int g = threadIdx.x + k * T;
        if (g < ng) rmsnorm_out8<VEC, R>(y, xr[k], weight, g, C, r);
    }
    for (int g = threadIdx.x + NORM_GROUPS_REG * T; g < ng; g += T) {
        float v[8];
        ldg8<VEC>(x, (size_t)g * 8, C, v);
        rmsnorm_out8<VEC, R>(y, v, weight, g, C, r);
    }
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}
template <bool R, typename A>
static void rmsnorm_forward_launch(A* out, float* rstd, const A* inp, const float* weight, int N, int C, double eps,
                                   cudaStream_t stream) {
    if (N == 0) return;
    int T = norm_forward_block(C);
    bool vec = C % 8 == 0 && aligned16(out) && aligned16(inp) && aligned16(weight);
    cuda_bw_path_note(vec ? RR_BW_VEC : RR_BW_SCALAR);
    if (vec) {
        rmsnorm_forward_kernel<R, true><<<N, T, 0, stream>>>(out, rstd, inp, weight, C, (float)eps);
    } else {
        rmsnorm_forward_kernel<R, false><<<N, T, 0, stream>>>(out, rstd, inp, weight, C, (float)eps);
    }
    cudaCheck(cudaGetLastError());
}
static void rmsnorm_forward_cuda(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                 double eps, bool round, cudaStream_t stream) {
    if (round)
        rmsnorm_forward_launch<true>(out, rstd, inp, weight, N, C, eps, stream);
    else
        rmsnorm_forward_launch<false>(out, rstd, inp, weight, N, C, eps, stream);
}

// dinp += the input gradient; dinp16 (NULL: none) its final value as 2-byte bf16 too (as LayerNorm's)
template <typename A>
static __global__ void rmsnorm_backward_input_kernel(float* dinp, uint16_t* dinp16, const float* dout, const A* inp,
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
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = dx[c] + rr_rmsnorm_dx(dy[c], act_ld(x, c), weight[c], r, gx_mean);
        dx[c] = v;
        if (dinp16) dinp16[row + c] = rr_f32_to_bf16(v);
    }
}
template <typename A>
static void rmsnorm_backward_input_cuda(float* dinp, uint16_t* dinp16, const float* dout, const A* inp, const float* weight,
                                        const float* rstd, int N, int C, cudaStream_t stream) {
    if (N == 0) return;
    rmsnorm_backward_input_kernel<<<N, norm_block_size(C), 0, stream>>>(dinp, dinp16, dout, inp, weight, rstd, C);
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
    __device__ void vec8(int n, int c, float v[8]) const {
        size_t i = (size_t)n * C + c;
        float d[8], x[8], r = rstd[n];
        ld8(dout + i, d);
        ld8(inp + i, x);
        for (int j = 0; j < 8; j++) v[j] = d[j] * x[j] * r;
    }
    bool vec_ok(int C_) const { return C_ % 8 == 0 && aligned16(dout) && aligned16(inp); }
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
    if (dinp) rmsnorm_backward_input_cuda(dinp, (uint16_t*)NULL, dout, inp, weight, rstd, N, C, cuda_stream(be));
    if (dweight) column_sum_cuda(dweight, RmsnormDweight<float>{dout, inp, rstd, C}, N, C, cuda_stream(be));
}
// 2-byte activations: inp / out 2-byte bf16 words, rstd and the gradients f32
void cuda_bf16a_rmsnorm_forward(const Backend* be, uint16_t* out, float* rstd, const uint16_t* inp, const float* weight, int N, int C,
                                double eps) {
    rmsnorm_forward_launch<true>(out, rstd, inp, weight, N, C, eps, cuda_stream(be));
}
void cuda_bf16a_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const uint16_t* inp,
                                 const float* weight, const float* rstd, int N, int C) {
    const uint16_t* x = inp;
    if (dinp) rmsnorm_backward_input_cuda(dinp, (uint16_t*)NULL, dout, x, weight, rstd, N, C, cuda_stream(be));
    if (dweight) column_sum_cuda(dweight, RmsnormDweight<uint16_t>{dout, x, rstd, C}, N, C, cuda_stream(be));
}

// ---- 2-byte output gradients (2-byte activations) -------------------------------------------------------
// RMSNorm / LayerNorm backward adding into the f32 dinp and storing its final value as 2-byte bf16 too (dinp16 =
// rr_f32_to_bf16(dinp), in the same store: the input-gradient kernels' dinp16): the copy a GEMM reads next (the
// residual stream's gradient)
void cuda_bf16a_rmsnorm_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, const float* dout,
                                     const uint16_t* inp, const float* weight, const float* rstd, int N, int C) {
    const uint16_t* x = inp;
    if (dinp) rmsnorm_backward_input_cuda(dinp, dinp16, dout, x, weight, rstd, N, C, cuda_stream(be));
    if (dweight) column_sum_cuda(dweight, RmsnormDweight<uint16_t>{dout, x, rstd, C}, N, C, cuda_stream(be));
}

void cuda_bf16a_layernorm_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                       const float* dout, const uint16_t* inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C) {
    if (!(dinp && dinp16)) {
        cuda_bf16a_layernorm_backward(be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
        return;
    }
    layernorm_backward_input_cuda(dinp, dinp16, dout, inp, weight, mean, rstd, N, C, cuda_stream(be));
    layernorm_backward_any(be, NULL, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

// ---- column-sum scratch (cuda_common.cuh) ---------------------------------------------------------

// The partial buffer of the column sums (COLSUM_SCRATCH_FLOATS f32): one per process, as bf16.cu's GEMM scratch
// (the ops that use it run on the compute stream, one after another). BackendDevice.reserve allocates it; a caller
// that never reserved (the op tests) gets it at its first column sum with more than one chunk.
static float* colsum_scratch;
void cuda_column_sum_reserve(void) {
    if (!colsum_scratch) cuda_malloc_tracked((void**)&colsum_scratch, (size_t)COLSUM_SCRATCH_FLOATS * sizeof(float));
}
float* cuda_column_sum_scratch(void) {
    cuda_column_sum_reserve();
    return colsum_scratch;
}

// ---- which path ran (bw_path.h) ----------------------------------------------------------------------

static long bw_path_counts[RR_BW_PATHS];
void cuda_bw_path_note(int path) {
    if (path >= 0 && path < RR_BW_PATHS) bw_path_counts[path]++;
}
// copies min(n, RR_BW_PATHS) counters; returns RR_BW_PATHS
extern "C" __attribute__((visibility("default"))) int rrfp_cuda_bw_paths(long* counts, int n) {
    for (int i = 0; i < n && i < RR_BW_PATHS; i++) counts[i] = bw_path_counts[i];
    return RR_BW_PATHS;
}
