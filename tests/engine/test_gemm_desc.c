/* test_gemm_desc.c — the CUDA backend's GEMM layout logic, tested on the CPU.
 *
 * Every cuBLAS call of the CUDA backend is a GemmDesc (engine/gemm_desc.h). Here each desc is run
 * through column-major cblas_sgemm (CblasColMajor: the same argument convention as cublasSgemm)
 * and compared with the CPU backend's row-major linear op, for many shapes including 1s, odd
 * primes and the model's widths. What this catches: a wrong transpose, a swapped operand, a wrong
 * m/n/k or leading dimension, beta 0 where the backward must add (or 1 where the forward must
 * overwrite), and reads or writes outside an operand (every buffer sits between NaN guard zones:
 * a stray read turns a result into NaN, a stray write changes a guard).
 *
 * Usage: test_gemm_desc   (one line per shape; exit 1 on any failure) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"
#include "engine/gemm_desc.h"
#include "engine/gemm_lt_desc.h"

/* Tolerance: max |desc - cpu| / max |cpu| per tensor. Both sides are fp32 GEMMs over the same K
 * products, summed in different orders by BLIS's kernels (the layouts differ), so they differ by
 * rounding only: at most ~K eps relative to the sum of |terms| (K <= 300 here: 4e-5), typically a
 * few eps. A layout bug (wrong operand, transpose, ld, beta) gives errors of order 1. */
#define GEMM_DESC_TOL 1e-4

#define GUARD 16 /* floats of NaN on each side of every buffer */

static uint64_t rng_state = 0x1234567887654321ull;
static float rng_sym(void) { /* splitmix64 -> [-1, 1) */
    return (float)(2.0 * (double)(rr_splitmix64(&rng_state) >> 11) * (1.0 / 9007199254740992.0) - 1.0);
}

/* A buffer of n floats with NaN guards around it. */
typedef struct {
    float* base;
    float* p;
    size_t n;
} Guarded;
static Guarded guarded_new(size_t n) {
    Guarded g;
    g.n = n;
    g.base = mallocCheck((n + 2 * GUARD) * sizeof(float));
    for (size_t i = 0; i < n + 2 * GUARD; i++) g.base[i] = NAN;
    g.p = g.base + GUARD;
    return g;
}
static void guarded_fill(Guarded* g) {
    for (size_t i = 0; i < g->n; i++) g->p[i] = rng_sym();
}
static int guarded_intact(const Guarded* g) {
    for (size_t i = 0; i < GUARD; i++)
        if (!isnan(g->base[i]) || !isnan(g->p[g->n + i])) return 0;
    return 1;
}

/* Run one desc through column-major CBLAS, exactly as linear.cu hands it to cublasSgemm. */
static void gemm_desc_run_cblas(const GemmDesc* g, const GemmOperands* ops) {
    Buf A, B, C;
    gemm_desc_operands(g, ops, &A, &B, &C);
    cblas_sgemm(CblasColMajor, g->opA ? CblasTrans : CblasNoTrans, g->opB ? CblasTrans : CblasNoTrans, g->m, g->n,
                g->k, g->alpha, buf_f32p(A), g->lda, buf_f32p(B), g->ldb, g->beta, buf_f32p(C), g->ldc);
}

static double max_err(const float* got, const float* ref, size_t n) {
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= e)) e = d; /* NaN propagates */
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return m > 0 ? e / m : e;
}

static int check(const char* what, int N, int C, int OC, const GemmDesc* g, const Guarded* got, const float* ref) {
    char buf[256];
    double e = max_err(got->p, ref, got->n);
    int ok = gemm_desc_valid(g) && guarded_intact(got) && e <= GEMM_DESC_TOL;
    printf("  %-16s N=%-4d C=%-4d OC=%-4d err=%.2e %s  [%s]\n", what, N, C, OC, e, ok ? "ok" : "FAIL",
           gemm_desc_format(g, buf, sizeof buf));
    if (!gemm_desc_valid(g)) printf("    desc breaks the BLAS argument rules\n");
    if (!guarded_intact(got)) printf("    desc wrote outside its output\n");
    return ok;
}

