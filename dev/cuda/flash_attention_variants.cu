// flash_attention_variants.cu — the versions of the own tensor-core attention's backward that were measured
// against the shipping one (engine/cuda/flash_attention.cu) and did not ship, kept with their check and benchmark
// (dev/cuda/README.md). Not built by default: with -DRRFP_DEV_CUDA=ON this file is appended to
// engine/cuda/flash_attention.cu (one translation unit: it uses that file's helpers, kernels and launchers) and
// built as a second copy of the CUDA backend (librrfp-cuda.so under build/dev/, and the CPU emulation's
// rrfp_cuda_emu_dev), whose rrfp_dev_flash_attention entry runs the backward the environment asks for:
//   RRFP_FA_BWD=v1          v1: the first two kernels, D recomputed per tile from dO and O tiles, K / V loaded
//                           synchronously, 8-warp dk/dv blocks at head dims 96 and 128;
//   RRFP_FA_DKDV_WARPS=8    the shipping kernels with 8-warp (128-key) dk/dv blocks at head dim 128;
//   RRFP_FA_DQ=double       the shipping kernels with dq2 (double-buffered K / V) at head dims 96 and 128 too;
//   RRFP_FA_LPT=1           the shipping kernels with a call's blocks longest first over all samples, where there
//                           are several samples of more than a 64-row tile on average.
// Otherwise the shipping backward runs. Measured (docs/cuda.md "The backward, v2", bench/README.md): none of them
// is faster than the shipping one on the packings of bench/gpu_attn_bench.c.

// ---- the longest-first block order ----------------------------------------------------------------------

// Causal masks (FaBwdLongestFirst, where samples average more than one tile): the
// blocks in decreasing order of work over all samples, not sample by sample (longest processing time first,
// so that the grid's tail is one short block, not a long block that a late sample started). A block's level u
// is its work in tiles minus one: the dq kernel's query tile u (u + 1 key tiles), the dk/dv kernel's key tile
// nt - 1 - u (u + 1 query tiles of 64 rows at 64 keys a block). Block b is at level u when C(u + 1) <= b <
// C(u), with C(t) = sum over samples of max(0, nt - t) the blocks of levels t and up (a binary search over u,
// each probe a warp's pass over cu_seqlens), and the (b - C(u + 1))-th sample, in order, of those with more
// than u tiles. key_tiles: the dk/dv kernel's mapping. Every warp of the block finds the same tile.
static __device__ __forceinline__ int fa_warp_sum_i(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// the most tiles of `rows` rows a sample has (every lane of the warp)
static __device__ int fa_max_tiles(const int* cu_seqlens, int S, int rows) {
    int lane = threadIdx.x % 32, m = 0;
    for (int s0 = 0; s0 < S; s0 += 32) {
        int s = s0 + lane;
        if (s < S) m = max(m, (cu_seqlens[s + 1] - cu_seqlens[s] + rows - 1) / rows);
    }
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}
static __device__ int fa_level_count(const int* cu_seqlens, int S, int rows, int tau) {
    int lane = threadIdx.x % 32, c = 0;
    for (int s0 = 0; s0 < S; s0 += 32) {
        int s = s0 + lane;
        if (s < S) c += max(0, (cu_seqlens[s + 1] - cu_seqlens[s] + rows - 1) / rows - tau);
    }
    return fa_warp_sum_i(c);
}
static __device__ int fa_find_tile_lpt(const int* cu_seqlens, int S, int* start, int* len, int* r0, int key_tiles,
                                       int rows = FA_BQ) {
    int lane = threadIdx.x % 32, b = blockIdx.x, maxnt = fa_max_tiles(cu_seqlens, S, rows);
    if (b >= fa_level_count(cu_seqlens, S, rows, 0)) return 0; // a spare block
    int lo = 0, hi = maxnt; // C(lo) > b >= C(hi)
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (fa_level_count(cu_seqlens, S, rows, mid) > b) lo = mid;
        else hi = mid;
    }
    int u = lo, j = b - fa_level_count(cu_seqlens, S, rows, u + 1); // among the samples of more than u tiles
    for (int s0 = 0; s0 < S; s0 += 32) {
        int s = s0 + lane, st = 0, ln = 0, nt = 0;
        if (s < S) st = cu_seqlens[s], ln = cu_seqlens[s + 1] - st, nt = (ln + rows - 1) / rows;
        int inc = nt > u; // then: such samples among s0 .. s
        for (int o = 1; o < 32; o <<= 1) {
            int v = __shfl_sync(0xffffffffu, inc, lane >= o ? lane - o : lane);
            if (lane >= o) inc += v;
        }
        int total = __shfl_sync(0xffffffffu, inc, 31);
        if (j < total) {
            int at = fa_warp_sum_i(inc <= j); // the lanes before the (j + 1)-th such sample
            *start = __shfl_sync(0xffffffffu, st, at);
            *len = __shfl_sync(0xffffffffu, ln, at);
            int n = __shfl_sync(0xffffffffu, nt, at);
            *r0 = (key_tiles ? n - 1 - u : u) * rows;
            return 1;
        }
        j -= total;
    }
    return 0;
}

