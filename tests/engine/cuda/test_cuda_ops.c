/* test_cuda_ops.c — the op matrix on the CUDA backend against the CPU backend (label `gpu`).
 *
 * For every case (ggml test-backend-ops style: op, shapes, tolerance): random inputs, the same on
 * both sides; the forward on CUDA (device buffers through the Backend's alloc / copy) and on the
 * CPU; then the backward onto gradient buffers pre-filled with the same random values on both sides
 * (backward ADDS). `split` cases run the CUDA backward twice with complementary NULL gradients
 * (input gradients, then weight gradients) and compare with one full CPU backward, as a split
 * pipeline backward (B then W) does. Errors: max |cuda - cpu| / max |cpu| per tensor.
 *
 * Where there is no usable device (or a CPU-only build) it prints the reason and exits 77, which
 * ctest reports as skipped. The reason must be the backend's one line ("no CUDA device: ..." or
 * "built without CUDA ..."); anything else fails.
 *
 * Built twice: test_cuda_ops (the real backend; on a machine without a GPU it skips) and
 * test_cuda_ops_emu (-DRR_CUDA_EMU: the backend's source on the CPU emulation in tests/support/cuda_emu,
 * which runs everywhere). NOTE: no machine this project was developed on had a GPU, so on hardware
 * the tolerances below are design bounds, not measured values. In emulation (host libm) the largest
 * error of the default cases is 4e-7 and no error exceeds 1/12 of its bound; the big cases
 * (RR_EMU_BIG=1, attention excepted: too slow) reach 2.3e-6 against 1e-5 (LayerNorm dweight).
 *
 * Which path ran each attention call is checked (engine/cuda/attention_path.h): the fp32 table's kernel in
 * fp32; cuDNN or the own tensor-core kernel in bf16 (printed); a cuDNN self-check disagreement fails the case.
 * --expect-cudnn (the test named for cuDNN): every bf16 attention case within cuDNN's support (head dim a
 * multiple of 8 up to 128, T > 0) fails unless cuDNN ran its forward, and its backward where that runs (a
 * head dim that is a multiple of 16, RRFP_CUDNN_ATTENTION_BWD not 0); "refused" (cuDNN declined the shape)
 * and "disagreed" are reported apart.
 *
 * Usage: test_cuda_ops [--bf16 [--expect-cudnn]] [case-name-substring]   (--bf16: the bf16 tables on both sides, see cmp)
 *        test_cuda_ops --bad-target | --bad-id   (must die with the bad value named)
 *        test_cuda_ops --select   (backend_select("cuda") works, or fails with one clear line) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "tests/support/cuda_attn_hooks.h"
#include "tests/support/cuda_bw_hooks.h"
#include "tests/support/cuda_emu_entry.h"
#include "tests/support/util/proc.h"
#define RNG_SEED 0x5851F42D4C957F2Dull /* this test's stream */
#include "tests/support/host_rand.h"

static const RopeFreq RF_DEFAULT = {.theta = 10000.0}; /* the LM's RoPE at its default theta, unscaled */
/* Llama-3.1's scaling with original_max_pos 2048: a head of dim 64 at theta 500000 has pairs in all three bands */
static const RopeFreq RF_LLAMA3 = {.theta = 500000.0, .llama3 = 1, .factor = 8.0, .low_freq_factor = 1.0,
                                   .high_freq_factor = 4.0, .original_max_pos = 2048.0};

#define SKIP_RC 77
/* test_cuda_ops_emu: the same matrix on the CUDA backend's source compiled against the CPU emulation of the CUDA
 * runtime (tests/support/cuda_emu, tests/support/cuda_emu_entry.h): the kernels, launch configurations and the table
 * run here. */

/* Tolerances (normalised, f32 eps = 1.2e-7):
 * - GEMM 2e-5: cuBLAS and BLIS sum the same K <= 300 products in different orders: worst case ~K eps
 *   relative to the sum of |terms|, typically sqrt(K) eps.
 * - ELEM 2e-6: CUDA's expf is within 2 ulp of correctly rounded, glibc's within 1.
 * - ROW 5e-6: float block reductions over C <= 600 in another order (the CPU sums in double), plus
 *   device expf for cross-entropy. BWD 1e-5: the norms' / CE's backward cancellation doubles it.
 * - ROPE 1e-6: the angle is computed in double on both sides; device cos/sin differ from glibc's by
 *   an ulp of double, invisible after rounding to float.
 * - EMB 0 forward (a copy); 1e-6 backward (float atomics add repeated ids in another order).
 * - ATT 2e-5: two float flash implementations with different tilings (online-softmax rescale order).
 * A real bug (a wrong index, a skipped row or tile, a missing term) gives errors above 1e-2. */
#define TOL_GEMM 2e-5
#define TOL_ELEM 2e-6
#define TOL_ROW 5e-6
#define TOL_BWD 1e-5
#define TOL_ROPE 1e-6
#define TOL_EMB_BWD 1e-6
#define TOL_ATT 2e-5
/* --bf16 attention gradients: the bf16 table's attention (the own tensor-core kernel, flash_attention.cu,
 * or cuDNN's) multiplies bf16 operands: dout, P and dS are rounded to bf16 (relative 2^-8 each, bf16's unit
 * round-off) as MMA operands, where the CPU keeps them f32. lse keeps TOL_ATT (f32 scores of the same bf16
 * q, k); out gets TOL_ATT_TC for P besides cmp's one-ulp flip of the rounded output. Measured in emulation
 * over the matrix: at most 1.9e-3 for dqkv, 6.9e-3 for out (flip included). The own kernel's exact rounding
 * points are checked much tighter by tests/engine/cuda/test_flash_attn.c. */
#define TOL_ATT_TC 0.00390625 /* 2^-8 */
/* linear + GELU: pre within the GEMM's bound; out = gelu(pre) moves by at most max |gelu'| = 1.13 times
 * pre's error, plus GELU's own (ELEM): 1.13 x 2e-5 + 2e-6 < 2.5e-5 of max |pre|, and max |out| is within
 * a few percent of max |pre| for these symmetric random products (the largest pre is as likely positive,
 * where gelu(x) ~ x). In --bf16 both rounded outputs get cmp's one-ulp flip on top. The backward
 * (gelu_backward from the same pre on both sides) is an elementwise op: ELEM. */
#define TOL_LINEAR_GELU 2.5e-5
/* Big GEMMs sum K = 1024..2048 products: the round-off bound grows with K (worst ~K eps), so 1e-4. */
#define TOL_GEMM_BIG 1e-4
/* The step end:
 * - sum_squares: both sides add n positive doubles, each within (n - 1) 2^-53 of the exact sum (the
 *   CPU in index order per chunk, the GPU in a per-chunk tree): relative bound 2 (n - 1) 2^-53,
 *   computed per case. The CUDA result must also be the same bits on a second call (deterministic).
 * - scale: one IEEE multiply per value on both sides: 0.
 * - adamw_update: the same rr_adamw_element on both sides. In emulation the host compiles both: 0.
 *   On a device nvcc contracts its multiply-adds into FMAs (one rounding instead of two, so up to
 *   an ulp per operation, compounding over the steps): 1e-6 (8 eps, design bound). */
#define TOL_SCALE 0.0
#ifdef RR_CUDA_EMU
#define TOL_ADAMW 0.0
#else
#define TOL_ADAMW 1e-6
#endif

typedef enum {
    OP_LINEAR, OP_LINEAR_GELU, OP_LAYERNORM, OP_RMSNORM, OP_GELU, OP_SWIGLU, OP_ADD, OP_ROPE, OP_ROPE2D, OP_EMBEDDING, OP_CE, OP_ATTENTION,
    OP_GELU_ERF, OP_QUICK_GELU, OP_GATHER, /* the CLIP tower's (OP_GATHER: N rows of C, H = K taps into OC table rows) */
    OP_SUMSQ, OP_SCALE, OP_ADAMW /* the step end: N values */
} OpKind;

/* CASE_BIG: model-sized shapes (a 4096-token sample, a 2048 x 1024 x 1024 GEMM), run on a real device
 * only: the emulation runs threads one at a time and would take minutes. */
enum { CASE_NO_BIAS = 1, CASE_SPLIT = 2, CASE_IGNORE = 4, CASE_CAUSAL = 8, CASE_INPLACE = 16, CASE_BIG = 32, CASE_DECAY = 64,
       CASE_LLAMA3 = 128 /* RoPE: RF_LLAMA3 */,
       /* the bandwidth kernels' paths (engine/cuda/bw_path.h), checked where a case names one (bw_check): */
       CASE_VEC = 256,       /* every forward / column-sum launch on 16-byte vectors */
       CASE_SCALAR = 512,    /* ... value by value (C not a multiple of 8, or CASE_MISALIGN) */
       CASE_MISALIGN = 1024, /* the activation / gradient device pointers one float past a 16-byte boundary */
       CASE_CHUNKED = 2048,  /* the column sums in several row chunks (partials + a second launch) */
       CASE_ONECHUNK = 4096  /* ... in one */
};

typedef struct {
    const char* name;
    OpKind op;
    int N, C, OC;  /* rows, channels, output channels / vocabulary */
    int H, d, ld;  /* RoPE and attention */
    int flags;
    int S;         /* attention: sequences, lengths in lens */
    int lens[6];
    int Hkv;       /* attention: key/value heads (grouped-query; q and k|v in separate buffers); 0 = H, one qkv buffer */
} OpCase;

