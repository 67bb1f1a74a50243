/* test_cuda_bf16a.c — the CUDA backend's bf16 table on its two activation storages (BackendOps.bf16_activations:
 * one ops table whose entries dispatch on the activation Bufs' dtypes), op by op.
 *
 * The two storages have the same numerics (engine.h: the same values at the same rounding points), only the storage
 * of the activations differs. Each case makes random inputs, bf16 values where they are activations, runs the op
 * twice through the one table on the same device, once on f32-word activations (B16) and once on 2-byte ones (B16A:
 * the same table, its activations uploaded as 2-byte words and passed as Bufs of DTYPE_BF16; weights are 2-byte on
 * both; gradients, statistics and biases f32 on both), and compares every output: the activations the 2-byte run
 * wrote widened to f32, the f32 ones as they are. A table that picked the wrong kernel for a storage fails here (a
 * Buf of the other dtype is refused, or the values differ). Backward ops add into gradients pre-filled with the same
 * random values. The gather's table is an activation there too (2-byte on the 2-byte run, engine.h).
 *
 * In the CPU emulation (test_cuda_bf16a_emu) the comparison is BITWISE: both runs' GEMMs are the same BLIS product
 * of the same bf16 operands, and the other kernels compute the same f32 values before the store. On a device
 * (test_cuda_bf16a, label gpu) cuBLASLt may pick another algorithm for a bf16 output than for an f32 one, and cuDNN's
 * attention differs from the own kernel's, so values may differ by one bf16 ulp: 2^-7 of the tensor's largest value
 * there. Also checked: the tables' capability (only the CUDA bf16 table takes 2-byte activations), and that a call
 * mixing the storages (CUDA) or a 2-byte activation given to a CPU op is refused, naming the op.
 *
 * Usage: test_cuda_bf16a [case-name-substring]; exit 77 (skipped) without a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "tests/support/util/proc.h"

#define SKIP_RC 77

#ifdef RR_CUDA_EMU
/* test_cuda_bf16a_emu: the CUDA backend's source on the CPU emulation of the CUDA runtime (tests/support/cuda_emu) */
const Backend* backend_cuda_emu_get(char* why, size_t why_len);
#define backend_cuda_get backend_cuda_emu_get
#endif

/* The one CUDA bf16 table twice (copies: the same ops and device), so that a case tells its two runs apart: B16 runs
 * it on f32-word activations, B16A on 2-byte bf16 ones. */
static Backend sides[2];
static const Backend* B16 = &sides[0];
static const Backend* B16A = &sides[1];
/* the storage of be's run's activations, and an activation Buf in it */
static DType act_dt(const Backend* be) { return be == B16A ? DTYPE_BF16 : DTYPE_F32; }
static Buf act_buf(const Backend* be, const void* p) { return buf_of(p, act_dt(be)); }
static int failures = 0, checks = 0;
static const char* case_name = "";
static double tol = 0.0; /* 0 in the emulation: bitwise */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng_u64(void) { /* splitmix64 */
    return rr_splitmix64(&rng_state);
}
static float rng_sym(void) { return (float)(2.0 * (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0) - 1.0); }
/* n random values in [-scale, scale); bf16 = 1: rounded to bf16 values (an activation) */
static float* hrand(size_t n, float scale, int bf16) {
    float* x = mallocCheck((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = bf16 ? rr_bf16_round(scale * rng_sym()) : scale * rng_sym();
    return x;
}

/* ---- device buffers in each table's storage ----------------------------------------------------------- */

/* f32 words (gradients, statistics, biases, 1-D weights) */
static float* up32(const Backend* be, const float* h, size_t n) {
    float* d = be->dev->alloc((n ? n : 1) * sizeof(float));
    be->dev->copy_h2d(be, d, h, n * sizeof(float));
    return d;
}
static uint16_t* to16(const float* h, size_t n) {
    uint16_t* b = mallocCheck((n ? n : 1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) b[i] = rr_f32_to_bf16(h[i]);
    return b;
}
/* a 2-D weight: 2-byte on both tables (weight_dtype) */
static float* upw(const Backend* be, const float* h, size_t n) {
    uint16_t* b = to16(h, n);
    float* d = be->dev->alloc((n ? n : 1) * sizeof(uint16_t));
    be->dev->copy_h2d(be, d, b, n * sizeof(uint16_t));
    free(b);
    return d;
}
/* a GEMM bias in be's storage (weight_dtype: 2-byte words on both CUDA bf16 tables, the compute copy AdamW writes) */
static float* upb(const Backend* be, const float* h, size_t n) {
    return be->weight_dtype == DTYPE_BF16 ? upw(be, h, n) : up32(be, h, n);
}
/* an activation in the storage of be's run (act_dt) */
static float* upa(const Backend* be, const float* h, size_t n) {
    return act_dt(be) == DTYPE_BF16 ? upw(be, h, n) : up32(be, h, n);
}
/* host f32 copy of n values of a device buffer; act: an activation in be's storage */
static float* down(const Backend* be, const float* d, size_t n, int act) {
    float* h = mallocCheck((n ? n : 1) * sizeof(float));
    if (act && act_dt(be) == DTYPE_BF16) {
        uint16_t* b = mallocCheck((n ? n : 1) * sizeof(uint16_t));
        be->dev->copy_d2h(be, b, d, n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) h[i] = rr_bf16_to_f32(b[i]);
        free(b);
    } else {
        be->dev->copy_d2h(be, h, d, n * sizeof(float));
    }
    return h;
}

/* Compare tensor `what`: a from the f32-word run, b from the 2-byte run (act: an activation buffer). */
static void cmp(const char* what, const float* a_d, const float* b_d, size_t n, int act) {
    float* a = down(B16, a_d, n, 0);
    float* b = down(B16A, b_d, n, act);
    size_t differ = 0, not_bf16 = 0;
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        uint32_t ua, ub;
        memcpy(&ua, &a[i], 4);
        memcpy(&ub, &b[i], 4);
        differ += ua != ub;
        if (act) not_bf16 += rr_bf16_round(a[i]) != a[i] && a[i] == a[i];
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) e = d; /* NaN shows */
        if (fabs(a[i]) > m) m = fabs(a[i]);
    }
    if (m > 0) e /= m;
    int ok = tol == 0.0 ? differ == 0 : e <= tol;
    ok = ok && not_bf16 == 0;
    checks++;
    printf("  %-22s %-7s %zu values, %zu differ (err %.2e)%s %s\n", case_name, what, n, differ, e,
           not_bf16 ? ", bf16 table's values not bf16" : "", ok ? "ok" : "FAIL");
    if (!ok) failures++;
    free(a), free(b);
}

/* ---- the cases ------------------------------------------------------------------------------------------ */

static void cmp16(const char* what, const float* ref_d, int ld, const uint16_t* got_d, int ld16, int rows, int W);
static uint16_t* up16(const Backend* be, const float* h, size_t n);

static void run_linear(const char* name, int N, int C, int OC, int with_bias) {
    case_name = name;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    /* the bias: bf16 values in the tables' bias storage (Backend.weight_dtype: 2-byte words, as the compute copy) */
    float *x = hrand(nx, 1, 1), *w = hrand(nw, 0.2f, 1), *b = hrand(OC, 0.5f, 1), *dy = hrand(ny, 1, 0);
    float *dx0 = hrand(nx, 1, 0), *dw0 = hrand(nw, 1, 0), *db0 = hrand(OC, 1, 0);
    const Backend* be[2] = {B16, B16A};
    float *y_d[2], *dx_d[2], *dw_d[2], *db_d[2];
    for (int t = 0; t < 2; t++) {
        float *x_d = upa(be[t], x, nx), *w_d = upw(be[t], w, nw), *b_d = upb(be[t], b, OC), *dy_d = up32(be[t], dy, ny);
        y_d[t] = upa(be[t], dy, ny); /* overwritten */
        dx_d[t] = up32(be[t], dx0, nx), dw_d[t] = up32(be[t], dw0, nw), db_d[t] = up32(be[t], db0, OC);
        be[t]->ops->linear_forward(be[t], act_buf(be[t], y_d[t]), act_buf(be[t], x_d), be_weight(be[t], w_d), be_bias(be[t], with_bias ? b_d : NULL), N, C, OC);
        /* split as the pipeline's B then W */
        be[t]->ops->linear_backward(be[t], buf_f32(dx_d[t]), NULL, NULL, buf_f32(dy_d), NULL, act_buf(be[t], x_d), be_weight(be[t], w_d), N, C, OC, 0);
        be[t]->ops->linear_backward(be[t], buf_none(), dw_d[t], with_bias ? db_d[t] : NULL, buf_f32(dy_d), NULL, act_buf(be[t], x_d), be_weight(be[t], w_d), N, C, OC, 0);
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(x_d), be[t]->dev->free(w_d), be[t]->dev->free(b_d), be[t]->dev->free(dy_d);
    }
    cmp("out", y_d[0], y_d[1], ny, 1);
    cmp("dinp", dx_d[0], dx_d[1], nx, 0);
    cmp("dweight", dw_d[0], dw_d[1], nw, 0);
    if (with_bias) cmp("dbias", db_d[0], db_d[1], OC, 0);
    for (int t = 0; t < 2; t++) be[t]->dev->free(y_d[t]), be[t]->dev->free(dx_d[t]), be[t]->dev->free(dw_d[t]), be[t]->dev->free(db_d[t]);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0);
}

