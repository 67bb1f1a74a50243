/* test_traffic.c — launches and memory traffic of a bf16 step on the emulated CUDA backend (no conversion
 * or rounding pass, 2-byte activations: docs/cuda.md "Traffic budget").
 *
 * One LM block (forward, B, W) and one RoPE ViT tower of one block (patch embedding, block, ln_f; forward, B, W)
 * through the CUDA bf16 table on 2-byte bf16 activations (BackendOps.bf16_activations, as a stage runs them under
 * runtime.precision = bf16), each followed by the AdamW step over its parameters, on the emulation
 * (tests/support/cuda_emu). The emulation counts, for every launch, memset, copy and cuBLAS(Lt) product, the
 * bytes of device memory it really read and wrote (emu_traffic: each page touched, found by page
 * protection, within its allocation), and the test wraps the table's op slots so that every op call's
 * traffic is known, with the op's shapes. For each call it computes the bytes the op must move at the
 * least (docs/cuda.md, "Traffic budget"), twice:
 *   - `in use`: the storage of the table that runs it (activations 2-byte bf16, activation gradients f32
 *     words, 2-D weights 2-byte bf16, statistics and 1-D weights f32);
 *   - `target`: the same (the goal: 2-byte activations; it differed while activations were f32 words).
 * Checks:
 *   1. every op call's launches are the profiler's (BackendDevice.profile_take, exact) and carry its label and
 *      kind (the profiler scope);
 *   2. no standalone conversion / rounding launch (f32_to_bf16_kernel, round_bf16_kernel, bf16_to_f32_kernel)
 *      in any op: no known gap is left. The ViT's patches arrive as 2-byte words (narrowed on the host), a biased
 *      forward GEMM reads its bias as the 2-byte compute copy AdamW wrote (Backend.weight_dtype), and every backward
 *      GEMM and the attention backward read 2-byte output gradients stored by their producers (bf16 gradient Bufs): a call of linear_backward / attention_backward with an f32 dout (converted / narrowed) fails;
 *   3. every op call moves at most 1.3x its `in use` budget (the attention backward's: the least its deterministic
 *      two-kernel algorithm moves, w16_attention_backward);
 *   4. the AdamW step writes the 2-byte compute copy in its own launch, one per tensor;
 *   5. each block's launches per kind are the counts derived for it (LM_LAUNCHES, VIT_LAUNCHES).
 * The per-kind totals against both budgets are printed (the figures in docs/cuda.md).
 * Usage: test_traffic [-v]   (-v: every op call) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "engine/params.h"
#include "text/lm.h"
#include "vision/vision.h"
#include "tests/support/cuda_emu_entry.h"

/* tests/support/cuda_emu/cuda_emu.h's EmuTraffic (C++ there) */
typedef struct {
    const char* op;
    int kind;
    const char* what;
    size_t read, written;
} EmuTraffic;
void emu_traffic(int on);
size_t emu_traffic_n(void);
const EmuTraffic* emu_traffic_at(size_t i);

static int failures, verbose;
static const Backend* inner; /* the emulated CUDA bf16 table */
static Backend wrap;         /* its copy with the ops below */
static BackendDevice wrap_dev;
static BackendOps wrap_ops;

static double A_USE = 4; /* bytes of an activation value in the storage under test (A_DT) */
static DType A_DT = DTYPE_F32; /* the storage of the activations under test */
#define A_TARGET 2 /* with bf16 activations */
#define G 4        /* an activation gradient (f32 by the numerics contract) */
#define G16 2      /* an output gradient stored 2-byte by its producer for a GEMM (a bf16 gradient Buf) */
#define W16 2      /* a 2-D weight's compute copy */
#define F32B 4        /* statistics, 1-D weights, master weights, moments */
#define BIASB ((double)dtype_size(inner->weight_dtype)) /* a GEMM bias's compute copy (2 on the CUDA bf16 tables) */

/* The emulation sees pages (4 KiB): an op's buffers are counted from the first to the last page they
 * touch, so an op may show up to two partial pages per buffer more than it moves (a few buffers, read and
 * written): 64 KiB of slack per op call, small beside the ops of interest (0.25 .. 8 MiB here). A strided
 * view (RoPE's q and k inside the ViT's qkv rows) is budgeted by the pages its rows touch (strided_bytes),
 * which is what the same code moves at this granularity. */
#define PAGE_SLACK 65536
static double strided_bytes(const void* p, size_t rows, size_t width, size_t ld) {
    const size_t pg = 4096;
    uintptr_t last = (uintptr_t)-1;
    size_t pages = 0;
    for (size_t i = 0; i < rows; i++) {
        uintptr_t a = (uintptr_t)p + i * ld, b = a + width - 1;
        for (uintptr_t q = a / pg; q <= b / pg; q++)
            if (last == (uintptr_t)-1 || q > last) pages++, last = q;
    }
    double contiguous = (double)rows * width;
    return ld == width ? contiguous : (double)pages * pg;
}

/* the bytes of the pages touched by the rows of up to 3 views (rows of `width` bytes at stride `ld`, NULL: none), their
 * union counted once (q, k and v as views of one qkv buffer, as one kernel reads them); contiguous views: their bytes */
static int cmp_page(const void* a, const void* b) {
    uintptr_t x = *(const uintptr_t*)a, y = *(const uintptr_t*)b;
    return x < y ? -1 : x > y;
}
static double views_bytes(size_t rows, const void* p0, size_t w0, const void* p1, size_t w1, const void* p2, size_t w2,
                          size_t ld) {
    const void* p[3] = {p0, p1, p2};
    size_t w[3] = {w0, w1, w2}, n = 0, cap = 0;
    int strided = 0;
    for (int j = 0; j < 3; j++) strided |= p[j] && w[j] != ld;
    if (!strided) return (double)rows * ((p0 ? w0 : 0) + (p1 ? w1 : 0) + (p2 ? w2 : 0));
    uintptr_t* pages = NULL;
    for (int j = 0; j < 3; j++)
        for (size_t i = 0; p[j] && i < rows; i++) {
            uintptr_t a = (uintptr_t)p[j] + i * ld, b = a + w[j] - 1;
            for (uintptr_t q = a / 4096; q <= b / 4096; q++) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 1024;
                    uintptr_t* t = realloc(pages, cap * sizeof *pages);
                    if (!t) abort();
                    pages = t;
                }
                pages[n++] = q;
            }
        }
    qsort(pages, n, sizeof *pages, cmp_page);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) u += i == 0 || pages[i] != pages[i - 1];
    free(pages);
    return (double)u * 4096;
}

/* totals per kind */
static double tot_bytes[PROF_KINDS], tot_use[PROF_KINDS], tot_target[PROF_KINDS];
static long tot_launch[PROF_KINDS], tot_convert[PROF_KINDS];

/* the current op call */
static const char* cur_name;
static int cur_kind, cur_gap;
static size_t cur_first;
static double cur_use, cur_target, cur_extra, cur_limit;