static const OpCase CASES[] = {
    {"linear_1", OP_LINEAR, .N = 1, .C = 1, .OC = 1},
    {"linear_odd", OP_LINEAR, .N = 37, .C = 45, .OC = 29},
    {"linear_nobias", OP_LINEAR, .N = 9, .C = 19, .OC = 6, .flags = CASE_NO_BIAS},
    {"linear_split", OP_LINEAR, .N = 17, .C = 23, .OC = 31, .flags = CASE_SPLIT},
    {"linear_model", OP_LINEAR, .N = 300, .C = 128, .OC = 384},
    {"linear_empty", OP_LINEAR, .N = 0, .C = 8, .OC = 5},
    {"linear_oc0", OP_LINEAR, .N = 4, .C = 3, .OC = 0},
    /* linear + GELU (the ViT MLP, the projector): OC a multiple of 8 with a bias takes the bf16 table's
     * fused cuBLASLt epilogue, the others its unfused fallback; both must give the CPU table's values */
    {"linear_gelu_fused", OP_LINEAR_GELU, .N = 37, .C = 45, .OC = 32},
    {"linear_gelu_model", OP_LINEAR_GELU, .N = 300, .C = 128, .OC = 512},
    {"linear_gelu_odd", OP_LINEAR_GELU, .N = 19, .C = 23, .OC = 29},
    {"linear_gelu_nobias", OP_LINEAR_GELU, .N = 9, .C = 19, .OC = 16, .flags = CASE_NO_BIAS},
    {"linear_gelu_empty", OP_LINEAR_GELU, .N = 0, .C = 8, .OC = 8},
    {"layernorm_1", OP_LAYERNORM, .N = 1, .C = 13},
    {"layernorm_odd", OP_LAYERNORM, .N = 11, .C = 37},
    {"layernorm_wide", OP_LAYERNORM, .N = 130, .C = 600, .flags = CASE_SPLIT},
    {"layernorm_empty", OP_LAYERNORM, .N = 0, .C = 16},
    {"rmsnorm_1", OP_RMSNORM, .N = 1, .C = 9},
    {"rmsnorm_wide", OP_RMSNORM, .N = 130, .C = 600, .flags = CASE_SPLIT},
    {"rmsnorm_empty", OP_RMSNORM, .N = 0, .C = 16},
    {"gelu_odd", OP_GELU, .N = 3, .C = 337},
    {"gelu_inplace", OP_GELU, .N = 3, .C = 29, .flags = CASE_INPLACE},
    {"gelu_empty", OP_GELU, .N = 0, .C = 29},
    {"swiglu_odd", OP_SWIGLU, .N = 5, .C = 301},
    {"swiglu_split", OP_SWIGLU, .N = 5, .C = 13, .flags = CASE_SPLIT},
    {"add_odd", OP_ADD, .N = 301, .C = 257},
    {"add_inplace", OP_ADD, .N = 3, .C = 17, .flags = CASE_INPLACE},
    {"rope_strided", OP_ROPE, .N = 9, .H = 2, .d = 10, .ld = 61},
    {"rope_model", OP_ROPE, .N = 150, .H = 4, .d = 32, .ld = 3 * 128},
    {"rope_llama3", OP_ROPE, .N = 40, .H = 3, .d = 64, .ld = 3 * 64 + 5, .flags = CASE_LLAMA3},
    {"rope_empty", OP_ROPE, .N = 0, .H = 2, .d = 8, .ld = 16},
    /* rope_qk_* (the LM's q and k in one pass): q (ld) and k (Hkv heads, its own stride) in separate buffers */
    {"rope_qk_gqa", OP_ROPE, .N = 37, .H = 4, .d = 16, .ld = 4 * 16 + 3, .Hkv = 2},
    {"rope_qk_llama3", OP_ROPE, .N = 20, .H = 2, .d = 64, .ld = 2 * 64, .flags = CASE_LLAMA3, .Hkv = 2},
    {"rope2d_strided", OP_ROPE2D, .N = 11, .H = 3, .d = 12, .ld = 3 * 3 * 12 + 5},
    {"embedding_repeats", OP_EMBEDDING, .N = 400, .C = 70, .OC = 50},
    {"embedding_empty", OP_EMBEDDING, .N = 0, .C = 7, .OC = 5},
    {"gelu_erf_odd", OP_GELU_ERF, .N = 3, .C = 337},
    {"gelu_erf_inplace", OP_GELU_ERF, .N = 3, .C = 29, .flags = CASE_INPLACE},
    {"quick_gelu_odd", OP_QUICK_GELU, .N = 3, .C = 337},
    {"quick_gelu_empty", OP_QUICK_GELU, .N = 0, .C = 29},
    {"gather_k1", OP_GATHER, .N = 40, .C = 33, .OC = 30, .H = 1},
    {"gather_k16", OP_GATHER, .N = 130, .C = 70, .OC = 26, .H = 16},
    {"gather_empty", OP_GATHER, .N = 0, .C = 7, .OC = 5, .H = 16},
    {"ce_ignore", OP_CE, .N = 13, .C = 21, .flags = CASE_IGNORE},
    {"ce_vocab", OP_CE, .N = 64, .C = 5003, .flags = CASE_IGNORE},
    {"ce_empty", OP_CE, .N = 0, .C = 11},
    {"attn_len1", OP_ATTENTION, .H = 1, .d = 4, .flags = CASE_CAUSAL, .S = 1, .lens = {1}},
    {"attn_ragged_causal", OP_ATTENTION, .H = 2, .d = 8, .flags = CASE_CAUSAL, .S = 3, .lens = {1, 40, 75}},
    {"attn_ragged_bidir", OP_ATTENTION, .H = 2, .d = 8, .S = 3, .lens = {1, 40, 75}},
    {"attn_tile_edges", OP_ATTENTION, .H = 3, .d = 16, .flags = CASE_CAUSAL | CASE_SPLIT, .S = 4, .lens = {16, 17, 0, 33}},
    {"attn_d64_long", OP_ATTENTION, .H = 2, .d = 64, .flags = CASE_CAUSAL, .S = 2, .lens = {300, 129}},
    {"attn_d256", OP_ATTENTION, .H = 1, .d = 256, .S = 2, .lens = {45, 20}},
    {"attn_empty", OP_ATTENTION, .H = 2, .d = 8, .S = 2, .lens = {0, 0}},
    {"attn_gqa_causal", OP_ATTENTION, .H = 4, .d = 16, .flags = CASE_CAUSAL, .S = 3, .lens = {1, 40, 75}, .Hkv = 2},
    {"attn_gqa_g4_split", OP_ATTENTION, .H = 4, .d = 8, .flags = CASE_CAUSAL | CASE_SPLIT, .S = 3, .lens = {16, 33, 5},
     .Hkv = 1},
    {"attn_gqa_bidir", OP_ATTENTION, .H = 6, .d = 8, .S = 2, .lens = {30, 17}, .Hkv = 3},
    /* cuDNN's shapes (head dim a multiple of 8 up to 128): one sample (the diagnosis's first case), ViT-like
     * images (bidirectional), LM-like samples (causal, d 128) */
    {"attn_single_d64", OP_ATTENTION, .H = 2, .d = 64, .flags = CASE_CAUSAL, .S = 1, .lens = {100}},
    {"attn_vit_d64", OP_ATTENTION, .H = 2, .d = 64, .S = 3, .lens = {64, 50, 81}},
    {"attn_lm_d128", OP_ATTENTION, .H = 2, .d = 128, .flags = CASE_CAUSAL | CASE_SPLIT, .S = 3, .lens = {16, 130, 7}},
    /* the bandwidth kernels' paths (cuda_common.cuh: 8-value groups, 16-byte loads where C is a multiple of 8 and
     * the pointers aligned; column sums in row chunks of at least 32 rows, 256 columns a block) */
    {"rmsnorm_vec_chunks", OP_RMSNORM, .N = 200, .C = 64, .flags = CASE_VEC | CASE_CHUNKED | CASE_SPLIT},
    {"rmsnorm_vec_wide", OP_RMSNORM, .N = 3, .C = 8200, .flags = CASE_VEC | CASE_ONECHUNK}, /* past the registers */
    {"rmsnorm_tail", OP_RMSNORM, .N = 40, .C = 300, .flags = CASE_SCALAR | CASE_CHUNKED},
    {"rmsnorm_misaligned", OP_RMSNORM, .N = 33, .C = 64, .flags = CASE_SCALAR | CASE_MISALIGN | CASE_CHUNKED},
    {"layernorm_vec_chunks", OP_LAYERNORM, .N = 1000, .C = 40, .flags = CASE_VEC | CASE_CHUNKED},
    {"layernorm_vec_n1", OP_LAYERNORM, .N = 1, .C = 16, .flags = CASE_VEC | CASE_ONECHUNK},
    {"layernorm_misaligned", OP_LAYERNORM, .N = 70, .C = 520, .flags = CASE_SCALAR | CASE_MISALIGN | CASE_CHUNKED | CASE_SPLIT},
    {"layernorm_tail_1", OP_LAYERNORM, .N = 1, .C = 13, .flags = CASE_SCALAR | CASE_ONECHUNK},
    {"gelu_vec_tail", OP_GELU, .N = 3, .C = 339, .flags = CASE_VEC},
    {"swiglu_vec_tail", OP_SWIGLU, .N = 5, .C = 301, .flags = CASE_VEC},
    {"swiglu_misaligned", OP_SWIGLU, .N = 5, .C = 64, .flags = CASE_SCALAR | CASE_MISALIGN},
    {"add_vec_inplace", OP_ADD, .N = 7, .C = 40, .flags = CASE_VEC | CASE_INPLACE},
    {"add_misaligned", OP_ADD, .N = 3, .C = 17, .flags = CASE_SCALAR | CASE_MISALIGN},
    {"gelu_erf_vec", OP_GELU_ERF, .N = 5, .C = 203, .flags = CASE_VEC},
    {"quick_gelu_misaligned", OP_QUICK_GELU, .N = 3, .C = 40, .flags = CASE_SCALAR | CASE_MISALIGN},
    {"linear_dbias_chunks", OP_LINEAR, .N = 700, .C = 8, .OC = 520, .flags = CASE_SCALAR | CASE_CHUNKED},
    {"sumsq_empty", OP_SUMSQ, .N = 0},
    {"sumsq_few", OP_SUMSQ, .N = 37},         /* fewer values than the 64 small chunks: empty chunks */
    {"sumsq_64ki", OP_SUMSQ, .N = 65536},     /* the last size cut into 64 chunks */
    {"sumsq_chunks", OP_SUMSQ, .N = 3 * 65536 + 77}, /* 64Ki-value chunks, a short last one */
    {"sumsq_tiles", OP_SUMSQ, .N = 257 * 65536 + 77}, /* 258 chunk sums: the total's two tiles of 256 (optim.cu) */
    {"scale_odd", OP_SCALE, .N = 1001},
    {"scale_empty", OP_SCALE, .N = 0},
    {"adamw_decay", OP_ADAMW, .N = 70001, .flags = CASE_DECAY},
    {"adamw_nodecay", OP_ADAMW, .N = 37},
    {"adamw_empty", OP_ADAMW, .N = 0},
    {"big_sumsq", OP_SUMSQ, .N = 50000017, .flags = CASE_BIG},
    {"big_adamw", OP_ADAMW, .N = 16777259, .flags = CASE_DECAY | CASE_BIG},
    {"big_linear", OP_LINEAR, .N = 2048, .C = 1024, .OC = 1024, .flags = CASE_BIG},
    {"big_layernorm", OP_LAYERNORM, .N = 4096, .C = 1024, .flags = CASE_BIG},
    {"big_ce_vocab", OP_CE, .N = 512, .C = 32000, .flags = CASE_IGNORE | CASE_BIG},
    {"big_attn_4096", OP_ATTENTION, .H = 2, .d = 64, .flags = CASE_CAUSAL | CASE_BIG, .S = 2, .lens = {4096, 100}},
};

