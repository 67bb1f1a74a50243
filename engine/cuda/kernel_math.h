/* kernel_math.h — the per-element and per-row math of the CUDA kernels, shared with the C compiler.
 *
 * Every function here is `RR_HD static inline`: __host__ __device__ under nvcc, plain static inline
 * in C. The CUDA kernels compute each value only through these functions, and
 * tests/engine/cuda/test_kernel_math.c (built in both builds, run on every machine) recomputes every op
 * row by row / element by element through the same functions and checks the results against the
 * CPU backend. No machine here has a GPU, so this is how the kernels' arithmetic is tested here;
 * the indexing, barriers and launches are tested by running the kernels' source on a CPU emulation
 * of the CUDA runtime (tests/support/cuda_emu, test_cuda_ops_emu), and on a device by test_cuda_ops (label
 * `gpu`).
 *
 * Only expf / sqrtf / logf / pow / sqrt / cos / sin libm calls appear: they exist on both sides
 * with the same meaning (nvcc must not be given --use_fast_math, which would swap in __expf).
 * RoPE angles are computed in double on both sides, like engine/cpu/rope.c: t * freq reaches
 * thousands of radians and float would lose ~1e-4 rad there. */
#ifndef RRFP_KERNEL_MATH_H
#define RRFP_KERNEL_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define RR_HD __host__ __device__
#else
#define RR_HD
#endif

#define RR_LAYERNORM_EPS 1e-5f
#define RR_RMSNORM_EPS 1e-5f /* the default of model.rms_eps */
#define RR_ROPE_THETA 10000.0 /* the ViT's 2-D RoPE, and the default of model.rope_base */
#define RR_CE_IGNORE_INDEX (-100)
#define RR_GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define RR_GELU_CUBIC 0.044715f

/* ------------------------------------------------------------------------------------------------
 * GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
 * computed as x sigmoid(2u) (0.5 (1 + tanh(u)) = sigmoid(2u)), as engine/cpu/gelu.c does: one expf
 * instead of tanhf, and for very negative x exp(-2u) overflows to inf and the result is -0. */

