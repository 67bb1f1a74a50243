/* test_kernel_math.c — the CUDA kernels' math, run on the CPU against the CPU backend.
 *
 * engine/cuda/kernel_math.h holds every per-element / per-row computation the CUDA kernels make
 * (`RR_HD static inline`, so this C file compiles the same functions). For each op this test
 * recomputes the whole op through those functions, in the order the kernel does it (float row
 * sums as the block reductions make them, 32-key tiles with the online softmax for attention), and
 * compares with the CPU backend's op (engine/cpu). Attention is also compared with a direct double
 * precision softmax. bf16 conversion is checked exhaustively / against a double rounding reference.
 * Built and run in both builds; what it cannot check (indexing, launches, reduction order on the
 * device) is left to tests/engine/cuda/test_cuda_ops.c (label gpu).
 *
 * Errors are normalised per tensor: max |got - ref| / max |ref|. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/attention_scratch.h"
#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"

static const RopeFreq RF_DEFAULT = {.theta = 10000.0}; /* the LM's RoPE at its default theta, unscaled */

/* Tolerances (f32 eps = 1.2e-7):
 * - ELEM 1e-6: elementwise ops (GELU, SwiGLU, RoPE): the same formula on both sides, at most a
 *   different association of a product: a few ulps.
 * - ROW 2e-6: forwards that sum over a row (norms, cross-entropy lse): the kernel sums in float, the
 *   CPU backend in double; over C <= 300 values the float sum is off by ~sqrt(C) eps relative.
 * - BWD 5e-6: the norms' backward subtracts two row means, cross-entropy subtracts the one-hot:
 *   cancellation doubles or triples the forward's error (the CPU op tests use the same bound).
 * - ATT 5e-6: attention in float (scores, exp, per-tile rescale, sums over up to 75 keys) against
 *   double: each output is a convex combination whose weights carry ~4 roundings each.
 * A real bug (a missing term, wrong sign, wrong index, a row or tile skipped) gives errors > 1e-2. */
#define TOL_ELEM 1e-6
#define TOL_ROW 2e-6
#define TOL_BWD 5e-6
#define TOL_ATT 5e-6

static int failures = 0;

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rng_u64(void) { /* splitmix64 */
    return rr_splitmix64(&rng_state);
}
static float rng_sym(void) { return (float)(2.0 * (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0) - 1.0); }

static float* fvec(size_t n) { return callocCheck(n ? n : 1, sizeof(float)); }
static float* frand(size_t n, float scale) {
    float* x = fvec(n);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_sym();
    return x;
}
static float* fcopy(const float* x, size_t n) {
    float* y = fvec(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static double norm_err(const float* got, const float* ref, size_t n) {
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= e)) e = d; /* NaN propagates */
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return m > 0 ? e / m : e;
}
static double norm_err_d(const float* got, const double* ref, size_t n) {
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= e)) e = d;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return m > 0 ? e / m : e;
}

