/* test_tp.c — the tensor-parallel split without MPI (runtime/model/tp.h):
 *   split: every tensor of a small LLaVA has the split docs/parallel.md "Tensor parallelism" gives it, and for tp 2 and
 *          4 the ranks' ranges tile the split dimension exactly once (the fused ViT qkv by heads of
 *          each q | k | v part), and a column-parallel bias has exactly its weight's row ranges;
 *   init:  each shard initialised alone equals the slice of the one-process tensor, bitwise ("slices
 *          equal the whole");
 *   ce:    the vocabulary-parallel cross-entropy on 2 and 4 in-process ranks (threads with a barrier
 *          all-reduce) against the unsplit CPU op: loss, lse and every rank's dlogits columns;
 *   lm:    one LM block split over 2 and 4 in-process ranks (column-parallel q, k, v, gate, up with
 *          heads split, row-parallel o and down + all-reduce, whole norms) against the unsplit block:
 *          output, input gradient and every weight gradient (each rank's slice);
 *   vit:   the ViT tower (patch embed, 2 blocks, ln_f) split over 2 and 4 in-process ranks (fused qkv by
 *          heads of each part, row-parallel attn.out and fc2 with their bias added once) against the
 *          unsplit tower: output and every weight gradient. The ranks' weights are cut by tp_shard_ranges
 *          (the model's own cut), the expected gradient slices by this file's.
 *   proj:  the projector (projector.0 column-, projector.2 row-parallel, bias once) on 2 and 4 ranks
 *          against the unsplit one: output, input gradient, every weight gradient.
 *   embed: the vocabulary-parallel embedding (masked lookup + sum over ranks; backward into the owned
 *          rows) against the whole table, exactly (each output row is one rank's row plus zeros).
 *   marks: each rank's parameter table keeps the one-process table's params_keep_f32_compute marks (the CLIP
 *          position table's).
 * Usage: test_tp [split|marks|init|ce|lm|vit|proj|embed|vit_clip|proj_clip]   (no argument: all) */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/util.h"
#include "runtime/model/model.h"
#include "runtime/model/tp.h"
#include "text/lm.h"
#include "vision/vision.h"

#include "tests/support/check.h"

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
    /* A column-parallel layer's bias is split as its weight's rows (Megatron's ColumnParallelLinear): rank t's
     * ranges of X.bias are exactly its ranges of X.weight along dim 0, for tp 2 and 4. Tiling alone accepts a
     * fused qkv bias cut as one part (rank 0 holding q and half of k) while the weight is cut by head of each
     * part: the ranks would add the wrong bias rows. */
    int pairs = 0;
    for (int i = 0; i < st.params.n; i++) {
        const ParamSpec* b = &st.params.specs[i];
        size_t nl = strlen(b->name);
        if (nl < 5 || strcmp(b->name + nl - 5, ".bias") || tp_split_of(b->name) != TP_COLUMN) continue;
        char wname[256];
        snprintf(wname, sizeof wname, "%.*s.weight", (int)(nl - 5), b->name);
        int j = params_find(&st.params, wname);
        CHECK(j >= 0, "%s: a column-parallel bias without its weight %s", b->name, wname);
        if (j < 0) continue;
        const ParamSpec* w = &st.params.specs[j];
        CHECK(tp_split_of(w->name) == TP_COLUMN && w->shape[0] == b->shape[0], "%s: split %s, %lld rows; its bias %lld",
              w->name, tp_split_name(tp_split_of(w->name)), (long long)w->shape[0], (long long)b->shape[0]);
        for (int T = 2; T <= 4; T += 2)
            for (int t = 0; t < T; t++) {
                TpRange rw[TP_MAX_RANGES], rb[TP_MAX_RANGES];
                char err[256];
                int nw = tp_shard_ranges(w->name, w->ndim, w->shape, T, t, rw, err, sizeof err);
                int nb = tp_shard_ranges(b->name, b->ndim, b->shape, T, t, rb, err, sizeof err);
                int same = nw == nb && nw >= 1;
                for (int k = 0; same && k < nw; k++)
                    same = rw[k].dim == 0 && rb[k].dim == 0 && rw[k].offset == rb[k].offset && rw[k].length == rb[k].length;
                CHECK(same, "%s tp %d rank %d: %d range(s) from row %lld, but its weight's: %d from row %lld", b->name, T,
                      t, nb, nb > 0 ? (long long)rb[0].offset : -1LL, nw, nw > 0 ? (long long)rw[0].offset : -1LL);
            }
        pairs++;
    }
    CHECK(pairs == 2 * mc.Lv + 1, "column-parallel biases checked against their weights: %d", pairs);
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
    /* its bias likewise: heads 2, 3 of q, k and v (rows 16..31, 48..63, 80..95 of 96) */
    int64_t qkvb[1] = {3 * mc.Dv};
    n = tp_shard_ranges("vision.blocks.0.attn.qkv.bias", 1, qkvb, 2, 1, r, err, sizeof err);
    CHECK(n == 3 && r[0].dim == 0 && r[0].offset == 16 && r[1].offset == 48 && r[2].offset == 80 && r[0].length == 16 &&
              r[1].length == 16 && r[2].length == 16,
          "qkv bias rank 1 of 2: %d ranges from %lld", n, (long long)r[0].offset);
    int64_t odd[2] = {30, 32};
    CHECK(tp_shard_ranges("text.blocks.0.attn.q.weight", 2, odd, 4, 0, r, err, sizeof err) == -1 && strstr(err, "tp = 4"),
          "30 rows split 4 ways accepted: %s", err);
    stage_free(&st);
}

/* marks: a tensor's registration marks survive the TP table: each rank's table (model_params_register_tp, tp 2
 * and 4) has every tensor's params_keep_f32_compute mark as the one-process table has it, the CLIP tower's
 * vision.pos_embed.weight marked (stage_register dropped the mark: a bf16 compute copy read as f32 words, loss
 * NaN in a CLIP bf16 run at tp 2 on CUDA), and every params_mark_gemm_bias mark (dropped, a bias's f32 compute copy
 * would be read as 2-byte words by the bf16 tables' GEMMs). */