static int test_shape(int N, int C, int OC) {
    Guarded inp = guarded_new((size_t)N * C), w = guarded_new((size_t)OC * C), dout = guarded_new((size_t)N * OC);
    Guarded out = guarded_new((size_t)N * OC), dinp = guarded_new((size_t)N * C), dw = guarded_new((size_t)OC * C);
    guarded_fill(&inp);
    guarded_fill(&w);
    guarded_fill(&dout);
    float* ref_out = mallocCheck((size_t)N * OC * sizeof(float));
    float* ref_dinp = mallocCheck((size_t)N * C * sizeof(float));
    float* ref_dw = mallocCheck((size_t)OC * C * sizeof(float));
    GemmOperands ops;
    memset(&ops, 0, sizeof ops);
    ops.ptr[GEMM_PTR_INP] = buf_f32(inp.p);
    ops.ptr[GEMM_PTR_WEIGHT] = buf_f32(w.p);
    ops.ptr[GEMM_PTR_OUT] = buf_f32(out.p);
    ops.ptr[GEMM_PTR_DOUT] = buf_f32(dout.p);
    ops.ptr[GEMM_PTR_DINP] = buf_f32(dinp.p);
    ops.ptr[GEMM_PTR_DWEIGHT] = buf_f32(dw.p);
    int ok = 1;

    /* forward overwrites: out starts as garbage (beta must be 0) */
    guarded_fill(&out);
    backend_cpu.ops->linear_forward(&backend_cpu, buf_f32(ref_out), buf_f32(inp.p), be_weight(&backend_cpu, w.p), buf_none(), N, C, OC);
    GemmDesc g = gemm_desc_linear_forward(N, C, OC);
    gemm_desc_run_cblas(&g, &ops);
    ok &= check("forward", N, C, OC, &g, &out, ref_out);

    /* backward adds: both sides start from the same random gradients */
    guarded_fill(&dinp);
    memcpy(ref_dinp, dinp.p, (size_t)N * C * sizeof(float));
    backend_cpu.ops->linear_backward(&backend_cpu, buf_f32(ref_dinp), NULL, NULL, buf_f32(dout.p), NULL, buf_f32(inp.p), be_weight(&backend_cpu, w.p), N, C, OC, 0);
    g = gemm_desc_linear_backward_input(N, C, OC);
    gemm_desc_run_cblas(&g, &ops);
    ok &= check("backward_input", N, C, OC, &g, &dinp, ref_dinp);

    guarded_fill(&dw);
    memcpy(ref_dw, dw.p, (size_t)OC * C * sizeof(float));
    backend_cpu.ops->linear_backward(&backend_cpu, buf_none(), ref_dw, NULL, buf_f32(dout.p), NULL, buf_f32(inp.p), be_weight(&backend_cpu, w.p), N, C, OC, 0);
    g = gemm_desc_linear_backward_weight(N, C, OC);
    gemm_desc_run_cblas(&g, &ops);
    ok &= check("backward_weight", N, C, OC, &g, &dw, ref_dw);

    ok &= guarded_intact(&inp) && guarded_intact(&w) && guarded_intact(&dout);
    free(inp.base), free(w.base), free(dout.base), free(out.base), free(dinp.base), free(dw.base);
    free(ref_out), free(ref_dinp), free(ref_dw);
    return ok;
}

/* The desc of a square problem cannot tell m from n or lda from ldb; a non-square one can. This
 * also checks that a desc that breaks the BLAS rules is recognised (the CUDA path asserts it). */
static int test_validity(void) {
    GemmDesc g = gemm_desc_linear_forward(5, 7, 3);
    int ok = gemm_desc_valid(&g);
    g.lda = 2; /* A is W stored (C=7, OC=3) column-major, op T: lda must be >= 7 */
    ok &= !gemm_desc_valid(&g);
    g = gemm_desc_linear_backward_weight(5, 7, 3);
    g.ldc = 6;
    ok &= !gemm_desc_valid(&g);
    printf("  validity rules %s\n", ok ? "ok" : "FAIL");
    return ok;
}