/* CLIP's activations (exact GELU, QuickGELU; the tanh one is gelu_forward's) forward and backward */
static void run_act(const char* name, Act act) {
    case_name = name;
    size_t n = 1000;
    float *x = hrand(n, 4, 1), *dy = hrand(n, 1, 0), *dx0 = hrand(n, 1, 0);
    const Backend* be[2] = {B16, B16A};
    float *y_d[2], *dx_d[2];
    for (int t = 0; t < 2; t++) {
        float *x_d = upa(be[t], x, n), *dy_d = up32(be[t], dy, n);
        y_d[t] = upa(be[t], x, n), dx_d[t] = up32(be[t], dx0, n);
        be[t]->ops->act_forward(be[t], act_buf(be[t], y_d[t]), act_buf(be[t], x_d), n, act);
        be[t]->ops->act_backward(be[t], dx_d[t], NULL, dy_d, act_buf(be[t], x_d), n, act);
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(x_d), be[t]->dev->free(dy_d);
    }
    cmp("out", y_d[0], y_d[1], n, 1);
    cmp("dinp", dx_d[0], dx_d[1], n, 0);
    for (int t = 0; t < 2; t++) be[t]->dev->free(y_d[t]), be[t]->dev->free(dx_d[t]);
    free(x), free(dy), free(dx0);
}

/* the weighted row gather, adding into rows that hold values (bf16 ones, as an activation does), K taps with
 * skipped (-1) ones; the backward's dout and table gradient are f32 on both */
static void run_gather(const char* name, int N, int K, int C, int V, int weighted) {
    case_name = name;
    size_t n = (size_t)N * C, nt = (size_t)V * C;
    float *out = hrand(n, 1, 1), *table = hrand(nt, 2, 1), *w = hrand((size_t)N * K, 1, 0), *dy = hrand(n, 1, 0);
    float* dt0 = hrand(nt, 1, 0);
    int* idx = mallocCheck((size_t)N * K * sizeof(int));
    for (int i = 0; i < N * K; i++) idx[i] = i % 7 == 3 ? -1 : (int)((i * 5 + i / K) % V);
    const Backend* be[2] = {B16, B16A};
    float *o_d[2], *dt_d[2];
    for (int t = 0; t < 2; t++) {
        float *tab_d = upa(be[t], table, nt), *w_d = up32(be[t], w, (size_t)N * K), *dy_d = up32(be[t], dy, n);
        int* idx_d = be[t]->dev->alloc((size_t)N * K * sizeof(int));
        be[t]->dev->copy_h2d(be[t], idx_d, idx, (size_t)N * K * sizeof(int));
        o_d[t] = upa(be[t], out, n), dt_d[t] = up32(be[t], dt0, nt);
        be[t]->ops->rows_gather_forward(be[t], act_buf(be[t], o_d[t]), idx_d, weighted ? w_d : NULL, act_buf(be[t], tab_d), N, K, C);
        be[t]->ops->rows_gather_backward(be[t], dt_d[t], dy_d, idx_d, weighted ? w_d : NULL, N, K, C);
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(tab_d), be[t]->dev->free(w_d), be[t]->dev->free(dy_d), be[t]->dev->free(idx_d);
    }
    cmp("out", o_d[0], o_d[1], n, 1);
    /* the table gradient adds with atomics: the order of a row's adds varies (round-off) */
    double save = tol;
    tol = tol > 1e-6 ? tol : 1e-6;
    cmp("dtable", dt_d[0], dt_d[1], nt, 0);
    tol = save;
    for (int t = 0; t < 2; t++) be[t]->dev->free(o_d[t]), be[t]->dev->free(dt_d[t]);
    free(out), free(table), free(w), free(dy), free(dt0), free(idx);
}

/* the fused linear + GELU (cuBLASLt's GELU_AUX_BIAS epilogue where it applies: a bias and OC a multiple of 8; else
 * the f32 pre-activation through scratch): out and the saved pre, then gelu_backward on pre as the model runs it */
static void run_linear_gelu(const char* name, int N, int C, int OC, int with_bias) {
    case_name = name;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = hrand(nx, 1, 1), *w = hrand(nw, 0.3f, 1), *b = hrand(OC, 0.5f, 1), *dy = hrand(ny, 1, 0), *dp0 = hrand(ny, 1, 0);
    const Backend* be[2] = {B16, B16A};
    float *y_d[2], *p_d[2], *dp_d[2];
    for (int t = 0; t < 2; t++) {
        float *x_d = upa(be[t], x, nx), *w_d = upw(be[t], w, nw), *b_d = upb(be[t], b, OC), *dy_d = up32(be[t], dy, ny);
        y_d[t] = upa(be[t], dy, ny), p_d[t] = upa(be[t], dy, ny), dp_d[t] = up32(be[t], dp0, ny);
        be[t]->ops->linear_gelu_forward(be[t], act_buf(be[t], y_d[t]), act_buf(be[t], p_d[t]), act_buf(be[t], x_d), be_weight(be[t], w_d), be_bias(be[t], with_bias ? b_d : NULL), N, C, OC);
        be[t]->ops->gelu_backward(be[t], dp_d[t], dy_d, act_buf(be[t], p_d[t]), ny);
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(x_d), be[t]->dev->free(w_d), be[t]->dev->free(b_d), be[t]->dev->free(dy_d);
    }
    cmp("out", y_d[0], y_d[1], ny, 1);
    cmp("pre", p_d[0], p_d[1], ny, 1);
    cmp("dpre", dp_d[0], dp_d[1], ny, 0);
    for (int t = 0; t < 2; t++) be[t]->dev->free(y_d[t]), be[t]->dev->free(p_d[t]), be[t]->dev->free(dp_d[t]);
    free(x), free(w), free(b), free(dy), free(dp0);
}

static void run_norm(const char* name, int layer, int N, int C) {
    case_name = name;
    size_t n = (size_t)N * C;
    float *x = hrand(n, 2, 1), *w = hrand(C, 1, 0), *bias = hrand(C, 0.5f, 0), *dy = hrand(n, 1, 0);
    float *dx0 = hrand(n, 1, 0), *dw0 = hrand(C, 1, 0), *db0 = hrand(C, 1, 0);
    const Backend* be[2] = {B16, B16A};
    float *y_d[2], *mean_d[2], *rstd_d[2], *dx_d[2], *dw_d[2], *db_d[2];
    for (int t = 0; t < 2; t++) {
        float *x_d = upa(be[t], x, n), *w_d = up32(be[t], w, C), *b_d = up32(be[t], bias, C), *dy_d = up32(be[t], dy, n);
        y_d[t] = upa(be[t], x, n), mean_d[t] = up32(be[t], dy, N), rstd_d[t] = up32(be[t], dy, N);
        dx_d[t] = up32(be[t], dx0, n), dw_d[t] = up32(be[t], dw0, C), db_d[t] = up32(be[t], db0, C);
        if (layer) {
            be[t]->ops->layernorm_forward(be[t], act_buf(be[t], y_d[t]), mean_d[t], rstd_d[t], act_buf(be[t], x_d), w_d, b_d, N, C);
            be[t]->ops->layernorm_backward(be[t], dx_d[t], NULL, dw_d[t], db_d[t], dy_d, act_buf(be[t], x_d), w_d, mean_d[t], rstd_d[t], N, C);
        } else {
            be[t]->ops->rmsnorm_forward(be[t], act_buf(be[t], y_d[t]), rstd_d[t], act_buf(be[t], x_d), w_d, N, C, 1e-5);
            be[t]->ops->rmsnorm_backward(be[t], dx_d[t], NULL, NULL, dy_d, act_buf(be[t], x_d), w_d, rstd_d[t], N, C);
            be[t]->ops->rmsnorm_backward(be[t], NULL, NULL, dw_d[t], dy_d, act_buf(be[t], x_d), w_d, rstd_d[t], N, C);
        }
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(x_d), be[t]->dev->free(w_d), be[t]->dev->free(b_d), be[t]->dev->free(dy_d);
    }
    cmp("out", y_d[0], y_d[1], n, 1);
    if (layer) cmp("mean", mean_d[0], mean_d[1], N, 0);
    cmp("rstd", rstd_d[0], rstd_d[1], N, 0);
    cmp("dinp", dx_d[0], dx_d[1], n, 0);
    cmp("dweight", dw_d[0], dw_d[1], C, 0);
    if (layer) cmp("dbias", db_d[0], db_d[1], C, 0);
    for (int t = 0; t < 2; t++) {
        be[t]->dev->free(y_d[t]), be[t]->dev->free(mean_d[t]), be[t]->dev->free(rstd_d[t]);
        be[t]->dev->free(dx_d[t]), be[t]->dev->free(dw_d[t]), be[t]->dev->free(db_d[t]);
    }
    free(x), free(w), free(bias), free(dy), free(dx0), free(dw0), free(db0);
}

