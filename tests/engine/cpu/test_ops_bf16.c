/* test_ops_bf16.c — every op of backend_cpu_bf16 (runtime.precision = bf16) against the f32 op of
 * backend_cpu on the same (unrounded) inputs, within a bf16 round-off bound derived per element.
 *
 * Notation: u = 2^-8, the unit round-off of bf16 (8 significant bits, round to nearest even):
 * |rnd(x) - x| <= u |x| for every x in bf16's normal range (values here are O(1); the subnormal
 * floor 2^-134 is added to every bound). e = 2^-24, the f32 unit round-off; gamma_K = K e / (1 - K e)
 * bounds an f32 sum of K terms: |fl(sum) - sum| <= gamma_K sum |terms| (Higham, Thm 3.1), whatever
 * the order, so two f32 sums of the same terms differ by at most 2 gamma_K sum |terms|.
 *
 * The bounds (contract of each op in engine/engine.h, rounding points in engine/cpu/bf16.c):
 *   - linear forward, y = rnd(sum_c rnd(x_c) rnd(w_c) + b): each product of rounded operands is
 *     within (2u + u^2) |x_c w_c| of x_c w_c; the f32 sums of both sides add 2 gamma_{C+1}
 *     (S (1 + 2u + u^2) + |b|) with S = sum_c |x_c w_c|; so the pre-rounding values differ by at most
 *     D = (2u + u^2) S + 2 gamma_{C+1} ((1 + 2u + u^2) S + |b|), and the final rounding adds
 *     u (|y_f32| + D). A dot product of length K with rounded inputs: k = 2 in |err| <= k u sum|terms|.
 *   - linear backward, dinp += rnd(dout) @ rnd(W), dW += rnd(dout)^T @ rnd(inp) (f32 accumulators,
 *     no output rounding): D as above with K = OC or N and the start value G0 as one more term;
 *     dbias is the f32 column sum of the f32 dout on both sides: the same bits.
 *   - LayerNorm, RMSNorm, GELU, SwiGLU, add, RoPE, embedding, attention forward: the f32 op, then the
 *     stored output rounded: |y_bf16 - y_f32| <= u |y_f32|; saved statistics (mean, rstd, lse) are f32:
 *     the same bits. Their backward ops and cross-entropy are the f32 ones: the same bits.
 * Beyond the bounds, each rounded output must consist of bf16 values (the rounding happened), and the
 * linear forward must differ from rnd(f32 linear) somewhere (its operands were rounded, not just its
 * output). Each line prints max(err / bound) of the tensor; <= 1 passes.
 *
 * Usage: test_ops_bf16 [case-name-substring]   (exit 1 on any failure) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "tests/support/host_rand.h"

static const RopeFreq RF_DEFAULT = {.theta = 10000.0}; /* the LM's RoPE at its default theta, unscaled */

#define U_BF16 0.00390625 /* 2^-8 */
#define FLOOR_BF16 4.5917748078995606e-41 /* 2^-134, half the smallest bf16 subnormal */

static int failures = 0;
static const char* case_name;

static double gamma_k(int K) { return K * ldexp(1.0, -24) / (1.0 - K * ldexp(1.0, -24)); }

/* max over i of |got - ref| / bound[i]; fails above 1 */
static void check_bound(const char* what, const float* got, const float* ref, const double* bound, size_t n) {
    double worst = 0.0, emax = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        double r = e / (bound[i] + FLOOR_BF16);
        if (!(r <= worst)) worst = r;
        if (e > emax) emax = e;
    }
    int ok = worst <= 1.0;
    printf("  %-18s %-8s max|err|=%.2e err/bound=%.3f %s\n", case_name, what, emax, worst, ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

/* the W values of each of `rows` rows (stride ld) are bf16 values: the output was rounded */
static void check_bf16_values(const char* what, const float* got, size_t rows, size_t W, size_t ld) {
    size_t not_bf16 = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < W; j++) not_bf16 += rr_bf16_round(got[r * ld + j]) != got[r * ld + j];
    if (not_bf16) {
        printf("  %-18s %-8s FAIL: %zu of %zu values are not bf16\n", case_name, what, not_bf16, rows * W);
        failures++;
    }
}