// Bidirectional (FaBwdLongestFirst as above): every block of a sample does the same work, its nt tiles, so
// the samples' blocks in decreasing order of nt (ties in sample order, a sample's tiles in order): block b is in
// level v when B(v + 1) <= b < B(v), with B(v) = the blocks of samples of at least v tiles (a binary search over v
// in 1 .. max nt), and is tile j % v of the (j / v)-th sample of exactly v tiles, j = b - B(v + 1). Samples of
// equal lengths keep the sample order.
static __device__ int fa_blocks_from(const int* cu_seqlens, int S, int rows, int v) {
    int lane = threadIdx.x % 32, c = 0;
    for (int s0 = 0; s0 < S; s0 += 32) {
        int s = s0 + lane;
        if (s < S) {
            int nt = (cu_seqlens[s + 1] - cu_seqlens[s] + rows - 1) / rows;
            c += nt >= v ? nt : 0;
        }
    }
    return fa_warp_sum_i(c);
}
static __device__ int fa_find_tile_lpt_bidir(const int* cu_seqlens, int S, int* start, int* len, int* r0,
                                             int rows = FA_BQ) {
    int lane = threadIdx.x % 32, b = blockIdx.x, maxnt = fa_max_tiles(cu_seqlens, S, rows);
    if (maxnt == 0 || b >= fa_blocks_from(cu_seqlens, S, rows, 1)) return 0; // a spare block
    int lo = 1, hi = maxnt + 1; // B(lo) > b >= B(hi)
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (fa_blocks_from(cu_seqlens, S, rows, mid) > b) lo = mid;
        else hi = mid;
    }
    int v = lo, j = b - fa_blocks_from(cu_seqlens, S, rows, v + 1), k = j / v; // the k-th sample of v tiles
    for (int s0 = 0; s0 < S; s0 += 32) {
        int s = s0 + lane, st = 0, ln = 0, nt = 0;
        if (s < S) st = cu_seqlens[s], ln = cu_seqlens[s + 1] - st, nt = (ln + rows - 1) / rows;
        int inc = nt == v; // then: such samples among s0 .. s
        for (int o = 1; o < 32; o <<= 1) {
            int x = __shfl_sync(0xffffffffu, inc, lane >= o ? lane - o : lane);
            if (lane >= o) inc += x;
        }
        int total = __shfl_sync(0xffffffffu, inc, 31);
        if (k < total) {
            int at = fa_warp_sum_i(inc <= k);
            *start = __shfl_sync(0xffffffffu, st, at);
            *len = __shfl_sync(0xffffffffu, ln, at);
            *r0 = (j % v) * rows;
            return 1;
        }
        k -= total;
    }
    return 0;
}

