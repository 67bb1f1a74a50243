// flash_attention.cu — the backend's own tensor-core attention over packed variable-length sequences
// (cu_seqlens), FlashAttention-2 style: the path of the bf16 table wherever cuDNN's fused attention is
// absent, refuses the shape, or disagrees (attention_cudnn.cu). The fp32 table keeps attention.cu's
// fp32 kernel (exact f32 arithmetic; this one multiplies bf16 operands).
//
// Shapes: any sample length (1 .. 2^31 / H tokens in all), head dims 1..256 (padded with zeros to DP,
// one of 32, 64, 96, 128, 256, in shared memory only), causal or bidirectional within each sample,
// GQA (Hkv key/value heads, Hkv dividing H; query head h reads key/value head h / (H / Hkv)).
// Storage T of q, k, v, out, dout, dq, dk, dv: __nv_bfloat16 (bf16 storage) or float (converted to bf16
// on load; the bf16 table stores bf16 values in f32 buffers, so the conversion is exact there); lse f32.
//
// Math: mma.sync m16n8k16, bf16 x bf16 -> f32 (the CPU emulation, tests/support/cuda_emu, runs the same
// instruction through emu_mma_m16n8k16_bf16 with the PTX fragment layout). Scores and the online softmax
// in f32 (exp2 of scores scaled by log2(e) / sqrt(d)); P and dS are rounded to bf16 as MMA operands,
// as FlashAttention-2 does. Memory O(T): no T x T matrix; the backward's scratch (v2) holds 2 T H f32 row
// statistics (and on f32 storage bf16 copies of q, k, v, dout), reserved by BackendDevice.reserve.
//
// Forward: one block (4 warps, 128 threads) per (64-query tile of a sample, head); each warp owns 16
// query rows; K and V stream through shared memory in tiles of 64 keys (16-byte loads from global memory
// where rows are 8-value aligned). Fragments come from shared memory by ldmatrix (.trans for the B operand
// of P V, dS K, P^T dO, dS^T Q, so no tile is stored transposed). Causal: key tiles past the query tile's
// last row are skipped.
// Backward: a pre-pass for D = rowsum(dout * out) and lse, then two kernels, no atomics, deterministic (every
// output element has one writer), the tiles streamed by cp.async (the first version, v1, which recomputed D per
// tile from dO and O tiles, and the other versions measured against this one are in dev/cuda/):
//   dq: per (query tile, head) like the forward: S, P = exp(S - lse), dP = dO V^T, dS = P (dP - D),
//       dQ += dS K;
//   dk, dv: per (64-key tile, key/value head); over the query heads of its group and the query tiles
//       (causal: from the key tile on): S^T = K Q^T, P^T, dV += P^T dO, dP^T = V dO^T,
//       dS^T = P^T (dP^T - D), dK += dS^T Q.
// Gradients are ADDED to dq, dk, dv (engine.h); NULL ones are skipped.
// Blocks find their (sample, tile) by walking cu_seqlens, 32 samples per step: the grid has ceil(T / 64) + S
// blocks in x.
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/attention_path.h"
#include "engine/cuda/cuda_ops.cuh"

#include <stdlib.h>
#include <string.h>
#include <type_traits>

#define FA_BQ 64      // query rows of a block (16 per warp)
#define FA_BK 64      // keys per streamed tile
#define FA_WARPS 4
#define FA_THREADS (32 * FA_WARPS)
#define FA_MAX_D 256
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

typedef uint16_t bf16_t; // the bits of a bf16 value (shared memory and fragments)

// ---- the tensor-core instruction -------------------------------------------------------------------
// d (16x8 f32) += a (16x16 bf16, row) * b (16x8 bf16, col); fragments as PTX's mma.m16n8k16 figures:
// lane = 4 g + t: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..];
// b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]; d[0..1] = D[g][2t..2t+1], d[2..3] = D[g+8][2t..2t+1];
// the lower 16 bits of a register hold the lower column (a) or row (b) index.
static __device__ __forceinline__ void fa_mma(float* d, const uint32_t* a, const uint32_t* b) {
#ifdef RR_CUDA_EMULATED
    emu_mma_m16n8k16_bf16(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes 8 i .. 8 i + 7 give the addresses of the 8 rows (16
// bytes each) of matrix i; lane l gets r[i] = M_i[l / 4][2 (l % 4) .. + 1], or with trans
// M_i[2 (l % 4)][l / 4], M_i[2 (l % 4) + 1][l / 4] (the emulation: emu_ldmatrix_x4).
template <bool TRANS>
static __device__ __forceinline__ void fa_ldsm_x4(uint32_t* r, const bf16_t* row) {
#ifdef RR_CUDA_EMULATED
    emu_ldmatrix_x4(r, row, TRANS);
#else
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}
static __device__ __forceinline__ void fa_ldsm(uint32_t* r, const bf16_t* row) { fa_ldsm_x4<false>(r, row); }
static __device__ __forceinline__ void fa_ldsm_t(uint32_t* r, const bf16_t* row) { fa_ldsm_x4<true>(r, row); }
static __device__ __forceinline__ uint32_t fa_ld32(const bf16_t* p) { return *(const uint32_t*)p; }
static __device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    return (uint32_t)rr_f32_to_bf16(lo) | ((uint32_t)rr_f32_to_bf16(hi) << 16);
}

// storage conversions
static __device__ __forceinline__ bf16_t fa_to_bf16(float x) { return rr_f32_to_bf16(x); }
static __device__ __forceinline__ bf16_t fa_to_bf16(bf16_t x) { return x; }
static __device__ __forceinline__ float fa_to_f32(float x) { return x; }
static __device__ __forceinline__ float fa_to_f32(bf16_t x) { return rr_bf16_to_f32(x); }
// store an f32 result as T (bf16: rounded; f32: rounded to bf16 when round_out, the bf16 table's point)
static __device__ __forceinline__ void fa_store(float* p, float x, int round_out) { *p = round_out ? rr_bf16_round(x) : x; }
static __device__ __forceinline__ void fa_store(bf16_t* p, float x, int) { *p = rr_f32_to_bf16(x); }

// This block's tile: sample start and length, first row of the tile; 0 for a spare block. Each warp walks
// cu_seqlens 32 samples at a time (a lane per sample, the tile counts' prefix sum by shuffles), so that many
// short samples cost S / 32 steps, not S. reverse: a sample's tiles from its last (under a causal mask the
// query tiles with the most keys first, so that the longest blocks start early and the grid's tail is short).
static __device__ int fa_find_tile(const int* cu_seqlens, int S, int* start, int* len, int* r0, int reverse,
                                   int rows = FA_BQ) {
    int lane = threadIdx.x % 32, b = blockIdx.x;
    for (int s0 = 0; s0 < S; s0 += 32) {
        int s = s0 + lane, st = 0, ln = 0;
        if (s < S) st = cu_seqlens[s], ln = cu_seqlens[s + 1] - st;
        int nt = (ln + rows - 1) / rows, inc = nt; // inc: tiles of samples s0 .. s
        for (int o = 1; o < 32; o <<= 1) {
            int v = __shfl_sync(0xffffffffu, inc, lane >= o ? lane - o : lane);
            if (lane >= o) inc += v;
        }
        int total = __shfl_sync(0xffffffffu, inc, 31);
        if (b < total) {
            int at = inc <= b; // the lanes before the one holding block b (inc never decreases)
            for (int o = 16; o > 0; o >>= 1) at += __shfl_xor_sync(0xffffffffu, at, o);
            int before = __shfl_sync(0xffffffffu, inc - nt, at);
            *start = __shfl_sync(0xffffffffu, st, at);
            *len = __shfl_sync(0xffffffffu, ln, at);
            int n = __shfl_sync(0xffffffffu, nt, at), t = b - before;
            *r0 = (reverse ? n - 1 - t : t) * rows;
            return 1;
        }
        b -= total;
    }
    return 0;
}

// Rows [r0, r0 + 64) of one head (columns col0 .. col0 + d of stride ld) into shared memory as bf16, row-major
// dst[r * lds + c]; rows past len and columns d .. DP are zero. vec: 8 values (16 bytes of bf16, 32 of f32) per
// load where a chunk is whole (the caller checked d, the strides and the pointers for 8-value alignment).
static __device__ __forceinline__ void fa_load8(bf16_t* dst, const float* src) {
    float4 a = *(const float4*)src, b = *(const float4*)(src + 4);
    uint4 o;
    o.x = fa_pack(a.x, a.y), o.y = fa_pack(a.z, a.w), o.z = fa_pack(b.x, b.y), o.w = fa_pack(b.z, b.w);
    *(uint4*)dst = o;
}
static __device__ __forceinline__ void fa_load8(bf16_t* dst, const bf16_t* src) { *(uint4*)dst = *(const uint4*)src; }
template <int DP, typename T, int NTH = FA_THREADS> // NTH: the block's threads (a constant stride)
static __device__ __forceinline__ void fa_load_tile(bf16_t* dst, int lds, const T* src, size_t ld, int start, int r0,
                                                    int len, size_t col0, int d, int vec) {
    for (int i = threadIdx.x; i < FA_BQ * (DP / 8); i += NTH) {
        int r = i / (DP / 8), c = (i % (DP / 8)) * 8;
        bf16_t* o = dst + r * lds + c;
        const T* in = src + (size_t)(start + r0 + r) * ld + col0 + c;
        if (r0 + r < len && vec && c + 8 <= d) {
            fa_load8(o, in);
        } else {
            #pragma unroll
            for (int e = 0; e < 8; e++) o[e] = (r0 + r < len && c + e < d) ? fa_to_bf16(in[e]) : (bf16_t)0;
        }
    }
}

// Asynchronous tile loads (cp.async, sm80+), bf16 storage with 8-value aligned rows only: 16 bytes per
// copy straight into shared memory, zero-filled (source size 0) past len and past d. The forward issues the
// next key tile's K while it works on the scores and the next V while it works on P V (FlashAttention-2's
// order), so the loads' latency hides behind the tensor cores. In the emulation a copy happens at once
// (emu_cp_async16) and the commit / wait are no-ops: the barriers around the buffers are what it checks.
static __device__ __forceinline__ void fa_cp_async16(bf16_t* dst, const bf16_t* src, int bytes) {
#ifdef RR_CUDA_EMULATED
    emu_cp_async16(dst, src, bytes);
#else
    unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(bytes));
#endif
}
static __device__ __forceinline__ void fa_cp_commit() {
#ifndef RR_CUDA_EMULATED
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// wait until at most one committed group is still in flight
static __device__ __forceinline__ void fa_cp_wait1() {
#ifndef RR_CUDA_EMULATED
    asm volatile("cp.async.wait_group 1;\n" ::);
#endif
}
template <int DP, int NTH = FA_THREADS>
static __device__ __forceinline__ void fa_async_tile(bf16_t* dst, int lds, const bf16_t* src, size_t ld, int start,
                                                     int r0, int len, size_t col0, int d) {
    for (int i = threadIdx.x; i < FA_BQ * (DP / 8); i += NTH) {
        int r = i / (DP / 8), c = (i % (DP / 8)) * 8, ok = r0 + r < len && c < d;
        fa_cp_async16(dst + r * lds + c, ok ? src + (size_t)(start + r0 + r) * ld + col0 + c : src, ok ? 16 : 0);
    }
}
// a tile by cp.async where it can (bf16 storage, vec), else by fa_load_tile
template <int DP, typename T, int NTH = FA_THREADS>
static __device__ __forceinline__ void fa_tile(bf16_t* dst, int lds, const T* src, size_t ld, int start, int r0, int len,
                                               size_t col0, int d, int vec) {
    if constexpr (std::is_same<T, bf16_t>::value) {
        if (vec) {
            fa_async_tile<DP, NTH>(dst, lds, src, ld, start, r0, len, col0, d);
            return;
        }
    }
    fa_load_tile<DP, T, NTH>(dst, lds, src, ld, start, r0, len, col0, d, vec);
}

// D = dO . O of rows [r0, r0 + 64) from their tiles in shared memory (both bf16: dO rounded as the MMAs
// use it, O a bf16 value in the bf16 table), one warp per row, into D_s; their lse (log2 units) into L_s
template <int DP, int NTH = FA_THREADS>
static __device__ __forceinline__ void fa_rowstats(float* D_s, float* L_s, const bf16_t* dO_s, const bf16_t* O_s, int lds,
                                                   const float* lse, int start, int r0, int len, int H, int h) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int r = warp; r < FA_BQ; r += NTH / 32) {
        float s = 0.0f;
        #pragma unroll
        for (int c = 2 * lane; c < DP; c += 64) {
            uint32_t x = fa_ld32(dO_s + r * lds + c), y = fa_ld32(O_s + r * lds + c);
            s += rr_bf16_to_f32((uint16_t)(x & 0xffffu)) * rr_bf16_to_f32((uint16_t)(y & 0xffffu)) +
                 rr_bf16_to_f32((uint16_t)(x >> 16)) * rr_bf16_to_f32((uint16_t)(y >> 16));
        }
        s = warp_sum(s);
        if (lane == 0) {
            D_s[r] = s;
            L_s[r] = r0 + r < len ? lse[((size_t)start + r0 + r) * H + h] * FA_LOG2E : 0.0f;
        }
    }
}