/* kind 0: GELU, 1: SwiGLU, 2: add (forward only: its backward is the caller's copy), 3: the residual add after a
 * TP all-reduce (b f32 words, any f32 value: add_f32_forward on 2-byte activations, add_forward on f32
 * words, where every buffer is f32 words) */
static void run_elementwise(const char* name, int kind, size_t n) {
    case_name = name;
    float *a = hrand(n, 3, 1), *b = hrand(n, 3, kind != 3), *dy = hrand(n, 1, 0), *da0 = hrand(n, 1, 0), *db0 = hrand(n, 1, 0);
    const Backend* be[2] = {B16, B16A};
    float *y_d[2], *da_d[2], *db_d[2];
    for (int t = 0; t < 2; t++) {
        float *a_d = upa(be[t], a, n), *b_d = kind == 3 ? up32(be[t], b, n) : upa(be[t], b, n), *dy_d = up32(be[t], dy, n);
        y_d[t] = upa(be[t], a, n), da_d[t] = up32(be[t], da0, n), db_d[t] = up32(be[t], db0, n);
        if (kind == 0) {
            be[t]->ops->gelu_forward(be[t], act_buf(be[t], y_d[t]), act_buf(be[t], a_d), n);
            be[t]->ops->gelu_backward(be[t], da_d[t], dy_d, act_buf(be[t], a_d), n);
        } else if (kind == 1) {
            be[t]->ops->swiglu_forward(be[t], act_buf(be[t], y_d[t]), act_buf(be[t], a_d), act_buf(be[t], b_d), n);
            be[t]->ops->swiglu_backward(be[t], buf_f32(da_d[t]), buf_f32(db_d[t]), dy_d, act_buf(be[t], a_d), act_buf(be[t], b_d), n);
        } else if (kind == 3) {
            if (act_dt(be[t]) == DTYPE_BF16) {
                be[t]->ops->add_f32_forward(be[t], act_buf(be[t], y_d[t]), act_buf(be[t], a_d), b_d, n);
                be[t]->ops->add_f32_forward(be[t], act_buf(be[t], a_d), act_buf(be[t], a_d), b_d, n); /* in place */
            } else {
                be[t]->ops->add_forward(be[t], act_buf(be[t], y_d[t]), act_buf(be[t], a_d), act_buf(be[t], b_d), n);
                be[t]->ops->add_forward(be[t], act_buf(be[t], a_d), act_buf(be[t], a_d), act_buf(be[t], b_d), n);
            }
            be[t]->dev->copy_d2d(be[t], da_d[t], a_d, n * (act_dt(be[t]) == DTYPE_BF16 ? 2 : 4));
        } else {
            be[t]->ops->add_forward(be[t], act_buf(be[t], y_d[t]), act_buf(be[t], a_d), act_buf(be[t], b_d), n);
            be[t]->ops->add_forward(be[t], act_buf(be[t], a_d), act_buf(be[t], a_d), act_buf(be[t], b_d), n); /* in place */
            be[t]->dev->copy_d2d(be[t], da_d[t], a_d, n * (act_dt(be[t]) == DTYPE_BF16 ? 2 : 4));
        }
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(a_d), be[t]->dev->free(b_d), be[t]->dev->free(dy_d);
    }
    cmp("out", y_d[0], y_d[1], n, 1);
    if (kind >= 2) cmp("inplace", da_d[0], da_d[1], n, 1);
    else cmp("dinp", da_d[0], da_d[1], n, 0);
    if (kind == 1) cmp("dup", db_d[0], db_d[1], n, 0);
    for (int t = 0; t < 2; t++) be[t]->dev->free(y_d[t]), be[t]->dev->free(da_d[t]), be[t]->dev->free(db_d[t]);
    free(a), free(b), free(dy), free(da0), free(db0);
}

/* RoPE in place on rows of stride ld > H*d (the padding must stay as it was), 1-D (rf) or 2-D (rf NULL) */
static void run_rope(const char* name, const RopeFreq* rf, int N, int H, int d) {
    case_name = name;
    int ld = H * d + 5;
    size_t n = (size_t)N * ld;
    float* x = hrand(n, 2, 1);
    int *pos = mallocCheck(N * sizeof(int)), *pcol = mallocCheck(N * sizeof(int));
    for (int i = 0; i < N; i++) pos[i] = (i * 7) % 23, pcol[i] = (i * 3) % 11;
    const Backend* be[2] = {B16, B16A};
    float* x_d[2];
    for (int t = 0; t < 2; t++) {
        int* pos_d = be[t]->dev->alloc(N * sizeof(int));
        int* pcol_d = be[t]->dev->alloc(N * sizeof(int));
        be[t]->dev->copy_h2d(be[t], pos_d, pos, N * sizeof(int));
        be[t]->dev->copy_h2d(be[t], pcol_d, pcol, N * sizeof(int));
        x_d[t] = upa(be[t], x, n);
        if (rf) be[t]->ops->rope_forward(be[t], act_buf(be[t], x_d[t]), pos_d, N, H, d, ld, rf);
        else be[t]->ops->rope2d_forward(be[t], act_buf(be[t], x_d[t]), pos_d, pcol_d, N, H, d, ld);
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(pos_d), be[t]->dev->free(pcol_d);
    }
    cmp("forward", x_d[0], x_d[1], n, 1);
    float* got = down(B16A, x_d[1], n, 1); /* the padding untouched */
    size_t moved = 0;
    for (int i = 0; i < N; i++)
        for (int j = H * d; j < ld; j++) moved += got[(size_t)i * ld + j] != x[(size_t)i * ld + j];
    checks++;
    printf("  %-22s %-7s %s\n", case_name, "padding", moved ? "FAIL: written" : "ok");
    failures += moved != 0;
    free(got);
    for (int t = 0; t < 2; t++) be[t]->dev->free(x_d[t]);
    free(x), free(pos), free(pcol);
}

/* RoPE over q and k in one call (rope_qk_forward): q of H heads and k of Hkv heads in separate buffers of their own
 * strides (padding untouched), bitwise against the bf16 table's; the bf16 table's own rope_qk against its two
 * rope_forward calls (the values the fusion must keep), and the two calls with their cos / sin read from the table
 * against the same with every angle computed (RRFP_ROPE_TABLE=0): bitwise, on a device too */
static void run_rope_qk(const char* name, const RopeFreq* rf, int N, int H, int Hkv, int d) {
    case_name = name;
    int ldq = H * d + 5, ldk = Hkv * d + 3;
    size_t nq = (size_t)N * ldq, nk = (size_t)N * ldk;
    float *q = hrand(nq, 2, 1), *k = hrand(nk, 2, 1);
    int* pos = mallocCheck(N * sizeof(int));
    /* positions inside RoPE's cos / sin table and, every fifth, past it (computed per element) */
    for (int i = 0; i < N; i++) pos[i] = i % 5 == 4 ? 70000 + i : (i * 7) % 23;
    const Backend* be[4] = {B16, B16A, B16, B16};
    float *q_d[4], *k_d[4];
    for (int t = 0; t < 4; t++) {
        if (t == 3) setenv("RRFP_ROPE_TABLE", "0", 1); /* every angle computed: the table's values must be these */
        int* pos_d = be[t]->dev->alloc(N * sizeof(int));
        be[t]->dev->copy_h2d(be[t], pos_d, pos, N * sizeof(int));
        q_d[t] = upa(be[t], q, nq);
        k_d[t] = upa(be[t], k, nk);
        if (t < 2) {
            be[t]->ops->rope_qk_forward(be[t], act_buf(be[t], q_d[t]), act_buf(be[t], k_d[t]), pos_d, N, H, Hkv, d, ldq, ldk, rf);
        } else { /* the two-call form */
            be[t]->ops->rope_forward(be[t], act_buf(be[t], q_d[t]), pos_d, N, H, d, ldq, rf);
            be[t]->ops->rope_forward(be[t], act_buf(be[t], k_d[t]), pos_d, N, Hkv, d, ldk, rf);
        }
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(pos_d);
        if (t == 3) unsetenv("RRFP_ROPE_TABLE");
    }
    cmp("q", q_d[0], q_d[1], nq, 1);
    cmp("k", k_d[0], k_d[1], nk, 1);
    cmp("q_2calls", q_d[0], q_d[2], nq, 0);
    cmp("k_2calls", k_d[0], k_d[2], nk, 0);
    cmp("q_notable", q_d[2], q_d[3], nq, 0);
    cmp("k_notable", k_d[2], k_d[3], nk, 0);
    for (int t = 0; t < 4; t++) be[t]->dev->free(q_d[t]), be[t]->dev->free(k_d[t]);
    free(q), free(k), free(pos);
}

