// rope.cu — rotary position embeddings on CUDA, 1-D (LM) and 2-D (ViT), in place.
//
// One thread per (row, head, pair); the angle and the rotation come from kernel_math.h
// (rr_rope_cos_sin, or rr_rope_inv_freq's Llama-3 frequencies, in double, as the CPU backend does, then
// rr_rope_rotate_pair). The 2-D form is the 1-D rule of dim d/2 on each half of the head, at the patch row
// and at the patch column, both halves in one launch. The backward is the same rotation by -angle (RoPE is
// orthogonal).
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

// The frequencies of one call, by value into the kernel: the LM's RopeFreq, or theta alone (the ViT's).
struct RopeArgs {
    double theta;
    int llama3;
    double factor, low, high, original_max_pos;
};

// Rotate pair j of the n dims at v by sign * pos; R: the bf16 table's forward, the rotated values rounded
// to bf16 in the store (no separate pass).
// A: the activations' storage (float, or uint16_t bf16 words on the bf16-activation table; cuda_common.cuh)
template <bool R, typename A>
static __device__ inline void rope_pair(A* v, int pos, int j, int n, double sign, const RopeArgs& ra) {
    int half = n / 2;
    float c, s;
    if (ra.llama3)
        rr_rope_cos_sin_freq(pos, sign, rr_rope_inv_freq(j, n, ra.theta, 1, ra.factor, ra.low, ra.high, ra.original_max_pos),
                             &c, &s);
    else
        rr_rope_cos_sin(pos, j, n, sign, ra.theta, &c, &s);
    float a = act_ld(v, j), b = act_ld(v, j + half);
    rr_rope_rotate_pair(&a, &b, c, s);
    act_st<R>(v, j, a);
    act_st<R>(v, j + half, b);
}

// Rotate, for every row i and head h, the d dims at x + i*ld + h*d by sign * pos[i].
template <bool R, typename A>
static __global__ void rope_rotate_kernel(A* x, const int* pos, int N, int H, int d, int ld, double sign,
                                          RopeArgs ra) {
    int half = d / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * H * half) return;
    int j = (int)(idx % half);
    int h = (int)((idx / half) % H);
    int i = (int)(idx / ((size_t)half * H));
    rope_pair<R>(x + (size_t)i * ld + (size_t)h * d, pos[i], j, d, sign, ra);
}
// 2-D: both halves of every head in one pass, pairs j < d/4 of the first half by pos_row, the others
// of the second half by pos_col (each the 1-D rule of dim d/2)
template <bool R, typename A>
static __global__ void rope2d_rotate_kernel(A* x, const int* pos_row, const int* pos_col, int N, int H, int d,
                                            int ld, double sign) {
    int half = d / 2, quarter = d / 4;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * H * half) return;
    int j = (int)(idx % half);
    int h = (int)((idx / half) % H);
    int i = (int)(idx / ((size_t)half * H));
    A* v = x + (size_t)i * ld + (size_t)h * d;
    const RopeArgs ra = {RR_ROPE_THETA, 0, 1.0, 1.0, 1.0, 1.0};
    if (j < quarter)
        rope_pair<R>(v, pos_row[i], j, half, sign, ra);
    else
        rope_pair<R>(v + half, pos_col[i], j - quarter, half, sign, ra);
}

static RopeArgs rope_args(const RopeFreq* rf) {
    RopeArgs ra = {rf->theta, rf->llama3, rf->factor, rf->low_freq_factor, rf->high_freq_factor, rf->original_max_pos};
    return ra;
}
static void rope_rotate_cuda(float* x, const int* pos, int N, int H, int d, int ld, double sign, RopeArgs ra, bool round,
                             cudaStream_t stream) {
    size_t threads = (size_t)N * H * (d / 2);
    if (threads == 0) return;
    if (round) {
        rope_rotate_kernel<true><<<ceil_div_z(threads, 256), 256, 0, stream>>>(x, pos, N, H, d, ld, sign, ra);
    } else {
        rope_rotate_kernel<false><<<ceil_div_z(threads, 256), 256, 0, stream>>>(x, pos, N, H, d, ld, sign, ra);
    }
    cudaCheck(cudaGetLastError());
}
static void rope2d_rotate_cuda(float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld, double sign,
                               bool round, cudaStream_t stream) {
    size_t threads = (size_t)N * H * (d / 2);
    if (threads == 0) return;
    if (round) {
        rope2d_rotate_kernel<true><<<ceil_div_z(threads, 256), 256, 0, stream>>>(x, pos_row, pos_col, N, H, d, ld, sign);
    } else {
        rope2d_rotate_kernel<false><<<ceil_div_z(threads, 256), 256, 0, stream>>>(x, pos_row, pos_col, N, H, d, ld, sign);
    }
    cudaCheck(cudaGetLastError());
}

void cuda_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d);
    rope_rotate_cuda(x, pos, N, H, d, ld, 1.0, rope_args(rf), false, cuda_stream(be));
}
void cuda_bf16_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d);
    rope_rotate_cuda(x, pos, N, H, d, ld, 1.0, rope_args(rf), true, cuda_stream(be));
}
void cuda_rope_backward(const Backend* be, float* dx, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d);
    rope_rotate_cuda(dx, pos, N, H, d, ld, -1.0, rope_args(rf), false, cuda_stream(be));
}

void cuda_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d);
    rope2d_rotate_cuda(x, pos_row, pos_col, N, H, d, ld, 1.0, false, cuda_stream(be));
}
void cuda_bf16_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d);
    rope2d_rotate_cuda(x, pos_row, pos_col, N, H, d, ld, 1.0, true, cuda_stream(be));
}
void cuda_rope2d_backward(const Backend* be, float* dx, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d);
    rope2d_rotate_cuda(dx, pos_row, pos_col, N, H, d, ld, -1.0, false, cuda_stream(be));
}

