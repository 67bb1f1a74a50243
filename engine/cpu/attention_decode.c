/* attention_decode.c — generation's attention against a KV cache (engine.h, BackendOps.attention_decode):
 * n new queries, the last n of Tk positions, each against the cache's keys 0 .. Tk - n + i. A decoding
 * step has one query and a few hundred to a few thousand keys per head, so one pass per (query, head)
 * with an exact softmax (scores, their max, exp, sum, then the weighted sum of the value rows) is all
 * it needs; the heads run in parallel. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/engine.h"

void cpu_attention_decode(const Backend* be, float* out, const float* q, const float* k, const float* v, int n, int Tk, int H,
                          int Hkv, int d, int ld_q, int ld_kv) {
    (void)be;
    const float scale = 1.0f / sqrtf((float)d);
    const int group = H / Hkv; /* query heads per key/value head */
#pragma omp parallel
    {
        float* p = malloc(sizeof(float) * (size_t)(Tk > 0 ? Tk : 1));
#pragma omp for collapse(2) schedule(static)
        for (int i = 0; i < n; i++)
            for (int h = 0; h < H; h++) {
                const float* qi = q + (size_t)i * ld_q + (size_t)h * d;
                float* o = out + (size_t)i * H * d + (size_t)h * d;
                int nk = Tk - n + i + 1; /* keys this query sees */
                float m = -INFINITY;
                for (int j = 0; j < nk; j++) {
                    const float* kj = k + (size_t)j * ld_kv + (size_t)(h / group) * d;
                    float s = 0;
                    for (int c = 0; c < d; c++) s += qi[c] * kj[c];
                    p[j] = s * scale;
                    if (p[j] > m) m = p[j];
                }
                float l = 0;
                for (int j = 0; j < nk; j++) l += p[j] = expf(p[j] - m);
                for (int c = 0; c < d; c++) o[c] = 0;
                for (int j = 0; j < nk; j++) {
                    const float* vj = v + (size_t)j * ld_kv + (size_t)(h / group) * d;
                    float w = p[j] / l;
                    for (int c = 0; c < d; c++) o[c] += w * vj[c];
                }
            }
        free(p);
    }
}
