/* partition.c — LM layer split across pipeline stages: by hand, balanced by a FLOP cost model, or path-aware (the
 * least longest fill + stage work + drain, partition_auto_path). */
#include "runtime/model/partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

PartitionCost partition_cost_model(int Dv, int Lv, int Dt, int F, int V, double tokens, double patches,
                                   double patches_per_image, double tokens_per_sample, int patch) {
    /* Forward FLOPs per token x 3 for forward + backward (backward ~ 2x forward). */
    double vit_layer = 2.0 * (3.0 * Dv * Dv + Dv * Dv + 8.0 * Dv * Dv) + 4.0 * patches_per_image * Dv;
    double vit = patches * (2.0 * 3.0 * patch * patch * Dv + Lv * vit_layer);
    double proj = patches * 2.0 * (Dv * (double)Dt + (double)Dt * Dt);
    double lm_layer = tokens * (2.0 * (4.0 * Dt * (double)Dt + 3.0 * Dt * (double)F) + 2.0 * tokens_per_sample * Dt);
    double head = tokens * 2.0 * Dt * (double)V;
    PartitionCost c = {3.0 * (vit + proj), 3.0 * head, 3.0 * lm_layer};
    return c;
}

PartitionCost partition_cost_recompute(PartitionCost c, int lm_full, int tower_full) {
    if (lm_full) c.per_layer *= 4.0 / 3.0;
    if (tower_full) c.first_extra *= 4.0 / 3.0;
    return c;
}

static double stage_cost(int s, int S, int layers, PartitionCost c) {
    double x = layers * c.per_layer;
    if (s == 0) x += c.first_extra;
    if (s == S - 1) x += c.last_extra;
    return x;
}

void partition_stage_costs(int S, const int* layers, PartitionCost cost, double* out_cost) {
    for (int s = 0; s < S; s++) out_cost[s] = stage_cost(s, S, layers[s], cost);
}

double partition_stage_paths(int S, const double* cost, int M, double* out_path) {
    M &= ~PARTITION_SPLIT_BACKWARD;
    double before = 0, mx = 0;
    for (int s = 0; s < S; s++) {
        double p = cost[s] + (M > 0 ? before / M : 0);
        if (out_path) out_path[s] = p;
        mx = p > mx ? p : mx;
        before += cost[s];
    }
    return mx;
}

/* What the split minimises the max of for stage s taking k layers from layer l0: its cost, or (M > 0) its path,
 * its cost plus 1/M of the stages' before it (the first stage's extra and layers [0, l0)). */
static double stage_score(int s, int S, int l0, int k, PartitionCost c, int M) {
    M &= ~PARTITION_SPLIT_BACKWARD;
    double x = stage_cost(s, S, k, c);
    if (M > 0 && s > 0) x += (c.first_extra + l0 * c.per_layer) / M;
    return x;
}

int partition_auto(int L, int S, PartitionCost cost, int* out_layers) {
    return partition_auto_fit(L, S, cost, NULL, NULL, out_layers);
}

int partition_auto_fit(int L, int S, PartitionCost cost, PartitionFits fits, void* ctx, int* out_layers) {
    return partition_auto_path(L, S, cost, 0, fits, ctx, out_layers);
}