/* the stored output of an f32 op: bf16 values, within u |f32| of the f32 op's */
static void check_rounded(const char* what, const float* got, const float* ref, size_t rows, size_t W, size_t ld) {
    size_t n = rows * ld;
    double* b = mallocCheck((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) b[i] = U_BF16 * fabs(ref[i]);
    check_bf16_values(what, got, rows, W, ld);
    check_bound(what, got, ref, b, n);
    free(b);
}

static void check_same(const char* what, const float* got, const float* ref, size_t n) {
    int ok = memcmp(got, ref, n * sizeof(float)) == 0;
    printf("  %-18s %-8s %s\n", case_name, what, ok ? "same bits ok" : "FAIL: differs from the f32 op");
    if (!ok) failures++;
}

/* ---- cases -------------------------------------------------------------------------------------- */

/* the bound of a gradient GEMM in bf16 that adds onto start values g0 (I, J): g[i, j] += sum over k < K of
 * A(i, k) B(k, j), A(i, k) = a[i ai + k ak], B(k, j) = b[k bk + j]; S the sum of the products' magnitudes, u2 the
 * rounding of both operands: u2 S + 2 gamma_(K+1) ((1 + u2) S + |g0|) */
static void grad_bound(double* bound, int I, int J, int K, const float* a, size_t ai, size_t ak, const float* b,
                       size_t bk, double u2, const float* g0) {
    for (int i = 0; i < I; i++)
        for (int j = 0; j < J; j++) {
            double S = 0;
            for (int k = 0; k < K; k++) S += fabs((double)a[i * ai + k * ak] * b[k * bk + j]);
            size_t e = (size_t)i * J + j;
            bound[e] = u2 * S + 2 * gamma_k(K + 1) * ((1 + u2) * S + fabs(g0[e]));
        }
}

static void case_linear(int N, int C, int OC, int split) {
    size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    float *x = hrand(nin, 1), *w = hrand(nw, 0.5f), *b = hrand(OC, 1), *dy = hrand(nout, 1);
    float *yb = hrand(nout, 1), *yf = hrand(nout, 1);
    backend_cpu_bf16.ops->linear_forward(&backend_cpu_bf16, buf_f32(yb), buf_f32(x), be_weight(&backend_cpu_bf16, w), be_bias(&backend_cpu_bf16, b), N, C, OC);
    backend_cpu.ops->linear_forward(&backend_cpu, buf_f32(yf), buf_f32(x), be_weight(&backend_cpu, w), be_bias(&backend_cpu, b), N, C, OC);
    double u2 = 2 * U_BF16 + U_BF16 * U_BF16;
    double* bound = mallocCheck((nin + nw + nout + 1) * sizeof(double));
    size_t differs = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double S = 0;
            for (int c = 0; c < C; c++) S += fabs((double)x[(size_t)n * C + c] * w[(size_t)o * C + c]);
            double D = u2 * S + 2 * gamma_k(C + 1) * ((1 + u2) * S + fabs(b[o]));
            size_t i = (size_t)n * OC + o;
            bound[i] = D + U_BF16 * (fabs(yf[i]) + D);
            differs += yb[i] != rr_bf16_round(yf[i]);
        }
    check_bf16_values("out", yb, (size_t)N, (size_t)OC, (size_t)OC);
    check_bound("out", yb, yf, bound, nout);
    if (nout && C >= 16) { /* random f32 operands are almost never bf16 values: rounding them shows */
        int ok = differs > 0;
        printf("  %-18s %-8s %zu of %zu outputs differ from rnd(f32 op): operands rounded %s\n", case_name, "out",
               differs, nout, ok ? "ok" : "FAIL");
        if (!ok) failures++;
    }

    /* backward onto the same random start values */
    float *g0x = hrand(nin, 1), *g0w = hrand(nw, 1), *g0b = hrand(OC, 1);
    float *dxb = hdup(g0x, nin), *dwb = hdup(g0w, nw), *dbb = hdup(g0b, OC);
    float *dxf = hdup(g0x, nin), *dwf = hdup(g0w, nw), *dbf = hdup(g0b, OC);
    if (split) {
        backend_cpu_bf16.ops->linear_backward(&backend_cpu_bf16, buf_f32(dxb), NULL, NULL, buf_f32(dy), NULL, buf_f32(x), be_weight(&backend_cpu_bf16, w), N, C, OC, 0);
        backend_cpu_bf16.ops->linear_backward(&backend_cpu_bf16, buf_none(), dwb, dbb, buf_f32(dy), NULL, buf_f32(x), be_weight(&backend_cpu_bf16, w), N, C, OC, 0);
    } else {
        backend_cpu_bf16.ops->linear_backward(&backend_cpu_bf16, buf_f32(dxb), dwb, dbb, buf_f32(dy), NULL, buf_f32(x), be_weight(&backend_cpu_bf16, w), N, C, OC, 0);
    }
    backend_cpu.ops->linear_backward(&backend_cpu, buf_f32(dxf), dwf, dbf, buf_f32(dy), NULL, buf_f32(x), be_weight(&backend_cpu, w), N, C, OC, 0);
    grad_bound(bound, N, C, OC, dy, OC, 1, w, C, u2, g0x); /* dinp[n, c] += sum over o of dy[n, o] w[o, c] */
    check_bound("dinp", dxb, dxf, bound, nin);
    grad_bound(bound, OC, C, N, dy, 1, OC, x, C, u2, g0w); /* dweight[o, c] += sum over n of dy[n, o] x[n, c] */
    check_bound("dweight", dwb, dwf, bound, nw);
    check_same("dbias", dbb, dbf, (size_t)OC);
    free(x), free(w), free(b), free(dy), free(yb), free(yf), free(bound);
    free(g0x), free(g0w), free(g0b), free(dxb), free(dwb), free(dbb), free(dxf), free(dwf), free(dbf);
}

