// clip_ops.cu — the CLIP tower's ops on CUDA (engine.h: act_forward / act_backward, rows_gather_forward /
// _backward): one thread per element (the activation's forward: per 8-value group), every activation value
// from kernel_math.h (the CPU backend's functions, engine/cpu/act.c).
//
// rows_gather's backward scatters into table rows that many (row, tap) pairs share (the position
// embedding's 16 bicubic taps, the class embedding's one row), with float atomicAdd as embedding.cu's
// backward: the order of the adds varies between runs, so the table gradient can differ in the last bits
// from run to run (within fp32 round-off of the CPU's in-order sum).
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"
#include "engine/cuda/kernel_math.h"

#define CLIP_BLOCK 256

// A: the activations' storage (float, or uint16_t bf16 words with 2-byte activations; cuda_common.cuh); R: the
// stored value rounded to bf16 in the store
// VEC: one 8-value group a thread through 16-byte loads and stores (cuda_common.cuh: out and inp 16-byte
// aligned; the tail value by value); the same values either way
template <bool R, bool VEC, typename A>
static __global__ void act_forward_kernel(A* out, const A* inp, size_t n, int act) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    float v[8];
    ldg8<VEC>(inp, i0, n, v);
    for (int j = 0; j < 8; j++) v[j] = act == ACT_GELU_ERF ? rr_gelu_erf(v[j]) : rr_quick_gelu(v[j]);
    stg8<VEC, R>(out, i0, n, v);
}
template <bool R, typename A>
static void act_forward_launch(A* out, const A* inp, size_t n, Act act, cudaStream_t stream) {
    if (n == 0) return;
    unsigned g = groups_grid(n, CLIP_BLOCK);
    bool vec = aligned16(out) && aligned16(inp);
    cuda_bw_path_note(vec ? RR_BW_VEC : RR_BW_SCALAR);
    if (vec) {
        act_forward_kernel<R, true><<<g, CLIP_BLOCK, 0, stream>>>(out, inp, n, (int)act);
    } else {
        act_forward_kernel<R, false><<<g, CLIP_BLOCK, 0, stream>>>(out, inp, n, (int)act);
    }
    cudaCheck(cudaGetLastError());
}
template <typename A>
static __global__ void act_backward_kernel(float* dinp, const float* dout, const A* inp, size_t n, int act) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = act_ld(inp, i);
    double g = act == ACT_GELU_ERF ? rr_gelu_erf_grad(x) : rr_quick_gelu_grad(x);
    dinp[i] += (float)(g * dout[i]);
}

void cuda_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        cuda_gelu_forward(be, out, inp, n);
        return;
    }
    act_forward_launch<false>(out, inp, n, act, cuda_stream(be));
}
void cuda_act_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        cuda_gelu_backward(be, dinp, dout, inp, n);
        return;
    }
    if (n == 0) return;
    act_backward_kernel<<<ceil_div_z(n, CLIP_BLOCK), CLIP_BLOCK, 0, cuda_stream(be)>>>(dinp, dout, inp, n, (int)act);
    cudaCheck(cudaGetLastError());
}

// out[n, c] += sum_k w[n K + k] table[idx[n K + k], c], the taps in order (as the CPU's loop); A: out's and table's
// storage, R: the sum rounded to bf16 in the store
template <bool R, typename A>
static __global__ void rows_gather_forward_kernel(A* out, const int* idx, const float* w, const A* table, int N, int K,
                                                  int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    float acc = act_ld(out, i);
    for (int k = 0; k < K; k++) {
        int r = idx[(size_t)n * K + k];
        if (r < 0) continue;
        float a = w ? w[(size_t)n * K + k] : 1.0f;
        acc += a * act_ld(table, (size_t)r * C + c);
    }
    act_st<R>(out, i, acc);
}
static __global__ void rows_gather_backward_kernel(float* dtable, const float* dout, const int* idx, const float* w, int N,
                                                   int K, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    float dy = dout[i];
    for (int k = 0; k < K; k++) {
        int r = idx[(size_t)n * K + k];
        if (r < 0) continue;
        float a = w ? w[(size_t)n * K + k] : 1.0f;
        atomicAdd(&dtable[(size_t)r * C + c], a * dy);
    }
}

