/* test_partition_tower.c — the tower's blocks over stages (partition_auto_tower): the chain split is optimal (the
 * least max stage cost, of those the least sum of squares; checked by brute force over every contiguous split of
 * [tower blocks][LM blocks] with the stage costs computed here from the unit definitions), it is taken exactly when
 * the tower costs more than a stage's share and lowers the max, else the split is partition_auto's with the whole
 * tower on stage 0; the same with the path-aware objective (partition_auto_tower_path, M microbatches: a stage's cost plus 1/M of the
 * earlier stages'); and on the 7B models: LLaVA-NeXT's tower leaves stage 0 at 32 stages, LLaVA-1.5's at 8 stays. */
#include <stdio.h>
#include <string.h>

#include "runtime/model/partition.h"

#include "tests/support/check.h"

/* Stage costs of the split cutting the chain after cut[s] units (cut[S-1] = n), from the definitions: tower block u
 * costs tower.layer (+ tower.in for u = 0), LM block j per_layer (+ first_extra less the tower for j = 0), the last
 * stage last_extra. */
static void chain_costs(int S, const int* take, PartitionCost c, PartitionTower t, double* out) {
    int Lv = t.layers, u = 0;
    double rest = c.first_extra - t.in - Lv * t.layer;
    for (int s = 0; s < S; s++) {
        double x = 0;
        for (int k = 0; k < take[s]; k++, u++) {
            if (u < Lv) x += t.layer + (u == 0 ? t.in : 0);
            else x += c.per_layer + (u == Lv ? rest : 0);
        }
        out[s] = x + (s == S - 1 ? c.last_extra : 0);
    }
}

/* the objective: the max stage cost, or with path_mb = M > 0 the max of a stage's cost plus 1/M of the earlier ones' */
static int path_mb;
static double max_of(int S, const double* x) {
    double m = 0, before = 0;
    for (int s = 0; s < S; s++) {
        double p = x[s] + (path_mb > 0 ? before / path_mb : 0);
        m = p > m ? p : m;
        before += x[s];
    }
    return m;
}
static double sq_of(int S, const double* x) {
    double q = 0;
    for (int s = 0; s < S; s++) q += x[s] * x[s];
    return q;
}

/* best max (mode 0) or the least sum of squares within mx (mode 1) over every composition of `left` units (path-aware:
 * the last stage may hold none, the head alone) */
static double brute(int S, PartitionCost c, PartitionTower t, int mode, double mx, int* take, int s, int left) {
    int head = path_mb > 0;
    if (s == S - 1) {
        if (left < 1 - head) return 1e300;
        take[s] = left;
        double x[16];
        chain_costs(S, take, c, t, x);
        if (mode == 0) return max_of(S, x);
        return max_of(S, x) <= mx ? sq_of(S, x) : 1e300;
    }
    double best = 1e300;
    for (int k = 1; k <= left - (S - 1 - s) + head; k++) {
        take[s] = k;
        double m = brute(S, c, t, mode, mx, take, s + 1, left - k);
        if (m < best) best = m;
    }
    return best;
}

