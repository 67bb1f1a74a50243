// rope.cu — rotary position embeddings on CUDA, 1-D (LM) and 2-D (ViT), in place; the LM's q and k in one launch
// (rope_qk_*).
//
// One thread per (row, head, pair); the angle and the rotation come from kernel_math.h
// (rr_rope_cos_sin, or rr_rope_inv_freq's Llama-3 frequencies, in double, as the CPU backend does, then
// rr_rope_rotate_pair). The (cos, sin) of an angle come from a table built once per frequencies (below, "the cos /
// sin table") where the position is in it: the same values, so the same bits. The 2-D form is the 1-D rule of dim d/2 on each half of the head, at the patch row
// and at the patch column, both halves in one launch. The backward is the same rotation by -angle (RoPE is
// orthogonal).
#include <stdlib.h>
#include <string.h>

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
// A: the activations' storage (float, or uint16_t bf16 words with 2-byte activations; cuda_common.cuh)
// cos and sin of pair j of dims n at pos, turned by sign: the double-precision angle of kernel_math.h (the one
// expression both the table and a position outside it use)
static __device__ inline void rope_cs_compute(int pos, int j, int n, double sign, const RopeArgs& ra, float* c, float* s) {
    if (ra.llama3)
        rr_rope_cos_sin_freq(pos, sign, rr_rope_inv_freq(j, n, ra.theta, 1, ra.factor, ra.low, ra.high, ra.original_max_pos), c,
                             s);
    else
        rr_rope_cos_sin(pos, j, n, sign, ra.theta, c, s);
}

// ---- the cos / sin table ----------------------------------------------------------------------------------------
// Computing each element's angle in double (pow, cos, sin) made RoPE 8x slower than its bytes (H100, 0.16 ms a call of
// ~67 MB): a call reads (c, s) from a table of its frequencies (RopeArgs and dims n) instead, cs[sg][p][j] =
// (c, s) of pair j at position p for sign +1 (sg 0) and -1 (sg 1), built once by rope_table_kernel with the same
// expression (rope_cs_compute), so the values are bit for bit those computed per element (both signs are stored: no
// reliance on cos / sin being even / odd in the device's libm). A position outside [0, P) computes its own, as before.
struct RopeTab {
    const float* cs; // (2, P, n/2, 2) f32; NULL: no table (every position computes)
    int P;
};
static __device__ inline void rope_cs(const RopeTab& t, int pos, int j, int n, double sign, const RopeArgs& ra, float* c,
                                      float* s) {
    if (t.cs && pos >= 0 && pos < t.P) {
        const float* e = t.cs + ((((size_t)(sign < 0) * t.P + pos) * (size_t)(n / 2)) + j) * 2;
        *c = e[0];
        *s = e[1];
        return;
    }
    rope_cs_compute(pos, j, n, sign, ra, c, s);
}
static __global__ void rope_table_kernel(float* cs, int P, int n, RopeArgs ra) {
    int half = n / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= 2 * (size_t)P * half) return;
    int j = (int)(idx % half);
    int p = (int)((idx / half) % P);
    double sign = idx / ((size_t)half * P) ? -1.0 : 1.0;
    rope_cs_compute(p, j, n, sign, ra, &cs[2 * idx], &cs[2 * idx + 1]);
}

// This thread's row i, head h (of `heads`) and pair j (of `half`) in a pass over N rows; false past the last
static __device__ __forceinline__ bool rope_thread(int N, int heads, int half, int* i, int* h, int* j) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * heads * half) return false;
    *j = (int)(idx % half);
    *h = (int)((idx / half) % heads);
    *i = (int)(idx / ((size_t)half * heads));
    return true;
}

template <bool R, typename A>
static __device__ inline void rope_pair(A* v, int pos, int j, int n, double sign, const RopeArgs& ra, const RopeTab& tab) {
    int half = n / 2;
    float c, s;
    rope_cs(tab, pos, j, n, sign, ra, &c, &s);
    float a = act_ld(v, j), b = act_ld(v, j + half);
    rr_rope_rotate_pair(&a, &b, c, s);
    act_st<R>(v, j, a);
    act_st<R>(v, j + half, b);
}

