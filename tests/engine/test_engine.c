/* test_engine.c — the engine's non-op pieces: Philox KAT, init_normal, lr_schedule, the step-end ops
 * (sum_squares, scale, adamw_update), the
 * parameter table, backend selection, AdamW against a file written by PyTorch, user-error messages.
 *
 * Usage: test_engine philox | init | lr | params | sumsq | step_end | expf
 *        test_engine backend NAME            (prints the backend's name or dies with its message)
 *        test_engine adamw FILE              (FILE from tests/engine/adamw_ref.py; exit 1 on mismatch)
 *        test_engine init_dump NAME SEED OFFSET N   (prints the values, for tests/engine/init_ref.py)
 *        test_engine ce_bad_target | params_dup     (must die with a clear message)
 *        test_engine params_forward_only_grad | params_forward_only_optim   (must abort on the assertion) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/fastmath.h"
#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "engine/params.h"

#include "tests/support/check.h"

/* Known-answer vectors from Random123's kat_vectors (philox4x32 10 rounds). */
static void test_philox(void) {
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int k = 0; k < 3; k++) {
        Philox4x32 c = {{kat[k].ctr[0], kat[k].ctr[1], kat[k].ctr[2], kat[k].ctr[3]}};
        Philox4x32 r = philox4x32_10(c, kat[k].key[0], kat[k].key[1]);
        for (int j = 0; j < 4; j++)
            CHECK(r.v[j] == kat[k].out[j], "philox KAT %d word %d: got %08x want %08x", k, j, r.v[j], kat[k].out[j]);
    }
    printf("philox: 3 known-answer vectors checked\n");
}

static void test_init(void) {
    /* any slice gives the same values as the whole */
    enum { N = 1001 };
    float* full = malloc(N * sizeof(float));
    init_normal(full, N, 0, 1234, "text.blocks.0.attn.q.weight", 0.02f);
    const size_t slices[][2] = {{0, 1}, {3, 17}, {4, 8}, {501, 1}, {997, 4}, {0, N}, {250, 500}};
    for (size_t s = 0; s < sizeof slices / sizeof slices[0]; s++) {
        size_t off = slices[s][0], n = slices[s][1];
        float* part = malloc(n * sizeof(float));
        init_normal(part, n, off, 1234, "text.blocks.0.attn.q.weight", 0.02f);
        CHECK(memcmp(part, full + off, n * sizeof(float)) == 0, "init slice [%zu, %zu) differs from the whole", off,
              off + n);
        free(part);
    }
    /* the stream depends on the name and on the seed */
    float* other = malloc(N * sizeof(float));
    init_normal(other, N, 0, 1234, "text.blocks.0.attn.k.weight", 0.02f);
    int same = 0;
    for (int i = 0; i < N; i++) same += other[i] == full[i];
    CHECK(same < 5, "two names share %d of %d values", same, N);
    init_normal(other, N, 0, 1235, "text.blocks.0.attn.q.weight", 0.02f);
    same = 0;
    for (int i = 0; i < N; i++) same += other[i] == full[i];
    CHECK(same < 5, "two seeds share %d of %d values", same, N);
    free(other), free(full);

    /* moments of 2^20 samples of N(0, 0.02^2). Standard errors: mean 0.02/sqrt(n) = 2.0e-5, std
     * 0.02/sqrt(2n) = 1.4e-5, P(|z| < 1) = 0.6827 with sqrt(p(1-p)/n) = 4.5e-4, P(|z| > 3) = 0.0027
     * with 5.1e-5. Bounds are 5 standard errors: a correct generator fails them with p < 1e-6 and
     * the seed is fixed, so this test cannot flake. */
    size_t n = (size_t)1 << 20;
    float* x = malloc(n * sizeof(float));
    init_normal(x, n, 0, 42, "vision.patch_embed.weight", 0.02f);
    double s = 0, ss = 0;
    size_t in1 = 0, out3 = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i], ss += (double)x[i] * x[i];
        in1 += fabs(x[i]) < 0.02;
        out3 += fabs(x[i]) > 0.06;
    }
    double mean = s / n, sd = sqrt(ss / n - mean * mean);
    double p1 = (double)in1 / n, p3 = (double)out3 / n;
    printf("init: mean %.3e std %.6f P(|z|<1) %.4f P(|z|>3) %.5f\n", mean, sd, p1, p3);
    CHECK(fabs(mean) < 5 * 2.0e-5, "mean %g", mean);
    CHECK(fabs(sd - 0.02) < 5 * 1.4e-5, "std %g", sd);
    CHECK(fabs(p1 - 0.682689) < 5 * 4.5e-4, "P(|z|<1) %g", p1);
    CHECK(fabs(p3 - 0.002700) < 5 * 5.1e-5, "P(|z|>3) %g", p3);
    free(x);
}