static void run_embedding(void) {
    case_name = "embedding";
    int N = 29, C = 24, V = 11;
    float* table = hrand((size_t)V * C, 1, 1);
    int ids[29];
    for (int i = 0; i < N; i++) ids[i] = (i * 5) % V;
    const Backend* be[2] = {B16, B16A};
    float* y_d[2];
    for (int t = 0; t < 2; t++) {
        float* tab_d = upw(be[t], table, (size_t)V * C);
        int* ids_d = be[t]->dev->alloc(sizeof ids);
        be[t]->dev->copy_h2d(be[t], ids_d, ids, sizeof ids);
        y_d[t] = be[t]->dev->alloc((size_t)N * C * sizeof(float)); /* room for f32 words; bf16 ones take half */
        be[t]->ops->embedding_forward(be[t], act_buf(be[t], y_d[t]), ids_d, be_weight(be[t], tab_d), N, C);
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(tab_d), be[t]->dev->free(ids_d);
    }
    cmp("out", y_d[0], y_d[1], (size_t)N * C, 1);
    for (int t = 0; t < 2; t++) be[t]->dev->free(y_d[t]);
    free(table);
}

static void run_ce(void) {
    case_name = "crossentropy";
    int N = 13, V = 37;
    size_t n = (size_t)N * V;
    float *z = hrand(n, 6, 1), *dz0 = hrand(n, 1, 0);
    int tg[13];
    for (int i = 0; i < N; i++) tg[i] = i % 4 == 3 ? -100 : (i * 11) % V;
    const Backend* be[2] = {B16, B16A};
    float *loss_d[2], *lse_d[2], *dz_d[2];
    for (int t = 0; t < 2; t++) {
        float* z_d = upa(be[t], z, n);
        int* tg_d = be[t]->dev->alloc(sizeof tg);
        be[t]->dev->copy_h2d(be[t], tg_d, tg, sizeof tg);
        loss_d[t] = be[t]->dev->alloc(sizeof(float));
        lse_d[t] = be[t]->dev->alloc(N * sizeof(float));
        dz_d[t] = up32(be[t], dz0, n);
        be[t]->ops->crossentropy_forward(be[t], loss_d[t], lse_d[t], act_buf(be[t], z_d), tg_d, N, V);
        be[t]->ops->crossentropy_backward(be[t], buf_f32(dz_d[t]), act_buf(be[t], z_d), lse_d[t], tg_d, 0.1f, N, V);
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(z_d), be[t]->dev->free(tg_d);
    }
    cmp("loss", loss_d[0], loss_d[1], 1, 0);
    cmp("lse", lse_d[0], lse_d[1], N, 0);
    cmp("dlogits", dz_d[0], dz_d[1], n, 0);
    /* b16->crossentropy_backward: every row stored 2-byte over garbage, against the plain slot over zeros, narrowed
     * (the ignored rows: zeros) */
    {
        float* zero = calloc(n, sizeof(float));
        float *z_d = upa(B16, z, n), *ref = up32(B16, zero, n), *z16 = upa(B16A, z, n);
        int *tg0 = B16->dev->alloc(sizeof tg), *tg1 = B16A->dev->alloc(sizeof tg);
        uint16_t* dz16 = up16(B16A, dz0, n);
        B16->dev->copy_h2d(B16, tg0, tg, sizeof tg);
        B16A->dev->copy_h2d(B16A, tg1, tg, sizeof tg);
        B16->ops->crossentropy_backward(B16, buf_f32(ref), act_buf(B16, z_d), lse_d[0], tg0, 0.1f, N, V);
        B16A->ops->crossentropy_backward(B16A, buf_bf16(dz16), act_buf(B16A, z16), lse_d[1], tg1, 0.1f, N, V);
        B16->dev->synchronize(B16), B16A->dev->synchronize(B16A);
        cmp16("dlogits16", ref, V, dz16, V, N, V);
        B16->dev->free(z_d), B16->dev->free(ref), B16->dev->free(tg0), B16A->dev->free(z16), B16A->dev->free(tg1), B16A->dev->free(dz16);
        free(zero);
    }
    for (int t = 0; t < 2; t++) be[t]->dev->free(loss_d[t]), be[t]->dev->free(lse_d[t]), be[t]->dev->free(dz_d[t]);
    free(z), free(dz0);
}

/* q (T, H*d), k and v (T, Hkv*d) in separate buffers, as the LM block holds them. The 2-byte run goes
 * twice, before the f32-word one: on a device with cuDNN its first run of a shape is checked against the own kernel
 * through the f32-word entry (widened inputs), the second runs cuDNN on the 2-byte buffers directly; both are
 * compared with the f32-word run's. */
static void run_attention(const char* name, int S, const int* lens, int H, int Hkv, int d) {
    case_name = name;
    int cu[9] = {0};
    for (int s = 0; s < S; s++) cu[s + 1] = cu[s] + lens[s];
    int T = cu[S], Dq = H * d, Dkv = Hkv * d;
    size_t nq = (size_t)T * Dq, nkv = (size_t)T * Dkv;
    float *q = hrand(nq, 1.5f, 1), *k = hrand(nkv, 1.5f, 1), *v = hrand(nkv, 1.5f, 1), *dy = hrand(nq, 1, 0);
    float *dq0 = hrand(nq, 1, 0), *dk0 = hrand(nkv, 1, 0), *dv0 = hrand(nkv, 1, 0);
    const Backend* be[3] = {B16A, B16A, B16};
    float *o_d[3], *lse_d[3], *dq_d[3], *dk_d[3], *dv_d[3];
    AttnReserve ar = {.max_T = T, .max_S = S, .H = H, .d = d, .ld_qkv = Dq};
    for (int t = 0; t < 3; t++) {
        ar.act = act_dt(be[t]); /* the call's storage */
        be[t]->dev->reserve(be[t], 0, 0, &ar, 1);
        float *q_d = upa(be[t], q, nq), *k_d = upa(be[t], k, nkv), *v_d = upa(be[t], v, nkv), *dy_d = up32(be[t], dy, nq);
        int* cu_d = be[t]->dev->alloc((S + 1) * sizeof(int));
        be[t]->dev->copy_h2d(be[t], cu_d, cu, (S + 1) * sizeof(int));
        o_d[t] = upa(be[t], q, nq), lse_d[t] = be[t]->dev->alloc((size_t)T * H * sizeof(float));
        dq_d[t] = up32(be[t], dq0, nq), dk_d[t] = up32(be[t], dk0, nkv), dv_d[t] = up32(be[t], dv0, nkv);
        be[t]->ops->attention_forward(be[t], act_buf(be[t], o_d[t]), lse_d[t], act_buf(be[t], q_d), act_buf(be[t], k_d), act_buf(be[t], v_d), cu_d, S, T, H, Hkv, d, Dq, Dkv, 1);
        be[t]->ops->attention_backward(be[t], dq_d[t], dk_d[t], dv_d[t], NULL, NULL, NULL, 0, buf_f32(dy_d), act_buf(be[t], o_d[t]), lse_d[t], act_buf(be[t], q_d), act_buf(be[t], k_d), act_buf(be[t], v_d), cu_d, S, T, H,
                                  Hkv, d, Dq, Dkv, 1);
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(q_d), be[t]->dev->free(k_d), be[t]->dev->free(v_d), be[t]->dev->free(dy_d), be[t]->dev->free(cu_d);
    }
    for (int t = 0; t < 2; t++) { /* 2: the bf16 table's */
        const char* tags[2][5] = {{"out", "lse", "dq", "dk", "dv"}, {"out#2", "lse#2", "dq#2", "dk#2", "dv#2"}};
        cmp(tags[t][0], o_d[2], o_d[t], nq, 1);
        cmp(tags[t][1], lse_d[2], lse_d[t], (size_t)T * H, 0);
        cmp(tags[t][2], dq_d[2], dq_d[t], nq, 0);
        cmp(tags[t][3], dk_d[2], dk_d[t], nkv, 0);
        cmp(tags[t][4], dv_d[2], dv_d[t], nkv, 0);
    }
    for (int t = 0; t < 3; t++)
        be[t]->dev->free(o_d[t]), be[t]->dev->free(lse_d[t]), be[t]->dev->free(dq_d[t]), be[t]->dev->free(dk_d[t]), be[t]->dev->free(dv_d[t]);
    free(q), free(k), free(v), free(dy), free(dq0), free(dk0), free(dv0);
}

