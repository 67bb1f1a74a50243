/* gpu_attn_bench.c — attention over packed samples on the CUDA backend (bench/gpu_attention.sh runs it):
 * forward and backward time and TFLOP/s on the packings of bench/gpu_attention_torch.py (the same list,
 * the same FLOP count), for
 *   table: the bf16 table's attention op (BackendOps.attention_forward / _backward, f32 buffers holding bf16
 *          values): cuDNN's fused attention where it runs, else the own tensor-core kernel; the path that
 *          ran is read from the backend's counters (engine/cuda/attention_path.h) and printed;
 *   bf16:  the own tensor-core kernel on bf16 storage, called directly (rrfp_cuda_flash_attention).
 * Timing: per figure, 5 batches of `reps` calls, each batch between two synchronizes on the host clock, the
 * median batch / reps (warm-up first: cuDNN builds its plans and self-checks on a shape's first call).
 * FLOPs: forward 4 d H sum(len^2) (2 d H len^2 per product, QK^T and PV), halved when causal; backward
 * 2.5 x the forward (5 products), as FlashAttention counts.
 * Output: one line per (packing, path): name, path, T, S, H, d, causal, fwd ms, fwd TFLOP/s, bwd ms,
 * bwd TFLOP/s. Without a device it says so and exits 77.
 *
 * Usage: rrfp-bench-gpu-attn [reps] [packing-name-substring] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "tests/support/cuda_attn_hooks.h"
#include "bench/gpu_timing.h"
#include "tests/support/cuda_emu_entry.h"

typedef struct {
    const char* name;
    int H, d, causal;
    int n;        /* samples */
    int lens[320];
} Packing;

/* bench/gpu_attention_torch.py's PACKINGS: keep the two in step */
static Packing packs[] = {
    {"vit_7x576", 16, 64, 0, 7, {576, 576, 576, 576, 576, 576, 576}},
    {"vit_mixed_64_1024", 16, 64, 0, 6, {64, 256, 576, 1024, 144, 400}},
    {"vit_1024x4", 16, 64, 0, 4, {1024, 1024, 1024, 1024}},
    {"lm_8x512", 32, 128, 1, 8, {512, 512, 512, 512, 512, 512, 512, 512}},
    {"lm_mixed_16_4096", 32, 128, 1, 5, {16, 100, 900, 2000, 1080}},
    {"lm_1x4096", 32, 128, 1, 1, {4096}},
    {"small_2x_d64", 2, 64, 1, 2, {100, 30}}, /* launch-bound; the emulation's check of this program */
    {"synthetic_short", 8, 64, 1, 0, {0}}, /* filled in main: 256 samples of 8..24 tokens */
};

typedef struct {
    const Backend* cu;
    FlashFn flash;
    int bf16; /* 0: the table (f32 buffers), 1: bf16 storage through flash */
    void *qkv, *out, *dout, *dqkv;
    float* lse;
    int* cu_d;
    int S, T, H, d, causal;
} Ctx;