static const Backend* cu;
static const Backend* refb = &backend_cpu; /* backend_cpu_bf16 with --bf16 */
static int failures = 0;
static const char* case_name;

/* device copy of n floats / ints */
static float* up(const float* h, size_t n) {
    float* d = cu->dev->alloc((n ? n : 1) * sizeof(float));
    cu->dev->copy_h2d(cu, d, h, n * sizeof(float));
    return d;
}
/* device copy of a GEMM bias in the table's bias storage (Backend.weight_dtype): the bf16 table's are 2-byte bf16
 * words, as the ParamTable's compute copy holds them; h is rounded to bf16 values first on such a table, so that the
 * reference computes with the same bias */
static float* upb(float* h, size_t n) {
    if (cu->weight_dtype != DTYPE_BF16) return up(h, n);
    uint16_t* b = mallocCheck((n ? n : 1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) h[i] = rr_bf16_to_f32(b[i] = rr_f32_to_bf16(h[i]));
    float* d = cu->dev->alloc((n ? n : 1) * sizeof(uint16_t));
    cu->dev->copy_h2d(cu, d, b, n * sizeof(uint16_t));
    free(b);
    return d;
}
/* device copy of a 2-D weight / embedding table in the table's weight storage (Backend.weight_dtype): the
 * bf16 table's are 2-byte bf16 words (rr_f32_to_bf16), as the ParamTable's compute copy holds them */
static float* upw(const float* h, size_t n) {
    if (cu->weight_dtype != DTYPE_BF16) return up(h, n);
    uint16_t* b = mallocCheck((n ? n : 1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) b[i] = rr_f32_to_bf16(h[i]);
    float* d = cu->dev->alloc((n ? n : 1) * sizeof(uint16_t));
    cu->dev->copy_h2d(cu, d, b, n * sizeof(uint16_t));
    free(b);
    return d;
}
static int* upi(const int* h, size_t n) {
    int* d = cu->dev->alloc((n ? n : 1) * sizeof(int));
    cu->dev->copy_h2d(cu, d, h, n * sizeof(int));
    return d;
}

/* a device copy of n floats starting one float past the allocation's (16-byte aligned) start when mis: the
 * value-by-value path of the bandwidth kernels (CASE_MISALIGN); free with dfree */
static float* upo(const float* h, size_t n, int mis) {
    float* d = cu->dev->alloc((n + 1) * sizeof(float));
    cu->dev->copy_h2d(cu, d + mis, h, n * sizeof(float));
    return d + mis;
}
static void dfree(float* d, int mis) { cu->dev->free(d - mis); }

/* The bandwidth kernels' paths over one call (cuda_bw_hooks.h) where the case names one: `launches` forward
 * (colsum 0) or column-sum (colsum 1) launches, each on the path of CASE_VEC / CASE_SCALAR, the column sums in
 * several row chunks (CASE_CHUNKED) or one (CASE_ONECHUNK). */
static long bw_before[RR_BW_PATHS];
static void bw_mark(void) {
    if (bw_paths(bw_before) != 0) memset(bw_before, 0, sizeof bw_before);
}
static void bw_check(const OpCase* tc, const char* what, int colsum, long launches) {
    if (!(tc->flags & (CASE_VEC | CASE_SCALAR | CASE_CHUNKED | CASE_ONECHUNK))) return;
    long now[RR_BW_PATHS], d[RR_BW_PATHS];
    if (bw_paths(now) != 0) {
        printf("  %-20s %-8s FAIL: the CUDA backend reports no paths (rrfp_cuda_bw_paths)\n", case_name, what);
        failures++;
        return;
    }
    for (int i = 0; i < RR_BW_PATHS; i++) d[i] = now[i] - bw_before[i];
    int v = colsum ? RR_BW_COLSUM_VEC : RR_BW_VEC, sc = colsum ? RR_BW_COLSUM_SCALAR : RR_BW_SCALAR;
    const char* fail = NULL;
    if ((tc->flags & CASE_VEC) && !(d[v] == launches && d[sc] == 0)) fail = "not every launch took the 16-byte path";
    if ((tc->flags & CASE_SCALAR) && !(d[sc] == launches && d[v] == 0)) fail = "not every launch took the scalar path";
    if (colsum && (tc->flags & CASE_CHUNKED) && d[RR_BW_COLSUM_CHUNKED] != launches) fail = "the column sum ran in one chunk";
    if (colsum && (tc->flags & CASE_ONECHUNK) && d[RR_BW_COLSUM_CHUNKED] != 0) fail = "the column sum ran in row chunks";
    printf("  %-20s %-8s path=%s%s (%ld vec, %ld scalar) %s\n", case_name, what, d[v] ? "vec" : d[sc] ? "scalar" : "none",
           colsum && d[RR_BW_COLSUM_CHUNKED] ? ", chunked" : "", d[v], d[sc], fail ? "FAIL" : "ok");
    if (fail) {
        printf("  %-20s %-8s FAIL: %s\n", case_name, what, fail);
        failures++;
    }
}

/* CASE_MISALIGN: the same call on 16-byte aligned buffers (the vector path) must give the same bits as on the
 * misaligned ones (the value-by-value path): n floats of device tensors a and b */
static void cmp_bits(const char* what, const float* a_d, const float* b_d, size_t n) {
    float* a = mallocCheck((n ? n : 1) * sizeof(float));
    float* b = mallocCheck((n ? n : 1) * sizeof(float));
    cu->dev->copy_d2h(cu, a, a_d, n * sizeof(float));
    cu->dev->copy_d2h(cu, b, b_d, n * sizeof(float));
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    printf("  %-20s %-8s aligned vs misaligned: %zu of %zu values differ %s\n", case_name, what, differ, n,
           differ ? "FAIL" : "ok");
    if (differ) failures++;
    free(a), free(b);
}

/* Compare device tensor `dev` with host `ref`. */
/* --bf16: both sides round the activations they store to bf16 (engine.h, Precision). Their f32
 * values before rounding differ by the f32 tolerance of the op; two such values on either side of a
 * rounding boundary round to adjacent bf16 values, one bf16 ulp apart: at most 2^-7 |y| (8
 * significant bits; the ulp of y is 2^-7 of the bottom of its binade). So the rounded outputs
 * ("out", RoPE's in-place "forward", and RoPE's "backward" that starts from it) get 2^-7 on top of
 * their f32 tolerance, and must themselves be bf16 values (a missing rounding on the CUDA side shows).
 * Gradients are f32 from identical inputs and keep the f32 tolerances. */
static int bf16_pass = 0;
static int expect_cudnn = 0; /* --expect-cudnn */
#define BF16_FLIP 0.0078125 /* 2^-7 */

/* Every one of the W values of N rows (stride ld) of host copy `got` must be a bf16 value. */
static void bf16_check_rows(const char* what, const float* got, size_t N, size_t W, size_t ld) {
    size_t not_bf16 = 0;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < W; j++) not_bf16 += rr_bf16_round(got[i * ld + j]) != got[i * ld + j];
    if (not_bf16) {
        printf("  %-20s %-8s FAIL: %zu of %zu values are not bf16 (a rounding point is missing)\n", case_name, what,
               not_bf16, N * W);
        failures++;
    }
}

static void cmp(const char* what, const float* dev, const float* ref, size_t n, double tol) {
    float* got = mallocCheck((n ? n : 1) * sizeof(float));
    cu->dev->copy_d2h(cu, got, dev, n * sizeof(float));
    /* stored activations (RoPE's rows have untouched padding: run_rope checks them); "pre": the fused
     * linear + GELU's saved pre-activation, rounded as well */
    int rounded = bf16_pass && (!strcmp(what, "out") || !strcmp(what, "pre"));
    if (bf16_pass && (rounded || !strcmp(what, "forward") || !strcmp(what, "backward"))) tol += BF16_FLIP;
    if (rounded) bf16_check_rows(what, got, 1, n, n);
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= e)) e = d;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    if (m > 0) e /= m;
    int ok = e <= tol;
    printf("  %-20s %-8s err=%.2e tol=%.0e %s\n", case_name, what, e, tol, ok ? "ok" : "FAIL");
    if (!ok) failures++;
    free(got);
}

/* ---- one function per op family ----------------------------------------------------------------- */

static void run_linear(const OpCase* tc) {
    int N = tc->N, C = tc->C, OC = tc->OC, bias = !(tc->flags & CASE_NO_BIAS);
    size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    float *x = hrand(nin, 1), *w = hrand(nw, 1), *b = hrand(OC, 1), *dy = hrand(nout, 1);
    float *out = hrand(nout, 1), *dx = hrand(nin, 1), *dw = hrand(nw, 1), *db = hrand(OC, 1);
    float *x_d = up(x, nin), *w_d = upw(w, nw), *b_d = upb(b, OC), *dy_d = up(dy, nout);
    float *out_d = up(out, nout), *dx_d = up(dx, nin), *dw_d = up(dw, nw), *db_d = up(db, OC);
    refb->ops->linear_forward(refb, buf_f32(out), buf_f32(x), be_weight(refb, w), be_bias(refb, bias ? b : NULL), N, C, OC);
    cu->ops->linear_forward(cu, buf_f32(out_d), buf_f32(x_d), be_weight(cu, w_d), be_bias(cu, bias ? b_d : NULL), N, C, OC);
    double tol = (tc->flags & CASE_BIG) ? TOL_GEMM_BIG : TOL_GEMM;
    cmp("out", out_d, out, nout, tol);
    refb->ops->linear_backward(refb, buf_f32(dx), dw, bias ? db : NULL, buf_f32(dy), NULL, buf_f32(x), be_weight(refb, w), N, C, OC, 0);
    bw_mark();
    if (tc->flags & CASE_SPLIT) {
        cu->ops->linear_backward(cu, buf_f32(dx_d), NULL, NULL, buf_f32(dy_d), NULL, buf_f32(x_d), be_weight(cu, w_d), N, C, OC, 0);
        cu->ops->linear_backward(cu, buf_none(), dw_d, bias ? db_d : NULL, buf_f32(dy_d), NULL, buf_f32(x_d), be_weight(cu, w_d), N, C, OC, 0);
    } else {
        cu->ops->linear_backward(cu, buf_f32(dx_d), dw_d, bias ? db_d : NULL, buf_f32(dy_d), NULL, buf_f32(x_d), be_weight(cu, w_d), N, C, OC, 0);
    }
    if (bias && N > 0) bw_check(tc, "dbias", 1, 1);
    cmp("dinp", dx_d, dx, nin, tol);
    cmp("dweight", dw_d, dw, nw, tol);
    if (bias) cmp("dbias", db_d, db, OC, TOL_ROW);
    free(x), free(w), free(b), free(dy), free(out), free(dx), free(dw), free(db);
    cu->dev->free(x_d), cu->dev->free(w_d), cu->dev->free(b_d), cu->dev->free(dy_d), cu->dev->free(out_d), cu->dev->free(dx_d), cu->dev->free(dw_d);
    cu->dev->free(db_d);
}