/* ---- the 2-byte output gradients (the ops' bf16 gradient Bufs and mirrors) --------------------------------------------
 * Each producer's 2-byte output against rr_f32_to_bf16 of the bf16 table's plain op into a zeroed f32 buffer (what
 * the plain path's GEMM conversion made of it): bitwise in the emulation, within tol on a device. W values per row
 * of stride ld16 in the 2-byte buffer, of stride ld in the reference. */
static void cmp16(const char* what, const float* ref_d, int ld, const uint16_t* got_d, int ld16, int rows, int W) {
    float* ref = down(B16, ref_d, (size_t)(rows - 1) * ld + W, 0);
    size_t n16 = (size_t)(rows - 1) * ld16 + W;
    uint16_t* got = mallocCheck(n16 * sizeof(uint16_t));
    B16A->dev->copy_d2h(B16A, got, got_d, n16 * sizeof(uint16_t));
    size_t differ = 0;
    double e = 0.0, m = 0.0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < W; c++) {
            uint16_t want = rr_f32_to_bf16(ref[(size_t)r * ld + c]), g = got[(size_t)r * ld16 + c];
            differ += want != g;
            double d = fabs((double)rr_bf16_to_f32(want) - (double)rr_bf16_to_f32(g)), a = fabs(rr_bf16_to_f32(want));
            if (!(d <= e)) e = d;
            if (a > m) m = a;
        }
    if (m > 0) e /= m;
    int ok = tol == 0.0 ? differ == 0 : e <= tol;
    checks++;
    printf("  %-22s %-7s %d values 2-byte, %zu differ from the narrowed f32 (err %.2e) %s\n", case_name, what, rows * W,
           differ, e, ok ? "ok" : "FAIL");
    failures += !ok;
    free(ref), free(got);
}
static uint16_t* up16(const Backend* be, const float* h, size_t n) { return (uint16_t*)upw(be, h, n); }

/* b16->linear_backward: dout16 (the narrowed dy) with dinp added (set 0: beta 1), dweight and dbias (the f32 dy) against
 * the bf16 table's plain slot on the f32 dy, bitwise; dinp written (set 1: beta 0, over garbage) bitwise the plain slot
 * into zeros; dinp16 (beta 0, over garbage) against its dinp narrowed */
static void run_b16_linear(const char* name, int N, int C, int OC, int with_bias) {
    case_name = name;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = hrand(nx, 1, 1), *w = hrand(nw, 0.2f, 1), *dy = hrand(ny, 1, 0), *dx0 = hrand(nx, 1, 0), *dw0 = hrand(nw, 1, 0);
    float *db0 = hrand(OC, 1, 0), *zero = calloc(nx ? nx : 1, sizeof(float));
    const Backend* be[2] = {B16, B16A};
    float *dx_d[2], *dw_d[2], *db_d[2], *dxz = NULL, *dxs = NULL;
    uint16_t* dx16 = NULL;
    for (int t = 0; t < 2; t++) {
        float *x_d = upa(be[t], x, nx), *w_d = upw(be[t], w, nw), *dy_d = up32(be[t], dy, ny);
        dx_d[t] = up32(be[t], dx0, nx), dw_d[t] = up32(be[t], dw0, nw), db_d[t] = up32(be[t], db0, OC);
        if (t == 0) {
            dxz = up32(be[t], zero, nx);
            be[t]->ops->linear_backward(be[t], buf_f32(dx_d[t]), NULL, NULL, buf_f32(dy_d), NULL, act_buf(be[t], x_d), be_weight(be[t], w_d), N, C, OC, 0);
            be[t]->ops->linear_backward(be[t], buf_none(), dw_d[t], with_bias ? db_d[t] : NULL, buf_f32(dy_d), NULL, act_buf(be[t], x_d), be_weight(be[t], w_d), N, C, OC, 0);
            be[t]->ops->linear_backward(be[t], buf_f32(dxz), NULL, NULL, buf_f32(dy_d), NULL, act_buf(be[t], x_d), be_weight(be[t], w_d), N, C, OC, 0);
        } else {
            uint16_t* dy16 = up16(be[t], dy, ny);
            dx16 = up16(be[t], dx0, nx); /* garbage: overwritten */
            dxs = up32(be[t], dx0, nx); /* garbage: written (set) */
            be[t]->ops->linear_backward(be[t], buf_f32(dx_d[t]), NULL, NULL, buf_bf16(dy16), NULL, act_buf(be[t], x_d), be_weight(be[t], w_d), N, C, OC, 0);
            be[t]->ops->linear_backward(be[t], buf_none(), dw_d[t], with_bias ? db_d[t] : NULL, buf_bf16(dy16), with_bias ? dy_d : NULL,
                                        act_buf(be[t], x_d), be_weight(be[t], w_d), N, C, OC, 0);
            be[t]->ops->linear_backward(be[t], buf_bf16(dx16), NULL, NULL, buf_bf16(dy16), NULL, act_buf(be[t], x_d), be_weight(be[t], w_d), N, C, OC, 1);
            be[t]->ops->linear_backward(be[t], buf_f32(dxs), NULL, NULL, buf_bf16(dy16), NULL, act_buf(be[t], x_d), be_weight(be[t], w_d), N, C, OC, 1);
            be[t]->dev->synchronize(be[t]);
            be[t]->dev->free(dy16);
        }
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(x_d), be[t]->dev->free(w_d), be[t]->dev->free(dy_d);
    }
    cmp("dinp", dx_d[0], dx_d[1], nx, 0);
    cmp("dweight", dw_d[0], dw_d[1], nw, 0);
    if (with_bias) cmp("dbias", db_d[0], db_d[1], OC, 0);
    cmp16("dinp16", dxz, C, dx16, C, N, C);
    cmp("dinp_set", dxz, dxs, nx, 0);
    for (int t = 0; t < 2; t++) be[t]->dev->free(dx_d[t]), be[t]->dev->free(dw_d[t]), be[t]->dev->free(db_d[t]);
    B16->dev->free(dxz), B16A->dev->free(dx16), B16A->dev->free(dxs);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(db0), free(zero);
}

/* b16->swiglu_backward (over garbage) against the plain slot into zeroed f32 buffers, narrowed; b16->rmsnorm_backward:
 * dinp bitwise the plain slot's and dinp16 its value narrowed */
static void run_b16_elementwise(const char* name, size_t n, int N, int C) {
    case_name = name;
    size_t nn = (size_t)N * C;
    float *g = hrand(n, 3, 1), *u = hrand(n, 3, 1), *dy = hrand(n, 1, 0), *zero = calloc(n, sizeof(float));
    float *x = hrand(nn, 2, 1), *w = hrand(C, 1, 0), *dyn = hrand(nn, 1, 0), *dx0 = hrand(nn, 1, 0), *rs = hrand(N, 1, 0);
    for (int i = 0; i < N; i++) rs[i] = 0.5f + fabsf(rs[i]);
    float *dg_ref = up32(B16, zero, n), *du_ref = up32(B16, zero, n), *dx_d[2];
    uint16_t *dg16 = up16(B16A, dy, n), *du16 = up16(B16A, dy, n), *dx16 = up16(B16A, dx0, nn);
    const Backend* be[2] = {B16, B16A};
    for (int t = 0; t < 2; t++) {
        float *g_d = upa(be[t], g, n), *u_d = upa(be[t], u, n), *dy_d = up32(be[t], dy, n);
        float *x_d = upa(be[t], x, nn), *w_d = up32(be[t], w, C), *dyn_d = up32(be[t], dyn, nn), *rs_d = up32(be[t], rs, N);
        dx_d[t] = up32(be[t], dx0, nn);
        if (t == 0) {
            be[t]->ops->swiglu_backward(be[t], buf_f32(dg_ref), buf_f32(du_ref), dy_d, act_buf(be[t], g_d), act_buf(be[t], u_d), n);
            be[t]->ops->rmsnorm_backward(be[t], dx_d[t], NULL, NULL, dyn_d, act_buf(be[t], x_d), w_d, rs_d, N, C);
        } else {
            be[t]->ops->swiglu_backward(be[t], buf_bf16(dg16), buf_bf16(du16), dy_d, act_buf(be[t], g_d), act_buf(be[t], u_d), n);
            be[t]->ops->rmsnorm_backward(be[t], dx_d[t], dx16, NULL, dyn_d, act_buf(be[t], x_d), w_d, rs_d, N, C);
        }
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(g_d), be[t]->dev->free(u_d), be[t]->dev->free(dy_d), be[t]->dev->free(x_d), be[t]->dev->free(w_d), be[t]->dev->free(dyn_d);
        be[t]->dev->free(rs_d);
    }
    cmp16("dgate16", dg_ref, (int)n, dg16, (int)n, 1, (int)n);
    cmp16("dup16", du_ref, (int)n, du16, (int)n, 1, (int)n);
    cmp("rms dinp", dx_d[0], dx_d[1], nn, 0);
    cmp16("rms16", dx_d[0], C, dx16, C, N, C);
    B16->dev->free(dg_ref), B16->dev->free(du_ref), B16A->dev->free(dg16), B16A->dev->free(du16), B16A->dev->free(dx16);
    for (int t = 0; t < 2; t++) be[t]->dev->free(dx_d[t]);
    free(g), free(u), free(dy), free(zero), free(x), free(w), free(dyn), free(dx0), free(rs);
}

