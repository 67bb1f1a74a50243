/* test_tp.c — the tensor-parallel split without MPI (runtime/model/tp.h):
 *   split: every tensor of a small LLaVA has the split DESIGN.md section 6 gives it, and for tp 2 and
 *          4 the ranks' ranges tile the split dimension exactly once (the fused ViT qkv by heads of
 *          each q | k | v part);
 *   init:  each shard initialised alone equals the slice of the one-process tensor, bitwise ("slices
 *          equal the whole");
 *   ce:    the vocabulary-parallel cross-entropy on 2 and 4 in-process ranks (threads with a barrier
 *          all-reduce) against the unsplit CPU op: loss, lse and every rank's dlogits columns.
 * Usage: test_tp [split|init|ce]   (no argument: all) */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/util.h"
#include "runtime/model/model.h"
#include "runtime/model/tp.h"

static int fails = 0;
#define CHECK(c, ...)                                                                                                  \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                      \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
            fails++;                                                                                                   \
        }                                                                                                              \
    } while (0)

/* A small model whose every split dimension divides by 4. */
static ModelConfig small_config(void) {
    ModelConfig c = {.patch = 2, .Dv = 32, .Lv = 2, .Hv = 4, .Dt = 32, .Lt = 2, .Ht = 4, .F = 48, .V = 40,
                     .min_patches = 1, .max_patches = 16, .init_std = 0.02f, .seed = 7};
    return c;
}

static void test_split(void) {
    ModelConfig mc = small_config();
    Stage st;
    stage_init(&st, &mc, 0, mc.Lt, &backend_cpu);
    int count[4] = {0};
    for (int i = 0; i < st.params.n; i++) {
        const ParamSpec* s = &st.params.specs[i];
        TpSplit k = tp_split_of(s->name);
        if (k == TP_ROW && s->ndim < 2) k = TP_REPLICATED;
        count[k]++;
        for (int T = 2; T <= 4; T += 2) {
            uint8_t* cover = NULL;
            int64_t whole = 0;
            for (int t = 0; t < T; t++) {
                TpRange r[TP_MAX_RANGES];
                char err[256];
                int n = tp_shard_ranges(s->name, s->ndim, s->shape, T, t, r, err, sizeof err);
                CHECK(n >= 1, "%s tp %d: %s", s->name, T, err);
                if (n < 1) break;
                if (k == TP_REPLICATED) {
                    CHECK(n == 1 && r[0].offset == 0 && r[0].length == s->shape[0], "%s replicated: not whole", s->name);
                    continue;
                }
                int dim = r[0].dim;
                CHECK(dim == (k == TP_ROW ? 1 : 0), "%s (%s): split along dim %d", s->name, tp_split_name(k), dim);
                whole = s->shape[dim];
                if (!cover) cover = callocCheck((size_t)whole, 1);
                int64_t shard_shape[TENSOR_MAX_DIMS], len = 0;
                for (int j = 0; j < n; j++) {
                    len += r[j].length;
                    for (int64_t e = r[j].offset; e < r[j].offset + r[j].length; e++) cover[e]++;
                }
                tp_shard_shape(r, n, s->ndim, s->shape, shard_shape);
                CHECK(len * T == whole && shard_shape[dim] == whole / T, "%s tp %d rank %d: %lld of %lld", s->name, T,
                      t, (long long)len, (long long)whole);
            }
            for (int64_t e = 0; cover && e < whole; e++)
                if (cover[e] != 1) {
                    CHECK(0, "%s tp %d: index %lld owned %d times", s->name, T, (long long)e, cover[e]);
                    break;
                }
            free(cover);
        }
    }
    /* per ViT block: qkv w+b, fc1 w+b column, out.w, fc2.w row; per LM block: q k v gate up column, o down
     * row; projector.0 w+b column, projector.2.w row; embedding and head vocab */
    CHECK(count[TP_COLUMN] == 4 * mc.Lv + 5 * mc.Lt + 2, "column tensors: %d", count[TP_COLUMN]);
    CHECK(count[TP_ROW] == 2 * mc.Lv + 2 * mc.Lt + 1, "row tensors: %d", count[TP_ROW]);
    CHECK(count[TP_VOCAB] == 2, "vocab tensors: %d", count[TP_VOCAB]);
    /* the fused qkv of rank 1 of 2: heads 2, 3 of q, k and v */
    TpRange r[TP_MAX_RANGES];
    char err[256];
    int64_t qkv[2] = {3 * mc.Dv, mc.Dv};
    int n = tp_shard_ranges("vision.blocks.0.attn.qkv.weight", 2, qkv, 2, 1, r, err, sizeof err);
    CHECK(n == 3 && r[0].offset == 16 && r[1].offset == 48 && r[2].offset == 80 && r[2].length == 16,
          "qkv rank 1 of 2: %d ranges from %lld", n, (long long)r[0].offset);
    int64_t odd[2] = {30, 32};
    CHECK(tp_shard_ranges("text.blocks.0.attn.q.weight", 2, odd, 4, 0, r, err, sizeof err) == -1 && strstr(err, "tp = 4"),
          "30 rows split 4 ways accepted: %s", err);
    stage_free(&st);
}

