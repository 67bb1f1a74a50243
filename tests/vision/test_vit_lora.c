/* test_vit_lora.c — one LoRA linear of the CLIP tower (vision/vit_lora.c) on the CPU backend against a
 * double-precision reference:
 *
 *   y = Y0 + s B A drop(x) in the base output's columns [c0, c0 + out) of rows of width ld,  loss = sum(y * R)
 *
 * (q, k, v: their columns t D of the (T, 3 D) qkv rows, c0 = t D, ld = 3 D; out, fc1, fc2: the whole output).
 * 1. forward: y against the double reference, and the columns outside [c0, c0 + out) bit for bit Y0;
 * 2. backward: dx (vit_lora_backward_input, ADDED onto random values), dA and dB (vit_lora_backward_weight, added
 *    onto random values) against central finite differences of the double loss (h 1e-4; every element of A, B and
 *    x). Error: max |f32 - fd| / max |fd| per tensor, bound 1e-4 (f32 GEMMs of inner length <= 32 and the FD's own
 *    h^2 error, ~1e-7 and ~1e-8 relative: far above both and far below a wrong term, e.g. a missing scale s = 2,
 *    another target's columns, or a mask not applied to the gradient, which are O(1));
 * 3. with dropout, the mask is the documented one (engine/cuda/dropout_math.h under the key mix(seed ^ mix(tag ^
 *    (8 l + t))), tag "VIT" << 40, mix = splitmix64's finaliser) and a dropped input element gets no gradient.
 * Cases: each of q, k, v, out, fc1, fc2, with and without dropout on alternate ones. Prints "vit_lora: ok". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/dropout_math.h"
#include "tests/support/lora_fd.h"
#include "vision/vit_lora.h"

static int failures = 0;

static void run_case(VitLoraTarget t, double p) {
    const Backend* be = &backend_cpu;
    const int l = 1;
    VitConfig c = {.patch = 2, .D = 8, .L = 2, .H = 2, .arch = VIT_ARCH_CLIP, .tp = 1, .lora_r = 3, .lora_scale = 2.0f,
                   .lora_dropout = (float)p, .lora_targets = 1u << t};
    int D = c.D, T = 5, r = c.lora_r, in = t == VIT_LORA_FC2 ? 4 * D : D, out = t == VIT_LORA_FC1 ? 4 * D : D;
    int qkv = t <= VIT_LORA_V, ld = qkv ? 3 * D : out, c0 = qkv ? (int)t * D : 0;
    Arena ar;
    arena_init(&ar, "test_vit_lora", 1 << 22);
    VitActs a;
    VitBlockActs b;
    VitBlockGrads g;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b), memset(&g, 0, sizeof g);
    a.T = a.max_T = T;
    a.lora_seed = p > 0 ? 0x1234567887654321ull : 0;
    vit_lora_acts_carve(&b, &ar, &c, (size_t)T);
    vit_lora_grads_carve(&g, &ar, &c, (size_t)T);
    vit_lora_scratch_layout(&a, &ar, &c, T);
    vit_lora_prepare(be, &c, &a);
    LoraCase k;
    lora_case_init(&k, T, in, out, r, ld, c0);
    VitBlockW w, dw;
    memset(&w, 0, sizeof w), memset(&dw, 0, sizeof dw);
    w.lora_A[t] = buf_f32(k.A), w.lora_B[t] = buf_f32(k.B);
    dw.lora_A[t] = buf_f32(k.dA), dw.lora_B[t] = buf_f32(k.dB);
    vit_lora_forward(be, &c, &w, &b, &a, l, t, k.x, k.y);
    vit_lora_backward_input(be, &c, &w, &b, &g, &a, l, t, k.x, k.R, k.dx);
    vit_lora_backward_weight(be, &c, &w, &dw, &b, &g, &a, l, t, k.x, k.R);

    uint64_t key = lora_fd_mix(a.lora_seed ^ lora_fd_mix(0x5649540000000000ull ^ ((uint64_t)l * 8 + (uint64_t)t)));
    LoraErr e = lora_case_check(&k, c.lora_scale, p, key);
    int outside = 0; /* the other columns of the rows are the base's, untouched */
    for (int n = 0; n < T; n++)
        for (int o = 0; o < ld; o++)
            if ((o < c0 || o >= c0 + out) && k.y[n * ld + o] != k.Y0[n * ld + o]) outside++;
    int ok = e.ok && !outside;
    printf("%-4s p %.2f: y err %.1e (%d changed outside its columns), fd err dx %.1e dA %.1e dB %.1e, %d dropped%s  %s\n",
           vit_lora_target_name(t), p, e.ey, outside, e.ex, e.eA, e.eB, e.dropped,
           e.leak ? " [gradient through a dropped element]" : "", ok ? "ok" : "FAIL");
    failures += !ok;
    lora_case_free(&k);
    arena_free(&ar);
}

int main(void) {
    for (int t = 0; t < VIT_LORA_N; t++) run_case((VitLoraTarget)t, t % 2 ? 0.3 : 0.0);
    run_case(VIT_LORA_Q, 0.3);
    if (failures) {
        printf("vit_lora: %d case(s) failed\n", failures);
        return 1;
    }
    printf("vit_lora: ok\n");
    return 0;
}