// Rotate, for every row i and head h, the d dims at x + i*ld + h*d by sign * pos[i].
template <bool R, typename A>
static __global__ void rope_rotate_kernel(A* x, const int* pos, int N, int H, int d, int ld, double sign,
                                          RopeArgs ra, RopeTab tab) {
    int half = d / 2;
    int i, h, j;
    if (!rope_thread(N, H, half, &i, &h, &j)) return;
    rope_pair<R>(x + (size_t)i * ld + (size_t)h * d, pos[i], j, d, sign, ra, tab);
}
// q and k in one pass (the LM's attention inputs, Backend.rope_qk_*): heads h < H of q (stride ld_q), then the
// Hkv heads of k (stride ld_k), every one rotated by sign * pos[i] as rope_rotate_kernel does (the same values)
template <bool R, typename A>
static __global__ void rope_qk_rotate_kernel(A* q, A* k, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                                             double sign, RopeArgs ra, RopeTab tab) {
    int half = d / 2, heads = H + Hkv;
    int i, h, j;
    if (!rope_thread(N, heads, half, &i, &h, &j)) return;
    A* v = h < H ? q + (size_t)i * ld_q + (size_t)h * d : k + (size_t)i * ld_k + (size_t)(h - H) * d;
    rope_pair<R>(v, pos[i], j, d, sign, ra, tab);
}
// 2-D: both halves of every head in one pass, pairs j < d/4 of the first half by pos_row, the others
// of the second half by pos_col (each the 1-D rule of dim d/2)
template <bool R, typename A>
static __global__ void rope2d_rotate_kernel(A* x, const int* pos_row, const int* pos_col, int N, int H, int d,
                                            int ld, double sign, RopeTab tab) {
    int half = d / 2, quarter = d / 4;
    int i, h, j;
    if (!rope_thread(N, H, half, &i, &h, &j)) return;
    A* v = x + (size_t)i * ld + (size_t)h * d;
    const RopeArgs ra = {RR_ROPE_THETA, 0, 1.0, 1.0, 1.0, 1.0}; // ROPE2D_ARGS
    if (j < quarter)
        rope_pair<R>(v, pos_row[i], j, half, sign, ra, tab);
    else
        rope_pair<R>(v + half, pos_col[i], j - quarter, half, sign, ra, tab);
}

static RopeArgs rope_args(const RopeFreq* rf) {
    RopeArgs ra = {rf->theta, rf->llama3, rf->factor, rf->low_freq_factor, rf->high_freq_factor, rf->original_max_pos};
    return ra;
}
static const RopeArgs ROPE2D_ARGS = {RR_ROPE_THETA, 0, 1.0, 1.0, 1.0, 1.0}; // the ViT's 2-D RoPE: each half dims d/2

// The tables, one per (frequencies, dims n), kept for the process: built on a call's first use with P = the larger of
// its rows N and the positions BackendDevice.reserve announced (cuda_rope_reserve: the stage's largest microbatch, whose
// positions are below it), rebuilt larger when a call has more rows than P (not in a step after the first once
// reserved). RRFP_ROPE_TABLE=0 computes every angle, as before (an A/B timing and the tests' bitwise check).
struct RopeTabEntry {
    RopeArgs ra;
    int n, P;
    float* cs;
};
static RopeTabEntry rope_tabs[8];
static int rope_reserved_P;