static void begin(const char* name, int kind, int gap, double use_bytes, double target_bytes) {
    cur_name = name, cur_kind = kind, cur_gap = gap, cur_limit = 1.3;
    cur_use = use_bytes, cur_target = target_bytes, cur_extra = 0;
    cur_first = emu_traffic_n();
}

static int is_conversion(const char* k) {
    return strstr(k, "f32_to_bf16") || strstr(k, "round_bf16") || strstr(k, "round_rows") || strstr(k, "bf16_to_f32");
}

static void end(void) {
    BackendProfile p;
    inner->dev->profile_take(&p);
    size_t n = emu_traffic_n();
    double bytes = 0;
    long conv = 0;
    for (size_t i = cur_first; i < n; i++) {
        const EmuTraffic* t = emu_traffic_at(i);
        bytes += (double)t->read + (double)t->written;
        if (is_conversion(t->what)) conv++;
        if (t->kind != cur_kind) {
            printf("FAIL %s: launch %s labelled %s kind %d, expected kind %s\n", cur_name, t->what, t->op, t->kind,
                   prof_kind_name(cur_kind));
            failures++;
        }
        if (verbose) printf("      %-28s %-26s read %9zu written %9zu\n", t->op, t->what, t->read, t->written);
    }
    long launches = (long)(n - cur_first), counted = 0;
    for (int k = 0; k < PROF_KINDS; k++) counted += p.launches[k];
    if (counted != launches || p.launches[cur_kind] != launches || p.ops[cur_kind] != 1) {
        printf("FAIL %s: the profiler counted %ld launches (%ld of kind %s, %ld ops), the emulation ran %ld\n", cur_name,
               counted, p.launches[cur_kind], prof_kind_name(cur_kind), p.ops[cur_kind], launches);
        failures++;
    }
    if (conv && !cur_gap) {
        printf("FAIL %s: %ld standalone conversion / rounding launches\n", cur_name, conv);
        failures++;
    }
    double r = cur_use > 0 ? bytes / cur_use : 0;
    double limit = cur_gap ? 3.0 : cur_limit;
    if (bytes > limit * cur_use + cur_extra + PAGE_SLACK) {
        printf("FAIL %s: moved %.0f bytes, %.2fx its in-use budget %.0f (limit %.1fx + %.0f + %d)\n", cur_name, bytes, r,
               cur_use, limit, cur_extra, PAGE_SLACK);
        failures++;
    }
    if (verbose)
        printf("  %-24s %-11s launches %2ld  bytes %10.0f  in use %10.0f (%.2fx)  target %10.0f (%.2fx)%s\n", cur_name,
               prof_kind_name(cur_kind), launches, bytes, cur_use, r, cur_target, cur_target > 0 ? bytes / cur_target : 0,
               cur_gap ? "  [known gap]" : "");
    tot_bytes[cur_kind] += bytes;
    tot_use[cur_kind] += cur_use;
    tot_target[cur_kind] += cur_target;
    tot_launch[cur_kind] += launches;
    tot_convert[cur_kind] += conv;
}

/* ---- the wrapped slots: budget, then the op ------------------------------------------------------ */
/* Budgets (bytes an op must read + write at the least; docs/cuda.md): an activation is `a` bytes (A_USE
 * or A_TARGET), an activation gradient G, a 2-D weight W16, a statistic or 1-D weight F32B. A backward adds
 * into its gradients (read and write). Each GEMM reads its operands once and writes (beta 1: reads and
 * writes) its output once. */

static void w_linear_forward(const Backend* be, Buf out, Buf inp, Buf weight, Buf bias, int N,
                             int C, int OC) {
    (void)be;
#define LF(a) ((double)N * C * (a) + (double)OC * C * W16 + (bias.p ? (double)OC * BIASB : 0) + (double)N * OC * (a))
    /* a known gap on the bf16 table (its conversion and rounding passes); none on 2-byte activations, biased or
     * not (the bias is the 2-byte compute copy AdamW wrote: Backend.weight_dtype) */
    begin("linear_forward", PROF_GEMM, A_DT != DTYPE_BF16, LF(A_USE), LF(A_TARGET));
    inner->ops->linear_forward(inner, out, inp, weight, bias, N, C, OC);
    end();
}
static void w_linear_gelu_forward(const Backend* be, Buf out, Buf pre, Buf inp, Buf weight,
                                  Buf bias, int N, int C, int OC) {
    (void)be;
#define LG(a) ((double)N * C * (a) + (double)OC * C * W16 + (bias.p ? (double)OC * BIASB : 0) + 2.0 * N * OC * (a))
    begin("linear_gelu_forward", PROF_GEMM, A_DT != DTYPE_BF16, LG(A_USE), LG(A_TARGET));
    inner->ops->linear_gelu_forward(inner, out, pre, inp, weight, bias, N, C, OC);
    end();
}
/* The backward slots that take 2-byte gradients (engine.h, "2-byte output gradients") run one of two budgets: a call
 * with a 2-byte gradient or mirror the w16_* one below (budgets with G16 for a gradient stored 2-byte; none is a gap),
 * else the f32-gradient one here. */
static void w16_linear_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                const uint16_t* dout16, const float* dout, Buf inp, Buf weight, int N, int C, int OC,
                                int set);
static void w16_swiglu_backward(const Backend* be, uint16_t* dgate, uint16_t* dup, const float* dout, Buf gate, Buf up,
                                size_t n);
static void w16_rmsnorm_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, const float* dout,
                                 Buf inp, const float* weight, const float* rstd, int N, int C);
static void w16_rope_qk_backward(const Backend* be, uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16, int ldk16, float* dk,
                                 const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k, const RopeFreq* rf, int keep_q,
                                 int keep_k);
static void w16_attention_backward(const Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16, uint16_t* dk16,
                                   uint16_t* dv16, int ld16, const uint16_t* dout16, Buf out, const float* lse, Buf q, Buf k,
                                   Buf v, const int* cu, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv,
                                   int causal);
static void w16_rope2d_backward(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pr, const int* pc, int N,
                                int H, int d, int ld, int keep);
static void w16_layernorm_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                   const float* dout, Buf inp, const float* weight, const float* mean, const float* rstd,
                                   int N, int C);
static void w16_act_backward(const Backend* be, float* dinp, uint16_t* dinp16, const float* dout, Buf inp, size_t n,
                             Act act);

/* linear_backward with an f32 dout (converted to bf16 scratch) and attention_backward with an f32 dout (narrowed):
 * no gap on 2-byte activations: both blocks pass 2-byte output gradients for every product, so a call with an
 * f32 dout fails there (its conversion launch) */
