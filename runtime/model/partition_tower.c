/* partition_tower.c — the tower's blocks over pipeline stages where the tower costs more than a stage's share
 * (partition.h, partition_auto_tower): a contiguous split of the chain [tower blocks][LM blocks]. */
#include <stdlib.h>

#include "engine/util.h"
#include "runtime/model/partition.h"

PartitionTower partition_tower_model(int Dv, int Lv, double patches, double patches_per_image, int patch) {
    /* partition_cost_model's tower terms, forward x 3 */
    double vit_layer = 2.0 * (3.0 * Dv * Dv + Dv * Dv + 8.0 * Dv * Dv) + 4.0 * patches_per_image * Dv;
    PartitionTower t = {3.0 * patches * 2.0 * 3.0 * patch * patch * Dv, 3.0 * patches * vit_layer, Lv};
    return t;
}

PartitionTower partition_tower_recompute(PartitionTower t, int tower_full) {
    if (tower_full) t.in *= 4.0 / 3.0, t.layer *= 4.0 / 3.0;
    return t;
}

/* The rest of first_extra (projector, the features' placement, token embedding): with LM block 0. */
static double tower_rest(PartitionCost c, PartitionTower t) {
    double r = c.first_extra - t.in - t.layers * t.layer;
    return r > 0 ? r : 0;
}

/* unit u of the chain: tower block u (u < Lv), else LM block u - Lv */
static double unit_cost(int u, PartitionCost c, PartitionTower t) {
    int Lv = t.layers;
    if (u < Lv) return t.layer + (u == 0 ? t.in : 0);
    return c.per_layer + (u == Lv ? tower_rest(c, t) : 0);
}

void partition_stage_costs_tower(int S, const int* tower, const int* layers, PartitionCost cost, PartitionTower tw,
                                 double* out_cost) {
    int Lv = tw.layers, t = 0, l = 0;
    for (int s = 0; s < S; s++) {
        double x = 0;
        for (int k = 0; k < tower[s]; k++) x += unit_cost(t + k, cost, tw);
        for (int k = 0; k < layers[s]; k++) x += unit_cost(Lv + l + k, cost, tw);
        if (s == S - 1) x += cost.last_extra;
        t += tower[s];
        l += layers[s];
        out_cost[s] = x;
    }
}

int partition_auto_tower(int L, int S, PartitionCost cost, PartitionTower tw, int* out_tower, int* out_layers) {
    return partition_auto_tower_path(L, S, cost, tw, 0, out_tower, out_layers);
}

int partition_auto_tower_path(int L, int S, PartitionCost cost, PartitionTower tw, int M, int* out_tower,
                              int* out_layers) {
    if (L < 1 || S < 1) return -1;
    if (partition_auto_path(L, S, cost, M, NULL, NULL, out_layers) != 0) return -1;
    for (int s = 0; s < S; s++) out_tower[s] = s == 0 ? tw.layers : 0;
    int Lv = tw.layers, n = Lv + L;
    if (Lv < 1 || S < 2 || n < S) return 0;
    double tower = tw.in + Lv * tw.layer, total = cost.first_extra + cost.last_extra + L * cost.per_layer;
    if (!(tower > total / S)) return 0; /* the tower fits in a stage's share: it stays on stage 0 */
    double* cl = mallocCheck(sizeof(double) * (size_t)S);
    partition_stage_costs(S, out_layers, cost, cl);
    double classic_max = partition_stage_paths(S, cl, M, NULL); /* the max cost (M = 0) or path */
    free(cl);
    /* prefix sums of the chain's unit costs; stage s over units [a, b) costs pre[b] - pre[a] (+ last_extra) */
    double* pre = mallocCheck(sizeof(double) * (size_t)(n + 1));
    pre[0] = 0;
    for (int u = 0; u < n; u++) pre[u + 1] = pre[u] + unit_cost(u, cost, tw);
    double* best = mallocCheck(sizeof(double) * (size_t)(S + 1) * (size_t)(n + 1));
    int* arg = mallocCheck(sizeof(int) * (size_t)(S + 1) * (size_t)(n + 1));
#define BEST(s, u) best[(size_t)(s) * (size_t)(n + 1) + (size_t)(u)]
#define ARG(s, u) arg[(size_t)(s) * (size_t)(n + 1) + (size_t)(u)]
    /* pass 0: the least max stage cost (M > 0: path); pass 1: of the splits within it, the least sum of squared
     * stage costs (the stages off the critical one as even as the blocks allow), as partition_auto */
    double mx = 1e300;
    /* path-aware: the last stage may hold the final norm, the LM head and the loss alone (not under a split backward) */
    int head_only = (M & ~PARTITION_SPLIT_BACKWARD) > 0 && !(M & PARTITION_SPLIT_BACKWARD);
    M &= ~PARTITION_SPLIT_BACKWARD;
    for (int pass = 0; pass < 2; pass++) {
        for (int s = 0; s <= S; s++)
            for (int u = 0; u <= n; u++) BEST(s, u) = 1e300, ARG(s, u) = -1;
        BEST(0, 0) = 0.0;
        for (int s = 1; s <= S; s++)
            for (int u = s; u <= n - (S - s) + (s < S ? head_only : 0); u++)
                for (int k = s == S && head_only ? 0 : 1; k <= u - (s - 1); k++) { /* stage s-1 takes units [u - k, u) */
                    if (BEST(s - 1, u - k) >= 1e300) continue;
                    double c = pre[u] - pre[u - k] + (s == S ? cost.last_extra : 0);
                    /* path-aware: the stage's path adds 1/M of the stages' before it, the chain's units [0, u - k) */
                    double score = c + (M > 0 ? pre[u - k] / M : 0);
                    double m;
                    if (pass == 0) m = BEST(s - 1, u - k) > score ? BEST(s - 1, u - k) : score;
                    else {
                        if (score > mx) continue;
                        m = BEST(s - 1, u - k) + c * c;
                    }
                    if (m < BEST(s, u) * (1.0 - 1e-12)) BEST(s, u) = m, ARG(s, u) = k;
                }
        if (pass == 0) mx = BEST(S, n) * (1.0 + 1e-9);
    }
    int rc = 0;
    if (BEST(S, n) < 1e300 && mx < classic_max * (1.0 - 1e-9)) {
        int* take = mallocCheck(sizeof(int) * (size_t)S);
        int u = n;
        for (int s = S; s >= 1; s--) {
            take[s - 1] = ARG(s, u);
            RR_ASSERT(take[s - 1] >= (s == S && head_only ? 0 : 1));
            u -= take[s - 1];
        }
        RR_ASSERT(u == 0);
        for (int s = 0, a = 0; s < S; s++) {
            int b = a + take[s];
            int t0 = a < Lv ? a : Lv, t1 = b < Lv ? b : Lv;
            out_tower[s] = t1 - t0;
            out_layers[s] = take[s] - out_tower[s];
            a = b;
        }
        free(take);
        rc = 1;
    }
#undef BEST
#undef ARG
    free(best);
    free(arg);
    free(pre);
    return rc;
}