/* linear_gelu_forward on both tables, then gelu_backward from each side's own saved pre: the saved
 * pre-activation is what the backward reads, so it is checked too */
static void run_linear_gelu(const OpCase* tc) {
    int N = tc->N, C = tc->C, OC = tc->OC, bias = !(tc->flags & CASE_NO_BIAS);
    size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    float *x = hrand(nin, 1), *w = hrand(nw, 1), *b = hrand(OC, 1), *dy = hrand(nout, 1);
    float *out = hrand(nout, 1), *pre = hrand(nout, 1), *dpre = hrand(nout, 1);
    float *x_d = up(x, nin), *w_d = upw(w, nw), *b_d = upb(b, OC), *dy_d = up(dy, nout);
    float *out_d = up(out, nout), *pre_d = up(pre, nout), *dpre_d = up(dpre, nout);
    refb->ops->linear_gelu_forward(refb, buf_f32(out), buf_f32(pre), buf_f32(x), be_weight(refb, w), be_bias(refb, bias ? b : NULL), N, C, OC);
    cu->ops->linear_gelu_forward(cu, buf_f32(out_d), buf_f32(pre_d), buf_f32(x_d), be_weight(cu, w_d), be_bias(cu, bias ? b_d : NULL), N, C, OC);
    cmp("pre", pre_d, pre, nout, TOL_GEMM);
    cmp("out", out_d, out, nout, TOL_LINEAR_GELU);
#ifdef RR_CUDA_EMU
    /* --bf16 in emulation: both sides' GEMM is the same BLIS product of the same rounded operands, so the
     * rounded values must agree nearly everywhere (seen: all). The one-ulp allowance above would hide a
     * moved rounding point (GELU of the rounded pre-activation instead of the f32 one lands on the
     * neighbouring bf16 value in a good share of the elements), so count the values that differ at all:
     * at most 1 in 1000 (room for an f32 ulp of GELU between the two sides' libm turning into a bf16
     * flip at a rounding tie). */
    if (bf16_pass && nout > 0) {
        float* got = mallocCheck(nout * sizeof(float));
        const char* names[2] = {"pre", "out"};
        const float* devs[2] = {pre_d, out_d};
        const float* refs[2] = {pre, out};
        for (int k = 0; k < 2; k++) {
            cu->dev->copy_d2h(cu, got, devs[k], nout * sizeof(float));
            size_t diff = 0;
            for (size_t i = 0; i < nout; i++) diff += got[i] != refs[k][i];
            int ok = diff * 1000 <= nout;
            printf("  %-20s %-8s %zu of %zu values differ (at most 1/1000) %s\n", case_name, names[k], diff, nout,
                   ok ? "ok" : "FAIL");
            if (!ok) failures++;
        }
        free(got);
    }
#endif
    /* the backward from the CPU's pre (as run_attention's): in bf16 the two pre may sit one bf16 ulp apart */
    cu->dev->copy_h2d(cu, pre_d, pre, nout * sizeof(float));
    refb->ops->gelu_backward(refb, dpre, dy, buf_f32(pre), nout);
    cu->ops->gelu_backward(cu, dpre_d, dy_d, buf_f32(pre_d), nout);
    cmp("dpre", dpre_d, dpre, nout, TOL_ELEM);
    free(x), free(w), free(b), free(dy), free(out), free(pre), free(dpre);
    cu->dev->free(x_d), cu->dev->free(w_d), cu->dev->free(b_d), cu->dev->free(dy_d), cu->dev->free(out_d), cu->dev->free(pre_d), cu->dev->free(dpre_d);
}

static void run_norm(const OpCase* tc) {
    int N = tc->N, C = tc->C, ln = tc->op == OP_LAYERNORM, split = tc->flags & CASE_SPLIT;
    size_t n = (size_t)N * C;
    float *x = hrand(n, 2), *w = hrand(C, 1), *b = hrand(C, 1), *dy = hrand(n, 1);
    for (size_t i = 0; i < n; i++) x[i] += 0.5f;
    float *out = hrand(n, 1), *mean = hrand(N, 1), *rstd = hrand(N, 1);
    float *dx = hrand(n, 1), *dw = hrand(C, 1), *db = hrand(C, 1);
    int mis = !!(tc->flags & CASE_MISALIGN); /* x, out, dy, dx one float off the 16-byte boundary */
    float *x_d = upo(x, n, mis), *w_d = up(w, C), *b_d = up(b, C), *dy_d = upo(dy, n, mis), *out_d = upo(out, n, mis);
    float *mean_d = up(mean, N), *rstd_d = up(rstd, N), *dx_d = upo(dx, n, mis), *dw_d = up(dw, C), *db_d = up(db, C);
    bw_mark();
    if (ln) {
        refb->ops->layernorm_forward(refb, buf_f32(out), mean, rstd, buf_f32(x), w, b, N, C);
        cu->ops->layernorm_forward(cu, buf_f32(out_d), mean_d, rstd_d, buf_f32(x_d), w_d, b_d, N, C);
        bw_check(tc, "forward", 0, 1);
        cmp("mean", mean_d, mean, N, TOL_ROW);
    } else {
        refb->ops->rmsnorm_forward(refb, buf_f32(out), rstd, buf_f32(x), w, N, C, 1e-5);
        cu->ops->rmsnorm_forward(cu, buf_f32(out_d), rstd_d, buf_f32(x_d), w_d, N, C, 1e-5);
        bw_check(tc, "forward", 0, 1);
    }
    cmp("out", out_d, out, n, TOL_ROW);
    cmp("rstd", rstd_d, rstd, N, TOL_ROW);
    /* both backwards from the CPU's statistics, so only the backward is compared */
    cu->dev->copy_h2d(cu, mean_d, mean, N * sizeof(float));
    cu->dev->copy_h2d(cu, rstd_d, rstd, N * sizeof(float));
    bw_mark();
    if (ln) {
        refb->ops->layernorm_backward(refb, dx, NULL, dw, db, dy, buf_f32(x), w, mean, rstd, N, C);
        if (split) {
            cu->ops->layernorm_backward(cu, dx_d, NULL, NULL, NULL, dy_d, buf_f32(x_d), w_d, mean_d, rstd_d, N, C);
            cu->ops->layernorm_backward(cu, NULL, NULL, dw_d, db_d, dy_d, buf_f32(x_d), w_d, mean_d, rstd_d, N, C);
        } else {
            cu->ops->layernorm_backward(cu, dx_d, NULL, dw_d, db_d, dy_d, buf_f32(x_d), w_d, mean_d, rstd_d, N, C);
        }
        cmp("dbias", db_d, db, C, TOL_BWD);
    } else {
        refb->ops->rmsnorm_backward(refb, dx, NULL, dw, dy, buf_f32(x), w, rstd, N, C);
        if (split) {
            cu->ops->rmsnorm_backward(cu, dx_d, NULL, NULL, dy_d, buf_f32(x_d), w_d, rstd_d, N, C);
            cu->ops->rmsnorm_backward(cu, NULL, NULL, dw_d, dy_d, buf_f32(x_d), w_d, rstd_d, N, C);
        } else {
            cu->ops->rmsnorm_backward(cu, dx_d, NULL, dw_d, dy_d, buf_f32(x_d), w_d, rstd_d, N, C);
        }
    }
    bw_check(tc, "dweight", 1, 1);
    cmp("dinp", dx_d, dx, n, TOL_BWD);
    cmp("dweight", dw_d, dw, C, TOL_BWD);
    if (mis) { /* the same calls on aligned copies (the 16-byte path): the same bits */
        float *x2 = up(x, n), *dy2 = up(dy, n), *out2 = up(out, n), *mean2 = up(mean, N), *rstd2 = up(rstd, N);
        float *dx2 = up(dx, n), *dw2 = up(dw, C), *db2 = up(db, C);
        cu->dev->copy_d2d(cu, dx2, dx_d, n * sizeof(float)); /* start from the misaligned run's results: one more */
        cu->dev->copy_d2d(cu, dw2, dw_d, C * sizeof(float)); /* backward on each side adds the same values */
        cu->dev->copy_d2d(cu, db2, db_d, C * sizeof(float));
        if (ln) {
            cu->ops->layernorm_forward(cu, buf_f32(out2), mean2, rstd2, buf_f32(x2), w_d, b_d, N, C);
            cu->ops->layernorm_forward(cu, buf_f32(out_d), mean_d, rstd_d, buf_f32(x_d), w_d, b_d, N, C);
            cmp_bits("mean", mean2, mean_d, N);
            cu->ops->layernorm_backward(cu, dx2, NULL, dw2, db2, dy2, buf_f32(x2), w_d, mean2, rstd2, N, C);
            cu->ops->layernorm_backward(cu, dx_d, NULL, dw_d, db_d, dy_d, buf_f32(x_d), w_d, mean_d, rstd_d, N, C);
            cmp_bits("dbias", db2, db_d, C);
        } else {
            cu->ops->rmsnorm_forward(cu, buf_f32(out2), rstd2, buf_f32(x2), w_d, N, C, 1e-5);
            cu->ops->rmsnorm_forward(cu, buf_f32(out_d), rstd_d, buf_f32(x_d), w_d, N, C, 1e-5);
            cu->ops->rmsnorm_backward(cu, dx2, NULL, dw2, dy2, buf_f32(x2), w_d, rstd2, N, C);
            cu->ops->rmsnorm_backward(cu, dx_d, NULL, dw_d, dy_d, buf_f32(x_d), w_d, rstd_d, N, C);
        }
        cmp_bits("out", out2, out_d, n);
        cmp_bits("rstd", rstd2, rstd_d, N);
        cmp_bits("dinp", dx2, dx_d, n);
        cmp_bits("dweight", dw2, dw_d, C);
        cu->dev->free(x2), cu->dev->free(dy2), cu->dev->free(out2), cu->dev->free(mean2), cu->dev->free(rstd2), cu->dev->free(dx2), cu->dev->free(dw2);
        cu->dev->free(db2);
    }
    free(x), free(w), free(b), free(dy), free(out), free(mean), free(rstd), free(dx), free(dw), free(db);
    dfree(x_d, mis), cu->dev->free(w_d), cu->dev->free(b_d), dfree(dy_d, mis), dfree(out_d, mis), cu->dev->free(mean_d);
    cu->dev->free(rstd_d), dfree(dx_d, mis), cu->dev->free(dw_d), cu->dev->free(db_d);
}