static void case_norm(int ln, int N, int C) {
    size_t n = (size_t)N * C;
    float *x = hrand(n, 2), *w = hrand(C, 1), *b = hrand(C, 1), *dy = hrand(n, 1);
    float *yb = hrand(n, 1), *yf = hrand(n, 1), *mb = hrand(N, 1), *mf = hrand(N, 1), *rb = hrand(N, 1), *rf = hrand(N, 1);
    if (ln) {
        backend_cpu_bf16.ops->layernorm_forward(&backend_cpu_bf16, buf_f32(yb), mb, rb, buf_f32(x), w, b, N, C);
        backend_cpu.ops->layernorm_forward(&backend_cpu, buf_f32(yf), mf, rf, buf_f32(x), w, b, N, C);
        check_same("mean", mb, mf, (size_t)N);
    } else {
        backend_cpu_bf16.ops->rmsnorm_forward(&backend_cpu_bf16, buf_f32(yb), rb, buf_f32(x), w, N, C, 1e-5);
        backend_cpu.ops->rmsnorm_forward(&backend_cpu, buf_f32(yf), rf, buf_f32(x), w, N, C, 1e-5);
    }
    check_same("rstd", rb, rf, (size_t)N);
    check_rounded("out", yb, yf, (size_t)N, (size_t)C, (size_t)C);
    float *dxb = hrand(n, 1), *dwb = hrand(C, 1), *dbb = hrand(C, 1);
    float *dxf = hdup(dxb, n), *dwf = hdup(dwb, C), *dbf = hdup(dbb, C);
    if (ln) {
        backend_cpu_bf16.ops->layernorm_backward(&backend_cpu_bf16, dxb, NULL, dwb, dbb, dy, buf_f32(x), w, mf, rf, N, C);
        backend_cpu.ops->layernorm_backward(&backend_cpu, dxf, NULL, dwf, dbf, dy, buf_f32(x), w, mf, rf, N, C);
    } else {
        backend_cpu_bf16.ops->rmsnorm_backward(&backend_cpu_bf16, dxb, NULL, dwb, dy, buf_f32(x), w, rf, N, C);
        backend_cpu.ops->rmsnorm_backward(&backend_cpu, dxf, NULL, dwf, dy, buf_f32(x), w, rf, N, C);
    }
    check_same("dinp", dxb, dxf, n);
    check_same("dweight", dwb, dwf, (size_t)C);
    free(x), free(w), free(b), free(dy), free(yb), free(yf), free(mb), free(mf), free(rb), free(rf);
    free(dxb), free(dwb), free(dbb), free(dxf), free(dwf), free(dbf);
}