/* b16->layernorm_backward (dinp, dweight, dbias) and b16->act_backward (each activation) over pre-filled f32 gradients:
 * the f32 results bitwise the plain slots', the 2-byte copies their final values narrowed */
static void run_b16_ln_act(const char* name, int N, int C) {
    case_name = name;
    size_t n = (size_t)N * C;
    float *x = hrand(n, 2, 1), *w = hrand(C, 1, 0), *dy = hrand(n, 1, 0), *dx0 = hrand(n, 1, 0), *m = hrand(N, 0.5f, 0);
    float *rs = hrand(N, 1, 0), *dw0 = hrand(C, 1, 0), *db0 = hrand(C, 1, 0);
    for (int i = 0; i < N; i++) rs[i] = 0.5f + fabsf(rs[i]);
    const Backend* be[2] = {B16, B16A};
    float *dx_d[2], *dw_d[2], *db_d[2], *da_d[2][3];
    uint16_t *dx16 = up16(B16A, dx0, n), *da16[3];
    static const Act acts[3] = {ACT_GELU_TANH, ACT_GELU_ERF, ACT_QUICK_GELU};
    for (int t = 0; t < 2; t++) {
        float *x_d = upa(be[t], x, n), *w_d = up32(be[t], w, C), *dy_d = up32(be[t], dy, n), *m_d = up32(be[t], m, N);
        float* rs_d = up32(be[t], rs, N);
        dx_d[t] = up32(be[t], dx0, n), dw_d[t] = up32(be[t], dw0, C), db_d[t] = up32(be[t], db0, C);
        if (t == 0) be[t]->ops->layernorm_backward(be[t], dx_d[t], NULL, dw_d[t], db_d[t], dy_d, act_buf(be[t], x_d), w_d, m_d, rs_d, N, C);
        else be[t]->ops->layernorm_backward(be[t], dx_d[t], dx16, dw_d[t], db_d[t], dy_d, act_buf(be[t], x_d), w_d, m_d, rs_d, N, C);
        for (int k = 0; k < 3; k++) {
            da_d[t][k] = up32(be[t], dx0, n);
            if (t == 0) {
                be[t]->ops->act_backward(be[t], da_d[t][k], NULL, dy_d, act_buf(be[t], x_d), n, acts[k]);
            } else {
                da16[k] = up16(be[t], dy, n);
                be[t]->ops->act_backward(be[t], da_d[t][k], da16[k], dy_d, act_buf(be[t], x_d), n, acts[k]);
            }
        }
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(x_d), be[t]->dev->free(w_d), be[t]->dev->free(dy_d), be[t]->dev->free(m_d), be[t]->dev->free(rs_d);
    }
    cmp("ln dinp", dx_d[0], dx_d[1], n, 0);
    cmp16("ln16", dx_d[0], C, dx16, C, N, C);
    cmp("ln dw", dw_d[0], dw_d[1], C, 0);
    cmp("ln db", db_d[0], db_d[1], C, 0);
    static const char* tags[3][2] = {{"gelu", "gelu16"}, {"erf", "erf16"}, {"quick", "quick16"}};
    for (int k = 0; k < 3; k++) {
        cmp(tags[k][0], da_d[0][k], da_d[1][k], n, 0);
        cmp16(tags[k][1], da_d[0][k], C, da16[k], C, N, C);
        B16->dev->free(da_d[0][k]), B16A->dev->free(da_d[1][k]), B16A->dev->free(da16[k]);
    }
    for (int t = 0; t < 2; t++) be[t]->dev->free(dx_d[t]), be[t]->dev->free(dw_d[t]), be[t]->dev->free(db_d[t]);
    B16A->dev->free(dx16);
    free(x), free(w), free(dy), free(dx0), free(m), free(rs), free(dw0), free(db0);
}

/* the f32 copy of a gradient the b16 slot may also keep: kept, it equals the bf16 table's (ref) bit for bit; not
 * kept, the device buffer got still holds its host start values */
static void kept_or_untouched(const char* what, int kept, const float* ref, const float* got, const float* start, size_t n) {
    char name[32];
    snprintf(name, sizeof name, "%s kept", what);
    if (kept) {
        cmp(name, ref, got, n, 0);
        return;
    }
    float* h = down(B16A, got, n, 0);
    int moved = memcmp(h, start, n * sizeof(float)) != 0;
    checks++;
    printf("  %-22s %-7s %s\n", case_name, what, moved ? "FAIL: written" : "ok (left as it was)");
    failures += moved;
    free(h);
}

/* b16->rope_qk_backward (rf; rf NULL: b16->rope2d_backward): the f32 gradient (rows of stride ld, padded) rotated into a
 * compact 2-byte copy; keep: dx rotated too, bitwise the plain slot's; else dx left as it was. 1-D: dq that (H heads)
 * and, in the same call, dk (one head, its own stride and copy, keep the other way) against the plain slot on it */
static void run_b16_rope(const char* name, const RopeFreq* rf, int N, int H, int d, int keep) {
    case_name = name;
    int ld = H * d + 5;
    size_t n = (size_t)N * ld;
    float* dx = hrand(n, 2, 0);
    int* pos = mallocCheck(2 * N * sizeof(int));
    for (int i = 0; i < N; i++) pos[i] = (i * 7) % 23, pos[N + i] = (i * 3) % 11;
    float *ref = up32(B16, dx, n), *got = up32(B16A, dx, n);
    uint16_t* g16 = up16(B16A, dx, (size_t)N * H * d);
    int *pos0 = B16->dev->alloc(2 * N * sizeof(int)), *pos1 = B16A->dev->alloc(2 * N * sizeof(int));
    B16->dev->copy_h2d(B16, pos0, pos, 2 * N * sizeof(int));
    B16A->dev->copy_h2d(B16A, pos1, pos, 2 * N * sizeof(int));
    int ldk = d + 3;
    size_t nk = (size_t)N * ldk;
    float* dk = hrand(nk, 2, 0);
    float *refk = up32(B16, dk, nk), *gotk = up32(B16A, dk, nk);
    uint16_t* k16 = up16(B16A, dk, (size_t)N * d);
    if (rf) {
        B16->ops->rope_backward(B16, ref, pos0, N, H, d, ld, rf);
        B16->ops->rope_backward(B16, refk, pos0, N, 1, d, ldk, rf);
        B16A->ops->rope_qk_backward(B16A, g16, H * d, got, k16, d, gotk, pos1, N, H, 1, d, ld, ldk, rf, keep, !keep);
    } else {
        B16->ops->rope2d_backward(B16, NULL, 0, ref, pos0, pos0 + N, N, H, d, ld, 0);
        B16A->ops->rope2d_backward(B16A, g16, H * d, got, pos1, pos1 + N, N, H, d, ld, keep);
    }
    B16->dev->synchronize(B16), B16A->dev->synchronize(B16A);
    cmp16("dx16", ref, ld, g16, H * d, N, H * d);
    if (rf) { /* dk: kept the other way */
        cmp16("dk16", refk, ldk, k16, d, N, d);
        kept_or_untouched("dk", !keep, refk, gotk, dk, nk);
    }
    kept_or_untouched("dx", keep, ref, got, dx, n);
    B16->dev->free(ref), B16->dev->free(pos0), B16A->dev->free(got), B16A->dev->free(g16), B16A->dev->free(pos1);
    B16->dev->free(refk), B16A->dev->free(gotk), B16A->dev->free(k16);
    free(dx), free(pos), free(dk);
}

/* b16->attention_backward: dout16 and a zeroed dv16 (compact rows) against the bf16 table's plain slot (dq, dk, dv
 * zeroed): dq, dk bitwise, dv16 its dv narrowed; and with an f32 dv (q/k/v biases) bitwise */
