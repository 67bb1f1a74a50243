/* test_packing.c — how good the microbatch packer is (data/loader.h, loader_pack_window), not only that it
 * loses nothing (test_data checks that):
 *   tables:     fixed windows of samples (token counts and balanced costs) whose bins were worked out by
 *               hand, below each case, for ffd and balanced: the exact bins of both, every bin within the
 *               budget, and balanced's costliest bin no costlier than ffd's (strictly cheaper where the
 *               hand-worked bins say so);
 *   calibrated: the calibrated generator's 7B steps (runtime/sim, pp_calib_generate: samples of a
 *               LLaVA-1.5-like mix packed by this packer, durations from the partitioner's cost model), 12
 *               seeds: the step's costliest microbatch under balanced no longer than under ffd.
 * Usage: test_packing */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "runtime/sim/sim.h"

#include "tests/support/check.h"

#define MAXN 16

typedef struct {
    const char* what;
    int n, budget;
    int L[MAXN];
    double cost[MAXN];
    int64_t key[MAXN];
    int ffd_nb, ffd[MAXN];
    int bal_nb, bal[MAXN];
    int strictly; /* balanced's costliest bin is strictly cheaper than ffd's */
} Case;

/* The costliest bin's balanced cost, after checking the packing: every sample in a bin of [0, nb), every
 * bin within the budget and not empty. */
static double max_bin_cost(const Case* c, const char* pol, const int* bin_of, int nb) {
    double cost[MAXN] = {0}, worst = 0;
    int tok[MAXN] = {0}, used[MAXN] = {0};
    for (int i = 0; i < c->n; i++) {
        int b = bin_of[i];
        CHECK(b >= 0 && b < nb && b < MAXN, "%s, %s: sample %d in bin %d of %d", c->what, pol, i, b, nb);
        if (b < 0 || b >= nb || b >= MAXN) return INFINITY;
        tok[b] += c->L[i], cost[b] += c->cost[i], used[b] = 1;
    }
    for (int b = 0; b < nb; b++) {
        CHECK(used[b] && tok[b] <= c->budget, "%s, %s: bin %d holds %d tokens (budget %d)%s", c->what, pol, b, tok[b],
              c->budget, used[b] ? "" : ", no sample");
        worst = fmax(worst, cost[b]);
    }
    return worst;
}

static void run_case(const Case* c) {
    int ffd[MAXN], bal[MAXN];
    int nf = loader_pack_window(LOADER_POLICY_FFD, c->n, c->L, c->cost, c->key, c->budget, ffd);
    int nb = loader_pack_window(LOADER_POLICY_BALANCED, c->n, c->L, c->cost, c->key, c->budget, bal);
    int same_f = nf == c->ffd_nb, same_b = nb == c->bal_nb;
    for (int i = 0; i < c->n; i++) same_f &= ffd[i] == c->ffd[i], same_b &= bal[i] == c->bal[i];
    char got_f[128] = "", got_b[128] = "";
    for (int i = 0, of = 0, ob = 0; i < c->n; i++) {
        of += snprintf(got_f + of, sizeof got_f - (size_t)of, " %d", ffd[i]);
        ob += snprintf(got_b + ob, sizeof got_b - (size_t)ob, " %d", bal[i]);
    }
    CHECK(same_f, "%s: ffd put the samples into bins%s (%d bins), not the hand-worked ones", c->what, got_f, nf);
    CHECK(same_b, "%s: balanced put the samples into bins%s (%d bins), not the hand-worked ones", c->what, got_b, nb);
    double mf = max_bin_cost(c, "ffd", ffd, nf), mb = max_bin_cost(c, "balanced", bal, nb);
    CHECK(c->strictly ? mb < mf : mb <= mf, "%s: balanced's costliest bin costs %g, ffd's %g", c->what, mb, mf);
    printf("%-44s ffd bins%s: costliest %g | balanced bins%s: costliest %g\n", c->what, got_f, mf, got_b, mb);
}