static void test_marks(void) {
    ModelConfig mc = small_config();
    mc.vision_arch = VIT_ARCH_CLIP;
    mc.vision_image_size = 8; /* a 4 x 4 grid at patch 2 */
    mc.vision_feature_layer = -1;
    ParamTable whole;
    model_params_register_tp(&mc, 0, mc.Lt, 1, 0, &whole);
    int pos = params_find(&whole, "vision.pos_embed.weight");
    CHECK(pos >= 0 && whole.specs[pos].f32_compute, "one process: vision.pos_embed.weight not f32-compute marked");
    int marked = 0, bias_marked = 0, bias_whole = 0, tab_marked = 0, tab_whole = 0;
    for (int i = 0; i < whole.n; i++) bias_whole += whole.specs[i].gemm_bias, tab_whole += whole.specs[i].act_table;
    /* CLIP's gather tables (params_mark_act_table: 2-byte compute copies on a tower with 2-byte activations) */
    CHECK(tab_whole == 2 && whole.specs[pos].act_table, "one process: %d gather-table marked tensors, expected 2 (the "
          "class and position embeddings)", tab_whole);
    /* the GEMM biases (params_mark_gemm_bias: 2-byte compute copies where Backend.weight_dtype is): the tower's
     * qkv / out / fc1 / fc2 per block and the projector's two; none of the norms' */
    CHECK(bias_whole == 4 * mc.Lv + 2, "one process: %d GEMM-bias marked tensors, expected %d", bias_whole, 4 * mc.Lv + 2);
    for (int T = 2; T <= 4; T += 2)
        for (int t = 0; t < T; t++) {
            ParamTable pt;
            model_params_register_tp(&mc, 0, mc.Lt, T, t, &pt);
            CHECK(pt.n == whole.n, "tp %d rank %d: %d tensors, one process %d", T, t, pt.n, whole.n);
            for (int i = 0; i < pt.n; i++) {
                int w = params_find(&whole, pt.specs[i].name);
                CHECK(w >= 0 && pt.specs[i].f32_compute == whole.specs[w].f32_compute,
                      "tp %d rank %d: %s f32-compute mark %d, one process %d", T, t, pt.specs[i].name,
                      pt.specs[i].f32_compute, w >= 0 ? whole.specs[w].f32_compute : -1);
                marked += pt.specs[i].f32_compute;
                CHECK(w >= 0 && pt.specs[i].gemm_bias == whole.specs[w].gemm_bias,
                      "tp %d rank %d: %s GEMM-bias mark %d, one process %d", T, t, pt.specs[i].name, pt.specs[i].gemm_bias,
                      w >= 0 ? whole.specs[w].gemm_bias : -1);
                bias_marked += pt.specs[i].gemm_bias;
                CHECK(w >= 0 && pt.specs[i].act_table == whole.specs[w].act_table,
                      "tp %d rank %d: %s gather-table mark %d, one process %d", T, t, pt.specs[i].name,
                      pt.specs[i].act_table, w >= 0 ? whole.specs[w].act_table : -1);
                tab_marked += pt.specs[i].act_table;
            }
            params_free(&pt);
        }
    CHECK(marked == 6, "f32-compute marked tensors over the 6 rank tables: %d, expected 6", marked);
    CHECK(tab_marked == 12, "gather-table marked tensors over the 6 rank tables: %d, expected 12", tab_marked);
    CHECK(bias_marked == 6 * bias_whole, "GEMM-bias marked tensors over the 6 rank tables: %d, expected %d", bias_marked,
          6 * bias_whole);
    params_free(&whole);
    printf("TP tables, tp 2 and 4: every tensor's f32-compute and GEMM-bias marks as the one-process table's (the CLIP "
           "position table's, %d biases)\n", bias_whole);
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
    /* a table of slices (params_add_slice + params_alloc): every tensor equals the shard init above */
    for (int T = 2; T <= 4; T += 2) {
        int t = T - 1;
        ParamTable sh;
        params_init(&sh);
        for (int i = 0; i < st.params.n; i++) {
            const ParamSpec* s = &st.params.specs[i];
            TpRange r[TP_MAX_RANGES];
            char err[256];
            int n = tp_shard_ranges(s->name, s->ndim, s->shape, T, t, r, err, sizeof err);
            if (n < 1 || tp_split_of(s->name) == TP_REPLICATED) {
                params_add(&sh, s->name, s->ndim, s->shape, s->init, s->init_std, s->decay);
                continue;
            }
            ParamSlice sl = {.dim = r[0].dim, .n = n};
            for (int k = 0; k < n; k++) sl.off[k] = r[k].offset, sl.len[k] = r[k].length;
            params_add_slice(&sh, s->name, s->ndim, s->shape, &sl, s->init, s->init_std, s->decay);
        }
        params_alloc(&sh, &backend_cpu, mc.seed);
        int bad = 0;
        for (int i = 0; i < sh.n; i++) {
            const ParamSpec* s = &sh.specs[i];
            const ParamSpec* whole = &st.params.specs[params_find(&st.params, s->name)];
            float* want = mallocCheck(s->numel * sizeof(float));
            if (s->slice.dim < 0) {
                memcpy(want, params_data(&st.params, params_find(&st.params, s->name)), s->numel * sizeof(float));
            } else if (s->init != PARAM_INIT_NORMAL) { /* biases: zeros (ones for norms, never split) */
                for (size_t e = 0; e < s->numel; e++) want[e] = s->init == PARAM_INIT_ONES ? 1.0f : 0.0f;
            } else {
                TpRange r[TP_MAX_RANGES];
                char err[256];
                int n = tp_shard_ranges(s->name, whole->ndim, whole->shape, T, t, r, err, sizeof err);
                tp_init_normal_shard(want, s->name, whole->ndim, whole->shape, r, n, mc.seed, s->init_std);
            }
            if (memcmp(want, params_data(&sh, i), s->numel * sizeof(float))) {
                CHECK(0, "params_add_slice: %s (tp %d rank %d) differs from its slice of the whole", s->name, T, t);
                bad++;
            }
            free(want);
        }
        CHECK(sh.total < st.params.total, "the sliced table holds %zu floats, the whole %zu", sh.total, st.params.total);
        params_free(&sh);
    }
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
    backend_cpu.ops->crossentropy_forward(&backend_cpu, &loss, lse, buf_f32(logits), targets, N, V);
    backend_cpu.ops->crossentropy_backward(&backend_cpu, buf_f32(dlogits), buf_f32(logits), lse, targets, 0.125f, N, V);
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

/* ---- one LM block over in-process TP ranks ---- */
enum { LT = 11, LD = 32, LH = 4, LF = 48 };
typedef struct {
    FakeGroup* g;
    int t;
    LmConfig c;
    LmBlockW w, dw;
    float xout[LT * LD], dxin[LT * LD];
} LmRank;

static int fake_reduce_f32(void* ctx, float* buf, size_t n) {
    LmRank* me = ctx;
    FakeGroup* g = me->g;
    double* tmp = mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) tmp[i] = buf[i];
    FakeRank fr = {.g = g, .t = me->t};
    char err[64];
    int rc = fake_reduce(&fr, tmp, n, 0, err, sizeof err);
    for (size_t i = 0; i < n; i++) buf[i] = (float)tmp[i];
    free(tmp);
    return rc;
}

