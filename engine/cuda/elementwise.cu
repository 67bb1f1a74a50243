// elementwise.cu — GELU (tanh), SwiGLU and the residual add on CUDA, every value from kernel_math.h
// (checked against the CPU backend by tests/engine/cuda/test_kernel_math.c). The forward kernels take one 8-value group a
// thread (cuda_common.cuh: 16-byte loads and stores where every pointer is 16-byte aligned, the tail of n
// value by value); the backward kernels one thread per element.
// In place is allowed where engine.h says so (out == inp): each thread reads its values before it
// writes them.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

#define ELEMENTWISE_BLOCK 256

// the vector path of a forward launch: every pointer 16-byte aligned (a group i0 = 8 g is then aligned in
// either storage)
static bool ew_vec(const void* a, const void* b = NULL, const void* c = NULL) {
    return aligned16(a) && aligned16(b) && aligned16(c);
}

// ---- GELU ----------------------------------------------------------------------------------------

// R: the bf16 tables' forward, the stored output rounded to bf16 in the store (act_st, no separate pass)
// A: the activations' storage (float, or uint16_t bf16 words with 2-byte activations; cuda_common.cuh)
// VEC: 16-byte loads and stores (ew_vec); the same values either way
template <bool R, bool VEC, typename A>
static __global__ void gelu_forward_kernel(A* out, const A* inp, size_t n) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    float v[8];
    ldg8<VEC>(inp, i0, n, v);
    for (int j = 0; j < 8; j++) v[j] = rr_gelu_tanh(v[j]);
    stg8<VEC, R>(out, i0, n, v);
}
template <bool R, typename A>
static void gelu_forward_launch(A* out, const A* inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    unsigned g = groups_grid(n, ELEMENTWISE_BLOCK);
    bool vec = ew_vec(out, inp);
    cuda_bw_path_note(vec ? RR_BW_VEC : RR_BW_SCALAR);
    if (vec) {
        gelu_forward_kernel<R, true><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, inp, n);
    } else {
        gelu_forward_kernel<R, false><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, inp, n);
    }
    cudaCheck(cudaGetLastError());
}
static void gelu_forward_cuda(float* out, const float* inp, size_t n, bool round, cudaStream_t stream) {
    if (round)
        gelu_forward_launch<true>(out, inp, n, stream);
    else
        gelu_forward_launch<false>(out, inp, n, stream);
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

template <bool R, bool VEC, typename A>
static __global__ void swiglu_forward_kernel(A* out, const A* gate, const A* up, size_t n) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    float g[8], u[8];
    ldg8<VEC>(gate, i0, n, g);
    ldg8<VEC>(up, i0, n, u);
    for (int j = 0; j < 8; j++) g[j] = rr_swiglu(g[j], u[j]);
    stg8<VEC, R>(out, i0, n, g);
}
template <bool R, typename A>
static void swiglu_forward_launch(A* out, const A* gate, const A* up, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    unsigned g = groups_grid(n, ELEMENTWISE_BLOCK);
    bool vec = ew_vec(out, gate, up);
    cuda_bw_path_note(vec ? RR_BW_VEC : RR_BW_SCALAR);
    if (vec) {
        swiglu_forward_kernel<R, true><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, gate, up, n);
    } else {
        swiglu_forward_kernel<R, false><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, gate, up, n);
    }
    cudaCheck(cudaGetLastError());
}
static void swiglu_forward_cuda(float* out, const float* gate, const float* up, size_t n, bool round, cudaStream_t stream) {
    if (round)
        swiglu_forward_launch<true>(out, gate, up, n, stream);
    else
        swiglu_forward_launch<false>(out, gate, up, n, stream);
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

// B: b's storage (A, or f32 words: the residual add after a TP all-reduce, add_f32_forward)
template <bool R, bool VEC, typename A, typename B>
static __global__ void add_forward_kernel(A* out, const A* a, const B* b, size_t n) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    float x[8], y[8];
    ldg8<VEC>(a, i0, n, x);
    ldg8<VEC>(b, i0, n, y);
    for (int j = 0; j < 8; j++) x[j] = x[j] + y[j];
    stg8<VEC, R>(out, i0, n, x);
}
template <bool R, typename A, typename B>
static void add_forward_launch(A* out, const A* a, const B* b, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    unsigned g = groups_grid(n, ELEMENTWISE_BLOCK);
    bool vec = ew_vec(out, a, b);
    cuda_bw_path_note(vec ? RR_BW_VEC : RR_BW_SCALAR);
    if (vec) {
        add_forward_kernel<R, true><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, a, b, n);
    } else {
        add_forward_kernel<R, false><<<g, ELEMENTWISE_BLOCK, 0, stream>>>(out, a, b, n);
    }
    cudaCheck(cudaGetLastError());
}
static void add_forward_cuda(float* out, const float* a, const float* b, size_t n, bool round, cudaStream_t stream) {
    if (round)
        add_forward_launch<true>(out, a, b, n, stream);
    else
        add_forward_launch<false>(out, a, b, n, stream);
}

void cuda_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n) {
    add_forward_cuda(out, a, b, n, false, cuda_stream(be));
}
void cuda_bf16_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n) {
    add_forward_cuda(out, a, b, n, true, cuda_stream(be));
}

// ---- 2-byte activations (Bufs of DTYPE_BF16 on the bf16 table): activations are 2-byte bf16 words, the
// values and rounding points the bf16 table's (act_st<true>), gradients f32 ----------------------------------

void cuda_bf16a_gelu_forward(const Backend* be, uint16_t* out, const uint16_t* inp, size_t n) {
    gelu_forward_launch<true>(out, inp, n, cuda_stream(be));
}
void cuda_bf16a_gelu_backward(const Backend* be, float* dinp, const float* dout, const uint16_t* inp, size_t n) {
    gelu_backward_cuda(dinp, dout, inp, n, cuda_stream(be));
}
void cuda_bf16a_swiglu_forward(const Backend* be, uint16_t* out, const uint16_t* gate, const uint16_t* up, size_t n) {
    swiglu_forward_launch<true>(out, gate, up, n, cuda_stream(be));
}
void cuda_bf16a_swiglu_backward(const Backend* be, float* dgate, float* dup, const float* dout, const uint16_t* gate, const uint16_t* up,
                                size_t n) {
    swiglu_backward_cuda(dgate, dup, dout, gate, up, n, cuda_stream(be));
}
void cuda_bf16a_add_forward(const Backend* be, uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
    add_forward_launch<true>(out, a, b, n, cuda_stream(be));
}
// the residual add after a TP all-reduce: a 2-byte residual plus the f32 sum of the row-parallel partials
void cuda_bf16a_add_f32_forward(const Backend* be, uint16_t* out, const uint16_t* a, const float* b, size_t n) {
    add_forward_launch<true>(out, a, b, n, cuda_stream(be));
}

// ---- 2-byte output gradients (2-byte activations) -------------------------------------------------------
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
                                    const uint16_t* gate, const uint16_t* up, size_t n) {
    if (n == 0 || (!dgate16 && !dup16)) return;
    swiglu_backward_b16_kernel<<<ceil_div_z(n, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, cuda_stream(be)>>>(
        dgate16, dup16, dout, gate, up, n);
    cudaCheck(cudaGetLastError());
}
