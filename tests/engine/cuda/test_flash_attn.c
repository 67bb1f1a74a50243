/* test_flash_attn.c — the CUDA backend's own tensor-core attention (engine/cuda/flash_attention.cu) called
 * directly, on what the backend table does not reach: GQA / MQA (fewer key/value heads than query heads),
 * bf16 storage (__nv_bfloat16 q, k, v, out, dout, dq, dk, dv) as well as f32, q and k/v of different
 * strides, and head dims 20, 32, 48, 64, 80, 96, 128, 256 with sample lengths 1 .. 200 that are and are not
 * multiples of the 64-row tiles, causal and bidirectional, and many short samples.
 *
 * Reference: the CPU backend's attention (engine/cpu/attention.c, f32) on the same bf16 values with every
 * key/value head repeated for its query heads (GQA is MHA with K and V repeated), its dk / dv summed over
 * each group. The kernel multiplies bf16 operands (P, dout and dS rounded to bf16, 2^-8 relative each:
 * see TOL_ATT_TC in test_cuda_ops.c), so: out within 2^-7 of max |out| (P rounded, plus the bf16 store),
 * lse within 2e-5 (f32 scores of the same bf16 q, k), gradients within 2^-8 (f32 storage) or 2^-7 (bf16
 * storage: the sum with the gradient's prior value is rounded to bf16 too, 2^-8 of it; priors are at most a
 * quarter of the largest gradient). And the gradients again (dq_b, dk_b, dv_b) against the backward in double
 * with the kernel's own bf16 operands (P = exp(S - lse) needs no running maximum, so the backward's rounding
 * points can be reproduced): within 1e-3 of the largest gradient, or one bf16 rounding of each stored value
 * (bf16 storage). Gradients are added to what dq, dk, dv held (random priors). Every output element
 * must be written: out and lse start as NaN (poisoned) on the device.
 *
 * The backward that runs is the shipping one; built against dev/cuda/'s backend (RR_FA_DEV) it is the one the
 * environment asks for (RRFP_FA_BWD=v1: the first kernels, else v2;
 * RRFP_FA_DKDV_WARPS=8: v2's 8-warp dk/dv blocks at head dims 97..128; RRFP_FA_DQ=double: v2's double-buffered
 * dq kernel at head dims 65..128 too; RRFP_FA_LPT=1: v2 orders a call's blocks longest first over all samples
 * where there are several and they average more than one tile, else sample by sample): a case fails when another ran
 * (rrfp_cuda_flash_attention_bwd_info). Two cases run the backward on bf16 inputs with f32 gradients
 * (cuda_flash_attention_backward_bf16_f32grad: always v2), against the f32-storage bounds.
 *
 * Built twice: test_flash_attn_emu (the CPU emulation, tests/support/cuda_emu) and test_flash_attn (a device;
 * skipped, 77, without one). Usage: test_flash_attn [case-name-substring] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "tests/support/cuda_attn_hooks.h"
#include "tests/support/cuda_emu_entry.h"

typedef struct {
    const char* name;
    int bf16, S, H, Hkv, d, causal; /* bf16: 0 f32 storage, 1 bf16, 2 bf16 with f32 gradients */
    int lens[64];
} FlashCase;

