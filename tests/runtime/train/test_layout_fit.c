/* test_layout_fit.c — the memory refit over the tower-and-LM chain (layout.c's split_fit_chain, parallel.tower_split =
 * auto) against every split there is: small models from recipes/test-synthetic.ini (2 to 5 tower blocks, 2 to 4 stages,
 * as many LM layers up to 4, vocabularies and widths that move the bytes between stages, 1 to 8 microbatches,
 * runtime.cap = 1 or not, parallel.partition = path or balance), each under budgets drawn from its own splits' largest
 * ranks. Every split the
 * runtime accepts (tower_split_check; under balance an LM layer on every stage from the first with LM layers, as
 * partition_auto_path's) is enumerated with its largest rank's bytes (split_largest_tower) and its longest stage path or
 * max cost (partition_stage_costs_tower). The search must return a split that fits with the least such measure, one that
 * moves tower blocks exactly where that is shorter than every fitting split with the tower on stage 0, and -1 where no
 * split fits. It includes layout.c to reach the static search and stage bytes; the library's copy is not linked (every
 * symbol it would provide is defined here first).
 * Usage: test_layout_fit SOURCE_DIR */
#include "runtime/train/layout.c"

#include "tests/support/check.h"

#define MAXS 4

typedef struct {
    int l[MAXS], t[MAXS], moved;
    double mem, mx;
} Split;

typedef struct {
    const Recipe* r;
    const ModelConfig* mc;
    int S;
    Split* all;
    int n, cap;
} Enum;

static void enum_add(Enum* e, const int* l, const int* t) {
    char why[512];
    int S = e->S, s0 = 0, pm = split_path_mb(e->r);
    if (tower_split_check(e->mc, S, l, t, why, sizeof why) != 0) return;
    while (s0 < S && l[s0] == 0) s0++;
    if (!pm && e->mc->Lt >= S - s0)
        for (int s = s0; s < S; s++)
            if (l[s] == 0) return;
    RR_ASSERT(e->n < e->cap);
    Split* x = &e->all[e->n++];
    memcpy(x->l, l, sizeof x->l);
    memcpy(x->t, t, sizeof x->t);
    x->moved = t[0] < e->mc->Lv;
    TrainRankBytes b;
    split_largest_tower(e->r, e->mc, l, x->moved ? t : NULL, &b);
    x->mem = b.total;
    double c[MAXS];
    partition_stage_costs_tower(S, t, l, split_cost(e->r, e->mc), split_tower(e->r, e->mc), c);
    x->mx = partition_stage_paths(S, c, pm, NULL);
}

/* every composition of the LM layers (l) and then the tower blocks (t) over the stages */
static void enum_splits(Enum* e, int* l, int* t, int s, int left, int tower) {
    int* v = tower ? t : l;
    if (s == e->S - 1) {
        v[s] = left;
        if (tower) enum_add(e, l, t);
        else enum_splits(e, l, t, 0, e->mc->Lv, 1);
        return;
    }
    for (int k = 0; k <= left; k++) {
        v[s] = k;
        enum_splits(e, l, t, s + 1, left - k, tower);
    }
}