static void test_init(void) {
    ModelConfig mc = small_config();
    Stage st;
    stage_init(&st, &mc, 0, mc.Lt, &backend_cpu);
    int checked = 0;
    for (int i = 0; i < st.params.n; i++) {
        const ParamSpec* s = &st.params.specs[i];
        if (s->init != PARAM_INIT_NORMAL || tp_split_of(s->name) == TP_REPLICATED) continue;
        const float* whole = params_data(&st.params, i);
        int64_t cols = s->ndim > 1 ? s->shape[1] : 1;
        for (int T = 2; T <= 4; T += 2)
            for (int t = 0; t < T; t++) {
                TpRange r[TP_MAX_RANGES];
                char err[256];
                int n = tp_shard_ranges(s->name, s->ndim, s->shape, T, t, r, err, sizeof err);
                if (n < 1) continue;
                float* shard = mallocCheck(s->numel / (size_t)T * sizeof(float));
                tp_init_normal_shard(shard, s->name, s->ndim, s->shape, r, n, mc.seed, s->init_std);
                /* the slice, gathered from the one-process tensor */
                size_t k = 0, bad = 0;
                if (r[0].dim == 0) {
                    for (int j = 0; j < n; j++)
                        for (int64_t e = r[j].offset * cols; e < (r[j].offset + r[j].length) * cols; e++)
                            bad += memcmp(&shard[k++], &whole[e], 4) != 0;
                } else {
                    for (int64_t row = 0; row < s->shape[0]; row++)
                        for (int j = 0; j < n; j++)
                            for (int64_t c = r[j].offset; c < r[j].offset + r[j].length; c++)
                                bad += memcmp(&shard[k++], &whole[row * cols + c], 4) != 0;
                }
                CHECK(k == s->numel / (size_t)T && bad == 0, "%s tp %d rank %d: %zu of %zu elements differ", s->name, T,
                      t, bad, k);
                checked++;
                free(shard);
            }
    }
    CHECK(checked > 40, "only %d shards checked", checked);
    stage_free(&st);
}

/* ---- in-process ranks: threads with a barrier all-reduce ---- */
typedef struct {
    int T;
    pthread_barrier_t bar;
    double* bufs[8];
} FakeGroup;
typedef struct {
    FakeGroup* g;
    int t;
    /* the rank's problem */
    const float* logits; /* (N, Vs) */
    const int* targets;
    int N, Vs, V;
    float loss, *lse, *dlogits;
    int rc;
    char err[256];
} FakeRank;

static int fake_reduce(void* ctx, double* buf, size_t n, int op_max, char* err, size_t err_len) {
    FakeRank* me = ctx;
    FakeGroup* g = me->g;
    (void)err, (void)err_len;
    g->bufs[me->t] = buf;
    pthread_barrier_wait(&g->bar);
    double* out = mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double a = g->bufs[0][i];
        for (int r = 1; r < g->T; r++) a = op_max ? fmax(a, g->bufs[r][i]) : a + g->bufs[r][i];
        out[i] = a;
    }
    pthread_barrier_wait(&g->bar); /* everyone has read every buffer */
    memcpy(buf, out, n * sizeof(double));
    free(out);
    return 0;
}

static void* fake_rank_main(void* arg) {
    FakeRank* me = arg;
    double* scratch = mallocCheck(3 * (size_t)me->N * sizeof(double));
    me->rc = tp_vocab_ce_forward(&me->loss, me->lse, me->logits, me->targets, me->N, me->Vs, me->t * me->Vs, me->V,
                                 fake_reduce, me, scratch, me->err, sizeof me->err);
    if (me->rc == 0)
        tp_vocab_ce_backward(me->dlogits, me->logits, me->lse, me->targets, 0.125f, me->N, me->Vs, me->t * me->Vs);
    free(scratch);
    return NULL;
}

