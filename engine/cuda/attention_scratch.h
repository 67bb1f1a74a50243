/* attention_scratch.h — the layout of cuDNN attention's device scratch (engine/cuda/attention_cudnn.cu) as
 * plain functions, so that BackendDevice.reserve can size it once from the stage's largest attention call and a
 * CPU test (tests/engine/cuda/test_kernel_math.c) can check the sizing: no training step allocates device memory
 * (docs/design.md "Streams and events").
 *
 * One call of cuDNN's fused attention over T packed tokens in S sequences, H heads of dim d uses, in one
 * block, every region 256-byte aligned:
 *   - the bf16 copies: forward q, k, v, o (4); backward q, k, v, o, dO, dQ, dK, dV (8); each of
 *     R = T + Smax rows of H d values (rr_cudnn_attn_rows): cuDNN's ragged tensors are [S, H, Smax, d], so
 *     a sequence's rows may be read (masked, but read: they must be finite) and written up to Smax rows
 *     past its start; the rows past T are zeroed before each call (cudnn-frontend PRs #630 / #740, and
 *     NVIDIA's test, which allocates whole Smax tiles);
 *   - backward only: softmax_sum (the row sums of dO * O) f32 in the stats' ragged layout, R rows of H, and
 *     the dQ accumulator f32 in dQ's ragged layout, R rows of H d (cudnn-frontend's ragged backward with
 *     max_total_seq_len: "sized TH1 softmax_sum", "sized THD dQ_accum"); Smax = T rounded up to 64
 *     (rr_cudnn_attn_smax);
 *   - the stats (lse), f32, R rows of H: cuDNN writes (forward) or reads (backward) them through the
 *     same ragged offsets, with the same slack; copied from / to the caller's (T, H) lse;
 *   - the offsets: three int32 arrays (ragged offsets of q/k/v/o, of the stats, and the sequence lengths),
 *     S + 1 values each, each starting 16-byte aligned (TransformerEngine pads each to 16 bytes);
 *   - the execution plan's workspace (known only once cuDNN has built the plan; see
 *     rr_cudnn_attn_workspace_budget for what the reservation sets aside);
 *   - a checked run only (check = 1: a plan's first run, every run with RRFP_CUDNN_STRICT=1): the buffers
 *     its self-check compares through: forward O and lse in f32 (T H d + T H values) and a counter;
 *     backward the own kernel's dq, dk, dv of stride ld_qkv (3 T ld_qkv values), a counter and the three
 *     tensors' largest magnitudes.
 * Every region grows monotonically with T, S and ld_qkv, so the layout at the stage's largest call bounds
 * every smaller call (tests/engine/cuda/test_kernel_math.c checks it over a grid of shapes). Plain C, no device code;
 * compiled into librrfp-cuda.so and the tests alike. */
#ifndef RRFP_ATTENTION_SCRATCH_H
#define RRFP_ATTENTION_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t bf16_at[8];  /* byte offsets of the bf16 copies (forward: 4, backward: 8), R rows each */
    int n_bf16;
    size_t dsum_at;     /* backward: softmax_sum, R rows of H f32; 0 (unused) in the forward */
    size_t dqacc_at;    /* backward: the dQ accumulator, R rows of H d f32; 0 (unused) in the forward */
    size_t stats_at;    /* the stats, R rows of H f32 */
    size_t offsets_at;  /* three int32 arrays of S + 1, each at a multiple of rr_cudnn_attn_off_stride(S) */
    size_t work_at;     /* the plan's workspace */
    size_t check_at;    /* the first run's check buffers (none when check = 0) */
    size_t total;       /* bytes of the whole block */
} RrAttnScratch;

static inline size_t rr_align256(size_t x) { return (x + 255) / 256 * 256; }

/* Smax: the padded sequence length the graphs are built for (T rounded up to 64). */
static inline int rr_cudnn_attn_smax(int T) { return (T + 63) / 64 * 64; }

/* R: the rows of every ragged buffer (see above) */
static inline size_t rr_cudnn_attn_rows(int T) { return (size_t)T + (size_t)rr_cudnn_attn_smax(T); }
/* the int32 values from one offsets array to the next: S + 1 rounded up to 4 (16 bytes) */
static inline size_t rr_cudnn_attn_off_stride(int S) { return ((size_t)S + 1 + 3) / 4 * 4; }

/* The layout of one call (see above); backward 0 / 1; workspace: the plan's bytes; check: its first run. */
static inline RrAttnScratch rr_cudnn_attn_scratch(int backward, int T, int S, int H, int d, int ld_qkv, size_t workspace,
                                                  int check) {
    RrAttnScratch l;
    size_t n = (size_t)T * H * d, a = rr_align256(rr_cudnn_attn_rows(T) * H * d * 2), at = 0;
    l.n_bf16 = backward ? 8 : 4;
    for (int i = 0; i < 8; i++) l.bf16_at[i] = i < l.n_bf16 ? (size_t)i * a : 0;
    at = (size_t)l.n_bf16 * a;
    l.dsum_at = l.dqacc_at = 0;
    if (backward) {
        l.dsum_at = at;
        at += rr_align256(rr_cudnn_attn_rows(T) * H * sizeof(float));
        l.dqacc_at = at;
        at += rr_align256(rr_cudnn_attn_rows(T) * H * d * sizeof(float));
    }
    l.stats_at = at;
    at += rr_align256(rr_cudnn_attn_rows(T) * H * sizeof(float));
    l.offsets_at = at;
    at += rr_align256(sizeof(int32_t) * 3 * rr_cudnn_attn_off_stride(S));
    l.work_at = at;
    at += rr_align256(workspace);
    l.check_at = at;
    if (check) {
        size_t vals = backward ? (size_t)3 * T * ld_qkv + 3 : n + (size_t)T * H; /* backward: 3 maxima */
        at += rr_align256((vals + 1) * sizeof(float)); /* + 1: the mismatch counter */
    }
    l.total = at;
    return l;
}

/* What the reservation sets aside for a plan's workspace at a shape: cuDNN decides the size when it
 * builds the plan (after the reservation), so this is an assumption, not a bound: an f32 accumulator of
 * T H d values (what flash attention backward keeps for dQ) plus 4 MiB. A plan that asks for more is not
 * run: the call falls back to the backend's own kernel (RRFP_CUDNN_VERBOSE=1 says so). */
static inline size_t rr_cudnn_attn_workspace_budget(int T, int H, int d) {
    return (size_t)T * H * d * sizeof(float) + ((size_t)4 << 20);
}

/* Bytes to reserve for every call of at most max_T tokens in at most max_S sequences (H, d, ld_qkv fixed):
 * the forward's layout with its first-run check buffers, and with backward = 1 (cuDNN's backward is
 * on unless RRFP_CUDNN_ATTENTION_BWD=0) the backward's too, whichever is larger, at the workspace budget. */
static inline size_t rr_cudnn_attn_reserve_bytes(int max_T, int max_S, int H, int d, int ld_qkv, int backward) {
    size_t ws = rr_cudnn_attn_workspace_budget(max_T, H, d);
    size_t f = rr_cudnn_attn_scratch(0, max_T, max_S, H, d, ld_qkv, ws, 1).total;
    size_t b = backward ? rr_cudnn_attn_scratch(1, max_T, max_S, H, d, ld_qkv, ws, 1).total : 0;
    return f > b ? f : b;
}

#endif