static const int32_t lm_cu[3] = {0, 5, LT};
static const int32_t lm_pos[LT] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5};
static float lm_x[LT * LD], lm_dy[LT * LD];

/* a block's tensors, f32 host buffers, as LmBlockW */
static LmBlockW lm_w(float* n1, float* q, float* k, float* v, float* o, float* n2, float* gt, float* up, float* dn,
                     float* qb, float* kb, float* vb, float* ob) {
    return (LmBlockW){.norm1_w = n1, .q_w = buf_f32(q), .k_w = buf_f32(k), .v_w = buf_f32(v), .o_w = buf_f32(o),
                      .norm2_w = n2, .gate_w = buf_f32(gt), .up_w = buf_f32(up), .down_w = buf_f32(dn),
                      .q_b = buf_f32(qb), .k_b = buf_f32(kb), .v_b = buf_f32(vb), .o_b = buf_f32(ob)}; /* no LoRA */
}

/* forward, B and W of one block with weights w (shapes from c), into xout, dxin and dw */
static void lm_run(const LmConfig* c, const LmBlockW* w, LmBlockW* dw, float* xout, float* dxin) {
    Arena ar;
    arena_init(&ar, "test_tp lm", 1 << 22);
    LmBlockActs a;
    LmBlockGrads gr;
    LmScratch s;
    lm_block_acts_layout(&a, &ar, c, LT);
    lm_block_grads_layout(&gr, &ar, c, LT);
    lm_scratch_layout(&s, &ar, c, LT);
    LmSeq seq = {.T = LT, .S = 2, .cu_seqlens = lm_cu, .pos = lm_pos};
    lm_block_forward(&backend_cpu, c, w, &a, &s, &seq, buf_f32(lm_x), buf_f32(xout));
    lm_block_backward_input(&backend_cpu, c, w, &a, &gr, &s, &seq, buf_f32(lm_x), lm_dy, dxin);
    lm_block_backward_weight(&backend_cpu, c, w, dw, &a, &gr, &seq, buf_f32(lm_x), lm_dy);
    arena_free(&ar);
}

static void* lm_rank_main(void* arg) {
    LmRank* me = arg;
    lm_run(&me->c, &me->w, &me->dw, me->xout, me->dxin);
    return NULL;
}

/* rows [r0, r0 + n) of a (rows, cols) matrix, or columns [c0, c0 + n) when by_col */
static float* lm_slice(const float* m, int rows, int cols, int by_col, int off, int n) {
    float* out = mallocCheck(sizeof(float) * (size_t)(by_col ? rows * n : n * cols));
    for (int i = 0; i < (by_col ? rows : n); i++)
        for (int j = 0; j < (by_col ? n : cols); j++)
            out[i * (by_col ? n : cols) + j] = by_col ? m[i * cols + off + j] : m[(off + i) * cols + j];
    return out;
}

static float lm_maxabs(const float* a, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i]));
    return m;
}

/* One LM block under TP vs unsplit: kv = key/value heads (grouped-query when < LH), bias = q/k/v and o biases,
 * llama3 = Llama-3's RoPE scaling. */
