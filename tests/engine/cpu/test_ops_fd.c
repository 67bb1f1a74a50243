/* test_ops_fd.c — every CPU op against an independent double-precision reference, forward and backward.
 *
 * A table of cases (ggml test-backend-ops style): each entry names the op, its shapes and its error
 * bounds. For every case:
 *   1. random f32 inputs (the double reference sees exactly the same values);
 *   2. forward: the f32 op against the double reference written here (outputs and saved statistics);
 *   3. backward: with loss = sum(out * R), R random, the f32 backward against central finite
 *      differences of the double reference; run again onto gradient buffers pre-filled with random
 *      values, it must give those values plus the same gradient (backward ADDS);
 *   4. forward and backward give the same bits with 1 and 2 threads (all ops but linear). A `split` case runs the backward twice with complementary NULL gradient
 *      pointers (input gradient only, then weight gradients only); the two must sum to the full one.
 * Errors are normalised per tensor: max |f32 - ref| / max |ref|.
 *
 * Usage: test_ops_fd [case-name-substring]   (prints one line per case; exit 1 on any failure) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

static const RopeFreq RF_DEFAULT = {.theta = 10000.0}; /* the LM's RoPE at its default theta, unscaled */
/* Llama-3.1's scaling (factor 8, low 1, high 4) with original_max_pos 2048 so that a head of dim 32 at
 * theta 500000 has pairs in all three bands (wavelengths 6 .. 3.3e5: kept below 512, scaled above 2048,
 * smoothed between) */
static const RopeFreq RF_LLAMA3 = {.theta = 500000.0, .llama3 = 1, .factor = 8.0, .low_freq_factor = 1.0,
                                   .high_freq_factor = 4.0, .original_max_pos = 2048.0};

/* ------------------------------------------------------------------------------------------------
 * The table */

typedef enum {
    OP_LINEAR,    /* N, C, OC */
    OP_LAYERNORM, /* N, C */
    OP_RMSNORM,   /* N, C */
    OP_GELU,      /* N*C values */
    OP_SWIGLU,    /* N*C values */
    OP_ADD,       /* N*C values (forward only: its backward is the identity, done by the caller) */
    OP_ROPE,      /* N rows, H heads of dim d, row stride ld */
    OP_ROPE2D,    /* same */
    OP_EMBEDDING, /* N ids into a (OC = V, C) table */
    OP_CE,        /* N rows of C = V logits */
    OP_GELU_ERF,  /* N*C values: act_forward(ACT_GELU_ERF) */
    OP_QUICK_GELU, /* N*C values: act_forward(ACT_QUICK_GELU) */
    OP_GATHER,    /* rows_gather: N rows of C from an (OC, C) table, H = K taps per row */
} OpKind;

enum {
    CASE_NO_BIAS = 1,  /* linear: bias NULL */
    CASE_SPLIT = 2,    /* backward split into input-gradient and weight-gradient calls */
    CASE_IGNORE = 4,   /* cross-entropy: some targets are -100 */
    CASE_INPLACE = 8,  /* forward with out == first input */
    CASE_ALL_IGN = 16, /* cross-entropy: every target is -100 (loss 0, no gradient) */
    CASE_LLAMA3 = 32,  /* 1-D RoPE with RF_LLAMA3: theta 500000 and Llama-3's frequency scaling */
    CASE_QK = 64,      /* 1-D RoPE through rope_qk_*: q the first H - 1 heads of each row, k the last (its own pointer,
                        * the same stride), so the reference is the rotation of all H heads */
};

typedef struct {
    const char* name;
    OpKind op;
    int N, C, OC;
    int H, d, ld; /* RoPE only */
    int flags;
    double fwd_tol, bwd_tol;
} OpCase;

/* Tolerances (normalised errors, see norm_err). f32 has eps = 1.2e-7. Correct f32 code measures a few
 * eps here on every case (largest seen: 6e-7, cross-entropy's backward, whose softmax rounds twice);
 * the bounds leave ~3-10x for other BLAS kernels and thread counts: 2e-6 for forwards that sum over
 * C (linear, norms, cross-entropy), 1e-6 for elementwise forwards, 5e-6 for backwards (the norms'
 * backward subtracts two means and cross-entropy's subtracts the one-hot). Finite differences of the
 * double reference (h = 1e-4, truncation ~h^2 = 1e-8 relative) are exact at this scale. A real
 * gradient bug (a missing term, a wrong sign, a skipped or doubled row) gives errors above 1e-2.
 * RoPE's angles reach 4000 rad: they are computed in double and rounded once, so RoPE keeps the
 * elementwise bound. Embedding's forward is a copy and must be exact. */