static void w_linear_backward(const Backend* be, Buf dinp_b, float* dweight, float* dbias, Buf dout_b,
                              const float* dout32, Buf inp, Buf weight, int N, int C, int OC, int set) {
    if (dout_b.dt == DTYPE_BF16) {
        int d16 = dinp_b.dt == DTYPE_BF16;
        w16_linear_backward(be, d16 ? NULL : buf_f32p(dinp_b), d16 ? buf_bf16p(dinp_b) : NULL, dweight, dbias,
                            buf_bf16p(dout_b), dout32, inp, weight, N, C, OC, set);
        return;
    }
    float* dinp = buf_f32p(dinp_b);
    (void)be, (void)dout32;
    double use = 0, target = 0, nd = (double)N * OC * G;
    if (dinp) use += nd + (double)OC * C * W16 + 2.0 * N * C * G, target += nd + (double)OC * C * W16 + 2.0 * N * C * G;
    if (dweight)
        use += nd + (double)N * C * A_USE + 2.0 * OC * C * F32B, target += nd + (double)N * C * A_TARGET + 2.0 * OC * C * F32B;
    if (dbias) use += nd + 2.0 * OC * F32B, target += nd + 2.0 * OC * F32B;
    begin("linear_backward", PROF_GEMM, 0, use, target);
    inner->ops->linear_backward(inner, dinp_b, dweight, dbias, dout_b, NULL, inp, weight, N, C, OC, set);
    end();
}
static void w_layernorm_forward(const Backend* be, Buf out, float* mean, float* rstd, Buf inp,
                                const float* weight, const float* bias, int N, int C) {
    (void)be;
#define LNF(a) (2.0 * N * C * (a) + 2.0 * C * F32B + 2.0 * N * F32B)
    begin("layernorm_forward", PROF_NORM, 0, LNF(A_USE), LNF(A_TARGET));
    inner->ops->layernorm_forward(inner, out, mean, rstd, inp, weight, bias, N, C);
    end();
}
static void w_layernorm_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                 const float* dout, Buf inp, const float* weight, const float* mean, const float* rstd, int N,
                                 int C) {
    if (dinp16) {
        w16_layernorm_backward(be, dinp, dinp16, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
        return;
    }
    (void)be;
    /* one pass reads dout and inp once whatever it computes */
#define LNB(a)                                                                                                       \
    ((double)N * C * G + ((dinp || dweight) ? (double)N * C * (a) + 2.0 * N * F32B : 0) + (dinp ? 2.0 * N * C * G + C * F32B : 0) + \
     (dweight ? 2.0 * C * F32B : 0) + (dbias ? 2.0 * C * F32B : 0))
    begin("layernorm_backward", PROF_NORM, 0, LNB(A_USE), LNB(A_TARGET));
    inner->ops->layernorm_backward(inner, dinp, NULL, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    end();
}
static void w_rmsnorm_forward(const Backend* be, Buf out, float* rstd, Buf inp, const float* weight, int N,
                              int C, double eps) {
    (void)be;
#define RNF(a) (2.0 * N * C * (a) + (double)C * F32B + (double)N * F32B)
    begin("rmsnorm_forward", PROF_NORM, 0, RNF(A_USE), RNF(A_TARGET));
    inner->ops->rmsnorm_forward(inner, out, rstd, inp, weight, N, C, eps);
    end();
}
static void w_rmsnorm_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, const float* dout,
                               Buf inp, const float* weight, const float* rstd, int N, int C) {
    if (dinp16) {
        w16_rmsnorm_backward(be, dinp, dinp16, dweight, dout, inp, weight, rstd, N, C);
        return;
    }
    (void)be;
#define RNB(a) ((double)N * C * G + (double)N * C * (a) + (double)N * F32B + (dinp ? 2.0 * N * C * G + C * F32B : 0) + (dweight ? 2.0 * C * F32B : 0))
    begin("rmsnorm_backward", PROF_NORM, 0, RNB(A_USE), RNB(A_TARGET));
    inner->ops->rmsnorm_backward(inner, dinp, NULL, dweight, dout, inp, weight, rstd, N, C);
    end();
}
static void w_gelu_backward(const Backend* be, float* dinp, const float* dout, Buf inp, size_t n) {
    (void)be;
    begin("gelu_backward", PROF_ELEMENTWISE, 0, n * (3.0 * G + A_USE), n * (3.0 * G + A_TARGET));
    inner->ops->gelu_backward(inner, dinp, dout, inp, n);
    end();
}
/* act_backward: the 2-byte budget with a mirror; without one it runs unwrapped (no block calls it so here) */
static void w_act_backward(const Backend* be, float* dinp, uint16_t* dinp16, const float* dout, Buf inp, size_t n, Act act) {
    if (dinp16) w16_act_backward(be, dinp, dinp16, dout, inp, n, act);
    else inner->ops->act_backward(inner, dinp, NULL, dout, inp, n, act);
}
static void w_swiglu_forward(const Backend* be, Buf out, Buf gate, Buf up, size_t n) {
    (void)be;
    begin("swiglu_forward", PROF_ELEMENTWISE, 0, 3.0 * n * A_USE, 3.0 * n * A_TARGET);
    inner->ops->swiglu_forward(inner, out, gate, up, n);
    end();
}
static void w_swiglu_backward(const Backend* be, Buf dgate_b, Buf dup_b, const float* dout, Buf gate, Buf up, size_t n) {
    if (dgate_b.dt == DTYPE_BF16 || dup_b.dt == DTYPE_BF16) {
        w16_swiglu_backward(be, buf_bf16p(dgate_b), buf_bf16p(dup_b), dout, gate, up, n);
        return;
    }
    float *dgate = buf_f32p(dgate_b), *dup = buf_f32p(dup_b);
    (void)be;
    double gr = n * (G + ((dgate ? 2.0 : 0) + (dup ? 2.0 : 0)) * G);
    begin("swiglu_backward", PROF_ELEMENTWISE, 0, gr + 2.0 * n * A_USE, gr + 2.0 * n * A_TARGET);
    inner->ops->swiglu_backward(inner, dgate_b, dup_b, dout, gate, up, n);
    end();
}
static void w_add_forward(const Backend* be, Buf out, Buf a, Buf b, size_t n) {
    (void)be;
    begin("add_forward", PROF_ELEMENTWISE, 0, 3.0 * n * A_USE, 3.0 * n * A_TARGET);
    inner->ops->add_forward(inner, out, a, b, n);
    end();
}
static void w_rope_forward(const Backend* be, Buf x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    (void)be;
    double v = (double)N * H * d;
    begin("rope_forward", PROF_ELEMENTWISE, 0, 2 * v * A_USE + N * 4.0, 2 * v * A_TARGET + N * 4.0);
    inner->ops->rope_forward(inner, x, pos, N, H, d, ld, rf);
    end();
}
static void w_rope_backward(const Backend* be, float* dx, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    (void)be;
    double v = (double)N * H * d;
    begin("rope_backward", PROF_ELEMENTWISE, 0, 2 * v * G + N * 4.0, 2 * v * G + N * 4.0);
    inner->ops->rope_backward(inner, dx, pos, N, H, d, ld, rf);
    end();
}
/* q and k in one pass: each value read and written once (q: H heads, k: Hkv heads) */
static void w_rope_qk_forward(const Backend* be, Buf q, Buf k, const int* pos, int N, int H, int Hkv, int d, int ld_q,
                              int ld_k, const RopeFreq* rf) {
    (void)be;
    double v = (double)N * (H + Hkv) * d;
    begin("rope_qk_forward", PROF_ELEMENTWISE, 0, 2 * v * A_USE + N * 4.0, 2 * v * A_TARGET + N * 4.0);
    inner->ops->rope_qk_forward(inner, q, k, pos, N, H, Hkv, d, ld_q, ld_k, rf);
    end();
}
static void w_rope_qk_backward(const Backend* be, uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16, int ldk16, float* dk,
                               const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k, const RopeFreq* rf, int keep_q,
                               int keep_k) {
    if (dq16 || dk16) {
        w16_rope_qk_backward(be, dq16, ldq16, dq, dk16, ldk16, dk, pos, N, H, Hkv, d, ld_q, ld_k, rf, keep_q, keep_k);
        return;
    }
    (void)be;
    double v = (double)N * (H + Hkv) * d;
    begin("rope_qk_backward", PROF_ELEMENTWISE, 0, 2 * v * G + N * 4.0, 2 * v * G + N * 4.0);
    inner->ops->rope_qk_backward(inner, NULL, 0, dq, NULL, 0, dk, pos, N, H, Hkv, d, ld_q, ld_k, rf, 0, 0);
    end();
}
static void w_rope2d_forward(const Backend* be, Buf x, const int* pr, const int* pc, int N, int H, int d, int ld) {
    (void)be;
    double v = strided_bytes(x.p, N, (size_t)H * d * A_USE, (size_t)ld * A_USE);
    begin("rope2d_forward", PROF_ELEMENTWISE, 0, 2 * v + N * 8.0, 2 * v * A_TARGET / A_USE + N * 8.0);
    inner->ops->rope2d_forward(inner, x, pr, pc, N, H, d, ld);
    end();
}
static void w_rope2d_backward(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pr, const int* pc, int N,
                              int H, int d, int ld, int keep) {
    if (dx16) {
        w16_rope2d_backward(be, dx16, ld16, dx, pr, pc, N, H, d, ld, keep);
        return;
    }
    (void)be;
    double v = strided_bytes(dx, N, (size_t)H * d * G, (size_t)ld * G);
    begin("rope2d_backward", PROF_ELEMENTWISE, 0, 2 * v + N * 8.0, 2 * v + N * 8.0);
    inner->ops->rope2d_backward(inner, NULL, 0, dx, pr, pc, N, H, d, ld, 0);
    end();
}
/* attention: the compulsory traffic (each input read once): q, out, dout and dq of T H d values, k, v, dk
 * and dv of T Hkv d (grouped-query attention: Hkv key/value heads; Hkv = H in the blocks here). The
 * forward is one launch of the own tensor-core kernel, its output rounded in its store: within
 * 1.3x like every other op. The plain backward (an f32 dout, narrowed first) is not called on this table: the
 * blocks call w16_attention_backward (docs/cuda.md, "Traffic budget") */
static void w_attention_forward(const Backend* be, Buf out, float* lse, Buf q, Buf k, Buf v,
                                const int* cu, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    (void)be;
    double x = (double)T * H * d, kv = (double)T * Hkv * d;
    begin("attention_forward", PROF_ATTENTION, 0, 2 * (x + kv) * A_USE + T * H * 4.0 + (S + 1) * 4.0,
          2 * (x + kv) * A_TARGET + T * H * 4.0 + (S + 1) * 4.0);
    inner->ops->attention_forward(inner, out, lse, q, k, v, cu, S, T, H, Hkv, d, ld_q, ld_kv, causal);
    end();
}
static void w_attention_backward(const Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16, uint16_t* dk16,
                                 uint16_t* dv16, int ld16, Buf dout_b, Buf out, const float* lse, Buf q, Buf k, Buf v,
                                 const int* cu, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    if (dout_b.dt == DTYPE_BF16) {
        w16_attention_backward(be, dq, dk, dv, dq16, dk16, dv16, ld16, buf_bf16p(dout_b), out, lse, q, k, v, cu, S, T, H,
                               Hkv, d, ld_q, ld_kv, causal);
        return;
    }
    (void)be;
    double x = (double)T * H * d, kv = (double)T * Hkv * d;
    double rest = x * G + 2 * (x + 2 * kv) * G + T * H * 4.0 + (S + 1) * 4.0; /* dout read; dq, dk, dv read and written */
    begin("attention_backward", PROF_ATTENTION, 0, 2 * (x + kv) * A_USE + rest, 2 * (x + kv) * A_TARGET + rest);
    /* on 2-byte activations the own kernel's backward takes f32 inputs: q, k, v and out widened first, a
     * pass of its own (2 bytes read and 4 written a value; the ViT's one qkv span read whole): allowed on top */
    if (A_DT == DTYPE_BF16) cur_extra = 6.0 * (2 * x + 2 * kv);
    inner->ops->attention_backward(inner, dq, dk, dv, dq16, dk16, dv16, ld16, dout_b, out, lse, q, k, v, cu, S, T, H, Hkv, d,
                                   ld_q, ld_kv, causal);
    end();
}
/* ---- the 2-byte output-gradient budgets (a call with a 2-byte gradient or mirror): G16 for a gradient stored 2-byte;
 * none is a gap */
static void w16_linear_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                const uint16_t* dout16, const float* dout, Buf inp, Buf weight, int N, int C,
                                int OC, int set) {
    (void)be;
    double b = 0, nd = (double)N * OC * G16, wt = (double)OC * C * W16;
    if (dinp) b += nd + wt + (set ? 1.0 : 2.0) * N * C * G; /* set: beta 0, written; else beta 1: read + write */
    if (dinp16) b += nd + wt + (double)N * C * G16; /* beta 0: written */
    if (dweight) b += nd + (double)N * C * A_TARGET + 2.0 * OC * C * F32B;
    if (dbias) b += (double)N * OC * G + 2.0 * OC * F32B; /* the f32 dout */
    begin("linear_backward_b16", PROF_GEMM, 0, b, b);
    inner->ops->linear_backward(inner, dinp16 ? buf_bf16(dinp16) : buf_f32(dinp), dweight, dbias, buf_bf16(dout16), dout, inp,
                                weight, N, C, OC, set);
    end();
}
static void w16_swiglu_backward(const Backend* be, uint16_t* dgate, uint16_t* dup, const float* dout, Buf gate,
                                Buf up, size_t n) {
    (void)be;
    double b = n * (G + 2.0 * A_TARGET + ((dgate ? 1 : 0) + (dup ? 1 : 0)) * (double)G16);
    begin("swiglu_backward_b16", PROF_ELEMENTWISE, 0, b, b);
    inner->ops->swiglu_backward(inner, buf_bf16(dgate), buf_bf16(dup), dout, gate, up, n);
    end();
}
static void w16_rmsnorm_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, const float* dout,
                                 Buf inp, const float* weight, const float* rstd, int N, int C) {
    (void)be;
    double b = RNB(A_TARGET) + (dinp16 ? (double)N * C * G16 : 0);
    begin("rmsnorm_backward_b16", PROF_NORM, 0, b, b);
    inner->ops->rmsnorm_backward(inner, dinp, dinp16, dweight, dout, inp, weight, rstd, N, C);
    end();
}
static void w16_rope_qk_backward(const Backend* be, uint16_t* dq16, int ldq16, float* dq, uint16_t* dk16, int ldk16, float* dk,
                                 const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k, const RopeFreq* rf, int keep_q,
                                 int keep_k) {
    (void)be;
    double vq = (double)N * H * d, vk = (double)N * Hkv * d;
    double b = (vq + vk) * (G + G16) + (keep_q ? vq * G : 0) + (keep_k ? vk * G : 0) + N * 4.0;
    begin("rope_qk_backward_b16", PROF_ELEMENTWISE, 0, b, b);
    inner->ops->rope_qk_backward(inner, dq16, ldq16, dq, dk16, ldk16, dk, pos, N, H, Hkv, d, ld_q, ld_k, rf, keep_q, keep_k);
    end();
}
static void w16_attention_backward(const Backend* be, float* dq, float* dk, float* dv, uint16_t* dq16, uint16_t* dk16,
                                   uint16_t* dv16, int ld16, const uint16_t* dout16, Buf out, const float* lse,
                                   Buf q, Buf k, Buf v, const int* cu, int S, int T, int H, int Hkv,
                                   int d, int ld_q, int ld_kv, int causal) {
    (void)be;
    double x = (double)T * H * d;
    /* The least a deterministic FlashAttention-2 backward moves (every output element has one writer,
     * so dq and dk / dv come from two kernels, each streaming q, k, v and dout once; docs/cuda.md "Traffic budget"):
     * the row-statistics pre-pass reads out, dout and lse and writes D and lse2 (T H f32 each); the dq kernel and the
     * dk / dv kernel each read q, k, v, dout, D and lse2 and the sequence offsets; dq, dk, dv (f32, added into: read and
     * written) or dv 2-byte only (written), and the 2-byte mirrors (written). q, k, v and the gradients are views of
     * row stride ld (the ViT's one qkv buffer): counted as the pages their rows touch, a kernel's views of one buffer
     * once (views_bytes), as the emulation counts them. */
    size_t qw = (size_t)H * d, kw = (size_t)Hkv * d;
    /* q, k, v (and dq, dk, dv) share pages only as views of one buffer, which have one row stride */
    int one = ld_q == ld_kv;
    double qkv = one ? views_bytes(T, q.p, qw * A_TARGET, k.p, kw * A_TARGET, v.p, kw * A_TARGET, (size_t)ld_q * A_TARGET)
                     : views_bytes(T, q.p, qw * A_TARGET, NULL, 0, NULL, 0, (size_t)ld_q * A_TARGET) +
                           views_bytes(T, k.p, kw * A_TARGET, v.p, kw * A_TARGET, NULL, 0, (size_t)ld_kv * A_TARGET);
    double stats = T * H * 4.0, offs = (S + 1) * 4.0;
    double prep = x * A_TARGET + x * G16 + stats + 2 * stats;
    double stream = qkv + x * G16 + 2 * stats + offs;
    /* the dq kernel adds into dq and writes dq's mirror; the dk / dv kernel the same for dk and dv (or writes dv16 only):
     * each kernel's views counted on their own (two kernels writing views of one buffer both touch its pages) */
    double grads = 2 * views_bytes(T, dq, qw * G, NULL, 0, NULL, 0, (size_t)ld_q * G) +
                   2 * views_bytes(T, dk, kw * G, dv, kw * G, NULL, 0, (size_t)ld_kv * G);
    if (!dv) grads += views_bytes(T, dv16, kw * G16, NULL, 0, NULL, 0, (size_t)ld16 * G16);
    grads += views_bytes(T, dq16, qw * G16, NULL, 0, NULL, 0, (size_t)ld16 * G16) +
             views_bytes(T, dk16, kw * G16, dv && dv16 ? dv16 : NULL, kw * G16, NULL, 0, (size_t)ld16 * G16);
    double b = prep + 2 * stream + grads;
    begin("attention_backward_b16", PROF_ATTENTION, 0, b, b);
    inner->ops->attention_backward(inner, dq, dk, dv, dq16, dk16, dv16, ld16, buf_bf16(dout16), out, lse, q, k, v, cu, S, T, H, Hkv, d,
                                   ld_q, ld_kv, causal);
    end();
}