static void expect(const char* op, const char* what, double err, double tol) {
    int ok = err <= tol;
    printf("  %-20s %-10s err=%.2e tol=%.0e %s\n", op, what, err, tol, ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

/* ---- GELU, SwiGLU ----------------------------------------------------------------------------- */

static void test_gelu(size_t n) {
    float* x = frand(n, 6.0f); /* tanh saturates past |u| ~ 9: cover both regimes */
    float* dout = frand(n, 1.0f);
    float *out = fvec(n), *ref = fvec(n);
    for (size_t i = 0; i < n; i++) out[i] = rr_gelu_tanh(x[i]);
    backend_cpu.ops->gelu_forward(&backend_cpu, buf_f32(ref), buf_f32(x), n);
    expect("gelu", "forward", norm_err(out, ref, n), TOL_ELEM);
    float* dx = frand(n, 1.0f); /* backward ADDS: start from the same random gradient */
    float* dref = fcopy(dx, n);
    for (size_t i = 0; i < n; i++) dx[i] += rr_gelu_tanh_grad(x[i]) * dout[i];
    backend_cpu.ops->gelu_backward(&backend_cpu, dref, dout, buf_f32(x), n);
    expect("gelu", "backward", norm_err(dx, dref, n), TOL_ELEM);
    free(x), free(dout), free(out), free(ref), free(dx), free(dref);
}

static void test_swiglu(size_t n) {
    float *g = frand(n, 8.0f), *u = frand(n, 2.0f), *dout = frand(n, 1.0f);
    float *out = fvec(n), *ref = fvec(n);
    for (size_t i = 0; i < n; i++) out[i] = rr_swiglu(g[i], u[i]);
    backend_cpu.ops->swiglu_forward(&backend_cpu, buf_f32(ref), buf_f32(g), buf_f32(u), n);
    expect("swiglu", "forward", norm_err(out, ref, n), TOL_ELEM);
    float *dg = frand(n, 1.0f), *du = frand(n, 1.0f);
    float *dg_ref = fcopy(dg, n), *du_ref = fcopy(du, n);
    for (size_t i = 0; i < n; i++) {
        float a, b;
        rr_swiglu_grad(dout[i], g[i], u[i], &a, &b);
        dg[i] += a;
        du[i] += b;
    }
    backend_cpu.ops->swiglu_backward(&backend_cpu, buf_f32(dg_ref), buf_f32(du_ref), dout, buf_f32(g), buf_f32(u), n);
    expect("swiglu", "dgate", norm_err(dg, dg_ref, n), TOL_ELEM);
    expect("swiglu", "dup", norm_err(du, du_ref, n), TOL_ELEM);
    free(g), free(u), free(dout), free(out), free(ref), free(dg), free(du), free(dg_ref), free(du_ref);
}

/* ---- LayerNorm, RMSNorm: the kernel's float row sums, then kernel_math --------------------------- */

static void test_layernorm(int N, int C) {
    size_t n = (size_t)N * C;
    float *x = frand(n, 2.0f), *w = frand(C, 1.0f), *b = frand(C, 1.0f), *dout = frand(n, 1.0f);
    for (size_t i = 0; i < n; i++) x[i] += 0.5f; /* a non-zero mean, as activations have */
    float *out = fvec(n), *mean = fvec(N), *rstd = fvec(N);
    float *out_ref = fvec(n), *mean_ref = fvec(N), *rstd_ref = fvec(N);
    for (int r = 0; r < N; r++) {
        const float* xr = x + (size_t)r * C;
        float s = 0.0f;
        for (int c = 0; c < C; c++) s += xr[c];
        float m = rr_layernorm_mean(s, C);
        float ssd = 0.0f;
        for (int c = 0; c < C; c++) ssd += (xr[c] - m) * (xr[c] - m);
        float rs = rr_layernorm_rstd(ssd, C);
        for (int c = 0; c < C; c++) out[(size_t)r * C + c] = rr_layernorm_out(xr[c], m, rs, w[c], b[c]);
        mean[r] = m, rstd[r] = rs;
    }
    backend_cpu.ops->layernorm_forward(&backend_cpu, buf_f32(out_ref), mean_ref, rstd_ref, buf_f32(x), w, b, N, C);
    expect("layernorm", "out", norm_err(out, out_ref, n), TOL_ROW);
    expect("layernorm", "mean", norm_err(mean, mean_ref, N), TOL_ROW);
    expect("layernorm", "rstd", norm_err(rstd, rstd_ref, N), TOL_ROW);

    /* backward from the CPU's saved statistics (as the GPU would use its own) */
    float *dx = frand(n, 1.0f), *dw = frand(C, 1.0f), *db = frand(C, 1.0f);
    float *dx_ref = fcopy(dx, n), *dw_ref = fcopy(dw, C), *db_ref = fcopy(db, C);
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C, *dy = dout + (size_t)r * C;
        float m = mean_ref[r], rs = rstd_ref[r], gs = 0.0f, gxs = 0.0f;
        for (int c = 0; c < C; c++) {
            float g = dy[c] * w[c];
            gs += g;
            gxs += g * (xr[c] - m) * rs;
        }
        for (int c = 0; c < C; c++) dx[(size_t)r * C + c] += rr_layernorm_dx(dy[c], xr[c], w[c], m, rs, gs / C, gxs / C);
    }
    for (int c = 0; c < C; c++) { /* the column sums, rows in order */
        float sw = 0.0f, sb = 0.0f;
        for (int r = 0; r < N; r++) {
            size_t i = (size_t)r * C + c;
            sw += dout[i] * (x[i] - mean_ref[r]) * rstd_ref[r];
            sb += dout[i];
        }
        dw[c] += sw, db[c] += sb;
    }
    backend_cpu.ops->layernorm_backward(&backend_cpu, dx_ref, NULL, dw_ref, db_ref, dout, buf_f32(x), w, mean_ref, rstd_ref, N, C);
    expect("layernorm", "dinp", norm_err(dx, dx_ref, n), TOL_BWD);
    expect("layernorm", "dweight", norm_err(dw, dw_ref, C), TOL_BWD);
    expect("layernorm", "dbias", norm_err(db, db_ref, C), TOL_BWD);
    free(x), free(w), free(b), free(dout), free(out), free(mean), free(rstd), free(out_ref), free(mean_ref);
    free(rstd_ref), free(dx), free(dw), free(db), free(dx_ref), free(dw_ref), free(db_ref);
}

static void test_rmsnorm(int N, int C) {
    size_t n = (size_t)N * C;
    float *x = frand(n, 2.0f), *w = frand(C, 1.0f), *dout = frand(n, 1.0f);
    float *out = fvec(n), *rstd = fvec(N), *out_ref = fvec(n), *rstd_ref = fvec(N);
    for (int r = 0; r < N; r++) {
        const float* xr = x + (size_t)r * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
        float rs = rr_rmsnorm_rstd(ss, C, RR_RMSNORM_EPS);
        for (int c = 0; c < C; c++) out[(size_t)r * C + c] = rr_rmsnorm_out(xr[c], rs, w[c]);
        rstd[r] = rs;
    }
    backend_cpu.ops->rmsnorm_forward(&backend_cpu, buf_f32(out_ref), rstd_ref, buf_f32(x), w, N, C, 1e-5);
    expect("rmsnorm", "out", norm_err(out, out_ref, n), TOL_ROW);
    expect("rmsnorm", "rstd", norm_err(rstd, rstd_ref, N), TOL_ROW);

    float *dx = frand(n, 1.0f), *dw = frand(C, 1.0f);
    float *dx_ref = fcopy(dx, n), *dw_ref = fcopy(dw, C);
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C, *dy = dout + (size_t)r * C;
        float gx = 0.0f;
        for (int c = 0; c < C; c++) gx += dy[c] * w[c] * xr[c];
        for (int c = 0; c < C; c++) dx[(size_t)r * C + c] += rr_rmsnorm_dx(dy[c], xr[c], w[c], rstd_ref[r], gx / C);
    }
    for (int c = 0; c < C; c++) {
        float s = 0.0f;
        for (int r = 0; r < N; r++) s += dout[(size_t)r * C + c] * x[(size_t)r * C + c] * rstd_ref[r];
        dw[c] += s;
    }
    backend_cpu.ops->rmsnorm_backward(&backend_cpu, dx_ref, NULL, dw_ref, dout, buf_f32(x), w, rstd_ref, N, C);
    expect("rmsnorm", "dinp", norm_err(dx, dx_ref, n), TOL_BWD);
    expect("rmsnorm", "dweight", norm_err(dw, dw_ref, C), TOL_BWD);
    free(x), free(w), free(dout), free(out), free(rstd), free(out_ref), free(rstd_ref), free(dx), free(dw);
    free(dx_ref), free(dw_ref);
}

