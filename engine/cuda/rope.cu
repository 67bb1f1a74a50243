// rope.cu — rotary position embeddings on CUDA, 1-D (LM) and 2-D (ViT), in place.
//
// One thread per (row, head, pair); the angle and the rotation come from kernel_math.h
// (rr_rope_cos_sin, or rr_rope_inv_freq's Llama-3 frequencies, in double, as the CPU backend does, then rr_rope_rotate_pair). The 2-D form is the
// 1-D rule of dim d/2 on each half of the head, at the patch row and at the patch column. The
// backward is the same rotation by -angle (RoPE is orthogonal).
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

// The frequencies of one call, by value into the kernel: the LM's RopeFreq, or theta alone (the ViT's).
struct RopeArgs {
    double theta;
    int llama3;
    double factor, low, high, original_max_pos;
};

// Rotate, for every row i and head h, the n dims at x + i*ld + h*d + offset by sign * pos[i].
static __global__ void rope_rotate_kernel(float* x, const int* pos, int N, int H, int d, int ld, int offset, int n,
                                          double sign, RopeArgs ra) {
    int half = n / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * H * half) return;
    int j = (int)(idx % half);
    int h = (int)((idx / half) % H);
    int i = (int)(idx / ((size_t)half * H));
    float c, s;
    if (ra.llama3)
        rr_rope_cos_sin_freq(pos[i], sign,
                             rr_rope_inv_freq(j, n, ra.theta, 1, ra.factor, ra.low, ra.high, ra.original_max_pos), &c, &s);
    else
        rr_rope_cos_sin(pos[i], j, n, sign, ra.theta, &c, &s);
    float* v = x + (size_t)i * ld + (size_t)h * d + offset;
    rr_rope_rotate_pair(&v[j], &v[j + half], c, s);
}
static void rope_rotate_cuda(float* x, const int* pos, int N, int H, int d, int ld, int offset, int n, double sign,
                             RopeArgs ra, cudaStream_t stream) {
    size_t threads = (size_t)N * H * (n / 2);
    if (threads == 0) return;
    rope_rotate_kernel<<<ceil_div_z(threads, 256), 256, 0, stream>>>(x, pos, N, H, d, ld, offset, n, sign, ra);
    cudaCheck(cudaGetLastError());
}
static RopeArgs rope_args(const RopeFreq* rf) {
    RopeArgs ra = {rf->theta, rf->llama3, rf->factor, rf->low_freq_factor, rf->high_freq_factor, rf->original_max_pos};
    return ra;
}
static RopeArgs rope_args_2d(void) {
    RopeArgs ra = {RR_ROPE_THETA, 0, 1.0, 1.0, 1.0, 1.0};
    return ra;
}

void cuda_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d);
    rope_rotate_cuda(x, pos, N, H, d, ld, 0, d, 1.0, rope_args(rf), cuda_stream(be));
}
void cuda_rope_backward(const Backend* be, float* dx, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d);
    rope_rotate_cuda(dx, pos, N, H, d, ld, 0, d, -1.0, rope_args(rf), cuda_stream(be));
}

void cuda_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d);
    rope_rotate_cuda(x, pos_row, N, H, d, ld, 0, d / 2, 1.0, rope_args_2d(), cuda_stream(be));
    rope_rotate_cuda(x, pos_col, N, H, d, ld, d / 2, d / 2, 1.0, rope_args_2d(), cuda_stream(be));
}
void cuda_rope2d_backward(const Backend* be, float* dx, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d);
    rope_rotate_cuda(dx, pos_row, N, H, d, ld, 0, d / 2, -1.0, rope_args_2d(), cuda_stream(be));
    rope_rotate_cuda(dx, pos_col, N, H, d, ld, d / 2, d / 2, -1.0, rope_args_2d(), cuda_stream(be));
}