static RopeTab rope_table(const RopeArgs& ra, int n, int N, cudaStream_t stream);
void cuda_rope_reserve(const Backend* be, const AttnReserve* attn, int n_attn) {
    for (int i = 0; i < n_attn; i++)
        if (attn[i].max_T > rope_reserved_P) rope_reserved_P = attn[i].max_T;
    // the tables of the calls announced, built now (not in a step)
    for (int i = 0; i < n_attn; i++) {
        if (attn[i].rope == 1 && attn[i].d >= 2)
            (void)rope_table(rope_args(&attn[i].rope_freq), attn[i].d, attn[i].max_T, cuda_stream(be));
        else if (attn[i].rope == 2 && attn[i].d >= 4)
            (void)rope_table(ROPE2D_ARGS, attn[i].d / 2, attn[i].max_T, cuda_stream(be));
    }
}
static bool rope_args_equal(const RopeArgs& a, const RopeArgs& b) {
    return a.theta == b.theta && a.llama3 == b.llama3 && a.factor == b.factor && a.low == b.low && a.high == b.high &&
           a.original_max_pos == b.original_max_pos;
}
static RopeTab rope_table(const RopeArgs& ra, int n, int N, cudaStream_t stream) {
    RopeTab none = {NULL, 0};
    const char* env = getenv("RRFP_ROPE_TABLE");
    if ((env && !strcmp(env, "0")) || N <= 0 || n < 2) return none;
    RopeTabEntry* e = NULL;
    for (int i = 0; i < (int)(sizeof rope_tabs / sizeof rope_tabs[0]) && !e; i++)
        if (rope_tabs[i].cs && rope_tabs[i].n == n && rope_args_equal(rope_tabs[i].ra, ra)) e = &rope_tabs[i];
    if (e && e->P >= N) return RopeTab{e->cs, e->P};
    if (!e)
        for (int i = 0; i < (int)(sizeof rope_tabs / sizeof rope_tabs[0]) && !e; i++)
            if (!rope_tabs[i].cs) e = &rope_tabs[i];
    if (!e) return none; // more frequencies than slots: compute
    int P = N > rope_reserved_P ? N : rope_reserved_P;
    size_t vals = 2 * (size_t)P * (size_t)(n / 2);
    if (e->cs) cuda_free_tracked(e->cs); // (a device-wide synchronisation: no kernel still reads it)
    cuda_malloc_tracked((void**)&e->cs, vals * 2 * sizeof(float));
    e->ra = ra, e->n = n, e->P = P;
    rope_table_kernel<<<ceil_div_z(vals, 256), 256, 0, stream>>>(e->cs, P, n, ra);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaStreamSynchronize(stream)); // built before any stream reads it (once per frequencies)
    return RopeTab{e->cs, e->P};
}

// A: the activations' storage (float, or uint16_t bf16 words); R: the bf16 tables' forward, rounded in the store
template <bool R, typename A>
static void rope_rotate_cuda(A* x, const int* pos, int N, int H, int d, int ld, double sign, RopeArgs ra, cudaStream_t stream) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d);
    size_t threads = (size_t)N * H * (d / 2);
    if (threads == 0) return;
    RopeTab tab = rope_table(ra, d, N, stream);
    rope_rotate_kernel<R><<<ceil_div_z(threads, 256), 256, 0, stream>>>(x, pos, N, H, d, ld, sign, ra, tab);
    cudaCheck(cudaGetLastError());
}
template <bool R, typename A>
static void rope2d_rotate_cuda(A* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld, double sign,
                               cudaStream_t stream) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d);
    size_t threads = (size_t)N * H * (d / 2);
    if (threads == 0) return;
    RopeTab tab = rope_table(ROPE2D_ARGS, d / 2, N, stream); // row and column positions: below N (a grid of N patches)
    rope2d_rotate_kernel<R><<<ceil_div_z(threads, 256), 256, 0, stream>>>(x, pos_row, pos_col, N, H, d, ld, sign, tab);
    cudaCheck(cudaGetLastError());
}

void cuda_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    rope_rotate_cuda<false>(x, pos, N, H, d, ld, 1.0, rope_args(rf), cuda_stream(be));
}
void cuda_bf16_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    rope_rotate_cuda<true>(x, pos, N, H, d, ld, 1.0, rope_args(rf), cuda_stream(be));
}
void cuda_rope_backward(const Backend* be, float* dx, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    rope_rotate_cuda<false>(dx, pos, N, H, d, ld, -1.0, rope_args(rf), cuda_stream(be));
}

void cuda_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    rope2d_rotate_cuda<false>(x, pos_row, pos_col, N, H, d, ld, 1.0, cuda_stream(be));
}
void cuda_bf16_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    rope2d_rotate_cuda<true>(x, pos_row, pos_col, N, H, d, ld, 1.0, cuda_stream(be));
}
void cuda_rope2d_backward(const Backend* be, float* dx, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    rope2d_rotate_cuda<false>(dx, pos_row, pos_col, N, H, d, ld, -1.0, cuda_stream(be));
}

