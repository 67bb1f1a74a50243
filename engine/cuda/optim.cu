// optim.cu — the step end on CUDA: sum of squares (the global gradient norm), scaling (clipping) and
// AdamW, so that the trainer never reads or writes parameters, gradients or moments from the host.
// The per-element math and the chunk layout are kernel_math.h's (rr_adamw_*, rr_sumsq_*), shared
// with the CPU backend (engine/adamw.c).
//
// sum_squares is deterministic: one block per chunk of rr_sumsq_chunk_range; thread j of the block
// adds the chunk's values j, j + 256, j + 512, ... in that order (in double), the 256 thread sums are
// combined in a fixed pairwise tree in shared memory, and one thread adds the chunk sums in chunk
// order (rr_sumsq_partials, the CPU's: the other threads of its block stage the partials in shared memory
// for it). No atomics: the bits depend only on the values and n, never on scheduling. They are not the
// CPU's bits (the CPU sums a chunk in index order); the two agree to double round-off.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

#define SUMSQ_BLOCK 256 // a power of two (the tree halves it)
#define OPTIM_BLOCK 256

// ---- sum of squares ------------------------------------------------------------------------------

// part[c] = sum of squares of chunk c (blockIdx.x)
static __global__ void sum_squares_chunk_kernel(double* part, const float* x, size_t n) {
    __shared__ double s[SUMSQ_BLOCK];
    size_t i0, i1;
    rr_sumsq_chunk_range(n, blockIdx.x, &i0, &i1);
    double acc = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += SUMSQ_BLOCK) acc += rr_sumsq_term(x[i]);
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = SUMSQ_BLOCK / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = s[0];
}

// *total = the nc chunk sums added in chunk order (rr_sumsq_partials: a serial chain of double adds, the
// contract the CPU shares, so one thread adds them all). What is parallel is the reading: the block's other
// warps copy the next tile of SUMSQ_TILE partials into shared memory (coalesced) while thread 0 adds the tile
// before it from shared memory, so the chain waits on no global load (was one thread reading ~12k partials one
// load at a time: 0.8 ms for an 800M-parameter stage on an H100).
#define SUMSQ_TILE 256 // partials a tile: thread 0 adds one (~1 us) while the loaders fetch the next
#define SUMSQ_TOTAL_BLOCK 512
static __global__ void sum_squares_total_kernel(double* total, const double* part, size_t nc) {
    __shared__ double tile[2][SUMSQ_TILE];
    size_t ntiles = (nc + SUMSQ_TILE - 1) / SUMSQ_TILE;
    int loader = (int)threadIdx.x - 32, nloaders = (int)blockDim.x - 32; // warps 1.. load; warp 0 adds
    if (loader >= 0)
        for (size_t i = loader; i < SUMSQ_TILE && i < nc; i += nloaders) tile[0][i] = part[i];
    __syncthreads();
    double s = 0.0;
    for (size_t t = 0; t < ntiles; t++) {
        if (loader >= 0 && t + 1 < ntiles) {
            size_t b = (t + 1) * SUMSQ_TILE;
            for (size_t i = loader; i < SUMSQ_TILE && b + i < nc; i += nloaders) tile[(t + 1) & 1][i] = part[b + i];
        }
        if (threadIdx.x == 0) {
            size_t m = nc - t * SUMSQ_TILE < SUMSQ_TILE ? nc - t * SUMSQ_TILE : SUMSQ_TILE;
            const double* p = tile[t & 1];
            for (size_t i = 0; i < m; i++) s += p[i];
        }
        __syncthreads(); // tile t + 1 is in; tile t is free for t + 2
    }
    if (threadIdx.x == 0) *total = s;
}

// Device scratch for the chunk sums and the total, kept between calls (grown when a bigger n comes):
// the trainer calls this every step, and cudaMalloc / cudaFree would synchronise the device each time.
static double* sumsq_scratch;
static size_t sumsq_scratch_n;

static double* sum_squares_scratch(size_t need) {
    if (need > sumsq_scratch_n) {
        if (sumsq_scratch) cuda_free_tracked(sumsq_scratch);
        cuda_malloc_tracked((void**)&sumsq_scratch, need * sizeof(double));
        sumsq_scratch_n = need;
    }
    return sumsq_scratch;
}