// acc[nt] (16 rows x 8) += A (16 rows of smem, stride lda) times B^T, B's rows 8 nt .. 8 nt + 7 (keys or
// queries) of smem (stride ldb), over DP columns. NT even. Fragments by ldmatrix: A's four 8x8 quarters; B's
// (n-tile, k-half) pairs, two n-tiles per load.
template <int DP, int NT>
static __device__ __forceinline__ void fa_gemm_abt(float (*acc)[4], const bf16_t* A, int lda, const bf16_t* B, int ldb) {
    int lane = threadIdx.x % 32, m = lane >> 3, r8 = lane & 7;
    const bf16_t* ap = A + (r8 + 8 * (m & 1)) * lda + 8 * (m >> 1);
    const bf16_t* bp = B + (r8 + 8 * (m >> 1)) * ldb + 8 * (m & 1);
    #pragma unroll
    for (int ks = 0; ks < DP / 16; ks++) {
        uint32_t a[4];
        fa_ldsm(a, ap + ks * 16);
        #pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
            uint32_t b[4];
            fa_ldsm(b, bp + nt * 8 * ldb + ks * 16);
            fa_mma(acc[nt], a, b);
            fa_mma(acc[nt + 1], a, b + 2);
        }
    }
}

// acc (16 x DP) += P (16 x 64: 8 accumulator n-tiles p, rounded to bf16 as the A operand) times B (64 rows
// of smem, row-major, stride ldb, DP columns): B's fragments by ldmatrix.trans, two d-tiles per load
template <int DP>
static __device__ __forceinline__ void fa_gemm_pb(float (*acc)[4], const float (*p)[4], const bf16_t* B, int ldb) {
    int lane = threadIdx.x % 32, m = lane >> 3, r8 = lane & 7;
    const bf16_t* bp = B + (r8 + 8 * (m & 1)) * ldb + 8 * (m >> 1);
    #pragma unroll
    for (int kk = 0; kk < FA_BK / 16; kk++) {
        uint32_t a[4];
        a[0] = fa_pack(p[2 * kk][0], p[2 * kk][1]);
        a[1] = fa_pack(p[2 * kk][2], p[2 * kk][3]);
        a[2] = fa_pack(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        a[3] = fa_pack(p[2 * kk + 1][2], p[2 * kk + 1][3]);
        #pragma unroll
        for (int dn = 0; dn < DP / 8; dn += 2) {
            uint32_t b[4];
            fa_ldsm_t(b, bp + kk * 16 * ldb + dn * 8);
            fa_mma(acc[dn], a, b);
            fa_mma(acc[dn + 1], a, b + 2);
        }
    }
}

// an accumulator of N n-tiles (16 rows x 8 columns each, a thread's 4 values) to zero
template <int N>
static __device__ __forceinline__ void fa_zero(float (*acc)[4]) {
    #pragma unroll
    for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// ---- forward ---------------------------------------------------------------------------------------

template <int DP, typename T>
static __global__ void __launch_bounds__(FA_THREADS) fa_forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                                                                     const int* cu_seqlens, int S, int H, int Hkv, int d,
                                                                     int ldq, int ldkv, int ldo, int causal,
                                                                     float scale_log2, int round_out, int vec) {
    extern __shared__ float smem[];
    const int LDS = DP + 8;
    bf16_t* Q_s = (bf16_t*)smem;        // [64][LDS]
    bf16_t* K_s = Q_s + FA_BQ * LDS;    // [64][LDS]
    bf16_t* V_s = K_s + FA_BK * LDS;    // [64][LDS]
    int start, len, q0;
    if (!fa_find_tile(cu_seqlens, S, &start, &len, &q0, causal)) return;
    int h = blockIdx.y, hk = h / (H / Hkv);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
    // groups of copies (cp.async; the synchronous path fills the tiles at once): {Q, K_0}, {V_0}, then per key
    // tile {K_next} and {V_next}; "wait 1" before a tile's use leaves only the one after it in flight
    int kend = causal ? min(len, q0 + FA_BQ) : len;
    fa_tile<DP>(Q_s, LDS, q, ldq, start, q0, len, (size_t)h * d, d, vec);
    fa_tile<DP>(K_s, LDS, k, ldkv, start, 0, len, (size_t)hk * d, d, vec);
    fa_cp_commit();
    fa_tile<DP>(V_s, LDS, v, ldkv, start, 0, len, (size_t)hk * d, d, vec);
    fa_cp_commit();

    float o[DP / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    fa_zero<DP / 8>(o);
    int qrow = q0 + 16 * warp + g; // this thread's rows: qrow, qrow + 8
    for (int k0 = 0; k0 < kend; k0 += FA_BK) {
        fa_cp_wait1();
        __syncthreads(); // K of this tile (and Q) in shared memory
        float s[FA_BK / 8][4];
        fa_zero<FA_BK / 8>(s);
        fa_gemm_abt<DP, FA_BK / 8>(s, Q_s + 16 * warp * LDS, LDS, K_s, LDS);
        __syncthreads(); // every warp is done with K_s: the next tile's K goes there
        if (k0 + FA_BK < kend) fa_tile<DP>(K_s, LDS, k, ldkv, start, k0 + FA_BK, len, (size_t)hk * d, d, vec);
        fa_cp_commit();
        float mx[2] = {-INFINITY, -INFINITY};
        #pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = k0 + nt * 8 + 2 * t + (i & 1), qi = qrow + (i >> 1) * 8;
                int valid = j < len && (!causal || j <= qi);
                s[nt][i] = valid ? s[nt][i] * scale_log2 : -INFINITY;
                mx[i >> 1] = fmaxf(mx[i >> 1], s[nt][i]);
            }
        float corr[2], mb[2];
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float mn = fmaxf(m[r], mx[r]);
            corr[r] = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - mn);
            m[r] = mn;
            mb[r] = mn == -INFINITY ? 0.0f : mn; // a row with no key yet: every p is 0
            l[r] *= corr[r];
        }
        #pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                float p = exp2f(s[nt][i] - mb[i >> 1]);
                s[nt][i] = p;
                l[i >> 1] += p;
            }
        #pragma unroll
        for (int dn = 0; dn < DP / 8; dn++) {
            o[dn][0] *= corr[0], o[dn][1] *= corr[0];
            o[dn][2] *= corr[1], o[dn][3] *= corr[1];
        }
        fa_cp_wait1();
        __syncthreads(); // V of this tile in shared memory (the next K may still be in flight)
        fa_gemm_pb<DP>(o, s, V_s, LDS);
        __syncthreads(); // every warp is done with V_s
        if (k0 + FA_BK < kend) fa_tile<DP>(V_s, LDS, v, ldkv, start, k0 + FA_BK, len, (size_t)hk * d, d, vec);
        fa_cp_commit();
    }
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int qi = qrow + 8 * r;
        if (qi >= len) continue;
        size_t tok = (size_t)start + qi;
        float inv = 1.0f / l[r];
        #pragma unroll
        for (int dn = 0; dn < DP / 8; dn++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = dn * 8 + 2 * t + e;
                if (c < d) fa_store(&out[tok * ldo + (size_t)h * d + c], o[dn][2 * r + e] * inv, round_out);
            }
        if (t == 0) lse[tok * H + h] = (m[r] + log2f(l[r])) * FA_LN2;
    }
}