static void case_elementwise(int which, size_t n) {
    float *a = hrand(n, 3), *c = hrand(n, 3), *yb = hrand(n, 1), *yf = hrand(n, 1);
    const char* name[] = {"gelu", "swiglu", "add"};
    (void)name;
    if (which == 0) {
        backend_cpu_bf16.ops->gelu_forward(&backend_cpu_bf16, buf_f32(yb), buf_f32(a), n);
        backend_cpu.ops->gelu_forward(&backend_cpu, buf_f32(yf), buf_f32(a), n);
    } else if (which == 1) {
        backend_cpu_bf16.ops->swiglu_forward(&backend_cpu_bf16, buf_f32(yb), buf_f32(a), buf_f32(c), n);
        backend_cpu.ops->swiglu_forward(&backend_cpu, buf_f32(yf), buf_f32(a), buf_f32(c), n);
    } else {
        backend_cpu_bf16.ops->add_forward(&backend_cpu_bf16, buf_f32(yb), buf_f32(a), buf_f32(c), n);
        backend_cpu.ops->add_forward(&backend_cpu, buf_f32(yf), buf_f32(a), buf_f32(c), n);
    }
    check_rounded("out", yb, yf, 1, n, n);
    if (which < 2) {
        float *dy = hrand(n, 1), *d1b = hrand(n, 1), *d2b = hrand(n, 1), *d1f = hdup(d1b, n), *d2f = hdup(d2b, n);
        if (which == 0) {
            backend_cpu_bf16.ops->gelu_backward(&backend_cpu_bf16, d1b, dy, buf_f32(a), n);
            backend_cpu.ops->gelu_backward(&backend_cpu, d1f, dy, buf_f32(a), n);
        } else {
            backend_cpu_bf16.ops->swiglu_backward(&backend_cpu_bf16, buf_f32(d1b), buf_f32(d2b), dy, buf_f32(a), buf_f32(c), n);
            backend_cpu.ops->swiglu_backward(&backend_cpu, buf_f32(d1f), buf_f32(d2f), dy, buf_f32(a), buf_f32(c), n);
            check_same("dup", d2b, d2f, n);
        }
        check_same("dinp", d1b, d1f, n);
        free(dy), free(d1b), free(d2b), free(d1f), free(d2f);
    }
    free(a), free(c), free(yb), free(yf);
}

static void case_rope(int two_d, int N, int H, int d, int ld) {
    size_t n = (size_t)N * ld;
    int* pos = mallocCheck(2 * (size_t)N * sizeof(int));
    for (int i = 0; i < 2 * N; i++) pos[i] = (int)((rng_sym() + 1.0f) * 2000.0f);
    float *xb = hrand(n, 1), *xf = hdup(xb, n);
    if (two_d) {
        backend_cpu_bf16.ops->rope2d_forward(&backend_cpu_bf16, buf_f32(xb), pos, pos + N, N, H, d, ld);
        backend_cpu.ops->rope2d_forward(&backend_cpu, buf_f32(xf), pos, pos + N, N, H, d, ld);
    } else {
        backend_cpu_bf16.ops->rope_forward(&backend_cpu_bf16, buf_f32(xb), pos, N, H, d, ld, &RF_DEFAULT);
        backend_cpu.ops->rope_forward(&backend_cpu, buf_f32(xf), pos, N, H, d, ld, &RF_DEFAULT);
    }
    check_rounded("forward", xb, xf, (size_t)N, (size_t)H * d, (size_t)ld);
    /* the backward is f32 on both: from the same values, the same bits */
    float* gb = hrand(n, 1);
    float* gf = hdup(gb, n);
    if (two_d) {
        backend_cpu_bf16.ops->rope2d_backward(&backend_cpu_bf16, NULL, 0, gb, pos, pos + N, N, H, d, ld, 0);
        backend_cpu.ops->rope2d_backward(&backend_cpu, NULL, 0, gf, pos, pos + N, N, H, d, ld, 0);
    } else {
        backend_cpu_bf16.ops->rope_backward(&backend_cpu_bf16, gb, pos, N, H, d, ld, &RF_DEFAULT);
        backend_cpu.ops->rope_backward(&backend_cpu, gf, pos, N, H, d, ld, &RF_DEFAULT);
    }
    check_same("backward", gb, gf, n);
    free(pos), free(xb), free(xf), free(gb), free(gf);
}

