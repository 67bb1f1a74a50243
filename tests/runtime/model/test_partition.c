/* test_partition.c — layer split: the balanced split and the path-aware one (partition_auto_path: the least
 * longest stage cost + 1/M of the earlier stages' costs) are optimal (checked by brute force over every contiguous
 * split for small L, S), and of the optimal ones the most even (least sum of squared stage costs), and the
 * hand-written split parser's errors. */
#include <stdio.h>
#include <string.h>

#include "runtime/model/partition.h"

#include "tests/support/check.h"

/* The split's objective from the definitions: the max stage cost, or with path_mb = M > 0 the max path, a stage's
 * cost plus 1/M of the costs of the stages before it. */
static int path_mb;
static double max_cost(int S, const int* layers, PartitionCost c) {
    double m = 0, before = 0;
    for (int s = 0; s < S; s++) {
        double x = layers[s] * c.per_layer + (s == 0 ? c.first_extra : 0) + (s == S - 1 ? c.last_extra : 0);
        double p = x + (path_mb > 0 ? before / path_mb : 0);
        m = p > m ? p : m;
        before += x;
    }
    return m;
}

/* The path-aware split may leave the last stage the head alone (no LM layer), not for a split backward */
static int split_bw;
static int head_only(int S) { return path_mb > 0 && !split_bw && S >= 2; }

/* Enumerate all compositions of L into S parts (>= 1 each; path-aware: the last >= 0) and return the best max cost. */
static double brute(int L, int S, PartitionCost c, int* cur, int s, int left) {
    if (s == S - 1) {
        if (left < 1 - head_only(S)) return 1e300;
        cur[s] = left;
        return max_cost(S, cur, c);
    }
    double best = 1e300;
    for (int k = 1; k <= left - (S - 1 - s) + head_only(S); k++) {
        cur[s] = k;
        double m = brute(L, S, c, cur, s + 1, left - k);
        if (m < best) best = m;
    }
    return best;
}

static double sq_cost(int S, const int* layers, PartitionCost c) {
    double costs[64], q = 0;
    partition_stage_costs(S, layers, c, costs);
    for (int s = 0; s < S; s++) q += costs[s] * costs[s];
    return q;
}

/* The least sum of squared stage costs over the compositions whose max cost is within mx. */
static double brute_sq(int L, int S, PartitionCost c, double mx, int* cur, int s, int left) {
    if (s == S - 1) {
        if (left < 1 - head_only(S)) return 1e300;
        cur[s] = left;
        return max_cost(S, cur, c) <= mx ? sq_cost(S, cur, c) : 1e300;
    }
    double best = 1e300;
    for (int k = 1; k <= left - (S - 1 - s) + head_only(S); k++) {
        cur[s] = k;
        double m = brute_sq(L, S, c, mx, cur, s + 1, left - k);
        if (m < best) best = m;
    }
    return best;
}

/* partition_auto_path's fits: stage s holds at most cap[s] layers */
static int cap_fits(void* ctx, int s, int l0, int k) {
    (void)l0;
    return k <= ((const int*)ctx)[s];
}

/* The least max (path) over the compositions whose every stage is within cap[] (1e300: none) */
static double brute_cap(int L, int S, PartitionCost c, const int* cap, int* cur, int s, int left) {
    if (s == S - 1) {
        if (left < 1 - head_only(S) || left > cap[s]) return 1e300;
        cur[s] = left;
        return max_cost(S, cur, c);
    }
    double best = 1e300;
    for (int k = 1; k <= left - (S - 1 - s) + head_only(S) && k <= cap[s]; k++) {
        cur[s] = k;
        double m = brute_cap(L, S, c, cap, cur, s + 1, left - k);
        if (m < best) best = m;
    }
    return best;
}

