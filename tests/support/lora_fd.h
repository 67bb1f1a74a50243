/* lora_fd.h — the double-precision reference and finite-difference harness of one LoRA linear, shared by the
 * tests of text/lm_lora.c and vision/vit_lora.c:
 *
 *   y = Y0 + s B A drop(x) in the columns [c0, c0 + out) of rows of width ld,  loss = sum(y * R)
 *
 * (the decoder's linears: ld = out, c0 = 0). A test fills a LoraCase (random inputs, gradients pre-filled with
 * random values that the backward adds onto), runs its forward and backward on the buffers, then
 * lora_case_check: y against the double reference, dx, dA and dB against central finite differences of the
 * double loss (h 1e-4; every element), each as max |f32 - fd| / max |fd|, and, with dropout, that a dropped input
 * element kept its pre-fill. The bounds (1e-5 on y, 1e-4 on the gradients) are explained in each test's header.
 * Header-only, one copy per test executable. */
#ifndef RRFP_TESTS_LORA_FD_H
#define RRFP_TESTS_LORA_FD_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/dropout_math.h"

static uint64_t lora_fd_rng = 0x243F6A8885A308D3ull;
static double lora_fd_urand(void) { /* [-1, 1) */
    lora_fd_rng ^= lora_fd_rng << 13, lora_fd_rng ^= lora_fd_rng >> 7, lora_fd_rng ^= lora_fd_rng << 17;
    return (double)(lora_fd_rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* splitmix64's finaliser: the mixer of the LoRA dropout keys (text/lm_lora.c, vision/vit_lora.c) */
static uint64_t lora_fd_mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull, z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    int T, in, out, r, ld, c0;
    double s, p;
    uint64_t key; /* the mask's key of this (layer, target) */
    const double *x, *A, *B, *Y0, *R;
} LoraRef;

/* the double loss sum(y * R), y = Y0 + s B A drop(x) in columns [c0, c0 + out); y (T, ld) written when not NULL */
static double lora_ref_loss(const LoraRef* f, double* y) {
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
        for (int o = 0; o < f->ld; o++) {
            double v = f->Y0[n * f->ld + o];
            if (o >= f->c0 && o < f->c0 + f->out)
                for (int k = 0; k < f->r; k++) v += f->s * f->B[(o - f->c0) * f->r + k] * u[k];
            if (y) y[n * f->ld + o] = v;
            L += v * f->R[n * f->ld + o];
        }
    }
    free(u);
    return L;
}

static double* lora_fd_dup(const float* x, size_t n) {
    double* d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float* lora_fd_rand(size_t n, double scale) {
    float* x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * lora_fd_urand());
    return x;
}
static float* lora_fd_copy(const float* x, size_t n) {
    float* c = malloc(n * sizeof(float));
    memcpy(c, x, n * sizeof(float));
    return c;
}

/* max |a - b| / max |b| */
static double lora_fd_rel(const double* a, const double* b, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i])), m = fmax(m, fabs(b[i]));
    return m > 0 ? e / m : e;
}

/* finite differences of the loss in v (n values), each against the analytic gradient minus its pre-fill */
static double lora_fd_grad(const LoraRef* f, double* v, size_t n, const float* got, const float* pre) {
    double* gn = malloc(n * sizeof(double));
    double* ga = malloc(n * sizeof(double));
    const double h = 1e-4;
    for (size_t i = 0; i < n; i++) {
        double save = v[i];
        v[i] = save + h;
        double Lp = lora_ref_loss(f, NULL);
        v[i] = save - h;
        double Lm = lora_ref_loss(f, NULL);
        v[i] = save;
        gn[i] = (Lp - Lm) / (2 * h);
        ga[i] = (double)got[i] - (double)pre[i];
    }
    double e = lora_fd_rel(ga, gn, n);
    free(gn), free(ga);
    return e;
}

/* one case's buffers: inputs x (T, in), A (r, in), B (out, r), Y0 and R (T, ld); gradients dx, dA, dB pre-filled
 * with random values (their pre-fills kept in dx0, dA0, dB0); y starts as Y0 (the base output LoRA adds onto) */