/* The test must be able to fail: descs with one deliberate layout bug each must be caught. */
static int test_mutants(void) {
    int N = 13, C = 17, OC = 19, ok = 1;
    Guarded inp = guarded_new((size_t)N * C), w = guarded_new((size_t)OC * C), dout = guarded_new((size_t)N * OC);
    Guarded out = guarded_new((size_t)N * OC), dinp = guarded_new((size_t)N * C);
    guarded_fill(&inp), guarded_fill(&w), guarded_fill(&dout);
    float* ref = mallocCheck((size_t)N * (C > OC ? C : OC) * sizeof(float));
    GemmOperands ops;
    memset(&ops, 0, sizeof ops);
    ops.ptr[GEMM_PTR_INP] = buf_f32(inp.p), ops.ptr[GEMM_PTR_WEIGHT] = buf_f32(w.p), ops.ptr[GEMM_PTR_OUT] = buf_f32(out.p);
    ops.ptr[GEMM_PTR_DOUT] = buf_f32(dout.p), ops.ptr[GEMM_PTR_DINP] = buf_f32(dinp.p);
    for (int mutant = 0; mutant < 4; mutant++) {
        GemmDesc g;
        Guarded* got;
        if (mutant < 3) {
            backend_cpu.ops->linear_forward(&backend_cpu, buf_f32(ref), buf_f32(inp.p), be_weight(&backend_cpu, w.p), buf_none(), N, C, OC);
            g = gemm_desc_linear_forward(N, C, OC);
            got = &out;
            guarded_fill(got);
            if (mutant == 0) g.beta = 1.0f;                   /* forward that adds to garbage */
            if (mutant == 1) g.opA = 0, g.lda = OC;           /* W not transposed */
            if (mutant == 2) g.a = GEMM_PTR_INP, g.b = GEMM_PTR_WEIGHT, g.m = N, g.n = OC, g.ldc = N; /* swapped */
        } else {
            got = &dinp;
            guarded_fill(got);
            memcpy(ref, dinp.p, (size_t)N * C * sizeof(float));
            backend_cpu.ops->linear_backward(&backend_cpu, buf_f32(ref), NULL, NULL, buf_f32(dout.p), NULL, buf_f32(inp.p), be_weight(&backend_cpu, w.p), N, C, OC, 0);
            g = gemm_desc_linear_backward_input(N, C, OC);
            g.beta = 0.0f; /* backward that overwrites instead of adding */
        }
        if (!gemm_desc_valid(&g)) continue; /* caught by the rules already */
        gemm_desc_run_cblas(&g, &ops);
        double e = max_err(got->p, ref, got->n);
        int caught = !(e <= GEMM_DESC_TOL) || !guarded_intact(got);
        printf("  mutant %d err=%.2e %s\n", mutant, e, caught ? "caught" : "NOT CAUGHT");
        ok &= caught;
    }
    free(inp.base), free(w.base), free(dout.base), free(out.base), free(dinp.base), free(ref);
    return ok;
}

/* ---- cuBLASLt descs of the bf16 path (engine/gemm_lt_desc.h) -----------------------------------
 * Each desc runs through gemm_lt_desc_run_ref (bf16-rounded A and B, column-major cblas_sgemm, the
 * bias epilogue) and is compared with backend_cpu_bf16's row-major linear op on the same data.
 * Both multiply the same bf16 values exactly in f32 and differ only in the order of the K f32
 * additions, so per element |got - ref| <= 2 gamma_K S with gamma_K = K u / (1 - K u), u = 2^-24,
 * S = sum_k |a_k b_k| (+ |C0| when beta = 1: the start value is one more term), taken over the
 * unrounded operands times 1.01 (each rounded operand is within 2^-8 of its value: (1 + 2^-8)^2 < 1.01). The forward output
 * is then rounded to bf16 on the reference side (and here, as the CUDA path's round kernel does);
 * two f32 values within that bound may round to adjacent bf16 values, one bf16 ulp apart, at most
 * 2^-7 |y| (8 significant bits: the ulp is 2^-7 of the bottom of y's binade): the forward bound adds
 * 2^-7 max(|got|, |ref|). A layout bug
 * (wrong op, m/n swap, wrong ld) gives errors of the order of |y| itself. */
static double lt_gamma(int K) {
    double u = ldexp(1.0, -24);
    return K * u / (1.0 - K * u);
}

static int lt_check(const char* what, int N, int C, int OC, const GemmLtDesc* d, const Guarded* got, const float* ref,
                    const double* S, int K, int rounded) {
    char buf[384];
    double worst = 0.0; /* max of |got - ref| / bound */
    size_t n = got->n;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got->p[i] - ref[i]);
        double b = 2.0 * lt_gamma(K) * S[i] + 1e-30;
        if (rounded) b += ldexp(1.0, -7) * fmax(fabs(got->p[i]), fabs(ref[i]));
        double r = e / b;
        if (!(r <= worst)) worst = r;
    }
    int ok = gemm_desc_valid(&d->g) && guarded_intact(got) && worst <= 1.0;
    printf("  lt %-13s N=%-4d C=%-4d OC=%-4d err/bound=%.2e %s  [%s]\n", what, N, C, OC, worst, ok ? "ok" : "FAIL",
           gemm_lt_desc_format(d, buf, sizeof buf));
    return ok;
}