static void test_lm_variant(int kv, int bias, int llama3) {
    uint64_t s = 777 + 10 * (uint64_t)kv + 3 * (uint64_t)bias + (uint64_t)llama3;
#define RND() (s = s * 6364136223846793005ull + 1442695040888963407ull, (float)((double)(s >> 11) / 9007199254740992.0 - 0.5))
    LmConfig c = {.D = LD, .L = 2, .H = LH, .F = LF, .V = 40, .init_std = 0.02f, .rms_eps = 1e-5, .rope = {.theta = 10000.0},
                  .Hkv = kv, .qkv_bias = bias, .o_bias = bias};
    if (llama3) c.rope = (RopeFreq){.theta = 500000.0, .llama3 = 1, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                                    .original_max_pos = 16};
    const int KD = kv * (LD / LH); /* k, v rows */
    /* whole weights (norms near 1) */
    float n1[LD], n2[LD], q[LD * LD], k[LD * LD], v[LD * LD], o[LD * LD], gt[LF * LD], up[LF * LD], dn[LD * LF];
    float qb[LD], kb[LD], vb[LD], ob[LD];
    for (int i = 0; i < LD; i++) n1[i] = 1.0f + 0.2f * RND(), n2[i] = 1.0f + 0.2f * RND();
    for (int i = 0; i < LD; i++) qb[i] = 0.5f * RND(), kb[i] = 0.5f * RND(), vb[i] = 0.5f * RND(), ob[i] = 0.5f * RND();
    float* mats[] = {q, k, v, o};
    for (int m = 0; m < 4; m++)
        for (int i = 0; i < LD * LD; i++) mats[m][i] = 0.4f * RND();
    for (int i = 0; i < LF * LD; i++) gt[i] = 0.4f * RND(), up[i] = 0.4f * RND(), dn[i] = 0.4f * RND();
    for (int i = 0; i < LT * LD; i++) lm_x[i] = 2.0f * RND(), lm_dy[i] = RND();
#undef RND
    LmBlockW w = lm_w(n1, q, k, v, o, n2, gt, up, dn, bias ? qb : NULL, bias ? kb : NULL, bias ? vb : NULL, bias ? ob : NULL);
    LmBlockW dw = lm_w(callocCheck(LD, 4), callocCheck(LD * LD, 4), callocCheck(KD * LD, 4), callocCheck(KD * LD, 4),
                   callocCheck(LD * LD, 4), callocCheck(LD, 4), callocCheck(LF * LD, 4), callocCheck(LF * LD, 4),
                   callocCheck(LD * LF, 4), NULL, NULL, NULL, NULL);
    if (bias)
        dw.q_b = buf_f32(callocCheck(LD, 4)), dw.k_b = buf_f32(callocCheck(KD, 4)), dw.v_b = buf_f32(callocCheck(KD, 4)),
        dw.o_b = buf_f32(callocCheck(LD, 4));
    static float xout[LT * LD], dxin[LT * LD];
    lm_run(&c, &w, &dw, xout, dxin);
    for (int T = 2; T <= 4; T *= 2) {
        if (kv % T) continue; /* TP splits by key/value head */
        int Dq = LD / T, Fl = LF / T, Dk = KD / T;
        FakeGroup g = {.T = T};
        pthread_barrier_init(&g.bar, NULL, (unsigned)T);
        LmRank* rk = callocCheck((size_t)T, sizeof(LmRank));
        pthread_t th[4];
        for (int t = 0; t < T; t++) {
            LmRank* r = &rk[t];
            r->g = &g, r->t = t;
            r->c = c;
            r->c.tp = T, r->c.tp_rank = t, r->c.tp_reduce = fake_reduce_f32, r->c.tp_ctx = r;
            r->w = lm_w(n1,
                              lm_slice(q, LD, LD, 0, t * Dq, Dq),
                              lm_slice(k, KD, LD, 0, t * Dk, Dk),
                              lm_slice(v, KD, LD, 0, t * Dk, Dk),
                              lm_slice(o, LD, LD, 1, t * Dq, Dq),
                              n2,
                              lm_slice(gt, LF, LD, 0, t * Fl, Fl),
                              lm_slice(up, LF, LD, 0, t * Fl, Fl),
                              lm_slice(dn, LD, LF, 1, t * Fl, Fl),
                              bias ? qb + t * Dq : NULL, bias ? kb + t * Dk : NULL, bias ? vb + t * Dk : NULL,
                              bias ? ob : NULL);
            r->dw = lm_w(callocCheck(LD, 4),       callocCheck(Dq * LD, 4), callocCheck(Dk * LD, 4),
                               callocCheck(Dk * LD, 4),  callocCheck(LD * Dq, 4), callocCheck(LD, 4),
                               callocCheck(Fl * LD, 4),  callocCheck(Fl * LD, 4), callocCheck(LD * Fl, 4),
                               NULL, NULL, NULL, NULL);
            if (bias)
                r->dw.q_b = buf_f32(callocCheck(Dq, 4)), r->dw.k_b = buf_f32(callocCheck(Dk, 4)),
                r->dw.v_b = buf_f32(callocCheck(Dk, 4)), r->dw.o_b = buf_f32(callocCheck(LD, 4));
            pthread_create(&th[t], NULL, lm_rank_main, r);
        }
        for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
        /* Tolerance: TP reorders fp32 sums (o and down: the heads' / hidden units' partial products added
         * across ranks; the norms' input gradients likewise), reductions of at most F = 48 terms: error
         * <= 48 x 2^-24 x the sum of |terms| ~ 3e-6 of the magnitudes involved; bound 1e-5 x the largest
         * |value| of each reference tensor. A wrong split (a head or a hidden unit lost or counted twice,
         * a query head reading another group's key/value head, a row-parallel bias added on every rank)
         * is off by O(1) of that scale. */
        double worst = 0;
        for (int t = 0; t < T; t++) {
            LmRank* r = &rk[t];
            struct {
                const char* what;
                float *got, *want;
                int n;
                int free_want;
            } cmp[] = {
                {"xout", r->xout, xout, LT * LD, 0},
                {"dxin", r->dxin, dxin, LT * LD, 0},
                {"d norm1", r->dw.norm1_w, dw.norm1_w, LD, 0},
                {"d norm2", r->dw.norm2_w, dw.norm2_w, LD, 0},
                {"d q", buf_f32p(r->dw.q_w), lm_slice(buf_f32p(dw.q_w), LD, LD, 0, t * Dq, Dq), Dq * LD, 1},
                {"d k", buf_f32p(r->dw.k_w), lm_slice(buf_f32p(dw.k_w), KD, LD, 0, t * Dk, Dk), Dk * LD, 1},
                {"d v", buf_f32p(r->dw.v_w), lm_slice(buf_f32p(dw.v_w), KD, LD, 0, t * Dk, Dk), Dk * LD, 1},
                {"d o", buf_f32p(r->dw.o_w), lm_slice(buf_f32p(dw.o_w), LD, LD, 1, t * Dq, Dq), LD * Dq, 1},
                {"d gate", buf_f32p(r->dw.gate_w), lm_slice(buf_f32p(dw.gate_w), LF, LD, 0, t * Fl, Fl), Fl * LD, 1},
                {"d up", buf_f32p(r->dw.up_w), lm_slice(buf_f32p(dw.up_w), LF, LD, 0, t * Fl, Fl), Fl * LD, 1},
                {"d down", buf_f32p(r->dw.down_w), lm_slice(buf_f32p(dw.down_w), LD, LF, 1, t * Fl, Fl), LD * Fl, 1},
                {"d q bias", buf_f32p(r->dw.q_b), bias ? buf_f32p(dw.q_b) + t * Dq : NULL, bias ? Dq : 0, 0},
                {"d k bias", buf_f32p(r->dw.k_b), bias ? buf_f32p(dw.k_b) + t * Dk : NULL, bias ? Dk : 0, 0},
                {"d v bias", buf_f32p(r->dw.v_b), bias ? buf_f32p(dw.v_b) + t * Dk : NULL, bias ? Dk : 0, 0},
                {"d o bias", buf_f32p(r->dw.o_b), bias ? buf_f32p(dw.o_b) : NULL, bias ? LD : 0, 0},
            };
            for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
                if (cmp[i].n == 0) continue;
                float scale = lm_maxabs(cmp[i].want, (size_t)cmp[i].n), diff = 0;
                for (int e = 0; e < cmp[i].n; e++) diff = fmaxf(diff, fabsf(cmp[i].got[e] - cmp[i].want[e]));
                CHECK(scale > 0 && diff <= 1e-5f * scale, "lm block (kv %d bias %d llama3 %d) tp %d rank %d: %s differs by %g (scale %g)",
                      kv, bias, llama3, T, t, cmp[i].what, diff, scale);
                if (scale > 0 && diff / scale > worst) worst = diff / scale;
                if (cmp[i].free_want) free(cmp[i].want);
            }
            float* own[] = {buf_f32p(r->w.q_w),    buf_f32p(r->w.k_w),  buf_f32p(r->w.v_w),   buf_f32p(r->w.o_w),
                            buf_f32p(r->w.gate_w), buf_f32p(r->w.up_w), buf_f32p(r->w.down_w)};
            for (int i = 0; i < 7; i++) free(own[i]);
            float* g2[] = {r->dw.norm1_w,         buf_f32p(r->dw.q_w),    buf_f32p(r->dw.k_w),  buf_f32p(r->dw.v_w),
                           buf_f32p(r->dw.o_w),   r->dw.norm2_w,          buf_f32p(r->dw.gate_w), buf_f32p(r->dw.up_w),
                           buf_f32p(r->dw.down_w), buf_f32p(r->dw.q_b),   buf_f32p(r->dw.k_b),  buf_f32p(r->dw.v_b),
                           buf_f32p(r->dw.o_b)};
            for (int i = 0; i < 13; i++) free(g2[i]);
        }
        printf("LM block (kv heads %d/%d%s%s), tp %d: output, input gradient and weight gradients within %.3g of "
               "each tensor's scale\n", kv, LH, bias ? ", q/k/v/o biases" : "", llama3 ? ", llama3 RoPE" : "", T, worst);
        free(rk);
        pthread_barrier_destroy(&g.bar);
    }
    float* g1[] = {dw.norm1_w,          buf_f32p(dw.q_w),    buf_f32p(dw.k_w),  buf_f32p(dw.v_w),  buf_f32p(dw.o_w),
                   dw.norm2_w,          buf_f32p(dw.gate_w), buf_f32p(dw.up_w), buf_f32p(dw.down_w), buf_f32p(dw.q_b),
                   buf_f32p(dw.k_b),    buf_f32p(dw.v_b),    buf_f32p(dw.o_b)};
    for (int i = 0; i < 13; i++) free(g1[i]);
}