// ---- backward ------------------------------------------------------------------------------------------
// Three launches (four on f32 storage), still no atomics and one writer per output element:
//   copies (f32 storage only): q, k, v into packed bf16 rows in the scratch (fa_bf16_copies_kernel), so that the
//         kernels below read bf16 by cp.async on either storage (the prep kernel copies dout on its way);
//   prep: per (token, head) the row statistics once, into scratch [2][H][T] f32 (fa_bwd_scratch): L = lse in
//         log2 units and D = dO . O (both rounded to bf16 as v1's tiles held them; one warp per row, a fixed
//         order). v1 recomputed D in every block from an O tile: the dk/dv kernel once per (key tile, query
//         tile) pair, so O was a third of its streamed bytes and a pass with an extra barrier per tile.
//   dq:   per (64-query tile, head), 4 warps: Q and dO loaded once, K and V streamed by cp.async ahead of their
//         use: dq2 double-buffers them (one barrier pair per tile), dq3 (head dims 96, 128) keeps single buffers
//         in the forward's pipeline so that 3 blocks fit an SM; v1 loaded them synchronously between two
//         barriers, so the SM idled for the copy's latency.
//   dk, dv: per (16 NW keys, key/value head): K and V resident, Q and dO double-buffered the same way, the
//         next tile's L and D read into registers before the tile's products and stored to shared memory after.
//         NW = 4 (64 keys) where v1 had 8 at DP 96 and 128: a 4-warp block of at most 255 registers, 2 blocks
//         per SM (shared memory 105 KB each at DP 128), so one block's barriers and copy waits are hidden by
//         the other's products; v1's 8-warp block was alone on its SM.
// The products and the elementwise steps are v1's (the same MMAs in the same order), so dq, dk and dv differ
// from v1's only through D's summation order.

// The backward's configuration: the tile a block takes (q_tile: the dq kernels', kv_tile: the dk/dv kernel's), the
// dk/dv kernel's warps at head dim 128 and the dq kernel at head dims 96 and 128 (dq_double: dq2 instead of dq3).
// This is the shipping one: blocks sample by sample (a causal sample's query tiles from its last). The versions
// measured against it (v1's kernels, longest-first block order, 8-warp dk/dv blocks, dq2 at every head dim) are
// in dev/cuda/ with their check and benchmark.
struct FaBwdShipping {
    static __device__ int q_tile(const int* cu_seqlens, int S, int* start, int* len, int* r0, int causal) {
        return fa_find_tile(cu_seqlens, S, start, len, r0, causal);
    }
    static __device__ int kv_tile(const int* cu_seqlens, int S, int* start, int* len, int* r0, int causal, int rows) {
        (void)causal;
        return fa_find_tile(cu_seqlens, S, start, len, r0, 0, rows);
    }
    static const int warps_128 = 4, dq_double = 0, longest_first = 0;
};

// rows (tokens x heads) of a prep block: one warp each
#define FA_PREP_ROWS 8
// do16 (f32 storage; NULL on bf16): dout's bf16 copy, packed rows of H d, written on the way
template <typename T>
static __global__ void __launch_bounds__(32 * FA_PREP_ROWS) fa_bwd_prep_kernel(float* Lg, float* Dg, bf16_t* do16,
                                                                             const T* dout, const T* out,
                                                                             const float* lse, int T_, int H, int d,
                                                                             int ldo) {
    size_t row = (size_t)blockIdx.x * FA_PREP_ROWS + threadIdx.x / 32; // tok * H + h
    int lane = threadIdx.x % 32;
    if (row >= (size_t)T_ * H) return; // the whole warp
    size_t tok = row / (size_t)H;
    int h = (int)(row % (size_t)H);
    const T* a = dout + tok * ldo + (size_t)h * d;
    const T* b = out + tok * ldo + (size_t)h * d;
    float s = 0.0f;
    bf16_t* o16 = do16 ? do16 + row * d : NULL; // row = tok H + h: packed rows of H d
    for (int c = lane; c < d; c += 32) {
        bf16_t x = fa_to_bf16(a[c]);
        if (o16) o16[c] = x;
        s += fa_to_f32(x) * fa_to_f32(fa_to_bf16(b[c]));
    }
    s = warp_sum(s);
    if (lane == 0) {
        Dg[(size_t)h * T_ + tok] = s;
        Lg[(size_t)h * T_ + tok] = lse[row] * FA_LOG2E;
    }
}

// ---- the backward kernels' shared steps ------------------------------------------------------------------

// L (log2 units) and D of query rows r0 .. r0 + 63 of head h from the prep kernel's scratch into L_s, D_s (0 past
// the sample): threads 0 .. 63, a row each
static __device__ __forceinline__ void fa_load_ld(float* L_s, float* D_s, const float* Lg, const float* Dg, int h,
                                                  int T_, int start, int r0, int len) {
    if (threadIdx.x < FA_BQ) {
        int r = threadIdx.x, ok = r0 + r < len;
        size_t at = (size_t)h * T_ + start + r0 + r;
        L_s[r] = ok ? Lg[at] : 0.0f;
        D_s[r] = ok ? Dg[at] : 0.0f;
    }
}

// dS = P (dP - D) of a dq block's key tile k0 into s (S = Q K^T on entry; dp: dP = dO V^T), for this thread's rows
// qrow and qrow + 8 (L lrow, D drow). FULL: every (query, key) pair of the tile is in (no mask)
template <bool FULL>
static __device__ __forceinline__ void fa_dq_ds(float (*s)[4], const float (*dp)[4], const float* lrow,
                                                const float* drow, int k0, int qrow, int t, int len, int causal,
                                                float scale_log2) {
    #pragma unroll
    for (int nt = 0; nt < FA_BK / 8; nt++)
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int j = k0 + nt * 8 + 2 * t + (i & 1), qi = qrow + (i >> 1) * 8;
            int valid = FULL || (j < len && qi < len && (!causal || j <= qi));
            float p = valid ? exp2f(s[nt][i] * scale_log2 - lrow[i >> 1]) : 0.0f;
            s[nt][i] = p * (dp[nt][i] - drow[i >> 1]); // dS
        }
}

// P^T and dS^T = P^T (dP^T - D) of a dk/dv block's query tile qt for this thread's keys krow and krow + 8: s (S^T on
// entry) takes P^T, dp (dP^T) takes dS^T; L, D: the tile's rows' (shared memory). FULL: every (key, query) pair is
// in (no mask)
template <bool FULL>
static __device__ __forceinline__ void fa_kv_p_ds(float (*s)[4], float (*dp)[4], const float* L, const float* D, int qt,
                                                  int krow, int t, int len, int causal, float scale_log2) {
    #pragma unroll
    for (int nt = 0; nt < FA_BQ / 8; nt++)
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int c = nt * 8 + 2 * t + (i & 1), qi = qt + c, kj = krow + (i >> 1) * 8;
            int valid = FULL || (qi < len && kj < len && (!causal || kj <= qi));
            float p = valid ? exp2f(s[nt][i] * scale_log2 - L[c]) : 0.0f;
            s[nt][i] = p;                      // P^T
            dp[nt][i] = p * (dp[nt][i] - D[c]); // dS^T
        }
}