static const OpCase CASES[] = {
    {"linear_small", OP_LINEAR, 5, 7, 3, 0, 0, 0, 0, 2e-6, 5e-6},
    {"linear_N1", OP_LINEAR, 1, 13, 11, 0, 0, 0, 0, 2e-6, 5e-6},
    {"linear_odd", OP_LINEAR, 37, 45, 29, 0, 0, 0, 0, 2e-6, 5e-6},
    {"linear_nobias", OP_LINEAR, 9, 19, 6, 0, 0, 0, CASE_NO_BIAS, 2e-6, 5e-6},
    {"linear_split", OP_LINEAR, 17, 23, 31, 0, 0, 0, CASE_SPLIT, 2e-6, 5e-6},
    {"linear_split_nobias", OP_LINEAR, 8, 12, 5, 0, 0, 0, CASE_SPLIT | CASE_NO_BIAS, 2e-6, 5e-6},
    {"linear_parallel", OP_LINEAR, 130, 24, 128, 0, 0, 0, 0, 2e-6, 5e-6},
    {"layernorm_N1", OP_LAYERNORM, 1, 13, 0, 0, 0, 0, 0, 2e-6, 5e-6},
    {"layernorm_odd", OP_LAYERNORM, 11, 37, 0, 0, 0, 0, 0, 2e-6, 5e-6},
    {"layernorm_split", OP_LAYERNORM, 7, 20, 0, 0, 0, 0, CASE_SPLIT, 2e-6, 5e-6},
    {"layernorm_parallel", OP_LAYERNORM, 200, 130, 0, 0, 0, 0, 0, 2e-6, 5e-6},
    {"rmsnorm_N1", OP_RMSNORM, 1, 9, 0, 0, 0, 0, 0, 2e-6, 5e-6},
    {"rmsnorm_odd", OP_RMSNORM, 13, 33, 0, 0, 0, 0, 0, 2e-6, 5e-6},
    {"rmsnorm_split", OP_RMSNORM, 6, 24, 0, 0, 0, 0, CASE_SPLIT, 2e-6, 5e-6},
    {"rmsnorm_parallel", OP_RMSNORM, 200, 130, 0, 0, 0, 0, 0, 2e-6, 5e-6},
    {"gelu_odd", OP_GELU, 1, 37, 0, 0, 0, 0, 0, 1e-6, 5e-6},
    {"gelu_inplace", OP_GELU, 3, 29, 0, 0, 0, 0, CASE_INPLACE, 1e-6, 5e-6},
    {"gelu_parallel", OP_GELU, 150, 130, 0, 0, 0, 0, 0, 1e-6, 5e-6},
    {"swiglu_odd", OP_SWIGLU, 1, 41, 0, 0, 0, 0, 0, 1e-6, 5e-6},
    {"swiglu_split", OP_SWIGLU, 5, 13, 0, 0, 0, 0, CASE_SPLIT, 1e-6, 5e-6},
    {"swiglu_parallel", OP_SWIGLU, 150, 130, 0, 0, 0, 0, 0, 1e-6, 5e-6},
    {"add_odd", OP_ADD, 3, 17, 0, 0, 0, 0, 0, 1e-6, 0},
    {"add_inplace", OP_ADD, 301, 257, 0, 0, 0, 0, CASE_INPLACE, 1e-6, 0},
    {"rope_N1", OP_ROPE, 1, 0, 0, 1, 2, 2, 0, 1e-6, 5e-6},
    {"rope_contig", OP_ROPE, 7, 0, 0, 3, 6, 18, 0, 1e-6, 5e-6},
    {"rope_strided", OP_ROPE, 9, 0, 0, 2, 10, 61, 0, 1e-6, 5e-6},
    {"rope_parallel", OP_ROPE, 150, 0, 0, 4, 32, 3 * 128, 0, 1e-6, 5e-6},
    {"rope_llama3_d32", OP_ROPE, 9, 0, 0, 2, 32, 70, CASE_LLAMA3, 1e-6, 5e-6},
    {"rope_llama3_d64", OP_ROPE, 40, 0, 0, 3, 64, 3 * 64, CASE_LLAMA3, 1e-6, 5e-6},
    {"rope_qk_strided", OP_ROPE, 9, 0, 0, 3, 10, 61, CASE_QK, 1e-6, 5e-6},
    {"rope_qk_llama3", OP_ROPE, 12, 0, 0, 4, 32, 4 * 32 + 7, CASE_QK | CASE_LLAMA3, 1e-6, 5e-6},
    {"rope2d_contig", OP_ROPE2D, 6, 0, 0, 2, 8, 16, 0, 1e-6, 5e-6},
    {"rope2d_strided", OP_ROPE2D, 11, 0, 0, 3, 12, 3 * 3 * 12 + 5, 0, 1e-6, 5e-6},
    {"rope2d_parallel", OP_ROPE2D, 130, 0, 0, 4, 32, 3 * 128, 0, 1e-6, 5e-6},
    {"embedding_N1", OP_EMBEDDING, 1, 5, 3, 0, 0, 0, 0, 0, 5e-6},
    {"embedding_repeats", OP_EMBEDDING, 40, 13, 7, 0, 0, 0, 0, 0, 5e-6},
    {"embedding_parallel", OP_EMBEDDING, 400, 70, 50, 0, 0, 0, 0, 0, 5e-6},
    {"ce_N1", OP_CE, 1, 5, 0, 0, 0, 0, 0, 2e-6, 5e-6},
    {"ce_odd", OP_CE, 9, 37, 0, 0, 0, 0, 0, 2e-6, 5e-6},
    {"ce_ignore", OP_CE, 13, 21, 0, 0, 0, 0, CASE_IGNORE, 2e-6, 5e-6},
    {"ce_all_ignored", OP_CE, 4, 11, 0, 0, 0, 0, CASE_ALL_IGN, 2e-6, 5e-6},
    {"ce_parallel", OP_CE, 64, 513, 0, 0, 0, 0, CASE_IGNORE, 2e-6, 5e-6},
    /* the CLIP tower's: elementwise bounds as GELU; the gather sums at most K = 16 products, so the
     * elementwise forward bound holds (1e-6 ~ 8 eps) */
    {"gelu_erf_odd", OP_GELU_ERF, 1, 37, 0, 0, 0, 0, 0, 1e-6, 5e-6},
    {"gelu_erf_parallel", OP_GELU_ERF, 150, 130, 0, 0, 0, 0, CASE_INPLACE, 1e-6, 5e-6},
    {"quick_gelu_odd", OP_QUICK_GELU, 3, 29, 0, 0, 0, 0, 0, 1e-6, 5e-6},
    {"quick_gelu_parallel", OP_QUICK_GELU, 150, 130, 0, 0, 0, 0, CASE_INPLACE, 1e-6, 5e-6},
    {"gather_k1", OP_GATHER, 9, 7, 5, 1, 0, 0, 0, 1e-6, 5e-6},
    {"gather_k16", OP_GATHER, 13, 11, 10, 16, 0, 0, 0, 1e-6, 5e-6},
    {"gather_parallel", OP_GATHER, 300, 130, 50, 16, 0, 0, 0, 1e-6, 5e-6},
};

