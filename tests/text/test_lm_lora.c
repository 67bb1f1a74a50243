/* test_lm_lora.c — one LoRA linear (text/lm_lora.c) on the CPU backend against a double-precision reference:
 *
 *   y = Y0 + s B A drop(x),  loss = sum(y * R)
 *
 * 1. forward: y against the double reference (the mask from engine/cuda/dropout_math.h's specification, whose
 *    draws tests/support/ref/lora_ref.py checks independently);
 * 2. backward: dx (lm_lora_backward_input, ADDED onto random values), dA and dB (lm_lora_backward_weight, added
 *    onto random values) against central finite differences of the double loss (h 1e-4; every element of A, B
 *    and x). Error: max |f32 - fd| / max |fd| per tensor, bound 1e-4 (f32 GEMMs of inner length <= 96 and
 *    the FD's own h^2 error, ~1e-7 and ~1e-8 relative: 1e-4 is far above both and far below a wrong term,
 *    e.g. a missing scale s = 2 or a mask not applied to the gradient, which are O(1));
 * 3. the mask: the kept fraction within 5 standard errors of 1 - p, a different mask for another key, and a
 *    dropped element gets no gradient.
 * Cases: q (in D, column-parallel) and down (in F, row-parallel), without and with dropout.
 * Prints "lm_lora: ok". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/dropout_math.h"
#include "text/lm.h"

static int failures = 0;
static uint64_t rng = 0x243F6A8885A308D3ull;
static double urand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

typedef struct {
    int T, in, out, r;
    double s, p;
    uint64_t key; /* the mask's key of this (layer, target) */
    const double *x, *A, *B, *Y0, *R;
} Ref;

/* the double loss sum((Y0 + s B A drop(x)) * R); y (T, out) written when not NULL */
static double ref_loss(const Ref* f, double* y) {
    double L = 0;
    double* u = calloc((size_t)f->r, sizeof(double));
    for (int n = 0; n < f->T; n++) {
        for (int k = 0; k < f->r; k++) {
            double a = 0;
            for (int c = 0; c < f->in; c++) {
                double xd = f->x[n * f->in + c];
                if (f->p > 0) xd = rr_dropout_keep(f->key, (uint64_t)n * f->in + c, (float)f->p) ? xd / (1 - f->p) : 0;
                a += f->A[k * f->in + c] * xd;
            }
            u[k] = a;
        }
        for (int o = 0; o < f->out; o++) {
            double v = f->Y0[n * f->out + o];
            for (int k = 0; k < f->r; k++) v += f->s * f->B[o * f->r + k] * u[k];
            if (y) y[n * f->out + o] = v;
            L += v * f->R[n * f->out + o];
        }
    }
    free(u);
    return L;
}

static double* dup_d(const float* x, size_t n) {
    double* d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float* rnd_f(size_t n, double scale) {
    float* x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * urand());
    return x;
}

/* max |a - b| / max |b| */
static double rel(const double* a, const double* b, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i])), m = fmax(m, fabs(b[i]));
    return m > 0 ? e / m : e;
}

/* finite differences of the loss in v (n values), each against the analytic gradient minus its pre-fill */
static double fd_check(Ref* f, double* v, size_t n, const float* got, const float* pre) {
    double* gn = malloc(n * sizeof(double));
    double* ga = malloc(n * sizeof(double));
    const double h = 1e-4;
    for (size_t i = 0; i < n; i++) {
        double save = v[i];
        v[i] = save + h;
        double Lp = ref_loss(f, NULL);
        v[i] = save - h;
        double Lm = ref_loss(f, NULL);
        v[i] = save;
        gn[i] = (Lp - Lm) / (2 * h);
        ga[i] = (double)got[i] - (double)pre[i];
    }
    double e = rel(ga, gn, n);
    free(gn), free(ga);
    return e;
}

