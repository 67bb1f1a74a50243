// elementwise.cu — GELU (tanh), SwiGLU and the residual add on CUDA: one thread per element, every
// value from kernel_math.h (checked against the CPU backend by tests/test_kernel_math.c).
// In place is allowed where engine.h says so (out == inp): each thread reads its element before it
// writes it.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

#define ELEMENTWISE_BLOCK 256

// ---- GELU ----------------------------------------------------------------------------------------

// R: the bf16 tables' forward, the stored output rounded to bf16 in the store (act_st, no separate pass)
// A: the activations' storage (float, or uint16_t bf16 words on the bf16-activation table; cuda_common.cuh)
template <bool R, typename A>
static __global__ void gelu_forward_kernel(A* out, const A* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) act_st<R>(out, i, rr_gelu_tanh(act_ld(inp, i)));
}
static void gelu_forward_cuda(float* out, const float* inp, size_t n, bool round, cudaStream_t stream) {
    if (n == 0) return;
    if (round) {
        gelu_forward_kernel<true><<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, stream>>>(out, inp, n);
    } else {
        gelu_forward_kernel<false><<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, stream>>>(out, inp, n);
    }
    cudaCheck(cudaGetLastError());
}

template <typename A>
static __global__ void gelu_backward_kernel(float* dinp, const float* dout, const A* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dinp[i] += rr_gelu_tanh_grad(act_ld(inp, i)) * dout[i];
}
template <typename A>
static void gelu_backward_cuda(float* dinp, const float* dout, const A* inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    gelu_backward_kernel<<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, stream>>>(dinp, dout, inp, n);
    cudaCheck(cudaGetLastError());
}

void cuda_gelu_forward(const Backend* be, float* out, const float* inp, size_t n) {
    gelu_forward_cuda(out, inp, n, false, cuda_stream(be));
}
void cuda_bf16_gelu_forward(const Backend* be, float* out, const float* inp, size_t n) {
    gelu_forward_cuda(out, inp, n, true, cuda_stream(be));
}
void cuda_gelu_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n) {
    gelu_backward_cuda(dinp, dout, inp, n, cuda_stream(be));
}

// ---- SwiGLU --------------------------------------------------------------------------------------

template <bool R, typename A>
static __global__ void swiglu_forward_kernel(A* out, const A* gate, const A* up, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) act_st<R>(out, i, rr_swiglu(act_ld(gate, i), act_ld(up, i)));
}
static void swiglu_forward_cuda(float* out, const float* gate, const float* up, size_t n, bool round, cudaStream_t stream) {
    if (n == 0) return;
    unsigned g = ceil_div_z(n, ELEMENTWISE_BLOCK);
    if (round) {
        swiglu_forward_kernel<true><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, gate, up, n);
    } else {
        swiglu_forward_kernel<false><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, gate, up, n);
    }
    cudaCheck(cudaGetLastError());
}

// dgate / dup may be NULL (split backward)
template <typename A>
static __global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout, const A* gate,
                                              const A* up, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float dg, du;
    rr_swiglu_grad(dout[i], act_ld(gate, i), act_ld(up, i), &dg, &du);
    if (dgate) dgate[i] += dg;
    if (dup) dup[i] += du;
}
template <typename A>
static void swiglu_backward_cuda(float* dgate, float* dup, const float* dout, const A* gate, const A* up,
                                 size_t n, cudaStream_t stream) {
    if (n == 0 || (!dgate && !dup)) return;
    swiglu_backward_kernel<<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, stream>>>(dgate, dup, dout, gate,
                                                                                               up, n);
    cudaCheck(cudaGetLastError());
}

void cuda_swiglu_forward(const Backend* be, float* out, const float* gate, const float* up, size_t n) {
    swiglu_forward_cuda(out, gate, up, n, false, cuda_stream(be));
}
void cuda_bf16_swiglu_forward(const Backend* be, float* out, const float* gate, const float* up, size_t n) {
    swiglu_forward_cuda(out, gate, up, n, true, cuda_stream(be));
}
void cuda_swiglu_backward(const Backend* be, float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) {
    swiglu_backward_cuda(dgate, dup, dout, gate, up, n, cuda_stream(be));
}

// ---- add -----------------------------------------------------------------------------------------