/* ------------------------------------------------------------------------------------------------
 * Random numbers (splitmix64: the test must not depend on the generator it could be testing) */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_u64(void) {
    return rr_splitmix64(&rng_state);
}
static double rng_uniform(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); } /* [0, 1) */
static float rng_sym(void) { return (float)(2.0 * rng_uniform() - 1.0); }                         /* [-1, 1) */
static int rng_int(int n) { return (int)(rng_u64() % (uint64_t)n); }

/* ------------------------------------------------------------------------------------------------
 * A problem instance: the differentiable inputs, the integer inputs, the output layout. */

#define MAX_IN 4
typedef struct {
    int n_in;
    const char* in_name[MAX_IN];
    size_t in_size[MAX_IN];
    int in_is_weight[MAX_IN]; /* which gradients the "weights" half of a split backward computes */
    size_t out_size;          /* everything the forward is compared on */
    size_t out_diff;          /* the leading outputs the loss sum(out * R) covers */
    int* ints;                /* ids / targets / positions */
    size_t n_ints;
    float* tap_w;             /* rows_gather's tap weights (constants, not differentiated) */
} Problem;

static void problem_setup(const OpCase* tc, Problem* p) {
    memset(p, 0, sizeof *p);
    int N = tc->N, C = tc->C, OC = tc->OC;
    size_t NC = (size_t)N * C;
    switch (tc->op) {
    case OP_LINEAR:
        p->n_in = (tc->flags & CASE_NO_BIAS) ? 2 : 3;
        p->in_name[0] = "inp", p->in_size[0] = NC;
        p->in_name[1] = "weight", p->in_size[1] = (size_t)OC * C, p->in_is_weight[1] = 1;
        p->in_name[2] = "bias", p->in_size[2] = OC, p->in_is_weight[2] = 1;
        p->out_size = p->out_diff = (size_t)N * OC;
        break;
    case OP_LAYERNORM:
        p->n_in = 3;
        p->in_name[0] = "inp", p->in_size[0] = NC;
        p->in_name[1] = "weight", p->in_size[1] = C, p->in_is_weight[1] = 1;
        p->in_name[2] = "bias", p->in_size[2] = C, p->in_is_weight[2] = 1;
        p->out_diff = NC, p->out_size = NC + 2 * (size_t)N; /* out | mean | rstd */
        break;
    case OP_RMSNORM:
        p->n_in = 2;
        p->in_name[0] = "inp", p->in_size[0] = NC;
        p->in_name[1] = "weight", p->in_size[1] = C, p->in_is_weight[1] = 1;
        p->out_diff = NC, p->out_size = NC + N; /* out | rstd */
        break;
    case OP_GELU:
    case OP_GELU_ERF:
    case OP_QUICK_GELU:
        p->n_in = 1;
        p->in_name[0] = "inp", p->in_size[0] = NC;
        p->out_size = p->out_diff = NC;
        break;
    case OP_GATHER: {
        int K = tc->H;
        p->n_in = 1;
        p->in_name[0] = "table", p->in_size[0] = (size_t)OC * C, p->in_is_weight[0] = 1;
        p->out_size = p->out_diff = NC;
        p->n_ints = (size_t)N * K, p->ints = malloc(p->n_ints * sizeof(int));
        p->tap_w = malloc(p->n_ints * sizeof(float));
        for (size_t i = 0; i < p->n_ints; i++) {
            p->ints[i] = i % 7 == 3 ? -1 : rng_int(OC); /* skipped taps, and rows shared by many taps */
            p->tap_w[i] = K == 1 ? 1.0f : rng_sym();
        }
        break;
    }
    case OP_SWIGLU:
    case OP_ADD:
        p->n_in = 2;
        p->in_name[0] = tc->op == OP_ADD ? "a" : "gate", p->in_size[0] = NC;
        p->in_name[1] = tc->op == OP_ADD ? "b" : "up", p->in_size[1] = NC, p->in_is_weight[1] = 1;
        p->out_size = p->out_diff = NC;
        break;
    case OP_ROPE:
    case OP_ROPE2D:
        p->n_in = 1;
        p->in_name[0] = "x", p->in_size[0] = (size_t)N * tc->ld;
        p->out_size = p->out_diff = (size_t)N * tc->ld;
        p->n_ints = tc->op == OP_ROPE ? N : 2 * (size_t)N; /* pos | pos_col */
        p->ints = malloc(p->n_ints * sizeof(int));
        /* positions restart per packed sample and reach thousands in long samples; include both */
        for (size_t i = 0; i < p->n_ints; i++) p->ints[i] = (i % 3 == 0) ? rng_int(4096) : rng_int(24);
        break;
    case OP_EMBEDDING:
        p->n_in = 1;
        p->in_name[0] = "table", p->in_size[0] = (size_t)OC * C, p->in_is_weight[0] = 1;
        p->out_size = p->out_diff = NC;
        p->n_ints = N, p->ints = malloc(N * sizeof(int));
        for (int n = 0; n < N; n++) p->ints[n] = rng_int(OC); /* N > V in most cases: repeated ids */
        break;
    case OP_CE:
        p->n_in = 1;
        p->in_name[0] = "logits", p->in_size[0] = NC;
        p->out_diff = 1, p->out_size = 1 + (size_t)N; /* loss_sum | lse */
        p->n_ints = N, p->ints = malloc(N * sizeof(int));
        for (int n = 0; n < N; n++) {
            p->ints[n] = rng_int(C);
            if ((tc->flags & CASE_IGNORE) && n % 3 == 1) p->ints[n] = -100;
            if (tc->flags & CASE_ALL_IGN) p->ints[n] = -100;
        }
        break;
    }
}

