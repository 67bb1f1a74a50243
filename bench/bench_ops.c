/* bench_ops.c — CPU op throughput: GEMM through each BLAS available, and attention, in one run.
 *
 * GEMM: every linear layer costs three GEMMs (forward NT, input-gradient NN, weight-gradient TN), so
 * each shape of the default recipe (recipes/llava.ini) and a scaled-down 7B-like shape is timed in
 * all three forms, through cblas_sgemm of BLIS and of OpenBLAS, each dlopen'ed on its own
 * (RTLD_DEEPBIND, so each library binds to its own symbols) and given the same thread count. The
 * table gives GFLOP/s and the ratio blis / openblas, with the geometric mean at the end; this is
 * the measurement behind the default RRFP_BLAS. Attention: forward and backward of backend_cpu at
 * the model's shapes, tokens/s and GFLOP/s.
 *
 * Each figure is the best of several timed repetitions (after one warm-up call): the machine is
 * shared, and the minimum is the figure least disturbed by other processes.
 *
 * Usage: rrfp-bench-ops [--threads N] [--gemm-only] [--mixed-only] [--attention-only] [--quick] [--lib blis|openblas] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"

#define BLIS_PATH "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so"
#define OPENBLAS_PATH "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so"

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 }; /* the CBLAS enum values */
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                               float*, int);

typedef struct {
    const char* name;
    const char* path;
    void* handle;
    cblas_sgemm_fn sgemm;
    const char* detail; /* what the library reports about itself */
} Blas;

static int blas_open(Blas* b, int threads) {
    b->handle = dlopen(b->path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!b->handle) {
        printf("  %-9s not available (%s)\n", b->name, dlerror());
        return 0;
    }
    b->sgemm = (cblas_sgemm_fn)dlsym(b->handle, "cblas_sgemm");
    if (!b->sgemm) {
        printf("  %-9s has no cblas_sgemm\n", b->name);
        return 0;
    }
    void (*blis_threads)(long) = (void (*)(long))dlsym(b->handle, "bli_thread_set_num_threads");
    void (*ob_threads)(int) = (void (*)(int))dlsym(b->handle, "openblas_set_num_threads");
    char* (*ob_core)(void) = (char* (*)(void))dlsym(b->handle, "openblas_get_corename");
    char* (*ob_config)(void) = (char* (*)(void))dlsym(b->handle, "openblas_get_config");
    char* (*blis_arch)(void) = NULL;
    if (blis_threads) blis_threads(threads);
    if (ob_threads) ob_threads(threads);
    static char detail[2][256];
    char* d = detail[strcmp(b->name, "openblas") == 0];
    if (ob_core) {
        snprintf(d, 256, "core %s, %s", ob_core(), ob_config ? ob_config() : "");
    } else {
        /* bli_arch_string(bli_arch_query_id()) names the kernel set BLIS picked at run time */
        int (*arch_id)(void) = (int (*)(void))dlsym(b->handle, "bli_arch_query_id");
        const char* (*arch_str)(int) = (const char* (*)(int))dlsym(b->handle, "bli_arch_string");
        (void)blis_arch;
        snprintf(d, 256, "arch %s", arch_id && arch_str ? arch_str(arch_id()) : "?");
    }
    b->detail = d;
    printf("  %-9s %s (%s), %d threads\n", b->name, b->path, b->detail, threads);
    return 1;
}

typedef struct {
    const char* layer;
    int tokens, OC, C; /* a linear layer: inp (tokens, C) @ W (OC, C)^T */
} LinearShape;

/* The default recipe (recipes/llava.ini): Dv = 128, patch 8, Dt = 256, F = 688, 1024 LM tokens per
 * microbatch of which ~512 image patches; V = 4096 is the tokenizer size make demo trains. Then a
 * 7B-like layer (Dt = 4096) at 512 tokens, 1/4 of a 2048-token microbatch to keep the run short. */