static uint64_t lcg = 7;
static int draw(int n) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((lcg >> 33) % (uint64_t)n);
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    char path[1024];
    snprintf(path, sizeof path, "%s/recipes/test-synthetic.ini", argv[1]);
    static const int dv[] = {32, 64, 96}, dt[] = {32, 64}, vocab[] = {64, 1024, 4096}, mbs[] = {1, 2, 4, 8};
    int cases = 0, moved = 0, kept = 0, none = 0;
    Enum e = {0};
    e.cap = 40000;
    e.all = mallocCheck((size_t)e.cap * sizeof(Split));
    for (int it = 0; it < 60; it++) {
        Recipe r;
        char err[1024], a[128];
        CHECK(recipe_load(&r, path, err, sizeof err) == 0, "%s", err);
        int Lv = 2 + draw(4), S = 2 + draw(3), Lt = S + draw(5 - S); /* a recipe's pp <= its LM layers */
        const char* sets[10];
        char buf[10][64];
        snprintf(buf[0], 64, "model.vision_layers=%d", Lv);
        snprintf(buf[1], 64, "model.text_layers=%d", Lt);
        snprintf(buf[2], 64, "parallel.pp=%d", S);
        snprintf(buf[3], 64, "model.vision_width=%d", dv[draw(3)]);
        snprintf(buf[4], 64, "model.text_width=%d", dt[draw(2)]);
        snprintf(buf[5], 64, "model.vocab=%d", vocab[draw(3)]);
        snprintf(buf[6], 64, "data.microbatches=%d", mbs[draw(4)]);
        snprintf(buf[7], 64, "parallel.partition=%s", draw(2) ? "path" : "balance");
        snprintf(buf[8], 64, "parallel.tower_split=auto");
        snprintf(buf[9], 64, "runtime.cap=%s", draw(3) ? "0" : "1");
        for (int i = 0; i < 10; i++) sets[i] = buf[i];
        int ok = 1;
        for (int i = 0; i < 10 && ok; i++) ok = recipe_set(&r, sets[i], err, sizeof err) == 0;
        ok = ok && recipe_validate(&r, err, sizeof err) == 0;
        CHECK(ok, "case %d: %s", it, err);
        if (!ok) continue;
        ModelConfig mc = train_model_config(&r, r.vocab);
        int l[MAXS], t[MAXS];
        e.r = &r, e.mc = &mc, e.S = S, e.n = 0;
        enum_splits(&e, l, t, 0, Lt, 0);
        for (int q = 0; q < 9; q++) {
            /* a budget at one split's largest rank (it fits exactly), or just below the smallest (none fits) */
            const Split* at = &e.all[draw(e.n)];
            double lo = 1e300;
            for (int i = 0; i < e.n; i++) lo = e.all[i].mem < lo ? e.all[i].mem : lo;
            double bytes = q == 8 ? lo * 0.999 : at->mem;
            snprintf(a, sizeof a, "case %d (Lv %d, Lt %d, pp %d, %s) budget %.0f bytes", it, Lv, Lt, S, r.partition, bytes);
            r.memory_budget = bytes / (double)(1ull << 30);
            bytes = budget_bytes(&r);
            int best = -1, best_lm = -1;
            for (int i = 0; i < e.n; i++) {
                const Split* x = &e.all[i];
                if (x->mem > bytes) continue;
                if (best < 0 || x->mx < e.all[best].mx * (1 - 1e-9)) best = i;
                if (!x->moved && (best_lm < 0 || x->mx < e.all[best_lm].mx * (1 - 1e-9))) best_lm = i;
            }
            int lw[MAXS], tw[MAXS];
            int rc = split_fit_chain(&r, &mc, lw, tw);
            cases++;
            if (best < 0) {
                CHECK(rc == -1, "%s: no split fits, the search returned %d", a, rc);
                none++;
                continue;
            }
            CHECK(rc >= 0, "%s: a split fits, the search found none", a);
            if (rc < 0) continue;
            TrainRankBytes b;
            split_largest_tower(&r, &mc, lw, rc ? tw : NULL, &b);
            CHECK(b.total <= bytes, "%s: the search's split needs %.0f bytes", a, b.total);
            double c[MAXS];
            partition_stage_costs_tower(S, tw, lw, split_cost(&r, &mc), split_tower(&r, &mc), c);
            double mx = partition_stage_paths(S, c, split_path_mb(&r), NULL);
            CHECK(fabs(mx - e.all[best].mx) <= 1e-9 * mx, "%s: the search's split measures %.9g, the best %.9g", a, mx,
                  e.all[best].mx);
            int shorter = best_lm < 0 || e.all[best].mx < e.all[best_lm].mx * (1 - 1e-9);
            CHECK((rc == 1) == (e.all[best].moved && shorter), "%s: moved %d where the best split %s tower blocks", a, rc,
                  e.all[best].moved && shorter ? "moves" : "keeps the");
            moved += rc == 1, kept += rc == 0;
        }
    }
    /* the cases reach each outcome: a split moving tower blocks taken, the LM split kept, none fitting */
    CHECK(moved > 50 && kept > 50 && none > 20, "outcomes: %d moved, %d kept, %d none of %d", moved, kept, none, cases);
    printf("layout fit: %d cases (%d moving tower blocks, %d the LM split, %d none fits), %d failures\n", cases, moved, kept,
           none, check_failures);
    free(e.all);
    return check_failures ? 1 : 0;
}