static void run_b16_attention(const char* name, int S, const int* lens, int H, int Hkv, int d) {
    case_name = name;
    int cu[9] = {0};
    for (int s = 0; s < S; s++) cu[s + 1] = cu[s] + lens[s];
    int T = cu[S], Dq = H * d, Dkv = Hkv * d;
    size_t nq = (size_t)T * Dq, nkv = (size_t)T * Dkv;
    float *q = hrand(nq, 1.5f, 1), *k = hrand(nkv, 1.5f, 1), *v = hrand(nkv, 1.5f, 1), *dy = hrand(nq, 1, 0);
    float* zero = calloc(nq, sizeof(float));
    const Backend* be[3] = {B16, B16A, B16A};
    float *dq_d[3], *dk_d[3], *dv_d[3];
    uint16_t *dv16 = NULL, *mq16 = NULL, *mk16 = NULL, *mv16 = NULL;
    AttnReserve ar = {.max_T = T, .max_S = S, .H = H, .d = d, .ld_qkv = Dq};
    for (int t = 0; t < 3; t++) {
        ar.act = act_dt(be[t]); /* the call's storage */
        be[t]->dev->reserve(be[t], 0, 0, &ar, 1);
        float *q_d = upa(be[t], q, nq), *k_d = upa(be[t], k, nkv), *v_d = upa(be[t], v, nkv), *dy_d = up32(be[t], dy, nq);
        int* cu_d = be[t]->dev->alloc((S + 1) * sizeof(int));
        be[t]->dev->copy_h2d(be[t], cu_d, cu, (S + 1) * sizeof(int));
        float *o_d = upa(be[t], q, nq), *lse_d = be[t]->dev->alloc((size_t)T * H * sizeof(float));
        dq_d[t] = up32(be[t], zero, nq), dk_d[t] = up32(be[t], zero, nkv), dv_d[t] = up32(be[t], zero, nkv);
        be[t]->ops->attention_forward(be[t], act_buf(be[t], o_d), lse_d, act_buf(be[t], q_d), act_buf(be[t], k_d), act_buf(be[t], v_d), cu_d, S, T, H, Hkv, d, Dq, Dkv, 1);
        if (t == 0) {
            be[t]->ops->attention_backward(be[t], dq_d[t], dk_d[t], dv_d[t], NULL, NULL, NULL, 0, buf_f32(dy_d), act_buf(be[t], o_d), lse_d, act_buf(be[t], q_d), act_buf(be[t], k_d), act_buf(be[t], v_d), cu_d, S, T, H, Hkv,
                                      d, Dq, Dkv, 1);
        } else {
            uint16_t* dy16 = up16(be[t], dy, nq);
            if (t == 1) dv16 = up16(be[t], zero, nkv);
            if (t == 2) { /* f32 gradients with their 2-byte mirrors (garbage before: overwritten) */
                mq16 = up16(be[t], dy, nq), mk16 = up16(be[t], dy, nkv), mv16 = up16(be[t], dy, nkv);
            }
            if (t == 1)
                be[t]->ops->attention_backward(be[t], dq_d[t], dk_d[t], NULL, NULL, NULL, dv16, Dkv, buf_bf16(dy16), act_buf(be[t], o_d), lse_d, act_buf(be[t], q_d),
                                               act_buf(be[t], k_d), act_buf(be[t], v_d), cu_d, S, T, H, Hkv, d, Dq, Dkv, 1);
            else /* mirrors of stride Dkv (the q mirror where Dq == Dkv) */
                be[t]->ops->attention_backward(be[t], dq_d[t], dk_d[t], dv_d[t], Dkv == Dq ? mq16 : NULL, mk16, mv16, Dkv,
                                               buf_bf16(dy16), act_buf(be[t], o_d), lse_d, act_buf(be[t], q_d), act_buf(be[t], k_d), act_buf(be[t], v_d), cu_d, S, T, H, Hkv, d, Dq, Dkv, 1);
            be[t]->dev->synchronize(be[t]);
            be[t]->dev->free(dy16);
        }
        be[t]->dev->synchronize(be[t]);
        be[t]->dev->free(q_d), be[t]->dev->free(k_d), be[t]->dev->free(v_d), be[t]->dev->free(dy_d), be[t]->dev->free(cu_d), be[t]->dev->free(o_d);
        be[t]->dev->free(lse_d);
    }
    cmp("dq", dq_d[0], dq_d[1], nq, 0);
    cmp("dk", dk_d[0], dk_d[1], nkv, 0);
    cmp16("dv16", dv_d[0], Dkv, dv16, Dkv, T, Dkv);
    cmp("dq#f32dv", dq_d[0], dq_d[2], nq, 0);
    cmp("dv#f32dv", dv_d[0], dv_d[2], nkv, 0);
    if (Dkv == Dq) cmp16("dq16m", dq_d[0], Dq, mq16, Dkv, T, Dq);
    cmp16("dk16m", dk_d[0], Dkv, mk16, Dkv, T, Dkv);
    cmp16("dv16m", dv_d[0], Dkv, mv16, Dkv, T, Dkv);
    B16A->dev->free(mq16), B16A->dev->free(mk16), B16A->dev->free(mv16);
    for (int t = 0; t < 3; t++) be[t]->dev->free(dq_d[t]), be[t]->dev->free(dk_d[t]), be[t]->dev->free(dv_d[t]);
    B16A->dev->free(dv16);
    free(q), free(k), free(v), free(dy), free(zero);
}

/* to_bf16 / from_bf16 (a stage's entry and exit): exact both ways on bf16 values */
static void run_convert(void) {
    case_name = "to_bf16/from_bf16";
    size_t n = 1000;
    float* x = hrand(n, 100, 1);
    float* x_d = up32(B16A, x, n);
    uint16_t* h_d = B16A->dev->alloc(n * sizeof(uint16_t));
    float* y_d = B16A->dev->alloc(n * sizeof(float));
    B16A->ops->to_bf16(B16A, h_d, x_d, n);
    B16A->ops->from_bf16(B16A, y_d, h_d, n);
    float* y = down(B16A, y_d, n, 0);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&x[i], &y[i], 4) != 0;
    checks++;
    printf("  %-22s %-7s %zu values, %zu differ %s\n", case_name, "trip", n, bad, bad ? "FAIL" : "ok");
    failures += bad != 0;
    B16A->dev->free(x_d), B16A->dev->free(h_d), B16A->dev->free(y_d);
    free(x), free(y);
}

/* ---- refusals: a call no kernel takes stops with an assertion naming the op ---------------------------------- */

/* Runs call(be, a, b) in a child process: 1 when it aborted with `op` (the op's name, or what the refusal says) in
 * its message on stderr, else 0. */
static int refused(const char* what, const char* op, void (*call)(const Backend*, void*, void*), const Backend* be, void* a,
                   void* b) {
    int fd[2];
    if (pipe(fd) != 0) rr_die("pipe failed");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) rr_die("fork failed");
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        call(be, a, b);
        be->dev->synchronize(be);
        _exit(0); /* not refused */
    }
    close(fd[1]);
    char msg[2048];
    int st = proc_child_output(pid, fd[0], msg, sizeof msg, NULL);
    int ok = WIFSIGNALED(st) && strstr(msg, op) != NULL;
    checks++;
    printf("  %-22s %-14s %s%s\n", "refusals", what, ok ? "refused: ok" : "not refused as it should be: FAIL\n", ok ? "" : msg);
    failures += !ok;
    return ok;
}
static void call_linear_mixed(const Backend* be, void* x16, void* y32) { /* out f32 words, inp 2-byte */
    be->ops->linear_forward(be, buf_f32(y32), buf_bf16(x16), buf_bf16(x16), buf_none(), 2, 4, 4);
}
static void call_add_mixed(const Backend* be, void* x16, void* y32) {
    be->ops->add_forward(be, buf_bf16(x16), buf_bf16(x16), buf_f32(y32), 8);
}
static void call_attention_mixed(const Backend* be, void* x16, void* y32) { /* 2-byte dout, f32-word q, k, v, out */
    be->ops->attention_backward(be, (float*)y32, (float*)y32, (float*)y32, NULL, NULL, NULL, 0, buf_bf16(x16), buf_f32(y32),
                                (float*)y32, buf_f32(y32), buf_f32(y32), buf_f32(y32), NULL, 0, 0, 1, 1, 4, 4, 4, 0);
}
static void call_cpu_gelu16(const Backend* be, void* x16, void* y32) { /* a CPU op given a 2-byte activation */
    be->ops->gelu_forward(be, buf_f32(y32), buf_bf16(x16), 8);
}
static int only_matches(int argc, char** argv, const char* name) { return argc < 2 || strstr(name, argv[1]); }
/* each refusal counts a check (and a failure where it does not hold) */
static void refusals(void) {
    const Backend* be = B16;
    void* x16 = be->dev->alloc(64 * sizeof(float));
    void* y32 = be->dev->alloc(64 * sizeof(float));
    be->dev->memset0(be, x16, 64 * sizeof(float));
    be->dev->memset0(be, y32, 64 * sizeof(float));
    refused("cuda_linear", "linear_forward", call_linear_mixed, be, x16, y32);
    refused("cuda_add", "add_forward", call_add_mixed, be, x16, y32);
    refused("cuda_attention", "attention_backward", call_attention_mixed, be, x16, y32);
    be->dev->free(x16), be->dev->free(y32);
    float hx[8] = {0}, hy[8] = {0};
    refused("cpu_gelu", "an f32 buffer", call_cpu_gelu16, &backend_cpu_bf16, hx, hy);
}