static const LinearShape SHAPES[] = {
    {"vit.patch_embed", 512, 128, 192},
    {"vit.qkv", 512, 384, 128},
    {"vit.fc1", 512, 512, 128},
    {"vit.fc2", 512, 128, 512},
    {"proj.fc1", 512, 256, 128},
    {"lm.q/k/v/o", 1024, 256, 256},
    {"lm.gate/up", 1024, 688, 256},
    {"lm.down", 1024, 256, 688},
    {"lm.head", 1024, 4096, 256},
    {"7b.q (512 tok)", 512, 4096, 4096},
};

/* Seconds per call of one timed repetition: enough calls to last >= min_s. */
static double time_gemm(const Blas* b, int tA, int tB, int M, int N, int K, const float* A, int lda, const float* B,
                        int ldb, float* C, int ldc, double min_s) {
    int calls = 0;
    double t0 = rr_now(), t;
    do {
        b->sgemm(ROW_MAJOR, tA ? TRANS : NO_TRANS, tB ? TRANS : NO_TRANS, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
        calls++;
        t = rr_now() - t0;
    } while (t < min_s);
    return t / calls;
}

static float* rand_buf(size_t n) {
    float* x = mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return x;
}

static void bench_gemm(int threads, int quick, const char* only) {
    int reps = quick ? 2 : 5;
    printf("GEMM (GFLOP/s, best of %d; fwd = inp @ W^T, dinp = dout @ W, dW = dout^T @ inp)\n", reps);
    Blas libs[2] = {{"blis", BLIS_PATH, 0, 0, 0}, {"openblas", OPENBLAS_PATH, 0, 0, 0}};
    int have[2];
    for (int l = 0; l < 2; l++) have[l] = (!only || strcmp(only, libs[l].name) == 0) && blas_open(&libs[l], threads);
    printf("%-16s %-5s %5s %5s %5s %10s %10s %8s\n", "layer", "gemm", "M", "N", "K", "blis", "openblas", "ratio");
    double log_ratio = 0;
    int n_ratio = 0;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        const LinearShape* sh = &SHAPES[s];
        int T = sh->tokens, OC = sh->OC, C = sh->C;
        float* inp = rand_buf((size_t)T * C);
        float* w = rand_buf((size_t)OC * C);
        float* dout = rand_buf((size_t)T * OC);
        float* out = rand_buf((size_t)T * (OC > C ? OC : C));
        float* dw = rand_buf((size_t)OC * C);
        for (int kind = 0; kind < 3; kind++) {
            double gf[2] = {0, 0};
            int M, N, K;
            if (kind == 0) M = T, N = OC, K = C;      /* out (T, OC) = inp @ W^T */
            else if (kind == 1) M = T, N = C, K = OC; /* dinp (T, C) = dout @ W */
            else M = OC, N = C, K = T;                /* dW (OC, C) = dout^T @ inp */
            double flops = 2.0 * M * N * K;
            /* repetitions alternate between the libraries so that both see the same background load;
             * the first round is a warm-up (packing buffers, thread start) and is not counted */
            double best[2] = {1e30, 1e30};
            for (int r = 0; r <= reps; r++)
                for (int l = 0; l < 2; l++) {
                    if (!have[l]) continue;
                    double sec, min_s = r == 0 ? 0.0 : 0.05;
                    if (kind == 0) sec = time_gemm(&libs[l], 0, 1, M, N, K, inp, C, w, C, out, OC, min_s);
                    else if (kind == 1) sec = time_gemm(&libs[l], 0, 0, M, N, K, dout, OC, w, C, out, C, min_s);
                    else sec = time_gemm(&libs[l], 1, 0, M, N, K, dout, OC, inp, C, dw, C, min_s);
                    if (r > 0 && sec < best[l]) best[l] = sec;
                    /* let this library's spinning worker threads go idle before the other one runs */
                    if (have[0] && have[1]) usleep(150000);
                }
            for (int l = 0; l < 2; l++)
                if (have[l]) gf[l] = flops / best[l] * 1e-9;
            static const char* kinds[3] = {"fwd", "dinp", "dW"};
            printf("%-16s %-5s %5d %5d %5d %10.1f %10.1f", sh->layer, kinds[kind], M, N, K, gf[0], gf[1]);
            if (gf[0] > 0 && gf[1] > 0) {
                printf(" %8.2f", gf[0] / gf[1]);
                log_ratio += log(gf[0] / gf[1]);
                n_ratio++;
            }
            printf("\n");
            fflush(stdout);
        }
        free(inp), free(w), free(dout), free(out), free(dw);
    }
    if (n_ratio) printf("geometric mean blis/openblas over %d GEMMs: %.2f\n", n_ratio, exp(log_ratio / n_ratio));
}