static void run_elementwise(const OpCase* tc) {
    size_t n = (size_t)tc->N * tc->C;
    int inplace = tc->flags & CASE_INPLACE, split = tc->flags & CASE_SPLIT;
    float *a = hrand(n, 6), *b = hrand(n, 2), *dy = hrand(n, 1), *out = hrand(n, 1);
    float *da = hrand(n, 1), *db = hrand(n, 1);
    int mis = !!(tc->flags & CASE_MISALIGN); /* the forward's inputs one float off the 16-byte boundary */
    float *a_d = upo(a, n, mis), *b_d = upo(b, n, mis), *dy_d = up(dy, n), *out_d = up(out, n), *da_d = up(da, n);
    float* db_d = up(db, n);
    float* ref_in = hdup(a, n); /* the input before an in-place forward overwrote it */
    bw_mark();
    if (tc->op == OP_GELU) {
        refb->ops->gelu_forward(refb, buf_f32(inplace ? a : out), buf_f32(a), n);
        cu->ops->gelu_forward(cu, buf_f32(inplace ? a_d : out_d), buf_f32(a_d), n);
        bw_check(tc, "forward", 0, 1);
        cmp("out", inplace ? a_d : out_d, inplace ? a : out, n, TOL_ELEM);
        if (!inplace) {
            refb->ops->gelu_backward(refb, da, dy, buf_f32(ref_in), n);
            cu->ops->gelu_backward(cu, da_d, dy_d, buf_f32(a_d), n);
            cmp("dinp", da_d, da, n, TOL_ELEM);
        }
    } else if (tc->op == OP_SWIGLU) {
        refb->ops->swiglu_forward(refb, buf_f32(out), buf_f32(a), buf_f32(b), n);
        cu->ops->swiglu_forward(cu, buf_f32(out_d), buf_f32(a_d), buf_f32(b_d), n);
        bw_check(tc, "forward", 0, 1);
        cmp("out", out_d, out, n, TOL_ELEM);
        refb->ops->swiglu_backward(refb, buf_f32(da), buf_f32(db), dy, buf_f32(a), buf_f32(b), n);
        if (split) {
            cu->ops->swiglu_backward(cu, buf_f32(da_d), buf_none(), dy_d, buf_f32(a_d), buf_f32(b_d), n);
            cu->ops->swiglu_backward(cu, buf_none(), buf_f32(db_d), dy_d, buf_f32(a_d), buf_f32(b_d), n);
        } else {
            cu->ops->swiglu_backward(cu, buf_f32(da_d), buf_f32(db_d), dy_d, buf_f32(a_d), buf_f32(b_d), n);
        }
        cmp("dgate", da_d, da, n, TOL_ELEM);
        cmp("dup", db_d, db, n, TOL_ELEM);
    } else {
        refb->ops->add_forward(refb, buf_f32(inplace ? a : out), buf_f32(a), buf_f32(b), n);
        cu->ops->add_forward(cu, buf_f32(inplace ? a_d : out_d), buf_f32(a_d), buf_f32(b_d), n);
        bw_check(tc, "forward", 0, 1);
        cmp("out", inplace ? a_d : out_d, inplace ? a : out, n, TOL_ELEM);
    }
    if (mis && !inplace) { /* the forward on aligned copies (the 16-byte path): the same bits */
        float *a2 = up(ref_in, n), *b2 = up(b, n), *out2 = up(out, n), *a1 = upo(ref_in, n, 1);
        if (tc->op == OP_GELU) {
            cu->ops->gelu_forward(cu, buf_f32(out2), buf_f32(a2), n);
            cu->ops->gelu_forward(cu, buf_f32(out_d), buf_f32(a1), n);
        } else if (tc->op == OP_SWIGLU) {
            cu->ops->swiglu_forward(cu, buf_f32(out2), buf_f32(a2), buf_f32(b2), n);
            cu->ops->swiglu_forward(cu, buf_f32(out_d), buf_f32(a1), buf_f32(b_d), n);
        } else {
            cu->ops->add_forward(cu, buf_f32(out2), buf_f32(a2), buf_f32(b2), n);
            cu->ops->add_forward(cu, buf_f32(out_d), buf_f32(a1), buf_f32(b_d), n);
        }
        cmp_bits("out", out2, out_d, n);
        cu->dev->free(a2), cu->dev->free(b2), cu->dev->free(out2), dfree(a1, 1);
    }
    free(a), free(b), free(dy), free(out), free(da), free(db), free(ref_in);
    dfree(a_d, mis), dfree(b_d, mis), cu->dev->free(dy_d), cu->dev->free(out_d), cu->dev->free(da_d), cu->dev->free(db_d);
}

/* --bf16: the H*d rotated values of each row must be bf16 (the padding up to ld is not RoPE's) */
static void rope_check_bf16(const float* x_d, int N, int W, int ld) {
    if (!bf16_pass || N == 0) return;
    float* h = mallocCheck((size_t)N * ld * sizeof(float));
    cu->dev->copy_d2h(cu, h, x_d, (size_t)N * ld * sizeof(float));
    bf16_check_rows("forward", h, (size_t)N, (size_t)W, (size_t)ld);
    free(h);
}

static void run_rope(const OpCase* tc) {
    int N = tc->N, H = tc->H, d = tc->d, ld = tc->ld;
    size_t n = (size_t)N * ld;
    int* pos = mallocCheck(2 * (size_t)N * sizeof(int));
    for (int i = 0; i < 2 * N; i++) pos[i] = (i % 3 == 0) ? (int)(rng_u64() % 4096) : (int)(rng_u64() % 24);
    float* x = hrand(n, 1);
    float* x_d = up(x, n);
    int* pos_d = upi(pos, 2 * (size_t)N);
    if (tc->op == OP_ROPE && tc->Hkv > 0) { /* q and k in one call against the reference table's */
        const RopeFreq* rf = tc->flags & CASE_LLAMA3 ? &RF_LLAMA3 : &RF_DEFAULT;
        int Hkv = tc->Hkv, ldk = Hkv * d + 3;
        size_t nk = (size_t)N * ldk;
        float* k = hrand(nk, 1);
        float* k_d = up(k, nk);
        refb->ops->rope_qk_forward(refb, buf_f32(x), buf_f32(k), pos, N, H, Hkv, d, ld, ldk, rf);
        cu->ops->rope_qk_forward(cu, buf_f32(x_d), buf_f32(k_d), pos_d, N, H, Hkv, d, ld, ldk, rf);
        cmp("forward q", x_d, x, n, TOL_ROPE);
        cmp("forward k", k_d, k, nk, TOL_ROPE);
        rope_check_bf16(x_d, N, H * d, ld);
        rope_check_bf16(k_d, N, Hkv * d, ldk);
        refb->ops->rope_qk_backward(refb, NULL, 0, x, NULL, 0, k, pos, N, H, Hkv, d, ld, ldk, rf, 0, 0);
        cu->ops->rope_qk_backward(cu, NULL, 0, x_d, NULL, 0, k_d, pos_d, N, H, Hkv, d, ld, ldk, rf, 0, 0);
        cmp("backward q", x_d, x, n, TOL_ROPE);
        cmp("backward k", k_d, k, nk, TOL_ROPE);
        free(k);
        cu->dev->free(k_d);
    } else if (tc->op == OP_ROPE) {
        const RopeFreq* rf = tc->flags & CASE_LLAMA3 ? &RF_LLAMA3 : &RF_DEFAULT;
        refb->ops->rope_forward(refb, buf_f32(x), pos, N, H, d, ld, rf);
        cu->ops->rope_forward(cu, buf_f32(x_d), pos_d, N, H, d, ld, rf);
        cmp("forward", x_d, x, n, TOL_ROPE);
        rope_check_bf16(x_d, N, H * d, ld);
        refb->ops->rope_backward(refb, x, pos, N, H, d, ld, rf);
        cu->ops->rope_backward(cu, x_d, pos_d, N, H, d, ld, rf);
        cmp("backward", x_d, x, n, TOL_ROPE);
    } else {
        refb->ops->rope2d_forward(refb, buf_f32(x), pos, pos + N, N, H, d, ld);
        cu->ops->rope2d_forward(cu, buf_f32(x_d), pos_d, pos_d + N, N, H, d, ld);
        cmp("forward", x_d, x, n, TOL_ROPE);
        rope_check_bf16(x_d, N, H * d, ld);
        refb->ops->rope2d_backward(refb, NULL, 0, x, pos, pos + N, N, H, d, ld, 0);
        cu->ops->rope2d_backward(cu, NULL, 0, x_d, pos_d, pos_d + N, N, H, d, ld, 0);
        cmp("backward", x_d, x, n, TOL_ROPE);
    }
    free(pos), free(x);
    cu->dev->free(x_d), cu->dev->free(pos_d);
}

static void run_embedding(const OpCase* tc) {
    int N = tc->N, C = tc->C, V = tc->OC;
    size_t n = (size_t)N * C, nt = (size_t)V * C;
    int* ids = mallocCheck(N * sizeof(int));
    for (int i = 0; i < N; i++) ids[i] = (int)(rng_u64() % V); /* N > V: repeated ids race in the backward */
    float *table = hrand(nt, 1), *dy = hrand(n, 1), *out = hrand(n, 1), *dt = hrand(nt, 1);
    float *table_d = upw(table, nt), *dy_d = up(dy, n), *out_d = up(out, n), *dt_d = up(dt, nt);
    int* ids_d = upi(ids, N);
    refb->ops->embedding_forward(refb, buf_f32(out), ids, be_weight(refb, table), N, C);
    cu->ops->embedding_forward(cu, buf_f32(out_d), ids_d, be_weight(cu, table_d), N, C);
    cmp("out", out_d, out, n, 0.0);
    refb->ops->embedding_backward(refb, dt, dy, ids, N, C);
    cu->ops->embedding_backward(cu, dt_d, dy_d, ids_d, N, C);
    cmp("dtable", dt_d, dt, nt, TOL_EMB_BWD);
    free(ids), free(table), free(dy), free(out), free(dt);
    cu->dev->free(table_d), cu->dev->free(dy_d), cu->dev->free(out_d), cu->dev->free(dt_d), cu->dev->free(ids_d);
}