/* ---- RoPE: one (row, head, pair) at a time, as rope.cu's threads ------------------------------- */

static void rope_by_pairs(float* x, const int* pos, int N, int H, int d, int ld, int offset, int n, double sign) {
    int half = n / 2;
    for (int i = 0; i < N; i++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < half; j++) {
                float c, s;
                rr_rope_cos_sin(pos[i], j, n, sign, RR_ROPE_THETA, &c, &s);
                float* v = x + (size_t)i * ld + (size_t)h * d + offset;
                rr_rope_rotate_pair(&v[j], &v[j + half], c, s);
            }
}

static void test_rope(int N, int H, int d, int ld) {
    size_t n = (size_t)N * ld;
    int *pos = callocCheck(N, sizeof(int)), *pos_col = callocCheck(N, sizeof(int));
    for (int i = 0; i < N; i++) pos[i] = (int)(rng_u64() % 4096), pos_col[i] = (int)(rng_u64() % 64);
    float* x = frand(n, 1.0f);
    float *a = fcopy(x, n), *b = fcopy(x, n);
    rope_by_pairs(a, pos, N, H, d, ld, 0, d, 1.0);
    backend_cpu.ops->rope_forward(&backend_cpu, buf_f32(b), pos, N, H, d, ld, &RF_DEFAULT);
    expect("rope", "forward", norm_err(a, b, n), TOL_ELEM);
    rope_by_pairs(a, pos, N, H, d, ld, 0, d, -1.0);
    backend_cpu.ops->rope_backward(&backend_cpu, b, pos, N, H, d, ld, &RF_DEFAULT);
    expect("rope", "backward", norm_err(a, b, n), TOL_ELEM);
    expect("rope", "roundtrip", norm_err(a, x, n), TOL_ELEM); /* backward undoes forward */
    if (d % 4 == 0) {
        memcpy(a, x, n * sizeof(float)), memcpy(b, x, n * sizeof(float));
        rope_by_pairs(a, pos, N, H, d, ld, 0, d / 2, 1.0);
        rope_by_pairs(a, pos_col, N, H, d, ld, d / 2, d / 2, 1.0);
        backend_cpu.ops->rope2d_forward(&backend_cpu, buf_f32(b), pos, pos_col, N, H, d, ld);
        expect("rope2d", "forward", norm_err(a, b, n), TOL_ELEM);
        rope_by_pairs(a, pos, N, H, d, ld, 0, d / 2, -1.0);
        rope_by_pairs(a, pos_col, N, H, d, ld, d / 2, d / 2, -1.0);
        backend_cpu.ops->rope2d_backward(&backend_cpu, NULL, 0, b, pos, pos_col, N, H, d, ld, 0);
        expect("rope2d", "backward", norm_err(a, b, n), TOL_ELEM);
    }
    free(pos), free(pos_col), free(x), free(a), free(b);
}

/* Llama-3 frequency scaling as rope.cu's threads compute it (rr_rope_inv_freq per pair, then
 * rr_rope_cos_sin_freq), against the CPU backend's table of the same frequencies */