/* ------------------------------------------------------------------------------------------------
 * Double-precision references, written from the formulas in engine/engine.h and docs/model.md, not from
 * the CPU code. */

/* Llama-3's rescaled frequency, as transformers' _compute_llama3_parameters writes it (torch.where over
 * the wavelengths): low frequencies divided by factor, high kept, a linear blend between */
static double ref_llama3_freq(double inv_freq, const RopeFreq* rf) {
    double L = rf->original_max_pos, low_wavelen = L / rf->low_freq_factor, high_wavelen = L / rf->high_freq_factor;
    double wavelen = 2 * M_PI / inv_freq;
    double f = wavelen > low_wavelen ? inv_freq / rf->factor : inv_freq;
    double smooth = (L / wavelen - rf->low_freq_factor) / (rf->high_freq_factor - rf->low_freq_factor);
    double smoothed = (1 - smooth) * f / rf->factor + smooth * f;
    int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    return medium ? smoothed : f;
}

/* rf NULL: theta 10000, unscaled */
static void ref_rope_rotate_rf(double* v, int n, int pos, int sign, const RopeFreq* rf) {
    for (int j = 0; j < n / 2; j++) {
        double freq = pow(rf ? rf->theta : 10000.0, -2.0 * j / n); /* theta^(-2j/n) */
        if (rf && rf->llama3) freq = ref_llama3_freq(freq, rf);
        double a = v[j], b = v[j + n / 2], th = sign * pos * freq;
        v[j] = a * cos(th) - b * sin(th);           /* x cos + rotate_half(x) sin, rotate_half([a|b]) = [-b|a] */
        v[j + n / 2] = b * cos(th) + a * sin(th);
    }
}
static void ref_rope_rotate(double* v, int n, int pos, int sign) { ref_rope_rotate_rf(v, n, pos, sign, NULL); }