// A thread's rows row0 and row0 + 8 of a sample (token start; none at or past len) in head h's d columns of g (rows of
// stride ldg) += alpha acc (a dq, dk or dv accumulator), and the new values' 2-byte mirror m16 (rows of stride ldm16;
// NULL: none)
template <int DP, typename T>
static __device__ __forceinline__ void fa_add_rows(T* g, int ldg, const float (*acc)[4], float alpha, int start,
                                                   int row0, int len, int h, int d, int t, bf16_t* m16, int ldm16) {
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = row0 + 8 * r;
        if (i >= len) continue;
        size_t tok = (size_t)start + i;
        #pragma unroll
        for (int dn = 0; dn < DP / 8; dn++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = dn * 8 + 2 * t + e;
                if (c < d) {
                    T* p = &g[tok * ldg + (size_t)h * d + c];
                    float nv = fa_to_f32(*p) + alpha * acc[dn][2 * r + e];
                    fa_store(p, nv, 0);
                    if (m16) m16[tok * ldm16 + (size_t)h * d + c] = rr_f32_to_bf16(nv); // the 2-byte mirror
                }
            }
    }
}

template <int DP> struct FaDq2MinBlocks {
    static const int MINB = DP == 64 ? 4 : 0;
};
template <int DP, typename T, typename Cfg = FaBwdShipping>
static __global__ void __launch_bounds__(FA_THREADS, (FaDq2MinBlocks<DP>::MINB)) fa_backward_dq2_kernel(T* dq, int ldgq, const bf16_t* dout,
                                                                          const float* Lg, const float* Dg,
                                                                          const bf16_t* q, const bf16_t* k,
                                                                          const bf16_t* v, const int* cu_seqlens, int S,
                                                                          int T_, int H, int Hkv, int d, int ldq,
                                                                          int ldkv, int ldo, int causal,
                                                                          float scale_log2, float scale, int vec,
                                                                          bf16_t* m16, int ldm16) {
    extern __shared__ float smem[];
    const int LDS = DP + 8, TILE = FA_BQ * LDS;
    float* L_s = smem;                    // [64] lse of the tile's rows, log2 units
    float* D_s = L_s + FA_BQ;             // [64]
    bf16_t* Q_s = (bf16_t*)(D_s + FA_BQ); // [64][LDS]
    bf16_t* dO_s = Q_s + TILE;            // [64][LDS]
    bf16_t* K_s = dO_s + TILE;            // [2][64][LDS]
    bf16_t* V_s = K_s + 2 * TILE;         // [2][64][LDS]
    int start, len, q0;
    if (!Cfg::q_tile(cu_seqlens, S, &start, &len, &q0, causal)) return;
    int h = blockIdx.y, hk = h / (H / Hkv);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
    int kend = causal ? min(len, q0 + FA_BQ) : len;
    // group 0: Q, dO and key tile 0; then one group per key tile (the next one's K and V)
    fa_tile<DP>(Q_s, LDS, q, ldq, start, q0, len, (size_t)h * d, d, vec);
    fa_tile<DP>(dO_s, LDS, dout, ldo, start, q0, len, (size_t)h * d, d, vec);
    fa_tile<DP>(K_s, LDS, k, ldkv, start, 0, len, (size_t)hk * d, d, vec);
    fa_tile<DP>(V_s, LDS, v, ldkv, start, 0, len, (size_t)hk * d, d, vec);
    fa_cp_commit();
    fa_load_ld(L_s, D_s, Lg, Dg, h, T_, start, q0, len);

    float acc[DP / 8][4];
    fa_zero<DP / 8>(acc);
    int qrow = q0 + 16 * warp + g;                // this thread's rows: qrow, qrow + 8
    float lrow[2] = {0.0f, 0.0f}, drow[2] = {0.0f, 0.0f}; // their L and D (after the first barrier)
    for (int k0 = 0, buf = 0; k0 < kend; k0 += FA_BK, buf ^= 1) {
        __syncthreads(); // every warp is done with the other buffers (the previous key tile)
        if (k0 + FA_BK < kend) {
            fa_tile<DP>(K_s + (buf ^ 1) * TILE, LDS, k, ldkv, start, k0 + FA_BK, len, (size_t)hk * d, d, vec);
            fa_tile<DP>(V_s + (buf ^ 1) * TILE, LDS, v, ldkv, start, k0 + FA_BK, len, (size_t)hk * d, d, vec);
        }
        fa_cp_commit();
        fa_cp_wait1();   // all but the group just issued: this key tile (and Q, dO)
        __syncthreads(); // ... and every thread's share of it
        if (k0 == 0) {
            #pragma unroll
            for (int r = 0; r < 2; r++) lrow[r] = L_s[16 * warp + g + 8 * r], drow[r] = D_s[16 * warp + g + 8 * r];
        }
        const bf16_t* Kb = K_s + buf * TILE;
        const bf16_t* Vb = V_s + buf * TILE;
        float s[FA_BK / 8][4], dp[FA_BK / 8][4];
        fa_zero<FA_BK / 8>(s);
        fa_zero<FA_BK / 8>(dp);
        fa_gemm_abt<DP, FA_BK / 8>(s, Q_s + 16 * warp * LDS, LDS, Kb, LDS);
        fa_gemm_abt<DP, FA_BK / 8>(dp, dO_s + 16 * warp * LDS, LDS, Vb, LDS);
        if (k0 + FA_BK <= len && q0 + FA_BQ <= len && (!causal || k0 + FA_BK - 1 <= q0)) // every pair of the tile is in
            fa_dq_ds<true>(s, dp, lrow, drow, k0, qrow, t, len, causal, scale_log2);
        else
            fa_dq_ds<false>(s, dp, lrow, drow, k0, qrow, t, len, causal, scale_log2);
        fa_gemm_pb<DP>(acc, s, Kb, LDS);
    }
    fa_add_rows<DP>(dq, ldgq, acc, scale, start, qrow, len, h, d, t, m16, ldm16);
}

// dq with single K and V buffers (the forward's pipeline; the default at head dims 96 and 128, where dq2's six
// tiles of shared memory, 105 KB at 128, leave 2 blocks per SM and these four, 70 KB, leave 3, as its 168
// registers do): per key tile dP = dO V^T first, then V's buffer takes the next tile's V while the warps work on
// S = Q K^T, dS and dQ += dS K; then K's buffer takes the next K while they work on the next dP. Copy groups:
// {Q, dO, V_0}, {K_0}, then per tile {V_next}, {K_next}; "wait 1" before a buffer's use leaves only the other
// buffer's copy in flight. Four barriers per tile (dq2: two), the loads hidden behind a third (K) and two
// thirds (V) of the tile's products, and by the SM's other blocks.
template <int DP, typename T, typename Cfg = FaBwdShipping>
static __global__ void __launch_bounds__(FA_THREADS, 3)
    fa_backward_dq3_kernel(T* dq, int ldgq, const bf16_t* dout, const float* Lg, const float* Dg, const bf16_t* q,
                           const bf16_t* k, const bf16_t* v, const int* cu_seqlens, int S, int T_, int H, int Hkv, int d,
                           int ldq, int ldkv, int ldo, int causal, float scale_log2, float scale, int vec,
                           bf16_t* m16, int ldm16) {
    extern __shared__ float smem[];
    const int LDS = DP + 8, TILE = FA_BQ * LDS;
    float* L_s = smem;                    // [64] lse of the tile's rows, log2 units
    float* D_s = L_s + FA_BQ;             // [64]
    bf16_t* Q_s = (bf16_t*)(D_s + FA_BQ); // [64][LDS]
    bf16_t* dO_s = Q_s + TILE;            // [64][LDS]
    bf16_t* K_s = dO_s + TILE;            // [64][LDS]
    bf16_t* V_s = K_s + TILE;             // [64][LDS]
    int start, len, q0;
    if (!Cfg::q_tile(cu_seqlens, S, &start, &len, &q0, causal)) return;
    int h = blockIdx.y, hk = h / (H / Hkv);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
    int kend = causal ? min(len, q0 + FA_BQ) : len;
    fa_tile<DP>(Q_s, LDS, q, ldq, start, q0, len, (size_t)h * d, d, vec);
    fa_tile<DP>(dO_s, LDS, dout, ldo, start, q0, len, (size_t)h * d, d, vec);
    fa_tile<DP>(V_s, LDS, v, ldkv, start, 0, len, (size_t)hk * d, d, vec);
    fa_cp_commit();
    fa_tile<DP>(K_s, LDS, k, ldkv, start, 0, len, (size_t)hk * d, d, vec);
    fa_cp_commit();
    fa_load_ld(L_s, D_s, Lg, Dg, h, T_, start, q0, len);

    float acc[DP / 8][4];
    fa_zero<DP / 8>(acc);
    int qrow = q0 + 16 * warp + g;                        // this thread's rows: qrow, qrow + 8
    float lrow[2] = {0.0f, 0.0f}, drow[2] = {0.0f, 0.0f}; // their L and D (after the first barrier)
    for (int k0 = 0; k0 < kend; k0 += FA_BK) {
        fa_cp_wait1();   // all but the newest group (this tile's K): V (and Q, dO)
        __syncthreads(); // ... and every thread's share of them
        if (k0 == 0) {
            #pragma unroll
            for (int r = 0; r < 2; r++) lrow[r] = L_s[16 * warp + g + 8 * r], drow[r] = D_s[16 * warp + g + 8 * r];
        }
        float s[FA_BK / 8][4], dp[FA_BK / 8][4];
        fa_zero<FA_BK / 8>(s);
        fa_zero<FA_BK / 8>(dp);
        fa_gemm_abt<DP, FA_BK / 8>(dp, dO_s + 16 * warp * LDS, LDS, V_s, LDS);
        __syncthreads(); // every warp is done with V_s: the next tile's V goes there
        if (k0 + FA_BK < kend) fa_tile<DP>(V_s, LDS, v, ldkv, start, k0 + FA_BK, len, (size_t)hk * d, d, vec);
        fa_cp_commit();
        fa_cp_wait1();   // all but the next V: this tile's K
        __syncthreads();
        fa_gemm_abt<DP, FA_BK / 8>(s, Q_s + 16 * warp * LDS, LDS, K_s, LDS);
        if (k0 + FA_BK <= len && q0 + FA_BQ <= len && (!causal || k0 + FA_BK - 1 <= q0)) // every pair of the tile is in
            fa_dq_ds<true>(s, dp, lrow, drow, k0, qrow, t, len, causal, scale_log2);
        else
            fa_dq_ds<false>(s, dp, lrow, drow, k0, qrow, t, len, causal, scale_log2);
        fa_gemm_pb<DP>(acc, s, K_s, LDS);
        __syncthreads(); // every warp is done with K_s: the next tile's K goes there
        if (k0 + FA_BK < kend) fa_tile<DP>(K_s, LDS, k, ldkv, start, k0 + FA_BK, len, (size_t)hk * d, d, vec);
        fa_cp_commit();
    }
    fa_add_rows<DP>(dq, ldgq, acc, scale, start, qrow, len, h, d, t, m16, ldm16);
}