/* act_forward / act_backward: the same kernel_math.h functions in double on both sides: ELEM (device
 * erf / exp of double within an ulp of double, invisible after rounding to float, as RoPE's cos / sin). */
static void run_act(const OpCase* tc) {
    size_t n = (size_t)tc->N * tc->C;
    Act act = tc->op == OP_GELU_ERF ? ACT_GELU_ERF : ACT_QUICK_GELU;
    int inplace = tc->flags & CASE_INPLACE;
    float *a = hrand(n, 6), *dy = hrand(n, 1), *out = hrand(n, 1), *da = hrand(n, 1);
    int mis = !!(tc->flags & CASE_MISALIGN);
    float *a_d = upo(a, n, mis), *dy_d = up(dy, n), *out_d = up(out, n), *da_d = up(da, n);
    float* ref_in = hdup(a, n);
    refb->ops->act_forward(refb, buf_f32(inplace ? a : out), buf_f32(a), n, act);
    bw_mark();
    cu->ops->act_forward(cu, buf_f32(inplace ? a_d : out_d), buf_f32(a_d), n, act);
    bw_check(tc, "forward", 0, 1);
    cmp("out", inplace ? a_d : out_d, inplace ? a : out, n, TOL_ELEM);
    refb->ops->act_backward(refb, da, NULL, dy, buf_f32(ref_in), n, act);
    float* in_d = up(ref_in, n);
    cu->ops->act_backward(cu, da_d, NULL, dy_d, buf_f32(in_d), n, act);
    cmp("dinp", da_d, da, n, TOL_ELEM);
    if (mis && !inplace) { /* the forward on an aligned copy (the 16-byte path): the same bits */
        float *a2 = up(ref_in, n), *out2 = up(out, n);
        cu->ops->act_forward(cu, buf_f32(out2), buf_f32(a2), n, act);
        cmp_bits("out", out2, out_d, n);
        cu->dev->free(a2), cu->dev->free(out2);
    }
    free(a), free(dy), free(out), free(da), free(ref_in);
    dfree(a_d, mis), cu->dev->free(dy_d), cu->dev->free(out_d), cu->dev->free(da_d), cu->dev->free(in_d);
}

/* rows_gather: the forward adds the K taps in the CPU's order: ELEM (a few ulps of the sum); the backward
 * adds with float atomics in another order: EMB's bound. */
static void run_gather(const OpCase* tc) {
    int N = tc->N, C = tc->C, R = tc->OC, K = tc->H;
    size_t n = (size_t)N * C, nt = (size_t)R * C, nk = (size_t)N * K;
    int* idx = mallocCheck((nk ? nk : 1) * sizeof(int));
    for (size_t i = 0; i < nk; i++) idx[i] = i % 7 == 3 ? -1 : (int)(rng_u64() % R); /* skipped and shared rows */
    float *w = hrand(nk, 1), *table = hrand(nt, 1), *out = hrand(n, 1), *dy = hrand(n, 1), *dt = hrand(nt, 1);
    float *w_d = up(w, nk), *table_d = up(table, nt), *out_d = up(out, n), *dy_d = up(dy, n), *dt_d = up(dt, nt);
    int* idx_d = upi(idx, nk);
    const float* wh = K == 1 ? NULL : w; /* K = 1: every weight 1 (the NULL form) */
    refb->ops->rows_gather_forward(refb, buf_f32(out), idx, wh, buf_f32(table), N, K, C);
    cu->ops->rows_gather_forward(cu, buf_f32(out_d), idx_d, K == 1 ? NULL : w_d, buf_f32(table_d), N, K, C);
    cmp("out", out_d, out, n, TOL_ELEM);
    refb->ops->rows_gather_backward(refb, dt, dy, idx, wh, N, K, C);
    cu->ops->rows_gather_backward(cu, dt_d, dy_d, idx_d, K == 1 ? NULL : w_d, N, K, C);
    cmp("dtable", dt_d, dt, nt, TOL_EMB_BWD);
    free(idx), free(w), free(table), free(out), free(dy), free(dt);
    cu->dev->free(w_d), cu->dev->free(table_d), cu->dev->free(out_d), cu->dev->free(dy_d), cu->dev->free(dt_d), cu->dev->free(idx_d);
}

static void run_ce(const OpCase* tc) {
    int N = tc->N, V = tc->C;
    size_t n = (size_t)N * V;
    int* t = mallocCheck(N * sizeof(int));
    for (int i = 0; i < N; i++) t[i] = ((tc->flags & CASE_IGNORE) && i % 3 == 1) ? -100 : (int)(rng_u64() % V);
    float *z = hrand(n, 4), *lse = hrand(N, 1), *dz = hrand(n, 1), loss = 0.0f;
    float *z_d = up(z, n), *lse_d = up(lse, N), *dz_d = up(dz, n), *loss_d = up(&loss, 1);
    int* t_d = upi(t, N);
    refb->ops->crossentropy_forward(refb, &loss, lse, buf_f32(z), t, N, V);
    cu->ops->crossentropy_forward(cu, loss_d, lse_d, buf_f32(z_d), t_d, N, V);
    cmp("loss_sum", loss_d, &loss, 1, TOL_ROW);
    cmp("lse", lse_d, lse, N, TOL_ROW);
    cu->dev->copy_h2d(cu, lse_d, lse, N * sizeof(float)); /* the backward from the CPU's lse */
    refb->ops->crossentropy_backward(refb, buf_f32(dz), buf_f32(z), lse, t, 1.0f / 9.0f, N, V);
    cu->ops->crossentropy_backward(cu, buf_f32(dz_d), buf_f32(z_d), lse_d, t_d, 1.0f / 9.0f, N, V);
    cmp("dlogits", dz_d, dz, n, TOL_BWD);
    free(t), free(z), free(lse), free(dz);
    cu->dev->free(z_d), cu->dev->free(lse_d), cu->dev->free(dz_d), cu->dev->free(loss_d), cu->dev->free(t_d);
}

/* The path counters' change over one call (cuda_attn_hooks.h): the path that ran, checked as the header says. */
static long paths_before[RR_ATTN_PATHS];
static void path_mark(void) {
    if (attn_paths(paths_before) != 0) memset(paths_before, 0, sizeof paths_before);
}
static void path_check(const char* what, int backward, int cudnn_shape) {
    long now[RR_ATTN_PATHS], dlt[RR_ATTN_PATHS];
    if (attn_paths(now) != 0) {
        printf("  %-20s %-8s FAIL: the CUDA backend reports no attention paths (rrfp_cuda_attention_paths)\n", case_name, what);
        failures++;
        return;
    }
    for (int i = 0; i < RR_ATTN_PATHS; i++) dlt[i] = now[i] - paths_before[i];
    int cudnn = backward ? RR_ATTN_CUDNN_BWD : RR_ATTN_CUDNN_FWD, tc = backward ? RR_ATTN_OWN_TC_BWD : RR_ATTN_OWN_TC_FWD;
    int f32 = backward ? RR_ATTN_OWN_F32_BWD : RR_ATTN_OWN_F32_FWD;
    const char* ran = dlt[cudnn] ? "cudnn" : dlt[tc] ? "own_tc" : dlt[f32] ? "own_f32" : "none";
    const char* why = dlt[RR_ATTN_CUDNN_DISAGREED] ? " (cuDNN DISAGREED with the own kernel)"
                      : dlt[RR_ATTN_CUDNN_REFUSED] ? " (cuDNN REFUSED the shape)"
                      : dlt[RR_ATTN_CUDNN_NOT_TRIED] && bf16_pass ? " (cuDNN not tried)" : "";
    int ok = bf16_pass ? (dlt[cudnn] + dlt[tc] == 1 && dlt[f32] == 0) : (dlt[f32] == 1 && dlt[cudnn] + dlt[tc] == 0);
    const char* fail = !ok ? "not exactly one path of this table ran" : dlt[RR_ATTN_CUDNN_DISAGREED] ? "cuDNN disagreed" : NULL;
    if (!fail && expect_cudnn && cudnn_shape && !dlt[cudnn]) fail = "the test is named for cuDNN and cuDNN did not run it";
    printf("  %-20s %-8s path=%s%s %s\n", case_name, what, ran, why, fail ? "FAIL" : "ok");
    if (fail) {
        printf("  %-20s %-8s FAIL: %s\n", case_name, what, fail);
        failures++;
    }
}

/* Grouped-query attention: q (T, ldq) and k | v (T, ldkv) in two buffers of different, padded strides, as
 * the LM's separate q and k / v projections (plus padding, which must not be read or written) */