static void ref_forward(const OpCase* tc, const Problem* p, double* const* in, double* out) {
    int N = tc->N, C = tc->C, OC = tc->OC;
    size_t NC = (size_t)N * C;
    switch (tc->op) {
    case OP_LINEAR:
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double s = p->n_in == 3 ? in[2][o] : 0.0;
                for (int c = 0; c < C; c++) s += in[0][(size_t)n * C + c] * in[1][(size_t)o * C + c];
                out[(size_t)n * OC + o] = s;
            }
        break;
    case OP_LAYERNORM:
        for (int n = 0; n < N; n++) {
            const double* x = in[0] + (size_t)n * C;
            double m = 0, var = 0;
            for (int c = 0; c < C; c++) m += x[c] / C;
            for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m) / C; /* biased, as PyTorch */
            double r = 1.0 / sqrt(var + 1e-5);
            for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (x[c] - m) * r * in[1][c] + in[2][c];
            out[NC + n] = m, out[NC + N + n] = r;
        }
        break;
    case OP_RMSNORM:
        for (int n = 0; n < N; n++) {
            const double* x = in[0] + (size_t)n * C;
            double ms = 0;
            for (int c = 0; c < C; c++) ms += x[c] * x[c] / C;
            double r = 1.0 / sqrt(ms + 1e-5);
            for (int c = 0; c < C; c++) out[(size_t)n * C + c] = x[c] * r * in[1][c];
            out[NC + n] = r;
        }
        break;
    case OP_GELU:
        for (size_t i = 0; i < NC; i++) {
            double x = in[0][i];
            out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        }
        break;
    case OP_SWIGLU:
        for (size_t i = 0; i < NC; i++) out[i] = in[0][i] / (1.0 + exp(-in[0][i])) * in[1][i];
        break;
    case OP_GELU_ERF: /* torch.nn.GELU(): x Phi(x) */
        for (size_t i = 0; i < NC; i++) out[i] = in[0][i] * 0.5 * erfc(-in[0][i] / sqrt(2.0));
        break;
    case OP_QUICK_GELU: /* OpenAI CLIP: x sigmoid(1.702 x) */
        for (size_t i = 0; i < NC; i++) out[i] = in[0][i] / (1.0 + exp(-1.702 * in[0][i]));
        break;
    case OP_GATHER:
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double sum = 0;
                for (int k = 0; k < tc->H; k++) {
                    int r = p->ints[(size_t)n * tc->H + k];
                    if (r >= 0) sum += (double)p->tap_w[(size_t)n * tc->H + k] * in[0][(size_t)r * C + c];
                }
                out[(size_t)n * C + c] = sum;
            }
        break;
    case OP_ADD:
        for (size_t i = 0; i < NC; i++) out[i] = in[0][i] + in[1][i];
        break;
    case OP_ROPE:
    case OP_ROPE2D:
        memcpy(out, in[0], p->out_size * sizeof(double)); /* padding columns pass through */
        for (int n = 0; n < N; n++)
            for (int h = 0; h < tc->H; h++) {
                double* v = out + (size_t)n * tc->ld + (size_t)h * tc->d;
                if (tc->op == OP_ROPE) {
                    ref_rope_rotate_rf(v, tc->d, p->ints[n], 1, tc->flags & CASE_LLAMA3 ? &RF_LLAMA3 : NULL);
                } else {
                    ref_rope_rotate(v, tc->d / 2, p->ints[n], 1);
                    ref_rope_rotate(v + tc->d / 2, tc->d / 2, p->ints[N + n], 1);
                }
            }
        break;
    case OP_EMBEDDING:
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) out[(size_t)n * C + c] = in[0][(size_t)p->ints[n] * C + c];
        break;
    case OP_CE:
        out[0] = 0.0;
        for (int n = 0; n < N; n++) {
            const double* z = in[0] + (size_t)n * C;
            double zmax = z[0], s = 0;
            for (int v = 1; v < C; v++) zmax = fmax(zmax, z[v]);
            for (int v = 0; v < C; v++) s += exp(z[v] - zmax);
            double lse = zmax + log(s);
            out[1 + n] = lse;
            if (p->ints[n] != -100) out[0] += lse - z[p->ints[n]];
        }
        break;
    }
}

/* ------------------------------------------------------------------------------------------------
 * The f32 ops, called through the backend table (so the table's slots are checked too). `grad[i]`
 * is non-NULL for the gradients wanted in this call. */

static const Backend* be = &backend_cpu;