static void case_embedding(int N, int C, int V) {
    int* ids = mallocCheck((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) ids[i] = (int)((rng_sym() + 1.0f) * 0.5f * (V - 1));
    float *t = hrand((size_t)V * C, 1), *yb = hrand((size_t)N * C, 1), *yf = hrand((size_t)N * C, 1);
    backend_cpu_bf16.ops->embedding_forward(&backend_cpu_bf16, buf_f32(yb), ids, be_weight(&backend_cpu_bf16, t), N, C);
    backend_cpu.ops->embedding_forward(&backend_cpu, buf_f32(yf), ids, be_weight(&backend_cpu, t), N, C);
    check_rounded("out", yb, yf, (size_t)N, (size_t)C, (size_t)C);
    free(ids), free(t), free(yb), free(yf);
}

/* the CLIP tower's: act_forward (rounded output; backward f32: the same bits) and rows_gather (the f32 sum
 * into the accumulator, then the stored output rounded) */
static void case_act(int which) {
    size_t n = 3 * 337;
    Act act = which ? ACT_QUICK_GELU : ACT_GELU_ERF;
    float *a = hrand(n, 3), *yb = hrand(n, 1), *yf = hrand(n, 1);
    backend_cpu_bf16.ops->act_forward(&backend_cpu_bf16, buf_f32(yb), buf_f32(a), n, act);
    backend_cpu.ops->act_forward(&backend_cpu, buf_f32(yf), buf_f32(a), n, act);
    check_rounded("out", yb, yf, 1, n, n);
    float *dy = hrand(n, 1), *db = hrand(n, 1), *df = hdup(db, n);
    backend_cpu_bf16.ops->act_backward(&backend_cpu_bf16, db, NULL, dy, buf_f32(a), n, act);
    backend_cpu.ops->act_backward(&backend_cpu, df, NULL, dy, buf_f32(a), n, act);
    check_same("dinp", db, df, n);
    free(a), free(yb), free(yf), free(dy), free(db), free(df);
}

static void case_gather(int K) {
    int N = 130, C = 70, R = 26;
    int* idx = mallocCheck((size_t)N * K * sizeof(int));
    for (int i = 0; i < N * K; i++) idx[i] = i % 7 == 3 ? -1 : (int)((rng_sym() + 1.0f) * 0.5f * (R - 1));
    float *w = hrand((size_t)N * K, 1), *t = hrand((size_t)R * C, 1), *yb = hrand((size_t)N * C, 1);
    float* yf = hdup(yb, (size_t)N * C); /* the op adds: from the same start */
    backend_cpu_bf16.ops->rows_gather_forward(&backend_cpu_bf16, buf_f32(yb), idx, w, buf_f32(t), N, K, C);
    backend_cpu.ops->rows_gather_forward(&backend_cpu, buf_f32(yf), idx, w, buf_f32(t), N, K, C);
    check_rounded("out", yb, yf, (size_t)N, (size_t)C, (size_t)C);
    float *dy = hrand((size_t)N * C, 1), *db = hrand((size_t)R * C, 1), *df = hdup(db, (size_t)R * C);
    backend_cpu_bf16.ops->rows_gather_backward(&backend_cpu_bf16, db, dy, idx, w, N, K, C);
    backend_cpu.ops->rows_gather_backward(&backend_cpu, df, dy, idx, w, N, K, C);
    check_same("dtable", db, df, (size_t)R * C);
    free(idx), free(w), free(t), free(yb), free(yf), free(dy), free(db), free(df);
}

static void case_ce(int N, int V) {
    int* tg = mallocCheck((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tg[i] = i % 4 == 3 ? -100 : (int)((rng_sym() + 1.0f) * 0.5f * (V - 1));
    float *z = hrand((size_t)N * V, 4), *lb = hrand(N, 1), *lf = hrand(N, 1), lossb, lossf;
    backend_cpu_bf16.ops->crossentropy_forward(&backend_cpu_bf16, &lossb, lb, buf_f32(z), tg, N, V);
    backend_cpu.ops->crossentropy_forward(&backend_cpu, &lossf, lf, buf_f32(z), tg, N, V);
    check_same("loss_sum", &lossb, &lossf, 1);
    check_same("lse", lb, lf, (size_t)N);
    float *db = hrand((size_t)N * V, 1), *df = hdup(db, (size_t)N * V);
    backend_cpu_bf16.ops->crossentropy_backward(&backend_cpu_bf16, buf_f32(db), buf_f32(z), lf, tg, 0.1f, N, V);
    backend_cpu.ops->crossentropy_backward(&backend_cpu, buf_f32(df), buf_f32(z), lf, tg, 0.1f, N, V);
    check_same("dlogits", db, df, (size_t)N * V);
    free(tg), free(z), free(lb), free(lf), free(db), free(df);
}

static void case_attention(int causal) {
    int S = 3, lens[3] = {1, 40, 75}, H = 2, d = 16, T = 116, ld = 3 * H * d;
    int cu[4] = {0, lens[0], lens[0] + lens[1], T};
    float* qkv = hrand((size_t)T * ld, 1);
    size_t no = (size_t)T * H * d;
    float *ob = hrand(no, 1), *of = hrand(no, 1), *lb = hrand((size_t)T * H, 1), *lf = hrand((size_t)T * H, 1);
    int hd = H * d;
    backend_cpu_bf16.ops->attention_forward(&backend_cpu_bf16, buf_f32(ob), lb, buf_f32(qkv), buf_f32(qkv + hd), buf_f32(qkv + 2 * hd), cu, S, T, H, H, d, ld, ld, causal);
    backend_cpu.ops->attention_forward(&backend_cpu, buf_f32(of), lf, buf_f32(qkv), buf_f32(qkv + hd), buf_f32(qkv + 2 * hd), cu, S, T, H, H, d, ld, ld, causal);
    check_same("lse", lb, lf, (size_t)T * H);
    check_rounded("out", ob, of, 1, no, no);
    float *dy = hrand(no, 1), *gb = hrand((size_t)T * ld, 1), *gf = hdup(gb, (size_t)T * ld);
    backend_cpu_bf16.ops->attention_backward(&backend_cpu_bf16, gb, gb + hd, gb + 2 * hd, NULL, NULL, NULL, 0, buf_f32(dy), buf_f32(of), lf, buf_f32(qkv), buf_f32(qkv + hd), buf_f32(qkv + 2 * hd), cu, S, T,
                                        H, H, d, ld, ld, causal);
    backend_cpu.ops->attention_backward(&backend_cpu, gf, gf + hd, gf + 2 * hd, NULL, NULL, NULL, 0, buf_f32(dy), buf_f32(of), lf, buf_f32(qkv), buf_f32(qkv + hd), buf_f32(qkv + 2 * hd), cu, S, T, H, H, d,
                                   ld, ld, causal);
    check_same("dqkv", gb, gf, (size_t)T * ld);
    free(qkv), free(ob), free(of), free(lb), free(lf), free(dy), free(gb), free(gf);
}

/* the step end and the compute-copy refresh */
static void case_round(size_t n) {
    float *x = hrand(n, 100), *y = hrand(n, 1);
    backend_cpu_bf16.ops->round_bf16(&backend_cpu_bf16, y, x, n);
    check_rounded("round", y, x, 1, n, n);
    free(x), free(y);
}

typedef struct {
    const char* name;
    void (*run)(int);
    int arg;
} Case;

static void run_linear_odd(int split) { case_linear(37, 45, 29, split); }
static void run_linear_model(int split) { case_linear(300, 128, 384, split); }
static void run_linear_1(int split) { case_linear(1, 1, 1, split); }
static void run_layernorm(int a) { case_norm(1, 11 + a, 37); }
static void run_rmsnorm(int a) { case_norm(0, 130 + a, 600); }
static void run_elem(int which) { case_elementwise(which, 3 * 337); }
static void run_rope(int two_d) { case_rope(two_d, 19, 3, 12, 3 * 3 * 12 + 5); }
static void run_embedding(int a) { case_embedding(400 + a, 70, 50); }
static void run_ce(int a) { case_ce(64 + a, 503); }
static void run_attention(int causal) { case_attention(causal); }
static void run_round(int a) { case_round(10007 + (size_t)a); }

static const Case CASES[] = {
    {"linear_1", run_linear_1, 0},          {"linear_odd", run_linear_odd, 0},   {"linear_split", run_linear_odd, 1},
    {"linear_model", run_linear_model, 0},  {"layernorm", run_layernorm, 0},    {"rmsnorm_wide", run_rmsnorm, 0},
    {"gelu", run_elem, 0},                  {"swiglu", run_elem, 1},            {"add", run_elem, 2},
    {"rope", run_rope, 0},                  {"rope2d", run_rope, 1},            {"embedding", run_embedding, 0},
    {"crossentropy", run_ce, 0},            {"attn_causal", run_attention, 1},  {"attn_bidir", run_attention, 0},
    {"round_bf16", run_round, 0},           {"gelu_erf", case_act, 0},          {"quick_gelu", case_act, 1},
    {"rows_gather", case_gather, 16},
};

int main(int argc, char** argv) {
    if (backend_cpu.bf16_variant != &backend_cpu_bf16 || backend_cpu_bf16.precision != PRECISION_BF16 ||
        backend_with_precision(&backend_cpu, PRECISION_BF16) != &backend_cpu_bf16) {
        printf("ops_bf16: FAIL: backend_cpu's bf16 variant is not backend_cpu_bf16\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        if (argc > 1 && !strstr(CASES[i].name, argv[1])) continue;
        case_name = CASES[i].name;
        CASES[i].run(CASES[i].arg);
    }
    printf("ops_bf16: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
