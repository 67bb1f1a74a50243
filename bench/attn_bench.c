/* attn_bench.c — rrfp-bench-attn: throughput of the CPU attention (engine/cpu/attention.c) on
 * realistic packings, against a materialising baseline run in the same invocation.
 *
 * Baseline ("materialise"): per (sequence, head) the full len x len score matrix in a per-thread
 * buffer, S = scale Q K^T and O = P V as single cpu_sgemm calls (the biggest, most BLAS-friendly
 * products there are), row softmax with expf, causal mask applied after the product; backward
 * recomputes P from lse the same way and does the five products at full size. OpenMP over
 * (sequence, head). This is what a straightforward C implementation with a good BLAS does; it needs
 * len^2 floats per thread (two such buffers in backward).
 *
 * Both are validated against each other before timing. Times are medians of repeated runs, ours
 * and the baseline's interleaved (the machine is shared, its load changes by the minute). FLOPs count only visible (query, key) pairs: forward 4 d per pair (Q K^T and
 * P V), backward 10 d per pair (recomputed Q K^T, dO V^T, P^T dO, dS K, dS^T Q), the FlashAttention
 * convention; the baseline's causal products also compute the masked half, which is not counted.
 *
 * Usage: rrfp-bench-attn [--list] [--torch FILE] [--reps N] [--only WORKLOAD] [--no-header]
 *   --list        print the packings ("name causal H d T len,len,...") for bench/attention_torch.py
 *   --torch FILE  lines "name fwd_seconds bwd_seconds" from that script: adds ratios against PyTorch */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

typedef struct {
    const char* name;
    int causal, H, d;
    int fused;          /* q, k, v in one (T, 3*H*d) buffer (the ViT's qkv) or three (T, H*d) ones (LM) */
    int len_lo, len_hi; /* sample lengths uniform in [lo, hi] ... */
    int T_target;       /* ... drawn until they reach this many tokens */
} Workload;

static const Workload WORKLOADS[] = {
    {"vit_d64_bidir", 0, 4, 64, 1, 64, 1024, 4096},
    {"vit_d32_bidir", 0, 8, 32, 1, 64, 1024, 4096},
    {"lm_d64_causal", 1, 4, 64, 0, 100, 2000, 8192},
    {"lm_d32_causal", 1, 8, 32, 0, 100, 2000, 8192},
    {"long4096_d64_causal", 1, 4, 64, 0, 4096, 4096, 4096},
    {"long4096_d64_h1_causal", 1, 1, 64, 0, 4096, 4096, 4096}, /* one (sequence, head): two-pass backward */
};
#define N_WORKLOADS (int)(sizeof WORKLOADS / sizeof WORKLOADS[0])
#define MAX_SEQS 256

static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Deterministic packing: lengths uniform in [lo, hi] until T_target tokens. Returns S. */
static int workload_pack(const Workload* w, int* cu) {
    int S = 0;
    cu[0] = 0;
    while (cu[S] < w->T_target && S < MAX_SEQS) {
        int len = w->len_lo + (int)(rng_u64() % (uint64_t)(w->len_hi - w->len_lo + 1));
        cu[S + 1] = cu[S] + len;
        S++;
    }
    return S;
}

/* ------------------------------------------------------------------------------------------------
 * The materialising baseline */

