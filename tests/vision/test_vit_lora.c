/* test_vit_lora.c — one LoRA linear of the CLIP tower (vision/vit_lora.c) on the CPU backend against a
 * double-precision reference:
 *
 *   y = Y0 + s B A drop(x) in the base output's columns [c0, c0 + out) of rows of width ld,  loss = sum(y * R)
 *
 * (q, k, v: their columns t D of the (T, 3 D) qkv rows, c0 = t D, ld = 3 D; out, fc1, fc2: the whole output).
 * 1. forward: y against the double reference, and the columns outside [c0, c0 + out) bit for bit Y0;
 * 2. backward: dx (vit_lora_backward_input, ADDED onto random values), dA and dB (vit_lora_backward_weight, added
 *    onto random values) against central finite differences of the double loss (h 1e-4; every element of A, B and
 *    x). Error: max |f32 - fd| / max |fd| per tensor, bound 1e-4 (f32 GEMMs of inner length <= 32 and the FD's own
 *    h^2 error, ~1e-7 and ~1e-8 relative: far above both and far below a wrong term, e.g. a missing scale s = 2,
 *    another target's columns, or a mask not applied to the gradient, which are O(1));
 * 3. with dropout, the mask is the documented one (engine/cuda/dropout_math.h under the key mix(seed ^ mix(tag ^
 *    (8 l + t))), tag "VIT" << 40, mix = splitmix64's finaliser) and a dropped input element gets no gradient.
 * Cases: each of q, k, v, out, fc1, fc2, with and without dropout on alternate ones. Prints "vit_lora: ok". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/dropout_math.h"
#include "vision/vit_lora.h"

static int failures = 0;
static uint64_t rng = 0x243F6A8885A308D3ull;
static double urand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

typedef struct {
    int T, in, out, r, ld, c0;
    double s, p;
    uint64_t key;
    const double *x, *A, *B, *Y0, *R;
} Ref;

/* the double loss sum(y * R), y = Y0 + s B A drop(x) in columns [c0, c0 + out); y (T, ld) written when not NULL */
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

static uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull, z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void run_case(VitLoraTarget t, double p) {
    const Backend* be = &backend_cpu;
    const int l = 1;
    VitConfig c = {.patch = 2, .D = 8, .L = 2, .H = 2, .arch = VIT_ARCH_CLIP, .tp = 1, .lora_r = 3, .lora_scale = 2.0f,
                   .lora_dropout = (float)p, .lora_targets = 1u << t};
    int D = c.D, T = 5, r = c.lora_r, in = t == VIT_LORA_FC2 ? 4 * D : D, out = t == VIT_LORA_FC1 ? 4 * D : D;
    int qkv = t <= VIT_LORA_V, ld = qkv ? 3 * D : out, c0 = qkv ? (int)t * D : 0;
    Arena ar;
    arena_init(&ar, "test_vit_lora", 1 << 22);
    VitActs a;
    VitBlockActs b;
    VitBlockGrads g;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b), memset(&g, 0, sizeof g);
    a.T = a.max_T = T;
    a.lora_seed = p > 0 ? 0x1234567887654321ull : 0;
    vit_lora_acts_carve(&b, &ar, &c, (size_t)T);
    vit_lora_grads_carve(&g, &ar, &c, (size_t)T);
    vit_lora_scratch_layout(&a, &ar, &c, T);
    vit_lora_prepare(be, &c, &a);
    float *x = rnd_f((size_t)T * in, 1), *A = rnd_f((size_t)r * in, 0.5), *B = rnd_f((size_t)out * r, 0.5);
    float *Y0 = rnd_f((size_t)T * ld, 1), *R = rnd_f((size_t)T * ld, 1);
    float *dx = rnd_f((size_t)T * in, 1), *dA = rnd_f((size_t)r * in, 1), *dB = rnd_f((size_t)out * r, 1);
    float *dx0 = malloc((size_t)T * in * 4), *dA0 = malloc((size_t)r * in * 4), *dB0 = malloc((size_t)out * r * 4);
    memcpy(dx0, dx, (size_t)T * in * 4), memcpy(dA0, dA, (size_t)r * in * 4), memcpy(dB0, dB, (size_t)out * r * 4);
    VitBlockW w, dw;
    memset(&w, 0, sizeof w), memset(&dw, 0, sizeof dw);
    w.lora_A[t] = buf_f32(A), w.lora_B[t] = buf_f32(B);
    dw.lora_A[t] = buf_f32(dA), dw.lora_B[t] = buf_f32(dB);
    float* y = malloc((size_t)T * ld * 4);
    memcpy(y, Y0, (size_t)T * ld * 4);
    vit_lora_forward(be, &c, &w, &b, &a, l, t, x, y);
    vit_lora_backward_input(be, &c, &w, &b, &g, &a, l, t, x, R, dx);
    vit_lora_backward_weight(be, &c, &w, &dw, &b, &g, &a, l, t, x, R);

    Ref f = {.T = T, .in = in, .out = out, .r = r, .ld = ld, .c0 = c0, .s = c.lora_scale, .p = p,
             .x = dup_d(x, (size_t)T * in), .A = dup_d(A, (size_t)r * in), .B = dup_d(B, (size_t)out * r),
             .Y0 = dup_d(Y0, (size_t)T * ld), .R = dup_d(R, (size_t)T * ld)};
    f.key = mix(a.lora_seed ^ mix(0x5649540000000000ull ^ ((uint64_t)l * 8 + (uint64_t)t)));
    double* yr = malloc((size_t)T * ld * sizeof(double));
    ref_loss(&f, yr);
    double* yd = dup_d(y, (size_t)T * ld);
    double ey = rel(yd, yr, (size_t)T * ld);
    int outside = 0; /* the other columns of the rows are the base's, untouched */
    for (int n = 0; n < T; n++)
        for (int o = 0; o < ld; o++)
            if ((o < c0 || o >= c0 + out) && y[n * ld + o] != Y0[n * ld + o]) outside++;
    double ex = fd_check(&f, (double*)f.x, (size_t)T * in, dx, dx0);
    double eA = fd_check(&f, (double*)f.A, (size_t)r * in, dA, dA0);
    double eB = fd_check(&f, (double*)f.B, (size_t)out * r, dB, dB0);
    int ok = ey <= 1e-5 && ex <= 1e-4 && eA <= 1e-4 && eB <= 1e-4 && !outside;
    int dropped = 0, leak = 0;
    for (int i = 0; p > 0 && i < T * in; i++)
        if (!rr_dropout_keep(f.key, (uint64_t)i, (float)p)) {
            dropped++;
            if (dx[i] != dx0[i]) ok = 0, leak = 1;
        }
    if (p > 0 && dropped == 0) ok = 0;
    printf("%-4s p %.2f: y err %.1e (%d changed outside its columns), fd err dx %.1e dA %.1e dB %.1e, %d dropped%s  %s\n",
           vit_lora_target_name(t), p, ey, outside, ex, eA, eB, dropped, leak ? " [gradient through a dropped element]" : "",
           ok ? "ok" : "FAIL");
    failures += !ok;
    free(x), free(A), free(B), free(Y0), free(R), free(dx), free(dA), free(dB), free(dx0), free(dA0), free(dB0), free(y);
    free((void*)f.x), free((void*)f.A), free((void*)f.B), free((void*)f.Y0), free((void*)f.R), free(yr), free(yd);
    arena_free(&ar);
}

int main(void) {
    for (int t = 0; t < VIT_LORA_N; t++) run_case((VitLoraTarget)t, t % 2 ? 0.3 : 0.0);
    run_case(VIT_LORA_Q, 0.3);
    if (failures) {
        printf("vit_lora: %d case(s) failed\n", failures);
        return 1;
    }
    printf("vit_lora: ok\n");
    return 0;
}