static void run_attention_gqa(const OpCase* tc) {
    int S = tc->S, H = tc->H, Hkv = tc->Hkv, d = tc->d, causal = !!(tc->flags & CASE_CAUSAL);
    int cu_seqlens[8] = {0};
    for (int s = 0; s < S; s++) cu_seqlens[s + 1] = cu_seqlens[s] + tc->lens[s];
    int T = cu_seqlens[S], ldq = H * d + 3, ldkv = 2 * Hkv * d + 1, kd = Hkv * d;
    size_t nq = (size_t)T * ldq, nkv = (size_t)T * ldkv, nout = (size_t)T * H * d, nlse = (size_t)T * H;
    float *q = hrand(nq, 1.5f), *kv = hrand(nkv, 1.5f), *out = hrand(nout, 1), *lse = hrand(nlse, 1);
    float *dy = hrand(nout, 1), *dq = hrand(nq, 1), *dkv = hrand(nkv, 1);
    /* bf16: q, k, v are stored activations, bf16 values on both sides (as run_attention's) */
    if (bf16_pass) {
        for (size_t i = 0; i < nq; i++) q[i] = rr_bf16_round(q[i]);
        for (size_t i = 0; i < nkv; i++) kv[i] = rr_bf16_round(kv[i]);
    }
    float *q_d = up(q, nq), *kv_d = up(kv, nkv), *out_d = up(out, nout), *lse_d = up(lse, nlse), *dy_d = up(dy, nout);
    float *dq_d = up(dq, nq), *dkv_d = up(dkv, nkv);
    int* cu_d = upi(cu_seqlens, S + 1);
    refb->ops->attention_forward(refb, buf_f32(out), lse, buf_f32(q), buf_f32(kv), buf_f32(kv + kd), cu_seqlens, S, T, H, Hkv, d, ldq, ldkv, causal);
    /* cuDNN is never asked for grouped-query attention or separate q / kv strides: the bf16 table runs the own
     * tensor-core kernel (GQA-ready), the fp32 table attention.cu's */
    path_mark();
    cu->ops->attention_forward(cu, buf_f32(out_d), lse_d, buf_f32(q_d), buf_f32(kv_d), buf_f32(kv_d + kd), cu_d, S, T, H, Hkv, d, ldq, ldkv, causal);
    cu->dev->synchronize(cu);
    path_check("fwd_path", 0, 0);
    cmp("out", out_d, out, nout, bf16_pass ? TOL_ATT_TC : TOL_ATT);
    cmp("lse", lse_d, lse, nlse, TOL_ATT);
    cu->dev->copy_h2d(cu, out_d, out, nout * sizeof(float));
    cu->dev->copy_h2d(cu, lse_d, lse, nlse * sizeof(float));
    refb->ops->attention_backward(refb, dq, dkv, dkv + kd, NULL, NULL, NULL, 0, buf_f32(dy), buf_f32(out), lse, buf_f32(q), buf_f32(kv), buf_f32(kv + kd), cu_seqlens, S, T, H, Hkv, d, ldq, ldkv,
                             causal);
    if (tc->flags & CASE_SPLIT) {
        path_mark();
        cu->ops->attention_backward(cu, dq_d, NULL, NULL, NULL, NULL, NULL, 0, buf_f32(dy_d), buf_f32(out_d), lse_d, buf_f32(q_d), buf_f32(kv_d), buf_f32(kv_d + kd), cu_d, S, T, H, Hkv, d, ldq,
                               ldkv, causal);
        cu->dev->synchronize(cu);
        path_check("bwd_path", 1, 0);
        path_mark();
        cu->ops->attention_backward(cu, NULL, dkv_d, dkv_d + kd, NULL, NULL, NULL, 0, buf_f32(dy_d), buf_f32(out_d), lse_d, buf_f32(q_d), buf_f32(kv_d), buf_f32(kv_d + kd), cu_d, S, T, H, Hkv, d,
                               ldq, ldkv, causal);
    } else {
        path_mark();
        cu->ops->attention_backward(cu, dq_d, dkv_d, dkv_d + kd, NULL, NULL, NULL, 0, buf_f32(dy_d), buf_f32(out_d), lse_d, buf_f32(q_d), buf_f32(kv_d), buf_f32(kv_d + kd), cu_d, S, T, H, Hkv, d,
                               ldq, ldkv, causal);
    }
    cu->dev->synchronize(cu);
    path_check("bwd_path", 1, 0);
    cmp("dq", dq_d, dq, nq, bf16_pass ? TOL_ATT_TC : TOL_ATT);
    cmp("dkv", dkv_d, dkv, nkv, bf16_pass ? TOL_ATT_TC : TOL_ATT);
    free(q), free(kv), free(out), free(lse), free(dy), free(dq), free(dkv);
    cu->dev->free(q_d), cu->dev->free(kv_d), cu->dev->free(out_d), cu->dev->free(lse_d), cu->dev->free(dy_d), cu->dev->free(dq_d), cu->dev->free(dkv_d);
    cu->dev->free(cu_d);
}

static void run_attention(const OpCase* tc) {
    if (tc->Hkv > 0) {
        run_attention_gqa(tc);
        return;
    }
    int S = tc->S, H = tc->H, d = tc->d, causal = !!(tc->flags & CASE_CAUSAL);
    int cu_seqlens[8] = {0};
    for (int s = 0; s < S; s++) cu_seqlens[s + 1] = cu_seqlens[s] + tc->lens[s];
    int T = cu_seqlens[S], ld = 3 * H * d; /* q | k | v of one qkv buffer */
    size_t nqkv = (size_t)T * ld, nout = (size_t)T * H * d, nlse = (size_t)T * H;
    float *qkv = hrand(nqkv, 1.5f), *out = hrand(nout, 1), *lse = hrand(nlse, 1), *dy = hrand(nout, 1);
    float* dqkv = hrand(nqkv, 1);
    /* bf16: q, k, v are stored activations, bf16 values on both sides (every path gets the same inputs) */
    if (bf16_pass)
        for (size_t i = 0; i < nqkv; i++) qkv[i] = rr_bf16_round(qkv[i]);
    float *qkv_d = up(qkv, nqkv), *out_d = up(out, nout), *lse_d = up(lse, nlse), *dy_d = up(dy, nout);
    float* dqkv_d = up(dqkv, nqkv);
    int* cu_d = upi(cu_seqlens, S + 1);
    int hd = H * d;
    /* cuDNN attention (bf16 table, a device with cuDNN) runs only within the scratch BackendDevice.reserve set
     * aside (no allocation in a call): reserve this case's shape as the trainer reserves a stage's */
    AttnReserve ar = {.max_T = T > 0 ? T : 1, .max_S = S, .H = H, .d = d, .ld_qkv = ld, .act = DTYPE_F32};
    cu->dev->reserve(cu, 0, 0, &ar, 1);
    refb->ops->attention_forward(refb, buf_f32(out), lse, buf_f32(qkv), buf_f32(qkv + hd), buf_f32(qkv + 2 * hd), cu_seqlens, S, T, H, H, d, ld, ld, causal);
    int cudnn_shape = d % 8 == 0 && d <= 128 && T > 0;
    const char* bwd_env = getenv("RRFP_CUDNN_ATTENTION_BWD");
    int cudnn_bwd_shape = cudnn_shape && d % 16 == 0 && !(bwd_env && !strcmp(bwd_env, "0"));
    path_mark();
    cu->ops->attention_forward(cu, buf_f32(out_d), lse_d, buf_f32(qkv_d), buf_f32(qkv_d + hd), buf_f32(qkv_d + 2 * hd), cu_d, S, T, H, H, d, ld, ld, causal);
    cu->dev->synchronize(cu);
    path_check("fwd_path", 0, cudnn_shape);
    cmp("out", out_d, out, nout, bf16_pass ? TOL_ATT_TC : TOL_ATT);
    cmp("lse", lse_d, lse, nlse, TOL_ATT);
    /* the backward from the CPU's out and lse */
    cu->dev->copy_h2d(cu, out_d, out, nout * sizeof(float));
    cu->dev->copy_h2d(cu, lse_d, lse, nlse * sizeof(float));
    refb->ops->attention_backward(refb, dqkv, dqkv + hd, dqkv + 2 * hd, NULL, NULL, NULL, 0, buf_f32(dy), buf_f32(out), lse, buf_f32(qkv), buf_f32(qkv + hd), buf_f32(qkv + 2 * hd), cu_seqlens, S, T,
                           H, H, d, ld, ld, causal);
    if (tc->flags & CASE_SPLIT) {
        path_mark();
        cu->ops->attention_backward(cu, dqkv_d, NULL, NULL, NULL, NULL, NULL, 0, buf_f32(dy_d), buf_f32(out_d), lse_d, buf_f32(qkv_d), buf_f32(qkv_d + hd), buf_f32(qkv_d + 2 * hd), cu_d, S, T, H,
                               H, d, ld, ld, causal);
        cu->dev->synchronize(cu);
        path_check("bwd_path", 1, cudnn_bwd_shape);
        path_mark();
        cu->ops->attention_backward(cu, NULL, dqkv_d + hd, dqkv_d + 2 * hd, NULL, NULL, NULL, 0, buf_f32(dy_d), buf_f32(out_d), lse_d, buf_f32(qkv_d), buf_f32(qkv_d + hd), buf_f32(qkv_d + 2 * hd),
                               cu_d, S, T, H, H, d, ld, ld, causal);
    } else {
        path_mark();
        cu->ops->attention_backward(cu, dqkv_d, dqkv_d + hd, dqkv_d + 2 * hd, NULL, NULL, NULL, 0, buf_f32(dy_d), buf_f32(out_d), lse_d, buf_f32(qkv_d), buf_f32(qkv_d + hd),
                               buf_f32(qkv_d + 2 * hd), cu_d, S, T, H, H, d, ld, ld, causal);
    }
    cu->dev->synchronize(cu);
    path_check("bwd_path", 1, cudnn_bwd_shape);
    /* cuDNN's gradients are rounded to bf16 before they are added: 2^-9 of each on top (TOL_ATT_TC) */
    cmp("dqkv", dqkv_d, dqkv, nqkv, bf16_pass ? TOL_ATT_TC + (cudnn_bwd_shape ? 0.001953125 : 0.0) : TOL_ATT);
    free(qkv), free(out), free(lse), free(dy), free(dqkv);
    cu->dev->free(qkv_d), cu->dev->free(out_d), cu->dev->free(lse_d), cu->dev->free(dy_d), cu->dev->free(dqkv_d), cu->dev->free(cu_d);
}

/* The CUDA kernels' order (engine/cuda/optim.cu), replayed on the host: in each chunk of rr_sumsq_chunk_range,
 * thread t of 256 adds the values t, t + 256, ... in double, the 256 sums combined in the pairwise tree
 * (s[t] += s[t + k], k = 128 .. 1); the chunk sums added in chunk order (rr_sumsq_partials). Every term is
 * an exact product (float x float in double), so a device's fused multiply-add gives the same bits. */
static double sumsq_cuda_order(const float* x, size_t n) {
    size_t nc = rr_sumsq_chunks(n);
    double* part = mallocCheck(nc * sizeof(double));
    for (size_t c = 0; c < nc; c++) {
        size_t i0, i1;
        double s[256];
        rr_sumsq_chunk_range(n, c, &i0, &i1);
        for (size_t t = 0; t < 256; t++) {
            double acc = 0.0;
            for (size_t i = i0 + t; i < i1; i += 256) acc += rr_sumsq_term(x[i]);
            s[t] = acc;
        }
        for (int k = 128; k > 0; k >>= 1)
            for (int t = 0; t < k; t++) s[t] += s[t + k];
        part[c] = s[0];
    }
    double total = rr_sumsq_partials(part, nc);
    free(part);
    return total;
}