static void test_rope_llama3(int N, int H, int d, int ld) {
    const RopeFreq rf = {.theta = 500000.0, .llama3 = 1, .factor = 8.0, .low_freq_factor = 1.0,
                         .high_freq_factor = 4.0, .original_max_pos = 2048.0};
    size_t n = (size_t)N * ld;
    int* pos = callocCheck(N, sizeof(int));
    for (int i = 0; i < N; i++) pos[i] = (int)(rng_u64() % 8192);
    float* x = frand(n, 1.0f);
    float *a = fcopy(x, n), *b = fcopy(x, n);
    for (int sign = 1; sign >= -1; sign -= 2) {
        for (int i = 0; i < N; i++)
            for (int h = 0; h < H; h++)
                for (int j = 0; j < d / 2; j++) {
                    float c, s;
                    double f = rr_rope_inv_freq(j, d, rf.theta, 1, rf.factor, rf.low_freq_factor, rf.high_freq_factor,
                                                rf.original_max_pos);
                    rr_rope_cos_sin_freq(pos[i], sign, f, &c, &s);
                    float* v = a + (size_t)i * ld + (size_t)h * d;
                    rr_rope_rotate_pair(&v[j], &v[j + d / 2], c, s);
                }
        if (sign > 0) backend_cpu.ops->rope_forward(&backend_cpu, buf_f32(b), pos, N, H, d, ld, &rf);
        else backend_cpu.ops->rope_backward(&backend_cpu, b, pos, N, H, d, ld, &rf);
        expect("rope llama3", sign > 0 ? "forward" : "backward", norm_err(a, b, n), TOL_ELEM);
    }
    expect("rope llama3", "roundtrip", norm_err(a, x, n), TOL_ELEM);
    free(pos), free(x), free(a), free(b);
}

/* ---- cross-entropy: row max and float sum of exp (the block reductions), then kernel_math ------- */

static void test_crossentropy(int N, int V) {
    size_t n = (size_t)N * V;
    float* z = frand(n, 4.0f);
    int* t = callocCheck(N, sizeof(int));
    for (int i = 0; i < N; i++) t[i] = (i % 3 == 1) ? RR_CE_IGNORE_INDEX : (int)(rng_u64() % V);
    float *lse = fvec(N), *lse_ref = fvec(N), loss_ref = 0.0f;
    double loss = 0.0;
    for (int i = 0; i < N; i++) {
        const float* zr = z + (size_t)i * V;
        float m = -INFINITY, s = 0.0f;
        for (int v = 0; v < V; v++) m = zr[v] > m ? zr[v] : m;
        for (int v = 0; v < V; v++) s += expf(zr[v] - m);
        lse[i] = rr_ce_lse(m, s);
        if (t[i] != RR_CE_IGNORE_INDEX) loss += (double)lse[i] - zr[t[i]];
    }
    backend_cpu.ops->crossentropy_forward(&backend_cpu, &loss_ref, lse_ref, buf_f32(z), t, N, V);
    float lossf = (float)loss;
    expect("crossentropy", "lse", norm_err(lse, lse_ref, N), TOL_ROW);
    expect("crossentropy", "loss", norm_err(&lossf, &loss_ref, 1), TOL_ROW);
    float scale = 1.0f / 7.0f;
    float* dz = frand(n, 1.0f);
    float* dz_ref = fcopy(dz, n);
    for (int i = 0; i < N; i++) {
        if (t[i] == RR_CE_IGNORE_INDEX) continue;
        for (int v = 0; v < V; v++) dz[(size_t)i * V + v] += rr_ce_dlogit(z[(size_t)i * V + v], lse_ref[i], v == t[i], scale);
    }
    backend_cpu.ops->crossentropy_backward(&backend_cpu, buf_f32(dz_ref), buf_f32(z), lse_ref, t, scale, N, V);
    expect("crossentropy", "dlogits", norm_err(dz, dz_ref, n), TOL_BWD);
    free(z), free(t), free(lse), free(lse_ref), free(dz), free(dz_ref);
}

/* ---- attention: the kernel's tiled online softmax against a direct double softmax --------------- */

#define ATT_TILE 32 /* keys per tile, as attention.cu's ATT_BK */

typedef struct {
    int S, T, H, d, ld, causal;
    const int* cu;
} AttShape;

static int att_visible(const AttShape* a, int i, int j) { return !a->causal || j <= i; } /* within a sequence */

/* out (T, H*d), lse (T, H), through rr_online_softmax_* with 32-key tiles (block max first). */
static void attention_forward_tiled(float* out, float* lse, const float* q, const float* k, const float* v,
                                    const AttShape* a) {
    float scale = 1.0f / sqrtf((float)a->d);
    int d = a->d;
    float* acc = fvec(d);
    for (int s = 0; s < a->S; s++) {
        int st = a->cu[s], len = a->cu[s + 1] - st;
        for (int h = 0; h < a->H; h++)
            for (int i = 0; i < len; i++) {
                const float* qi = q + (size_t)(st + i) * a->ld + h * d;
                float m = -INFINITY, l = 0.0f, sc[ATT_TILE];
                memset(acc, 0, d * sizeof(float));
                for (int k0 = 0; k0 < len; k0 += ATT_TILE) {
                    float mblk = -INFINITY;
                    for (int jj = 0; jj < ATT_TILE; jj++) {
                        int j = k0 + jj;
                        sc[jj] = -INFINITY;
                        if (j < len && att_visible(a, i, j)) {
                            const float* kj = k + (size_t)(st + j) * a->ld + h * d;
                            float dot = 0.0f;
                            for (int c = 0; c < d; c++) dot += qi[c] * kj[c];
                            sc[jj] = scale * dot;
                        }
                        mblk = sc[jj] > mblk ? sc[jj] : mblk;
                    }
                    float corr = rr_online_softmax_raise(&m, mblk);
                    float psum = 0.0f;
                    for (int c = 0; c < d; c++) acc[c] *= corr;
                    for (int jj = 0; jj < ATT_TILE; jj++) {
                        float p = rr_online_softmax_weight(sc[jj], m);
                        psum += p;
                        if (p == 0.0f) continue;
                        const float* vj = v + (size_t)(st + k0 + jj) * a->ld + h * d;
                        for (int c = 0; c < d; c++) acc[c] += p * vj[c];
                    }
                    l = l * corr + psum;
                }
                for (int c = 0; c < d; c++) out[(size_t)(st + i) * a->H * d + h * d + c] = acc[c] / l;
                lse[(size_t)(st + i) * a->H + h] = rr_online_softmax_lse(m, l);
            }
    }
    free(acc);
}