void cuda_rows_gather_forward(const Backend* be, float* out, const int* idx, const float* w, const float* table, int N, int K,
                              int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    rows_gather_forward_kernel<false><<<ceil_div_z(n, CLIP_BLOCK), CLIP_BLOCK, 0, cuda_stream(be)>>>(out, idx, w, table, N, K,
                                                                                                     C);
    cudaCheck(cudaGetLastError());
}
void cuda_rows_gather_backward(const Backend* be, float* dtable, const float* dout, const int* idx, const float* w, int N,
                               int K, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    rows_gather_backward_kernel<<<ceil_div_z(n, CLIP_BLOCK), CLIP_BLOCK, 0, cuda_stream(be)>>>(dtable, dout, idx, w, N, K, C);
    cudaCheck(cudaGetLastError());
}

// bf16 tables: the outputs are activations the GPU stores in bf16, rounded in the kernel's store (act_st<true>
// into an f32 word: rr_bf16_round of the f32 value, what a rounding pass after the f32 op gives)
void cuda_bf16_act_forward(const Backend* be, float* out, const float* inp, size_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        cuda_bf16_gelu_forward(be, out, inp, n);
        return;
    }
    act_forward_launch<true>(out, inp, n, act, cuda_stream(be));
}
void cuda_bf16_rows_gather_forward(const Backend* be, float* out, const int* idx, const float* w, const float* table, int N,
                                   int K, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    rows_gather_forward_kernel<true><<<ceil_div_z(n, CLIP_BLOCK), CLIP_BLOCK, 0, cuda_stream(be)>>>(out, idx, w, table, N, K,
                                                                                                    C);
    cudaCheck(cudaGetLastError());
}

// 2-byte activations (Bufs of DTYPE_BF16 on the bf16 table): out, inp and the gather's table are 2-byte bf16 words
// (engine.h), the values and rounding points the bf16 table's (its rounding pass after the f32 op gives the same).
void cuda_bf16a_act_forward(const Backend* be, uint16_t* out, const uint16_t* inp, size_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        cuda_bf16a_gelu_forward(be, out, inp, n);
        return;
    }
    act_forward_launch<true>(out, inp, n, act, cuda_stream(be));
}
void cuda_bf16a_act_backward(const Backend* be, float* dinp, const float* dout, const uint16_t* inp, size_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        cuda_bf16a_gelu_backward(be, dinp, dout, inp, n);
        return;
    }
    if (n == 0) return;
    act_backward_kernel<<<ceil_div_z(n, CLIP_BLOCK), CLIP_BLOCK, 0, cuda_stream(be)>>>(dinp, dout, inp, n,
                                                                                     (int)act);
    cudaCheck(cudaGetLastError());
}
void cuda_bf16a_rows_gather_forward(const Backend* be, uint16_t* out, const int* idx, const float* w, const uint16_t* table, int N,
                                    int K, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    rows_gather_forward_kernel<true><<<ceil_div_z(n, CLIP_BLOCK), CLIP_BLOCK, 0, cuda_stream(be)>>>(
        out, idx, w, table, N, K, C);
    cudaCheck(cudaGetLastError());
}

// ---- 2-byte output gradients (2-byte activations) -------------------------------------------------------
// act_backward (GELU tanh: gelu_backward's expression) adding into the f32 dinp and storing the final value as 2-byte
// bf16 too, in the same pass: the copy the next GEMM reads, the f32 one for the bias gradient
static __global__ void act_backward_b16_kernel(float* dinp, uint16_t* dinp16, const float* dout, const uint16_t* inp,
                                               size_t n, int act) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = act_ld(inp, i), v;
    if (act == ACT_GELU_TANH) {
        v = dinp[i] + rr_gelu_tanh_grad(x) * dout[i];
    } else {
        double g = act == ACT_GELU_ERF ? rr_gelu_erf_grad(x) : rr_quick_gelu_grad(x);
        v = dinp[i] + (float)(g * dout[i]);
    }
    dinp[i] = v;
    dinp16[i] = rr_f32_to_bf16(v);
}
void cuda_bf16a_act_backward_b16(const Backend* be, float* dinp, uint16_t* dinp16, const float* dout, const uint16_t* inp,
                                 size_t n, Act act) {
    if (!dinp16) {
        if (act == ACT_GELU_TANH) cuda_bf16a_gelu_backward(be, dinp, dout, inp, n);
        else cuda_bf16a_act_backward(be, dinp, dout, inp, n, act);
        return;
    }
    if (n == 0) return;
    act_backward_b16_kernel<<<ceil_div_z(n, CLIP_BLOCK), CLIP_BLOCK, 0, cuda_stream(be)>>>(dinp, dinp16, dout,
                                                                                        inp, n, (int)act);
    cudaCheck(cudaGetLastError());
}
