// attention.cu — attention over packed variable-length sequences (cu_seqlens) on CUDA, flash style:
// online softmax forward with the log-sum-exp saved, backward recomputing the scores. No T x T
// matrix exists anywhere: a block holds one tile of queries and one tile of keys in shared memory.
// Written for correctness and readability, not speed (no tensor cores): the fp32 table's attention. The bf16
// table runs cuDNN's fused attention (attention_cudnn.cu) or the own tensor-core kernel (flash_attention.cu).
//
// Forward and dq: one block per (query tile of ATT_BQ rows, head), 4 warps, each warp owning
// ATT_BQ / 4 query rows; keys come in tiles of 32, lane j of a warp scores key j, and each lane
// accumulates output dims lane, lane + 32, ... (so d <= ATT_MAX_D = 256).
// dk, dv: one block per (key tile of ATT_BQ rows, head), the mirror image: queries come in tiles
// of 32 and lane j scores query j. No atomics: every output element has exactly one writer, so the
// backward is deterministic. D = rowsum(dout * out) is recomputed where needed (no scratch memory).
// Grouped-query attention: query head h reads key/value head h / G (G = H / Hkv); a dk/dv block owns one
// key/value head's tile and walks the G query heads of its group, so it stays the only writer.
// Blocks find their (sequence, tile) by walking cu_seqlens: the grid has ceil(T / tile) + S blocks
// in x, enough for every sequence's tiles, and the spare ones exit at once.
// The math of each step (online softmax raise / weight / lse, the score gradient) is kernel_math.h's,
// checked on the CPU by tests/engine/cuda/test_kernel_math.c.
#include "engine/cuda/attention_path.h"
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_ops.cuh"

#define ATT_BQ 16                    // rows of the tile a block owns (queries, or keys for dk/dv)
#define ATT_WARPS 4                  // warps per block
#define ATT_ROWS (ATT_BQ / ATT_WARPS) // rows per warp
#define ATT_BK 32                    // rows of the tile streamed through shared memory (one per lane)
#define ATT_MAX_D 256
#define ATT_DREG (ATT_MAX_D / 32)    // output dims per lane

// This block's tile: sequence start and length, first row of the tile inside the sequence.
// Returns 0 for a spare block.
static __device__ int attention_find_tile(const int* cu_seqlens, int S, int* start, int* len, int* r0) {
    int b = blockIdx.x;
    for (int s = 0; s < S; s++) {
        int st = cu_seqlens[s], ln = cu_seqlens[s + 1] - st;
        int nt = (ln + ATT_BQ - 1) / ATT_BQ;
        if (b < nt) {
            *start = st;
            *len = ln;
            *r0 = b * ATT_BQ;
            return 1;
        }
        b -= nt;
    }
    return 0;
}

// dot of two d-vectors in shared memory
static __device__ inline float dot_d(const float* a, const float* b, int d) {
    float s = 0.0f;
    for (int c = 0; c < d; c++) s += a[c] * b[c];
    return s;
}

// Copy rows [r0, r0 + nrows) of one head (stride ld) into dst (row stride lds); rows past `len` are zero.
static __device__ inline void load_rows(float* dst, int lds, const float* src, int ld, int start, int r0, int nrows,
                                        int len, int h, int d) {
    for (int i = threadIdx.x; i < nrows * d; i += blockDim.x) {
        int r = i / d, c = i % d;
        dst[r * lds + c] = (r0 + r < len) ? src[(size_t)(start + r0 + r) * ld + (size_t)h * d + c] : 0.0f;
    }
}

// ---- forward -------------------------------------------------------------------------------------