/* dq, dk, dv (stride ld) += gradients, recomputing p = exp(s - lse) and ds = rr_attention_dscore. */
static void attention_backward_recompute(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                         const float* lse, const float* q, const float* k, const float* v,
                                         const AttShape* a) {
    float scale = 1.0f / sqrtf((float)a->d);
    int d = a->d, HD = a->H * d;
    for (int s = 0; s < a->S; s++) {
        int st = a->cu[s], len = a->cu[s + 1] - st;
        for (int h = 0; h < a->H; h++)
            for (int i = 0; i < len; i++) {
                size_t ti = (size_t)(st + i);
                const float *qi = q + ti * a->ld + h * d, *doi = dout + ti * HD + h * d, *oi = out + ti * HD + h * d;
                float D = 0.0f;
                for (int c = 0; c < d; c++) D += doi[c] * oi[c];
                for (int j = 0; j < len; j++) {
                    if (!att_visible(a, i, j)) continue;
                    size_t tj = (size_t)(st + j);
                    const float *kj = k + tj * a->ld + h * d, *vj = v + tj * a->ld + h * d;
                    float dot = 0.0f, dp = 0.0f;
                    for (int c = 0; c < d; c++) dot += qi[c] * kj[c], dp += doi[c] * vj[c];
                    float p = rr_online_softmax_weight(scale * dot, lse[ti * a->H + h]);
                    float ds = rr_attention_dscore(p, dp, D);
                    for (int c = 0; c < d; c++) {
                        dq[ti * a->ld + h * d + c] += scale * ds * kj[c];
                        dk[tj * a->ld + h * d + c] += scale * ds * qi[c];
                        dv[tj * a->ld + h * d + c] += p * doi[c];
                    }
                }
            }
    }
}

/* The direct double reference: materialise each softmax row. Gradients written to (not added). */
static void attention_reference(double* out, double* lse, double* dq, double* dk, double* dv, const float* dout,
                                const float* q, const float* k, const float* v, const AttShape* a) {
    int d = a->d, HD = a->H * d;
    double scale = 1.0 / sqrt((double)d);
    int maxlen = 0;
    for (int s = 0; s < a->S; s++) maxlen = a->cu[s + 1] - a->cu[s] > maxlen ? a->cu[s + 1] - a->cu[s] : maxlen;
    double *p = calloc(maxlen + 1, sizeof(double)), *dpv = calloc(maxlen + 1, sizeof(double));
    for (int s = 0; s < a->S; s++) {
        int st = a->cu[s], len = a->cu[s + 1] - st;
        for (int h = 0; h < a->H; h++)
            for (int i = 0; i < len; i++) {
                size_t ti = (size_t)(st + i);
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j < len; j++) {
                    p[j] = -INFINITY;
                    if (!att_visible(a, i, j)) continue;
                    double dot = 0.0;
                    for (int c = 0; c < d; c++) dot += (double)q[ti * a->ld + h * d + c] * k[(size_t)(st + j) * a->ld + h * d + c];
                    p[j] = scale * dot;
                    m = p[j] > m ? p[j] : m;
                }
                for (int j = 0; j < len; j++) sum += p[j] == -INFINITY ? 0.0 : exp(p[j] - m);
                for (int j = 0; j < len; j++) p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - m) / sum;
                lse[ti * a->H + h] = m + log(sum);
                for (int c = 0; c < d; c++) {
                    double o = 0.0;
                    for (int j = 0; j < len; j++) o += p[j] * v[(size_t)(st + j) * a->ld + h * d + c];
                    out[ti * HD + h * d + c] = o;
                }
                /* backward: dP_j = dout . v_j, dS_j = P_j (dP_j - sum_j' P_j' dP_j') */
                double Dd = 0.0;
                for (int j = 0; j < len; j++) {
                    dpv[j] = 0.0;
                    for (int c = 0; c < d; c++) dpv[j] += (double)dout[ti * HD + h * d + c] * v[(size_t)(st + j) * a->ld + h * d + c];
                    Dd += p[j] * dpv[j];
                }
                for (int j = 0; j < len; j++) {
                    double ds = p[j] * (dpv[j] - Dd);
                    size_t tj = (size_t)(st + j);
                    for (int c = 0; c < d; c++) {
                        dq[ti * a->ld + h * d + c] += scale * ds * k[tj * a->ld + h * d + c];
                        dk[tj * a->ld + h * d + c] += scale * ds * q[ti * a->ld + h * d + c];
                        dv[tj * a->ld + h * d + c] += p[j] * dout[ti * HD + h * d + c];
                    }
                }
            }
    }
    free(p), free(dpv);
}