static void test_lm(void) {
    test_lm_variant(LH, 0, 0);
    test_lm_variant(2, 1, 1); /* grouped-query (2 query heads per key/value head), biases, Llama-3 RoPE */
    test_lm_variant(LH, 1, 0); /* biases under tp 2 and 4 (o's added once) */
}

/* ---- the ViT tower over in-process TP ranks ---- */
enum { VN = 15, VD = 32, VH = 4, VL = 2, VP = 2 };
static const int32_t vit_cu[3] = {0, 6, VN};
static int32_t vit_prow[VN], vit_pcol[VN];
static float vit_px[VN * 3 * VP * VP], vit_dv[VN * VD];

typedef struct {
    FakeGroup* g;
    int t;
    VitConfig c;
    VitW w, dw;
    float vout[VN * VD];
} VitRank;

static int fake_reduce_vit(void* ctx, float* buf, size_t n) {
    VitRank* me = ctx;
    LmRank tmp = {.g = me->g, .t = me->t};
    return fake_reduce_f32(&tmp, buf, n);
}

static void vit_run(const VitConfig* c, const VitW* w, const VitW* dw, float* vout) {
    Arena ar;
    arena_init(&ar, "test_tp vit", 1 << 22);
    VitActs a;
    memset(&a, 0, sizeof a);
    vit_acts_layout(&a, &ar, c, VN, 0, 1);
    vit_forward(&backend_cpu, c, w, &a, buf_f32(vit_px), vit_cu, 2, vit_prow, vit_pcol, VN);
    memcpy(vout, buf_f32p(a.vout), sizeof(float) * VN * VD);
    memcpy(a.dvout, vit_dv, sizeof vit_dv);
    vit_backward(&backend_cpu, c, w, dw, &a);
    vit_acts_free_tables(&a);
    arena_free(&ar);
}

static void* vit_rank_main(void* arg) {
    VitRank* me = arg;
    vit_run(&me->c, &me->w, &me->dw, me->vout);
    return NULL;
}

/* rows of each of the 3 parts (part rows D each, cols wide): [k D + t n, k D + (t+1) n) stacked */
static float* slice_qkv(const float* m, int D, int cols, int t, int n) {
    float* out = mallocCheck(sizeof(float) * 3 * (size_t)n * (size_t)cols);
    for (int k = 0; k < 3; k++) memcpy(out + (size_t)k * n * cols, m + ((size_t)k * D + (size_t)t * n) * cols,
                                       sizeof(float) * (size_t)n * (size_t)cols);
    return out;
}

/* Rank t of T's shard of the global tensor `name` (rows x cols; cols 0: a vector of rows) as the model cuts
 * it: the ranges of tp_shard_ranges, the helper the model's parameter tables and checkpoints use, stored
 * concatenated along the split dimension. The TP tower then runs on exactly the slices the trainer gives it,
 * so a wrong cut (the fused qkv's bias as one part) shows in its output; `n_out` gets the shard's numel. */
static float* tp_slice(const char* name, const float* m, int rows, int cols, int T, int t, int* n_out) {
    int ndim = cols ? 2 : 1;
    int64_t shape[2] = {rows, cols ? cols : 1}, sh[2];
    TpRange r[TP_MAX_RANGES];
    char err[256];
    int n = tp_shard_ranges(name, ndim, shape, T, t, r, err, sizeof err);
    if (n < 1) rr_die("%s: %s", name, err);
    tp_shard_shape(r, n, ndim, shape, sh);
    int C = (int)shape[1], oc = ndim == 2 ? (int)sh[1] : 1;
    float* out = mallocCheck(sizeof(float) * (size_t)sh[0] * (size_t)oc);
    size_t o = 0;
    if (r[0].dim == 0) { /* whole rows */
        for (int k = 0; k < n; k++)
            for (int64_t i = r[k].offset; i < r[k].offset + r[k].length; i++)
                for (int j = 0; j < C; j++) out[o++] = m[(size_t)i * C + j];
    } else { /* each row's columns of the ranges */
        for (int i = 0; i < rows; i++)
            for (int k = 0; k < n; k++)
                for (int64_t j = r[k].offset; j < r[k].offset + r[k].length; j++) out[o++] = m[(size_t)i * C + j];
    }
    *n_out = (int)o;
    return out;
}

/* vit_clip / proj_clip: the CLIP tower (class token, position taps: the 3 x 3 image on the checkpoint's grid,
 * the 2 x 3 one interpolated; QuickGELU) and the exact-GELU projector, split the same way */
static int g_clip = 0;