static void w16_rope2d_backward(const Backend* be, uint16_t* dx16, int ld16, float* dx, const int* pr, const int* pc, int N,
                                int H, int d, int ld, int keep) {
    (void)be;
    double v = strided_bytes(dx, N, (size_t)H * d * G, (size_t)ld * G), v16 = strided_bytes(dx16, N, (size_t)H * d * G16,
                                                                                          (size_t)ld16 * G16);
    double b = v + v16 + (keep ? v : 0) + N * 8.0;
    begin("rope2d_backward_b16", PROF_ELEMENTWISE, 0, b, b);
    inner->ops->rope2d_backward(inner, dx16, ld16, dx, pr, pc, N, H, d, ld, keep);
    end();
}
static void w16_layernorm_backward(const Backend* be, float* dinp, uint16_t* dinp16, float* dweight, float* dbias,
                                   const float* dout, Buf inp, const float* weight, const float* mean,
                                   const float* rstd, int N, int C) {
    (void)be;
    double b = LNB(A_TARGET) + (dinp16 ? (double)N * C * G16 : 0);
    begin("layernorm_backward_b16", PROF_NORM, 0, b, b);
    inner->ops->layernorm_backward(inner, dinp, dinp16, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    end();
}
static void w16_act_backward(const Backend* be, float* dinp, uint16_t* dinp16, const float* dout, Buf inp, size_t n,
                             Act act) {
    (void)be;
    double b = n * (3.0 * G + A_TARGET + (dinp16 ? G16 : 0));
    begin("act_backward_b16", PROF_ELEMENTWISE, 0, b, b);
    inner->ops->act_backward(inner, dinp, dinp16, dout, inp, n, act);
    end();
}

/* a narrowing into 2-byte storage: none in a block's step (the ViT's patches arrive narrowed on the host), so one
 * here fails as a standalone conversion launch */
static void w_to_bf16(const Backend* be, uint16_t* out, const float* inp, size_t n) {
    (void)be;
    begin("to_bf16", PROF_COPIES, 0, n * 6.0, n * 6.0);
    inner->ops->to_bf16(inner, out, inp, n);
    end();
}
/* a memset writes its bytes; a copy reads and writes them (gradient buffers: the same in both storages) */
static void w_memset0(const Backend* be, void* p, size_t bytes) {
    (void)be;
    begin("memset0", PROF_COPIES, 0, (double)bytes, (double)bytes);
    inner->dev->memset0(inner, p, bytes);
    end();
}
static void w_copy_d2d(const Backend* be, void* dst, const void* src, size_t bytes) {
    (void)be;
    begin("copy_d2d", PROF_COPIES, 0, 2.0 * bytes, 2.0 * bytes);
    inner->dev->copy_d2d(inner, dst, src, bytes);
    end();
}
static void w_adamw_update_copy(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n,
                                const AdamWConfig* cfg, int t, int decay, Buf copy) {
    (void)be;
    double b = n * (4.0 * F32B + 3.0 * F32B + (double)dtype_size(copy.dt));
    begin("adamw_update_copy", PROF_OPTIMISER, 0, b, b);
    inner->ops->adamw_update_copy(inner, param, grad, m, v, n, cfg, t, decay, copy);
    end();
}

static void wrap_table(void) {
    wrap = *inner;
    wrap_dev = *inner->dev;
    wrap_ops = *inner->ops;
    wrap.dev = &wrap_dev;
    wrap.ops = &wrap_ops;
    wrap_ops.linear_forward = w_linear_forward;
    wrap_ops.linear_gelu_forward = w_linear_gelu_forward;
    wrap_ops.linear_backward = w_linear_backward;
    wrap_ops.layernorm_forward = w_layernorm_forward;
    wrap_ops.layernorm_backward = w_layernorm_backward;
    wrap_ops.rmsnorm_forward = w_rmsnorm_forward;
    wrap_ops.rmsnorm_backward = w_rmsnorm_backward;
    wrap_ops.gelu_backward = w_gelu_backward;
    wrap_ops.swiglu_forward = w_swiglu_forward;
    wrap_ops.swiglu_backward = w_swiglu_backward;
    wrap_ops.add_forward = w_add_forward;
    wrap_ops.rope_forward = w_rope_forward;
    wrap_ops.rope_backward = w_rope_backward;
    wrap_ops.rope_qk_forward = w_rope_qk_forward;
    wrap_ops.rope_qk_backward = w_rope_qk_backward;
    wrap_ops.rope2d_forward = w_rope2d_forward;
    wrap_ops.rope2d_backward = w_rope2d_backward;
    wrap_ops.attention_forward = w_attention_forward;
    wrap_ops.attention_backward = w_attention_backward;
    wrap_dev.memset0 = w_memset0;
    wrap_dev.copy_d2d = w_copy_d2d;
    wrap_ops.adamw_update_copy = w_adamw_update_copy;
    wrap_ops.to_bf16 = w_to_bf16;
    wrap_ops.act_backward = w_act_backward;
    /* ops a block must not call here (gelu_forward: fused into linear_gelu_forward; the rest are the
     * model's ends) stay unwrapped and would show as unlabelled traffic */
}

/* ---- the blocks ----------------------------------------------------------------------------------- */

static void* dev_arena(Arena* ar, size_t bytes, const char* name) {
    void* p = inner->dev->alloc(bytes);
    *ar = (Arena){.base = p, .size = bytes, .name = name};
    return p;
}
static float* dev_random(size_t n, float scale, uint64_t* s) {
    float* h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = scale * ((float)(*s >> 40) / (float)(1 << 24) - 0.5f);
    }
    float* d = inner->dev->alloc(n * sizeof(float));
    inner->dev->copy_h2d(inner, d, h, n * sizeof(float));
    free(h);
    return d;
}
static int* dev_ints(const int* h, size_t n) {
    int* d = inner->dev->alloc(n * sizeof(int));
    inner->dev->copy_h2d(inner, d, h, n * sizeof(int));
    return d;
}