int main(void) {
    /* {first_extra, last_extra, per_layer} with the tower's part {in, layer, layers}: towers cheap to heavy */
    PartitionCost costs[] = {{2, 0.5, 1}, {9, 0.3, 1}, {4, 0, 1}, {3, 1.5, 1}, {0, 0, 1}, {6.5, 0.7, 1.3}};
    PartitionTower towers[] = {{0.5, 0.5, 3}, {1, 2, 4}, {0.2, 1.2, 3}, {0, 1, 2}, {0, 0, 0}, {0.4, 1.9, 3}};
    int n_spans = 0, n_cases = 0, n_path_spans = 0, n_head = 0;
    for (size_t cj = 0; cj < 3 * sizeof costs / sizeof costs[0]; cj++)
        for (int S = 1; S <= 5; S++)
            for (int L = S; L <= 7; L++) {
                size_t ci = cj % (sizeof costs / sizeof costs[0]);
                PartitionCost c = costs[ci];
                path_mb = (int)(cj / (sizeof costs / sizeof costs[0])) * 2; /* 0 (balance), 2, 4 */
                PartitionTower tt = towers[ci];
                int tower[16], layers[16], ref[16], take[16];
                int rc = path_mb ? partition_auto_tower_path(L, S, c, tt, path_mb, tower, layers)
                                 : partition_auto_tower(L, S, c, tt, tower, layers);
                CHECK(rc == 0 || rc == 1, "cost %zu L=%d S=%d: rc %d", ci, L, S, rc);
                int st = 0, sl = 0;
                for (int s = 0; s < S; s++) {
                    st += tower[s], sl += layers[s];
                    CHECK(tower[s] + layers[s] >= 1 || (path_mb && s == S - 1 && S > 1), "cost %zu L=%d S=%d: stage %d empty",
                          ci, L, S, s);
                    /* contiguous: a stage with LM blocks holds the tower's last blocks or none; tower blocks only
                     * before every LM block */
                    CHECK(s == 0 || tower[s] == 0 || sl - layers[s] == 0, "cost %zu L=%d S=%d: tower after LM", ci, L, S);
                }
                CHECK(st == tt.layers && sl == L, "cost %zu L=%d S=%d: %d tower %d LM blocks", ci, L, S, st, sl);
                /* partition_stage_costs_tower agrees with the definitions */
                double got[16], want[16];
                for (int s = 0; s < S; s++) take[s] = tower[s] + layers[s];
                partition_stage_costs_tower(S, tower, layers, c, tt, got);
                chain_costs(S, take, c, tt, want);
                for (int s = 0; s < S; s++)
                    CHECK(got[s] > want[s] - 1e-9 && got[s] < want[s] + 1e-9, "cost %zu L=%d S=%d stage %d: %g vs %g",
                          ci, L, S, s, got[s], want[s]);
                /* the classic split: partition_auto's (path-aware: partition_auto_path's), costed as partition_stage_costs */
                partition_auto_path(L, S, c, path_mb, NULL, NULL, ref);
                double cl[16];
                partition_stage_costs(S, ref, c, cl);
                double tw = tt.in + tt.layers * tt.layer;
                double total = c.first_extra + c.last_extra + L * c.per_layer;
                double opt = tt.layers ? brute(S, c, tt, 0, 0, take, 0, tt.layers + L) : 1e300;
                int expect = tt.layers > 0 && S > 1 && tw > total / S && opt < max_of(S, cl) * (1 - 1e-9);
                CHECK(rc == expect, "cost %zu L=%d S=%d: rc %d, expected %d (tower %g, share %g, chain %g, classic %g)",
                      ci, L, S, rc, expect, tw, total / S, opt, max_of(S, cl));
                n_cases++;
                if (rc == 1) {
                    n_spans++;
                    n_head += take[S - 1] == 0;
                    n_path_spans += path_mb > 0;
                    CHECK(max_of(S, got) <= opt * (1 + 1e-12), "cost %zu L=%d S=%d: max %g > optimum %g", ci, L, S,
                          max_of(S, got), opt);
                    double wq = brute(S, c, tt, 1, opt * (1 + 1e-9), take, 0, tt.layers + L);
                    CHECK(sq_of(S, got) <= wq * (1 + 1e-12), "cost %zu L=%d S=%d: squares %g > least %g", ci, L, S,
                          sq_of(S, got), wq);
                } else {
                    CHECK(tower[0] == tt.layers, "cost %zu L=%d S=%d: classic with tower %d on stage 0", ci, L, S,
                          tower[0]);
                    for (int s = 0; s < S; s++)
                        CHECK(layers[s] == ref[s], "cost %zu L=%d S=%d: stage %d %d LM blocks, partition_auto %d", ci,
                              L, S, s, layers[s], ref[s]);
                }
            }
    CHECK(n_spans > 10 && n_spans < n_cases - 10, "both outcomes exercised: %d of %d cases split the tower", n_spans,
          n_cases);
    CHECK(n_path_spans > 10, "path-aware: %d cases split the tower", n_path_spans);
    CHECK(n_head > 0, "path-aware: no tower split leaves the last stage the head alone");
    path_mb = 0;
    CHECK(partition_auto_tower(0, 2, costs[0], towers[0], (int[2]){0}, (int[2]){0}) == -1, "L = 0 refused");

    /* The 7B models at their step's budget (runtime/sim/calib.c's assumptions): LLaVA-NeXT (CLIP-L/14-336 over every
     * tile, as many tower patches as positions, a tile's attention 576) at 32 stages: the tower costs more than a
     * stage's share; the split takes it off stage 0 and lowers the max stage. LLaVA-1.5 at 8 stages: the tower stays. */
    double tok = 8192.0 * 32;
    PartitionCost nx = partition_cost_model(1024, 24, 4096, 11008, 32064, tok, tok, 576, 256, 14);
    PartitionTower nxt = partition_tower_model(1024, 24, tok, 576, 14);
    /* the tower's part is partition_cost_model's: what is left of first_extra is the projector (x 3 for the backward) */
    double proj = 3.0 * tok * 2.0 * (1024.0 * 4096 + 4096.0 * 4096), rest = nx.first_extra - nxt.in - 24 * nxt.layer;
    CHECK(rest > proj * (1 - 1e-9) && rest < proj * (1 + 1e-9), "the tower's part: first_extra less it %g, projector %g",
          rest, proj);
    int tw32[32], ly32[32];
    CHECK(partition_auto_tower(32, 32, nx, nxt, tw32, ly32) == 1, "LLaVA-NeXT P=32: the tower over stages");
    CHECK(tw32[0] < 24 && ly32[0] == 0, "LLaVA-NeXT P=32: stage 0 holds %d tower blocks and %d LM blocks", tw32[0],
          ly32[0]);
    double a[32], b[32];
    int ref32[32];
    partition_auto(32, 32, nx, ref32);
    partition_stage_costs(32, ref32, nx, a);
    partition_stage_costs_tower(32, tw32, ly32, nx, nxt, b);
    CHECK(max_of(32, b) < 0.9 * max_of(32, a), "LLaVA-NeXT P=32: max stage %g, tower on stage 0 %g", max_of(32, b),
          max_of(32, a));
    /* path-aware for a step of 32 microbatches: a whole backward leaves the last stage the head alone (two LM blocks on
     * an earlier stage), a split backward (PARTITION_SPLIT_BACKWARD) keeps an LM block there, still over the chain */
    CHECK(partition_auto_tower_path(32, 32, nx, nxt, 32, tw32, ly32) == 1 && ly32[31] == 0,
          "LLaVA-NeXT P=32, path: the tower over stages and the head alone last (%d LM blocks)", ly32[31]);
    CHECK(partition_auto_tower_path(32, 32, nx, nxt, 32 | PARTITION_SPLIT_BACKWARD, tw32, ly32) == 1 && ly32[31] == 1 &&
              tw32[0] < 24,
          "LLaVA-NeXT P=32, path with a split backward: %d LM blocks last, %d tower blocks on stage 0", ly32[31], tw32[0]);
    /* at 16 stages (the tower on stage 0) the flagged objective is still the path (1/M of the earlier stages for M = 32),
     * not the balance: the same split as the whole backward's there, which takes a layer off the last stage */
    int tw16[16], ly16[16], pa16[16], ba16[16];
    partition_auto_tower_path(32, 16, nx, nxt, 32 | PARTITION_SPLIT_BACKWARD, tw16, ly16);
    partition_auto_path(32, 16, nx, 32, NULL, NULL, pa16);
    partition_auto_path(32, 16, nx, 0, NULL, NULL, ba16);
    CHECK(!memcmp(ly16, pa16, sizeof ly16) && memcmp(ly16, ba16, sizeof ly16) && tw16[0] == 24,
          "LLaVA-NeXT P=16, path with a split backward: last stage %d LM blocks (path %d, balance %d)", ly16[15], pa16[15],
          ba16[15]);
    PartitionCost v15 = partition_cost_model(1024, 24, 4096, 11008, 32000, 4096.0 * 32, 0.5 * 4096 * 32, 320, 256, 14);
    PartitionTower v15t = partition_tower_model(1024, 24, 0.5 * 4096 * 32, 320, 14);
    int tw8[8], ly8[8];
    CHECK(partition_auto_tower(32, 8, v15, v15t, tw8, ly8) == 0 && tw8[0] == 24, "LLaVA-1.5 P=8: the tower on stage 0");
    if (check_failures) return 1;
    printf("partition tower: ok (%d of %d cases split the tower)\n", n_spans, n_cases);
    return 0;
}