/* sum_squares returns a double to the host: compared here rather than through cmp. */
static void run_sumsq(const OpCase* tc) {
    size_t n = (size_t)tc->N;
    float* x = hrand(n, 3);
    float* x_d = up(x, n);
    double want = refb->ops->sum_squares(refb, x, n);
    double got = cu->ops->sum_squares(cu, x_d, n), again = cu->ops->sum_squares(cu, x_d, n);
    double e = want > 0 ? fabs(got - want) / want : fabs(got);
    double tol = n > 1 ? 2.0 * (double)(n - 1) * 0x1p-53 : 0.0;
    int ok = e <= tol;
    printf("  %-20s %-8s err=%.2e tol=%.0e %s\n", case_name, "sum", e, tol, ok ? "ok" : "FAIL");
    if (!ok) failures++;
    /* memcmp: the same bits, not just ==, on a second call */
    int same = !memcmp(&got, &again, sizeof got);
    printf("  %-20s %-8s %s\n", case_name, "repeat", same ? "same bits ok" : "FAIL: differs between calls");
    if (!same) failures++;
    /* and the bits of its order: the chunk sums added one after another, as the CPU's rr_sumsq_partials */
    double order = n ? sumsq_cuda_order(x, n) : 0.0;
    int exact = !memcmp(&got, &order, sizeof got);
    printf("  %-20s %-8s %s\n", case_name, "order", exact ? "the kernels' order, bit for bit ok" : "FAIL: not the kernels' order");
    if (!exact) failures++;
    free(x);
    cu->dev->free(x_d);
}

static void run_scale(const OpCase* tc) {
    size_t n = (size_t)tc->N;
    float* x = hrand(n, 5);
    float* x_d = up(x, n);
    refb->ops->scale(refb, x, 0.2718281f, n);
    cu->ops->scale(cu, x_d, 0.2718281f, n);
    cmp("x", x_d, x, n, TOL_SCALE);
    free(x);
    cu->dev->free(x_d);
}

/* Three AdamW steps (a new gradient and learning rate each) from the same state on both sides. */
static void run_adamw(const OpCase* tc) {
    size_t n = (size_t)tc->N;
    int decay = !!(tc->flags & CASE_DECAY);
    float *p = hrand(n, 0.05f), *m = hrand(n, 1e-3f), *v = hrand(n, 1e-6f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]); /* a second moment is >= 0 */
    float *p_d = up(p, n), *m_d = up(m, n), *v_d = up(v, n);
    AdamWConfig cfg = {.lr = 0, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    for (int t = 1; t <= 3; t++) {
        float* g = hrand(n, t == 2 ? 1e-4f : 2.0f); /* small and large gradients */
        float* g_d = up(g, n);
        cfg.lr = 1e-3f * (float)t;
        refb->ops->adamw_update(refb, p, g, m, v, n, &cfg, t, decay);
        cu->ops->adamw_update(cu, p_d, g_d, m_d, v_d, n, &cfg, t, decay);
        free(g);
        cu->dev->free(g_d);
    }
    cmp("param", p_d, p, n, TOL_ADAMW);
    cmp("m", m_d, m, n, TOL_ADAMW);
    cmp("v", v_d, v, n, TOL_ADAMW);
    /* a fourth step through adamw_update_copy into each copy storage: the update as above, and the copy
     * exactly the device's new parameter rounded to bf16 (2-byte words, or f32 words holding them) */
    for (int k = 0; k < 2; k++) {
        DType dt = k ? DTYPE_BF16 : DTYPE_F32;
        float* g = hrand(n, 0.5f);
        float* g_d = up(g, n);
        void* c_d = cu->dev->alloc((n ? n : 1) * sizeof(float));
        refb->ops->adamw_update(refb, p, g, m, v, n, &cfg, 4 + k, decay);
        cu->ops->adamw_update_copy(cu, p_d, g_d, m_d, v_d, n, &cfg, 4 + k, decay, buf_of(c_d, dt));
        cmp(k ? "param+c16" : "param+c32", p_d, p, n, TOL_ADAMW);
        float* pd = mallocCheck((n ? n : 1) * sizeof(float));
        float* c = mallocCheck((n ? n : 1) * sizeof(float));
        cu->dev->copy_d2h(cu, pd, p_d, n * sizeof(float));
        cu->dev->copy_d2h(cu, c, c_d, n * dtype_size(dt));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t want = rr_f32_to_bf16(pd[i]);
            bad += dt == DTYPE_BF16 ? ((const uint16_t*)c)[i] != want : c[i] != rr_bf16_to_f32(want);
        }
        printf("  %-20s %-8s %zu of %zu copy values wrong %s\n", case_name, k ? "copy16" : "copy32", bad, n,
               bad ? "FAIL" : "ok");
        if (bad) failures++;
        free(g), free(pd), free(c);
        cu->dev->free(g_d), cu->dev->free(c_d);
    }
    free(p), free(m), free(v);
    cu->dev->free(p_d), cu->dev->free(m_d), cu->dev->free(v_d);
}

/* Bad data met inside a kernel: the run must die at the next synchronize with the CPU backend's
 * message (naming the row and the value), not run on with garbage. Returns only if nothing was
 * reported (then the caller fails). */
static void run_bad_input(const char* what) {
    int N = 4, V = 5, C = 3;
    int t[4] = {0, 7, -100, 2}, ids[4] = {1, 0, -3, 2};
    float* z = hrand((size_t)N * V, 1);
    float *z_d = up(z, (size_t)N * V), *lse_d = up(z, N), *loss_d = up(z, 1), *tab_d = upw(z, (size_t)V * C);
    float* out_d = up(z, (size_t)N * C);
    if (!strcmp(what, "--bad-target")) {
        int* t_d = upi(t, N);
        cu->ops->crossentropy_forward(cu, loss_d, lse_d, buf_f32(z_d), t_d, N, V);
    } else {
        int* ids_d = upi(ids, N);
        cu->ops->embedding_forward(cu, buf_f32(out_d), ids_d, be_weight(cu, tab_d), N, C);
    }
    cu->dev->synchronize(cu);
    printf("test_cuda_ops: FAIL: %s was not reported\n", what);
}

/* backend_select("cuda") in a child process: with a device it returns the backend; without one the
 * child must die with exactly one line on stderr naming the reason (the CLI's behaviour). */
static int run_select(void) {
    int fd[2];
    if (pipe(fd) != 0) return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        const Backend* be = backend_select("cuda");
        fprintf(stderr, "selected %s\n", be->dev->name);
        exit(0);
    }
    close(fd[1]);
    char buf[2048];
    size_t len = 0;
    int status = proc_child_output(pid, fd[0], buf, sizeof buf, &len);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
#ifdef RRFP_HAVE_CUDA
    const char* expect = "rrfp-mm: error: cannot use backend 'cuda': no CUDA device: ";
#else
    const char* expect = "rrfp-mm: error: cannot use backend 'cuda': built without CUDA";
#endif
    if (rc == 0 && !strcmp(buf, "selected cuda\n")) {
        printf("select: a device is present, backend_select(\"cuda\") returned it\n");
        return 0;
    }
    if (rc == 1 && lines == 1 && !strncmp(buf, expect, strlen(expect))) {
        printf("select: ok: %s", buf);
        return 0;
    }
    printf("select: FAIL: exit %d, %d lines on stderr: %s\n", rc, lines, buf);
    return 1;
}

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--select")) return run_select();
    char why[512] = "";
    cu = backend_cuda_get(why, sizeof why);
    if (!cu) {
        /* the reason must be the backend's one clear line, not a crash or an empty string */
        if (strncmp(why, "no CUDA device: ", 16) != 0 && strncmp(why, "built without CUDA", 18) != 0) {
            printf("test_cuda_ops: FAIL: unexpected reason from backend_cuda_get: '%s'\n", why);
            return 1;
        }
        printf("test_cuda_ops: skipped: %s\n", why);
        return SKIP_RC;
    }
    if (argc > 1 && !strcmp(argv[1], "--bf16")) { /* runtime.precision = bf16 on both sides */
        bf16_pass = 1;
        cu = backend_with_precision(cu, PRECISION_BF16);
        refb = &backend_cpu_bf16;
        argc--, argv++;
        if (argc > 1 && !strcmp(argv[1], "--expect-cudnn")) {
            expect_cudnn = 1;
            argc--, argv++;
        }
    }
    /* --stream: the whole matrix through a table bound to a second stream (backend_on_stream): every
     * op must run where its table says. The emulation fails any launch, copy, memset, synchronize or
     * cuBLAS(Lt) call that lands on another stream, naming it; a device checks the results there. */
    static Backend bound;
    void* stream = NULL;
    if (argc > 1 && !strcmp(argv[1], "--stream")) {
        stream = cu->dev->stream_create();
        if (!stream) {
            printf("test_cuda_ops: FAIL: stream_create returned NULL on the CUDA backend\n");
            return 1;
        }
        bound = backend_on_stream(cu, stream);
        cu = &bound;
#ifdef RR_CUDA_EMU
        emu_require_stream(stream);
#endif
        argc--, argv++;
    }
    printf("test_cuda_ops: backend %s, precision %s%s\n", cu->dev->name, precision_name(cu->precision),
           stream ? ", on a second stream" : "");
    if (argc > 1 && !strncmp(argv[1], "--bad-", 6)) {
        run_bad_input(argv[1]);
        return 2;
    }
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const OpCase* tc = &CASES[i];
        if (argc > 1 && !strstr(tc->name, argv[1])) continue;
#ifdef RR_CUDA_EMU
        if ((tc->flags & CASE_BIG) && !getenv("RR_EMU_BIG")) continue; /* RR_EMU_BIG=1: run them anyway */
#endif
        case_name = tc->name;
        switch (tc->op) {
        case OP_LINEAR: run_linear(tc); break;
        case OP_LINEAR_GELU: run_linear_gelu(tc); break;
        case OP_LAYERNORM:
        case OP_RMSNORM: run_norm(tc); break;
        case OP_GELU:
        case OP_SWIGLU:
        case OP_ADD: run_elementwise(tc); break;
        case OP_ROPE:
        case OP_ROPE2D: run_rope(tc); break;
        case OP_EMBEDDING: run_embedding(tc); break;
        case OP_GELU_ERF:
        case OP_QUICK_GELU: run_act(tc); break;
        case OP_GATHER: run_gather(tc); break;
        case OP_CE: run_ce(tc); break;
        case OP_ATTENTION: run_attention(tc); break;
        case OP_SUMSQ: run_sumsq(tc); break;
        case OP_SCALE: run_scale(tc); break;
        case OP_ADAMW: run_adamw(tc); break;
        }
    }
    cu->dev->synchronize(cu);
    if (stream) cu->dev->stream_destroy(stream);
#ifdef RR_CUDA_EMU
    emu_stats_print();
#endif
    printf("cuda_ops: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