/* an activation input of n random values in the table's storage (bf16 values; 2-byte words on a
 * 2-byte activations) */
static Buf dev_random_act(size_t n, float scale, uint64_t* s) {
    float* d = dev_random(n, scale, s);
    if (A_DT != DTYPE_BF16) return buf_f32(d);
    float* h = malloc(n * sizeof(float));
    uint16_t* b = malloc(n * sizeof(uint16_t));
    inner->dev->copy_d2h(inner, h, d, n * sizeof(float));
    for (size_t i = 0; i < n; i++) b[i] = rr_f32_to_bf16(h[i]);
    inner->dev->copy_h2d(inner, d, b, n * sizeof(uint16_t)); /* the first half of the f32 allocation */
    free(h), free(b);
    return buf_of(d, DTYPE_BF16);
}

/* RoPE's cos / sin table is built on its frequencies' first use (rope.cu: one launch, never again once built): a
 * warm-up call builds it before the step is counted, and must have made exactly that launch and the rotation (so the
 * counted step's RoPE launches read a table: the path is checked to have run) */
static void rope_warm_up(const char* what, void (*call)(void* ctx), void* ctx) {
    BackendProfile p;
    inner->dev->profile(1);
    call(ctx);
    inner->dev->profile_take(&p);
    inner->dev->profile(0);
    if (p.launches[PROF_ELEMENTWISE] != 2) {
        printf("FAIL %s: the RoPE warm-up made %ld launches, expected 2 (the cos / sin table, the rotation)\n", what,
               p.launches[PROF_ELEMENTWISE]);
        failures++;
    }
}
struct LmRopeCtx {
    LmBlockActs* a;
    const LmSeq* seq;
    const LmConfig* c;
};
static void lm_rope_call(void* v) {
    struct LmRopeCtx* x = v;
    int d = x->c->D / x->c->H;
    inner->ops->rope_qk_forward(inner, x->a->q, x->a->k, x->seq->pos, x->seq->T, x->c->H, x->c->H, d, x->c->D, x->c->D, &x->c->rope);
}
struct VitRopeCtx {
    Buf qkv;
    const int *pr, *pc;
    int N, H, d;
};
static void vit_rope_call(void* v) {
    struct VitRopeCtx* x = v;
    inner->ops->rope2d_forward(inner, x->qkv, x->pr, x->pc, x->N, 2 * x->H, x->d, 3 * x->H * x->d);
}