static void test_vit(void) {
    VitConfig c = {.patch = VP, .D = VD, .L = VL, .H = VH, .Dt = 32, .init_std = 0.02f};
    if (g_clip) c.arch = VIT_ARCH_CLIP, c.grid = 3, c.L_run = VL, c.min_patches = 1;
    for (int i = 0; i < VN; i++) {
        int img = i >= 6, j = img ? i - 6 : i, gw = 3; /* 2 x 3 and 3 x 3 grids */
        vit_prow[i] = j / gw, vit_pcol[i] = j % gw;
    }
    uint64_t s = 4242;
#define RND() (s = s * 6364136223846793005ull + 1442695040888963407ull, (float)((double)(s >> 11) / 9007199254740992.0 - 0.5))
    for (size_t i = 0; i < sizeof vit_px / 4; i++) vit_px[i] = 2.0f * RND();
    for (size_t i = 0; i < sizeof vit_dv / 4; i++) vit_dv[i] = RND();
    ParamTable pt;
    params_init(&pt);
    vit_params_add(&pt, &c);
    params_alloc(&pt, &backend_cpu, 5);
    for (size_t i = 0; i < pt.total; i++) pt.data[i] += 0.3f * RND(); /* biases and norms away from 0 and 1 */
#undef RND
    VitW w, g;
    vit_weights_point(&w, &pt, &c, 0);
    vit_weights_point(&g, &pt, &c, 1);
    static float vout[VN * VD];
    vit_run(&c, &w, &g, vout);
    int D = VD;
    for (int T = 2; T <= 4; T *= 2) {
        int Dq = D / T, Dm = 4 * D / T;
        FakeGroup fg = {.T = T};
        pthread_barrier_init(&fg.bar, NULL, (unsigned)T);
        VitRank* rk = callocCheck((size_t)T, sizeof(VitRank));
        pthread_t th[4];
        for (int t = 0; t < T; t++) {
            VitRank* r = &rk[t];
            r->g = &fg, r->t = t, r->c = c;
            r->c.tp = T, r->c.tp_rank = t, r->c.tp_reduce = fake_reduce_vit, r->c.tp_ctx = r;
            r->w = w; /* patch embed, ln_f: whole */
            r->w.blocks = callocCheck(VL, sizeof(VitBlockW));
            r->dw.patch_w = buf_f32(callocCheck((size_t)D * 3 * VP * VP, 4));
            if (g_clip) {
                r->dw.cls = buf_f32(callocCheck((size_t)D, 4)), r->dw.pos = buf_f32(callocCheck((size_t)D * 10, 4));
                r->dw.pre_w = callocCheck((size_t)D, 4), r->dw.pre_b = callocCheck((size_t)D, 4);
            } else {
                r->dw.patch_b = buf_f32(callocCheck((size_t)D, 4));
                r->dw.lnf_w = callocCheck((size_t)D, 4), r->dw.lnf_b = callocCheck((size_t)D, 4);
            }
            r->dw.blocks = callocCheck(VL, sizeof(VitBlockW));
            for (int l = 0; l < VL; l++) {
                const VitBlockW* b = &w.blocks[l];
                char nm[6][64];
                for (int k = 0; k < 6; k++)
                    snprintf(nm[k], sizeof nm[k], "vision.blocks.%d.%s", l,
                             (const char*[]){"attn.qkv.weight", "attn.qkv.bias", "attn.out.weight", "mlp.fc1.weight",
                                             "mlp.fc1.bias", "mlp.fc2.weight"}[k]);
                int ne;
                r->w.blocks[l] = (VitBlockW){b->ln1_w, b->ln1_b, buf_f32(tp_slice(nm[0], buf_f32p(b->qkv_w), 3 * D, D, T, t, &ne)),
                                             buf_f32(tp_slice(nm[1], buf_f32p(b->qkv_b), 3 * D, 0, T, t, &ne)),
                                             buf_f32(tp_slice(nm[2], buf_f32p(b->out_w), D, D, T, t, &ne)), b->out_b, b->ln2_w, b->ln2_b,
                                             buf_f32(tp_slice(nm[3], buf_f32p(b->fc1_w), 4 * D, D, T, t, &ne)),
                                             buf_f32(tp_slice(nm[4], buf_f32p(b->fc1_b), 4 * D, 0, T, t, &ne)),
                                             buf_f32(tp_slice(nm[5], buf_f32p(b->fc2_w), D, 4 * D, T, t, &ne)), b->fc2_b, {{0}}, {{0}}};
                r->dw.blocks[l] = (VitBlockW){callocCheck(D, 4),                    callocCheck(D, 4),
                                              buf_f32(callocCheck(3 * Dq * D, 4)), buf_f32(callocCheck(3 * Dq, 4)),
                                              buf_f32(callocCheck(D * Dq, 4)),     buf_f32(callocCheck(D, 4)),
                                              callocCheck(D, 4),                    callocCheck(D, 4),
                                              buf_f32(callocCheck(Dm * D, 4)),     buf_f32(callocCheck(Dm, 4)),
                                              buf_f32(callocCheck(D * Dm, 4)),     buf_f32(callocCheck(D, 4)), {{0}}, {{0}}};
            }
            pthread_create(&th[t], NULL, vit_rank_main, r);
        }
        for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
        /* Tolerance as for the LM block (TP reorders fp32 sums of at most 4D = 128 terms; LayerNorm and
         * GELU are the same ops on whole or equal inputs): 1e-5 of each reference tensor's scale. */
        double worst = 0;
        for (int t = 0; t < T; t++) {
            VitRank* r = &rk[t];
            struct {
                const char* what;
                const float *got, *want;
                int n, own;
            } cmp[6 + 4 + 12 * VL];
            int nc = 0;
#define CMP(wh, gp, wp, nn, ow) cmp[nc++] = (typeof(cmp[0])){wh, gp, wp, nn, ow}
            CMP("vout", r->vout, vout, VN * D, 0);
            CMP("d patch_w", buf_f32p(r->dw.patch_w), buf_f32p(g.patch_w), D * 3 * VP * VP, 0);
            if (g_clip) {
                CMP("d class_embedding", buf_f32p(r->dw.cls), buf_f32p(g.cls), D, 0);
                CMP("d pos_embed", buf_f32p(r->dw.pos), buf_f32p(g.pos), D * 10, 0);
                CMP("d pre_ln_w", r->dw.pre_w, g.pre_w, D, 0);
                CMP("d pre_ln_b", r->dw.pre_b, g.pre_b, D, 0);
            } else {
                CMP("d patch_b", buf_f32p(r->dw.patch_b), buf_f32p(g.patch_b), D, 0);
                CMP("d lnf_w", r->dw.lnf_w, g.lnf_w, D, 0);
            }
            for (int l = 0; l < VL; l++) {
                const VitBlockW *a = &r->dw.blocks[l], *b = &g.blocks[l];
                CMP("d ln1_w", a->ln1_w, b->ln1_w, D, 0);
                CMP("d ln1_b", a->ln1_b, b->ln1_b, D, 0);
                /* the expected gradient slices: this file's own cut (per q | k | v part, heads [t Dq, (t+1) Dq)
                 * of each; rows or columns [t Dm, (t+1) Dm)), independent of tp_shard_ranges, which cut the
                 * weights above: the two must agree */
                CMP("d qkv_w", buf_f32p(a->qkv_w), slice_qkv(buf_f32p(b->qkv_w), D, D, t, Dq), 3 * Dq * D, 1);
                CMP("d qkv_b", buf_f32p(a->qkv_b), slice_qkv(buf_f32p(b->qkv_b), D, 1, t, Dq), 3 * Dq, 1);
                CMP("d out_w", buf_f32p(a->out_w), lm_slice(buf_f32p(b->out_w), D, D, 1, t * Dq, Dq), D * Dq, 1);
                CMP("d out_b", buf_f32p(a->out_b), buf_f32p(b->out_b), D, 0);
                CMP("d ln2_w", a->ln2_w, b->ln2_w, D, 0);
                CMP("d fc1_w", buf_f32p(a->fc1_w), lm_slice(buf_f32p(b->fc1_w), 4 * D, D, 0, t * Dm, Dm), Dm * D, 1);
                CMP("d fc1_b", buf_f32p(a->fc1_b), lm_slice(buf_f32p(b->fc1_b), 4 * D, 1, 0, t * Dm, Dm), Dm, 1);
                CMP("d fc2_w", buf_f32p(a->fc2_w), lm_slice(buf_f32p(b->fc2_w), D, 4 * D, 1, t * Dm, Dm), D * Dm, 1);
                CMP("d fc2_b", buf_f32p(a->fc2_b), buf_f32p(b->fc2_b), D, 0);
            }
#undef CMP
            for (int i = 0; i < nc; i++) {
                float scale = lm_maxabs(cmp[i].want, (size_t)cmp[i].n), diff = 0;
                for (int e = 0; e < cmp[i].n; e++) diff = fmaxf(diff, fabsf(cmp[i].got[e] - cmp[i].want[e]));
                CHECK(scale > 0 && diff <= 1e-5f * scale, "vit tp %d rank %d: %s differs by %g (scale %g)", T, t,
                      cmp[i].what, diff, scale);
                if (scale > 0 && diff / scale > worst) worst = diff / scale;
                if (cmp[i].own) free((void*)cmp[i].want);
            }
        }
        printf("%s tower, tp %d: output and weight gradients within %.3g of each tensor's scale\n", g_clip ? "CLIP" : "ViT", T, worst);
        pthread_barrier_destroy(&fg.bar);
        for (int t = 0; t < T; t++) { /* each rank's slices and gradients (the sanitizer build checks leaks) */
            VitRank* r = &rk[t];
            for (int l = 0; l < VL; l++) {
                VitBlockW *a = &r->w.blocks[l], *d = &r->dw.blocks[l];
                float* own[] = {buf_f32p(a->qkv_w), buf_f32p(a->qkv_b), buf_f32p(a->out_w), buf_f32p(a->fc1_w),
                                buf_f32p(a->fc1_b), buf_f32p(a->fc2_w)};
                for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) free(own[k]);
                float* grads[] = {d->ln1_w,           d->ln1_b,           buf_f32p(d->qkv_w), buf_f32p(d->qkv_b),
                                  buf_f32p(d->out_w), buf_f32p(d->out_b), d->ln2_w,           d->ln2_b,
                                  buf_f32p(d->fc1_w), buf_f32p(d->fc1_b), buf_f32p(d->fc2_w), buf_f32p(d->fc2_b)};
                for (size_t k = 0; k < sizeof grads / sizeof grads[0]; k++) free(grads[k]);
            }
            free(r->w.blocks), free(r->dw.blocks);
            free(r->dw.patch_w.p), free(r->dw.patch_b.p), free(r->dw.lnf_w), free(r->dw.lnf_b);
        }
        free(rk);
    }
    vit_weights_free(&w);
    vit_weights_free(&g);
    params_free(&pt);
}