RR_HD static inline float rr_gelu_tanh(float x) {
    float u = RR_GELU_SCALE * (x + RR_GELU_CUBIC * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

/* d/dx [x s(2u)] = s + 2 x s (1 - s) du/dx */
RR_HD static inline float rr_gelu_tanh_grad(float x) {
    float u = RR_GELU_SCALE * (x + RR_GELU_CUBIC * x * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    float du_dx = RR_GELU_SCALE * (1.0f + 3.0f * RR_GELU_CUBIC * x * x);
    return s + 2.0f * x * s * (1.0f - s) * du_dx;
}

/* ------------------------------------------------------------------------------------------------
 * The CLIP tower's activations (BackendOps.act_forward, engine/cpu/act.c), computed in double and rounded
 * once (erf and exp of double exist on both sides with the same meaning):
 *   exact GELU  x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)),  d/dx = Phi(x) + x phi(x);
 *   QuickGELU   x sigmoid(1.702 x),                     d/dx = s + 1.702 x s (1 - s). */

#define RR_QUICK_GELU_K 1.702
RR_HD static inline float rr_gelu_erf(float xf) {
    double x = xf;
    return (float)(0.5 * x * (1.0 + erf(x * 0.70710678118654752440)));
}
RR_HD static inline double rr_gelu_erf_grad(float xf) {
    double x = xf;
    return 0.5 * (1.0 + erf(x * 0.70710678118654752440)) + x * 0.3989422804014327 * exp(-0.5 * x * x);
}
RR_HD static inline float rr_quick_gelu(float xf) {
    double x = xf;
    return (float)(x / (1.0 + exp(-RR_QUICK_GELU_K * x)));
}
RR_HD static inline double rr_quick_gelu_grad(float xf) {
    double x = xf, s = 1.0 / (1.0 + exp(-RR_QUICK_GELU_K * x));
    return s + RR_QUICK_GELU_K * x * s * (1.0 - s);
}

/* ------------------------------------------------------------------------------------------------
 * SiLU and SwiGLU: out = silu(gate) * up, silu(g) = g sigmoid(g) */

RR_HD static inline float rr_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
RR_HD static inline float rr_silu(float g) { return g * rr_sigmoid(g); }
/* d silu / dg = sig (1 + g (1 - sig)) */
RR_HD static inline float rr_silu_grad(float g) {
    float s = rr_sigmoid(g);
    return s * (1.0f + g * (1.0f - s));
}
RR_HD static inline float rr_swiglu(float gate, float up) { return rr_silu(gate) * up; }
/* Gradients of one element: *dgate_inc and *dup_inc are the amounts to ADD. */
RR_HD static inline void rr_swiglu_grad(float dout, float gate, float up, float* dgate_inc, float* dup_inc) {
    *dgate_inc = dout * up * rr_silu_grad(gate);
    *dup_inc = dout * rr_silu(gate);
}

/* ------------------------------------------------------------------------------------------------
 * RoPE (GPT-NeoX rotate-half). For a vector of dim n at position t, pair j < n/2 is (x[j], x[j+n/2]),
 * rotated by angle t * theta^(-2j/n). sign = +1 forward, -1 backward (the inverse rotation). */

RR_HD static inline void rr_rope_cos_sin(int pos, int j, int n, double sign, double theta, float* c, float* s) {
    double angle = sign * (double)pos * pow(theta, -2.0 * j / n);
    *c = (float)cos(angle);
    *s = (float)sin(angle);
}

/* The frequency of pair j < n/2 of the LM's RoPE (engine.h's RopeFreq, spelled out so that this header
 * needs no struct): theta^(-2j/n), and with llama3 != 0 Llama-3's rescaling by factor between the
 * wavelengths L / high_freq_factor and L / low_freq_factor (L = original_max_pos), as transformers'
 * _compute_llama3_parameters. */
RR_HD static inline double rr_rope_inv_freq(int j, int n, double theta, int llama3, double factor, double low_freq_factor,
                                            double high_freq_factor, double original_max_pos) {
    double inv = pow(theta, -2.0 * j / n);
    if (!llama3) return inv;
    double wavelen = 2.0 * 3.14159265358979323846 / inv;
    if (wavelen < original_max_pos / high_freq_factor) return inv;       /* high frequencies: kept */
    if (wavelen > original_max_pos / low_freq_factor) return inv / factor; /* low frequencies: slowed by factor */
    double smooth = (original_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1.0 - smooth) * inv / factor + smooth * inv;
}

/* cos and sin of sign * pos * inv_freq (the angle in double, as rr_rope_cos_sin) */
RR_HD static inline void rr_rope_cos_sin_freq(int pos, double sign, double inv_freq, float* c, float* s) {
    double angle = sign * (double)pos * inv_freq;
    *c = (float)cos(angle);
    *s = (float)sin(angle);
}

/* (a, b) <- (a c - b s, b c + a s) */
RR_HD static inline void rr_rope_rotate_pair(float* a, float* b, float c, float s) {
    float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * s;
    *b = x1 * c + x0 * s;
}

/* ------------------------------------------------------------------------------------------------
 * LayerNorm / RMSNorm. The reductions (sums over a row) are done by the caller (a loop on the CPU,
 * a block reduction on the GPU); these functions turn the sums into statistics and apply them. */

/* mean of a row from its sum */
RR_HD static inline float rr_layernorm_mean(float sum, int C) { return sum / (float)C; }
/* rstd from the sum of squared deviations from the mean (two-pass: no E[x^2] - E[x]^2 cancellation) */
RR_HD static inline float rr_layernorm_rstd(float sum_sq_dev, int C) {
    return 1.0f / sqrtf(sum_sq_dev / (float)C + RR_LAYERNORM_EPS);
}
RR_HD static inline float rr_layernorm_out(float x, float mean, float rstd, float w, float b) {
    return (x - mean) * rstd * w + b;
}
/* With xhat = (x - mean) rstd and g = dout w: dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)).
 * g_mean = sum_c g / C, gx_mean = sum_c g xhat / C are the caller's row reductions. */
RR_HD static inline float rr_layernorm_dx(float dout, float x, float w, float mean, float rstd, float g_mean,
                                          float gx_mean) {
    float xhat = (x - mean) * rstd;
    return rstd * (dout * w - g_mean - xhat * gx_mean);
}

/* rstd from the row's sum of squares */
RR_HD static inline float rr_rmsnorm_rstd(float sum_sq, int C, float eps) { return 1.0f / sqrtf(sum_sq / (float)C + eps); }
RR_HD static inline float rr_rmsnorm_out(float x, float rstd, float w) { return x * rstd * w; }
/* d/dx_i of sum_j g_j x_j r (g = dout w, r = rstd) = r g_i - x_i r^3 gx_mean, gx_mean = sum_j g_j x_j / C */
RR_HD static inline float rr_rmsnorm_dx(float dout, float x, float w, float rstd, float gx_mean) {
    return rstd * dout * w - x * (gx_mean * rstd * rstd * rstd);
}

/* ------------------------------------------------------------------------------------------------
 * Online softmax (FlashAttention). A running state (m, l) over the scores seen so far: m = max,
 * l = sum exp(s - m). Adding a block of scores whose max is m_blk: the new max is max(m, m_blk), and
 * everything accumulated under the old max (l and the output accumulator) is multiplied by
 * rr_online_softmax_rescale(m_old, m_new). m starts at -INFINITY, l at 0. */

RR_HD static inline float rr_online_softmax_rescale(float m_old, float m_new) {
    /* exp(-inf - x) = 0 is what we want, but -inf - (-inf) = NaN: an empty state rescales to 0 */
    return m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
}
/* Raise the state's max to cover a block of scores whose max is m_blk: sets *m to the new max and
 * returns the factor by which l and the output accumulator must be multiplied. */
RR_HD static inline float rr_online_softmax_raise(float* m, float m_blk) {
    float m_new = m_blk > *m ? m_blk : *m;
    float corr = rr_online_softmax_rescale(*m, m_new);
    *m = m_new;
    return corr;
}
/* The weight of score s under max m (a masked score is -INFINITY and weighs 0). */
RR_HD static inline float rr_online_softmax_weight(float s, float m) { return s == -INFINITY ? 0.0f : expf(s - m); }
/* Fold one score s into (m, l): the block form above with a block of one. Returns the factor the
 * output accumulator must be multiplied by before p (the weight of s, written to *p) times the
 * score's value is added. */
RR_HD static inline float rr_online_softmax_update(float* m, float* l, float s, float* p) {
    float corr = rr_online_softmax_raise(m, s);
    *p = rr_online_softmax_weight(s, *m);
    *l = *l * corr + *p;
    return corr;
}
/* The log-sum-exp of the state (what attention saves for the backward). */
RR_HD static inline float rr_online_softmax_lse(float m, float l) { return m + logf(l); }

/* Attention backward of one score: with p = exp(s - lse), dp = dout . v_j and D = dout . out,
 * ds = p (dp - D) is the gradient of the (unscaled-by-1/sqrt(d)) score. */
RR_HD static inline float rr_attention_dscore(float p, float dp, float D) { return p * (dp - D); }

/* ------------------------------------------------------------------------------------------------
 * Cross-entropy: gradient of one logit, scale * (softmax - onehot). */

RR_HD static inline float rr_ce_dlogit(float logit, float lse, int is_target, float scale) {
    return scale * (expf(logit - lse) - (is_target ? 1.0f : 0.0f));
}
/* lse of a row from its max and sum exp(z - max) */
RR_HD static inline float rr_ce_lse(float zmax, float sum_exp) { return zmax + logf(sum_exp); }

/* ------------------------------------------------------------------------------------------------
 * bf16 storage (the GPU path stores weights / activations as bf16, computes in f32).
 * f32 -> bf16 rounds to nearest, ties to even, as PyTorch and CUDA's __float2bfloat16_rn do;
 * NaN stays a (quiet) NaN, +-inf stay +-inf, and values past the largest bf16 round to +-inf. */

RR_HD static inline uint32_t rr_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
RR_HD static inline float rr_bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
RR_HD static inline uint16_t rr_f32_to_bf16(float x) {
    uint32_t u = rr_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep sign, set quiet */
    /* add 0x7fff plus the lowest kept bit: rounds half to even; a carry into the exponent is right
     * (it rounds up to the next binade, or to inf past the largest finite bf16) */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
RR_HD static inline float rr_bf16_to_f32(uint16_t h) { return rr_bits_f32((uint32_t)h << 16); }
/* x rounded to bf16 and held in f32 (the rounding point of runtime.precision = bf16, both backends) */
RR_HD static inline float rr_bf16_round(float x) { return rr_bf16_to_f32(rr_f32_to_bf16(x)); }

/* ------------------------------------------------------------------------------------------------
 * The step end: sum of squares (the global gradient norm) and AdamW.
 *
 * Sum of squares of n floats in double: x is cut into fixed chunks (64Ki values each; when
 * n <= 64Ki, 64 chunks with boundaries n c / 64, the layout the CPU has always used for small
 * tensors), each chunk is summed (the CPU in index order, the GPU in a fixed tree), and the chunk
 * sums are added in chunk order. A float squared is exact in double (48 significant bits), so an
 * FMA contraction of `acc + x * x` changes nothing. */

#define RR_SUMSQ_CHUNK ((size_t)65536)
#define RR_SUMSQ_SMALL_CHUNKS ((size_t)64)

RR_HD static inline size_t rr_sumsq_chunks(size_t n) {
    return n <= RR_SUMSQ_CHUNK ? RR_SUMSQ_SMALL_CHUNKS : (n + RR_SUMSQ_CHUNK - 1) / RR_SUMSQ_CHUNK;
}
/* Chunk c of rr_sumsq_chunks(n): values [*i0, *i1) (may be empty when n < 64). */
RR_HD static inline void rr_sumsq_chunk_range(size_t n, size_t c, size_t* i0, size_t* i1) {
    if (n <= RR_SUMSQ_CHUNK) {
        *i0 = n * c / RR_SUMSQ_SMALL_CHUNKS;
        *i1 = n * (c + 1) / RR_SUMSQ_SMALL_CHUNKS;
    } else {
        *i0 = c * RR_SUMSQ_CHUNK;
        *i1 = *i0 + RR_SUMSQ_CHUNK < n ? *i0 + RR_SUMSQ_CHUNK : n;
    }
}
RR_HD static inline double rr_sumsq_term(float x) { return (double)x * x; }
/* The chunk sums added in chunk order. */
RR_HD static inline double rr_sumsq_partials(const double* part, size_t nc) {
    double s = 0.0;
    for (size_t c = 0; c < nc; c++) s += part[c];
    return s;
}

/* AdamW (torch.optim.AdamW, single-tensor path; the formula is in engine/adamw.c's header). The
 * step's scalars are computed once, in double as PyTorch does with Python floats, then rounded: */
typedef struct {
    float step_size;      /* lr / (1 - beta1^t) */
    float bc2_sqrt;       /* sqrt(1 - beta2^t) */
    float keep;           /* 1 - lr * wd with decay, else 1 */
    float beta1, beta2, eps;
    float one_minus_beta1, one_minus_beta2; /* 1 - beta in double, then rounded */
} RrAdamwStep;

RR_HD static inline RrAdamwStep rr_adamw_step(float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                                              int decay) {
    RrAdamwStep c;
    double bc1 = 1.0 - pow(beta1, t);
    double bc2 = 1.0 - pow(beta2, t);
    c.step_size = (float)(lr / bc1);
    c.bc2_sqrt = (float)sqrt(bc2);
    c.keep = decay ? (float)(1.0 - (double)lr * weight_decay) : 1.0f;
    c.beta1 = beta1, c.beta2 = beta2, c.eps = eps;
    c.one_minus_beta1 = (float)(1.0 - (double)beta1);
    c.one_minus_beta2 = (float)(1.0 - (double)beta2);
    return c;
}
/* One element: m, v from the gradient g, then the parameter. In f32, PyTorch's order of operations. */
RR_HD static inline void rr_adamw_element(float* p, float* m, float* v, float g, const RrAdamwStep* c) {
    float mi = c->beta1 * *m + c->one_minus_beta1 * g;
    float vi = c->beta2 * *v + c->one_minus_beta2 * g * g;
    *m = mi;
    *v = vi;
    *p = *p * c->keep - c->step_size * mi / (sqrtf(vi) / c->bc2_sqrt + c->eps);
}

#endif