int main(void) {
    /* the last: an LM head costing about two layers (a 7B's V x D GEMM against a block's) */
    PartitionCost costs[] = {{0, 0, 1}, {5, 0, 1}, {0, 3.5, 1}, {2.5, 1.5, 1}, {40, 2, 3}, {0.5, 2.2, 1}};
    enum { NC = sizeof costs / sizeof costs[0] };
    int l4[4];
    const int path_mbs[] = {0, 1, 3, 8}; /* balance, then path-aware for steps of 1, 3 and 8 microbatches */
    int n_differ = 0, n_head = 0;
    for (int ci = 0; ci < NC * 4; ci++)
        for (int S = 1; S <= 5; S++)
            for (int L = S; L <= 12; L++) {
                PartitionCost pc = costs[ci % NC];
                path_mb = path_mbs[ci / NC];
                int bal[16];
                partition_auto(L, S, pc, bal); /* the balanced split, for counting the cases where the path-aware one differs */
                int layers[16], cur[16];
                CHECK((path_mb ? partition_auto_path(L, S, pc, path_mb, NULL, NULL, layers) : partition_auto(L, S, pc, layers))
                      == 0, "auto failed");
                int sum = 0;
                for (int s = 0; s < S; s++) {
                    sum += layers[s];
                    CHECK(layers[s] >= 1 || (s == S - 1 && head_only(S)), "L=%d S=%d stage %d empty", L, S, s);
                }
                n_head += layers[S - 1] == 0;
                CHECK(sum == L, "L=%d S=%d: sum %d", L, S, sum);
                double got = max_cost(S, layers, pc), want = brute(L, S, pc, cur, 0, L);
                CHECK(got <= want * (1 + 1e-12), "cost %d L=%d S=%d: auto %.3f > optimum %.3f", ci, L, S, got, want);
                /* of the splits at that max, the stages as even as the layers allow: the least sum of squares */
                double gq = sq_cost(S, layers, pc), wq = brute_sq(L, S, pc, want * (1 + 1e-9), cur, 0, L);
                CHECK(gq <= wq * (1 + 1e-12), "cost %d L=%d S=%d: sum of squares %.3f > least %.3f", ci, L, S, gq, wq);
                if (path_mb && memcmp(bal, layers, sizeof(int) * (size_t)S)) n_differ++;
            }
    CHECK(n_differ > 50, "the path-aware split differs from the balanced one in %d cases only", n_differ);
    /* A split backward (PARTITION_SPLIT_BACKWARD): the same path objective over the splits whose last stage keeps an
     * LM layer, optimal by brute force; it differs from the whole backward's split exactly where that one leaves the
     * last stage the head alone */
    int n_keep = 0;
    split_bw = 1;
    for (int ci = 0; ci < NC * 2; ci++)
        for (int S = 2; S <= 5; S++)
            for (int L = S; L <= 12; L++) {
                PartitionCost pc = costs[ci % NC];
                path_mb = ci < NC ? 3 : 8;
                int layers[16], whole[16], cur[16];
                CHECK(partition_auto_path(L, S, pc, path_mb | PARTITION_SPLIT_BACKWARD, NULL, NULL, layers) == 0, "split");
                partition_auto_path(L, S, pc, path_mb, NULL, NULL, whole);
                int sum = 0;
                for (int s = 0; s < S; s++) {
                    sum += layers[s];
                    CHECK(layers[s] >= 1, "split L=%d S=%d stage %d empty", L, S, s);
                }
                CHECK(sum == L, "split L=%d S=%d: sum %d", L, S, sum);
                double got = max_cost(S, layers, pc), want = brute(L, S, pc, cur, 0, L);
                CHECK(got <= want * (1 + 1e-12), "split cost %d L=%d S=%d: %.3f > optimum %.3f", ci, L, S, got, want);
                double gq = sq_cost(S, layers, pc), wq = brute_sq(L, S, pc, want * (1 + 1e-9), cur, 0, L);
                CHECK(gq <= wq * (1 + 1e-12), "split cost %d L=%d S=%d: sum of squares %.3f > least %.3f", ci, L, S, gq, wq);
                CHECK((whole[S - 1] == 0) == (memcmp(whole, layers, sizeof(int) * (size_t)S) != 0),
                      "split cost %d L=%d S=%d: differs from the whole backward's split where that keeps an LM layer last", ci,
                      L, S);
                n_keep += whole[S - 1] == 0;
            }
    CHECK(n_keep > 10, "the split backward kept an LM layer on the last stage in %d cases only", n_keep);
    split_bw = 0;
    CHECK(n_head > 10, "the path-aware split leaves the last stage the head alone in %d cases only", n_head);
    /* One layer per stage but the head costs two: 4 layers on 4 stages, 8 microbatches, head 2.2 layers. 1,1,1,1 has
     * the last path 3.2 + 3/8 = 3.575; with the head alone the longest is 2.7 (1,1,2,0: paths 1, 1.125, 2.25, 2.7) */
    path_mb = 8;
    partition_auto_path(4, 4, (PartitionCost){0, 2.2, 1}, 8, NULL, NULL, l4);
    CHECK(l4[3] == 0 && l4[0] + l4[1] + l4[2] == 4, "head-only: %d,%d,%d,%d", l4[0], l4[1], l4[2], l4[3]);
    partition_auto_path(4, 4, (PartitionCost){0, 2.2, 1}, 8 | PARTITION_SPLIT_BACKWARD, NULL, NULL, l4);
    CHECK(l4[0] == 1 && l4[1] == 1 && l4[2] == 1 && l4[3] == 1, "split backward keeps an LM layer last: %d,%d,%d,%d", l4[0],
          l4[1], l4[2], l4[3]);
    partition_auto_fit(4, 4, (PartitionCost){0, 2.2, 1}, NULL, NULL, l4);
    CHECK(l4[0] == 1 && l4[1] == 1 && l4[2] == 1 && l4[3] == 1, "balance keeps a layer on every stage: %d,%d,%d,%d", l4[0],
          l4[1], l4[2], l4[3]);
    /* Uniform cost, 8 layers on 4 stages, 4 microbatches: balanced 2,2,2,2 has the last stage's path 2 + 6/4 = 3.5;
     * path-aware 3,2,2,1 (paths 3, 2.75, 3.25, 2.75) */
    partition_auto_path(8, 4, (PartitionCost){0, 0, 1}, 4, NULL, NULL, l4);
    CHECK(l4[0] == 3 && l4[1] == 2 && l4[2] == 2 && l4[3] == 1, "path-aware split %d,%d,%d,%d", l4[0], l4[1], l4[2], l4[3]);
    double c4[4], p4[4];
    partition_stage_costs(4, l4, (PartitionCost){0, 0, 1}, c4);
    CHECK(partition_stage_paths(4, c4, 4, p4) == 3.25 && p4[0] == 3 && p4[1] == 2.75 && p4[3] == 2.75, "paths %g %g %g %g",
          p4[0], p4[1], p4[2], p4[3]);
    CHECK(partition_stage_paths(4, c4, 0, NULL) == 3, "M = 0: the max stage cost");
    /* with a fits test (the trainer's memory budget): the optimum over the splits that fit, or -1 when none does */
    const int cap[5] = {3, 2, 4, 3, 5};
    int n_fit = 0;
    for (int ci = 0; ci < NC; ci++)
        for (path_mb = 0; path_mb <= 4; path_mb += 2)
            for (int L = 5; L <= 18; L++) { /* 18: over the caps (17), no split fits */
                int layers[5], cur[5];
                double want = brute_cap(L, 5, costs[ci], cap, cur, 0, L);
                int rc = partition_auto_path(L, 5, costs[ci], path_mb, cap_fits, (void*)cap, layers);
                CHECK((rc == 0) == (want < 1e300), "fits: cost %d M=%d L=%d: rc %d, optimum %g", ci, path_mb, L, rc, want);
                if (rc != 0) continue;
                n_fit++;
                for (int s = 0; s < 5; s++) CHECK(layers[s] <= cap[s], "fits: L=%d stage %d holds %d", L, s, layers[s]);
                CHECK(max_cost(5, layers, costs[ci]) <= want * (1 + 1e-12), "fits: cost %d M=%d L=%d: %g > optimum %g", ci,
                      path_mb, L, max_cost(5, layers, costs[ci]), want);
            }
    CHECK(n_fit > 100, "fits: %d cases split", n_fit);
    path_mb = 0;

    /* Uniform cost: 8 layers on 4 stages is 2,2,2,2; a heavy first stage gets fewer layers. */
    partition_auto(8, 4, (PartitionCost){0, 0, 1}, l4);
    CHECK(l4[0] == 2 && l4[1] == 2 && l4[2] == 2 && l4[3] == 2, "uniform split %d,%d,%d,%d", l4[0], l4[1], l4[2], l4[3]);
    partition_auto(8, 2, (PartitionCost){4, 0, 1}, l4);
    CHECK(l4[0] == 2 && l4[1] == 6, "vision-heavy split %d,%d", l4[0], l4[1]);
    /* Fewer layers than stages: allowed, some stages empty. */
    CHECK(partition_auto(2, 3, (PartitionCost){0, 0, 1}, l4) == 0 && l4[0] + l4[1] + l4[2] == 2, "L<S");

    char err[256];
    int l3[3];
    CHECK(partition_parse("2,3,3", 8, 3, l3, err, sizeof err) == 0 && l3[0] == 2 && l3[1] == 3 && l3[2] == 3, "parse");
    CHECK(partition_parse("2, 3, 3", 8, 3, l3, err, sizeof err) == 0, "spaces");
    CHECK(partition_parse("2,3", 8, 3, l3, err, sizeof err) == -1 && strstr(err, "gives 2 stages"), "count: %s", err);
    CHECK(partition_parse("2,3,4", 8, 3, l3, err, sizeof err) == -1 && strstr(err, "sums to 9"), "sum: %s", err);
    CHECK(partition_parse("2,x,3", 8, 3, l3, err, sizeof err) == -1 && strstr(err, "not a comma"), "junk: %s", err);
    CHECK(partition_parse("2,-1,7", 8, 3, l3, err, sizeof err) == -1, "negative");

    /* The cost model: the LM head grows with V, the ViT with patches. */
    PartitionCost a = partition_cost_model(128, 2, 256, 1024, 4096, 2048, 1024, 128, 300, 8);
    PartitionCost b = partition_cost_model(128, 2, 256, 1024, 8192, 2048, 2048, 128, 300, 8);
    CHECK(b.last_extra > 1.9 * a.last_extra && b.first_extra > 1.9 * a.first_extra && a.per_layer == b.per_layer,
          "cost model scaling");
    if (check_failures) return 1;
    printf("partition: ok\n");
    return 0;
}