// 2-byte activations (Bufs of DTYPE_BF16 on the bf16 table): x is 2-byte bf16 words, rotated in place and
// rounded in the store as the bf16 table's forward; the backwards act on f32 gradients (cuda_rope_backward)
void cuda_bf16a_rope_forward(const Backend* be, uint16_t* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    rope_rotate_cuda<true>(x, pos, N, H, d, ld, 1.0, rope_args(rf), cuda_stream(be));
}
void cuda_bf16a_rope2d_forward(const Backend* be, uint16_t* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    rope2d_rotate_cuda<true>(x, pos_row, pos_col, N, H, d, ld, 1.0, cuda_stream(be));
}

// ---- RoPE over q and k in one launch (BackendOps.rope_qk_forward / rope_qk_backward) --------------------------------
// A: the activations' storage; R: round in the store (the bf16 tables' forward). The backward acts on f32 gradients.
template <bool R, typename A>
static void rope_qk_cuda(A* q, A* k, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k, double sign, RopeArgs ra,
                         cudaStream_t stream) {
    RR_ASSERT(d % 2 == 0 && ld_q >= H * d && ld_k >= Hkv * d);
    size_t threads = (size_t)N * (H + Hkv) * (d / 2);
    if (threads == 0) return;
    RopeTab tab = rope_table(ra, d, N, stream);
    rope_qk_rotate_kernel<R><<<ceil_div_z(threads, 256), 256, 0, stream>>>(q, k, pos, N, H, Hkv, d, ld_q, ld_k, sign, ra, tab);
    cudaCheck(cudaGetLastError());
}
void cuda_rope_qk_forward(const Backend* be, float* q, float* k, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                          const RopeFreq* rf) {
    rope_qk_cuda<false>(q, k, pos, N, H, Hkv, d, ld_q, ld_k, 1.0, rope_args(rf), cuda_stream(be));
}
void cuda_bf16_rope_qk_forward(const Backend* be, float* q, float* k, const int* pos, int N, int H, int Hkv, int d, int ld_q,
                               int ld_k, const RopeFreq* rf) {
    rope_qk_cuda<true>(q, k, pos, N, H, Hkv, d, ld_q, ld_k, 1.0, rope_args(rf), cuda_stream(be));
}
void cuda_bf16a_rope_qk_forward(const Backend* be, uint16_t* q, uint16_t* k, const int* pos, int N, int H, int Hkv, int d, int ld_q,
                                int ld_k, const RopeFreq* rf) {
    rope_qk_cuda<true>(q, k, pos, N, H, Hkv, d, ld_q, ld_k, 1.0, rope_args(rf), cuda_stream(be));
}
void cuda_rope_qk_backward(const Backend* be, float* dq, float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                           const RopeFreq* rf) {
    rope_qk_cuda<false>(dq, dk, pos, N, H, Hkv, d, ld_q, ld_k, -1.0, rope_args(rf), cuda_stream(be));
}

