/* test_attention_decode.c — BackendOps.attention_decode (generation's attention against a KV cache) on the
 * CPU backend:
 *   1. against a double-precision reference: n = 1 and n = 3 new queries (causal among them), Tk = 1, 37
 *      and 300 cached rows, multi-head and grouped-query (H 4 over Hkv 4, 2, 1), padded row strides;
 *      bound 2e-6 absolute (f32 dot products and sums over <= 300 terms of values in [-1, 1]);
 *   2. against the training op: for Hkv = 4, 2, 1, its n rows equal attention_forward's last n rows of
 *      the same causal sequence (one sample) within 2e-6: what the KV cache relies on.
 * Prints "attention_decode: ok". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

static int failures = 0;
#define CHECK(c, ...)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                               \
            fprintf(stderr, "\n");                                                      \
            failures++;                                                                 \
        }                                                                               \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static void reference(double* out, const float* q, const float* k, const float* v, int n, int Tk, int H, int Hkv, int d,
                      int ld_q, int ld_kv) {
    int group = H / Hkv;
    double* p = malloc(sizeof(double) * (size_t)Tk);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++) {
            int nk = Tk - n + i + 1, g = h / group;
            double m = -INFINITY, l = 0;
            for (int j = 0; j < nk; j++) {
                double s = 0;
                for (int c = 0; c < d; c++) s += (double)q[(size_t)i * ld_q + h * d + c] * k[(size_t)j * ld_kv + g * d + c];
                p[j] = s / sqrt((double)d);
                if (p[j] > m) m = p[j];
            }
            for (int j = 0; j < nk; j++) l += p[j] = exp(p[j] - m);
            for (int c = 0; c < d; c++) {
                double o = 0;
                for (int j = 0; j < nk; j++) o += p[j] / l * v[(size_t)j * ld_kv + g * d + c];
                out[(size_t)i * H * d + h * d + c] = o;
            }
        }
    free(p);
}

int main(void) {
    const int d = 16, H = 4;
    int cases = 0;
    for (int Hkv = 4; Hkv >= 1; Hkv /= 2)
        for (int Tk = 1; Tk <= 300; Tk = Tk == 1 ? 37 : Tk == 37 ? 300 : 301)
            for (int n = 1; n <= 3 && n <= Tk; n += 2) {
                int ld_q = H * d + 8, ld_kv = Hkv * d + 4;
                float* q = malloc(sizeof(float) * (size_t)n * ld_q);
                float* k = malloc(sizeof(float) * (size_t)Tk * ld_kv);
                float* v = malloc(sizeof(float) * (size_t)Tk * ld_kv);
                float* out = malloc(sizeof(float) * (size_t)n * H * d);
                double* ref = malloc(sizeof(double) * (size_t)n * H * d);
                for (int i = 0; i < n * ld_q; i++) q[i] = urand();
                for (int i = 0; i < Tk * ld_kv; i++) k[i] = urand(), v[i] = urand();
                backend_cpu.ops->attention_decode(&backend_cpu, out, q, k, v, n, Tk, H, Hkv, d, ld_q, ld_kv);
                reference(ref, q, k, v, n, Tk, H, Hkv, d, ld_q, ld_kv);
                double worst = 0;
                for (int i = 0; i < n * H * d; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
                CHECK(worst <= 2e-6, "n %d Tk %d H %d Hkv %d: max |decode - double reference| %.3g > 2e-6", n, Tk, H, Hkv,
                      worst);
                cases++;
                free(q), free(k), free(v), free(out), free(ref);
            }
    /* 2. against attention_forward on one causal sample of T rows (q, k, v packed in one row of stride
     * (H + 2 Hkv) d, as the fused projections would lay them out), multi-head and grouped-query */
    for (int Hkv = H; Hkv >= 1; Hkv /= 2)
        for (int T = 2; T <= 200; T *= 10) {
            int ld = (H + 2 * Hkv) * d, n = 2;
            float* qkv = malloc(sizeof(float) * (size_t)T * ld);
            for (int i = 0; i < T * ld; i++) qkv[i] = urand();
            const float *q = qkv, *k = qkv + H * d, *v = qkv + (H + Hkv) * d;
            float* full = malloc(sizeof(float) * (size_t)T * H * d);
            float* lse = malloc(sizeof(float) * (size_t)T * H);
            int cu[2] = {0, T};
            backend_cpu.ops->attention_forward(&backend_cpu, buf_f32(full), lse, buf_f32(q), buf_f32(k), buf_f32(v), cu, 1, T, H, Hkv, d, ld, ld, 1);
            float* out = malloc(sizeof(float) * (size_t)n * H * d);
            backend_cpu.ops->attention_decode(&backend_cpu, out, q + (size_t)(T - n) * ld, k, v, n, T, H, Hkv, d, ld, ld);
            double worst = 0;
            for (int i = 0; i < n * H * d; i++) worst = fmax(worst, fabs(out[i] - full[(size_t)(T - n) * H * d + i]));
            CHECK(worst <= 2e-6, "T %d Hkv %d: decode's last %d rows differ from attention_forward's by %.3g > 2e-6", T,
                  Hkv, n, worst);
            cases++;
            free(qkv), free(full), free(lse), free(out);
        }
    if (failures) return 1;
    printf("attention_decode: ok (%d cases)\n", cases);
    return 0;
}