/* ---- the projector over in-process TP ranks ---- */
enum { PN = 7, PDV = 16, PDT = 32 };
typedef struct {
    FakeGroup* g;
    int t;
    VitConfig c;
    ProjW w, dw;
    float out[PN * PDT], dvin[PN * PDV];
} ProjRank;
static float proj_vin[PN * PDV], proj_dout[PN * PDT];

static int fake_reduce_proj(void* ctx, float* buf, size_t n) {
    ProjRank* me = ctx;
    LmRank tmp = {.g = me->g, .t = me->t};
    return fake_reduce_f32(&tmp, buf, n);
}

static void proj_run(const VitConfig* c, const ProjW* w, const ProjW* dw, float* out, float* dvin) {
    Arena ar;
    arena_init(&ar, "test_tp proj", 1 << 20);
    ProjActs a;
    projector_acts_layout(&a, &ar, c, PN);
    projector_forward(&backend_cpu, c, w, &a, buf_f32(proj_vin), PN);
    memcpy(out, a.out.p, sizeof(float) * PN * PDT);
    memcpy(a.dout, proj_dout, sizeof proj_dout);
    projector_backward_input(&backend_cpu, c, w, &a, PN, 1);
    projector_backward_weight(&backend_cpu, c, w, dw, &a, PN);
    memcpy(dvin, a.dvin, sizeof(float) * PN * PDV);
    arena_free(&ar);
}

static void* proj_rank_main(void* arg) {
    ProjRank* me = arg;
    proj_run(&me->c, &me->w, &me->dw, me->out, me->dvin);
    return NULL;
}

