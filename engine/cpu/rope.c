/* rope.c — rotary position embeddings (GPT-NeoX "rotate half"), 1-D for the LM and 2-D for the ViT.
 *
 * 1-D rule for a vector of dim n at position t (docs/model.md "Decoder LM and RoPE"): freq_j = theta^(-2j/n), j < n/2
 * (the LM's: engine.h's RopeFreq, with Llama-3's rescaling when set; the ViT's: theta 10000),
 *   x'[j]       = x[j] cos(t freq_j) - x[j + n/2] sin(t freq_j)
 *   x'[j + n/2] = x[j + n/2] cos(t freq_j) + x[j] sin(t freq_j)
 * 2-D: dims [0, d/2) of each head use the 1-D rule of dim d/2 at the patch row, dims [d/2, d) the
 * same rule at the patch column.
 * The rotation is orthogonal, so the backward is the rotation by -angle applied to the gradient in
 * place. Angles are computed in double: t * freq reaches thousands of radians at long positions
 * and float would lose ~1e-4 rad there. */
#define _GNU_SOURCE /* sincos */
#include <math.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"

#define ROPE_THETA_2D 10000.0 /* the ViT's 2-D RoPE; the LM's theta is model.rope_base */

/* Rotate, in every row i and head h, the n dims starting at x + i*ld + h*d + offset by sign*pos[i]
 * (frequencies: rf, or theta^(-2j/n) with theta_2d when rf is NULL). */
static void rope_rotate_rows(float* x, const int* pos, int N, int H, int d, int ld, int offset, int n, double sign,
                             const RopeFreq* rf, double theta_2d) {
    int half = n / 2;
    double inv_freq[half]; /* computed once per call, not per row */
    for (int j = 0; j < half; j++)
        inv_freq[j] = rf ? rr_rope_inv_freq(j, n, rf->theta, rf->llama3, rf->factor, rf->low_freq_factor,
                                            rf->high_freq_factor, rf->original_max_pos)
                         : pow(theta_2d, -2.0 * j / n);
#pragma omp parallel for if ((size_t)N * H * d > 16384)
    for (int i = 0; i < N; i++) {
        float* row = x + (size_t)i * ld + offset;
        for (int j = 0; j < half; j++) {
            double s_d, c_d;
            sincos(sign * (double)pos[i] * inv_freq[j], &s_d, &c_d);
            float c = (float)c_d, s = (float)s_d;
            for (int h = 0; h < H; h++) {
                float* v = row + (size_t)h * d;
                float a = v[j], b = v[j + half];
                v[j] = a * c - b * s;
                v[j + half] = b * c + a * s;
            }
        }
    }
}

void cpu_rope_forward(const Backend* be, float* x, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d && rf);
    rope_rotate_rows(x, pos, N, H, d, ld, 0, d, 1.0, rf, 0);
}

void cpu_rope_backward(const Backend* be, float* dx, const int* pos, int N, int H, int d, int ld, const RopeFreq* rf) {
    RR_ASSERT(d % 2 == 0 && ld >= H * d && rf);
    rope_rotate_rows(dx, pos, N, H, d, ld, 0, d, -1.0, rf, 0);
}

void cpu_rope2d_forward(const Backend* be, float* x, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d);
    rope_rotate_rows(x, pos_row, N, H, d, ld, 0, d / 2, 1.0, NULL, ROPE_THETA_2D);
    rope_rotate_rows(x, pos_col, N, H, d, ld, d / 2, d / 2, 1.0, NULL, ROPE_THETA_2D);
}

void cpu_rope2d_backward(const Backend* be, float* dx, const int* pos_row, const int* pos_col, int N, int H, int d, int ld) {
    RR_ASSERT(d % 4 == 0 && ld >= H * d);
    rope_rotate_rows(dx, pos_row, N, H, d, ld, 0, d / 2, -1.0, NULL, ROPE_THETA_2D);
    rope_rotate_rows(dx, pos_col, N, H, d, ld, d / 2, d / 2, -1.0, NULL, ROPE_THETA_2D);
}

/* q and k at the same positions (Backend.rope_qk_*): the reference is the two calls, in that order */
void cpu_rope_qk_forward(const Backend* be, float* q, float* k, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                         const RopeFreq* rf) {
    cpu_rope_forward(be, q, pos, N, H, d, ld_q, rf);
    cpu_rope_forward(be, k, pos, N, Hkv, d, ld_k, rf);
}

void cpu_rope_qk_backward(const Backend* be, float* dq, float* dk, const int* pos, int N, int H, int Hkv, int d, int ld_q, int ld_k,
                          const RopeFreq* rf) {
    cpu_rope_backward(be, dq, pos, N, H, d, ld_q, rf);
    cpu_rope_backward(be, dk, pos, N, Hkv, d, ld_k, rf);
}