// NW warps of 16 keys each (the block's 16 NW keys); FaDkdv2Warps: the default per head dim
// MINB: blocks per SM the registers must allow, where the compiler would otherwise take a few more (DP 64: 168
// registers, 3 blocks of 4 warps, as v1; 172 would leave 2).
template <int DP> struct FaDkdv2Warps {
    static const int NW = DP == 32 ? 8 : 4;
};
template <int DP, int NW> struct FaDkdv2MinBlocks {
    static const int MINB = DP == 64 && NW == 4 ? 3 : 0;
};
// TV: dv's storage (T, or bf16_t: the 2-byte dv that goes with 2-byte activations, rows of stride ldgv, bf16(old + sum) in one store)
template <int DP, typename T, int NW, typename TV = T, typename Cfg = FaBwdShipping>
static __global__ void __launch_bounds__(32 * NW, (FaDkdv2MinBlocks<DP, NW>::MINB)) fa_backward_dkdv2_kernel(T* dk, TV* dv, int ldgkv, int ldgv,
                                                                         const bf16_t* dout, const float* Lg,
                                                                         const float* Dg, const bf16_t* q,
                                                                         const bf16_t* k, const bf16_t* v,
                                                                         const int* cu_seqlens, int S,
                                                                         int T_, int H, int Hkv, int d, int ldq,
                                                                         int ldkv, int ldo, int causal,
                                                                         float scale_log2, float scale, int vec,
                                                                         bf16_t* dk16, bf16_t* dv16m, int ldm16) {
    extern __shared__ float smem[];
    const int LDS = DP + 8, KB = 16 * NW, NTH = 32 * NW, TILE = FA_BQ * LDS;
    float* L_s = smem;                        // [2][64] of the streamed queries
    float* D_s = L_s + 2 * FA_BQ;             // [2][64]
    bf16_t* K_s = (bf16_t*)(D_s + 2 * FA_BQ); // [KB][LDS] this block's keys
    bf16_t* V_s = K_s + KB * LDS;             // [KB][LDS]
    bf16_t* Q_s = V_s + KB * LDS;             // [2][64][LDS] streamed queries
    bf16_t* dO_s = Q_s + 2 * TILE;            // [2][64][LDS]
    int start, len, k0;
    if (!Cfg::kv_tile(cu_seqlens, S, &start, &len, &k0, causal, KB)) return;
    int hk = blockIdx.y, group = H / Hkv;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
    // the block's steps: (query head of the group, query tile), tiles from the key tile on under a causal mask
    // (queries before it see none of its keys; k0 < len, so nq >= 1)
    int qfirst = causal ? k0 : 0, nq = (len - qfirst + FA_BQ - 1) / FA_BQ, n = group * nq;
    // group 0: K, V and step 0's Q, dO; then one group per step (the next step's Q, dO)
    for (int r = 0; r < KB; r += FA_BQ) { // 64 rows per load
        fa_tile<DP, bf16_t, NTH>(K_s + r * LDS, LDS, k, ldkv, start, k0 + r, len, (size_t)hk * d, d, vec);
        fa_tile<DP, bf16_t, NTH>(V_s + r * LDS, LDS, v, ldkv, start, k0 + r, len, (size_t)hk * d, d, vec);
    }
    fa_tile<DP, bf16_t, NTH>(Q_s, LDS, q, ldq, start, qfirst, len, (size_t)hk * group * d, d, vec);
    fa_tile<DP, bf16_t, NTH>(dO_s, LDS, dout, ldo, start, qfirst, len, (size_t)hk * group * d, d, vec);
    fa_cp_commit();
    fa_load_ld(L_s, D_s, Lg, Dg, hk * group, T_, start, qfirst, len);

    float dk_acc[DP / 8][4], dv_acc[DP / 8][4];
    fa_zero<DP / 8>(dk_acc);
    fa_zero<DP / 8>(dv_acc);
    int krow = k0 + 16 * warp + g; // this thread's keys: krow, krow + 8
    for (int it = 0; it < n; it++) {
        int buf = it & 1, qt = qfirst + (it % nq) * FA_BQ;
        __syncthreads(); // every warp is done with the other buffers (the previous step)
        float nl = 0.0f, nd = 0.0f; // the next step's L and D of row threadIdx.x (threads < 64)
        if (it + 1 < n) {
            int h1 = hk * group + (it + 1) / nq, q1 = qfirst + ((it + 1) % nq) * FA_BQ;
            fa_tile<DP, bf16_t, NTH>(Q_s + (buf ^ 1) * TILE, LDS, q, ldq, start, q1, len, (size_t)h1 * d, d, vec);
            fa_tile<DP, bf16_t, NTH>(dO_s + (buf ^ 1) * TILE, LDS, dout, ldo, start, q1, len, (size_t)h1 * d, d, vec);
            if (threadIdx.x < FA_BQ && q1 + (int)threadIdx.x < len) {
                size_t at = (size_t)h1 * T_ + start + q1 + threadIdx.x;
                nl = Lg[at], nd = Dg[at];
            }
        }
        fa_cp_commit();
        fa_cp_wait1();   // all but the group just issued: this step's Q and dO
        __syncthreads(); // ... and every thread's share of them, and their L, D
        const bf16_t* Qb = Q_s + buf * TILE;
        const bf16_t* dOb = dO_s + buf * TILE;
        const float* Lb = L_s + buf * FA_BQ;
        const float* Db = D_s + buf * FA_BQ;
        float s[FA_BQ / 8][4], dp[FA_BQ / 8][4];
        fa_zero<FA_BQ / 8>(s);
        fa_zero<FA_BQ / 8>(dp);
        fa_gemm_abt<DP, FA_BQ / 8>(s, K_s + 16 * warp * LDS, LDS, Qb, LDS);   // S^T: keys x queries
        fa_gemm_abt<DP, FA_BQ / 8>(dp, V_s + 16 * warp * LDS, LDS, dOb, LDS); // dP^T
        if (qt + FA_BQ <= len && k0 + KB <= len && (!causal || k0 + KB - 1 <= qt)) // every pair of the step is in
            fa_kv_p_ds<true>(s, dp, Lb, Db, qt, krow, t, len, causal, scale_log2);
        else
            fa_kv_p_ds<false>(s, dp, Lb, Db, qt, krow, t, len, causal, scale_log2);
        fa_gemm_pb<DP>(dv_acc, s, dOb, LDS);
        fa_gemm_pb<DP>(dk_acc, dp, Qb, LDS);
        if (threadIdx.x < FA_BQ) { // the other buffer: nobody reads it before the next step's barriers
            L_s[(buf ^ 1) * FA_BQ + threadIdx.x] = nl;
            D_s[(buf ^ 1) * FA_BQ + threadIdx.x] = nd;
        }
    }
    if (dk) fa_add_rows<DP>(dk, ldgkv, dk_acc, scale, start, krow, len, hk, d, t, dk16, ldm16);
    if (dv) fa_add_rows<DP>(dv, ldgv, dv_acc, 1.0f, start, krow, len, hk, d, t, dv16m, ldm16);
}

// ---- launchers ---------------------------------------------------------------------------------------

