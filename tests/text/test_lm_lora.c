/* test_lm_lora.c — one LoRA linear (text/lm_lora.c) on the CPU backend against a double-precision reference:
 *
 *   y = Y0 + s B A drop(x),  loss = sum(y * R)
 *
 * 1. forward: y against the double reference (the mask from engine/cuda/dropout_math.h's specification, whose
 *    draws tests/support/ref/lora_ref.py checks independently);
 * 2. backward: dx (lm_lora_backward_input, ADDED onto random values), dA and dB (lm_lora_backward_weight, added
 *    onto random values) against central finite differences of the double loss (h 1e-4; every element of A, B
 *    and x). Error: max |f32 - fd| / max |fd| per tensor, bound 1e-4 (f32 GEMMs of inner length <= 96 and
 *    the FD's own h^2 error, ~1e-7 and ~1e-8 relative: 1e-4 is far above both and far below a wrong term,
 *    e.g. a missing scale s = 2 or a mask not applied to the gradient, which are O(1));
 * 3. the mask: the kept fraction within 5 standard errors of 1 - p, a different mask for another key, and a
 *    dropped element gets no gradient.
 * Cases: q (in D, column-parallel) and down (in F, row-parallel), without and with dropout.
 * Prints "lm_lora: ok". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/dropout_math.h"
#include "tests/support/lora_fd.h"
#include "text/lm.h"

static int failures = 0;

static void run_case(LmLoraTarget t, double p) {
    const Backend* be = &backend_cpu;
    LmConfig c = {.D = 24, .L = 2, .H = 2, .F = 40, .V = 16, .tp = 1, .lora_r = 4, .lora_scale = 2.0f,
                  .lora_dropout = (float)p, .lora_targets = 1u << t};
    int T = 7, r = c.lora_r, in = t == LM_LORA_DOWN ? c.F : c.D, out = c.D;
    Arena ar;
    arena_init(&ar, "test_lm_lora", 1 << 22);
    LmBlockActs a;
    LmBlockGrads g;
    LmScratch s;
    memset(&a, 0, sizeof a), memset(&g, 0, sizeof g), memset(&s, 0, sizeof s);
    lm_lora_acts_layout(&a, &ar, &c, T);
    lm_lora_grads_layout(&g, &ar, &c, T);
    lm_lora_scratch_layout(&s, &ar, &c, T);
    g.lora_x = s.lora_x;
    LoraCase k;
    lora_case_init(&k, T, in, out, r, out, 0);
    LmBlockW w, dw;
    memset(&w, 0, sizeof w), memset(&dw, 0, sizeof dw);
    w.layer = dw.layer = 1;
    w.lora_A[t] = buf_f32(k.A), w.lora_B[t] = buf_f32(k.B);
    dw.lora_A[t] = buf_f32(k.dA), dw.lora_B[t] = buf_f32(k.dB);
    LmSeq seq = {.T = T, .S = 1, .lora_seed = p > 0 ? lm_lora_seed(7, 3, 1) : 0};
    lm_lora_forward(be, &c, &w, &a, &s, &seq, t, buf_f32(k.x), buf_f32(k.y));
    lm_lora_backward_input(be, &c, &w, &a, &g, &s, &seq, t, buf_f32(k.x), k.R, k.dx);
    lm_lora_backward_weight(be, &c, &w, &dw, &a, &g, &seq, t, buf_f32(k.x), k.R);

    /* the key text/lm_lora.c gives (layer 1, target t): lora_key(seed, l, t) = mix(seed ^ mix(l * 8 + t)), mix =
     * splitmix64's finaliser; found as the one under which the reference matches */
    LoraErr e = lora_case_check(&k, c.lora_scale, p, lora_fd_mix(seq.lora_seed ^ lora_fd_mix(1 * 8 + (uint64_t)t)));
    printf("%-5s p %.2f: y err %.1e, fd err dx %.1e dA %.1e dB %.1e, %d dropped%s  %s\n", lm_lora_target_name(t), p,
           e.ey, e.ex, e.eA, e.eB, e.dropped, e.leak ? " [gradient through a dropped element]" : "", e.ok ? "ok" : "FAIL");
    failures += !e.ok;
    lora_case_free(&k);
    arena_free(&ar);
}

/* the mask's statistics: kept fraction within 5 standard errors of 1 - p over n draws; another key another mask */
static void mask_stats(void) {
    const int n = 200000;
    const float p = 0.3f;
    int kept = 0, differ = 0;
    for (int i = 0; i < n; i++) {
        int k1 = rr_dropout_keep(12345, (uint64_t)i, p), k2 = rr_dropout_keep(12346, (uint64_t)i, p);
        kept += k1, differ += k1 != k2;
    }
    double frac = (double)kept / n, se = sqrt(p * (1 - p) / n);
    int ok = fabs(frac - (1 - p)) <= 5 * se && differ > n / 4;
    printf("mask p %.2f: kept %.4f (want %.4f +- %.4f), %d of %d differ under another key  %s\n", p, frac, 1 - p, 5 * se,
           differ, n, ok ? "ok" : "FAIL");
    failures += !ok;
}

int main(void) {
    run_case(LM_LORA_Q, 0.0);
    run_case(LM_LORA_Q, 0.3);
    run_case(LM_LORA_DOWN, 0.0);
    run_case(LM_LORA_DOWN, 0.3);
    mask_stats();
    if (failures) {
        printf("lm_lora: %d case(s) failed\n", failures);
        return 1;
    }
    printf("lm_lora: ok\n");
    return 0;
}