static void fwd(void* p) {
    Ctx* c = (Ctx*)p;
    int hd = c->H * c->d, ld = 3 * hd;
    if (!c->bf16) {
        float* q = (float*)c->qkv;
        c->cu->ops->attention_forward(c->cu, buf_f32((float*)c->out), c->lse, buf_f32(q), buf_f32(q + hd), buf_f32(q + 2 * hd), c->cu_d, c->S, c->T, c->H, c->H, c->d, ld,
                                 ld, c->causal);
    } else {
        Buf q = buf_of(c->qkv, DTYPE_BF16), none = buf_of(NULL, DTYPE_BF16);
        c->flash(0, buf_of(c->out, DTYPE_BF16), none, none, c->lse, none, none, q, buf_at(q, hd), buf_at(q, 2 * (size_t)hd),
                 c->cu_d, c->S, c->T, c->H, c->H, c->d, ld, ld, hd, c->causal);
    }
}
static void bwd(void* p) {
    Ctx* c = (Ctx*)p;
    int hd = c->H * c->d, ld = 3 * hd;
    if (!c->bf16) {
        float *q = (float*)c->qkv, *g = (float*)c->dqkv;
        c->cu->ops->attention_backward(c->cu, g, g + hd, g + 2 * hd, NULL, NULL, NULL, 0, buf_f32((float*)c->dout), buf_f32((float*)c->out), c->lse, buf_f32(q), buf_f32(q + hd), buf_f32(q + 2 * hd),
                                  c->cu_d, c->S, c->T, c->H, c->H, c->d, ld, ld, c->causal);
    } else {
        Buf q = buf_of(c->qkv, DTYPE_BF16), g = buf_of(c->dqkv, DTYPE_BF16);
        c->flash(1, g, buf_at(g, hd), buf_at(g, 2 * (size_t)hd), c->lse, buf_of(c->dout, DTYPE_BF16),
                 buf_of(c->out, DTYPE_BF16), q, buf_at(q, hd), buf_at(q, 2 * (size_t)hd), c->cu_d, c->S, c->T, c->H, c->H,
                 c->d, ld, ld, hd, c->causal);
    }
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    const char* only = argc > 2 ? argv[2] : NULL;
    char why[512] = "";
    const Backend* cu = backend_cuda_get(why, sizeof why);
    if (!cu) {
        printf("gpu_attn_bench: not measured: %s\n", why);
        return 77;
    }
    cu = backend_with_precision(cu, PRECISION_BF16);
    FlashFn flash = flash_fn();
    Packing* syn = &packs[sizeof packs / sizeof packs[0] - 1];
    uint64_t z = 12345;
    for (syn->n = 0; syn->n < 256; syn->n++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        syn->lens[syn->n] = 8 + (int)((z >> 33) % 17);
    }
    printf("%-20s %-14s %6s %4s %3s %4s %3s %9s %8s %9s %8s\n", "packing", "path", "T", "S", "H", "d", "cau", "fwd_ms",
           "fwd_TF", "bwd_ms", "bwd_TF");
    for (size_t pi = 0; pi < sizeof packs / sizeof packs[0]; pi++) {
        Packing* pk = &packs[pi];
        if (only && !strstr(pk->name, only)) continue;
        int S = pk->n, H = pk->H, d = pk->d, cu_seqlens[321] = {0};
        double sq = 0;
        for (int s = 0; s < S; s++) cu_seqlens[s + 1] = cu_seqlens[s] + pk->lens[s], sq += (double)pk->lens[s] * pk->lens[s];
        int T = cu_seqlens[S], hd = H * d;
        double fwd_flop = 4.0 * d * H * sq * (pk->causal ? 0.5 : 1.0), bwd_flop = 2.5 * fwd_flop;
        size_t nqkv = (size_t)T * 3 * hd, nout = (size_t)T * hd;
        float* h = (float*)malloc(nqkv * sizeof(float));
        uint16_t* h16 = (uint16_t*)malloc(nqkv * sizeof(uint16_t));
        for (size_t i = 0; i < nqkv; i++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = rr_bf16_round((float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0));
            h16[i] = rr_f32_to_bf16(h[i]);
        }
        AttnReserve ar = {.max_T = T, .max_S = S, .H = H, .d = d, .ld_qkv = 3 * hd};
        cu->dev->reserve(cu, 0, 0, &ar, 1);
        int* cu_d = (int*)cu->dev->alloc((size_t)(S + 1) * sizeof(int));
        cu->dev->copy_h2d(cu, cu_d, cu_seqlens, (size_t)(S + 1) * sizeof(int));
        for (int mode = 0; mode < 2; mode++) {
            if (mode == 1 && !flash) continue;
            size_t es = mode ? 2 : 4;
            Ctx c = {cu, flash, mode, NULL, NULL, NULL, NULL, NULL, cu_d, S, T, H, d, pk->causal};
            c.qkv = cu->dev->alloc(nqkv * es);
            c.dqkv = cu->dev->alloc(nqkv * es);
            c.out = cu->dev->alloc(nout * es);
            c.dout = cu->dev->alloc(nout * es);
            c.lse = (float*)cu->dev->alloc((size_t)T * H * sizeof(float));
            cu->dev->copy_h2d(cu, c.qkv, mode ? (void*)h16 : (void*)h, nqkv * es);
            cu->dev->copy_h2d(cu, c.dout, mode ? (void*)h16 : (void*)h, nout * es); /* the first rows of qkv: any values */
            cu->dev->copy_h2d(cu, c.dqkv, mode ? (void*)h16 : (void*)h, nqkv * es);
            long p0[RR_ATTN_PATHS] = {0}, p1[RR_ATTN_PATHS] = {0}, p2[RR_ATTN_PATHS] = {0};
            attn_paths(p0);
            double tf = time_ms(cu, fwd, &c, 3, reps);
            attn_paths(p1);
            double tb = time_ms(cu, bwd, &c, 3, reps);
            attn_paths(p2);
            char path[64];
            if (mode)
                snprintf(path, sizeof path, "own_tc_bf16");
            else
                snprintf(path, sizeof path, "%s/%s",
                         p1[RR_ATTN_CUDNN_FWD] > p0[RR_ATTN_CUDNN_FWD] ? "cudnn" : "own_tc",
                         p2[RR_ATTN_CUDNN_BWD] > p1[RR_ATTN_CUDNN_BWD] ? "cudnn" : "own_tc");
            printf("%-20s %-14s %6d %4d %3d %4d %3d %9.3f %8.1f %9.3f %8.1f\n", pk->name, path, T, S, H, d, pk->causal, tf,
                   fwd_flop / tf * 1e-9, tb, bwd_flop / tb * 1e-9);
            fflush(stdout);
            cu->dev->free(c.qkv), cu->dev->free(c.dqkv), cu->dev->free(c.out), cu->dev->free(c.dout), cu->dev->free(c.lse);
        }
        cu->dev->free(cu_d);
        free(h), free(h16);
    }
    /* which backward the own kernel ran (RRFP_FA_BWD, RRFP_FA_DKDV_WARPS: engine/cuda/flash_attention.cu) */
    FlashBwdInfoFn bwd_info = flash_bwd_info_fn();
    if (bwd_info) {
        int version = 0, warps = 0, dqk = 0, lpt = 0;
        bwd_info(&version, &warps, &dqk, &lpt);
        printf("own kernel's backward: v%d (last call: dk/dv blocks of %d warps, dq kernel %s, %s order)\n", version,
               warps, dqk == 2 ? "dq2 (double buffers)" : dqk == 1 ? "dq3 (single buffers)" : "v1's",
               lpt ? "longest-first" : "sample");
    }
    return 0;
}