static void test_proj(void) {
    VitConfig c = {.patch = 2, .D = PDV, .L = 1, .H = 2, .Dt = PDT, .init_std = 0.02f};
    if (g_clip) c.proj_act = ACT_GELU_ERF;
    uint64_t s = 99;
#define RND() (s = s * 6364136223846793005ull + 1442695040888963407ull, (float)((double)(s >> 11) / 9007199254740992.0 - 0.5))
    static float w1[PDT * PDV], b1[PDT], w2[PDT * PDT], b2[PDT];
    for (int i = 0; i < PDT * PDV; i++) w1[i] = 0.5f * RND();
    for (int i = 0; i < PDT * PDT; i++) w2[i] = 0.5f * RND();
    for (int i = 0; i < PDT; i++) b1[i] = 0.5f * RND(), b2[i] = 0.5f * RND();
    for (int i = 0; i < PN * PDV; i++) proj_vin[i] = 2.0f * RND();
    for (int i = 0; i < PN * PDT; i++) proj_dout[i] = RND();
#undef RND
    ProjW w = {buf_f32(w1), buf_f32(b1), buf_f32(w2), buf_f32(b2)};
    ProjW g = {buf_f32(callocCheck(PDT * PDV, 4)), buf_f32(callocCheck(PDT, 4)), buf_f32(callocCheck(PDT * PDT, 4)),
               buf_f32(callocCheck(PDT, 4))};
    static float out[PN * PDT], dvin[PN * PDV];
    proj_run(&c, &w, &g, out, dvin);
    for (int T = 2; T <= 4; T *= 2) {
        int L = PDT / T;
        FakeGroup fg = {.T = T};
        pthread_barrier_init(&fg.bar, NULL, (unsigned)T);
        ProjRank* rk = callocCheck((size_t)T, sizeof(ProjRank));
        pthread_t th[4];
        for (int t = 0; t < T; t++) {
            ProjRank* r = &rk[t];
            r->g = &fg, r->t = t, r->c = c;
            r->c.tp = T, r->c.tp_rank = t, r->c.tp_reduce = fake_reduce_proj, r->c.tp_ctx = r;
            r->w = (ProjW){buf_f32(lm_slice(w1, PDT, PDV, 0, t * L, L)), buf_f32(lm_slice(b1, PDT, 1, 0, t * L, L)),
                           buf_f32(lm_slice(w2, PDT, PDT, 1, t * L, L)), buf_f32(b2)};
            r->dw = (ProjW){buf_f32(callocCheck(L * PDV, 4)), buf_f32(callocCheck(L, 4)), buf_f32(callocCheck(PDT * L, 4)),
                            buf_f32(callocCheck(PDT, 4))};
            pthread_create(&th[t], NULL, proj_rank_main, r);
        }
        for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
        double worst = 0;
        for (int t = 0; t < T; t++) {
            ProjRank* r = &rk[t];
            struct {
                const char* what;
                const float *got, *want;
                int n, own;
            } cmp[] = {{"out", r->out, out, PN * PDT, 0},
                       {"dvin", r->dvin, dvin, PN * PDV, 0},
                       {"d projector.0.weight", buf_f32p(r->dw.fc1_w), lm_slice(buf_f32p(g.fc1_w), PDT, PDV, 0, t * L, L), L * PDV, 1},
                       {"d projector.0.bias", buf_f32p(r->dw.fc1_b), lm_slice(buf_f32p(g.fc1_b), PDT, 1, 0, t * L, L), L, 1},
                       {"d projector.2.weight", buf_f32p(r->dw.fc2_w), lm_slice(buf_f32p(g.fc2_w), PDT, PDT, 1, t * L, L), PDT * L, 1},
                       {"d projector.2.bias", buf_f32p(r->dw.fc2_b), buf_f32p(g.fc2_b), PDT, 0}};
            for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
                float scale = lm_maxabs(cmp[i].want, (size_t)cmp[i].n), diff = 0;
                for (int e = 0; e < cmp[i].n; e++) diff = fmaxf(diff, fabsf(cmp[i].got[e] - cmp[i].want[e]));
                CHECK(scale > 0 && diff <= 1e-5f * scale, "projector tp %d rank %d: %s differs by %g (scale %g)", T, t,
                      cmp[i].what, diff, scale);
                if (scale > 0 && diff / scale > worst) worst = diff / scale;
                if (cmp[i].own) free((void*)cmp[i].want);
            }
            free(r->w.fc1_w.p), free(r->w.fc1_b.p), free(r->w.fc2_w.p);
            free(r->dw.fc1_w.p), free(r->dw.fc1_b.p), free(r->dw.fc2_w.p), free(r->dw.fc2_b.p);
        }
        printf("projector, tp %d: output, input gradient and weight gradients within %.3g of each tensor's scale\n",
               T, worst);
        free(rk);
        pthread_barrier_destroy(&fg.bar);
    }
    free(g.fc1_w.p), free(g.fc1_b.p), free(g.fc2_w.p), free(g.fc2_b.p);
}

static void test_embed(void) {
    enum { ET = 10, ED = 6, EV = 12 };
    int32_t ids[ET] = {3, -1, 0, 11, 5, 5, -1, 7, 2, 11}; /* -1: image positions; repeats */
    float table[EV * ED], dout[ET * ED], want[ET * ED], dwant[EV * ED];
    for (int i = 0; i < EV * ED; i++) table[i] = (float)i * 0.25f - 3.0f;
    for (int i = 0; i < ET * ED; i++) dout[i] = (float)((i * 7) % 11) - 5.0f;
    memset(dwant, 0, sizeof dwant);
    for (int i = 0; i < ET; i++)
        for (int j = 0; j < ED; j++) {
            want[i * ED + j] = ids[i] >= 0 ? table[ids[i] * ED + j] : 0.0f;
            if (ids[i] >= 0) dwant[ids[i] * ED + j] += dout[i * ED + j];
        }
    char err[256];
    for (int T = 2; T <= 4; T *= 2) {
        int Vs = EV / T;
        float sum[ET * ED], dtab[EV * ED];
        memset(sum, 0, sizeof sum);
        memset(dtab, 0, sizeof dtab);
        for (int t = 0; t < T; t++) {
            float part[ET * ED];
            int rc = tp_vocab_embed_forward(part, ids, table + t * Vs * ED, ET, ED, Vs, t * Vs, EV, err, sizeof err);
            CHECK(rc == 0, "embed tp %d rank %d: %s", T, t, err);
            for (int i = 0; i < ET * ED; i++) sum[i] += part[i]; /* the all-reduce */
            tp_vocab_embed_backward(dtab + t * Vs * ED, ids, dout, ET, ED, Vs, t * Vs);
        }
        CHECK(!memcmp(sum, want, sizeof sum), "embed tp %d: the summed lookups differ from the whole table's", T);
        CHECK(!memcmp(dtab, dwant, sizeof dtab), "embed tp %d: the rows' gradients differ", T);
    }
    int32_t bad[2] = {4, EV};
    float o[2 * ED];
    CHECK(tp_vocab_embed_forward(o, bad, table, 2, ED, EV, 0, EV, err, sizeof err) == -1 && strstr(err, "id 12 at position 1"),
          "bad id: '%s'", err);
    printf("vocab-parallel embedding, tp 2 and 4: lookup and row gradients exactly the whole table's\n");
}

int main(int argc, char** argv) {
    const char* which = argc > 1 ? argv[1] : "all";
    int all = !strcmp(which, "all");
    if (!strcmp(which, "vit_clip") || !strcmp(which, "proj_clip")) {
        g_clip = 1;
        cpu_set_num_threads(1);
        if (!strcmp(which, "vit_clip")) test_vit();
        else test_proj();
        printf("test_tp %s: %s\n", which, check_failures ? "FAILED" : "ok");
        return check_failures ? 1 : 0;
    }
    if (all || !strcmp(which, "split")) test_split();
    if (all || !strcmp(which, "marks")) test_marks();
    if (all || !strcmp(which, "init")) test_init();
    if (all || !strcmp(which, "ce")) test_ce();
    cpu_set_num_threads(1); /* the in-process ranks are threads */
    if (all || !strcmp(which, "lm")) test_lm();
    if (all || !strcmp(which, "vit")) test_vit();
    if (all || !strcmp(which, "proj")) test_proj();
    if (all || !strcmp(which, "embed")) test_embed();
    if (check_failures) {
        fprintf(stderr, "test_tp %s: %d failure(s)\n", which, check_failures);
        return 1;
    }
    printf("test_tp %s: ok\n", which);
    return 0;
}