static void test_lr(void) {
    /* warmup 10, total 110, max 1e-3, min 1e-4; values worked out by hand from the formula in adamw.c */
    const struct {
        int step, warmup, total;
        double want;
    } c[] = {
        {0, 10, 110, 1e-4},                          /* 1e-3 * 1/10 */
        {4, 10, 110, 5e-4},                          /* 1e-3 * 5/10 */
        {9, 10, 110, 1e-3},                          /* end of warm-up */
        {10, 10, 110, 1e-3},                         /* cosine at p = 0 */
        {35, 10, 110, 1e-4 + 0.45e-3 * (1 + M_SQRT1_2)}, /* p = 1/4 */
        {60, 10, 110, 5.5e-4},                       /* p = 1/2: midpoint */
        {110, 10, 110, 1e-4},                        /* p = 1: min_lr */
        {500, 10, 110, 1e-4},                        /* past the end: stays at min_lr */
        {0, 0, 100, 1e-3},                           /* no warm-up */
        {5, 10, 10, 6e-4},                           /* total <= warmup: warm-up still linear */
        {10, 10, 10, 1e-4},                          /* and then min_lr */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        float lr = lr_schedule(c[i].step, c[i].warmup, c[i].total, 1e-3f, 1e-4f);
        /* lr is a float: 2 ulp of 1e-3 is 2.3e-10 */
        CHECK(fabs(lr - c[i].want) < 1e-9, "lr_schedule(step %d, warmup %d, total %d) = %.9g, want %.9g", c[i].step,
              c[i].warmup, c[i].total, lr, c[i].want);
    }
    printf("lr: %zu values checked\n", sizeof c / sizeof c[0]);
}

/* The step end's code as it was before it became Backend ops (runtime/train/trainer.c's
 * trainer_sum_squares, engine/adamw.c's sum_squares and adamw_update at commit 37c5657), kept here
 * verbatim as the bitwise reference: bit-exact resume and the recorded loss trajectories depend on
 * the CPU backend giving exactly these bits. */
static double legacy_sum_squares_64(const float* x, size_t n) {
    enum { CHUNKS = 64 };
    double part[CHUNKS];
#pragma omp parallel for if (n > 65536)
    for (int c = 0; c < CHUNKS; c++) {
        size_t i0 = n * c / CHUNKS, i1 = n * (c + 1) / CHUNKS;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        part[c] = s;
    }
    double s = 0.0;
    for (int c = 0; c < CHUNKS; c++) s += part[c];
    return s;
}
#define LEGACY_SSQ_CHUNK 65536
static double legacy_trainer_sum_squares(const float* x, size_t n) {
    size_t nc = (n + LEGACY_SSQ_CHUNK - 1) / LEGACY_SSQ_CHUNK;
    if (nc <= 1) return legacy_sum_squares_64(x, n);
    double* part = mallocCheck(nc * sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nc; c++) {
        size_t b = c * LEGACY_SSQ_CHUNK, e = b + LEGACY_SSQ_CHUNK < n ? b + LEGACY_SSQ_CHUNK : n;
        double s = 0.0;
        for (size_t i = b; i < e; i++) s += (double)x[i] * x[i];
        part[c] = s;
    }
    double s = 0.0;
    for (size_t c = 0; c < nc; c++) s += part[c];
    free(part);
    return s;
}
static void legacy_adamw_update(float* param, const float* grad, float* m, float* v, size_t n, const AdamWConfig* cfg,
                                int t, int decay) {
    double bc1 = 1.0 - pow(cfg->beta1, t);
    double bc2 = 1.0 - pow(cfg->beta2, t);
    float step_size = (float)(cfg->lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float keep = decay ? (float)(1.0 - (double)cfg->lr * cfg->weight_decay) : 1.0f;
    float b1 = cfg->beta1, b2 = cfg->beta2, eps = cfg->eps;
    float one_minus_b1 = (float)(1.0 - (double)b1), one_minus_b2 = (float)(1.0 - (double)b2);
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        float mi = b1 * m[i] + one_minus_b1 * g;
        float vi = b2 * v[i] + one_minus_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = param[i] * keep - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
}

/* deterministic values of mixed sign and magnitudes 10^-6 .. 10 (as gradients have) */
static float test_value(size_t i, uint64_t salt) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ salt;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
    double mag = pow(10.0, -6.0 + 7.0 * (double)((z >> 3) % 1000) / 1000.0);
    return (float)((u < 0.5 ? -1.0 : 1.0) * mag * (0.5 + u));
}