// the bf16-activation table (Backend.act_dtype = DTYPE_BF16): x is 2-byte bf16 words, rotated in place and
// rounded in the store as the bf16 table's forward; the backwards act on f32 gradients (cuda_rope_backward)
void cuda_bf16a_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d);
    size_t threads = (size_t)N * H * (d / 2);
    if (threads == 0) return;
    rope_rotate_kernel<true><<<ceil_div_z(threads, 256), 256, 0, cuda_stream(be)>>>((uint16_t*)x, pos, N, H, d, ld, 1.0,
                                                                                   rope_args(rf));
    cudaCheck(cudaGetLastError());
}
void cuda_bf16a_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d);
    size_t threads = (size_t)N * H * (d / 2);
    if (threads == 0) return;
    rope2d_rotate_kernel<true><<<ceil_div_z(threads, 256), 256, 0, cuda_stream(be)>>>((uint16_t*)x, pos_row, pos_col, N, H,
                                                                                     d, ld, 1.0);
    cudaCheck(cudaGetLastError());
}

// ---- 2-byte output gradients (the bf16-activation table, issue 20) -------------------------------------------
// RoPE backward reading the f32 gradient dx and storing the rotated values as 2-byte bf16 into dx16 (rows of stride
// ld16): rr_f32_to_bf16 of what cuda_rope_backward leaves in dx, in the rotation's own store; keep_f32: dx is rotated
// in place too (a bias gradient reads it), else left as it was.
template <bool KEEP>
static __global__ void rope_backward_b16_kernel(uint16_t* dx16, int ld16, float* dx, const int* pos, int N, int H, int d,
                                                int ld, RopeArgs ra) {
    int half = d / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * H * half) return;
    int j = (int)(idx % half);
    int h = (int)((idx / half) % H);
    int i = (int)(idx / ((size_t)half * H));
    float* v = dx + (size_t)i * ld + (size_t)h * d;
    uint16_t* v16 = dx16 + (size_t)i * ld16 + (size_t)h * d;
    float c, s;
    if (ra.llama3)
        rr_rope_cos_sin_freq(pos[i], -1.0, rr_rope_inv_freq(j, d, ra.theta, 1, ra.factor, ra.low, ra.high, ra.original_max_pos),
                             &c, &s);
    else
        rr_rope_cos_sin(pos[i], j, d, -1.0, ra.theta, &c, &s);
    float a = v[j], b = v[j + half];
    rr_rope_rotate_pair(&a, &b, c, s);
    if (KEEP) v[j] = a, v[j + half] = b;
    v16[j] = rr_f32_to_bf16(a);
    v16[j + half] = rr_f32_to_bf16(b);
}
void cuda_bf16a_rope_backward_b16(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pos, int N, int H,
                                  int d, int ld, const RopeFreq* rf, int keep_f32) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d && ld16 >= H * d);
    size_t threads = (size_t)N * H * (d / 2);
    if (threads == 0) return;
    if (keep_f32) {
        rope_backward_b16_kernel<true><<<ceil_div_z(threads, 256), 256, 0, cuda_stream(be)>>>(dx16, ld16, dx, pos, N, H, d,
                                                                                             ld, rope_args(rf));
    } else {
        rope_backward_b16_kernel<false><<<ceil_div_z(threads, 256), 256, 0, cuda_stream(be)>>>(dx16, ld16, dx, pos, N, H, d,
                                                                                              ld, rope_args(rf));
    }
    cudaCheck(cudaGetLastError());
}

// 2-D: the same, both halves of every head in one pass (rope2d_rotate_kernel's split of the pairs)
template <bool KEEP>
static __global__ void rope2d_backward_b16_kernel(uint16_t* dx16, int ld16, float* dx, const int* pos_row,
                                                  const int* pos_col, int N, int H, int d, int ld) {
    int half = d / 2, quarter = d / 4;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * H * half) return;
    int j = (int)(idx % half);
    int h = (int)((idx / half) % H);
    int i = (int)(idx / ((size_t)half * H));
    size_t off = j < quarter ? 0 : (size_t)half;
    int jj = j < quarter ? j : j - quarter, pos = j < quarter ? pos_row[i] : pos_col[i];
    float* v = dx + (size_t)i * ld + (size_t)h * d + off;
    uint16_t* v16 = dx16 + (size_t)i * ld16 + (size_t)h * d + off;
    float c, s;
    rr_rope_cos_sin(pos, jj, half, -1.0, RR_ROPE_THETA, &c, &s);
    float a = v[jj], b = v[jj + quarter];
    rr_rope_rotate_pair(&a, &b, c, s);
    if (KEEP) v[jj] = a, v[jj + quarter] = b;
    v16[jj] = rr_f32_to_bf16(a);
    v16[jj + quarter] = rr_f32_to_bf16(b);
}
void cuda_bf16a_rope2d_backward_b16(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pos_row,
                                    const int* pos_col, int N, int H, int d, int ld, int keep_f32) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d && ld16 >= H * d);
    size_t threads = (size_t)N * H * (d / 2);
    if (threads == 0) return;
    if (keep_f32) {
        rope2d_backward_b16_kernel<true><<<ceil_div_z(threads, 256), 256, 0, cuda_stream(be)>>>(dx16, ld16, dx, pos_row,
                                                                                               pos_col, N, H, d, ld);
    } else {
        rope2d_backward_b16_kernel<false><<<ceil_div_z(threads, 256), 256, 0, cuda_stream(be)>>>(dx16, ld16, dx, pos_row,
                                                                                                pos_col, N, H, d, ld);
    }
    cudaCheck(cudaGetLastError());
}