static const FlashCase CASES[] = {
    {"gqa_causal_d64", 1, 3, 4, 2, 64, 1, {1, 70, 129}},
    {"mqa_bidir_d32", 1, 2, 3, 1, 32, 0, {65, 3}},
    {"d80_causal_f32", 0, 2, 2, 2, 80, 1, {100, 1}},
    {"gqa_bidir_d96", 1, 2, 2, 1, 96, 0, {64, 17}},
    {"d128_causal", 1, 1, 2, 2, 128, 1, {200}},
    {"gqa_d256_causal_f32", 0, 2, 2, 1, 256, 1, {33, 64}},
    {"d48_bidir", 1, 1, 1, 1, 48, 0, {50}},
    {"gqa_d20_causal", 1, 2, 4, 2, 20, 1, {37, 5}}, /* a head dim off the 8-value loads */
    {"many_short_d64", 1, 40, 2, 2, 64, 1, {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4,
                                              5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
    /* several key and query tiles per block, so that the backward's double buffers (v2) take turns with
     * GQA groups in the dk/dv kernel's steps (and 128-key blocks: RRFP_FA_DKDV_WARPS=8) */
    {"gqa_d128_bidir_tiles", 1, 2, 4, 2, 128, 0, {70, 200}},
    {"vit_d64_bidir_tiles", 1, 3, 2, 2, 64, 0, {64, 130, 192}},
    {"gqa_d128_causal_tiles_f32", 0, 3, 2, 1, 128, 1, {120, 70, 20}},
    /* bf16 = 2: bf16 q, k, v, out, dout with f32 gradients (cuda_flash_attention_backward_bf16_f32grad) */
    {"gqa_d128_causal_bf16in_f32grad", 2, 2, 4, 2, 128, 1, {100, 60}},
    {"vit_d64_bidir_bf16in_f32grad", 2, 2, 2, 2, 64, 0, {90, 40}},
};

static const Backend* cu;
static int failures;
/* the backward the environment asks for (flash_attention.cu): version (RRFP_FA_BWD=v1: 1, else 2) and at head
 * dims 97..128 the dk/dv kernel's warps (v2: RRFP_FA_DKDV_WARPS=8: 8, else 4; v1: 8) */
static int want_version, want_warps_128, want_warps_128_v2; /* ..._v2: what v2 takes (bf16 inputs, f32 gradients) */
/* v2's dq kernel at head dims 65..128 (padded to 96, 128): 1 (dq3, single K / V buffers), or 2 (dq2, double
 * buffers: RRFP_FA_DQ=double); dq2 at the others, 0 for v1 */
static int want_dq_96_128;
static int want_lpt_on; /* v2's longest-first block order (RRFP_FA_LPT=1: on; off by default) */

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static float rnd(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* normalised max error of got against ref, over n values; NaN counts as infinite */
static double err_of(const float* got, const float* ref, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= e)) e = d;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return m > 0 ? e / m : e;
}
static void check(const char* cname, const char* what, double e, double tol) {
    int ok = e <= tol;
    printf("  %-22s %-5s err=%.2e tol=%.1e %s\n", cname, what, e, tol, ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

/* device buffer of n values of f32 (bf16 = 0) or bf16 (1) from host f32 values (bf16 values already) */
static void* up(const float* h, size_t n, int bf16) {
    size_t es = bf16 ? 2 : 4;
    void* d = cu->dev->alloc((n ? n : 1) * es);
    if (bf16) {
        uint16_t* t = (uint16_t*)malloc((n ? n : 1) * 2);
        for (size_t i = 0; i < n; i++) t[i] = rr_f32_to_bf16(h[i]);
        cu->dev->copy_h2d(cu, d, t, n * 2);
        free(t);
    } else {
        cu->dev->copy_h2d(cu, d, h, n * 4);
    }
    return d;
}
static void down(float* h, const void* d, size_t n, int bf16) {
    if (bf16) {
        uint16_t* t = (uint16_t*)malloc((n ? n : 1) * 2);
        cu->dev->copy_d2h(cu, t, d, n * 2);
        for (size_t i = 0; i < n; i++) h[i] = rr_bf16_to_f32(t[i]);
        free(t);
    } else {
        cu->dev->copy_d2h(cu, h, d, n * 4);
    }
}

/* The backward as the kernel multiplies, in double: P = exp(S - lse) (no running maximum in the backward, so
 * this is the kernel's P to f32 round-off), dout, P and dS rounded to bf16 where they are MMA operands, every
 * sum in double. The kernel differs from it by its f32 sums and by the rare operand that rounds the other way
 * (its f32 value within an f32 ulp of a bf16 rounding boundary). grad (packed like qkv, ldq) += gradients. */
static void ref_backward_bf16_operands(float* grad, const float* qkv, const float* dout, const float* out,
                                       const float* lse, const int* cu_seqlens, int S, int H, int Hkv, int d, int ldq,
                                       int ldo, int causal) {
    int g = H / Hkv;
    double scale = 1.0 / sqrt((double)d);
    for (int s = 0; s < S; s++) {
        int st = cu_seqlens[s], len = cu_seqlens[s + 1] - st;
        for (int h = 0; h < H; h++) {
            int qo = h * d, ko = H * d + (h / g) * d, vo = H * d + Hkv * d + (h / g) * d;
            for (int i = 0; i < len; i++) {
                const float* qi = qkv + (size_t)(st + i) * ldq + qo;
                const float* doi = dout + (size_t)(st + i) * ldo + h * d;
                const float* oi = out + (size_t)(st + i) * ldo + h * d;
                double D = 0;
                for (int c = 0; c < d; c++) D += (double)rr_bf16_round(doi[c]) * oi[c];
                double L = lse[(size_t)(st + i) * H + h];
                for (int j = 0; j < (causal ? i + 1 : len); j++) {
                    const float* kj = qkv + (size_t)(st + j) * ldq + ko;
                    const float* vj = qkv + (size_t)(st + j) * ldq + vo;
                    double sc = 0, dp = 0;
                    for (int c = 0; c < d; c++) sc += (double)qi[c] * kj[c], dp += (double)rr_bf16_round(doi[c]) * vj[c];
                    double p = exp(sc * scale - L);
                    double ds = rr_bf16_round((float)(p * (dp - D)));
                    double pb = rr_bf16_round((float)p);
                    float* gq = grad + (size_t)(st + i) * ldq + qo;
                    float* gk = grad + (size_t)(st + j) * ldq + ko;
                    float* gv = grad + (size_t)(st + j) * ldq + vo;
                    for (int c = 0; c < d; c++) {
                        gq[c] += (float)(scale * ds * kj[c]);
                        gk[c] += (float)(scale * ds * qi[c]);
                        gv[c] += (float)(pb * rr_bf16_round(doi[c]));
                    }
                }
            }
        }
    }
}

static void run_case(const FlashCase* c, FlashFn flash, FlashBwdInfoFn bwd_info) {
    /* bf: q, k, v, out, dout in bf16; bg: the gradients too (mode 2: bf16 inputs, f32 gradients) */
    int S = c->S, H = c->H, Hkv = c->Hkv, d = c->d, g = H / Hkv, bf = c->bf16 != 0, bg = c->bf16 == 1;
    int cu_seqlens[65] = {0};
    for (int s = 0; s < S; s++) cu_seqlens[s + 1] = cu_seqlens[s] + c->lens[s];
    int T = cu_seqlens[S];
    int ldq = (H + 2 * Hkv) * d, ldkv = ldq, ldo = H * d; /* one packed q | k | v buffer */
    size_t nqkv = (size_t)T * ldq, nout = (size_t)T * ldo, nlse = (size_t)T * H;
    float* qkv = (float*)malloc(nqkv * 4);
    float* dout = (float*)malloc(nout * 4);
    for (size_t i = 0; i < nqkv; i++) qkv[i] = rr_bf16_round(1.5f * rnd());
    for (size_t i = 0; i < nout; i++) dout[i] = rr_bf16_round(rnd());
    /* the reference: MHA with K and V repeated, packed as the CPU op wants (q | k | v, H heads each) */
    int lde = 3 * H * d;
    float* qkv_e = (float*)malloc((size_t)T * lde * 4);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < d; j++) {
                const float* row = qkv + (size_t)t * ldq;
                float* e = qkv_e + (size_t)t * lde;
                e[h * d + j] = row[h * d + j];
                e[H * d + h * d + j] = row[H * d + (h / g) * d + j];
                e[2 * H * d + h * d + j] = row[H * d + Hkv * d + (h / g) * d + j];
            }
    float *out_r = (float*)malloc((nout ? nout : 1) * 4), *lse_r = (float*)malloc((nlse ? nlse : 1) * 4);
    float* dqkv_e = (float*)calloc((size_t)T * lde + 1, 4);
    backend_cpu.ops->attention_forward(&backend_cpu, buf_f32(out_r), lse_r, buf_f32(qkv_e), buf_f32(qkv_e + H * d), buf_f32(qkv_e + 2 * H * d), cu_seqlens, S, T, H,
                                  H, d, lde, lde, c->causal);
    backend_cpu.ops->attention_backward(&backend_cpu, dqkv_e, dqkv_e + H * d, dqkv_e + 2 * H * d, NULL, NULL, NULL, 0, buf_f32(dout), buf_f32(out_r), lse_r, buf_f32(qkv_e),
                                   buf_f32(qkv_e + H * d), buf_f32(qkv_e + 2 * H * d), cu_seqlens, S, T, H, H, d, lde, lde, c->causal);
    /* reference gradients in the packed layout: dq per query head, dk / dv summed over each group */
    float* grad_r = (float*)calloc(nqkv + 1, 4);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < d; j++) {
                const float* e = dqkv_e + (size_t)t * lde;
                float* r = grad_r + (size_t)t * ldq;
                r[h * d + j] = e[h * d + j];
                r[H * d + (h / g) * d + j] += e[H * d + h * d + j];
                r[H * d + Hkv * d + (h / g) * d + j] += e[2 * H * d + h * d + j];
            }
    /* priors of the gradient buffers: bf16 values of at most a quarter of the largest reference gradient of
     * their part (q, k or v) */
    const char* names[3] = {"dq", "dk", "dv"};
    int off[3] = {0, H * d, H * d + Hkv * d}, w[3] = {H * d, Hkv * d, Hkv * d};
    float* prior = (float*)malloc((nqkv + 1) * 4);
    for (int p = 0; p < 3; p++) {
        double gmax = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < w[p]; j++) gmax = fmax(gmax, fabs(grad_r[(size_t)t * ldq + off[p] + j]));
        for (int t = 0; t < T; t++)
            for (int j = 0; j < w[p]; j++) prior[(size_t)t * ldq + off[p] + j] = rr_bf16_round((float)(0.25 * gmax) * rnd());
    }

    /* the device: out and lse poisoned (NaN) */
    float* nanbuf = (float*)malloc((nout + nlse + 1) * 4);
    for (size_t i = 0; i < nout + nlse + 1; i++) nanbuf[i] = NAN;
    void* qkv_d = up(qkv, nqkv, bf);
    void* out_d = up(nanbuf, nout, bf);
    float* lse_d = (float*)up(nanbuf, nlse, 0);
    void* dout_d = up(dout, nout, bf);
    void* dqkv_d = up(prior, nqkv, bg);
    int* cu_d = (int*)cu->dev->alloc((size_t)(S + 1) * sizeof(int));
    cu->dev->copy_h2d(cu, cu_d, cu_seqlens, (size_t)(S + 1) * sizeof(int));
    DType dt = bf ? DTYPE_BF16 : DTYPE_F32, dtg = bg ? DTYPE_BF16 : DTYPE_F32; /* the inputs', the gradients' */
    Buf q_d = buf_of(qkv_d, dt);
    Buf k_d = buf_at(q_d, (size_t)H * d);
    Buf v_d = buf_at(k_d, (size_t)Hkv * d);
    flash(0, buf_of(out_d, dt), buf_of(NULL, dt), buf_of(NULL, dt), lse_d, buf_of(NULL, dt), buf_of(NULL, dt), q_d, k_d,
          v_d, cu_d, S, T, H, Hkv, d, ldq, ldkv, ldo, c->causal);
    float* got = (float*)malloc((nqkv + nout + nlse + 1) * 4);
    down(got, out_d, nout, bf);
    check(c->name, "out", err_of(got, out_r, nout), 0.0078125);
    down(got, lse_d, nlse, 0);
    check(c->name, "lse", err_of(got, lse_r, nlse), 2e-5);
    /* the backward from the CPU's out and lse (as the backend's op test does) */
    cu->dev->free(out_d);
    out_d = up(out_r, nout, bf);
    cu->dev->copy_h2d(cu, lse_d, lse_r, nlse * 4);
    Buf dq_d = buf_of(dqkv_d, dtg);
    Buf dk_d = buf_at(dq_d, (size_t)H * d);
    Buf dv_d = buf_at(dk_d, (size_t)Hkv * d);
    flash(1, dq_d, dk_d, dv_d, lse_d, buf_of(dout_d, dt), buf_of(out_d, dt), q_d, k_d, v_d, cu_d, S, T, H, Hkv, d, ldq, ldkv,
          ldo, c->causal);
    /* the backward that ran is the one asked for */
    int version = 0, warps = 0, dqk = 0, lpt = 0;
    bwd_info(&version, &warps, &dqk, &lpt);
    /* bf16 inputs with f32 gradients: v2 whatever RRFP_FA_BWD says (v1 has no such kernels) */
    int wv = c->bf16 == 2 ? 2 : want_version;
    int want_dq = wv == 1 ? 0 : d > 64 && d <= 128 ? want_dq_96_128 : 2;
    /* v2's longest-first order: several samples of more than a 64-row tile on average */
    int want_lpt = wv == 2 && want_lpt_on && S > 1 && T > 64 * S;
    int want_w128 = wv == 1 ? 8 : want_warps_128_v2;
    int path_ok = version == wv && (d <= 96 || d > 128 || warps == want_w128) && dqk == want_dq && lpt == want_lpt;
    printf("  %-22s bwd   v%d, dk/dv blocks of %d warps, dq kernel %d, order %s %s\n", c->name, version, warps, dqk,
           lpt ? "longest-first" : "sample", path_ok ? "ok" : "FAIL (not the one asked for)");
    if (!path_ok) failures++;
    down(got, dqkv_d, nqkv, bg);
    /* q, k, v parts apart, each against its own largest gradient */
    for (int p = 0; p < 3; p++) {
        size_t n = (size_t)T * w[p];
        float *gg = (float*)malloc((n + 1) * 4), *rr = (float*)malloc((n + 1) * 4);
        for (int t = 0; t < T; t++)
            for (int j = 0; j < w[p]; j++) {
                size_t i = (size_t)t * ldq + off[p] + j;
                gg[(size_t)t * w[p] + j] = got[i] - prior[i];
                rr[(size_t)t * w[p] + j] = grad_r[i];
            }
        check(c->name, names[p], err_of(gg, rr, n), bg ? 0.0078125 : 0.00390625);
        free(gg), free(rr);
    }
    /* against the backward with the kernel's bf16 operands (out converted to bf16 on load as every input is,
     * in f32 storage too: D = rowsum(dO O) of the bf16 tiles) */
    float* grad_b = (float*)calloc(nqkv + 1, 4);
    float* out_k = (float*)malloc((nout + 1) * 4);
    for (size_t i = 0; i < nout; i++) out_k[i] = rr_bf16_round(out_r[i]);
    ref_backward_bf16_operands(grad_b, qkv, dout, out_k, lse_r, cu_seqlens, S, H, Hkv, d, ldq, ldo, c->causal);
    free(out_k);
    for (int p = 0; p < 3; p++) {
        /* f32 storage: max |got - want| / max |gradient| within 1e-3 (f32 sums in another order, and the rare
         * operand rounded the other way: one P or dS a bf16 ulp, 2^-7, off moves a short row's sum by up to
         * ~2^-8 of the largest gradient; measured in emulation: at most 5e-7); bf16 storage: each stored
         * value within one rounding of prior + gradient, 2^-8 of it, + 1e-3 of the largest gradient (the
         * ratio below at most 1) */
        double e = 0, gm = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < w[p]; j++) gm = fmax(gm, fabs(grad_b[(size_t)t * ldq + off[p] + j]));
        for (int t = 0; t < T; t++)
            for (int j = 0; j < w[p]; j++) {
                size_t i = (size_t)t * ldq + off[p] + j;
                double want = (double)prior[i] + grad_b[i], diff = fabs(got[i] - want);
                double r = bg ? diff / (0.00390625 * fabs(want) + 1e-3 * gm) : diff / (gm > 0 ? gm : 1);
                if (!(r <= e)) e = r;
            }
        char nm[16];
        snprintf(nm, sizeof nm, "%s_b", names[p]);
        check(c->name, nm, e, bg ? 1.0 : 1e-3);
    }
    free(grad_b);
    cu->dev->free(qkv_d), cu->dev->free(out_d), cu->dev->free(lse_d), cu->dev->free(dout_d), cu->dev->free(dqkv_d), cu->dev->free(cu_d);
    free(qkv), free(dout), free(qkv_e), free(out_r), free(lse_r), free(dqkv_e), free(grad_r), free(prior), free(nanbuf),
        free(got);
}