// what the last backward ran (rrfp_cuda_flash_attention_bwd_info): version, and the dk/dv kernel's warps per block
static int fa_last_bwd_version, fa_last_bwd_warps;
static int fa_last_bwd_dq;  // the dq kernel: 2 (dq2: double buffers), 1 (dq3: single), 0 (none)
static int fa_last_bwd_lpt; // the block order: 1 (longest first over all samples, dev/cuda/), 0 (sample by sample)

static size_t fa_forward_smem(int DP) { return 2 * (size_t)3 * FA_BQ * (DP + 8); }

// 8-value loads (fa_load_tile) hold when every row starts 8-value aligned: d, the strides and the pointers
static int fa_vec_ok(int d, int ldq, int ldkv, int ldo, size_t es, const void* a, const void* b, const void* c,
                     const void* e) {
    int ok = d % 8 == 0 && ldq % 8 == 0 && ldkv % 8 == 0 && ldo % 8 == 0;
    const void* ps[4] = {a, b, c, e};
    for (int i = 0; i < 4; i++) ok &= ps[i] == NULL || (uintptr_t)ps[i] % (8 * es) == 0;
    return ok;
}

static int fa_padded_dim(int d) { return d <= 32 ? 32 : d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : 256; }

static void fa_check(int S, int T, int H, int Hkv, int d) {
    if (d < 1 || d > FA_MAX_D)
        rr_die("CUDA flash attention: head dim %d is not supported (1..%d); use more heads or the CPU backend", d,
               FA_MAX_D);
    if (Hkv < 1 || H % Hkv)
        rr_die("CUDA flash attention: %d key/value heads do not divide %d query heads", Hkv, H);
    if (H > 65535 || (size_t)T / FA_BQ + (size_t)S + 1 > 2147483647u)
        rr_die("CUDA flash attention: %d heads, %d tokens in %d samples is beyond the launch limits", H, T, S);
}

template <int DP, typename T>
static void fa_forward_dp(T* out, float* lse, const T* q, const T* k, const T* v, const int* cu_seqlens, int S, int T_,
                          int H, int Hkv, int d, int ldq, int ldkv, int ldo, int causal, int round_out,
                          cudaStream_t stream) {
    size_t smem = fa_forward_smem(DP);
    cudaCheck(cudaFuncSetAttribute(fa_forward_kernel<DP, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(ceil_div(T_, FA_BQ) + S, H);
    float scale_log2 = FA_LOG2E / sqrtf((float)d);
    int vec = fa_vec_ok(d, ldq, ldkv, ldo, sizeof(T), q, k, v, NULL);
    fa_forward_kernel<DP, T><<<grid, FA_THREADS, smem, stream>>>(out, lse, q, k, v, cu_seqlens, S, H, Hkv, d, ldq, ldkv,
                                                                 ldo, causal, scale_log2, round_out, vec);
    cudaCheck(cudaGetLastError());
}

// ---- backward v2's launcher and scratch ----------------------------------------------------------------

// The row statistics' scratch: 2 T H f32 (L, then D), kept between calls and grown when a bigger call comes
// (BackendDevice.reserve sizes it before the first step: cuda_flash_attention_reserve). One per process, as the bf16
// GEMMs' scratch: the backward runs on the stream of the table it was called through, and tables bound to other
// streams must not run it concurrently.
static float* fa_scratch;
static size_t fa_scratch_n;
static float* fa_bwd_scratch(size_t n) {
    if (n > fa_scratch_n) {
        if (fa_scratch) cuda_free_tracked(fa_scratch); // waits for its users
        cuda_malloc_tracked((void**)&fa_scratch, n * sizeof(float));
        fa_scratch_n = n;
    }
    return fa_scratch;
}
// The scratch's layout (f32 words): L [H][T], D [H][T], then on f32 storage the bf16 copies of q, dout (T H d
// each, packed rows) and k, v (T Hkv d each), every region 16-byte aligned.
typedef struct {
    size_t D_at, q16_at, do16_at, k16_at, v16_at, total; // offsets and size in f32 words
} FaBwdScratch;
static size_t fa_up4(size_t x) { return (x + 3) / 4 * 4; }
static FaBwdScratch fa_bwd_scratch_layout(int T, int H, int Hkv, int d, int copies) {
    size_t t = (size_t)(T > 0 ? T : 0), th = t * (size_t)H, thd = th * (size_t)d, tkd = t * (size_t)Hkv * (size_t)d;
    FaBwdScratch L;
    L.D_at = fa_up4(th);
    L.q16_at = L.D_at + fa_up4(th);
    if (!copies) {
        L.do16_at = L.k16_at = L.v16_at = 0, L.total = L.q16_at;
        return L;
    }
    L.do16_at = L.q16_at + fa_up4((thd + 1) / 2);
    L.k16_at = L.do16_at + fa_up4((thd + 1) / 2);
    L.v16_at = L.k16_at + fa_up4((tkd + 1) / 2);
    L.total = L.v16_at + fa_up4((tkd + 1) / 2);
    return L;
}
// The bf16 table calls the f32 entry (its f32 buffers hold bf16 values), so reserve for that: with copies, and
// Hkv = H (the most a call of these heads can need).
void cuda_flash_attention_reserve(const AttnReserve* attn, int n_attn) {
    size_t most = 0;
    for (int i = 0; i < n_attn; i++) {
        const AttnReserve* a = &attn[i];
        if (a->max_T < 1 || a->H < 1 || a->d < 1 || a->d > FA_MAX_D) continue;
        size_t n = fa_bwd_scratch_layout(a->max_T, a->H, a->H, a->d, 1).total;
        if (n > most) most = n;
    }
    if (most) (void)fa_bwd_scratch(most);
}

// f32 storage: q, k, v (three column ranges of T rows, stride ld each) into packed bf16 rows (what the kernels
// then read by cp.async): block (t, seg) converts row t of q (seg 0), k (1) or v (2)
#define FA_COPY_THREADS 256
static __global__ void __launch_bounds__(FA_COPY_THREADS) fa_bf16_copies_kernel(bf16_t* q16, const float* q, int ldq,
                                                                               int qcols, bf16_t* k16, const float* k,
                                                                               bf16_t* v16, const float* v, int ldkv,
                                                                               int kvcols) {
    int seg = blockIdx.y;
    size_t t = blockIdx.x;
    int cols = seg == 0 ? qcols : kvcols;
    bf16_t* dst = (seg == 0 ? q16 : seg == 1 ? k16 : v16) + t * cols;
    const float* src = (seg == 0 ? q : seg == 1 ? k : v) + t * (size_t)(seg == 0 ? ldq : ldkv);
    for (int c = threadIdx.x; c < cols; c += FA_COPY_THREADS) dst[c] = rr_f32_to_bf16(src[c]);
}

static size_t fa_dq2_smem(int DP) { return 2 * FA_BQ * sizeof(float) + 2 * (size_t)6 * FA_BQ * (DP + 8); }
static size_t fa_dq3_smem(int DP) { return 2 * FA_BQ * sizeof(float) + 2 * (size_t)4 * FA_BQ * (DP + 8); }
static size_t fa_dkdv2_smem(int DP, int NW) {
    return 4 * FA_BQ * sizeof(float) + 2 * ((size_t)4 * FA_BQ + 2 * 16 * NW) * (DP + 8);
}

template <int DP, typename T, int NW, typename TV = T, typename Cfg = FaBwdShipping>
static void fa_dkdv2_launch(T* dk, TV* dv, int ldgkv, int ldgv, const bf16_t* dout, const float* Lg, const float* Dg, const bf16_t* q,
                            const bf16_t* k, const bf16_t* v, const int* cu_seqlens, int S, int T_, int H, int Hkv, int d,
                            int ldq, int ldkv, int ldo, int causal, float scale_log2, float scale, int vec,
                            cudaStream_t stream, bf16_t* dk16 = NULL, bf16_t* dv16m = NULL, int ldm16 = 0) {
    size_t smem = fa_dkdv2_smem(DP, NW);
    cudaCheck(cudaFuncSetAttribute(fa_backward_dkdv2_kernel<DP, T, NW, TV, Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
    dim3 grid(ceil_div(T_, 16 * NW) + S, Hkv);
    fa_backward_dkdv2_kernel<DP, T, NW, TV, Cfg><<<grid, 32 * NW, smem, stream>>>(dk, dv, ldgkv, ldgv, dout, Lg, Dg, q, k, v, cu_seqlens, S,
                                                                        T_, H, Hkv, d, ldq, ldkv, ldo, causal, scale_log2,
                                                                        scale, vec, dk16, dv16m, ldm16);
    cudaCheck(cudaGetLastError());
}

// The pre-pass (and on f32 inputs the bf16 copies of q, k, v, dout), then the kernels on bf16 inputs; the
// gradients in TG (f32: added unrounded), rows of stride ldgq (dq) and ldgkv (dk, dv)
template <int DP, typename T, typename TG, typename TV = TG, typename Cfg = FaBwdShipping>
static void fa_backward2_dp(TG* dq, TG* dk, TV* dv, const T* dout, const T* out, const float* lse, const T* q, const T* k,
                            const T* v, const int* cu_seqlens, int S, int T_, int H, int Hkv, int d, int ldq, int ldkv,
                            int ldo, int ldgq, int ldgkv, int causal, cudaStream_t stream, int ldgv = -1,
                            bf16_t* dq16 = NULL, bf16_t* dk16 = NULL, bf16_t* dv16m = NULL, int ldm16 = 0) {
    if (ldgv < 0) ldgv = ldgkv;
    const int copies = std::is_same<T, float>::value;
    float scale = 1.0f / sqrtf((float)d), scale_log2 = FA_LOG2E * scale;
    size_t rows = (size_t)T_ * H;
    if ((rows + FA_PREP_ROWS - 1) / FA_PREP_ROWS > 2147483647u)
        rr_die("CUDA flash attention: %d tokens x %d heads is beyond the backward's launch limits", T_, H);
    FaBwdScratch L = fa_bwd_scratch_layout(T_, H, Hkv, d, copies);
    float* sc = fa_bwd_scratch(L.total);
    float *Lg = sc, *Dg = sc + L.D_at;
    // the kernels' inputs: bf16 storage as given, f32 storage as packed bf16 copies
    const bf16_t *q16, *k16, *v16, *do16;
    int lq = ldq, lkv = ldkv, lo = ldo;
    if constexpr (std::is_same<T, float>::value) {
        bf16_t* cq = (bf16_t*)(sc + L.q16_at);
        bf16_t* cdo = (bf16_t*)(sc + L.do16_at);
        bf16_t* ck = (bf16_t*)(sc + L.k16_at);
        bf16_t* cv = (bf16_t*)(sc + L.v16_at);
        fa_bf16_copies_kernel<<<dim3((unsigned)T_, 3), FA_COPY_THREADS, 0, stream>>>(cq, q, ldq, H * d, ck, k, cv, v, ldkv,
                                                                                   Hkv * d);
        cudaCheck(cudaGetLastError());
        fa_bwd_prep_kernel<T><<<(unsigned)((rows + FA_PREP_ROWS - 1) / FA_PREP_ROWS), 32 * FA_PREP_ROWS, 0, stream>>>(
            Lg, Dg, cdo, dout, out, lse, T_, H, d, ldo);
        cudaCheck(cudaGetLastError());
        q16 = cq, k16 = ck, v16 = cv, do16 = cdo;
        lq = H * d, lkv = Hkv * d, lo = H * d;
    } else {
        fa_bwd_prep_kernel<T><<<(unsigned)((rows + FA_PREP_ROWS - 1) / FA_PREP_ROWS), 32 * FA_PREP_ROWS, 0, stream>>>(
            Lg, Dg, (bf16_t*)NULL, dout, out, lse, T_, H, d, ldo);
        cudaCheck(cudaGetLastError());
        q16 = q, k16 = k, v16 = v, do16 = dout;
    }
    int vec = fa_vec_ok(d, lq, lkv, lo, sizeof(bf16_t), q16, k16, v16, do16);
    fa_last_bwd_lpt = Cfg::longest_first;
    if (dq) {
        dim3 grid(ceil_div(T_, FA_BQ) + S, H);
        if constexpr ((DP == 96 || DP == 128) && !Cfg::dq_double) {
            size_t smem = fa_dq3_smem(DP);
            cudaCheck(cudaFuncSetAttribute(fa_backward_dq3_kernel<DP, TG, Cfg>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            fa_backward_dq3_kernel<DP, TG, Cfg><<<grid, FA_THREADS, smem, stream>>>(dq, ldgq, do16, Lg, Dg, q16, k16, v16,
                                                                                   cu_seqlens, S, T_, H, Hkv, d, lq, lkv,
                                                                                   lo, causal, scale_log2, scale, vec,
                                                                                   dq16, ldm16);
            fa_last_bwd_dq = 1;
        } else {
            size_t smem = fa_dq2_smem(DP);
            cudaCheck(cudaFuncSetAttribute(fa_backward_dq2_kernel<DP, TG, Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)smem));
            fa_backward_dq2_kernel<DP, TG, Cfg><<<grid, FA_THREADS, smem, stream>>>(dq, ldgq, do16, Lg, Dg, q16, k16, v16,
                                                                                   cu_seqlens, S, T_, H, Hkv, d, lq, lkv, lo,
                                                                                   causal, scale_log2, scale, vec, dq16,
                                                                                   ldm16);
            fa_last_bwd_dq = 2;
        }
        cudaCheck(cudaGetLastError());
    }
    if (dk || dv) {
        constexpr int NW = DP == 128 ? Cfg::warps_128 : FaDkdv2Warps<DP>::NW;
        fa_last_bwd_warps = NW;
        fa_dkdv2_launch<DP, TG, NW, TV, Cfg>(dk, dv, ldgkv, ldgv, do16, Lg, Dg, q16, k16, v16, cu_seqlens, S, T_, H, Hkv, d,
                                             lq, lkv, lo, causal, scale_log2, scale, vec, stream, dk16, dv16m, ldm16);
    }
}

template <typename T>
static void fa_forward(T* out, float* lse, const T* q, const T* k, const T* v, const int* cu_seqlens, int S, int T_, int H,
                       int Hkv, int d, int ldq, int ldkv, int ldo, int causal, int round_out, cudaStream_t stream) {
    fa_check(S, T_, H, Hkv, d);
    if (T_ == 0 || H == 0) return;
    switch (fa_padded_dim(d)) {
    case 32: fa_forward_dp<32>(out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, round_out, stream); break;
    case 64: fa_forward_dp<64>(out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, round_out, stream); break;
    case 96: fa_forward_dp<96>(out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, round_out, stream); break;
    case 128: fa_forward_dp<128>(out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, round_out, stream); break;
    default: fa_forward_dp<256>(out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, round_out, stream); break;
    }
}

template <typename T, typename Cfg = FaBwdShipping>
static void fa_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const float* lse, const T* q, const T* k,
                        const T* v, const int* cu_seqlens, int S, int T_, int H, int Hkv, int d, int ldq, int ldkv,
                        int ldo, int causal, cudaStream_t stream) {
    fa_check(S, T_, H, Hkv, d);
    if (T_ == 0 || H == 0 || (!dq && !dk && !dv)) return;
    fa_last_bwd_version = 2, fa_last_bwd_warps = 0, fa_last_bwd_dq = 0, fa_last_bwd_lpt = 0;
    switch (fa_padded_dim(d)) {
    case 32: fa_backward2_dp<32, T, T, T, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldq, ldkv, causal, stream); break;
    case 64: fa_backward2_dp<64, T, T, T, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldq, ldkv, causal, stream); break;
    case 96: fa_backward2_dp<96, T, T, T, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldq, ldkv, causal, stream); break;
    case 128: fa_backward2_dp<128, T, T, T, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldq, ldkv, causal, stream); break;
    default: fa_backward2_dp<256, T, T, T, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldq, ldkv, causal, stream); break;
    }
}