static void run_case(LmLoraTarget t, double p) {
    const Backend* be = &backend_cpu;
    LmConfig c = {.D = 24, .L = 2, .H = 2, .F = 40, .V = 16, .tp = 1, .lora_r = 4, .lora_scale = 2.0f,
                  .lora_dropout = (float)p, .lora_targets = 1u << t};
    int T = 7, r = c.lora_r, in = t == LM_LORA_DOWN ? c.F : c.D, out = c.D;
    Arena ar;
    arena_init(&ar, "test_lm_lora", 1 << 22);
    LmBlockActs a;
    LmBlockGrads g;
    LmScratch s;
    memset(&a, 0, sizeof a), memset(&g, 0, sizeof g), memset(&s, 0, sizeof s);
    lm_lora_acts_layout(&a, &ar, &c, T);
    lm_lora_grads_layout(&g, &ar, &c, T);
    lm_lora_scratch_layout(&s, &ar, &c, T);
    g.lora_x = s.lora_x;
    float *x = rnd_f((size_t)T * in, 1), *A = rnd_f((size_t)r * in, 0.5), *B = rnd_f((size_t)out * r, 0.5);
    float *Y0 = rnd_f((size_t)T * out, 1), *R = rnd_f((size_t)T * out, 1);
    float *dx = rnd_f((size_t)T * in, 1), *dA = rnd_f((size_t)r * in, 1), *dB = rnd_f((size_t)out * r, 1);
    float *dx0 = malloc((size_t)T * in * 4), *dA0 = malloc((size_t)r * in * 4), *dB0 = malloc((size_t)out * r * 4);
    memcpy(dx0, dx, (size_t)T * in * 4), memcpy(dA0, dA, (size_t)r * in * 4), memcpy(dB0, dB, (size_t)out * r * 4);
    LmBlockW w, dw;
    memset(&w, 0, sizeof w), memset(&dw, 0, sizeof dw);
    w.layer = dw.layer = 1;
    w.lora_A[t] = buf_f32(A), w.lora_B[t] = buf_f32(B);
    dw.lora_A[t] = buf_f32(dA), dw.lora_B[t] = buf_f32(dB);
    LmSeq seq = {.T = T, .S = 1, .lora_seed = p > 0 ? lm_lora_seed(7, 3, 1) : 0};
    float* y = malloc((size_t)T * out * 4);
    memcpy(y, Y0, (size_t)T * out * 4);
    lm_lora_forward(be, &c, &w, &a, &s, &seq, t, buf_f32(x), buf_f32(y));
    lm_lora_backward_input(be, &c, &w, &a, &g, &s, &seq, t, buf_f32(x), R, dx);
    lm_lora_backward_weight(be, &c, &w, &dw, &a, &g, &seq, t, buf_f32(x), R);

    /* the key text/lm_lora.c gives (layer 1, target t): found as the one under which the reference matches */
    Ref f = {.T = T, .in = in, .out = out, .r = r, .s = c.lora_scale, .p = p, .x = dup_d(x, (size_t)T * in),
             .A = dup_d(A, (size_t)r * in), .B = dup_d(B, (size_t)out * r), .Y0 = dup_d(Y0, (size_t)T * out),
             .R = dup_d(R, (size_t)T * out)};
    {
        /* lora_key(seed, l, t) = mix(seed ^ mix(l * 8 + t)), mix = splitmix64's finaliser (text/lm_lora.c) */
        uint64_t z = 1 * 8 + (uint64_t)t, k;
        z += 0x9E3779B97F4A7C15ull, z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        k = seq.lora_seed ^ z;
        k += 0x9E3779B97F4A7C15ull, k = (k ^ (k >> 30)) * 0xBF58476D1CE4E5B9ull, k = (k ^ (k >> 27)) * 0x94D049BB133111EBull;
        f.key = k ^ (k >> 31);
    }
    double* yr = malloc((size_t)T * out * sizeof(double));
    ref_loss(&f, yr);
    double* yd = dup_d(y, (size_t)T * out);
    double ey = rel(yd, yr, (size_t)T * out);
    double ex = fd_check(&f, (double*)f.x, (size_t)T * in, dx, dx0);
    double eA = fd_check(&f, (double*)f.A, (size_t)r * in, dA, dA0);
    double eB = fd_check(&f, (double*)f.B, (size_t)out * r, dB, dB0);
    int ok = ey <= 1e-5 && ex <= 1e-4 && eA <= 1e-4 && eB <= 1e-4;
    /* a dropped input element gets no gradient (only the pre-fill stays) */
    int dropped = 0, leak = 0;
    for (int i = 0; p > 0 && i < T * in; i++)
        if (!rr_dropout_keep(f.key, (uint64_t)i, (float)p)) {
            dropped++;
            if (dx[i] != dx0[i]) ok = 0, leak = 1; /* dx is LoRA's alone here: a dropped element keeps its pre-fill */
        }
    if (p > 0 && dropped == 0) ok = 0;
    printf("%-5s p %.2f: y err %.1e, fd err dx %.1e dA %.1e dB %.1e, %d dropped%s  %s\n", lm_lora_target_name(t), p, ey,
           ex, eA, eB, dropped, leak ? " [gradient through a dropped element]" : "", ok ? "ok" : "FAIL");
    failures += !ok;
    free(x), free(A), free(B), free(Y0), free(R), free(dx), free(dA), free(dB), free(dx0), free(dA0), free(dB0), free(y);
    free((void*)f.x), free((void*)f.A), free((void*)f.B), free((void*)f.Y0), free((void*)f.R), free(yr), free(yd);
    arena_free(&ar);
}

/* the mask's statistics: kept fraction within 5 standard errors of 1 - p over n draws; another key another mask */
static void mask_stats(void) {
    const int n = 200000;
    const float p = 0.3f;
    int kept = 0, differ = 0;
    for (int i = 0; i < n; i++) {
        int k1 = rr_dropout_keep(12345, (uint64_t)i, p), k2 = rr_dropout_keep(12346, (uint64_t)i, p);
        kept += k1, differ += k1 != k2;
    }
    double frac = (double)kept / n, se = sqrt(p * (1 - p) / n);
    int ok = fabs(frac - (1 - p)) <= 5 * se && differ > n / 4;
    printf("mask p %.2f: kept %.4f (want %.4f +- %.4f), %d of %d differ under another key  %s\n", p, frac, 1 - p, 5 * se,
           differ, n, ok ? "ok" : "FAIL");
    failures += !ok;
}

int main(void) {
    run_case(LM_LORA_Q, 0.0);
    run_case(LM_LORA_Q, 0.3);
    run_case(LM_LORA_DOWN, 0.0);
    run_case(LM_LORA_DOWN, 0.3);
    mask_stats();
    if (failures) {
        printf("lm_lora: %d case(s) failed\n", failures);
        return 1;
    }
    printf("lm_lora: ok\n");
    return 0;
}