static void test_attention(const char* name, const int* lens, int S, int H, int d, int causal) {
    int* cu = callocCheck(S + 1, sizeof(int));
    for (int s = 0; s < S; s++) cu[s + 1] = cu[s] + lens[s];
    int T = cu[S], ld = 3 * H * d; /* q, k, v interleaved in one qkv buffer, as the ViT's qkv linear */
    AttShape a = {S, T, H, d, ld, causal, cu};
    size_t nqkv = (size_t)T * ld, nout = (size_t)T * H * d;
    float* qkv = frand(nqkv, 1.5f);
    const float *q = qkv, *k = qkv + H * d, *v = qkv + 2 * H * d;
    float *out = fvec(nout), *lse = fvec((size_t)T * H), *dout = frand(nout, 1.0f);
    float* dqkv = fvec(nqkv);
    double *out_ref = calloc(nout, sizeof(double)), *lse_ref = calloc((size_t)T * H, sizeof(double));
    double* dqkv_ref = calloc(nqkv, sizeof(double));
    attention_forward_tiled(out, lse, q, k, v, &a);
    attention_reference(out_ref, lse_ref, dqkv_ref, dqkv_ref + H * d, dqkv_ref + 2 * H * d, dout, q, k, v, &a);
    char what[64];
    snprintf(what, sizeof what, "attn %s", name);
    expect(what, "out", norm_err_d(out, out_ref, nout), TOL_ATT);
    expect(what, "lse", norm_err_d(lse, lse_ref, (size_t)T * H), TOL_ATT);
    attention_backward_recompute(dqkv, dqkv + H * d, dqkv + 2 * H * d, dout, out, lse, q, k, v, &a);
    /* compare the q, k, v thirds of each row separately (their scales differ) */
    float* part = fvec(nout);
    double* part_ref = calloc(nout, sizeof(double));
    static const char* names[3] = {"dq", "dk", "dv"};
    for (int w = 0; w < 3; w++) {
        for (int t = 0; t < T; t++)
            for (int c = 0; c < H * d; c++) {
                part[(size_t)t * H * d + c] = dqkv[(size_t)t * ld + w * H * d + c];
                part_ref[(size_t)t * H * d + c] = dqkv_ref[(size_t)t * ld + w * H * d + c];
            }
        expect(what, names[w], norm_err_d(part, part_ref, nout), TOL_ATT);
    }
    /* and against the CPU backend's own flash implementation (BLIS tiles of 64, its own exp) */
    float *out_cpu = fvec(nout), *lse_cpu = fvec((size_t)T * H), *dqkv_cpu = fvec(nqkv);
    backend_cpu.ops->attention_forward(&backend_cpu, buf_f32(out_cpu), lse_cpu, buf_f32(q), buf_f32(k), buf_f32(v), cu, S, T, H, H, d, ld, ld, causal);
    backend_cpu.ops->attention_backward(&backend_cpu, dqkv_cpu, dqkv_cpu + H * d, dqkv_cpu + 2 * H * d, NULL, NULL, NULL, 0, buf_f32(dout), buf_f32(out_cpu), lse_cpu, buf_f32(q), buf_f32(k), buf_f32(v), cu,
                                   S, T, H, H, d, ld, ld, causal);
    snprintf(what, sizeof what, "attn %s/cpu", name);
    expect(what, "out", norm_err(out, out_cpu, nout), TOL_ATT);
    expect(what, "lse", norm_err(lse, lse_cpu, (size_t)T * H), TOL_ATT);
    expect(what, "dqkv", norm_err(dqkv, dqkv_cpu, nqkv), TOL_ATT);
    free(cu), free(qkv), free(out), free(lse), free(dout), free(dqkv), free(out_ref), free(lse_ref), free(dqkv_ref);
    free(part), free(part_ref), free(out_cpu), free(lse_cpu), free(dqkv_cpu);
}