static void run_forward(const OpCase* tc, const Problem* p, float** in, float* out) {
    int N = tc->N, C = tc->C, OC = tc->OC;
    size_t NC = (size_t)N * C;
    switch (tc->op) {
    case OP_LINEAR: be->ops->linear_forward(be, buf_f32(out), buf_f32(in[0]), be_weight(be, in[1]), be_bias(be, p->n_in == 3 ? in[2] : NULL), N, C, OC); break;
    case OP_LAYERNORM: be->ops->layernorm_forward(be, buf_f32(out), out + NC, out + NC + N, buf_f32(in[0]), in[1], in[2], N, C); break;
    case OP_RMSNORM: be->ops->rmsnorm_forward(be, buf_f32(out), out + NC, buf_f32(in[0]), in[1], N, C, 1e-5); break;
    case OP_GELU:
        if (tc->flags & CASE_INPLACE) {
            float* buf = malloc(NC * sizeof(float));
            memcpy(buf, in[0], NC * sizeof(float));
            be->ops->gelu_forward(be, buf_f32(buf), buf_f32(buf), NC);
            memcpy(out, buf, NC * sizeof(float));
            free(buf);
        } else {
            be->ops->gelu_forward(be, buf_f32(out), buf_f32(in[0]), NC);
        }
        break;
    case OP_SWIGLU: be->ops->swiglu_forward(be, buf_f32(out), buf_f32(in[0]), buf_f32(in[1]), NC); break;
    case OP_GELU_ERF:
    case OP_QUICK_GELU: {
        Act act = tc->op == OP_GELU_ERF ? ACT_GELU_ERF : ACT_QUICK_GELU;
        if (tc->flags & CASE_INPLACE) {
            memcpy(out, in[0], NC * sizeof(float));
            be->ops->act_forward(be, buf_f32(out), buf_f32(out), NC, act);
        } else {
            be->ops->act_forward(be, buf_f32(out), buf_f32(in[0]), NC, act);
        }
        break;
    }
    case OP_GATHER: /* the op adds: into zeros here */
        memset(out, 0, NC * sizeof(float));
        be->ops->rows_gather_forward(be, buf_f32(out), p->ints, tc->H == 1 ? NULL : p->tap_w, buf_f32(in[0]), N, tc->H, C);
        break;
    case OP_ADD:
        if (tc->flags & CASE_INPLACE) { /* x += f(x) */
            memcpy(out, in[0], NC * sizeof(float));
            be->ops->add_forward(be, buf_f32(out), buf_f32(out), buf_f32(in[1]), NC);
        } else {
            be->ops->add_forward(be, buf_f32(out), buf_f32(in[0]), buf_f32(in[1]), NC);
        }
        break;
    case OP_ROPE:
    case OP_ROPE2D:
        memcpy(out, in[0], p->out_size * sizeof(float));
        if (tc->op == OP_ROPE && (tc->flags & CASE_QK))
            be->ops->rope_qk_forward(be, buf_f32(out), buf_f32(out + (size_t)(tc->H - 1) * tc->d), p->ints, N, tc->H - 1, 1, tc->d, tc->ld, tc->ld,
                                tc->flags & CASE_LLAMA3 ? &RF_LLAMA3 : &RF_DEFAULT);
        else if (tc->op == OP_ROPE) be->ops->rope_forward(be, buf_f32(out), p->ints, N, tc->H, tc->d, tc->ld,
                                            tc->flags & CASE_LLAMA3 ? &RF_LLAMA3 : &RF_DEFAULT);
        else be->ops->rope2d_forward(be, buf_f32(out), p->ints, p->ints + N, N, tc->H, tc->d, tc->ld);
        break;
    case OP_EMBEDDING: be->ops->embedding_forward(be, buf_f32(out), p->ints, be_weight(be, in[0]), N, C); break;
    case OP_CE: be->ops->crossentropy_forward(be, out, out + 1, buf_f32(in[0]), p->ints, N, C); break;
    }
}

/* Forward (for the saved statistics) then backward with dout = R into grad[] (which must ADD). */
static void run_backward(const OpCase* tc, const Problem* p, float** in, const float* R, float** grad) {
    int N = tc->N, C = tc->C, OC = tc->OC;
    size_t NC = (size_t)N * C;
    float* out = malloc(p->out_size * sizeof(float));
    run_forward(tc, p, in, out);
    switch (tc->op) {
    case OP_LINEAR:
        be->ops->linear_backward(be, buf_f32(grad[0]), grad[1], p->n_in == 3 ? grad[2] : NULL, buf_f32(R), NULL, buf_f32(in[0]), be_weight(be, in[1]), N, C, OC, 0);
        break;
    case OP_LAYERNORM:
        be->ops->layernorm_backward(be, grad[0], NULL, grad[1], grad[2], R, buf_f32(in[0]), in[1], out + NC, out + NC + N, N, C);
        break;
    case OP_RMSNORM: be->ops->rmsnorm_backward(be, grad[0], NULL, grad[1], R, buf_f32(in[0]), in[1], out + NC, N, C); break;
    case OP_GELU:
        if (grad[0]) be->ops->gelu_backward(be, grad[0], R, buf_f32(in[0]), NC);
        break;
    case OP_SWIGLU: be->ops->swiglu_backward(be, buf_f32(grad[0]), buf_f32(grad[1]), R, buf_f32(in[0]), buf_f32(in[1]), NC); break;
    case OP_GELU_ERF:
    case OP_QUICK_GELU:
        if (grad[0]) be->ops->act_backward(be, grad[0], NULL, R, buf_f32(in[0]), NC, tc->op == OP_GELU_ERF ? ACT_GELU_ERF : ACT_QUICK_GELU);
        break;
    case OP_GATHER:
        if (grad[0]) be->ops->rows_gather_backward(be, grad[0], R, p->ints, tc->H == 1 ? NULL : p->tap_w, N, tc->H, C);
        break;
    case OP_ADD: RR_ASSERT(0 && "add has no backward"); break;
    case OP_ROPE:
    case OP_ROPE2D:
        if (grad[0]) { /* RoPE's backward transforms in place; the model then adds or uses it */
            float* g = malloc(p->out_size * sizeof(float));
            memcpy(g, R, p->out_size * sizeof(float));
            if (tc->op == OP_ROPE && (tc->flags & CASE_QK))
                be->ops->rope_qk_backward(be, NULL, 0, g, NULL, 0, g + (size_t)(tc->H - 1) * tc->d, p->ints, N, tc->H - 1, 1, tc->d, tc->ld, tc->ld,
                                     tc->flags & CASE_LLAMA3 ? &RF_LLAMA3 : &RF_DEFAULT, 0, 0);
            else if (tc->op == OP_ROPE) be->ops->rope_backward(be, g, p->ints, N, tc->H, tc->d, tc->ld,
                                                 tc->flags & CASE_LLAMA3 ? &RF_LLAMA3 : &RF_DEFAULT);
            else be->ops->rope2d_backward(be, NULL, 0, g, p->ints, p->ints + N, N, tc->H, tc->d, tc->ld, 0);
            for (size_t i = 0; i < p->out_size; i++) grad[0][i] += g[i];
            free(g);
        }
        break;
    case OP_EMBEDDING:
        if (grad[0]) be->ops->embedding_backward(be, grad[0], R, p->ints, N, C);
        break;
    case OP_CE: /* loss = R[0] * loss_sum: the backward's scale argument carries R[0] */
        if (grad[0]) be->ops->crossentropy_backward(be, buf_f32(grad[0]), buf_f32(in[0]), out + 1, p->ints, R[0], N, C);
        break;
    }
    free(out);
}