static void step_params(ParamTable* pt) {
    AdamWConfig cfg = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    size_t first = emu_traffic_n();
    int n16 = 0;
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        wrap.ops->adamw_update_copy(&wrap, pt->data + s->offset, pt->grad + s->goff, pt->m + s->goff, pt->v + s->goff, s->numel,
                               &cfg, 1, s->decay, params_compute_buf(pt, i));
        n16 += params_compute_dtype(pt, i) == DTYPE_BF16;
    }
    /* 4: one launch per tensor, none of them a conversion / rounding pass */
    long launches = (long)(emu_traffic_n() - first), conv = 0;
    for (size_t i = first; i < emu_traffic_n(); i++) conv += is_conversion(emu_traffic_at(i)->what) != 0;
    if (launches != pt->n || conv || n16 == 0) {
        printf("FAIL optimiser: %ld launches for %d tensors (%d with a 2-byte copy), %ld conversion passes\n", launches,
               pt->n, n16, conv);
        failures++;
    }
}

/* The compute copy's layout on the bf16 table: 2-D tensors and GEMM biases (params_mark_gemm_bias) 2-byte bf16 words
 * (rr_f32_to_bf16 of the master), other 1-D and params_keep_f32_compute'd 2-D ones f32 words holding the rounded
 * value. */
