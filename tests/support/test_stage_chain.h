/* test_stage_chain.h — pipeline stages chained in one process, for the model tests that compare a layout against one
 * stage holding everything (tests/runtime/model/test_model.c, test_tower_stages.c).
 *
 * tsc_run_chain runs microbatches mb[0, M) through stages st[0, P): per microbatch the forward on every stage in order,
 * then the backward from the last stage down (split_bw: B then W on every stage, else the fused backward), each
 * edge's hidden state and gradient handed on through one buffer per edge, sized for the stage's largest edge (the
 * LM's tokens x Dt, a tower stage's rows x Dv). Losses into loss[] (the last stage's). It also checks what the
 * pipeline's messages rely on: every stage accepts each microbatch, the two sides of an edge agree on its size and
 * on whether a gradient crosses it. Returns the number of failed checks, each printed as FAIL. */
#ifndef RRFP_TEST_STAGE_CHAIN_H
#define RRFP_TEST_STAGE_CHAIN_H

#include <stdio.h>

#include "runtime/model/model.h"

#define TSC_MAX_STAGES 8

static inline int tsc_run_chain(const Backend* be, Stage* st, int P, const Microbatch* mb, int M, int max_T, int max_Np,
                                int split_bw, float* loss, int n_sup) {
    int fails = 0;
    StageActs a[TSC_MAX_STAGES];
    float *hid[TSC_MAX_STAGES], *dhid[TSC_MAX_STAGES];
    if (P < 1 || P > TSC_MAX_STAGES) {
        printf("FAIL tsc_run_chain: %d stages (1 to %d)\n", P, TSC_MAX_STAGES);
        return 1;
    }
    for (int s = 0; s < P; s++) {
        stage_acts_init(&a[s], &st[s], max_T, max_Np, split_bw);
        size_t n = stage_edge_max_floats(&st[s], max_T, max_Np);
        hid[s] = be->dev->alloc(n * sizeof(float));
        dhid[s] = be->dev->alloc(n * sizeof(float));
    }
    for (int s = 0; s + 1 < P; s++) {
        if (!stage_takes_hidden(&st[s + 1])) printf("FAIL stage %d takes no hidden state from stage %d\n", s + 1, s), fails++;
        if (stage_takes_grad(&st[s]) != stage_gives_grad(&st[s + 1]))
            printf("FAIL stages %d and %d disagree on the gradient edge\n", s, s + 1), fails++;
    }
    for (int m = 0; m < M; m++) {
        char err[256];
        for (int s = 0; s < P; s++) {
            if (stage_check_microbatch(&st[s], &a[s], &mb[m], err, sizeof err) != 0)
                printf("FAIL stage %d refuses microbatch %d: %s\n", s, m, err), fails++;
            if (s + 1 < P && stage_out_floats(&st[s], &mb[m]) != stage_in_floats(&st[s + 1], &mb[m]))
                printf("FAIL edge %d: %zu floats out, %zu in (microbatch %d)\n", s, stage_out_floats(&st[s], &mb[m]),
                       stage_in_floats(&st[s + 1], &mb[m]), m),
                    fails++;
            stage_forward(&st[s], &a[s], &mb[m], s ? hid[s - 1] : NULL, s < P - 1 ? hid[s] : NULL, s == P - 1 ? &loss[m] : NULL);
        }
        for (int s = P - 1; s >= 0; s--) {
            const float* dout = stage_takes_grad(&st[s]) ? dhid[s] : NULL;
            float* din = s && stage_gives_grad(&st[s]) ? dhid[s - 1] : NULL;
            if (split_bw) {
                stage_backward_input(&st[s], &a[s], dout, 1.0f / n_sup, din);
                stage_backward_weight(&st[s], &a[s]);
            } else {
                stage_backward(&st[s], &a[s], dout, 1.0f / n_sup, din);
            }
        }
    }
    for (int s = 0; s < P; s++) {
        stage_acts_free(&a[s], &st[s]);
        be->dev->free(hid[s]);
        be->dev->free(dhid[s]);
    }
    return fails;
}

#endif
