/* bf16.c — the CPU backend with the rounding points of bf16 mixed precision (runtime.precision = bf16).
 *
 * The same cpu_* ops as backend_cpu, wrapped so that values are rounded to bf16 (nearest, ties to
 * even: rr_bf16_round from engine/cuda/kernel_math.h, the function the CUDA kernels use) exactly where
 * the GPU path stores bf16 (engine.h, Precision):
 *   - GEMM operands: inp and weight of the forward, dout, inp and weight of the backward (cuBLASLt
 *     reads bf16 A and B and accumulates in f32; BLIS here multiplies the rounded values in f32, so
 *     the products are exact and only the f32 accumulation order differs);
 *   - activations an op writes: linear, LayerNorm, RMSNorm, GELU, SwiGLU, residual add, RoPE,
 *     embedding and attention outputs; the fused linear + GELU rounds its output and its saved
 *     pre-activation after the GELU has read the f32 pre-activation (cuBLASLt's epilogue does);
 *   - nothing else: norm statistics, lse, the softmax inside attention and cross-entropy, the loss,
 *     every gradient (activation gradients are accumulated in f32 by the `+=` contract, weight
 *     gradients are the f32 master gradients), reductions and AdamW stay f32. The bias gradient is
 *     the column sum of the f32 dout.
 * Values stay in f32 words (a bf16 value is exact in f32), so the arithmetic is that of bf16 storage
 * with f32 compute; the memory saving of real bf16 buffers is the CUDA path's business.
 * The GEMM operand copies are taken per call (host malloc): the weights usually arrive already
 * rounded (the ParamTable's bf16 compute copy, engine/params.h) and rounding is idempotent, so the
 * copy is a cost on the CPU reference, never a change of result. */
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"

void cpu_round_bf16(const Backend* be, float* out, const float* inp, size_t n) {
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] = rr_bf16_round(inp[i]);
}

void cpu_to_bf16(const Backend* be, uint16_t* out, const float* inp, size_t n) {
    (void)be;
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] = rr_f32_to_bf16(inp[i]);
}

/* BackendOps.adamw_update_copy: the update (engine/adamw.c), then the copy in the same call */
void cpu_adamw_update_copy(const Backend* be, float* param, const float* grad, float* m, float* v, size_t n,
                           const AdamWConfig* cfg, int t, int decay, Buf copy) {
    adamw_update(param, grad, m, v, n, cfg, t, decay);
    if (copy.dt == DTYPE_BF16)
        cpu_to_bf16(be, buf_bf16p(copy), param, n);
    else
        cpu_round_bf16(be, buf_f32p(copy), param, n);
}

/* a bf16-rounded copy of x (n floats) or NULL when x is NULL; free with free() */
static float* rounded_copy(const float* x, size_t n) {
    if (!x) return NULL;
    float* r = mallocCheck((n ? n : 1) * sizeof(float));
    cpu_round_bf16(&backend_cpu, r, x, n);
    return r;
}

void cpu_bf16_linear_forward(const Backend* be, float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                                int OC) {
    if (N == 0 || OC == 0) return;
    float* xr = rounded_copy(inp, (size_t)N * C);
    float* wr = rounded_copy(weight, (size_t)OC * C);
    cpu_linear_forward(be, out, xr, wr, bias, N, C, OC);
    cpu_round_bf16(be, out, out, (size_t)N * OC);
    free(xr);
    free(wr);
}

void cpu_bf16_linear_backward(const Backend* be, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                 const float* weight, int N, int C, int OC) {
    if (N == 0) return;
    if (dinp || dweight) {
        float* dr = rounded_copy(dout, (size_t)N * OC);
        float* xr = dweight ? rounded_copy(inp, (size_t)N * C) : NULL;
        float* wr = dinp ? rounded_copy(weight, (size_t)OC * C) : NULL;
        cpu_linear_backward(be, dinp, dweight, NULL, dr, xr, wr, N, C, OC);
        free(dr);
        free(xr);
        free(wr);
    }
    if (dbias) cpu_linear_backward(be, NULL, NULL, dbias, dout, inp, weight, N, C, OC);
}