// the shipping configuration with the longest-first block order
struct FaBwdLongestFirst : FaBwdShipping {
    static __device__ int q_tile(const int* cu_seqlens, int S, int* start, int* len, int* r0, int causal) {
        return causal ? fa_find_tile_lpt(cu_seqlens, S, start, len, r0, 0)
                      : fa_find_tile_lpt_bidir(cu_seqlens, S, start, len, r0);
    }
    static __device__ int kv_tile(const int* cu_seqlens, int S, int* start, int* len, int* r0, int causal, int rows) {
        return causal ? fa_find_tile_lpt(cu_seqlens, S, start, len, r0, 1, rows)
                      : fa_find_tile_lpt_bidir(cu_seqlens, S, start, len, r0, rows);
    }
    static const int longest_first = 1;
};
// the shipping configuration with 8-warp dk/dv blocks at head dim 128
struct FaBwdWarps8 : FaBwdShipping {
    static const int warps_128 = 8;
};
// the shipping configuration with dq2 at head dims 96 and 128
struct FaBwdDqDouble : FaBwdShipping {
    static const int dq_double = 1;
};

// ---- v1 ------------------------------------------------------------------------------------------------

// ---- v1 backward: dq ----------------------------------------------------------------------------------

template <int DP, typename T>
static __global__ void __launch_bounds__(FA_THREADS) fa_backward_dq_kernel(T* dq, const T* dout, const T* out, const float* lse,
                                                                         const T* q, const T* k, const T* v,
                                                                         const int* cu_seqlens, int S, int H, int Hkv,
                                                                         int d, int ldq, int ldkv, int ldo, int causal,
                                                                         float scale_log2, float scale, int vec) {
    extern __shared__ float smem[];
    const int LDS = DP + 8;
    float* D_s = smem;                          // [64]
    float* L_s = D_s + FA_BQ;                   // [64] lse in log2 units
    bf16_t* Q_s = (bf16_t*)(L_s + FA_BQ);       // [64][LDS]
    bf16_t* dO_s = Q_s + FA_BQ * LDS;           // [64][LDS]
    bf16_t* K_s = dO_s + FA_BQ * LDS;           // [64][LDS]
    bf16_t* V_s = K_s + FA_BK * LDS;            // [64][LDS]
    bf16_t* O_s = V_s + FA_BK * LDS;            // [64][LDS] (for D)
    int start, len, q0;
    if (!fa_find_tile(cu_seqlens, S, &start, &len, &q0, causal)) return;
    int h = blockIdx.y, hk = h / (H / Hkv);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
    fa_load_tile<DP>(Q_s, LDS, q, ldq, start, q0, len, (size_t)h * d, d, vec);
    fa_load_tile<DP>(dO_s, LDS, dout, ldo, start, q0, len, (size_t)h * d, d, vec);
    fa_load_tile<DP>(O_s, LDS, out, ldo, start, q0, len, (size_t)h * d, d, vec);
    __syncthreads();
    fa_rowstats<DP>(D_s, L_s, dO_s, O_s, LDS, lse, start, q0, len, H, h);

    float acc[DP / 8][4];
    fa_zero<DP / 8>(acc);
    int qrow = q0 + 16 * warp + g;
    int kend = causal ? min(len, q0 + FA_BQ) : len;
    for (int k0 = 0; k0 < kend; k0 += FA_BK) {
        __syncthreads();
        fa_load_tile<DP>(K_s, LDS, k, ldkv, start, k0, len, (size_t)hk * d, d, vec);
        fa_load_tile<DP>(V_s, LDS, v, ldkv, start, k0, len, (size_t)hk * d, d, vec);
        __syncthreads();
        float s[FA_BK / 8][4], dp[FA_BK / 8][4];
        fa_zero<FA_BK / 8>(s);
        fa_zero<FA_BK / 8>(dp);
        fa_gemm_abt<DP, FA_BK / 8>(s, Q_s + 16 * warp * LDS, LDS, K_s, LDS);
        fa_gemm_abt<DP, FA_BK / 8>(dp, dO_s + 16 * warp * LDS, LDS, V_s, LDS);
        #pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = k0 + nt * 8 + 2 * t + (i & 1), r = 16 * warp + g + (i >> 1) * 8, qi = q0 + r;
                int valid = j < len && qi < len && (!causal || j <= qi);
                float p = valid ? exp2f(s[nt][i] * scale_log2 - L_s[r]) : 0.0f;
                s[nt][i] = p * (dp[nt][i] - D_s[r]); // dS
            }
        fa_gemm_pb<DP>(acc, s, K_s, LDS);
    }
    fa_add_rows<DP>(dq, ldq, acc, scale, start, qrow, len, h, d, t, (bf16_t*)NULL, 0);
}