static void test_sumsq(void) {
    /* empty, fewer values than the 64 small chunks, the 64Ki boundary, odd sizes in several chunks */
    const size_t sizes[] = {0, 1, 63, 64, 100, 65535, 65536, 65537, 300001, 3 * 65536};
    double worst = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float* x = malloc((n ? n : 1) * sizeof(float));
        long double exact = 0;
        for (size_t i = 0; i < n; i++) {
            x[i] = test_value(i, n);
            exact += (long double)x[i] * x[i];
        }
        cpu_set_num_threads(1);
        double got1 = backend_cpu.ops->sum_squares(&backend_cpu, x, n);
        double legacy1 = legacy_trainer_sum_squares(x, n);
        /* the table's op is engine/adamw.c's sum_squares, callable without a table */
        CHECK(got1 == sum_squares(x, n), "sum_squares n=%zu: the table's op and engine/adamw.c's differ", n);
        cpu_set_num_threads(2);
        double got2 = backend_cpu.ops->sum_squares(&backend_cpu, x, n);
        double legacy2 = legacy_trainer_sum_squares(x, n);
        /* n positive terms added in double in any order: within (n - 1) * 2^-53 of the exact sum
         * (the long double sum: 11 more bits, exact enough to judge by) */
        double err = exact > 0 ? fabs((double)((long double)got1 - exact) / (double)exact) : fabs(got1);
        double bound = n > 1 ? (double)(n - 1) * 0x1p-53 : 0.0;
        worst = fmax(worst, err);
        CHECK(err <= bound, "sum_squares n=%zu relative error %.3e above %.3e", n, err, bound);
        /* fixed chunks: the same bits whatever the thread count (the global grad norm must not depend on it) */
        CHECK(got1 == got2, "sum_squares n=%zu differs with the thread count: %a %a", n, got1, got2);
        /* and exactly the trainer's bits from before the Backend op */
        CHECK(got1 == legacy1 && legacy1 == legacy2, "sum_squares n=%zu: %a, the trainer's was %a", n, got1, legacy1);
        free(x);
    }
    printf("sumsq: %zu sizes, worst relative error %.2e, thread-count invariant, the trainer's bits\n",
           sizeof sizes / sizeof sizes[0], worst);
}

/* backend_cpu.ops->scale and .adamw_update (the trainer's clipping and optimiser step) against the code
 * they replaced, bit for bit, at 1 and 2 threads; n large enough for the parallel path. */