void cpu_bf16_layernorm_forward(const Backend* be, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                   const float* bias, int N, int C) {
    cpu_layernorm_forward(be, out, mean, rstd, inp, weight, bias, N, C);
    cpu_round_bf16(be, out, out, (size_t)N * C);
}

void cpu_bf16_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, int N, int C, double eps) {
    cpu_rmsnorm_forward(be, out, rstd, inp, weight, N, C, eps);
    cpu_round_bf16(be, out, out, (size_t)N * C);
}

void cpu_bf16_gelu_forward(const Backend* be, float* out, const float* inp, size_t n) {
    cpu_gelu_forward(be, out, inp, n);
    cpu_round_bf16(be, out, out, n);
}

/* Linear then GELU as the CUDA bf16 table fuses them (cuBLASLt's GELU_AUX_BIAS epilogue, engine/cuda/
 * bf16.cu): the GEMM on rounded operands with its f32 output and bias, the GELU of that f32
 * pre-activation, then out and pre each rounded to bf16. (The two ops would round pre first.) */
void cpu_bf16_linear_gelu_forward(const Backend* be, float* out, float* pre, const float* inp, const float* weight,
                                  const float* bias, int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    float* xr = rounded_copy(inp, (size_t)N * C);
    float* wr = rounded_copy(weight, (size_t)OC * C);
    size_t n = (size_t)N * OC;
    cpu_linear_forward(be, pre, xr, wr, bias, N, C, OC);
    cpu_gelu_forward(be, out, pre, n);
    cpu_round_bf16(be, out, out, n);
    cpu_round_bf16(be, pre, pre, n);
    free(xr);
    free(wr);
}

void cpu_bf16_swiglu_forward(const Backend* be, float* out, const float* gate, const float* up, size_t n) {
    cpu_swiglu_forward(be, out, gate, up, n);
    cpu_round_bf16(be, out, out, n);
}

void cpu_bf16_add_forward(const Backend* be, float* out, const float* a, const float* b, size_t n) {
    cpu_add_forward(be, out, a, b, n);
    cpu_round_bf16(be, out, out, n);
}

/* the H*d values of each of N rows of stride ld (the columns RoPE wrote) */
static void round_rows(float* x, int N, int W, int ld) {
#pragma omp parallel for if ((size_t)N * W > 65536)
    for (int i = 0; i < N; i++) cpu_round_bf16(&backend_cpu, x + (size_t)i * ld, x + (size_t)i * ld, (size_t)W);
}

void cpu_bf16_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    cpu_rope_forward(be, x, pos, N, H, d, ld, rf);
    round_rows(x, N, H * d, ld);
}

void cpu_bf16_rope_qk_forward(const Backend* be, float* q, float* k, const int* pos, int N, int H, int Hkv, int d, int ld_q,
                              int ld_k, const RopeFreq* rf) {
    cpu_bf16_rope_forward(be, q, pos, N, H, d, ld_q, rf);
    cpu_bf16_rope_forward(be, k, pos, N, Hkv, d, ld_k, rf);
}

void cpu_bf16_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    cpu_rope2d_forward(be, x, pos_row, pos_col, N, H, d, ld);
    round_rows(x, N, H * d, ld);
}

void cpu_bf16_embedding_forward(const Backend* be, float* out, const int* ids, const float* table, int N, int C) {
    cpu_embedding_forward(be, out, ids, table, N, C);
    cpu_round_bf16(be, out, out, (size_t)N * C);
}

void cpu_bf16_attention_forward(const Backend* be, float* out, float* lse, const float* q, const float* k, const float* v,
                                   const int* cu_seqlens, int S, int T, int H, int Hkv, int d, int ld_q, int ld_kv, int causal) {
    cpu_attention_forward(be, out, lse, q, k, v, cu_seqlens, S, T, H, Hkv, d, ld_q, ld_kv, causal);
    cpu_round_bf16(be, out, out, (size_t)T * H * d);
}