// ---- v1 backward: dk, dv ------------------------------------------------------------------------------

// NW warps (16 keys each): a block owns 16 NW keys, so that each streamed query tile (Q, dO, O and the row
// statistics) serves 16 NW keys. 8 warps (128 keys) where that keeps the warps an SM holds (its registers
// bound them: compiled for sm_90, DP 32 128 registers, 96 245, 128 255: the same warps per SM in blocks of 8
// as in blocks of 4); 4 at DP 64 (168 registers: 12 warps per SM in blocks of 4, 8 in blocks of 8) and at
// DP 256 (shared memory).
template <int DP> struct FaDkdvWarps {
    static const int NW = DP == 64 || DP == 256 ? 4 : 8;
};
template <int DP, typename T>
static __global__ void __launch_bounds__(32 * FaDkdvWarps<DP>::NW) fa_backward_dkdv_kernel(T* dk, T* dv, const T* dout, const T* out,
                                                                           const float* lse, const T* q, const T* k,
                                                                           const T* v, const int* cu_seqlens, int S,
                                                                           int H, int Hkv, int d, int ldq, int ldkv,
                                                                           int ldo, int causal, float scale_log2,
                                                                           float scale, int vec) {
    extern __shared__ float smem[];
    const int LDS = DP + 8, KB = 16 * FaDkdvWarps<DP>::NW; // keys of the block
    const int NTH = 32 * FaDkdvWarps<DP>::NW;
    float* D_s = smem;                          // [64] of the streamed queries
    float* L_s = D_s + FA_BQ;                   // [64]
    bf16_t* K_s = (bf16_t*)(L_s + FA_BQ);       // [KB][LDS] this block's keys
    bf16_t* V_s = K_s + KB * LDS;               // [KB][LDS]
    bf16_t* Q_s = V_s + KB * LDS;               // [64][LDS] streamed queries
    bf16_t* dO_s = Q_s + FA_BQ * LDS;           // [64][LDS]
    bf16_t* O_s = dO_s + FA_BQ * LDS;           // [64][LDS] (for D)
    int start, len, k0;
    if (!fa_find_tile(cu_seqlens, S, &start, &len, &k0, 0, KB)) return;
    int hk = blockIdx.y, group = H / Hkv;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
    for (int r = 0; r < KB; r += FA_BQ) { // 64 rows per load
        fa_load_tile<DP, T, NTH>(K_s + r * LDS, LDS, k, ldkv, start, k0 + r, len, (size_t)hk * d, d, vec);
        fa_load_tile<DP, T, NTH>(V_s + r * LDS, LDS, v, ldkv, start, k0 + r, len, (size_t)hk * d, d, vec);
    }

    float dk_acc[DP / 8][4], dv_acc[DP / 8][4];
    fa_zero<DP / 8>(dk_acc);
    fa_zero<DP / 8>(dv_acc);
    int krow = k0 + 16 * warp + g; // this thread's keys: krow, krow + 8
    for (int h = hk * group; h < (hk + 1) * group; h++) {
        // causal: queries before the key tile see none of its keys (k0 is a multiple of 64)
        for (int qt = causal ? k0 : 0; qt < len; qt += FA_BQ) {
            __syncthreads();
            fa_load_tile<DP, T, NTH>(Q_s, LDS, q, ldq, start, qt, len, (size_t)h * d, d, vec);
            fa_load_tile<DP, T, NTH>(dO_s, LDS, dout, ldo, start, qt, len, (size_t)h * d, d, vec);
            fa_load_tile<DP, T, NTH>(O_s, LDS, out, ldo, start, qt, len, (size_t)h * d, d, vec);
            __syncthreads();
            fa_rowstats<DP, NTH>(D_s, L_s, dO_s, O_s, LDS, lse, start, qt, len, H, h);
            __syncthreads();
            float s[FA_BQ / 8][4], dp[FA_BQ / 8][4];
            fa_zero<FA_BQ / 8>(s);
            fa_zero<FA_BQ / 8>(dp);
            fa_gemm_abt<DP, FA_BQ / 8>(s, K_s + 16 * warp * LDS, LDS, Q_s, LDS);   // S^T: keys x queries
            fa_gemm_abt<DP, FA_BQ / 8>(dp, V_s + 16 * warp * LDS, LDS, dO_s, LDS); // dP^T
            fa_kv_p_ds<false>(s, dp, L_s, D_s, qt, krow, t, len, causal, scale_log2);
            fa_gemm_pb<DP>(dv_acc, s, dO_s, LDS);
            fa_gemm_pb<DP>(dk_acc, dp, Q_s, LDS);
        }
    }
    if (dk) fa_add_rows<DP>(dk, ldkv, dk_acc, scale, start, krow, len, hk, d, t, (bf16_t*)NULL, 0);
    if (dv) fa_add_rows<DP>(dv, ldkv, dv_acc, 1.0f, start, krow, len, hk, d, t, (bf16_t*)NULL, 0);
}