/* S (I, J) of a GEMM out[i, j] = start + sum over k < K of A(i, k) B(k, j), A(i, k) = a[i ai + k ak], B(k, j) =
 * b[k bk + j bj]: (|bias[j]| + sum of |A(i, k) B(k, j)|) 1.01 + |add[i, j]| (the rounded operands are within 2^-9 of
 * these; bias: the epilogue's, add: the start value a beta = 1 GEMM adds onto; either may be NULL) */
static void lt_bound(double* S, int I, int J, int K, const float* a, size_t ai, size_t ak, const float* b, size_t bk,
                     size_t bj, const float* bias, const float* add) {
    for (int i = 0; i < I; i++)
        for (int j = 0; j < J; j++) {
            double s = bias ? fabs(bias[j]) : 0;
            for (int k = 0; k < K; k++) s += fabs(a[i * ai + k * ak] * (double)b[k * bk + j * bj]);
            size_t e = (size_t)i * J + j;
            S[e] = add ? s * 1.01 + fabs(add[e]) : s * 1.01;
        }
}

static int test_lt_shape(int N, int C, int OC) {
    Guarded inp = guarded_new((size_t)N * C), w = guarded_new((size_t)OC * C), dout = guarded_new((size_t)N * OC);
    Guarded out = guarded_new((size_t)N * OC), dinp = guarded_new((size_t)N * C), dw = guarded_new((size_t)OC * C);
    Guarded bias = guarded_new((size_t)OC);
    guarded_fill(&inp), guarded_fill(&w), guarded_fill(&dout), guarded_fill(&bias);
    float* ref = mallocCheck(((size_t)N * OC + (size_t)N * C + (size_t)OC * C) * sizeof(float));
    double* S = mallocCheck(((size_t)N * OC + (size_t)N * C + (size_t)OC * C) * sizeof(double));
    GemmOperands ops;
    memset(&ops, 0, sizeof ops);
    ops.ptr[GEMM_PTR_INP] = buf_f32(inp.p), ops.ptr[GEMM_PTR_WEIGHT] = buf_f32(w.p), ops.ptr[GEMM_PTR_OUT] = buf_f32(out.p);
    ops.ptr[GEMM_PTR_DOUT] = buf_f32(dout.p), ops.ptr[GEMM_PTR_DINP] = buf_f32(dinp.p), ops.ptr[GEMM_PTR_DWEIGHT] = buf_f32(dw.p);
    Buf A, B, Cm;
    int ok = 1;

    /* forward with the bias epilogue, output rounded to bf16 as the CUDA path stores it */
    guarded_fill(&out);
    backend_cpu_bf16.ops->linear_forward(&backend_cpu_bf16, buf_f32(ref), buf_f32(inp.p), be_weight(&backend_cpu_bf16, w.p), be_bias(&backend_cpu_bf16, bias.p), N, C, OC);
    GemmLtDesc d = gemm_lt_desc_linear_forward(N, C, OC, 1);
    gemm_desc_operands(&d.g, &ops, &A, &B, &Cm);
    gemm_lt_desc_run_ref(&d, buf_f32p(A), buf_f32p(B), buf_f32p(Cm), bias.p);
    cpu_round_bf16(&backend_cpu, out.p, out.p, (size_t)N * OC);
    /* out[n, o] = bias[o] + sum over c of inp[n, c] w[o, c] */
    lt_bound(S, N, OC, C, inp.p, C, 1, w.p, 1, C, bias.p, NULL);
    ok &= lt_check("forward+bias", N, C, OC, &d, &out, ref, S, C + 1, 1);

    guarded_fill(&dinp);
    memcpy(ref, dinp.p, (size_t)N * C * sizeof(float));
    backend_cpu_bf16.ops->linear_backward(&backend_cpu_bf16, buf_f32(ref), NULL, NULL, buf_f32(dout.p), NULL, buf_f32(inp.p), be_weight(&backend_cpu_bf16, w.p), N, C, OC, 0);
    d = gemm_lt_desc_linear_backward_input(N, C, OC);
    gemm_desc_operands(&d.g, &ops, &A, &B, &Cm);
    gemm_lt_desc_run_ref(&d, buf_f32p(A), buf_f32p(B), buf_f32p(Cm), NULL);
    /* dinp[n, c] += sum over o of dout[n, o] w[o, c] */
    lt_bound(S, N, C, OC, dout.p, OC, 1, w.p, C, 1, NULL, ref);
    ok &= lt_check("backward_input", N, C, OC, &d, &dinp, ref, S, OC + 1, 0);

    guarded_fill(&dw);
    memcpy(ref, dw.p, (size_t)OC * C * sizeof(float));
    backend_cpu_bf16.ops->linear_backward(&backend_cpu_bf16, buf_none(), ref, NULL, buf_f32(dout.p), NULL, buf_f32(inp.p), be_weight(&backend_cpu_bf16, w.p), N, C, OC, 0);
    d = gemm_lt_desc_linear_backward_weight(N, C, OC);
    gemm_desc_operands(&d.g, &ops, &A, &B, &Cm);
    gemm_lt_desc_run_ref(&d, buf_f32p(A), buf_f32p(B), buf_f32p(Cm), NULL);
    /* dw[o, c] += sum over n of dout[n, o] inp[n, c] */
    lt_bound(S, OC, C, N, dout.p, 1, OC, inp.p, C, 1, NULL, ref);
    ok &= lt_check("backward_weight", N, C, OC, &d, &dw, ref, S, N + 1, 0);

    ok &= guarded_intact(&inp) && guarded_intact(&w) && guarded_intact(&dout) && guarded_intact(&bias);
    free(inp.base), free(w.base), free(dout.base), free(out.base), free(dinp.base), free(dw.base), free(bias.base);
    free(ref), free(S);
    return ok;
}