// bf16 inputs, f32 gradients (a table whose activations are bf16 and whose gradients are f32): the same kernels as
// the f32 storage's without its copies
// TV: dv's storage (float, or bf16_t: 2-byte dv of row stride ldgv, bf16(dv + sum) stored)
template <typename TV, typename Cfg = FaBwdShipping>
static void fa_backward_bf16_f32grad(float* dq, float* dk, TV* dv, const bf16_t* dout, const bf16_t* out,
                                     const float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                     const int* cu_seqlens, int S, int T_, int H, int Hkv, int d, int ldq, int ldkv,
                                     int ldo, int ldgq, int ldgkv, int causal, cudaStream_t stream, int ldgv,
                                     bf16_t* dq16 = NULL, bf16_t* dk16 = NULL, bf16_t* dv16m = NULL, int ldm16 = 0) {
    fa_check(S, T_, H, Hkv, d);
    if (T_ == 0 || H == 0 || (!dq && !dk && !dv)) return;
    fa_last_bwd_version = 2, fa_last_bwd_warps = 0, fa_last_bwd_dq = 0, fa_last_bwd_lpt = 0;
    switch (fa_padded_dim(d)) {
    case 32: fa_backward2_dp<32, bf16_t, float, TV, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldgq, ldgkv, causal, stream, ldgv, dq16, dk16, dv16m, ldm16); break;
    case 64: fa_backward2_dp<64, bf16_t, float, TV, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldgq, ldgkv, causal, stream, ldgv, dq16, dk16, dv16m, ldm16); break;
    case 96: fa_backward2_dp<96, bf16_t, float, TV, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldgq, ldgkv, causal, stream, ldgv, dq16, dk16, dv16m, ldm16); break;
    case 128: fa_backward2_dp<128, bf16_t, float, TV, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldgq, ldgkv, causal, stream, ldgv, dq16, dk16, dv16m, ldm16); break;
    default: fa_backward2_dp<256, bf16_t, float, TV, Cfg>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, ldgq, ldgkv, causal, stream, ldgv, dq16, dk16, dv16m, ldm16); break;
    }
}

// ---- entry points (cuda_ops.cuh) ---------------------------------------------------------------------