static void test_tables(void) {
    /* loader_balanced_cost = L + (L^2 + sum of patches^2) / attn_tokens, on values worked out by hand (all
     * exact in binary: the divisions are by 512) */
    CHECK(loader_balanced_cost(600, 0, 512) == 1303.125, "cost of 600 text tokens: %g", loader_balanced_cost(600, 0, 512));
    CHECK(loader_balanced_cost(400, 300.0 * 300, 512) == 888.28125, "cost of 400 positions with a 300-patch image: %g",
          loader_balanced_cost(400, 300.0 * 300, 512));
    static const Case cases[] = {
        /* Equal token counts, unequal cost (attention is quadratic): cost = L + L^2 / 8, so 8 tokens cost 16
         * and 4 cost 6. ffd by tokens: 8, then the 4s in stream order (keys 10, 12, 13, 14): 8 + 4 + 4 fill
         * bin 0 (16 tokens, cost 28), the last two 4s go to bin 1 (cost 12). balanced, 2 bins, by cost:
         * 8 -> bin 0 (16); the first 4 -> bin 1 (6); the next -> bin 1 (12, still below 16); the next -> bin
         * 1 (18, 12 tokens); the last -> bin 0 (22). Costliest: 22 against 28. */
        {"quadratic cost, equal tokens", 5, 16, {4, 8, 4, 4, 4}, {6, 16, 6, 6, 6}, {10, 11, 12, 13, 14},
         2, {0, 0, 0, 1, 1}, 2, {1, 0, 1, 1, 0}, 1},
        /* A new bin when none has room: budget 10, cost = L. ffd: 6 -> 0, 5 -> 1, 4 -> 0 (10), 3 -> 1 (8),
         * 2 -> 1 (10): two full bins. balanced, 2 bins: 6 -> 0, 5 -> 1, 4 -> 1 (9, the cheaper), 3 -> 0 (9),
         * 2: both cost 9 and neither has room for 2 more tokens -> bin 2. Costliest: 9 against 10. */
        {"a third bin when none has room", 5, 10, {6, 5, 4, 3, 2}, {6, 5, 4, 3, 2}, {0, 1, 2, 3, 4},
         2, {0, 1, 0, 1, 1}, 3, {0, 1, 1, 0, 2}, 1},
        /* Ties go in stream order (keys 3, 1, 2, 0: samples 3, 1, 2, 0), and to the first of equally cheap
         * bins. ffd: 3 -> 0, 1 -> 0 (8), 2 -> 1, 0 -> 1. balanced: 3 -> 0 (4), 1 -> 1 (0 < 4), 2 -> 0 (4 = 4:
         * the first), 0 -> 1. Costliest: 8 both. */
        {"ties in stream order", 4, 8, {4, 4, 4, 4}, {4, 4, 4, 4}, {3, 1, 2, 0}, 2, {1, 0, 1, 0}, 2, {1, 1, 0, 0}, 0},
        /* The balanced cost of real-sized samples, loader_balanced_cost with attn_tokens 512, budget 1024:
         *   s0 600 text                    600 + 360000 / 512            = 1303.125
         *   s1 400 with a 300-patch image  400 + (160000 + 90000) / 512  =  888.28125
         *   s2 400 text                    400 + 160000 / 512            =  712.5
         *   s3 300 text                    300 + 90000 / 512             =  475.78125
         *   s4 300 with a 200-patch image  300 + (90000 + 40000) / 512   =  553.90625
         *   s5 200 text                    200 + 40000 / 512             =  278.125
         * ffd by tokens: s0 -> 0 (600), s1 -> 0 (1000), s2 -> 1, s3 -> 1 (700), s4 -> 1 (1000), s5 -> 2:
         * bin 0 costs 2191.40625. balanced, 3 bins, by cost: s0 -> 0, s1 -> 1, s2 -> 2, s4 -> 2 (712.5 is the
         * cheapest: 1266.40625), s3 -> 1 (888.28125: 1364.0625), s5 -> 2 (1266.40625: 1544.53125). */
        {"LLaVA-sized samples, attn_tokens 512", 6, 1024, {600, 400, 400, 300, 300, 200},
         {1303.125, 888.28125, 712.5, 475.78125, 553.90625, 278.125}, {0, 1, 2, 3, 4, 5},
         3, {0, 0, 1, 1, 1, 2}, 3, {0, 1, 2, 1, 2, 2}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    /* the table's costs are the cost model's */
    const Case* c = &cases[3];
    const double sq[6] = {0, 300.0 * 300, 0, 0, 200.0 * 200, 0};
    for (int i = 0; i < c->n; i++)
        CHECK(loader_balanced_cost(c->L[i], sq[i], 512) == c->cost[i], "s%d: cost %g, the table says %g", i,
              loader_balanced_cost(c->L[i], sq[i], 512), c->cost[i]);
}

/* The step's costliest microbatch (its F + B summed over the stages) of a calibrated step under `policy`. */
static double calibrated_max(int policy, uint64_t seed) {
    PpCalibConfig c;
    pp_calib_defaults(&c); /* the 7B recipe at P = 8, M = 32, window 256 */
    c.policy = policy;
    c.seed = seed;
    c.jitter = 0, c.straggler_prob = 0; /* the packing's effect alone */
    PpDurations d;
    PpCalibStats st;
    char err[512];
    if (pp_calib_generate(&c, &d, &st, err, sizeof err) != 0) {
        CHECK(0, "pp_calib_generate: %s", err);
        return NAN;
    }
    double worst = 0;
    for (int m = 0; m < d.M; m++) {
        double w = 0;
        for (int s = 0; s < d.P; s++) w += d.F[(size_t)s * d.M + m] + d.B[(size_t)s * d.M + m];
        worst = fmax(worst, w);
    }
    pp_durations_free(&d);
    return worst;
}

static void test_calibrated(void) {
    double worst_ratio = 0, sum_ratio = 0;
    int n = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        double f = calibrated_max(1, seed), b = calibrated_max(2, seed);
        CHECK(b <= f, "calibrated 7B step, seed %llu: balanced's costliest microbatch takes %.6g s, ffd's %.6g s",
              (unsigned long long)seed, b, f);
        worst_ratio = fmax(worst_ratio, b / f);
        sum_ratio += b / f;
        n++;
    }
    printf("calibrated 7B steps (P 8, M 32), %d seeds: balanced's costliest microbatch / ffd's: mean %.4f, largest "
           "%.4f\n", n, sum_ratio / n, worst_ratio);
}

int main(void) {
    test_tables();
    test_calibrated();
    if (check_failures) fprintf(stderr, "%d failure(s)\n", check_failures);
    else printf("packing quality: ok\n");
    return check_failures ? 1 : 0;
}