int main(int argc, char** argv) {
    char why[512] = "";
    const Backend* cu = backend_cuda_get(why, sizeof why);
    if (!cu) {
        if (strncmp(why, "no CUDA device: ", 16) != 0 && strncmp(why, "built without CUDA", 18) != 0) {
            printf("test_cuda_bf16a: FAIL: unexpected reason from backend_cuda_get: '%s'\n", why);
            return 1;
        }
        printf("test_cuda_bf16a: skipped: %s\n", why);
        return SKIP_RC;
    }
    const Backend* b16 = backend_with_precision(cu, PRECISION_BF16);
    /* one table for both storages: the CUDA bf16 table takes 2-byte activations, no other table does; with them it
     * has the conversions and the f32-sum residual add; generation's decoding attention (f32 words) and CLIP's ops */
    if (!b16->ops->bf16_activations || b16->precision != PRECISION_BF16 || b16->weight_dtype != DTYPE_BF16 ||
        b16->bf16_variant != b16 || cu->ops->bf16_activations || backend_cpu.ops->bf16_activations ||
        backend_cpu_bf16.ops->bf16_activations || !b16->ops->from_bf16 || !b16->ops->to_bf16 ||
        !b16->ops->add_f32_forward || cu->ops->add_f32_forward || !b16->ops->attention_decode || !b16->ops->act_forward ||
        !b16->ops->act_backward || !b16->ops->rows_gather_forward || !b16->ops->rows_gather_backward ||
        !b16->ops->linear_gelu_forward) {
        printf("test_cuda_bf16a: FAIL: the tables' bf16_activations / slots are not as engine.h says\n");
        return 1;
    }
    sides[0] = sides[1] = *b16;
    if (only_matches(argc, argv, "refusals")) refusals(); /* counted in failures */
#ifdef RR_CUDA_EMU
    tol = 0.0;
    printf("test_cuda_bf16a: 2-byte vs f32-word activations on the bf16 table, emulated: bitwise\n");
#else
    tol = 0.0078125; /* 2^-7: one bf16 ulp (see the header) */
    printf("test_cuda_bf16a: 2-byte vs f32-word activations on the bf16 table on the device: within 2^-7 of each tensor's largest\n");
#endif
    const char* only = argc > 1 ? argv[1] : NULL;
#define RUN(name, call) \
    if (!only || strstr(name, only)) call
    RUN("linear", run_linear("linear", 37, 48, 40, 0));
    RUN("linear_bias", run_linear("linear_bias", 19, 32, 24, 1));
    RUN("linear_k0_bias", run_linear("linear_k0_bias", 5, 0, 8, 1));
    RUN("linear_gelu", run_linear_gelu("linear_gelu", 21, 40, 48, 1));
    RUN("linear_gelu_odd", run_linear_gelu("linear_gelu_odd", 13, 24, 20, 1));
    RUN("linear_gelu_nobias", run_linear_gelu("linear_gelu_nobias", 11, 16, 32, 0));
    RUN("act_gelu_erf", run_act("act_gelu_erf", ACT_GELU_ERF));
    RUN("act_quick_gelu", run_act("act_quick_gelu", ACT_QUICK_GELU));
    RUN("act_gelu_tanh", run_act("act_gelu_tanh", ACT_GELU_TANH));
    RUN("gather", run_gather("gather", 37, 1, 24, 11, 0));
    RUN("gather_taps", run_gather("gather_taps", 29, 16, 20, 13, 1));
    RUN("rmsnorm", run_norm("rmsnorm", 0, 17, 96));
    RUN("layernorm", run_norm("layernorm", 1, 9, 300));
    RUN("gelu", run_elementwise("gelu", 0, 1000));
    RUN("swiglu", run_elementwise("swiglu", 1, 1000));
    RUN("add", run_elementwise("add", 2, 1000));
    RUN("add_f32", run_elementwise("add_f32", 3, 1000));
    /* the bandwidth kernels' paths (cuda_common.cuh): 16-byte groups with a tail, C not a multiple of 8, column
     * sums in several row chunks (N >= 64) and over several 256-column blocks */
    RUN("rmsnorm_chunks", run_norm("rmsnorm_chunks", 0, 100, 64));
    RUN("rmsnorm_tail", run_norm("rmsnorm_tail", 0, 40, 36));
    RUN("layernorm_chunks", run_norm("layernorm_chunks", 1, 70, 520));
    RUN("layernorm_n1", run_norm("layernorm_n1", 1, 1, 24));
    RUN("gelu_tail", run_elementwise("gelu_tail", 0, 1001));
    RUN("swiglu_tail", run_elementwise("swiglu_tail", 1, 1003));
    RUN("add_tail", run_elementwise("add_tail", 2, 1005));
    RUN("add_f32_tail", run_elementwise("add_f32_tail", 3, 1007));
    static const RopeFreq rf = {.theta = 10000.0};
    static const RopeFreq rf3 = {.theta = 500000.0, .llama3 = 1, .factor = 8.0, .low_freq_factor = 1.0,
                                 .high_freq_factor = 4.0, .original_max_pos = 8192.0};
    RUN("rope", run_rope("rope", &rf, 23, 3, 16));
    RUN("rope_llama3", run_rope("rope_llama3", &rf3, 23, 2, 32));
    RUN("rope2d", run_rope("rope2d", NULL, 19, 2, 16));
    RUN("rope_qk", run_rope_qk("rope_qk", &rf, 23, 4, 2, 16));
    RUN("rope_qk_llama3", run_rope_qk("rope_qk_llama3", &rf3, 17, 2, 2, 32));
    RUN("embedding", run_embedding());
    RUN("crossentropy", run_ce());
    static const int lens_a[3] = {17, 1, 40}, lens_b[2] = {33, 20};
    RUN("attention_mha_d32", run_attention("attention_mha_d32", 3, lens_a, 2, 2, 32));
    RUN("attention_gqa_d16", run_attention("attention_gqa_d16", 2, lens_b, 4, 2, 16));
    RUN("attention_mha_d64", run_attention("attention_mha_d64", 2, lens_b, 2, 2, 64));
    RUN("to_bf16/from_bf16", run_convert());
    /* the 2-byte output-gradient ops: every producer's 2-byte store against the narrowed f32 reference */
    RUN("b16_linear", run_b16_linear("b16_linear", 37, 48, 40, 0));
    RUN("b16_linear_bias", run_b16_linear("b16_linear_bias", 19, 32, 24, 1));
    RUN("b16_swiglu_rmsnorm", run_b16_elementwise("b16_swiglu_rmsnorm", 1000, 17, 96));
    RUN("b16_layernorm_act", run_b16_ln_act("b16_layernorm_act", 9, 300));
    RUN("b16_rope", run_b16_rope("b16_rope", &rf, 23, 3, 16, 0));
    RUN("b16_rope_llama3_keep", run_b16_rope("b16_rope_llama3_keep", &rf3, 23, 2, 32, 1));
    RUN("b16_rope2d_keep", run_b16_rope("b16_rope2d_keep", NULL, 19, 2, 16, 1));
    RUN("b16_rope2d", run_b16_rope("b16_rope2d", NULL, 19, 2, 16, 0));
    RUN("b16_attention_mha_d32", run_b16_attention("b16_attention_mha_d32", 3, lens_a, 2, 2, 32));
    RUN("b16_attention_gqa_d16", run_b16_attention("b16_attention_gqa_d16", 2, lens_b, 4, 2, 16));
    /* head dim 128: the dq kernel's single-buffered variant (dq3), its mirror store too */
    RUN("b16_attention_mha_d128", run_b16_attention("b16_attention_mha_d128", 2, lens_b, 2, 2, 128));
#undef RUN
    B16->dev->synchronize(B16);
    if (checks == 0) {
        printf("test_cuda_bf16a: FAIL: no case matched '%s'\n", only ? only : "");
        return 1;
    }
    printf("cuda_bf16a: %s (%d checks)\n", failures ? "FAILED" : "ok", checks);
    return failures ? 1 : 0;
}