/* ------------------------------------------------------------------------------------------------
 * The checks */

static double max_abs(const double* x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* Normalised error of a against the reference b: max |a - b| / max |b|. Absolute when b is all 0
 * (an all-ignored cross-entropy batch), so there the op must add exactly nothing. */
static double norm_err(const double* a, const double* b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i]));
    double s = max_abs(b, n);
    return s > 0 ? e / s : e;
}

static double ref_loss(const OpCase* tc, const Problem* p, double* const* in, const double* R, double* scratch) {
    ref_forward(tc, p, in, scratch);
    double L = 0;
    for (size_t i = 0; i < p->out_diff; i++) L += scratch[i] * R[i];
    return L;
}

/* Finite differences on at most this many elements per tensor (all of them in the small cases). */
#define FD_MAX_ELEMS 300
#define FD_H 1e-4

static int run_case(const OpCase* tc) {
    Problem p;
    problem_setup(tc, &p);
    float* in_f[MAX_IN] = {0};
    double* in_d[MAX_IN] = {0};
    for (int i = 0; i < p.n_in; i++) {
        in_f[i] = malloc(p.in_size[i] * sizeof(float));
        in_d[i] = malloc(p.in_size[i] * sizeof(double));
        for (size_t j = 0; j < p.in_size[i]; j++) {
            float x = rng_sym();
            if (tc->op == OP_LAYERNORM && i == 0) x += 2.0f; /* a large mean, as in residual streams */
            if (tc->op == OP_CE) x *= 4.0f;                   /* peaked softmax rows */
            if (tc->op == OP_GELU || tc->op == OP_SWIGLU || tc->op == OP_GELU_ERF || tc->op == OP_QUICK_GELU)
                x *= 4.0f; /* both tails of the nonlinearity */
            in_f[i][j] = x;
            in_d[i][j] = x;
        }
    }
    int ok = 1;

    /* forward */
    double* out_ref = malloc(p.out_size * sizeof(double));
    float* out_f = malloc(p.out_size * sizeof(float));
    double* out_fd = malloc(p.out_size * sizeof(double));
    ref_forward(tc, &p, in_d, out_ref);
    run_forward(tc, &p, in_f, out_f);
    for (size_t i = 0; i < p.out_size; i++) out_fd[i] = out_f[i];
    double fwd_err = norm_err(out_fd, out_ref, p.out_size);
    if (!(fwd_err <= tc->fwd_tol)) ok = 0;
    printf("%-22s fwd err %.2e (tol %.0e)", tc->name, fwd_err, tc->fwd_tol);
    if (tc->op == OP_CE && (tc->flags & CASE_ALL_IGN) && out_f[0] != 0.0f) {
        printf("  [loss of an all-ignored batch is %g, not 0]", out_f[0]);
        ok = 0;
    }

    if (tc->op != OP_ADD) {
        float* R = malloc(p.out_size * sizeof(float));
        double* Rd = calloc(p.out_size, sizeof(double));
        for (size_t i = 0; i < p.out_size; i++) R[i] = i < p.out_diff ? rng_sym() : 0.0f;
        for (size_t i = 0; i < p.out_size; i++) Rd[i] = R[i];

        /* analytic gradients: once into zeroed buffers (compared with finite differences), once onto
         * random starting values G0 (must equal G0 + the first, up to one rounding: backward ADDS) */
        float* g[MAX_IN] = {0};
        float* g0[MAX_IN] = {0};
        float* gadd[MAX_IN] = {0};
        for (int i = 0; i < p.n_in; i++) {
            g[i] = calloc(p.in_size[i], sizeof(float));
            g0[i] = malloc(p.in_size[i] * sizeof(float));
            gadd[i] = malloc(p.in_size[i] * sizeof(float));
            for (size_t j = 0; j < p.in_size[i]; j++) gadd[i][j] = g0[i][j] = rng_sym();
        }
        for (int pass = 0; pass < 2; pass++) {
            float** gp = pass == 0 ? g : gadd;
            if (tc->flags & CASE_SPLIT) {
                float* gin[MAX_IN] = {0};
                float* gw[MAX_IN] = {0};
                for (int i = 0; i < p.n_in; i++) (p.in_is_weight[i] ? gw : gin)[i] = gp[i];
                run_backward(tc, &p, in_f, R, gin); /* B: input gradient only, weight pointers NULL */
                run_backward(tc, &p, in_f, R, gw);  /* W: weight gradients only, input pointer NULL */
            } else {
                run_backward(tc, &p, in_f, R, gp);
            }
        }
        /* A gradient that sums K terms (dweight over N rows, dinp over OC outputs) rounds at the scale
         * of G0 + partial sum at each step when it starts from G0, so the two runs may differ by
         * K eps (|G0| + |g|); overwriting or double-adding is off by O(|G0|) = O(1). */
        int K = tc->N > tc->C ? tc->N : tc->C;
        K = (K > tc->OC ? K : tc->OC) + 4;
        double add_err = 0;
        for (int i = 0; i < p.n_in; i++) {
            double scale = 1.0; /* |G0| <= 1 */
            for (size_t j = 0; j < p.in_size[i]; j++) scale = fmax(scale, 1.0 + fabs(g[i][j]));
            for (size_t j = 0; j < p.in_size[i]; j++) {
                double want = (double)g0[i][j] + g[i][j];
                add_err = fmax(add_err, fabs(gadd[i][j] - want) - K * 1.2e-7 * scale);
            }
        }
        if (add_err > 0) {
            printf("  [backward does not add into its gradients: off by %.2e]", add_err);
            ok = 0;
        }

        /* central finite differences of the double reference */
        double* scratch = malloc(p.out_size * sizeof(double));
        printf("  bwd err");
        for (int i = 0; i < p.n_in; i++) {
            size_t n = p.in_size[i];
            size_t m = n < FD_MAX_ELEMS ? n : FD_MAX_ELEMS;
            double* ga = malloc(m * sizeof(double));
            double* gn = malloc(m * sizeof(double));
            for (size_t k = 0; k < m; k++) {
                size_t j = n <= FD_MAX_ELEMS ? k : (size_t)(rng_u64() % n);
                double save = in_d[i][j];
                in_d[i][j] = save + FD_H;
                double Lp = ref_loss(tc, &p, in_d, Rd, scratch);
                in_d[i][j] = save - FD_H;
                double Lm = ref_loss(tc, &p, in_d, Rd, scratch);
                in_d[i][j] = save;
                gn[k] = (Lp - Lm) / (2 * FD_H);
                ga[k] = g[i][j];
            }
            double e = norm_err(ga, gn, m);
            if (!(e <= tc->bwd_tol)) ok = 0;
            printf(" %s %.2e", p.in_name[i], e);
            free(ga), free(gn);
        }
        printf(" (tol %.0e)", tc->bwd_tol);

        /* The same bits with 1 and 2 threads: the ops split rows or channels across threads and never
         * reduce in a thread-dependent order. Linear is left out: its sums are the BLAS's (BLIS
         * 0.9 was seen to differ by an ulp between 1 and 2 threads on one shape of 12). */
        if (tc->op != OP_LINEAR) {
            float* o[2];
            float* gt[2][MAX_IN] = {{0}};
            for (int r = 0; r < 2; r++) {
                cpu_set_num_threads(r + 1);
                o[r] = malloc(p.out_size * sizeof(float));
                run_forward(tc, &p, in_f, o[r]);
                for (int i = 0; i < p.n_in; i++) gt[r][i] = calloc(p.in_size[i], sizeof(float));
                run_backward(tc, &p, in_f, R, gt[r]);
            }
            int same = memcmp(o[0], o[1], p.out_size * sizeof(float)) == 0;
            for (int i = 0; i < p.n_in; i++) same &= memcmp(gt[0][i], gt[1][i], p.in_size[i] * sizeof(float)) == 0;
            if (!same) {
                printf("  [1 and 2 threads give different bits]");
                ok = 0;
            }
            for (int r = 0; r < 2; r++) {
                free(o[r]);
                for (int i = 0; i < p.n_in; i++) free(gt[r][i]);
            }
            cpu_set_num_threads(2);
        }
        free(scratch);
        for (int i = 0; i < p.n_in; i++) free(g[i]), free(g0[i]), free(gadd[i]);
        free(R), free(Rd);
    }
    printf("  %s\n", ok ? "ok" : "FAIL");
    for (int i = 0; i < p.n_in; i++) free(in_f[i]), free(in_d[i]);
    free(out_ref), free(out_f), free(out_fd), free(p.ints), free(p.tap_w);
    return ok;
}

int main(int argc, char** argv) {
    const char* filter = argc > 1 ? argv[1] : NULL;
    cpu_set_num_threads(2);
    int n_run = 0, n_fail = 0;
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        if (filter && !strstr(CASES[c].name, filter)) continue;
        n_run++;
        if (!run_case(&CASES[c])) n_fail++;
    }
    printf("%d cases, %d failed\n", n_run, n_fail);
    if (n_run == 0) {
        fprintf(stderr, "no case matches '%s'\n", filter);
        return 1;
    }
    return n_fail ? 1 : 0;
}
