/* gpu_bw_bench.c — the CUDA backend's bandwidth-bound ops at a stage's shapes (docs/cuda.md,
 * "Bandwidth-bound kernels"): time, achieved GB/s and the share of a peak bandwidth, per op, on the
 * bf16 table on 2-byte activations (f32 gradients, as a stage runs under runtime.precision = bf16).
 *   lm:  bench/gpu_stage.sh's LM stage: 4096 tokens, D 4096, F 11008 (Llama-2 7B width), 4 blocks' parameters
 *        for the gradient norm;
 *   vit: CLIP-L: 7 images of 576 patches (4032 rows), D 1024, MLP 4096;
 *   small: a launch-bound size, the emulation's check of this program.
 * Ops: RMSNorm / LayerNorm forward, their weight gradients alone (the split backward's W: the column sums),
 * SwiGLU / GELU forward, the residual add, and sum_squares over the stage's parameters (the gradient norm:
 * chunk sums, then their serial total). Bytes: the least each op must move (tests/engine/cuda/test_traffic.c's budgets:
 * an activation 2 bytes, a gradient or statistic 4), so GB/s is the useful bandwidth.
 * Timing: 5 batches of `reps` calls between two synchronizes on the host clock, the median batch / reps
 * (after a warm-up). Without a device it says so and exits 77.
 *
 * Usage: rrfp-bench-gpu-bw [reps] [shape-name-substring] [peak GB/s, default 3350 (H100 SXM)] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "bench/gpu_timing.h"
#include "tests/support/cuda_emu_entry.h"

typedef struct {
    const char* name;
    int N, D, F, Dv, Fv; /* LM rows and widths; the ViT's widths (0: no ViT ops) */
    size_t params;       /* values of the gradient norm */
} Shape;
static const Shape shapes[] = {
    {"lm", 4096, 4096, 11008, 0, 0, (size_t)4 * (4 * 4096 * 4096 + 3 * 4096 * 11008)},
    {"vit", 4032, 0, 0, 1024, 4096, (size_t)24 * (4 * 1024 * 1024 + 2 * 1024 * 4096)},
    {"small", 64, 256, 688, 128, 512, (size_t)3 * 65536 + 5},
};

typedef struct {
    const Backend* be;
    int op, N, C;
    size_t n;
    float *x, *y, *z, *w, *b, *st1, *st2, *g, *gw, *gb;
} Ctx;
enum { RMS_F, RMS_W, LN_F, LN_W, SWIGLU_F, GELU_F, ADD_F, SUMSQ };
static const char* op_name[] = {"rmsnorm_forward", "rmsnorm_dweight", "layernorm_forward", "layernorm_dweight_dbias",
                                "swiglu_forward", "gelu_forward", "add_forward", "sum_squares"};
static volatile double sink;