static void test_ce(void) {
    enum { N = 9, V = 24 };
    float logits[N * V], lse[N], dlogits[N * V];
    int targets[N];
    uint64_t s = 12345;
    for (int i = 0; i < N * V; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        logits[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    for (int n = 0; n < N; n++) targets[n] = n % 3 == 1 ? -100 : (n * 7) % V; /* ignored rows too */
    float loss;
    memset(dlogits, 0, sizeof dlogits);
    backend_cpu.crossentropy_forward(&loss, lse, logits, targets, N, V);
    backend_cpu.crossentropy_backward(dlogits, logits, lse, targets, 0.125f, N, V);
    for (int T = 2; T <= 4; T *= 2) {
        int Vs = V / T;
        FakeGroup g = {.T = T};
        pthread_barrier_init(&g.bar, NULL, (unsigned)T);
        FakeRank rk[4];
        pthread_t th[4];
        for (int t = 0; t < T; t++) {
            float* shard = mallocCheck(sizeof(float) * N * (size_t)Vs);
            for (int n = 0; n < N; n++) memcpy(shard + n * Vs, logits + n * V + t * Vs, sizeof(float) * (size_t)Vs);
            rk[t] = (FakeRank){.g = &g, .t = t, .logits = shard, .targets = targets, .N = N, .Vs = Vs, .V = V};
            rk[t].lse = mallocCheck(sizeof(float) * N);
            rk[t].dlogits = callocCheck((size_t)N * (size_t)Vs, sizeof(float));
            pthread_create(&th[t], NULL, fake_rank_main, &rk[t]);
        }
        for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
        /* Tolerances: the unsplit op sums float exponentials from cpu_expf (a few ulp) in one double sum;
         * the split one sums double exp() per rank and then across ranks: lse agrees to ~1e-6 absolute
         * (|lse| < 8), the loss (a sum of N lse - logit) to 1e-6 relative, and each dlogit (scale x p,
         * scale 1/8) to 1e-7 absolute. */
        for (int t = 0; t < T; t++) {
            CHECK(rk[t].rc == 0, "tp %d rank %d: %s", T, t, rk[t].err);
            CHECK(fabsf(rk[t].loss - loss) <= 1e-6f * fabsf(loss), "tp %d rank %d: loss %.9g vs %.9g", T, t, rk[t].loss,
                  loss);
            float dl = 0, dd = 0;
            for (int n = 0; n < N; n++) {
                dl = fmaxf(dl, fabsf(rk[t].lse[n] - lse[n]));
                for (int v = 0; v < Vs; v++) dd = fmaxf(dd, fabsf(rk[t].dlogits[n * Vs + v] - dlogits[n * V + t * Vs + v]));
            }
            CHECK(dl <= 1e-6f && dd <= 1e-7f, "tp %d rank %d: lse differs by %g, dlogits by %g", T, t, dl, dd);
            if (t == 0) printf("vocab-parallel CE, tp %d: loss %.9g vs %.9g, max lse diff %.3g, max dlogit diff %.3g\n",
                               T, rk[t].loss, loss, dl, dd);
            free((void*)rk[t].logits);
            free(rk[t].lse);
            free(rk[t].dlogits);
        }
        pthread_barrier_destroy(&g.bar);
    }
    /* a bad target is an error, not a crash */
    int bad[N];
    memcpy(bad, targets, sizeof bad);
    bad[2] = V;
    FakeGroup g1 = {.T = 1};
    pthread_barrier_init(&g1.bar, NULL, 1);
    FakeRank one = {.g = &g1, .t = 0, .logits = logits, .targets = bad, .N = N, .Vs = V, .V = V, .lse = lse,
                    .dlogits = dlogits};
    fake_rank_main(&one);
    CHECK(one.rc == -1 && strstr(one.err, "target 24 of row 2"), "bad target: rc %d, '%s'", one.rc, one.err);
    pthread_barrier_destroy(&g1.bar);
}

int main(int argc, char** argv) {
    const char* which = argc > 1 ? argv[1] : "all";
    int all = !strcmp(which, "all");
    if (all || !strcmp(which, "split")) test_split();
    if (all || !strcmp(which, "init")) test_init();
    if (all || !strcmp(which, "ce")) test_ce();
    if (fails) {
        fprintf(stderr, "test_tp %s: %d failure(s)\n", which, fails);
        return 1;
    }
    printf("test_tp %s: ok\n", which);
    return 0;
}
