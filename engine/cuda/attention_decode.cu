// attention_decode.cu — generation's attention against a KV cache (engine.h, BackendOps.attention_decode)
// on CUDA: one block per (new query, head), DEC_THREADS threads. The keys the query sees stream
// through shared memory in chunks of DEC_CHUNK scores with an online softmax (running max m and sum
// l; when m grows, the output accumulated so far is rescaled by exp(m_old - m_new)); thread t
// accumulates output dims t, t + DEC_THREADS, ... (d <= DEC_MAX_D). Written for correctness and
// readability: a decoding step is one query per head, far from the GPU's limits either way.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

#define DEC_THREADS 128
#define DEC_CHUNK 1024
#define DEC_MAX_D 256
#define DEC_DREG (DEC_MAX_D / DEC_THREADS)

// The maximum of x over the block (every thread gets it); red holds DEC_THREADS floats.
static __device__ float dec_block_max(float x, float* red) {
    red[threadIdx.x] = x;
    __syncthreads();
    for (int s = DEC_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

static __device__ float dec_block_sum(float x, float* red) {
    red[threadIdx.x] = x;
    __syncthreads();
    for (int s = DEC_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

static __global__ void attention_decode_kernel(float* out, const float* q, const float* k, const float* v, int n, int Tk,
                                               int H, int Hkv, int d, int ld_q, int ld_kv, float scale) {
    __shared__ float p[DEC_CHUNK];
    __shared__ float red[DEC_THREADS];
    int i = blockIdx.x, h = blockIdx.y, g = h / (H / Hkv); // g: the key/value head query head h reads
    const float* qi = q + (size_t)i * ld_q + (size_t)h * d;
    int nk = Tk - n + i + 1;
    float acc[DEC_DREG];
    for (int r = 0; r < DEC_DREG; r++) acc[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 < nk; j0 += DEC_CHUNK) {
        int nc = nk - j0 < DEC_CHUNK ? nk - j0 : DEC_CHUNK;
        float cmax = -INFINITY;
        for (int j = threadIdx.x; j < nc; j += DEC_THREADS) {
            const float* kj = k + (size_t)(j0 + j) * ld_kv + (size_t)g * d;
            float s = 0.0f;
            for (int c = 0; c < d; c++) s += qi[c] * kj[c];
            p[j] = s * scale;
            cmax = fmaxf(cmax, p[j]);
        }
        float mn = fmaxf(m, dec_block_max(cmax, red)); // also orders the p[] writes before the reads
        float corr = expf(m - mn);                     // 0 on the first chunk (m = -inf)
        float part = 0.0f;
        for (int j = threadIdx.x; j < nc; j += DEC_THREADS) part += p[j] = expf(p[j] - mn);
        l = l * corr + dec_block_sum(part, red);       // the sum's barriers order p[] again
        for (int r = 0; r < DEC_DREG; r++) {
            int c = threadIdx.x + r * DEC_THREADS;
            if (c >= d) break;
            float a = acc[r] * corr;
            for (int j = 0; j < nc; j++) a += p[j] * v[(size_t)(j0 + j) * ld_kv + (size_t)g * d + c];
            acc[r] = a;
        }
        m = mn;
        __syncthreads(); // every thread has read p[] before the next chunk overwrites it
    }
    float* o = out + (size_t)i * H * d + (size_t)h * d;
    for (int r = 0; r < DEC_DREG; r++) {
        int c = threadIdx.x + r * DEC_THREADS;
        if (c < d) o[c] = acc[r] / l;
    }
}

void cuda_attention_decode(const Backend* be, float* out, const float* q, const float* k, const float* v, int n, int Tk, int H,
                           int Hkv, int d, int ld_q, int ld_kv) {
    if (d < 1 || d > DEC_MAX_D)
        rr_die("CUDA attention_decode: head dim %d is not supported (1..%d); use more heads or the CPU backend", d,
               DEC_MAX_D);
    if (n <= 0 || H <= 0) return;
    if (Hkv < 1 || H % Hkv) rr_die("CUDA attention_decode: %d key/value heads do not divide %d query heads", Hkv, H);
    dim3 grid((unsigned)n, (unsigned)H);
    attention_decode_kernel<<<grid, DEC_THREADS, 0, cuda_stream(be)>>>(out, q, k, v, n, Tk, H, Hkv, d, ld_q, ld_kv,
                                                                       1.0f / sqrtf((float)d));
    cudaCheck(cudaGetLastError());
}