static void call(Ctx* c) {
    const Backend* be = c->be;
    switch (c->op) {
    case RMS_F: be->ops->rmsnorm_forward(be, buf_of(c->y, DTYPE_BF16), c->st1, buf_of(c->x, DTYPE_BF16), c->w, c->N, c->C, 1e-5); break;
    case RMS_W: be->ops->rmsnorm_backward(be, NULL, NULL, c->gw, c->g, buf_of(c->x, DTYPE_BF16), c->w, c->st1, c->N, c->C); break;
    case LN_F: be->ops->layernorm_forward(be, buf_of(c->y, DTYPE_BF16), c->st1, c->st2, buf_of(c->x, DTYPE_BF16), c->w, c->b, c->N, c->C); break;
    case LN_W: be->ops->layernorm_backward(be, NULL, NULL, c->gw, c->gb, c->g, buf_of(c->x, DTYPE_BF16), c->w, c->st1, c->st2, c->N, c->C); break;
    case SWIGLU_F: be->ops->swiglu_forward(be, buf_of(c->z, DTYPE_BF16), buf_of(c->x, DTYPE_BF16), buf_of(c->y, DTYPE_BF16), c->n); break;
    case GELU_F: be->ops->gelu_forward(be, buf_of(c->y, DTYPE_BF16), buf_of(c->x, DTYPE_BF16), c->n); break;
    case ADD_F: be->ops->add_forward(be, buf_of(c->z, DTYPE_BF16), buf_of(c->x, DTYPE_BF16), buf_of(c->y, DTYPE_BF16), c->n); break;
    case SUMSQ: sink = be->ops->sum_squares(be, c->g, c->n); break;
    }
}
static void call_v(void* c) { call((Ctx*)c); }
/* the least bytes an op moves (activations 2 bytes, gradients / statistics / 1-D weights 4) */
static double op_bytes(const Ctx* c) {
    double N = c->N, C = c->C, n = (double)c->n;
    switch (c->op) {
    case RMS_F: return 2 * N * C * 2 + C * 4 + N * 4;
    case RMS_W: return N * C * (4 + 2) + N * 4 + 2 * C * 4;
    case LN_F: return 2 * N * C * 2 + 2 * C * 4 + 2 * N * 4;
    case LN_W: return N * C * (4 + 2) + 2 * N * 4 + 4 * C * 4;
    case SWIGLU_F: return 3 * n * 2;
    case GELU_F: return 2 * n * 2;
    case ADD_F: return 3 * n * 2;
    case SUMSQ: return n * 4;
    }
    return 0;
}
/* device buffer of `bytes`, filled with small values (bf16 words or f32: both read as finite numbers) */
static float* dev(const Backend* be, size_t bytes, int bf16) {
    size_t n = bf16 ? bytes / 2 : bytes / 4;
    void* h = malloc(bytes ? bytes : 4);
    if (!h) {
        fprintf(stderr, "gpu_bw_bench: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        float v = (float)((int)(i % 97) - 48) / 64.0f;
        if (bf16)
            ((uint16_t*)h)[i] = rr_f32_to_bf16(v);
        else
            ((float*)h)[i] = v;
    }
    float* d = be->dev->alloc(bytes ? bytes : 4);
    be->dev->copy_h2d(be, d, h, bytes);
    free(h);
    return d;
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    const char* only = argc > 2 && argv[2][0] ? argv[2] : NULL;
    double peak = argc > 3 ? atof(argv[3]) : 3350.0;
    if (reps < 1) reps = 1;
    char why[512] = "";
    const Backend* cu = backend_cuda_get(why, sizeof why);
    if (!cu) {
        printf("gpu_bw_bench: not measured: %s\n", why);
        return 77;
    }
    const Backend* b16 = backend_with_precision(cu, PRECISION_BF16);
    const Backend* be = b16;
    if (!be || !be->ops->bf16_activations) {
        printf("gpu_bw_bench: FAIL: the CUDA bf16 table takes no 2-byte activations\n");
        return 1;
    }
    printf("# gpu_bw_bench: %s, bf16 table on 2-byte activations, median of 5 x %d calls, peak %.0f GB/s\n", be->dev->name, reps, peak);
    printf("%-6s %-24s %8s %8s %10s %10s %9s %6s\n", "shape", "op", "N", "C", "MB", "ms", "GB/s", "peak");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const Shape* sh = &shapes[s];
        if (only ? !strstr(sh->name, only) : !strcmp(sh->name, "small")) continue; /* small: asked for by name */
        int widths[2] = {sh->D, sh->Dv}, ffn[2] = {sh->F, sh->Fv};
        for (int part = 0; part < 2; part++) {
            int C = widths[part], F = ffn[part], N = sh->N;
            if (C == 0) continue;
            size_t nf = (size_t)N * F, nc = (size_t)N * C, big = nf > nc ? nf : nc;
            Ctx c = {be, 0, N, C, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
            c.x = dev(be, big * 2, 1), c.y = dev(be, big * 2, 1), c.z = dev(be, big * 2, 1);
            c.w = dev(be, (size_t)C * 4, 0), c.b = dev(be, (size_t)C * 4, 0), c.gw = dev(be, (size_t)C * 4, 0);
            c.gb = dev(be, (size_t)C * 4, 0), c.st1 = dev(be, (size_t)N * 4, 0), c.st2 = dev(be, (size_t)N * 4, 0);
            c.g = dev(be, nc * 4, 0);
            /* statistics from a forward first (rstd / mean of these rows) */
            int ops_lm[] = {RMS_F, RMS_W, SWIGLU_F, ADD_F}, ops_vit[] = {LN_F, LN_W, GELU_F, ADD_F};
            for (int k = 0; k < 4; k++) {
                c.op = part == 0 ? ops_lm[k] : ops_vit[k];
                c.n = c.op == SWIGLU_F || c.op == GELU_F ? nf : nc;
                c.C = c.op == SWIGLU_F || c.op == GELU_F ? F : C;
                if (c.op == RMS_W || c.op == LN_W) { /* the statistics the weight gradient reads */
                    Ctx f = c;
                    f.op = c.op == RMS_W ? RMS_F : LN_F;
                    call(&f);
                }
                double ms = time_ms(c.be, call_v, &c, 2, reps), bytes = op_bytes(&c);
                printf("%-6s %-24s %8d %8d %10.1f %10.4f %9.0f %5.0f%%\n", sh->name, op_name[c.op], N, c.C, bytes / 1e6, ms,
                       bytes / (ms * 1e6), 100.0 * bytes / (ms * 1e6) / peak);
                fflush(stdout);
            }
            be->dev->free(c.x), be->dev->free(c.y), be->dev->free(c.z), be->dev->free(c.w), be->dev->free(c.b), be->dev->free(c.gw);
            be->dev->free(c.gb), be->dev->free(c.st1), be->dev->free(c.st2), be->dev->free(c.g);
        }
        /* the gradient norm over the stage's parameters (f32 gradients) */
        Ctx c = {be, SUMSQ, 0, 0, sh->params, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        c.g = dev(be, sh->params * 4, 0);
        double ms = time_ms(c.be, call_v, &c, 2, reps < 5 ? reps : 5), bytes = op_bytes(&c);
        printf("%-6s %-24s %8zu %8s %10.1f %10.4f %9.0f %5.0f%%  (%zu chunk sums in the serial total)\n", sh->name,
               op_name[SUMSQ], sh->params, "-", bytes / 1e6, ms, bytes / (ms * 1e6), 100.0 * bytes / (ms * 1e6) / peak,
               rr_sumsq_chunks(sh->params));
        be->dev->free(c.g);
    }
    printf("gpu_bw_bench: done\n");
    return 0;
}