static void test_step_end(void) {
    const size_t sizes[] = {1, 37, 300001};
    int compared = 0;
    for (int threads = 1; threads <= 2; threads++) {
        cpu_set_num_threads(threads);
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            float *x = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) x[i] = test_value(i, 7), want[i] = x[i] * 0.3183099f;
            backend_cpu.ops->scale(&backend_cpu, x, 0.3183099f, n);
            CHECK(memcmp(x, want, n * sizeof(float)) == 0, "scale n=%zu threads=%d differs from x * s", n, threads);
            free(x), free(want);
            for (int decay = 0; decay <= 1; decay++) {
                float *p[2], *m[2], *v[2];
                float* g = malloc(n * sizeof(float));
                for (int q = 0; q < 2; q++) {
                    p[q] = malloc(n * sizeof(float)), m[q] = calloc(n, sizeof(float)), v[q] = calloc(n, sizeof(float));
                    for (size_t i = 0; i < n; i++) p[q][i] = 0.05f * test_value(i, 11);
                }
                AdamWConfig cfg = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
                for (int t = 1; t <= 5; t++) {
                    cfg.lr = 3e-3f * (float)t / 5.0f; /* a schedule: the scalars change every step */
                    for (size_t i = 0; i < n; i++) g[i] = test_value(i, 100 + (uint64_t)t);
                    backend_cpu.ops->adamw_update(&backend_cpu, p[0], g, m[0], v[0], n, &cfg, t, decay);
                    legacy_adamw_update(p[1], g, m[1], v[1], n, &cfg, t, decay);
                    int same = !memcmp(p[0], p[1], n * sizeof(float)) && !memcmp(m[0], m[1], n * sizeof(float)) &&
                               !memcmp(v[0], v[1], n * sizeof(float));
                    CHECK(same, "adamw n=%zu decay=%d t=%d threads=%d differs from engine/adamw.c's code", n, decay, t,
                          threads);
                    compared++;
                }
                for (int q = 0; q < 2; q++) free(p[q]), free(m[q]), free(v[q]);
                free(g);
            }
        }
    }
    printf("step_end: scale and %d AdamW steps bitwise equal to the code they replaced\n", compared);
}