static void check_compute_copy(void) {
    ParamTable pt;
    params_init(&pt);
    int64_t s2[2] = {3, 70}, s1[2] = {70, 0};
    params_add(&pt, "a.weight", 2, s2, PARAM_INIT_NORMAL, 0.7f, 1);
    params_add(&pt, "b.bias", 1, s1, PARAM_INIT_NORMAL, 0.7f, 0);
    params_add(&pt, "c.pos", 2, s2, PARAM_INIT_NORMAL, 0.7f, 1);
    params_keep_f32_compute(&pt, "c.pos");
    params_add(&pt, "d.bias", 1, s1, PARAM_INIT_NORMAL, 0.7f, 0);
    params_mark_gemm_bias(&pt, "d.bias");
    params_alloc(&pt, inner, 3);
    int bad = 0;
    for (int i = 0; i < pt.n; i++) {
        size_t n = pt.specs[i].numel;
        DType want = i == 0 || i == 3 ? DTYPE_BF16 : DTYPE_F32;
        float *m = malloc(n * 4), *c = malloc(n * 4);
        inner->dev->copy_d2h(inner, m, pt.data + pt.specs[i].offset, n * 4);
        inner->dev->copy_d2h(inner, c, params_compute_ptr(&pt, i), n * dtype_size(want));
        bad += params_compute_dtype(&pt, i) != want;
        for (size_t j = 0; j < n; j++) {
            uint16_t w = rr_f32_to_bf16(m[j]);
            bad += want == DTYPE_BF16 ? ((uint16_t*)c)[j] != w : c[j] != rr_bf16_to_f32(w);
        }
        free(m), free(c);
    }
    printf("compute copy: 2-D and GEMM-bias bf16 words, other 1-D and kept 2-D f32 words: %s\n", bad ? "FAIL" : "ok");
    failures += bad != 0;
    params_free(&pt);
}

static void run_lm(void) {
    /* the LM block as a stage runs it: on the bf16 table, 2-byte activations */
    LmConfig c = {.D = 256, .L = 1, .H = 4, .F = 512, .V = 16, .init_std = 0.02f, .rms_eps = 1e-5, .rope = {.theta = 10000},
                  .act_bytes = 2, .qkv_bias = 1}; /* Qwen2's q, k, v biases: biased GEMMs in the LM too */
    int T = 256, S = 2;
    ParamTable pt;
    params_init(&pt);
    lm_blocks_params_add(&pt, &c, 0, 1);
    params_alloc(&pt, inner, 7);
    params_alloc_optimizer(&pt);
    LmBlockW w, dw;
    lm_block_weights_point(&w, &pt, 0, 0);
    lm_block_weights_point(&dw, &pt, 0, 1);
    Arena measure = {.base = NULL, .size = SIZE_MAX, .name = "measure"}, ar;
    LmBlockActs a;
    LmBlockGrads g;
    LmScratch s;
    lm_block_acts_layout(&a, &measure, &c, T);
    lm_block_grads_layout(&g, &measure, &c, T);
    lm_scratch_layout(&s, &measure, &c, T);
    void* block = dev_arena(&ar, measure.used, "lm acts");
    lm_block_acts_layout(&a, &ar, &c, T);
    lm_block_grads_layout(&g, &ar, &c, T);
    lm_scratch_layout(&s, &ar, &c, T);
    int cu[3] = {0, 100, T}, pos[256];
    for (int i = 0; i < T; i++) pos[i] = i < 100 ? i : i - 100;
    LmSeq seq = {.T = T, .S = S, .cu_seqlens = dev_ints(cu, 3), .pos = dev_ints(pos, T)};
    uint64_t rs = 3;
    Buf xin = dev_random_act((size_t)T * c.D, 2.0f, &rs), xout = dev_random_act((size_t)T * c.D, 1.0f, &rs);
    float *dxout = dev_random((size_t)T * c.D, 1e-2f, &rs), *dxin = dev_random((size_t)T * c.D, 1.0f, &rs);
    struct LmRopeCtx rc = {&a, &seq, &c};
    rope_warm_up("LM block", lm_rope_call, &rc);
    /* the residual gradients' 2-byte copies, as a stage keeps them: dxout's stored by the pass that finished it (the
     * next block's norm1 backward, here before the measurement), dxin's written by this block's B */
    uint16_t* dxout16 = inner->dev->alloc((size_t)T * c.D * 2);
    uint16_t* dxin16 = inner->dev->alloc((size_t)T * c.D * 2);
    inner->ops->to_bf16(inner, dxout16, dxout, (size_t)T * c.D);
    g.dxout16 = dxout16, g.dxin16 = dxin16;
    inner->dev->synchronize(inner);
    emu_traffic(1);
    inner->dev->profile(1);
    printf("LM block (D %d, H %d, F %d, T %d in %d sequences), bf16, 2-byte activations:\n", c.D, c.H, c.F, T, S);
    lm_block_forward(&wrap, &c, &w, &a, &s, &seq, xin, xout);
    lm_block_backward_input(&wrap, &c, &w, &a, &g, &s, &seq, xin, dxout, dxin);
    lm_block_backward_weight(&wrap, &c, &w, &dw, &a, &g, &seq, xin, dxout);
    step_params(&pt);
    inner->dev->profile(0);
    emu_traffic(0);
    inner->dev->free(block);
    inner->dev->free(dxout16), inner->dev->free(dxin16);
    params_free(&pt);
}

