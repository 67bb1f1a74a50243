// crossentropy.cu — softmax cross-entropy with ignore index -100 and SUM reduction on CUDA.
//
// Forward: one block per row computes lse (max, then sum of exp, rr_ce_lse); then one block sums
// lse - logit[target] over the supervised rows in a fixed order, in double, into the DEVICE scalar
// *loss_sum (overwritten, like the CPU op; the caller copies it to the host when it needs it).
// No atomics: the loss is bit-identical from run to run.
// Backward: dlogits += rr_ce_dlogit(...) for supervised rows, one block per row.
// A target outside [0, V) that is not -100 is recorded in the device error record and reported at
// the next synchronize / copy to the host; its row counts as ignored.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

#define CE_BLOCK 256
#define CE_LOSS_BLOCK 1024

static __device__ inline int ce_target_ok(int t, int V) { return t >= 0 && t < V; }

// A: the logits' storage (float, or uint16_t bf16 words with 2-byte activations; cuda_common.cuh)
template <typename A>
static __global__ void crossentropy_lse_kernel(float* lse, const A* logits, const int* targets, int V, int* err) {
    __shared__ float shared[32];
    const A* z = logits + (size_t)blockIdx.x * V;
    float m = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, act_ld(z, v));
    m = block_max(m, shared);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(act_ld(z, v) - m);
    s = block_sum(s, shared);
    if (threadIdx.x == 0) {
        lse[blockIdx.x] = rr_ce_lse(m, s);
        int t = targets[blockIdx.x];
        if (t != RR_CE_IGNORE_INDEX && !ce_target_ok(t, V)) cuda_report_error(err, CUDA_ERR_CE_TARGET, blockIdx.x, t, V);
    }
}

static __device__ inline double warp_sum_double(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One block: *loss_sum = sum over supervised rows of lse[n] - logits[n, targets[n]].
template <typename A>
static __global__ void crossentropy_loss_kernel(float* loss_sum, const float* lse, const A* logits,
                                                const int* targets, int N, int V) {
    __shared__ double shared[32];
    double acc = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        int t = targets[n];
        if (ce_target_ok(t, V)) acc += (double)lse[n] - (double)act_ld(logits, (size_t)n * V + t);
    }
    acc = warp_sum_double(acc);
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0;
        acc = warp_sum_double(acc);
        if (threadIdx.x == 0) *loss_sum = (float)acc;
    }
}

template <typename A>
static void crossentropy_forward_cuda(float* loss_sum, float* lse, const A* logits, const int* targets, int N,
                                      int V, cudaStream_t stream) {
    if (N > 0) {
        crossentropy_lse_kernel<<<N, CE_BLOCK, 0, stream>>>(lse, logits, targets, V, cuda_ctx.error);
        cudaCheck(cudaGetLastError());
    }
    crossentropy_loss_kernel<<<1, CE_LOSS_BLOCK, 0, stream>>>(loss_sum, lse, logits, targets, N, V);
    cudaCheck(cudaGetLastError());
}

template <typename A>
static __global__ void crossentropy_backward_kernel(float* dlogits, const A* logits, const float* lse,
                                                    const int* targets, float scale, int V) {
    int t = targets[blockIdx.x];
    if (!ce_target_ok(t, V)) return; // ignored (-100) or bad (reported by the forward)
    size_t row = (size_t)blockIdx.x * V;
    float l = lse[blockIdx.x];
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        dlogits[row + v] += rr_ce_dlogit(act_ld(logits, row + v), l, v == t, scale);
}
template <typename A>
static void crossentropy_backward_cuda(float* dlogits, const A* logits, const float* lse, const int* targets,
                                       float scale, int N, int V, cudaStream_t stream) {
    if (N == 0) return;
    crossentropy_backward_kernel<<<N, CE_BLOCK, 0, stream>>>(dlogits, logits, lse, targets, scale, V);
    cudaCheck(cudaGetLastError());
}

void cuda_crossentropy_forward(const Backend* be, float* loss_sum, float* lse, const float* logits, const int* targets, int N, int V) {
    crossentropy_forward_cuda(loss_sum, lse, logits, targets, N, V, cuda_stream(be));
}
void cuda_crossentropy_backward(const Backend* be, float* dlogits, const float* logits, const float* lse, const int* targets,
                                float scale, int N, int V) {
    crossentropy_backward_cuda(dlogits, logits, lse, targets, scale, N, V, cuda_stream(be));
}

// 2-byte activations (Bufs of DTYPE_BF16 on the bf16 table): logits are 2-byte bf16 words (the bf16 table's
// rounded values), widened on load; lse, the loss and dlogits f32
void cuda_bf16a_crossentropy_forward(const Backend* be, float* loss_sum, float* lse, const uint16_t* logits, const int* targets, int N,
                                     int V) {
    crossentropy_forward_cuda(loss_sum, lse, logits, targets, N, V, cuda_stream(be));
}
void cuda_bf16a_crossentropy_backward(const Backend* be, float* dlogits, const uint16_t* logits, const float* lse, const int* targets,
                                      float scale, int N, int V) {
    crossentropy_backward_cuda(dlogits, logits, lse, targets, scale, N, V, cuda_stream(be));
}

// ---- 2-byte output gradients (2-byte activations) -------------------------------------------------------
// dlogits stored as 2-byte bf16 words, every row: bf16(0 + the plain kernel's value) for a supervised row, zeros for
// an ignored (or bad) one: the plain slot over a zeroed f32 buffer, narrowed; what the head's GEMMs read
static __global__ void crossentropy_backward_b16_kernel(uint16_t* dlogits, const uint16_t* logits, const float* lse,
                                                        const int* targets, float scale, int V) {
    int t = targets[blockIdx.x];
    size_t row = (size_t)blockIdx.x * V;
    if (!ce_target_ok(t, V)) {
        for (int v = threadIdx.x; v < V; v += blockDim.x) dlogits[row + v] = 0;
        return;
    }
    float l = lse[blockIdx.x];
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        dlogits[row + v] = rr_f32_to_bf16(0.0f + rr_ce_dlogit(act_ld(logits, row + v), l, v == t, scale));
}
void cuda_bf16a_crossentropy_backward_b16(const Backend* be, uint16_t* dlogits16, const uint16_t* logits, const float* lse,
                                          const int* targets, float scale, int N, int V) {
    if (N == 0) return;
    crossentropy_backward_b16_kernel<<<N, CE_BLOCK, 0, cuda_stream(be)>>>(dlogits16, logits, lse, targets,
                                                                         scale, V);
    cudaCheck(cudaGetLastError());
}