static void test_params(void) {
    ParamTable pt;
    params_init(&pt);
    int64_t s_w[2] = {5, 3}, s_b[1] = {5}, s_g[1] = {3};
    int iw = params_add(&pt, "proj.fc1.weight", 2, s_w, PARAM_INIT_NORMAL, 0.02f, 1);
    int ib = params_add(&pt, "proj.fc1.bias", 1, s_b, PARAM_INIT_ZEROS, 0, 0);
    int ig = params_add(&pt, "text.norm.weight", 1, s_g, PARAM_INIT_ONES, 0, 0);
    CHECK(iw == 0 && ib == 1 && ig == 2, "indices %d %d %d", iw, ib, ig);
    CHECK(pt.total == 15 + 5 + 3, "total %zu", pt.total);
    CHECK(pt.specs[iw].offset == 0 && pt.specs[ib].offset == 15 && pt.specs[ig].offset == 20, "offsets %zu %zu %zu",
          pt.specs[iw].offset, pt.specs[ib].offset, pt.specs[ig].offset);
    CHECK(pt.specs[iw].numel == 15 && pt.specs[iw].decay == 1 && pt.specs[ib].decay == 0, "numel/decay");
    CHECK(params_find(&pt, "proj.fc1.bias") == ib && params_find(&pt, "nope") == -1, "params_find");
    params_alloc(&pt, &backend_cpu, 7);
    CHECK(params_data(&pt, ib) == pt.data + 15 && params_grad(&pt, ig) == pt.grad + 20, "pointers");
    float want[15];
    init_normal(want, 15, 0, 7, "proj.fc1.weight", 0.02f);
    CHECK(memcmp(params_data(&pt, iw), want, sizeof want) == 0, "normal init differs from init_normal(seed, name)");
    for (int i = 0; i < 5; i++) CHECK(params_data(&pt, ib)[i] == 0.0f, "bias[%d] = %g", i, params_data(&pt, ib)[i]);
    for (int i = 0; i < 3; i++) CHECK(params_data(&pt, ig)[i] == 1.0f, "norm[%d] = %g", i, params_data(&pt, ig)[i]);
    for (size_t i = 0; i < pt.total; i++) CHECK(pt.grad[i] == 0.0f, "grad[%zu] not zeroed", i);
    pt.grad[3] = 1.5f;
    params_zero_grad(&pt);
    CHECK(pt.grad[3] == 0.0f, "params_zero_grad");
    params_alloc_optimizer(&pt);
    for (size_t i = 0; i < pt.total; i++) CHECK(pt.m[i] == 0.0f && pt.v[i] == 0.0f, "moments[%zu] not zeroed", i);
    params_free(&pt);
    CHECK(pt.specs == NULL && pt.n == 0, "params_free");

    /* the bf16 compute copy: built at allocation, stale after a write of the master until rebuilt, and
     * rebuilt for exactly the tensors marked */
    params_init(&pt);
    iw = params_add(&pt, "proj.fc1.weight", 2, s_w, PARAM_INIT_NORMAL, 0.02f, 1);
    ig = params_add(&pt, "text.norm.weight", 1, s_g, PARAM_INIT_ONES, 0, 0);
    params_alloc(&pt, &backend_cpu_bf16, 7);
    char name[96];
    CHECK(pt.compute && params_compute_stale(&pt) == -1, "a fresh table's copy is current");
    CHECK(params_verify_compute(&pt, name, sizeof name) == 0, "after params_alloc: %s differs", name);
    const float* cw = params_weights(&pt, iw);
    for (int i = 0; i < 15; i++) pt.data[pt.specs[iw].offset + i] = 0.3f + (float)i; /* a write of the master */
    CHECK(params_verify_compute(&pt, name, sizeof name) == 1 && !strcmp(name, "proj.fc1.weight"),
          "a written master's copy is found different (got '%s')", name);
    params_master_written(&pt, iw);
    CHECK(params_compute_stale(&pt) == iw, "the written tensor is marked stale");
    params_refresh_compute(&pt);
    CHECK(params_compute_stale(&pt) == -1 && params_verify_compute(&pt, name, sizeof name) == 0, "rebuilt");
    CHECK(cw[1] == 1.296875f, "copy of 1.3 is its bf16 rounding, got %.9g", cw[1]); /* 1.3 -> 0x3FA6 */
    pt.data[pt.specs[ig].offset] = 5.0f;
    params_refresh_compute(&pt); /* nothing marked: nothing rebuilt */
    CHECK(params_weights(&pt, ig)[0] == 1.0f, "an unmarked copy is rebuilt");
    params_master_written(&pt, -1);
    params_refresh_compute(&pt);
    CHECK(params_weights(&pt, ig)[0] == 5.0f && params_compute_stale(&pt) == -1, "params_master_written(-1)");
    params_free(&pt);

    /* a forward-only table: every tensor frozen, no gradient buffer at all (grad NULL, where a table whose tensors
     * are all frozen by train.freeze keeps its one-word buffer), the values as initialised; on bf16 no master */
    for (int bf = 0; bf < 2; bf++) {
        for (int fo = 0; fo < 2; fo++) {
            params_init(&pt);
            iw = params_add(&pt, "proj.fc1.weight", 2, s_w, PARAM_INIT_NORMAL, 0.02f, 1);
            ig = params_add(&pt, "text.norm.weight", 1, s_g, PARAM_INIT_ONES, 0, 0);
            if (fo) params_forward_only(&pt);
            else CHECK(params_freeze(&pt, "proj") == 1 && params_freeze(&pt, "text") == 1, "params_freeze");
            params_alloc(&pt, bf ? &backend_cpu_bf16 : &backend_cpu, 7);
            CHECK(pt.gtotal == 0 && pt.specs[iw].frozen && pt.specs[ig].frozen, "bf16 %d forward-only %d: all frozen", bf, fo);
            CHECK(fo ? pt.grad == NULL : pt.grad != NULL, "bf16 %d forward-only %d: grad %p", bf, fo, (void*)pt.grad);
            CHECK(params_grad(&pt, iw) == NULL && params_grad(&pt, ig) == NULL, "a frozen tensor's gradient is NULL");
            CHECK(pt.mtotal == (bf ? 0 : 15 + 3), "bf16 %d: %zu floats of masters", bf, pt.mtotal);
            float h[15];
            params_values_to_host(&pt, iw, h);
            init_normal(want, 15, 0, 7, "proj.fc1.weight", 0.02f);
            for (int i = 0; i < 15; i++) /* bf16: the initialised values rounded once */
                CHECK(h[i] == (bf ? rr_bf16_to_f32(rr_f32_to_bf16(want[i])) : want[i]), "value %d: %g", i, h[i]);
            CHECK(params_weights(&pt, ig)[2] == 1.0f, "the norm weight as initialised");
            params_free(&pt);
        }
    }
    printf("params: layout and compute copy checked\n");
}

/* cpu_expf against glibc's expf: 2^21 evenly spaced floats in [-87, 88.7] within 1 ulp (the Cephes
 * polynomial's error plus glibc's own 0.5 ulp; measured 1.00), then the edges: overflow to inf,
 * gradual underflow to 0, infinities and NaN. */