/* The online-softmax state itself: folding scores one at a time, in any order, gives the lse. */
static void test_online_softmax(void) {
    enum { n = 200 };
    float s[n];
    double m = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++) s[i] = (i % 17 == 0) ? -INFINITY : 20.0f * rng_sym();
    for (int i = 0; i < n; i++) m = s[i] > m ? s[i] : m;
    for (int i = 0; i < n; i++) sum += s[i] == -INFINITY ? 0.0 : exp(s[i] - m);
    float ref = (float)(m + log(sum));
    float fm = -INFINITY, fl = 0.0f, p;
    for (int i = 0; i < n; i++) rr_online_softmax_update(&fm, &fl, s[i], &p);
    float got = rr_online_softmax_lse(fm, fl);
    expect("online_softmax", "lse", norm_err(&got, &ref, 1), TOL_ROW);
    /* a state that has seen only masked scores stays empty and rescales to 0, not NaN */
    fm = -INFINITY, fl = 0.0f;
    float c = rr_online_softmax_update(&fm, &fl, -INFINITY, &p);
    int ok = c == 0.0f && p == 0.0f && fl == 0.0f && fm == -INFINITY;
    c = rr_online_softmax_update(&fm, &fl, 1.5f, &p);
    ok &= c == 0.0f && p == 1.0f && fl == 1.0f && fm == 1.5f;
    printf("  %-14s %-10s %s\n", "online_softmax", "masked", ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

/* Reference rounding through double: the two bf16 neighbours of x, the nearer one, ties to the even
 * mantissa; past the largest finite bf16 (by at least half its ulp) the result is inf. */
static uint16_t bf16_reference(float x) {
    if (isnan(x)) return 0x7fc0;
    uint32_t u = rr_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    double ax = fabs((double)x);
    uint16_t lo = (uint16_t)((rr_f32_bits((float)ax) >> 16) & 0x7fffu); /* truncation: below or equal */
    if (lo >= 0x7f80u) return sign | lo;                              /* inf */
    double vlo = rr_bf16_to_f32(lo);
    double vhi = (lo + 1u == 0x7f80u) ? ldexp(1.0, 128) : rr_bf16_to_f32((uint16_t)(lo + 1u));
    uint16_t r;
    if (ax - vlo < vhi - ax) r = lo;
    else if (ax - vlo > vhi - ax) r = (uint16_t)(lo + 1u);
    else r = (lo & 1u) ? (uint16_t)(lo + 1u) : lo;
    return sign | r;
}

static void test_bf16(void) {
    int bad = 0;
    /* every bf16 value survives bf16 -> f32 -> bf16 (NaNs stay NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rr_bf16_to_f32((uint16_t)h);
        uint16_t back = rr_f32_to_bf16(f);
        int nan = ((h & 0x7fffu) > 0x7f80u);
        if (nan ? ((back & 0x7fffu) <= 0x7f80u) : back != h) bad++;
    }
    printf("  %-14s %-10s %d mismatches of 65536 %s\n", "bf16", "roundtrip", bad, bad ? "FAIL" : "ok");
    failures += bad != 0;
    /* rounding against the double reference: random bit patterns (all exponents), exact ties,
     * and the edges (largest finite, overflow, subnormals, signed zeros) */
    bad = 0;
    int n = 0;
    static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x00008000u, 0x00018000u, 0x7f7fffffu,
                                     0x7f7f7fffu, 0x7f7f8000u, 0x7f7f8001u, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                     0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7fc00001u, 0xffc12345u};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        float x = rr_bits_f32(edges[i]);
        uint16_t got = rr_f32_to_bf16(x), ref = bf16_reference(x);
        int same = isnan(x) ? ((got & 0x7fffu) > 0x7f80u && (got & 0x8000u) == ((edges[i] >> 16) & 0x8000u)) : got == ref;
        if (!same) {
            printf("    f32 0x%08x -> bf16 0x%04x, expected 0x%04x\n", edges[i], got, ref);
            bad++;
        }
        n++;
    }
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)rng_u64();
        if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u; /* exact tie */
        float x = rr_bits_f32(u);
        if (isnan(x)) continue;
        if (rr_f32_to_bf16(x) != bf16_reference(x)) {
            if (bad < 5) printf("    f32 0x%08x -> bf16 0x%04x, expected 0x%04x\n", u, rr_f32_to_bf16(x), bf16_reference(x));
            bad++;
        }
        n++;
    }
    printf("  %-14s %-10s %d mismatches of %d %s\n", "bf16", "rounding", bad, n, bad ? "FAIL" : "ok");
    failures += bad != 0;
}

/* ---- cuDNN attention's scratch (engine/cuda/attention_scratch.h): what BackendDevice.reserve sets aside must
 * hold every call up to the stage's largest, so that no step allocates. Checked here on the CPU:
 *   1. one layout recomputed by hand (T 300, S 2, H 2, d 64, ld 384, forward, first run);
 *   2. for a grid of shapes, both directions, with and without the first-run check: every region 256-byte
 *      aligned, in order, without overlap, and at least as large as what the kernels write there (the bf16
 *      copies (T + Smax) H d x 2 bytes, the row sums (T + Smax) H and the dQ accumulator (T + Smax) H d
 *      floats, the stats (T + Smax) H floats, three
 *      offsets arrays of S + 1 each 16-byte aligned, the workspace, the check buffers and their counter);
 *   3. the reservation at (T, S) holds every layout at (T' <= T, S' <= S) with a workspace within the
 *      budget, and is exactly the larger of the forward's and (when on) the backward's layout at (T, S):
 *      no slack that would hide a region left out of the reservation. */
