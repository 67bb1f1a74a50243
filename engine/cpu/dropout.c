/* dropout.c — LoRA's dropout on the CPU (BackendOps.dropout_forward / dropout_backward; the mask in
 * engine/cuda/dropout_math.h, shared with the CUDA kernel). */
#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/dropout_math.h"
#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"

static void dropout_forward(float* out, const float* inp, int N, int C, int ld_g, int c0, float p, uint64_t seed,
                            int round) {
    float s = rr_dropout_scale(p);
#pragma omp parallel for schedule(static) if ((size_t)N * C > 65536)
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            size_t j = (size_t)n * C + c;
            float v = rr_dropout_keep(seed, (uint64_t)n * ld_g + c0 + c, p) ? inp[j] * s : 0.0f;
            out[j] = round ? rr_bf16_round(v) : v;
        }
    }
}

void cpu_dropout_forward(const Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p, uint64_t seed) {
    dropout_forward(buf_f32p(out), buf_f32p(inp), N, C, ld_g, c0, p, seed, 0);
}

void cpu_bf16_dropout_forward(const Backend* be, Buf out, Buf inp, int N, int C, int ld_g, int c0, float p,
                              uint64_t seed) {
    dropout_forward(buf_f32p(out), buf_f32p(inp), N, C, ld_g, c0, p, seed, 1);
}

void cpu_dropout_backward(const Backend* be, float* dinp, const float* dout, int N, int C, int ld_g, int c0, float p,
                          uint64_t seed) {
    float s = rr_dropout_scale(p);
#pragma omp parallel for schedule(static) if ((size_t)N * C > 65536)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            if (rr_dropout_keep(seed, (uint64_t)n * ld_g + c0 + c, p)) dinp[(size_t)n * C + c] += dout[(size_t)n * C + c] * s;
}