void cuda_flash_attention_forward_bf16(cudaStream_t stream, __nv_bfloat16* out, float* lse, const __nv_bfloat16* q,
                                       const __nv_bfloat16* k, const __nv_bfloat16* v, const int* cu_seqlens, int S,
                                       int T, int H, int Hkv, int d, int ldq, int ldkv, int ldo, int causal) {
    fa_forward<bf16_t>((bf16_t*)out, lse, (const bf16_t*)q, (const bf16_t*)k, (const bf16_t*)v, cu_seqlens, S, T, H, Hkv,
                       d, ldq, ldkv, ldo, causal, 0, stream);
}
void cuda_flash_attention_backward_bf16(cudaStream_t stream, __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                                        const __nv_bfloat16* dout, const __nv_bfloat16* out, const float* lse,
                                        const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                        const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ldq, int ldkv,
                                        int ldo, int causal) {
    fa_backward<bf16_t>((bf16_t*)dq, (bf16_t*)dk, (bf16_t*)dv, (const bf16_t*)dout, (const bf16_t*)out, lse,
                        (const bf16_t*)q, (const bf16_t*)k, (const bf16_t*)v, cu_seqlens, S, T, H, Hkv, d, ldq, ldkv,
                        ldo, causal, stream);
}
void cuda_flash_attention_backward_bf16_f32grad(cudaStream_t stream, float* dq, float* dk, float* dv,
                                                const __nv_bfloat16* dout, const __nv_bfloat16* out, const float* lse,
                                                const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                                const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ldq,
                                                int ldkv, int ldo, int ldgq, int ldgkv, int causal) {
    fa_backward_bf16_f32grad<float>(dq, dk, dv, (const bf16_t*)dout, (const bf16_t*)out, lse, (const bf16_t*)q,
                                    (const bf16_t*)k, (const bf16_t*)v, cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, ldgq,
                                    ldgkv, causal, stream, ldgkv);
}
void cuda_flash_attention_backward_bf16_f32grad_m16(cudaStream_t stream, float* dq, float* dk, float* dv,
                                                     __nv_bfloat16* dq16, __nv_bfloat16* dk16, __nv_bfloat16* dv16,
                                                     int ld16, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                                     const float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                     const __nv_bfloat16* v, const int* cu_seqlens, int S, int T, int H,
                                                     int Hkv, int d, int ldq, int ldkv, int ldo, int ldgq, int ldgkv,
                                                     int causal) {
    fa_backward_bf16_f32grad<float>(dq, dk, dv, (const bf16_t*)dout, (const bf16_t*)out, lse, (const bf16_t*)q,
                                    (const bf16_t*)k, (const bf16_t*)v, cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, ldgq,
                                    ldgkv, causal, stream, ldgkv, (bf16_t*)dq16, (bf16_t*)dk16, (bf16_t*)dv16, ld16);
}
void cuda_flash_attention_backward_bf16_f32grad_dv16(cudaStream_t stream, float* dq, float* dk, __nv_bfloat16* dv16,
                                                     int ldgv, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                                     const float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                     const __nv_bfloat16* v, const int* cu_seqlens, int S, int T, int H,
                                                     int Hkv, int d, int ldq, int ldkv, int ldo, int ldgq, int ldgkv,
                                                     int causal) {
    fa_backward_bf16_f32grad<bf16_t>(dq, dk, (bf16_t*)dv16, (const bf16_t*)dout, (const bf16_t*)out, lse, (const bf16_t*)q,
                                     (const bf16_t*)k, (const bf16_t*)v, cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, ldgq,
                                     ldgkv, causal, stream, ldgv);
}
void cuda_flash_attention_forward_f32(cudaStream_t stream, float* out, float* lse, const float* q, const float* k,
                                      const float* v, const int* cu_seqlens, int S, int T, int H, int Hkv, int d,
                                      int ldq, int ldkv, int ldo, int causal, int round_out) {
    fa_forward<float>(out, lse, q, k, v, cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, causal, round_out, stream);
}
void cuda_flash_attention_backward_f32(cudaStream_t stream, float* dq, float* dk, float* dv, const float* dout,
                                       const float* out, const float* lse, const float* q, const float* k,
                                       const float* v, const int* cu_seqlens, int S, int T, int H, int Hkv, int d,
                                       int ldq, int ldkv, int ldo, int causal) {
    fa_backward<float>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, causal, stream);
}

// The last backward's kernels (tests/engine/cuda/test_flash_attn.c checks that the version it names ran, bench/gpu_attn_bench.c
// labels its figures): version 2 (1: dev/cuda/'s v1; 0: no backward yet), the dk/dv kernel's warps per block (0: dk
// and dv not asked for), the dq kernel: 2 (dq2: double-buffered K / V), 1 (dq3: single buffers), 0 (v1, or dq not
// asked for), and the block order: 1 (longest first over all samples: dev/cuda/), 0 (sample by sample)
extern "C" __attribute__((visibility("default"))) void rrfp_cuda_flash_attention_bwd_info(int* version, int* dkdv_warps,
                                                                                       int* dq_kernel, int* lpt) {
    *version = fa_last_bwd_version, *dkdv_warps = fa_last_bwd_warps, *dq_kernel = fa_last_bwd_dq;
    *lpt = fa_last_bwd_lpt;
}

// ---- which path ran (attention_path.h) -----------------------------------------------------------------

static long fa_path_counts[RR_ATTN_PATHS];
void cuda_attention_path_note(int path) {
    if (path >= 0 && path < RR_ATTN_PATHS) fa_path_counts[path]++;
}
// copies min(n, RR_ATTN_PATHS) counters; returns RR_ATTN_PATHS
extern "C" __attribute__((visibility("default"))) int rrfp_cuda_attention_paths(long* counts, int n) {
    for (int i = 0; i < n && i < RR_ATTN_PATHS; i++) counts[i] = fa_path_counts[i];
    return RR_ATTN_PATHS;
}

// ---- for tests and benchmarks (tests/engine/cuda/test_flash_attn.c, bench): the kernels on any storage and head layout --

// q, k, v, out and dout all f32 or all bf16 (__nv_bfloat16: converted on load; f32 outputs stored unrounded).
// Forward (backward = 0): a = out, in q's dtype, and lse written; backward: a = dq, dk, dv added to (each may be NULL,
// typed all the same), in q's dtype, or f32 with bf16 inputs (cuda_flash_attention_backward_bf16_f32grad), lse read.
// Runs on the backend's compute stream.
extern "C" __attribute__((visibility("default"))) void rrfp_cuda_flash_attention(int backward, Buf a, Buf dk, Buf dv,
                                                                               float* lse, Buf dout, Buf out, Buf q,
                                                                               Buf k, Buf v, const int* cu_seqlens,
                                                                               int S, int T, int H, int Hkv, int d,
                                                                               int ldq, int ldkv, int ldo, int causal) {
    cudaStream_t st = cuda_ctx.stream;
    DType in = q.dt;
    RR_ASSERT((in == DTYPE_F32 || in == DTYPE_BF16) && k.dt == in && v.dt == in && "q, k, v of one dtype");
    RR_ASSERT((!backward || (out.dt == in && dout.dt == in)) && "out and dout in q's dtype");
    RR_ASSERT(dk.dt == a.dt && dv.dt == a.dt && (a.dt == in || (backward && a.dt == DTYPE_F32)) &&
              "the outputs in q's dtype (or f32 gradients of bf16 inputs)");
    if (in == DTYPE_BF16 && backward && a.dt == DTYPE_F32) // bf16 inputs, f32 gradients of the same strides
        fa_backward_bf16_f32grad<float>(buf_f32p(a), buf_f32p(dk), buf_f32p(dv), (const bf16_t*)buf_bf16p(dout),
                                        (const bf16_t*)buf_bf16p(out), lse, (const bf16_t*)buf_bf16p(q),
                                        (const bf16_t*)buf_bf16p(k), (const bf16_t*)buf_bf16p(v), cu_seqlens, S, T, H, Hkv,
                                        d, ldq, ldkv, ldo, ldq, ldkv, causal, st, ldkv);
    else if (in == DTYPE_BF16 && !backward)
        fa_forward<bf16_t>((bf16_t*)buf_bf16p(a), lse, (const bf16_t*)buf_bf16p(q), (const bf16_t*)buf_bf16p(k),
                           (const bf16_t*)buf_bf16p(v), cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, causal, 0, st);
    else if (in == DTYPE_BF16)
        fa_backward<bf16_t>((bf16_t*)buf_bf16p(a), (bf16_t*)buf_bf16p(dk), (bf16_t*)buf_bf16p(dv),
                            (const bf16_t*)buf_bf16p(dout), (const bf16_t*)buf_bf16p(out), lse, (const bf16_t*)buf_bf16p(q),
                            (const bf16_t*)buf_bf16p(k), (const bf16_t*)buf_bf16p(v), cu_seqlens, S, T, H, Hkv, d, ldq,
                            ldkv, ldo, causal, st);
    else if (!backward)
        fa_forward<float>(buf_f32p(a), lse, buf_f32p(q), buf_f32p(k), buf_f32p(v), cu_seqlens, S, T, H, Hkv, d, ldq, ldkv,
                          ldo, causal, 0, st);
    else
        fa_backward<float>(buf_f32p(a), buf_f32p(dk), buf_f32p(dv), buf_f32p(dout), buf_f32p(out), lse, buf_f32p(q),
                           buf_f32p(k), buf_f32p(v), cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, causal, st);
}