static size_t fa_dq_smem(int DP) { return 2 * FA_BQ * sizeof(float) + 2 * (size_t)5 * FA_BQ * (DP + 8); }
static size_t fa_dkdv_smem(int DP, int NW) {
    return 2 * FA_BQ * sizeof(float) + 2 * ((size_t)3 * FA_BQ + 2 * 16 * NW) * (DP + 8);
}

template <int DP, typename T>
static void fa_backward_dp(T* dq, T* dk, T* dv, const T* dout, const T* out, const float* lse, const T* q, const T* k,
                           const T* v, const int* cu_seqlens, int S, int T_, int H, int Hkv, int d, int ldq, int ldkv,
                           int ldo, int causal, cudaStream_t stream) {
    float scale = 1.0f / sqrtf((float)d), scale_log2 = FA_LOG2E * scale;
    int vec = fa_vec_ok(d, ldq, ldkv, ldo, sizeof(T), q, k, v, dout) && fa_vec_ok(d, ldq, ldkv, ldo, sizeof(T), out, NULL, NULL, NULL);
    if (dq) {
        size_t smem = fa_dq_smem(DP);
        cudaCheck(cudaFuncSetAttribute(fa_backward_dq_kernel<DP, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
        dim3 grid(ceil_div(T_, FA_BQ) + S, H);
        fa_backward_dq_kernel<DP, T><<<grid, FA_THREADS, smem, stream>>>(dq, dout, out, lse, q, k, v, cu_seqlens, S, H,
                                                                         Hkv, d, ldq, ldkv, ldo, causal, scale_log2,
                                                                         scale, vec);
        cudaCheck(cudaGetLastError());
    }
    if (dk || dv) {
        const int NW = FaDkdvWarps<DP>::NW;
        fa_last_bwd_warps = NW;
        size_t smem = fa_dkdv_smem(DP, NW);
        cudaCheck(cudaFuncSetAttribute(fa_backward_dkdv_kernel<DP, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
        dim3 grid(ceil_div(T_, 16 * NW) + S, Hkv);
        fa_backward_dkdv_kernel<DP, T><<<grid, 32 * NW, smem, stream>>>(dk, dv, dout, out, lse, q, k, v, cu_seqlens, S,
                                                                           H, Hkv, d, ldq, ldkv, ldo, causal, scale_log2,
                                                                           scale, vec);
        cudaCheck(cudaGetLastError());
    }
}

template <typename T>
static void fa_backward_v1(T* dq, T* dk, T* dv, const T* dout, const T* out, const float* lse, const T* q, const T* k,
                           const T* v, const int* cu_seqlens, int S, int T_, int H, int Hkv, int d, int ldq, int ldkv,
                           int ldo, int causal, cudaStream_t stream) {
    fa_check(S, T_, H, Hkv, d);
    if (T_ == 0 || H == 0 || (!dq && !dk && !dv)) return;
    fa_last_bwd_version = 1, fa_last_bwd_warps = 0, fa_last_bwd_dq = 0, fa_last_bwd_lpt = 0;
    switch (fa_padded_dim(d)) {
    case 32: fa_backward_dp<32>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, stream); break;
    case 64: fa_backward_dp<64>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, stream); break;
    case 96: fa_backward_dp<96>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, stream); break;
    case 128: fa_backward_dp<128>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, stream); break;
    default: fa_backward_dp<256>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, stream); break;
    }
}