/* GELU_AUX_BIAS (the fused linear + GELU of the ViT MLP and the projector): Aux must be the linear's
 * f32 pre-activation and D its GELU. Reference: backend_cpu's (f32) linear on bf16-rounded copies of
 * the operands, with the bias (the same bf16 products, the same K + 1 terms: the forward+bias bound
 * above without the output rounding), then backend_cpu's gelu_forward on that. For D: gelu's slope is
 * at most 1.13 in magnitude (its maximum, at x ~ 2.4), so two pre-activations within the bound give
 * GELUs within 1.13 x the bound, plus the f32 evaluation of gelu itself on either side (a few ulps:
 * 8 u |y| + 1e-30). An epilogue that skipped the GELU, or stored D into Aux, fails by O(|y|). */
static int test_lt_gelu(int N, int C, int OC) {
    Guarded inp = guarded_new((size_t)N * C), w = guarded_new((size_t)OC * C), bias = guarded_new((size_t)OC);
    Guarded out = guarded_new((size_t)N * OC), aux = guarded_new((size_t)N * OC);
    guarded_fill(&inp), guarded_fill(&w), guarded_fill(&bias), guarded_fill(&out), guarded_fill(&aux);
    float* ir = mallocCheck((size_t)N * C * sizeof(float));
    float* wr = mallocCheck((size_t)OC * C * sizeof(float));
    float* pre = mallocCheck((size_t)N * OC * sizeof(float));
    float* act = mallocCheck((size_t)N * OC * sizeof(float));
    cpu_round_bf16(&backend_cpu, ir, inp.p, (size_t)N * C);
    cpu_round_bf16(&backend_cpu, wr, w.p, (size_t)OC * C);
    backend_cpu.ops->linear_forward(&backend_cpu, buf_f32(pre), buf_f32(ir), be_weight(&backend_cpu, wr), be_bias(&backend_cpu, bias.p), N, C, OC);
    backend_cpu.ops->gelu_forward(&backend_cpu, buf_f32(act), buf_f32(pre), (size_t)N * OC);
    GemmLtDesc d = gemm_lt_desc_linear_gelu_forward(N, C, OC);
    GemmOperands ops;
    memset(&ops, 0, sizeof ops);
    ops.ptr[GEMM_PTR_INP] = buf_f32(inp.p), ops.ptr[GEMM_PTR_WEIGHT] = buf_f32(w.p), ops.ptr[GEMM_PTR_OUT] = buf_f32(out.p);
    Buf A, B, Cm;
    gemm_desc_operands(&d.g, &ops, &A, &B, &Cm);
    gemm_lt_desc_run_ref_aux(&d, buf_f32p(A), buf_f32p(B), buf_f32p(Cm), bias.p, aux.p);
    double worst_aux = 0, worst_out = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            size_t i = (size_t)n * OC + o;
            double S = fabs(bias.p[o]);
            for (int c = 0; c < C; c++) S += fabs(ir[(size_t)n * C + c] * (double)wr[(size_t)o * C + c]);
            double b = 2.0 * lt_gamma(C + 1) * S + 1e-30;
            double ea = fabs((double)aux.p[i] - pre[i]) / b;
            double bo = 1.13 * b + 8 * ldexp(1.0, -24) * fabs(act[i]) + 1e-30;
            double eo = fabs((double)out.p[i] - act[i]) / bo;
            if (!(ea <= worst_aux)) worst_aux = ea;
            if (!(eo <= worst_out)) worst_out = eo;
        }
    int ok = d.aux_ld == OC && worst_aux <= 1.0 && worst_out <= 1.0 && guarded_intact(&out) && guarded_intact(&aux) &&
             guarded_intact(&inp) && guarded_intact(&w) && guarded_intact(&bias);
    char buf[384];
    printf("  lt %-13s N=%-4d C=%-4d OC=%-4d err/bound aux %.2e out %.2e %s  [%s]\n", "gelu_aux_bias", N, C, OC,
           worst_aux, worst_out, ok ? "ok" : "FAIL", gemm_lt_desc_format(&d, buf, sizeof buf));
    free(inp.base), free(w.base), free(bias.base), free(out.base), free(aux.base);
    free(ir), free(wr), free(pre), free(act);
    return ok;
}