// ---- 2-byte output gradients (2-byte activations) -------------------------------------------------------
// RoPE backward reading the f32 gradients and storing the rotated values as 2-byte bf16 (rows of stride ld16):
// rr_f32_to_bf16 of what cuda_rope_backward leaves in dx, in the rotation's own store; KEEP: the f32 gradient is rotated
// in place too (a bias gradient reads it), else left as it was. The LM's dq and dk in one launch (rope_qk_backward
// with dq16, dk16), their (cos, sin) from the table as every RoPE kernel here.
template <bool KEEP>
static __device__ inline void rope_pair_b16(float* v, uint16_t* v16, int pos, int j, int n, const RopeArgs& ra,
                                            const RopeTab& tab) {
    int half = n / 2;
    float c, s;
    rope_cs(tab, pos, j, n, -1.0, ra, &c, &s);
    float a = v[j], b = v[j + half];
    rr_rope_rotate_pair(&a, &b, c, s);
    if (KEEP) v[j] = a, v[j + half] = b;
    v16[j] = rr_f32_to_bf16(a);
    v16[j + half] = rr_f32_to_bf16(b);
}
static __global__ void rope_qk_backward_b16_kernel(uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16, int ldk16, float* dk,
                                                   const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                                                   RopeArgs ra, RopeTab tab, int keep_q, int keep_k) {
    int half = d / 2, heads = H + Hkv;
    int i, h, j;
    if (!rope_thread(N, heads, half, &i, &h, &j)) return;
    bool isq = h < H;
    int hh = isq ? h : h - H;
    float* v = (isq ? dq + (size_t)i * ld_q : dk + (size_t)i * ld_k) + (size_t)hh * d;
    uint16_t* v16 = (isq ? dq16 + (size_t)i * ldq16 : dk16 + (size_t)i * ldk16) + (size_t)hh * d;
    if (isq ? keep_q : keep_k)
        rope_pair_b16<true>(v, v16, pos[i], j, d, ra, tab);
    else
        rope_pair_b16<false>(v, v16, pos[i], j, d, ra, tab);
}
void cuda_bf16a_rope_qk_backward_b16(const Backend* be, uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16, int ldk16,
                                     float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                                     const RopeFreq* rf, int keep_q, int keep_k) {
    RR_ASSERT(d % 2 == 0 && ld_q >= H * d && ld_k >= Hkv * d && ldq16 >= H * d && ldk16 >= Hkv * d);
    size_t threads = (size_t)N * (H + Hkv) * (d / 2);
    if (threads == 0) return;
    RopeArgs ra = rope_args(rf);
    RopeTab tab = rope_table(ra, d, N, cuda_stream(be));
    rope_qk_backward_b16_kernel<<<ceil_div_z(threads, 256), 256, 0, cuda_stream(be)>>>(dq16, ldq16, dq, dk16, ldk16, dk, pos, N,
                                                                                       H, Hkv, d, ld_q, ld_k, ra, tab,
                                                                                       keep_q, keep_k);
    cudaCheck(cudaGetLastError());
}

// 2-D: the same, both halves of every head in one pass (rope2d_rotate_kernel's split of the pairs)
template <bool KEEP>
static __global__ void rope2d_backward_b16_kernel(uint16_t* dx16, int ld16, float* dx, const int* pos_row,
                                                  const int* pos_col, int N, int H, int d, int ld, RopeTab tab) {
    int half = d / 2, quarter = d / 4;
    int i, h, j;
    if (!rope_thread(N, H, half, &i, &h, &j)) return;
    size_t off = j < quarter ? 0 : (size_t)half;
    int jj = j < quarter ? j : j - quarter, pos = j < quarter ? pos_row[i] : pos_col[i];
    const RopeArgs ra = {RR_ROPE_THETA, 0, 1.0, 1.0, 1.0, 1.0}; // ROPE2D_ARGS
    rope_pair_b16<KEEP>(dx + (size_t)i * ld + (size_t)h * d + off, dx16 + (size_t)i * ld16 + (size_t)h * d + off, pos, jj,
                        half, ra, tab);
}
void cuda_bf16a_rope2d_backward_b16(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pos_row,
                                    const int* pos_col, int N, int H, int d, int ld, int keep_f32) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d && ld16 >= H * d);
    size_t threads = (size_t)N * H * (d / 2);
    if (threads == 0) return;
    RopeTab tab = rope_table(ROPE2D_ARGS, d / 2, N, cuda_stream(be));
    if (keep_f32) {
        rope2d_backward_b16_kernel<true><<<ceil_div_z(threads, 256), 256, 0, cuda_stream(be)>>>(dx16, ld16, dx, pos_row,
                                                                                               pos_col, N, H, d, ld, tab);
    } else {
        rope2d_backward_b16_kernel<false><<<ceil_div_z(threads, 256), 256, 0, cuda_stream(be)>>>(dx16, ld16, dx, pos_row,
                                                                                                pos_col, N, H, d, ld, tab);
    }
    cudaCheck(cudaGetLastError());
}