// ---- which one runs ---------------------------------------------------------------------------------------

// Whether environment variable name is value, read once per process into *cache (-1: not read yet).
static int fa_env_is(const char* name, const char* value, int* cache) {
    if (*cache < 0) {
        const char* e = getenv(name);
        *cache = e && strcmp(e, value) == 0;
    }
    return *cache;
}
// Which backward runs: 2 (shipping) or 1 (RRFP_FA_BWD=v1, the kernels before the pre-pass, kept so that a device
// run compares the two in one invocation: dev/cuda/run_variants.sh).
static int fa_bwd_version(void) {
    static int v = -1;
    return fa_env_is("RRFP_FA_BWD", "v1", &v) ? 1 : 2;
}
// The dq kernel at DP 96 and 128: dq3 (single K / V buffers, 3 blocks per SM; the shipping one) or dq2 (double
// buffers, 2 blocks per SM: RRFP_FA_DQ=double), for the device run to compare; dq2 at the other head dims.
static int fa_dq_double(void) {
    static int v = -1;
    return fa_env_is("RRFP_FA_DQ", "double", &v);
}
// The backward's block order over samples (fa_find_tile_lpt, _lpt_bidir): off (shipping: sample by sample, as v1)
// or on (RRFP_FA_LPT=1). Measured on an H200, backward ms on bf16 storage, longest
// first / sample order: lm_8x512 0.658 / 0.644, lm_mixed 1.220 / 1.190, vit_7x576 0.266 / 0.256, vit_mixed
// 0.237 / 0.235: each block's search costs more than the shorter tail gains.
static int fa_lpt_on(void) {
    static int v = -1;
    return fa_env_is("RRFP_FA_LPT", "1", &v);
}
// The dk/dv kernel's warps at DP 128: 4 (shipping) or 8 (RRFP_FA_DKDV_WARPS=8: v1's block of 128 keys, the
// streamed tiles shared by twice the keys, one block per SM), for the device run to compare.
static int fa_dkdv_warps_128(void) {
    static int v = -1;
    return fa_env_is("RRFP_FA_DKDV_WARPS", "8", &v) ? 8 : 4;
}