int partition_auto_path(int L, int S, PartitionCost cost, int M, PartitionFits fits, void* ctx, int* out_layers) {
    if (L < 1 || S < 1) return -1;
    /* best[s][l]: minimal max-cost splitting the first l layers over the first s stages.
     * O(S L^2) — trivial for any real model (L <= a few hundred). Ties prefer fewer layers on
     * earlier stages so the first stage (which also runs the ViT) is not overloaded. */
    int minper = L >= S ? 1 : 0;
    /* path-aware: the last stage may hold the final norm, the LM head and the loss alone (no LM block), unless the
     * backward is split (partition.h PARTITION_SPLIT_BACKWARD) */
    int head_only = (M & ~PARTITION_SPLIT_BACKWARD) > 0 && !(M & PARTITION_SPLIT_BACKWARD) && S >= 2;
    double* best = mallocCheck(sizeof(double) * (size_t)(S + 1) * (size_t)(L + 1));
    int* arg = mallocCheck(sizeof(int) * (size_t)(S + 1) * (size_t)(L + 1));
#define BEST(s, l) best[(size_t)(s) * (size_t)(L + 1) + (size_t)(l)]
#define ARG(s, l) arg[(size_t)(s) * (size_t)(L + 1) + (size_t)(l)]
    for (int s = 0; s <= S; s++)
        for (int l = 0; l <= L; l++) BEST(s, l) = 1e300, ARG(s, l) = -1;
    BEST(0, 0) = 0.0;
    for (int s = 1; s <= S; s++)
        for (int l = 0; l <= L; l++)
            for (int k = s == S && head_only && l == L ? 0 : minper; k <= l; k++) { /* stage s-1 takes k layers */
                if (BEST(s - 1, l - k) >= 1e300) continue;
                if (fits && !fits(ctx, s - 1, l - k, k)) continue;
                double c = stage_score(s - 1, S, l - k, k, cost, M);
                double m = BEST(s - 1, l - k) > c ? BEST(s - 1, l - k) : c;
                if (m < BEST(s, l) * (1.0 - 1e-12)) BEST(s, l) = m, ARG(s, l) = k;
            }
    if (BEST(S, L) >= 1e300) { /* no split fits */
        free(best);
        free(arg);
        return -1;
    }
    /* Among the splits whose every stage is within that max (cost or path), the least sum of squared stage costs:
     * the stages off the critical one as even as the layers allow (minimising the max alone left, e.g., an
     * any-resolution 7B at P = 8 split 3,5,5,5,5,5,3,1: five stages at the max and the last at a third of it; now
     * 3,5,4,4,4,4,4,4). */
    {
        double mx = BEST(S, L) * (1.0 + 1e-9);
        for (int s = 0; s <= S; s++)
            for (int l = 0; l <= L; l++) BEST(s, l) = 1e300, ARG(s, l) = -1;
        BEST(0, 0) = 0.0;
        for (int s = 1; s <= S; s++)
            for (int l = 0; l <= L; l++)
                for (int k = s == S && head_only && l == L ? 0 : minper; k <= l; k++) {
                    if (BEST(s - 1, l - k) >= 1e300) continue;
                    if (fits && !fits(ctx, s - 1, l - k, k)) continue;
                    double c = stage_cost(s - 1, S, k, cost);
                    if (stage_score(s - 1, S, l - k, k, cost, M) > mx) continue;
                    double m = BEST(s - 1, l - k) + c * c;
                    if (m < BEST(s, l) * (1.0 - 1e-12)) BEST(s, l) = m, ARG(s, l) = k;
                }
    }
    int l = L;
    for (int s = S; s >= 1; s--) {
        int k = ARG(s, l);
        RR_ASSERT(k >= 0);
        out_layers[s - 1] = k;
        l -= k;
    }
    RR_ASSERT(l == 0);
#undef BEST
#undef ARG
    free(best);
    free(arg);
    return 0;
}

int partition_parse(const char* spec, int L, int S, int* out_layers, char* err, int err_len) {
    int n = 0, sum = 0;
    const char* p = spec;
    while (*p) {
        char* end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 100000) {
            snprintf(err, (size_t)err_len, "'%s' is not a comma-separated list of layer counts (e.g. 2,3,3)", spec);
            return -1;
        }
        if (n < S) out_layers[n] = (int)v;
        n++;
        sum += (int)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p) {
            snprintf(err, (size_t)err_len, "'%s' is not a comma-separated list of layer counts (e.g. 2,3,3)", spec);
            return -1;
        }
    }
    if (n != S) {
        snprintf(err, (size_t)err_len, "'%s' gives %d stages, the layout has %d (pp x chunks)", spec, n, S);
        return -1;
    }
    if (sum != L) {
        snprintf(err, (size_t)err_len, "'%s' sums to %d layers, the model has %d", spec, sum, L);
        return -1;
    }
    return 0;
}