int main(int argc, char** argv) {
    char why[512] = "";
    cu = backend_cuda_get(why, sizeof why);
    if (!cu) {
        printf("test_flash_attn: skipped: %s\n", why);
        return 77;
    }
    FlashFn flash = flash_fn();
    if (!flash) {
        printf("test_flash_attn: FAIL: the CUDA backend has no rrfp_cuda_flash_attention\n");
        return 1;
    }
    FlashBwdInfoFn bwd_info = flash_bwd_info_fn();
    if (!bwd_info) {
        printf("test_flash_attn: FAIL: the CUDA backend has no rrfp_cuda_flash_attention_bwd_info\n");
        return 1;
    }
    const char* ev = getenv("RRFP_FA_BWD");
    const char* ew = getenv("RRFP_FA_DKDV_WARPS");
    want_version = ev && strcmp(ev, "v1") == 0 ? 1 : 2;
    want_warps_128_v2 = ew && strcmp(ew, "8") == 0 ? 8 : 4;
    want_warps_128 = want_version == 1 ? 8 : want_warps_128_v2;
    const char* eq = getenv("RRFP_FA_DQ");
    want_dq_96_128 = eq && strcmp(eq, "double") == 0 ? 2 : 1;
    const char* el = getenv("RRFP_FA_LPT");
    want_lpt_on = el && strcmp(el, "1") == 0;
    printf("test_flash_attn: backward v%d (dk/dv blocks of %d warps at head dims 97..128, dq kernel %d at 65..128)\n",
           want_version, want_warps_128, want_version == 1 ? 0 : want_dq_96_128);
    int ran = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        if (argc > 1 && !strstr(CASES[i].name, argv[1])) continue;
        run_case(&CASES[i], flash, bwd_info);
        ran++;
    }
    if (!ran) {
        printf("test_flash_attn: FAIL: no case matches '%s'\n", argv[1]);
        failures++;
    }
    cu->dev->synchronize(cu);
#ifdef RR_CUDA_EMU
    emu_stats_print();
#endif
    printf("flash_attn: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