// The backward asked for, on storage T (v1 has no bf16-input / f32-gradient kernels: there the shipping v2 runs)
template <typename T>
static void fa_dev_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const float* lse, const T* q,
                            const T* k, const T* v, const int* cu_seqlens, int S, int T_, int H, int Hkv, int d,
                            int ldq, int ldkv, int ldo, int causal, cudaStream_t stream) {
    if (fa_bwd_version() == 1)
        fa_backward_v1<T>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, stream);
    else if (fa_lpt_on() && S > 1 && (size_t)T_ > (size_t)FA_BQ * S)
        fa_backward<T, FaBwdLongestFirst>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo,
                                          causal, stream);
    else if (fa_dkdv_warps_128() == 8)
        fa_backward<T, FaBwdWarps8>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo,
                                    causal, stream);
    else if (fa_dq_double())
        fa_backward<T, FaBwdDqDouble>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo,
                                      causal, stream);
    else
        fa_backward<T>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo, causal, stream);
}
static void fa_dev_backward_f32grad(float* dq, float* dk, float* dv, const bf16_t* dout, const bf16_t* out,
                                    const float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                    const int* cu_seqlens, int S, int T_, int H, int Hkv, int d, int ldq, int ldkv,
                                    int ldo, int causal, cudaStream_t stream) {
    if (fa_lpt_on() && S > 1 && (size_t)T_ > (size_t)FA_BQ * S)
        fa_backward_bf16_f32grad<float, FaBwdLongestFirst>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv,
                                                           d, ldq, ldkv, ldo, ldq, ldkv, causal, stream, ldkv);
    else if (fa_dkdv_warps_128() == 8)
        fa_backward_bf16_f32grad<float, FaBwdWarps8>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d,
                                                     ldq, ldkv, ldo, ldq, ldkv, causal, stream, ldkv);
    else if (fa_dq_double())
        fa_backward_bf16_f32grad<float, FaBwdDqDouble>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d,
                                                       ldq, ldkv, ldo, ldq, ldkv, causal, stream, ldkv);
    else
        fa_backward_bf16_f32grad<float>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, S, T_, H, Hkv, d, ldq, ldkv, ldo,
                                        ldq, ldkv, causal, stream, ldkv);
}

// rrfp_cuda_flash_attention's signature and meaning, with the backward asked for (tests/engine/cuda/test_flash_attn.c and
// bench/gpu_attn_bench.c built with RR_FA_DEV call it)
extern "C" __attribute__((visibility("default"))) void rrfp_dev_flash_attention(int backward, Buf a, Buf dk, Buf dv,
                                                                              float* lse, Buf dout, Buf out, Buf q,
                                                                              Buf k, Buf v, const int* cu_seqlens,
                                                                              int S, int T, int H, int Hkv, int d,
                                                                              int ldq, int ldkv, int ldo, int causal) {
    cudaStream_t st = cuda_ctx.stream;
    if (!backward) {
        rrfp_cuda_flash_attention(0, a, dk, dv, lse, dout, out, q, k, v, cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo,
                                  causal);
    } else if (q.dt == DTYPE_BF16 && a.dt == DTYPE_F32) {
        fa_dev_backward_f32grad(buf_f32p(a), buf_f32p(dk), buf_f32p(dv), (const bf16_t*)buf_bf16p(dout),
                                (const bf16_t*)buf_bf16p(out), lse, (const bf16_t*)buf_bf16p(q), (const bf16_t*)buf_bf16p(k),
                                (const bf16_t*)buf_bf16p(v), cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, causal, st);
    } else if (q.dt == DTYPE_BF16) {
        fa_dev_backward<bf16_t>((bf16_t*)buf_bf16p(a), (bf16_t*)buf_bf16p(dk), (bf16_t*)buf_bf16p(dv),
                                (const bf16_t*)buf_bf16p(dout), (const bf16_t*)buf_bf16p(out), lse,
                                (const bf16_t*)buf_bf16p(q), (const bf16_t*)buf_bf16p(k), (const bf16_t*)buf_bf16p(v),
                                cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, causal, st);
    } else {
        fa_dev_backward<float>(buf_f32p(a), buf_f32p(dk), buf_f32p(dv), buf_f32p(dout), buf_f32p(out), lse, buf_f32p(q),
                               buf_f32p(k), buf_f32p(v), cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, ldo, causal, st);
    }
}