typedef struct {
    int T, in, out, r, ld, c0;
    float *x, *A, *B, *Y0, *R, *dx, *dA, *dB, *dx0, *dA0, *dB0, *y;
} LoraCase;

static void lora_case_init(LoraCase* k, int T, int in, int out, int r, int ld, int c0) {
    k->T = T, k->in = in, k->out = out, k->r = r, k->ld = ld, k->c0 = c0;
    k->x = lora_fd_rand((size_t)T * in, 1), k->A = lora_fd_rand((size_t)r * in, 0.5);
    k->B = lora_fd_rand((size_t)out * r, 0.5);
    k->Y0 = lora_fd_rand((size_t)T * ld, 1), k->R = lora_fd_rand((size_t)T * ld, 1);
    k->dx = lora_fd_rand((size_t)T * in, 1), k->dA = lora_fd_rand((size_t)r * in, 1);
    k->dB = lora_fd_rand((size_t)out * r, 1);
    k->dx0 = lora_fd_copy(k->dx, (size_t)T * in), k->dA0 = lora_fd_copy(k->dA, (size_t)r * in);
    k->dB0 = lora_fd_copy(k->dB, (size_t)out * r);
    k->y = lora_fd_copy(k->Y0, (size_t)T * ld);
}

static void lora_case_free(LoraCase* k) {
    free(k->x), free(k->A), free(k->B), free(k->Y0), free(k->R), free(k->dx), free(k->dA), free(k->dB);
    free(k->dx0), free(k->dA0), free(k->dB0), free(k->y);
}

typedef struct {
    double ey, ex, eA, eB; /* relative errors of y (against the reference) and dx, dA, dB (against the FD) */
    int dropped;           /* input elements the mask dropped (p > 0) */
    int leak;              /* a dropped element's gradient moved off its pre-fill */
    int ok;                /* within the bounds, no leak, and with p > 0 at least one element dropped */
} LoraErr;

/* the case after its forward (into k->y) and backward (into k->dx, dA, dB) ran with scale s, dropout p and the
 * mask's key */
static LoraErr lora_case_check(const LoraCase* k, double s, double p, uint64_t key) {
    int T = k->T, in = k->in, out = k->out, r = k->r, ld = k->ld;
    LoraRef f = {.T = T, .in = in, .out = out, .r = r, .ld = ld, .c0 = k->c0, .s = s, .p = p, .key = key,
                 .x = lora_fd_dup(k->x, (size_t)T * in), .A = lora_fd_dup(k->A, (size_t)r * in),
                 .B = lora_fd_dup(k->B, (size_t)out * r), .Y0 = lora_fd_dup(k->Y0, (size_t)T * ld),
                 .R = lora_fd_dup(k->R, (size_t)T * ld)};
    LoraErr e = {0};
    double* yr = malloc((size_t)T * ld * sizeof(double));
    lora_ref_loss(&f, yr);
    double* yd = lora_fd_dup(k->y, (size_t)T * ld);
    e.ey = lora_fd_rel(yd, yr, (size_t)T * ld);
    e.ex = lora_fd_grad(&f, (double*)f.x, (size_t)T * in, k->dx, k->dx0);
    e.eA = lora_fd_grad(&f, (double*)f.A, (size_t)r * in, k->dA, k->dA0);
    e.eB = lora_fd_grad(&f, (double*)f.B, (size_t)out * r, k->dB, k->dB0);
    e.ok = e.ey <= 1e-5 && e.ex <= 1e-4 && e.eA <= 1e-4 && e.eB <= 1e-4;
    /* a dropped input element gets no gradient: dx is LoRA's alone here, so it keeps its pre-fill */
    for (int i = 0; p > 0 && i < T * in; i++)
        if (!rr_dropout_keep(key, (uint64_t)i, (float)p)) {
            e.dropped++;
            if (k->dx[i] != k->dx0[i]) e.ok = 0, e.leak = 1;
        }
    if (p > 0 && e.dropped == 0) e.ok = 0;
    free((void*)f.x), free((void*)f.A), free((void*)f.B), free((void*)f.Y0), free((void*)f.R), free(yr), free(yd);
    return e;
}

#endif