/* The bf16 path must round its operands: the same desc run in f32 (cblas on unrounded values) must
 * differ from the bf16 reference by more than the f32 bound on a shape with K = 64 (random values
 * are almost never bf16-representable). Guards against a "bf16" path that silently stays f32. */
static int test_lt_rounds(void) {
    int N = 9, C = 64, OC = 11;
    Guarded inp = guarded_new((size_t)N * C), w = guarded_new((size_t)OC * C), out = guarded_new((size_t)N * OC);
    guarded_fill(&inp), guarded_fill(&w);
    float* f32 = mallocCheck((size_t)N * OC * sizeof(float));
    backend_cpu.ops->linear_forward(&backend_cpu, buf_f32(f32), buf_f32(inp.p), be_weight(&backend_cpu, w.p), buf_none(), N, C, OC);
    GemmLtDesc d = gemm_lt_desc_linear_forward(N, C, OC, 0);
    gemm_lt_desc_run_ref(&d, w.p, inp.p, out.p, NULL);
    double e = max_err(out.p, f32, (size_t)N * OC);
    int ok = e > 64 * lt_gamma(C);
    printf("  lt rounds operands: bf16 vs f32 relative difference %.2e (must exceed the f32 bound %.2e) %s\n", e,
           64 * lt_gamma(C), ok ? "ok" : "FAIL");
    free(inp.base), free(w.base), free(out.base), free(f32);
    return ok;
}

int main(void) {
    /* (N, C, OC): ones, odd primes, N much smaller / larger than the widths, and the model's shapes
     * (ViT qkv 3Dv, MLP 4Dv, LM head V) at small widths */
    static const int shapes[][3] = {
        {1, 1, 1},    {1, 1, 7},    {1, 7, 1},     {7, 1, 1},    {2, 3, 5},    {5, 3, 2},     {13, 17, 19},
        {31, 7, 64},  {64, 31, 7},  {7, 64, 31},   {1, 128, 96}, {97, 1, 33},  {33, 97, 1},   {77, 64, 192},
        {77, 64, 256}, {77, 256, 64}, {130, 96, 300}, {257, 48, 48}, {3, 300, 11}, {300, 5, 129},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) ok &= test_shape(shapes[i][0], shapes[i][1], shapes[i][2]);
    ok &= test_validity();
    ok &= test_mutants();
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) ok &= test_lt_shape(shapes[i][0], shapes[i][1], shapes[i][2]);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) ok &= test_lt_gelu(shapes[i][0], shapes[i][1], shapes[i][2]);
    ok &= test_lt_rounds();
    printf("gemm_desc: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