void cuda_sum_squares_reserve(size_t n) {
    if (n) (void)sum_squares_scratch(rr_sumsq_chunks(n) + 1);
}

static void sum_squares_cuda(double* total, double* part, const float* x, size_t n, size_t nc, cudaStream_t stream) {
    sum_squares_chunk_kernel<<<(unsigned)nc, SUMSQ_BLOCK, 0, stream>>>(part, x, n);
    cudaCheck(cudaGetLastError());
    sum_squares_total_kernel<<<1, SUMSQ_TOTAL_BLOCK, 0, stream>>>(total, part, nc);
    cudaCheck(cudaGetLastError());
}

double cuda_sum_squares(const Backend* be, const float* x, size_t n) {
    if (n == 0) return 0.0;
    size_t nc = rr_sumsq_chunks(n);
    RR_ASSERT(nc <= 0x7fffffffu); // grid.x (2^31 - 1 chunks of 64Ki values: 1.4e14 values)
    double* part = sum_squares_scratch(nc + 1);
    sum_squares_cuda(part + nc, part, x, n, nc, cuda_stream(be));
    double total = 0.0;
    cudaCheck(cudaMemcpyAsync(&total, part + nc, sizeof total, cudaMemcpyDeviceToHost, cuda_stream(be)));
    cuda_check_device_errors(cuda_stream(be)); // synchronises: total is complete on return
    return total;
}

// ---- scale ---------------------------------------------------------------------------------------

static __global__ void scale_kernel(float* x, float s, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
static void scale_cuda(float* x, float s, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    scale_kernel<<<ceil_div_z(n, OPTIM_BLOCK), OPTIM_BLOCK, 0, stream>>>(x, s, n);
    cudaCheck(cudaGetLastError());
}
void cuda_scale(const Backend* be, float* x, float s, size_t n) { scale_cuda(x, s, n, cuda_stream(be)); }

// ---- AdamW ---------------------------------------------------------------------------------------

// The step's scalars (rr_adamw_step) are computed once on the host, in double as on the CPU, and
// passed by value; each thread updates one element.
static __global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n, RrAdamwStep c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) rr_adamw_element(&param[i], &m[i], &v[i], grad[i], &c);
}
static void adamw_cuda(float* param, const float* grad, float* m, float* v, size_t n, RrAdamwStep c,
                       cudaStream_t stream) {
    if (n == 0) return;
    adamw_kernel<<<ceil_div_z(n, OPTIM_BLOCK), OPTIM_BLOCK, 0, stream>>>(param, grad, m, v, n, c);
    cudaCheck(cudaGetLastError());
}
void cuda_adamw_update(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n, const AdamWConfig* cfg, int t,
                       int decay) {
    RR_ASSERT(t >= 1);
    RrAdamwStep c = rr_adamw_step(cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, t, decay);
    adamw_cuda(param, grad, m, v, n, c, cuda_stream(be));
}

// AdamW and the compute copy in one pass (BackendOps.adamw_update_copy): the updated value rounded to bf16
// (rr_f32_to_bf16) into a 2-byte copy (B) or an f32 word holding it
template <bool B>
static __global__ void adamw_copy_kernel(float* param, const float* grad, float* m, float* v, size_t n, RrAdamwStep c,
                                         void* copy) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    rr_adamw_element(&param[i], &m[i], &v[i], grad[i], &c);
    if (B)
        ((uint16_t*)copy)[i] = rr_f32_to_bf16(param[i]);
    else
        ((float*)copy)[i] = rr_bf16_round(param[i]);
}
void cuda_adamw_update_copy(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n,
                            const AdamWConfig* cfg, int t, int decay, Buf copy) {
    RR_ASSERT(t >= 1 && (copy.dt == DTYPE_BF16 || copy.dt == DTYPE_F32));
    if (n == 0) return;
    RrAdamwStep c = rr_adamw_step(cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, t, decay);
    unsigned g = ceil_div_z(n, OPTIM_BLOCK);
    if (copy.dt == DTYPE_BF16) {
        adamw_copy_kernel<true><<<g, OPTIM_BLOCK, 0, cuda_stream(be)>>>(param, grad, m, v, n, c, copy.p);
    } else {
        adamw_copy_kernel<false><<<g, OPTIM_BLOCK, 0, cuda_stream(be)>>>(param, grad, m, v, n, c, copy.p);
    }
    cudaCheck(cudaGetLastError());
}