static void run_vit(void) {
    /* the RoPE tower as a first stage runs it under bf16 on CUDA: on 2-byte activations (model_bf16_vision) */
    VitConfig c = {.patch = 4, .D = 256, .L = 1, .H = 4, .Dt = 256, .init_std = 0.02f, .act_bytes = 2};
    int N = 256, I = 2, P = 3 * c.patch * c.patch;
    ParamTable pt;
    params_init(&pt);
    vit_params_add(&pt, &c);
    params_alloc(&pt, inner, 9);
    params_alloc_optimizer(&pt);
    VitW w, dw;
    vit_weights_point(&w, &pt, &c, 0);
    vit_weights_point(&dw, &pt, &c, 1);
    Arena measure = {.base = NULL, .size = SIZE_MAX, .name = "measure"}, ar;
    VitActs a = {0}, am = {0};
    vit_acts_layout(&am, &measure, &c, N, 1, 1);
    vit_acts_free_tables(&am);
    void* block = dev_arena(&ar, measure.used, "vit acts");
    vit_acts_layout(&a, &ar, &c, N, 1, 1);
    int img_cu[3] = {0, 128, 256}, pr[256], pc[256];
    for (int i = 0; i < N; i++) pr[i] = (i % 128) / 16, pc[i] = (i % 128) % 16; /* two 8 x 16 grids */
    uint64_t rs = 5;
    Buf patches = dev_random_act((size_t)N * P, 2.0f, &rs); /* 2-byte words: narrowed on the host (vit_forward) */
    int *img_d = dev_ints(img_cu, 3), *pr_d = dev_ints(pr, N), *pc_d = dev_ints(pc, N);
    float* dv = dev_random((size_t)N * c.D, 1e-2f, &rs);
    struct VitRopeCtx vc = {a.blocks[0].qkv, pr_d, pc_d, N, c.H, c.D / c.H};
    rope_warm_up("ViT block", vit_rope_call, &vc);
    inner->dev->synchronize(inner);
    emu_traffic(1);
    inner->dev->profile(1);
    printf("ViT block (D %d, H %d, MLP %d, %d patches of 3x%dx%d in %d images), bf16, 2-byte activations:\n", c.D, c.H, 4 * c.D, N, c.patch,
           c.patch, I);
    vit_forward(&wrap, &c, &w, &a, patches, img_d, I, pr_d, pc_d, N);
    wrap.dev->copy_d2d(&wrap, a.dvout, dv, (size_t)N * c.D * sizeof(float));
    vit_backward_input(&wrap, &c, &w, &a);
    vit_backward_weight(&wrap, &c, &w, &dw, &a);
    step_params(&pt);
    inner->dev->profile(0);
    emu_traffic(0);
    vit_acts_free_tables(&a);
    vit_weights_free(&w);
    vit_weights_free(&dw);
    inner->dev->free(block);
    params_free(&pt);
}

/* 5. The launches per kind of each block's step, exactly (the fusions and the removed passes: a launch that
 * comes back fails here). LM block (q, k, v biases): gemm 7 forward (a biased one is one launch: its bias the 2-byte
 * compute copy) + 7 B products (each reads the 2-byte output gradient its producer stored; dh, dn2, dn1 written by
 * their first GEMM, set = 1, and datt16 by o's: no memset) + 7 W products + 3 bias-gradient column sums (q, k, v);
 * attention forward 1 + backward 3 (pre-pass, dq, dk / dv: dout is 2-byte); norm 2 forward + 4 backward;
 * elementwise: RoPE over q and k one launch each way (rope_qk_forward, b16 rope_qk_backward), 2 adds, SwiGLU forward
 * and backward (dgate, dup stored 2-byte); optimiser one per tensor (12); copies 1 memset (dq, dk, dv packed in one
 * block: the attention backward adds into them) + 2 copies (dxmid, dxin). ViT block: gemm 5 forward + 4 B (dgelu,
 * dln2, dln1 set, datt16) + 8 W (4 products, 4 bias sums) + the patch embedding's 2; the 2-D RoPE of q and k one
 * launch each way (their 2H heads adjacent in the qkv rows and its mirror); copies 3 memsets (ln_f's dx and dfc1: the
 * norm and GELU backwards add; dqkv: the attention backward's) + 3 copies (the test's upstream gradient, dxmid,
 * dxin); no narrowing launch (the patches arrive in 2-byte words). Every column sum (bias gradients, the norms' weight
 * and bias gradients) is two launches at these shapes (docs/cuda.md "Bandwidth-bound kernels": the row chunks' sums
 * into the partial buffer, then their fixed-order total): LM gemm 24 + 3, norm 6 + 2; ViT gemm 19 + 5 (4 biases and
 * the patch embedding's), norm 9 + 3. */
static const long LM_LAUNCHES[PROF_KINDS] = {27, 4, 8, 6, 12, 3, 0};
static const long VIT_LAUNCHES[PROF_KINDS] = {24, 4, 12, 5, 16, 6, 0};

/* the per-kind totals since the last call (every launch was inside a wrapped op: nothing unlabelled ran), and their
 * launch counts against `want` */
static void print_totals(const char* what, const long* want) {
    printf("%s per kind: launches, bytes moved against the in-use budget and the 2-byte-activation target\n", what);
    for (int k = 0; k < PROF_KINDS; k++) {
        if (tot_launch[k] == 0 && want[k] == 0) continue;
        printf("  %-12s launches %4ld (conversion / rounding %3ld)  bytes %11.0f  in use %11.0f (%.2fx)  target %11.0f "
               "(%.2fx)\n",
               prof_kind_name(k), tot_launch[k], tot_convert[k], tot_bytes[k], tot_use[k],
               tot_use[k] > 0 ? tot_bytes[k] / tot_use[k] : 0, tot_target[k],
               tot_target[k] > 0 ? tot_bytes[k] / tot_target[k] : 0);
        if (tot_launch[k] != want[k]) {
            printf("FAIL %s: %ld %s launches, expected %ld\n", what, tot_launch[k], prof_kind_name(k), want[k]);
            failures++;
        }
        tot_bytes[k] = tot_use[k] = tot_target[k] = 0;
        tot_launch[k] = tot_convert[k] = 0;
    }
}

int main(int argc, char** argv) {
    verbose = argc > 1 && !strcmp(argv[1], "-v");
    unsetenv("RR_EMU_ORDERS"); /* its snapshots would be counted as reads */
    setenv("RR_EMU_PROTECT", "1", 1);
    const Backend* be = cuda_emu_backend_or_exit("test_traffic");
    cpu_set_num_threads(1); /* BLIS behind the emulated cuBLAS on this thread: one fault handler at a time */
    inner = be->bf16_variant;
    if (!inner->dev->profile || inner->weight_dtype != DTYPE_BF16) {
        printf("test_traffic: FAIL: the CUDA bf16 table has no profiler or no 2-byte weights\n");
        return 1;
    }
    const Backend* bf16_table = inner;
    check_compute_copy();
    /* the LM block on 2-byte activations (a stage's LM under runtime.precision = bf16, tp = 1) */
    if (!inner->ops->bf16_activations) {
        printf("test_traffic: FAIL: the CUDA bf16 table takes no 2-byte activations\n");
        return 1;
    }
    A_DT = DTYPE_BF16;
    A_USE = A_TARGET;
    wrap_table();
    run_lm();
    print_totals("LM block (2-byte activations)", LM_LAUNCHES);
    /* the RoPE ViT on it too */
    run_vit();
    print_totals("ViT block (2-byte activations)", VIT_LAUNCHES);
    inner = bf16_table;
    if (failures) {
        printf("test_traffic: %d failures\n", failures);
        return 1;
    }
    printf("traffic: ok\n");
    return 0;
}