static void test_expf(void) {
    double worst = 0;
    size_t n = (size_t)1 << 21;
    for (size_t k = 0; k < n; k++) {
        float x = (float)(-87.0 + 175.7 * (double)k / n);
        float a = cpu_expf(x), b = expf(x);
        double ulp = (double)nextafterf(b, INFINITY) - b;
        worst = fmax(worst, fabs((double)a - b) / ulp);
    }
    CHECK(worst <= 1.0, "cpu_expf is %.2f ulp from expf", worst);
    const float edge[] = {0.0f, -0.0f, 1.0f, 88.72f, 88.73f, 89.0f, 1e30f, -87.34f, -95.0f, -103.9f, -104.0f, -1e30f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        float a = cpu_expf(edge[i]), b = expf(edge[i]);
        /* denormal results carry fewer digits: compare within 2 of the smallest denormal or 1 ulp */
        double tol = fmax(2.8e-45, (double)nextafterf(b, INFINITY) - b);
        CHECK((isinf(a) && isinf(b)) || fabs((double)a - b) <= tol, "cpu_expf(%g) = %g, expf = %g", edge[i], a, b);
    }
    CHECK(isinf(cpu_expf(INFINITY)) && cpu_expf(-INFINITY) == 0.0f && isnan(cpu_expf(NAN)), "cpu_expf of inf/nan");
    printf("expf: %zu values, worst %.2f ulp; edges, inf and NaN checked\n", n, worst);
}

/* The file written by tests/engine/adamw_ref.py: see that script for the layout. */
static float read_f(FILE* f) {
    double x;
    if (fscanf(f, "%lf", &x) != 1) rr_die("adamw reference file: truncated or not a number");
    return (float)x;
}

/* Per element: |got - want| / scale_i, scale_i = |want_i| + term_i + abs_floor, where term_i is the
 * size of the terms the value was summed from (so a moment that cancels to near 0 is judged at the
 * scale of its terms, not of the cancelled result). */
static double adamw_err(const float* got, const float* want, const float* term, int n, double abs_floor) {
    double e = 0;
    for (int i = 0; i < n; i++)
        e = fmax(e, fabs(got[i] - want[i]) / (fabs(want[i]) + (term ? term[i] : 0.0) + abs_floor));
    return e;
}