/* A linear layer as a training step runs it: the GEMM, then an OpenMP elementwise op over its output
 * (GELU here), many times in a row. BLIS-openmp runs its threads in the same OpenMP pool as the
 * engine's loops; OpenBLAS-pthread keeps its own workers, which spin for a while after each call and
 * compete with the OpenMP threads on a 2-core machine. The end-to-end cost of that is what matters. */
static void bench_mixed(int threads, const char* only) {
    Blas libs[2] = {{"blis", BLIS_PATH, 0, 0, 0}, {"openblas", OPENBLAS_PATH, 0, 0, 0}};
    int have[2];
    printf("linear + GELU loop (lm.gate/up fwd then GELU over its output; ms per layer, best of 5)\n");
    for (int l = 0; l < 2; l++) have[l] = (!only || strcmp(only, libs[l].name) == 0) && blas_open(&libs[l], threads);
    int T = 1024, OC = 688, C = 256, iters = 20;
    float* inp = rand_buf((size_t)T * C);
    float* w = rand_buf((size_t)OC * C);
    float* out = rand_buf((size_t)T * OC);
    double best[2] = {1e30, 1e30}, gemm_only[2] = {1e30, 1e30};
    for (int r = 0; r <= 5; r++)
        for (int l = 0; l < 2; l++) {
            if (!have[l]) continue;
            double t0 = rr_now();
            for (int i = 0; i < iters; i++) {
                libs[l].sgemm(ROW_MAJOR, NO_TRANS, TRANS, T, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
                backend_cpu.ops->gelu_forward(&backend_cpu, buf_f32(out), buf_f32(out), (size_t)T * OC);
            }
            double t1 = rr_now();
            for (int i = 0; i < iters; i++)
                libs[l].sgemm(ROW_MAJOR, NO_TRANS, TRANS, T, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
            double t2 = rr_now();
            if (r > 0 && (t1 - t0) / iters < best[l]) best[l] = (t1 - t0) / iters;
            if (r > 0 && (t2 - t1) / iters < gemm_only[l]) gemm_only[l] = (t2 - t1) / iters;
            if (have[0] && have[1]) usleep(150000);
        }
    for (int l = 0; l < 2; l++)
        if (have[l])
            printf("  %-9s gemm+gelu %7.3f ms   gemm alone %7.3f ms\n", libs[l].name, best[l] * 1e3,
                   gemm_only[l] * 1e3);
    if (have[0] && have[1]) printf("  ratio openblas/blis (time, gemm+gelu): %.2f\n", best[1] / best[0]);
    free(inp), free(w), free(out);
}

/* ------------------------------------------------------------------------------------------------
 * Attention through backend_cpu */

typedef struct {
    const char* name;
    int S, len, H, d, causal; /* S sequences of `len` tokens */
} AttnShape;

static const AttnShape ATTN[] = {
    {"vit (8 img x 64)", 8, 64, 4, 32, 0},
    {"lm (4 x 256)", 4, 256, 4, 64, 1},
    {"lm (1 x 1024)", 1, 1024, 4, 64, 1},
    {"lm (1 x 4096)", 1, 4096, 4, 64, 1},
};

static void bench_attention(int quick) {
    const Backend* be = &backend_cpu;
    printf("attention via backend_cpu (best of %d): tokens/s and GFLOP/s (causal counts the half it computes)\n",
           quick ? 2 : 3);
    printf("%-18s %6s %3s %3s %7s %12s %9s %12s %9s\n", "shape", "T", "H", "d", "causal", "fwd tok/s", "fwd GF/s",
           "bwd tok/s", "bwd GF/s");
    for (size_t s = 0; s < sizeof ATTN / sizeof ATTN[0]; s++) {
        const AttnShape* a = &ATTN[s];
        int T = a->S * a->len, H = a->H, d = a->d, D = H * d, ld = 3 * D;
        float* qkv = rand_buf((size_t)T * ld);
        for (size_t i = 0; i < (size_t)T * ld; i++) qkv[i] *= 0.5f;
        float* dqkv = rand_buf((size_t)T * ld);
        float* out = rand_buf((size_t)T * D);
        float* dout = rand_buf((size_t)T * D);
        float* lse = rand_buf((size_t)T * H);
        int* cu = mallocCheck((a->S + 1) * sizeof(int));
        for (int i = 0; i <= a->S; i++) cu[i] = i * a->len;
        /* matmul FLOPs: forward QK^T and PV, 4 L^2 d per head; backward recomputes QK^T and does
         * dV, dP, dQ, dK: 10 L^2 d. Causal: half of it. */
        double pairs = (double)a->S * a->len * a->len * (a->causal ? 0.5 : 1.0);
        double f_fwd = 4.0 * pairs * d * H, f_bwd = 10.0 * pairs * d * H;
        double best_f = 1e30, best_b = 1e30;
        for (int r = 0; r < (quick ? 2 : 3); r++) {
            double t0 = rr_now();
            be->ops->attention_forward(be, buf_f32(out), lse, buf_f32(qkv), buf_f32(qkv + D), buf_f32(qkv + 2 * D), cu, a->S, T, H, H, d, ld, ld, a->causal);
            double t1 = rr_now();
            be->ops->attention_backward(be, dqkv, dqkv + D, dqkv + 2 * D, NULL, NULL, NULL, 0, buf_f32(dout), buf_f32(out), lse, buf_f32(qkv), buf_f32(qkv + D), buf_f32(qkv + 2 * D), cu, a->S,
                                   T, H, H, d, ld, ld, a->causal);
            double t2 = rr_now();
            if (t1 - t0 < best_f) best_f = t1 - t0;
            if (t2 - t1 < best_b) best_b = t2 - t1;
        }
        printf("%-18s %6d %3d %3d %7d %12.0f %9.1f %12.0f %9.1f\n", a->name, T, H, d, a->causal, T / best_f,
               f_fwd / best_f * 1e-9, T / best_b, f_bwd / best_b * 1e-9);
        fflush(stdout);
        free(qkv), free(dqkv), free(out), free(dout), free(lse), free(cu);
    }
}

int main(int argc, char** argv) {
    int threads = 2, gemm = 1, attention = 1, quick = 0, mixed = 1;
    const char* only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--gemm-only") == 0) attention = 0, mixed = 0;
        else if (strcmp(argv[i], "--mixed-only") == 0) attention = 0, gemm = 0;
        else if (strcmp(argv[i], "--attention-only") == 0) gemm = 0, mixed = 0;
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--lib") == 0 && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--threads N] [--gemm-only] [--mixed-only] [--attention-only] [--quick] [--lib blis|openblas]\n", argv[0]);
            return 2;
        }
    }
    /* the engine's own OpenMP loops (attention) and the linked BLIS use the same count */
    char nt[16];
    snprintf(nt, sizeof nt, "%d", threads);
    setenv("OMP_NUM_THREADS", nt, 0);
    printf("rrfp-bench-ops: %ld online CPUs, %d threads, linked BLAS %s\n", sysconf(_SC_NPROCESSORS_ONLN), threads,
           cpu_blas_name());
    if (gemm) bench_gemm(threads, quick, only);
    if (mixed) bench_mixed(threads, only);
    if (attention) bench_attention(quick);
    return 0;
}