static void test_attn_scratch(void) {
    int bad = 0;
    /* 1: n = 38400 values, R = 300 + 320 rows: bf16 copies 620 x 128 x 2 = 158720 bytes each (256-aligned),
     * stats 620 x 2 x 4 = 4960 -> 5120, offsets 3 x 4 ints -> 256, workspace 153600 + 4 MiB = 4347904,
     * check (38400 + 600 + 1) floats = 156004 -> 156160 */
    RrAttnScratch one = rr_cudnn_attn_scratch(0, 300, 2, 2, 64, 384, rr_cudnn_attn_workspace_budget(300, 2, 64), 1);
    size_t want = 4 * 158720 + 5120 + 256 + 4347904 + 156160;
    if (one.total != want || one.stats_at != 4 * 158720 || one.offsets_at != 4 * 158720 + 5120 ||
        one.work_at != 4 * 158720 + 5120 + 256) {
        printf("  attn_scratch: FAIL: T 300 S 2 H 2 d 64: total %zu (want %zu), offsets at %zu, workspace at %zu\n",
               one.total, want, one.offsets_at, one.work_at);
        bad++;
    }
    static const int Ts[] = {1, 63, 64, 65, 300, 4096}, Ss[] = {1, 2, 7, 64}, Hs[] = {1, 2, 32}, ds[] = {8, 64, 128};
    int shapes = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
        for (size_t si = 0; si < sizeof Ss / sizeof *Ss; si++)
            for (size_t hi = 0; hi < sizeof Hs / sizeof *Hs; hi++)
                for (size_t di = 0; di < sizeof ds / sizeof *ds; di++)
                    for (int bwd = 0; bwd < 2; bwd++)
                        for (int chk = 0; chk < 2; chk++) {
                            int T = Ts[ti], S = Ss[si] < T ? Ss[si] : T, H = Hs[hi], d = ds[di], ld = 3 * H * d;
                            size_t ws = rr_cudnn_attn_workspace_budget(T, H, d) - 1000, n = (size_t)T * H * d;
                            size_t R = (size_t)T + (size_t)(T + 63) / 64 * 64;
                            RrAttnScratch l = rr_cudnn_attn_scratch(bwd, T, S, H, d, ld, ws, chk);
                            shapes++;
                            /* 2: regions in order, aligned, large enough */
                            size_t at = 0;
                            int ok = l.n_bf16 == (bwd ? 8 : 4);
                            for (int i = 0; i < l.n_bf16; i++) {
                                ok &= l.bf16_at[i] % 256 == 0 && l.bf16_at[i] >= at;
                                at = l.bf16_at[i] + R * H * d * 2;
                            }
                            if (bwd) {
                                ok &= l.dsum_at % 256 == 0 && l.dsum_at >= at;
                                at = l.dsum_at + R * H * 4;
                                ok &= l.dqacc_at % 256 == 0 && l.dqacc_at >= at;
                                at = l.dqacc_at + R * H * d * 4;
                            }
                            ok &= l.stats_at % 256 == 0 && l.stats_at >= at;
                            at = l.stats_at + R * H * 4;
                            ok &= l.offsets_at % 256 == 0 && l.offsets_at >= at && rr_cudnn_attn_off_stride(S) % 4 == 0 &&
                                  rr_cudnn_attn_off_stride(S) >= (size_t)S + 1;
                            at = l.offsets_at + 3 * rr_cudnn_attn_off_stride(S) * 4;
                            ok &= l.work_at % 256 == 0 && l.work_at >= at;
                            at = l.work_at + ws;
                            ok &= l.check_at % 256 == 0 && l.check_at >= at;
                            if (chk) at = l.check_at + ((bwd ? (size_t)3 * T * ld + 3 : n + (size_t)T * H) + 1) * 4;
                            ok &= l.total >= at && l.total - at < 256 + 256;
                            /* 3: the reservation at (T, S) holds every smaller call */
                            size_t res = rr_cudnn_attn_reserve_bytes(T, S, H, d, ld, bwd);
                            for (int t2 = 1; t2 <= T; t2 += T / 7 + 1)
                                for (int s2 = 1; s2 <= S && s2 <= t2; s2 += S / 3 + 1)
                                    for (int b2 = 0; b2 <= bwd; b2++)
                                        ok &= rr_cudnn_attn_scratch(b2, t2, s2, H, d, ld,
                                                                     rr_cudnn_attn_workspace_budget(t2, H, d), 1)
                                                  .total <= res;
                            size_t wsb = rr_cudnn_attn_workspace_budget(T, H, d);
                            size_t f = rr_cudnn_attn_scratch(0, T, S, H, d, ld, wsb, 1).total;
                            size_t b = rr_cudnn_attn_scratch(1, T, S, H, d, ld, wsb, 1).total;
                            ok &= res == (bwd && b > f ? b : f);
                            if (!ok) {
                                if (bad < 5)
                                    printf("  attn_scratch: FAIL: backward %d check %d T %d S %d H %d d %d: total %zu, "
                                           "reserve %zu\n", bwd, chk, T, S, H, d, l.total, res);
                                bad++;
                            }
                        }
    printf("  %-14s %d shapes x layouts: %s\n", "attn_scratch", shapes, bad ? "FAIL" : "ok");
    failures += bad != 0;
}

int main(void) {
    test_gelu(5000);
    test_swiglu(5000);
    test_layernorm(1, 13);
    test_layernorm(37, 300);
    test_rmsnorm(1, 9);
    test_rmsnorm(37, 300);
    test_rope(1, 1, 2, 2);
    test_rope(9, 2, 10, 61);
    test_rope(33, 4, 32, 3 * 128);
    test_rope_llama3(17, 2, 64, 2 * 64 + 3);
    test_crossentropy(1, 5);
    test_crossentropy(40, 513);
    test_online_softmax();
    static const int lens1[] = {1}, lens3[] = {1, 40, 75}, lens4[] = {32, 33, 0, 7};
    test_attention("len1", lens1, 1, 1, 4, 1);
    test_attention("ragged_causal", lens3, 3, 2, 8, 1);
    test_attention("ragged_bidir", lens3, 3, 2, 8, 0);
    test_attention("tile_edges", lens4, 4, 3, 16, 1);
    test_bf16();
    test_attn_scratch();
    printf("kernel_math: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
