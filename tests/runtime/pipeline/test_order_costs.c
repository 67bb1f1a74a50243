/* test_order_costs.c — adaptive's deterministic order cost model (pipeline_order_costs, runtime/pipeline/pipeline.c)
 * with the tower over stages (PipelineConfig.tower_vstages, docs/anyres.md "The tower over stages"): a microbatch's
 * patches count on every virtual stage that runs tower blocks, wherever it sits (rank 0 only with the tower on virtual
 * stage 0; the later ranks' tower stages under one chunk, interleaved-1f1b and zbv's V shape), its tokens and the
 * task's 1 on every virtual stage, times the kind's weight (F 1, B 2; split: B 1, W 1). */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/pipeline/pipeline.h"
#include "tests/support/check.h"

/* rank r's expected F cost of microbatch (T, Np) when `tower` of its chunks run tower blocks */
static double units(int chunks, int tower, int T, int Np) { return (double)chunks * (T + 1) + (double)tower * Np; }

/* cfg's det.F, det.B (and det.W) against want_tower[r]: the number of rank r's chunks that run tower blocks */
static void check_costs(const char* what, PipelineConfig cfg, const int* want_tower, int split) {
    Microbatch mbs[2] = {{0}};
    mbs[0].T = 100, mbs[0].Np = 40;
    mbs[1].T = 60, mbs[1].Np = 500;
    PpDurations det;
    pipeline_order_costs(&cfg, mbs, 2, &det);
    CHECK(det.P == cfg.P && det.M == 2 && det.split == split && (det.W != NULL) == split, "%s: shape", what);
    for (int r = 0; r < cfg.P; r++)
        for (int m = 0; m < 2; m++) {
            double u = units(cfg.chunks, want_tower[r], mbs[m].T, mbs[m].Np);
            size_t i = (size_t)r * 2 + m;
            CHECK(det.F[i] == u, "%s: rank %d mb %d: F %g, want %g", what, r, m, det.F[i], u);
            CHECK(det.B[i] == (split ? u : 2 * u), "%s: rank %d mb %d: B %g", what, r, m, det.B[i]);
            if (split) CHECK(det.W[i] == u, "%s: rank %d mb %d: W %g", what, r, m, det.W[i]);
        }
    pp_durations_free(&det);
}

int main(void) {
    PipelineConfig c = {.P = 3, .chunks = 1, .hint = PP_HINT_1F1B};
    check_costs("the tower on stage 0", c, (int[]){1, 0, 0}, 0);
    c.tower_vstages = 2; /* tower blocks on stages 0 and 1, LM layer 0 on stage 1 */
    check_costs("tower stages 0-1", c, (int[]){1, 1, 0}, 0);
    c.tower_vstages = 3;
    c.hint = PP_HINT_ZBH1; /* the split backward */
    check_costs("tower stages 0-2, zb-h1", c, (int[]){1, 1, 1}, 1);
    /* pp 2 x 2 chunks, tower blocks on virtual stages 0, 1, 2: interleaved puts v2 on rank 0 chunk 1, zbv on rank 1 */
    PipelineConfig i = {.P = 2, .chunks = 2, .hint = PP_HINT_INTERLEAVED, .tower_vstages = 3};
    check_costs("interleaved", i, (int[]){2, 1}, 0);
    i.hint = PP_HINT_ZBV;
    check_costs("zbv", i, (int[]){1, 2}, 1);
    i.tower_vstages = 0;
    check_costs("zbv, the tower on virtual stage 0", i, (int[]){1, 0}, 1);
    if (check_failures) return 1;
    printf("order costs: ok (%d checks)\n", check_count);
    return 0;
}