template <bool R, typename A>
static __global__ void add_forward_kernel(A* out, const A* a, const A* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) act_st<R>(out, i, act_ld(a, i) + act_ld(b, i));
}
static void add_forward_cuda(float* out, const float* a, const float* b, size_t n, bool round, cudaStream_t stream) {
    if (n == 0) return;
    unsigned g = ceil_div_z(n, ELEMENTWISE_BLOCK);
    if (round) {
        add_forward_kernel<true><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, a, b, n);
    } else {
        add_forward_kernel<false><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, a, b, n);
    }
    cudaCheck(cudaGetLastError());
}

void cuda_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n) {
    add_forward_cuda(out, a, b, n, false, cuda_stream(be));
}
void cuda_bf16_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n) {
    add_forward_cuda(out, a, b, n, true, cuda_stream(be));
}

// ---- the bf16-activation table (Backend.act_dtype = DTYPE_BF16): activations are 2-byte bf16 words, the
// values and rounding points the bf16 table's (act_st<true>), gradients f32 ----------------------------------

void cuda_bf16a_gelu_forward(const Backend* be, float* out, const float* inp, size_t n) {
    if (n == 0) return;
    gelu_forward_kernel<true><<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, cuda_stream(be)>>>(
        (uint16_t*)out, (const uint16_t*)inp, n);
    cudaCheck(cudaGetLastError());
}
void cuda_bf16a_gelu_backward(const Backend* be, float* dinp, const float* dout, const float* inp, size_t n) {
    gelu_backward_cuda(dinp, dout, (const uint16_t*)inp, n, cuda_stream(be));
}
void cuda_bf16a_swiglu_forward(const Backend* be, float* out, const float* gate, const float* up, size_t n) {
    if (n == 0) return;
    swiglu_forward_kernel<true><<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, cuda_stream(be)>>>(
        (uint16_t*)out, (const uint16_t*)gate, (const uint16_t*)up, n);
    cudaCheck(cudaGetLastError());
}
void cuda_bf16a_swiglu_backward(const Backend* be, float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                size_t n) {
    swiglu_backward_cuda(dgate, dup, dout, (const uint16_t*)gate, (const uint16_t*)up, n, cuda_stream(be));
}
void cuda_bf16a_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n) {
    if (n == 0) return;
    add_forward_kernel<true><<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, cuda_stream(be)>>>(
        (uint16_t*)out, (const uint16_t*)a, (const uint16_t*)b, n);
    cudaCheck(cudaGetLastError());
}
// the residual add after a TP all-reduce: a 2-byte residual plus the f32 sum of the row-parallel partials
static __global__ void add_f32_forward_kernel(uint16_t* out, const uint16_t* a, const float* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) act_st<true>(out, i, act_ld(a, i) + b[i]);
}
void cuda_bf16a_add_f32_forward(const Backend* be, float* out, const float* a, const float* b, size_t n) {
    if (n == 0) return;
    add_f32_forward_kernel<<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, cuda_stream(be)>>>(
        (uint16_t*)out, (const uint16_t*)a, b, n);
    cudaCheck(cudaGetLastError());
}

// ---- 2-byte output gradients (the bf16-activation table, issue 20) -------------------------------------------
// SwiGLU backward storing d(gate), d(up) as 2-byte bf16 words: bf16(0 + gradient), the value the f32 kernel adds into
// a zeroed buffer, narrowed (what the GEMMs reading them took from their conversion); the buffers are overwritten.
static __global__ void swiglu_backward_b16_kernel(uint16_t* dgate, uint16_t* dup, const float* dout, const uint16_t* gate,
                                                  const uint16_t* up, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float dg, du;
    rr_swiglu_grad(dout[i], act_ld(gate, i), act_ld(up, i), &dg, &du);
    if (dgate) dgate[i] = rr_f32_to_bf16(0.0f + dg);
    if (dup) dup[i] = rr_f32_to_bf16(0.0f + du);
}
void cuda_bf16a_swiglu_backward_b16(const Backend* be, uint16_t* dgate16, uint16_t* dup16, const float* dout,
                                    const float* gate, const float* up, size_t n) {
    if (n == 0 || (!dgate16 && !dup16)) return;
    swiglu_backward_b16_kernel<<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, cuda_stream(be)>>>(
        dgate16, dup16, dout, (const uint16_t*)gate, (const uint16_t*)up, n);
    cudaCheck(cudaGetLastError());
}