static __global__ void attention_forward_kernel(float* out, float* lse, const float* q, const float* k,
                                                const float* v, const int* cu_seqlens, int S, int H, int G, int d,
                                                int ld_q, int ld_kv, int causal, float scale) {
    extern __shared__ float smem[];
    float* q_s = smem;                     // [ATT_BQ][d]
    float* k_s = q_s + ATT_BQ * d;         // [ATT_BK][d + 1] (padded: lanes read different rows)
    float* v_s = k_s + ATT_BK * (d + 1);   // [ATT_BK][d]
    int start, len, q0;
    if (!attention_find_tile(cu_seqlens, S, &start, &len, &q0)) return;
    int h = blockIdx.y, hk = h / G, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int nq = min(ATT_BQ, len - q0);
    load_rows(q_s, d, q, ld_q, start, q0, ATT_BQ, len, h, d);

    float m[ATT_ROWS], l[ATT_ROWS], acc[ATT_ROWS][ATT_DREG];
    for (int i = 0; i < ATT_ROWS; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int e = 0; e < ATT_DREG; e++) acc[i][e] = 0.0f;
    }
    int kend = causal ? q0 + nq : len; // causal: no key after the tile's last query
    for (int k0 = 0; k0 < kend; k0 += ATT_BK) {
        __syncthreads(); // previous tile consumed (and q_s loaded, the first time)
        load_rows(k_s, d + 1, k, ld_kv, start, k0, ATT_BK, len, hk, d);
        load_rows(v_s, d, v, ld_kv, start, k0, ATT_BK, len, hk, d);
        __syncthreads();
        int j = k0 + lane;
        #pragma unroll
        for (int i = 0; i < ATT_ROWS; i++) {
            int r = warp + ATT_WARPS * i;
            if (r >= nq) break; // warp-uniform
            int qi = q0 + r;
            int valid = j < len && (!causal || j <= qi);
            float s = valid ? scale * dot_d(&q_s[r * d], &k_s[lane * (d + 1)], d) : -INFINITY;
            float corr = rr_online_softmax_raise(&m[i], warp_max(s));
            float p = rr_online_softmax_weight(s, m[i]);
            l[i] = l[i] * corr + warp_sum(p);
            for (int e = 0; e < ATT_DREG; e++) acc[i][e] *= corr;
            for (int jj = 0; jj < ATT_BK; jj++) {
                float pj = __shfl_sync(0xffffffffu, p, jj);
                #pragma unroll
                for (int e = 0; e < ATT_DREG; e++) {
                    int c = lane + 32 * e;
                    if (c < d) acc[i][e] += pj * v_s[jj * d + c];
                }
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < ATT_ROWS; i++) {
        int r = warp + ATT_WARPS * i;
        if (r >= nq) break;
        size_t t = (size_t)start + q0 + r;
        float inv = 1.0f / l[i];
        #pragma unroll
        for (int e = 0; e < ATT_DREG; e++) {
            int c = lane + 32 * e;
            if (c < d) out[t * H * d + (size_t)h * d + c] = acc[i][e] * inv;
        }
        if (lane == 0) lse[t * H + h] = rr_online_softmax_lse(m[i], l[i]);
    }
}

static size_t attention_forward_smem(int d) { return sizeof(float) * ((size_t)ATT_BQ * d + ATT_BK * (d + 1) + ATT_BK * d); }

static void attention_forward_cuda(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv,
                                   int causal, cudaStream_t stream) {
    if (T == 0 || H == 0) return;
    size_t smem = attention_forward_smem(d);
    cudaCheck(cudaFuncSetAttribute(attention_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(ceil_div(T, ATT_BQ) + S, H);
    attention_forward_kernel<<<grid, ATT_WARPS * 32, smem, stream>>>(out, lse, q, k, v, cu_seqlens, S, H, H / Hkv, d,
                                                                     ld_q, ld_kv, causal, 1.0f / sqrtf((float)d));
    cudaCheck(cudaGetLastError());
}

// ---- backward: dq --------------------------------------------------------------------------------

// D of rows [r0, r0 + ATT_BQ) handled by this warp: D = dout . out (out is (T, H*d) contiguous)
static __device__ inline float attention_row_D(const float* dout, const float* out, size_t t, int H, int h, int d,
                                               int lane) {
    float s = 0.0f;
    for (int c = lane; c < d; c += 32) {
        size_t i = t * H * d + (size_t)h * d + c;
        s += dout[i] * out[i];
    }
    return warp_sum(s);
}

static __global__ void attention_backward_dq_kernel(float* dq, const float* dout, const float* out, const float* lse,
                                                    const float* q, const float* k, const float* v,
                                                    const int* cu_seqlens, int S, int H, int G, int d, int ld_q,
                                                    int ld_kv, int causal, float scale) {
    extern __shared__ float smem[];
    float* q_s = smem;                        // [ATT_BQ][d]
    float* do_s = q_s + ATT_BQ * d;           // [ATT_BQ][d]
    float* k_s = do_s + ATT_BQ * d;           // [ATT_BK][d + 1]
    float* v_s = k_s + ATT_BK * (d + 1);      // [ATT_BK][d + 1]
    int start, len, q0;
    if (!attention_find_tile(cu_seqlens, S, &start, &len, &q0)) return;
    int h = blockIdx.y, hk = h / G, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int nq = min(ATT_BQ, len - q0);
    load_rows(q_s, d, q, ld_q, start, q0, ATT_BQ, len, h, d);
    // dout is (T, H*d) contiguous like out
    load_rows(do_s, d, dout, H * d, start, q0, ATT_BQ, len, h, d);

    float lse_r[ATT_ROWS], D[ATT_ROWS], acc[ATT_ROWS][ATT_DREG];
    #pragma unroll
    for (int i = 0; i < ATT_ROWS; i++) {
        int r = warp + ATT_WARPS * i;
        size_t t = (size_t)start + q0 + r;
        lse_r[i] = r < nq ? lse[t * H + h] : 0.0f;
        D[i] = r < nq ? attention_row_D(dout, out, t, H, h, d, lane) : 0.0f;
        for (int e = 0; e < ATT_DREG; e++) acc[i][e] = 0.0f;
    }
    int kend = causal ? q0 + nq : len;
    for (int k0 = 0; k0 < kend; k0 += ATT_BK) {
        __syncthreads();
        load_rows(k_s, d + 1, k, ld_kv, start, k0, ATT_BK, len, hk, d);
        load_rows(v_s, d + 1, v, ld_kv, start, k0, ATT_BK, len, hk, d);
        __syncthreads();
        int j = k0 + lane;
        #pragma unroll
        for (int i = 0; i < ATT_ROWS; i++) {
            int r = warp + ATT_WARPS * i;
            if (r >= nq) break;
            int qi = q0 + r;
            int valid = j < len && (!causal || j <= qi);
            float s = valid ? scale * dot_d(&q_s[r * d], &k_s[lane * (d + 1)], d) : -INFINITY;
            float p = rr_online_softmax_weight(s, lse_r[i]);
            float dp = valid ? dot_d(&do_s[r * d], &v_s[lane * (d + 1)], d) : 0.0f;
            float ds = rr_attention_dscore(p, dp, D[i]);
            for (int jj = 0; jj < ATT_BK; jj++) {
                float dsj = __shfl_sync(0xffffffffu, ds, jj);
                #pragma unroll
                for (int e = 0; e < ATT_DREG; e++) {
                    int c = lane + 32 * e;
                    if (c < d) acc[i][e] += dsj * k_s[jj * (d + 1) + c];
                }
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < ATT_ROWS; i++) {
        int r = warp + ATT_WARPS * i;
        if (r >= nq) break;
        size_t t = (size_t)start + q0 + r;
        #pragma unroll
        for (int e = 0; e < ATT_DREG; e++) {
            int c = lane + 32 * e;
            if (c < d) dq[t * ld_q + (size_t)h * d + c] += scale * acc[i][e];
        }
    }
}

// ---- backward: dk, dv ----------------------------------------------------------------------------

static __global__ void attention_backward_dkdv_kernel(float* dk, float* dv, const float* dout, const float* out,
                                                      const float* lse, const float* q, const float* k, const float* v,
                                                      const int* cu_seqlens, int S, int H, int G, int d, int ld_q,
                                                      int ld_kv, int causal, float scale) {
    extern __shared__ float smem[];
    float* k_s = smem;                        // [ATT_BQ][d] this block's keys
    float* v_s = k_s + ATT_BQ * d;            // [ATT_BQ][d]
    float* q_s = v_s + ATT_BQ * d;            // [ATT_BK][d + 1] streamed queries
    float* do_s = q_s + ATT_BK * (d + 1);     // [ATT_BK][d + 1]
    float* lse_s = do_s + ATT_BK * (d + 1);   // [ATT_BK]
    float* D_s = lse_s + ATT_BK;              // [ATT_BK]
    int start, len, k0;
    if (!attention_find_tile(cu_seqlens, S, &start, &len, &k0)) return;
    int hk = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32; // a key/value head
    int nk = min(ATT_BQ, len - k0);
    load_rows(k_s, d, k, ld_kv, start, k0, ATT_BQ, len, hk, d);
    load_rows(v_s, d, v, ld_kv, start, k0, ATT_BQ, len, hk, d);

    float dk_acc[ATT_ROWS][ATT_DREG], dv_acc[ATT_ROWS][ATT_DREG];
    for (int i = 0; i < ATT_ROWS; i++)
        for (int e = 0; e < ATT_DREG; e++) dk_acc[i][e] = dv_acc[i][e] = 0.0f;
    // causal: queries before this tile's first key see none of its keys
    int qstart = causal ? (k0 / ATT_BK) * ATT_BK : 0;
    for (int h = hk * G; h < (hk + 1) * G; h++) // the query heads of the group
    for (int qt = qstart; qt < len; qt += ATT_BK) {
        __syncthreads();
        load_rows(q_s, d + 1, q, ld_q, start, qt, ATT_BK, len, h, d);
        load_rows(do_s, d + 1, dout, H * d, start, qt, ATT_BK, len, h, d);
        for (int jr = warp; jr < ATT_BK; jr += ATT_WARPS) { // one warp per streamed row
            size_t t = (size_t)start + qt + jr;
            int ok = qt + jr < len;
            float Dv = ok ? attention_row_D(dout, out, t, H, h, d, lane) : 0.0f;
            if (lane == 0) {
                D_s[jr] = Dv;
                lse_s[jr] = ok ? lse[t * H + h] : 0.0f;
            }
        }
        __syncthreads();
        int qi = qt + lane;
        #pragma unroll
        for (int i = 0; i < ATT_ROWS; i++) {
            int r = warp + ATT_WARPS * i;
            if (r >= nk) break;
            int kj = k0 + r;
            int valid = qi < len && (!causal || kj <= qi);
            float s = valid ? scale * dot_d(&q_s[lane * (d + 1)], &k_s[r * d], d) : -INFINITY;
            float p = rr_online_softmax_weight(s, lse_s[lane]);
            float dp = valid ? dot_d(&do_s[lane * (d + 1)], &v_s[r * d], d) : 0.0f;
            float ds = rr_attention_dscore(p, dp, D_s[lane]);
            for (int jj = 0; jj < ATT_BK; jj++) {
                float pj = __shfl_sync(0xffffffffu, p, jj);
                float dsj = __shfl_sync(0xffffffffu, ds, jj);
                #pragma unroll
                for (int e = 0; e < ATT_DREG; e++) {
                    int c = lane + 32 * e;
                    if (c < d) {
                        dv_acc[i][e] += pj * do_s[jj * (d + 1) + c];
                        dk_acc[i][e] += dsj * q_s[jj * (d + 1) + c];
                    }
                }
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < ATT_ROWS; i++) {
        int r = warp + ATT_WARPS * i;
        if (r >= nk) break;
        size_t t = (size_t)start + k0 + r;
        #pragma unroll
        for (int e = 0; e < ATT_DREG; e++) {
            int c = lane + 32 * e;
            if (c >= d) continue;
            size_t idx = t * ld_kv + (size_t)hk * d + c;
            if (dk) dk[idx] += scale * dk_acc[i][e];
            if (dv) dv[idx] += dv_acc[i][e];
        }
    }
}

static size_t attention_dq_smem(int d) { return sizeof(float) * (2 * (size_t)ATT_BQ * d + 2 * ATT_BK * (d + 1)); }
static size_t attention_dkdv_smem(int d) {
    return sizeof(float) * (2 * (size_t)ATT_BQ * d + 2 * ATT_BK * (d + 1) + 2 * ATT_BK);
}

static void attention_backward_cuda(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                    const float* lse, const float* q, const float* k, const float* v,
                                    const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv,
                                    int causal, cudaStream_t stream) {
    if (T == 0 || H == 0) return;
    float scale = 1.0f / sqrtf((float)d);
    int G = H / Hkv;
    dim3 grid(ceil_div(T, ATT_BQ) + S, H), grid_kv(ceil_div(T, ATT_BQ) + S, Hkv);
    if (dq) {
        size_t smem = attention_dq_smem(d);
        cudaCheck(cudaFuncSetAttribute(attention_backward_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
        attention_backward_dq_kernel<<<grid, ATT_WARPS * 32, smem, stream>>>(dq, dout, out, lse, q, k, v, cu_seqlens,
                                                                             S, H, G, d, ld_q, ld_kv, causal, scale);
        cudaCheck(cudaGetLastError());
    }
    if (dk || dv) {
        size_t smem = attention_dkdv_smem(d);
        cudaCheck(cudaFuncSetAttribute(attention_backward_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
        attention_backward_dkdv_kernel<<<grid_kv, ATT_WARPS * 32, smem, stream>>>(dk, dv, dout, out, lse, q, k, v,
                                                                                  cu_seqlens, S, H, G, d, ld_q, ld_kv,
                                                                                  causal, scale);
        cudaCheck(cudaGetLastError());
    }
}

static void attention_check_dims(int H, int Hkv, int d, int ld_q, int ld_kv) {
    if (d < 1 || d > ATT_MAX_D)
        rr_die("CUDA attention: head dim %d is not supported (1..%d); use more heads or the CPU backend", d, ATT_MAX_D);
    RR_ASSERT(Hkv >= 1 && H % Hkv == 0 && ld_q >= H * d && ld_kv >= Hkv * d);
}

void cuda_attention_forward(const Backend* be, float* out, float* lse, const float* q, const float* k, const float* v,
                            const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    attention_check_dims(H, Hkv, d, ld_q, ld_kv);
    attention_forward_cuda(out, lse, q, k, v, cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, causal, cuda_stream(be));
    cuda_attention_path_note(RR_ATTN_OWN_F32_FWD);
}

void cuda_attention_backward(const Backend* be, float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                             const float* q, const float* k, const float* v, const int* cu_seqlens, int S, int T,
                             int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    attention_check_dims(H, Hkv, d, ld_q, ld_kv);
    attention_backward_cuda(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, causal,
                            cuda_stream(be));
    cuda_attention_path_note(RR_ATTN_OWN_F32_BWD);
}