static void base_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int* cu, int S,
                         int H, int d, int ld, int causal, int max_len) {
    const int Hd = H * d;
    const float scale = 1.0f / sqrtf((float)d);
#pragma omp parallel
    {
        float* P = mallocCheck((size_t)max_len * max_len * sizeof(float));
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int s = 0; s < S; s++) {
            for (int h = 0; h < H; h++) {
                int t0 = cu[s], n = cu[s + 1] - cu[s];
                if (n == 0) continue;
                const float* qh = q + (size_t)t0 * ld + h * d;
                const float* kh = k + (size_t)t0 * ld + h * d;
                const float* vh = v + (size_t)t0 * ld + h * d;
                cpu_sgemm(0, 1, n, n, d, scale, qh, ld, kh, ld, 0.0f, P, n);
                for (int i = 0; i < n; i++) {
                    float* row = P + (size_t)i * n;
                    int nvis = causal ? i + 1 : n;
                    float mx = -INFINITY, sum = 0.0f;
                    for (int j = 0; j < nvis; j++) mx = fmaxf(mx, row[j]);
                    for (int j = 0; j < nvis; j++) sum += (row[j] = expf(row[j] - mx));
                    for (int j = 0; j < nvis; j++) row[j] /= sum;
                    for (int j = nvis; j < n; j++) row[j] = 0.0f;
                    lse[(size_t)(t0 + i) * H + h] = mx + logf(sum);
                }
                cpu_sgemm(0, 0, n, d, n, 1.0f, P, n, vh, ld, 0.0f, out + (size_t)t0 * Hd + h * d, Hd);
            }
        }
        free(P);
    }
}