static void test_adamw(const char* path) {
    FILE* f = fopenCheck(path, "r");
    int n[2], steps;
    AdamWConfig cfg;
    if (fscanf(f, "%d %d %d", &n[0], &n[1], &steps) != 3) rr_die("%s: bad header", path);
    cfg.beta1 = read_f(f), cfg.beta2 = read_f(f), cfg.eps = read_f(f), cfg.weight_decay = read_f(f);
    float *p[2], *m[2], *v[2], *g[2], *want[2];
    for (int k = 0; k < 2; k++) {
        p[k] = malloc(n[k] * sizeof(float)), g[k] = malloc(n[k] * sizeof(float));
        m[k] = calloc(n[k], sizeof(float)), v[k] = calloc(n[k], sizeof(float));
        want[k] = malloc(n[k] * sizeof(float));
        for (int i = 0; i < n[k]; i++) p[k][i] = read_f(f);
    }
    double worst = 0;
    for (int t = 1; t <= steps; t++) {
        cfg.lr = read_f(f);
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < n[k]; i++) g[k][i] = read_f(f);
        for (int k = 0; k < 2; k++) {
            float* term = malloc(n[k] * sizeof(float)); /* |beta1 m| + |(1 - beta1) g| */
            for (int i = 0; i < n[k]; i++) term[i] = fabsf(cfg.beta1 * m[k][i]) + fabsf((1 - cfg.beta1) * g[k][i]);
            adamw_update(p[k], g[k], m[k], v[k], n[k], &cfg, t, k == 0 /* decay */);
            float* got[3] = {p[k], m[k], v[k]};
            const char* what[3] = {"param", "exp_avg", "exp_avg_sq"};
            for (int q = 0; q < 3; q++) {
                for (int i = 0; i < n[k]; i++) want[k][i] = read_f(f);
                /* Same operations in the same order as PyTorch, in f32: a few ulps (eps 1.2e-7) of
                 * each value, so the bound is 1e-6 (8 ulps). The first moment is judged at the scale
                 * of its two terms (it can cancel), the second moment (a sum of positive terms) at
                 * its own, the parameter at its own plus lr * 1e-6 (ulps of the update). */
                double floor = q == 0 ? cfg.lr * 1e-6 : 1e-30;
                double e = adamw_err(got[q], want[k], q == 1 ? term : NULL, n[k], floor);
                worst = fmax(worst, e);
                CHECK(e < 1e-6, "adamw step %d %s %s: relative error %.3e", t, k == 0 ? "decay" : "no-decay", what[q],
                      e);
            }
            free(term);
        }
    }
    fclose(f);
    printf("adamw: %d steps against torch.optim.AdamW, worst relative error %.3e\n", steps, worst);
    for (int k = 0; k < 2; k++) free(p[k]), free(m[k]), free(v[k]), free(g[k]), free(want[k]);
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_engine philox|init|lr|params|sumsq|backend NAME|adamw FILE|...\n");
        return 2;
    }
    const char* what = argv[1];
    if (strcmp(what, "philox") == 0) test_philox();
    else if (strcmp(what, "init") == 0) test_init();
    else if (strcmp(what, "lr") == 0) test_lr();
    else if (strcmp(what, "sumsq") == 0) test_sumsq();
    else if (strcmp(what, "step_end") == 0) test_step_end();
    else if (strcmp(what, "expf") == 0) test_expf();
    else if (strcmp(what, "params") == 0) test_params();
    else if (strcmp(what, "adamw") == 0 && argc == 3) test_adamw(argv[2]);
    else if (strcmp(what, "backend") == 0 && argc == 3) {
        const Backend* be = backend_select(argv[2]);
        printf("backend: %s\n", be->dev->name);
        /* what the name promises before the table is opened (a plan, a recipe check) is what the table says */
        if (backend_name_host_addressable(argv[2]) != be->dev->host_addressable) {
            fprintf(stderr, "FAIL: backend_name_host_addressable(%s) = %d, the table's host_addressable = %d\n", argv[2],
                    backend_name_host_addressable(argv[2]), be->dev->host_addressable);
            return 1;
        }
        if (backend_name_host_addressable("frob") != -1) {
            fprintf(stderr, "FAIL: an unknown backend name has a host_addressable\n");
            return 1;
        }
    }
    else if (strcmp(what, "init_dump") == 0 && argc == 6) {
        size_t off = strtoull(argv[4], NULL, 10), n = strtoull(argv[5], NULL, 10);
        float* x = malloc(n * sizeof(float));
        init_normal(x, n, off, strtoull(argv[3], NULL, 10), argv[2], 1.0f);
        for (size_t i = 0; i < n; i++) printf("%.9g\n", x[i]);
        free(x);
    } else if (strcmp(what, "ce_bad_target") == 0) {
        float logits[10] = {0}, lse[2], loss;
        int targets[2] = {-100, 7};
        cpu_crossentropy_forward(&backend_cpu, &loss, lse, logits, targets, 2, 5);
    } else if (strcmp(what, "params_dup") == 0) {
        ParamTable pt;
        params_init(&pt);
        int64_t s[1] = {4};
        params_add(&pt, "text.norm.weight", 1, s, PARAM_INIT_ONES, 0, 0);
        params_add(&pt, "text.norm.weight", 1, s, PARAM_INIT_ONES, 0, 0);
    } else if (strcmp(what, "params_forward_only_grad") == 0 || strcmp(what, "params_forward_only_optim") == 0) {
        /* a forward-only table has no gradient: zeroing it or making its moments is a programmer error (aborts) */
        ParamTable pt;
        params_init(&pt);
        int64_t s[1] = {4};
        params_add(&pt, "text.norm.weight", 1, s, PARAM_INIT_ONES, 0, 0);
        params_forward_only(&pt);
        params_alloc(&pt, &backend_cpu, 1);
        if (!strcmp(what, "params_forward_only_grad")) params_zero_grad(&pt);
        else params_alloc_optimizer(&pt);
        params_free(&pt);
    } else {
        fprintf(stderr, "test_engine: unknown test '%s'\n", what);
        return 2;
    }
    if (check_failures) printf("%d checks failed\n", check_failures);
    return check_failures ? 1 : 0;
}