static void base_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                          const float* q, const float* k, const float* v, const int* cu, int S, int H, int d, int ld,
                          int causal, int max_len) {
    const int Hd = H * d;
    const float scale = 1.0f / sqrtf((float)d);
#pragma omp parallel
    {
        float* P = mallocCheck((size_t)max_len * max_len * sizeof(float));
        float* dP = mallocCheck((size_t)max_len * max_len * sizeof(float));
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int s = 0; s < S; s++) {
            for (int h = 0; h < H; h++) {
                int t0 = cu[s], n = cu[s + 1] - cu[s];
                if (n == 0) continue;
                size_t qo = (size_t)t0 * ld + h * d, oo = (size_t)t0 * Hd + h * d;
                cpu_sgemm(0, 1, n, n, d, scale, q + qo, ld, k + qo, ld, 0.0f, P, n);
                cpu_sgemm(0, 1, n, n, d, 1.0f, dout + oo, Hd, v + qo, ld, 0.0f, dP, n);
                for (int i = 0; i < n; i++) {
                    float* prow = P + (size_t)i * n;
                    float* dprow = dP + (size_t)i * n;
                    float l = lse[(size_t)(t0 + i) * H + h], D = 0.0f;
                    for (int c = 0; c < d; c++) D += dout[oo + (size_t)i * Hd + c] * out[oo + (size_t)i * Hd + c];
                    int nvis = causal ? i + 1 : n;
                    for (int j = 0; j < nvis; j++) {
                        prow[j] = expf(prow[j] - l);
                        dprow[j] = prow[j] * (dprow[j] - D);
                    }
                    for (int j = nvis; j < n; j++) prow[j] = dprow[j] = 0.0f;
                }
                cpu_sgemm(1, 0, n, d, n, 1.0f, P, n, dout + oo, Hd, 1.0f, dv + qo, ld);
                cpu_sgemm(0, 0, n, d, n, scale, dP, n, k + qo, ld, 1.0f, dq + qo, ld);
                cpu_sgemm(1, 0, n, d, n, scale, dP, n, q + qo, ld, 1.0f, dk + qo, ld);
            }
        }
        free(P);
        free(dP);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Timing */

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

#define MAX_REPS 64

typedef struct {
    const Workload* w;
    const int* cu;
    int S, T, ld, max_len;
    float *x, *out, *lse, *dout, *g;
    const float *q, *k, *v;
    float *dq, *dk, *dv;
} Bench;

static void run_op(const Bench* b, int impl, int backward) {
    const Workload* w = b->w;
    if (impl == 0 && !backward)
        cpu_attention_forward(&backend_cpu, b->out, b->lse, b->q, b->k, b->v, b->cu, b->S, b->T, w->H, w->H, w->d, b->ld, b->ld, w->causal);
    else if (impl == 0)
        cpu_attention_backward(&backend_cpu, b->dq, b->dk, b->dv, b->dout, b->out, b->lse, b->q, b->k, b->v, b->cu, b->S, b->T, w->H, w->H,
                               w->d, b->ld, b->ld, w->causal);
    else if (!backward)
        base_forward(b->out, b->lse, b->q, b->k, b->v, b->cu, b->S, w->H, w->d, b->ld, w->causal, b->max_len);
    else
        base_backward(b->dq, b->dk, b->dv, b->dout, b->out, b->lse, b->q, b->k, b->v, b->cu, b->S, w->H, w->d, b->ld,
                      w->causal, b->max_len);
}

static double median(double* t, int n) {
    qsort(t, n, sizeof(double), cmp_double);
    return t[n / 2];
}

/* Median seconds of `reps` runs of ours and of the baseline, forward and backward, after one
 * warm-up. The four are interleaved within each repetition so that both implementations see the
 * same load on a shared machine. out and lse are the same for both (validated), so each backward
 * may use what the last forward left. sec[impl][backward]. */
static void time_ops(const Bench* b, int reps, double sec[2][2]) {
    double t[2][2][MAX_REPS];
    for (int impl = 0; impl < 2; impl++) run_op(b, impl, 0), run_op(b, impl, 1);
    for (int r = 0; r < reps; r++)
        for (int impl = 0; impl < 2; impl++)
            for (int backward = 0; backward < 2; backward++) {
                double t0 = rr_now();
                run_op(b, impl, backward);
                t[impl][backward][r] = rr_now() - t0;
            }
    for (int impl = 0; impl < 2; impl++)
        for (int backward = 0; backward < 2; backward++) sec[impl][backward] = median(t[impl][backward], reps);
}

static double max_norm_diff(const float* a, const float* b, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return s > 0 ? e / s : e;
}

/* PyTorch timings from bench/attention_torch.py: returns 1 when `name` was found. */
static int torch_lookup(const char* path, const char* name, double* fwd, double* bwd) {
    if (!path) return 0;
    FILE* f = fopen(path, "r");
    if (!f) rr_die("cannot open PyTorch timings '%s'", path);
    char n[128];
    int found = 0;
    while (!found && fscanf(f, "%127s %lf %lf", n, fwd, bwd) == 3) found = strcmp(n, name) == 0;
    fclose(f);
    return found;
}

int main(int argc, char** argv) {
    const char* torch_path = NULL;
    const char* only = NULL;
    int list = 0, reps = 5, header = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0) list = 1;
        else if (strcmp(argv[i], "--torch") == 0 && i + 1 < argc) torch_path = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--no-header") == 0) header = 0;
        else {
            fprintf(stderr, "usage: rrfp-bench-attn [--list] [--torch FILE] [--reps N] [--only WORKLOAD] [--no-header]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS) rr_die("--reps must be in [1, %d], got %d", MAX_REPS, reps);

    if (!list && header)
        printf("CPU attention: %d threads, BLAS %s, median of %d runs; ratio = baseline time / ours (> 1: ours "
               "faster);\ntorch f / torch b = PyTorch time / ours (bench/attention_torch.py, same packing, run "
               "just before)\n\n"
               "%-22s %5s %4s | %9s %9s %6s %7s | %9s %9s %6s %7s | %9s %8s %8s\n",
               omp_get_max_threads(), cpu_blas_name(), reps, "workload", "T", "S", "fwd ms", "base ms", "ratio",
               "GFLOP/s", "bwd ms", "base ms", "ratio", "GFLOP/s", "tok/s f+b", "torch f", "torch b");
    int bad = 0, matched = 0;
    for (int wi = 0; wi < N_WORKLOADS; wi++) {
        const Workload* w = &WORKLOADS[wi];
        if (only && strcmp(only, w->name) != 0) continue;
        matched++;
        int cu[MAX_SEQS + 1];
        rng_state = 0x853C49E6748FEA9Bull + (uint64_t)wi; /* the same packing with and without --list */
        int S = workload_pack(w, cu), T = cu[S], Hd = w->H * w->d;
        if (list) {
            printf("%s %d %d %d %d ", w->name, w->causal, w->H, w->d, T);
            for (int s = 0; s < S; s++) printf("%s%d", s ? "," : "", cu[s + 1] - cu[s]);
            printf("\n");
            continue;
        }
        Bench b = {.w = w, .cu = cu, .S = S, .T = T, .ld = w->fused ? 3 * Hd : Hd, .max_len = 0};
        double pairs = 0;
        for (int s = 0; s < S; s++) {
            int n = cu[s + 1] - cu[s];
            b.max_len = n > b.max_len ? n : b.max_len;
            pairs += w->causal ? 0.5 * n * (n + 1.0) : (double)n * n;
        }
        size_t nx = 3 * (size_t)T * Hd;
        b.x = mallocCheck(nx * sizeof(float));
        b.g = mallocCheck(nx * sizeof(float));
        for (size_t i = 0; i < nx; i++) b.x[i] = (float)((rng_u64() >> 40) * (2.0 / 16777216.0) - 1.0);
        b.q = b.x, b.dq = b.g;
        if (w->fused) b.k = b.x + Hd, b.v = b.x + 2 * Hd, b.dk = b.g + Hd, b.dv = b.g + 2 * Hd;
        else b.k = b.x + (size_t)T * Hd, b.v = b.x + 2 * (size_t)T * Hd, b.dk = b.g + (size_t)T * Hd,
        b.dv = b.g + 2 * (size_t)T * Hd;
        b.out = mallocCheck((size_t)T * Hd * sizeof(float));
        b.lse = mallocCheck((size_t)T * w->H * sizeof(float));
        b.dout = mallocCheck((size_t)T * Hd * sizeof(float));
        for (size_t i = 0; i < (size_t)T * Hd; i++) b.dout[i] = (float)((rng_u64() >> 40) * (2.0 / 16777216.0) - 1.0);

        /* validate: both implementations on the same inputs, gradients from zero */
        float* ref_out = mallocCheck((size_t)T * Hd * sizeof(float));
        float* ref_g = mallocCheck(nx * sizeof(float));
        memset(b.g, 0, nx * sizeof(float));
        run_op(&b, 1, 0), run_op(&b, 1, 1);
        memcpy(ref_out, b.out, (size_t)T * Hd * sizeof(float));
        memcpy(ref_g, b.g, nx * sizeof(float));
        memset(b.g, 0, nx * sizeof(float));
        run_op(&b, 0, 0), run_op(&b, 0, 1);
        double e_out = max_norm_diff(b.out, ref_out, (size_t)T * Hd), e_g = max_norm_diff(b.g, ref_g, nx);
        if (e_out > 1e-4 || e_g > 1e-4) {
            printf("%s: ours and the baseline disagree (out %.1e, grads %.1e)\n", w->name, e_out, e_g);
            bad = 1;
        }

        double sec[2][2];
        time_ops(&b, reps, sec);
        double f_ours = sec[0][0], b_ours = sec[0][1], f_base = sec[1][0], b_base = sec[1][1];
        double head_flops = (double)w->H * w->d * pairs;
        char tf[32] = "-", tb[32] = "-";
        double tfs, tbs;
        if (torch_lookup(torch_path, w->name, &tfs, &tbs)) {
            snprintf(tf, sizeof tf, "%.2fx", tfs / f_ours);
            snprintf(tb, sizeof tb, "%.2fx", tbs / b_ours);
        }
        printf("%-22s %5d %4d | %9.2f %9.2f %5.2fx %7.1f | %9.2f %9.2f %5.2fx %7.1f | %9.0f %8s %8s\n", w->name, T, S,
               1e3 * f_ours, 1e3 * f_base, f_base / f_ours, 4 * head_flops / f_ours * 1e-9, 1e3 * b_ours,
               1e3 * b_base, b_base / b_ours, 10 * head_flops / b_ours * 1e-9, T / (f_ours + b_ours), tf, tb);
        fflush(stdout);
        free(b.x), free(b.g), free(b.out), free(b.lse), free(b.dout), free(ref_out), free(ref_g);
    }
    if (matched == 0) rr_die("--only %s: no such workload (rrfp-bench-attn --list names them)", only);
    return bad;
}
