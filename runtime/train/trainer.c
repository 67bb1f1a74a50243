/* trainer.c — single-process training loop (see trainer.h). */
#include "runtime/trainer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/checkpoint.h"
#include "engine/engine.h"
#include "engine/util.h"
#include "data/loader.h"
#include "runtime/pipeline.h"
#include "text/tokenizer.h"
#include <mpi.h>
#include <unistd.h>

int trainer_tokenizer_vocab(const Recipe* r, char* err, size_t err_len) {
    size_t n;
    char* js = rr_read_file(r->tokenizer, &n);
    if (!js) {
        snprintf(err, err_len, "model.vocab = 0 takes the vocabulary from data.tokenizer, but '%s' cannot be read: %s",
                 r->tokenizer, strerror(errno));
        return -1;
    }
    cJSON* root = cJSON_ParseWithLength(js, n);
    free(js);
    cJSON* model = root ? cJSON_GetObjectItemCaseSensitive(root, "model") : NULL;
    cJSON* vocab = model ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    if (!cJSON_IsObject(vocab)) {
        snprintf(err, err_len, "%s: not a tokenizer.json (no model.vocab object)", r->tokenizer);
        cJSON_Delete(root);
        return -1;
    }
    int max_id = -1;
    for (cJSON* t = vocab->child; t; t = t->next)
        if (cJSON_IsNumber(t) && t->valueint > max_id) max_id = t->valueint;
    cJSON* added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    for (cJSON* t = added ? added->child : NULL; t; t = t->next) {
        cJSON* id = cJSON_GetObjectItemCaseSensitive(t, "id");
        if (cJSON_IsNumber(id) && id->valueint > max_id) max_id = id->valueint;
    }
    cJSON_Delete(root);
    return max_id + 1;
}

/* ------------------------------------------------------------------------------------------------
 * step pieces */

double trainer_grad_sum_squares(const Stage* st) {
    RR_ASSERT(st->params.be == st->be);
    return st->be->sum_squares(st->params.grad, st->params.total);
}

float trainer_clip_coef(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    double c = max_norm / (norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

void trainer_optimizer_step(Stage* st, const Recipe* r, float lr, int t, float clip) {
    const Backend* be = st->be;
    ParamTable* pt = &st->params;
    RR_ASSERT(pt->be == be);
    if (clip < 1.0f) be->scale(pt->grad, clip, pt->total);
    AdamWConfig cfg = {lr, (float)r->beta1, (float)r->beta2, (float)r->eps, (float)r->weight_decay};
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        be->adamw_update(pt->data + s->offset, pt->grad + s->offset, pt->m + s->offset, pt->v + s->offset, s->numel,
                         &cfg, t, s->decay);
    }
}

void trainer_set_threads(int n) { cpu_set_num_threads(n); }

/* ------------------------------------------------------------------------------------------------
 * synthetic batch source */

#define SYN_COLOURS 8
#define SYN_TOK_QUESTION 1
#define SYN_TOK_ANSWER0 2 /* answer tokens 2 .. 2 + SYN_COLOURS - 1 */
#define SYN_TOK_FILLER0 (SYN_TOK_ANSWER0 + SYN_COLOURS)

typedef struct {
    const Recipe* r;
    int V;
    int heldout;  /* 1: the held-out stream (never seen in training) */
    int64_t step; /* next step to generate */
    Microbatch* mbs;
    int M;
} SynSource;

static uint64_t syn_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct {
    uint64_t s;
} SynRng;
static uint64_t syn_next(SynRng* g) { return g->s = syn_mix(g->s); }
static int syn_int(SynRng* g, int lo, int hi) { return lo + (int)(syn_next(g) % (uint64_t)(hi - lo + 1)); }
static float syn_unit(SynRng* g) { return (float)((syn_next(g) >> 40) * (1.0 / 16777216.0)); }

static void syn_mb_free(Microbatch* mb) {
    free(mb->cu_seqlens), free(mb->ids), free(mb->targets), free(mb->pos), free(mb->patches);
    free(mb->img_cu_patches), free(mb->grid_h), free(mb->grid_w), free(mb->patch_row), free(mb->patch_col);
    free(mb->img_lm_start), free(mb->sample_index);
    memset(mb, 0, sizeof *mb);
}

/* Colour k's RGB in [-1, 1]: the 8 corners of the cube, scaled so noise does not hide them. */
static float syn_colour(int k, int ch) { return ((k >> ch) & 1) ? 0.6f : -0.6f; }

/* Generate microbatch m of step `step`: samples until the next one would not fit. */
static void syn_make_mb(SynSource* ss, int64_t step, int m, Microbatch* mb) {
    const Recipe* r = ss->r;
    int p = r->patch, P3 = 3 * p * p, T_max = r->microbatch_tokens;
    uint64_t stream = ss->heldout ? 0x5eed0fe7a1ull : 0; /* held-out samples: another key */
    SynRng g = {syn_mix(syn_mix((uint64_t)r->data_seed ^ stream) ^ syn_mix((uint64_t)step * 1315423911ull + (uint64_t)m))};
    /* first pass: sample shapes */
    enum { MAXS = 4096 };
    int gh[MAXS], gw[MAXS], nf[MAXS], col[MAXS];
    int S = 0, T = 0, Np = 0;
    int side_lo = 1, side_hi = 1;
    while (side_lo * side_lo < r->min_patches) side_lo++;
    while ((side_hi + 1) * (side_hi + 1) <= r->max_patches) side_hi++;
    if (side_hi < side_lo) side_hi = side_lo;
    for (;;) {
        SynRng g2 = g;
        int h = syn_int(&g2, side_lo, side_hi), w = syn_int(&g2, side_lo, side_hi);
        while (h * w > r->max_patches) w--;
        int f = syn_int(&g2, 1, 6);
        int k = syn_int(&g2, 0, SYN_COLOURS - 1);
        int len = h * w + f + 3;
        if (T + len > T_max || S == MAXS) break;
        g = g2;
        gh[S] = h, gw[S] = w, nf[S] = f, col[S] = k;
        T += len;
        Np += h * w;
        S++;
    }
    RR_ASSERT(S > 0);
    memset(mb, 0, sizeof *mb);
    mb->S = S, mb->T = T, mb->I = S, mb->Np = Np, mb->patch = p;
    mb->cu_seqlens = mallocCheck((size_t)(S + 1) * 4);
    mb->ids = mallocCheck((size_t)T * 4), mb->targets = mallocCheck((size_t)T * 4), mb->pos = mallocCheck((size_t)T * 4);
    mb->patches = mallocCheck((size_t)Np * (size_t)P3 * 4);
    mb->img_cu_patches = mallocCheck((size_t)(S + 1) * 4);
    mb->grid_h = mallocCheck((size_t)S * 4), mb->grid_w = mallocCheck((size_t)S * 4);
    mb->patch_row = mallocCheck((size_t)Np * 4), mb->patch_col = mallocCheck((size_t)Np * 4);
    mb->img_lm_start = mallocCheck((size_t)S * 4);
    mb->sample_index = mallocCheck((size_t)S * 8);
    int t = 0, np = 0;
    mb->cu_seqlens[0] = 0;
    mb->img_cu_patches[0] = 0;
    for (int s = 0; s < S; s++) {
        int n = gh[s] * gw[s], start = t;
        mb->img_lm_start[s] = t;
        mb->grid_h[s] = gh[s], mb->grid_w[s] = gw[s];
        for (int i = 0; i < n; i++, np++) {
            mb->patch_row[np] = i / gw[s], mb->patch_col[np] = i % gw[s];
            float* px = mb->patches + (size_t)np * P3;
            for (int q = 0; q < p * p; q++)
                for (int ch = 0; ch < 3; ch++) px[q * 3 + ch] = syn_colour(col[s], ch) + 0.8f * (syn_unit(&g) - 0.5f);
            mb->ids[t++] = -1;
        }
        for (int i = 0; i < nf[s]; i++) mb->ids[t++] = syn_int(&g, SYN_TOK_FILLER0, ss->V - 2);
        mb->ids[t++] = SYN_TOK_QUESTION;
        mb->ids[t++] = SYN_TOK_ANSWER0 + col[s];
        mb->ids[t++] = ss->V - 1; /* end of turn */
        int end = t;
        for (int u = start; u < end; u++) {
            mb->pos[u] = u - start;
            /* supervised: the answer and the end token (the assistant turn) */
            mb->targets[u] = (u >= end - 3 && u < end - 1) ? mb->ids[u + 1] : -100;
        }
        mb->cu_seqlens[s + 1] = t;
        mb->img_cu_patches[s + 1] = np;
        mb->sample_index[s] = step * 100000 + m * 1000 + s;
    }
    mb->n_supervised = 2 * S;
}

static int syn_next_plan(BatchSource* src, StepPlan* plan, char* err, size_t err_len) {
    SynSource* ss = src->self;
    for (int m = 0; m < ss->M; m++) syn_mb_free(&ss->mbs[m]);
    memset(plan, 0, sizeof *plan);
    for (int m = 0; m < ss->M; m++) {
        syn_make_mb(ss, ss->r->fixed_batch && !ss->heldout ? 0 : ss->step, m, &ss->mbs[m]);
        plan->n_supervised += ss->mbs[m].n_supervised;
        plan->tokens += ss->mbs[m].T;
        plan->patches += ss->mbs[m].Np;
        plan->samples += ss->mbs[m].S;
    }
    plan->mbs = ss->mbs;
    plan->M = ss->M;
    ss->step++;
    return 0;
}

static char* syn_position(BatchSource* src) {
    SynSource* ss = src->self;
    char* s = mallocCheck(64);
    snprintf(s, 64, "{\"synthetic_step\":%lld}", (long long)ss->step);
    return s;
}

static int syn_seek(BatchSource* src, const char* json, char* err, size_t err_len) {
    SynSource* ss = src->self;
    long long st;
    if (!json || sscanf(json, "{\"synthetic_step\":%lld}", &st) != 1 || st < 0) {
        snprintf(err, err_len, "checkpoint loader position '%s' is not a synthetic-source position",
                 json ? json : "(none)");
        return -1;
    }
    ss->step = st;
    return 0;
}

static int64_t syn_skipped(BatchSource* src) {
    (void)src;
    return 0;
}

static void syn_free(BatchSource* src) {
    SynSource* ss = src->self;
    for (int m = 0; m < ss->M; m++) syn_mb_free(&ss->mbs[m]);
    free(ss->mbs);
    free(ss);
    src->self = NULL;
}

int batch_source_synthetic(BatchSource* src, const Recipe* r, int vocab, char* err, size_t err_len) {
    if (vocab < 16) {
        snprintf(err, err_len, "the synthetic source needs a vocabulary of at least 16 (got %d)", vocab);
        return -1;
    }
    int need = 1;
    while (need * need < r->min_patches) need++;
    if (need * need + 9 > r->microbatch_tokens) {
        snprintf(err, err_len, "data.microbatch_tokens %d cannot hold one synthetic sample", r->microbatch_tokens);
        return -1;
    }
    SynSource* ss = callocCheck(1, sizeof *ss);
    ss->r = r;
    ss->V = vocab;
    ss->M = r->microbatches;
    ss->mbs = callocCheck((size_t)ss->M, sizeof(Microbatch));
    memset(src, 0, sizeof *src);
    src->self = ss;
    src->name = "synthetic";
    src->next = syn_next_plan;
    src->position = syn_position;
    src->seek = syn_seek;
    src->skipped = syn_skipped;
    src->free = syn_free;
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * shard source: the loader (data/loader.h) */

typedef struct {
    Loader* L;
    int64_t dataset_samples;
} ShardSource;

static int shard_next(BatchSource* src, StepPlan* plan, char* err, size_t err_len) {
    ShardSource* ss = src->self;
    LoaderStep st;
    if (loader_next_step(ss->L, &st, err, err_len) != 0) return -1;
    memset(plan, 0, sizeof *plan);
    plan->mbs = st.mbs;
    plan->M = st.M;
    plan->n_supervised = st.n_supervised;
    plan->tokens = st.tokens;
    plan->patches = st.patches;
    plan->samples = st.samples;
    return 0;
}

static char* shard_position(BatchSource* src) {
    ShardSource* ss = src->self;
    LoaderPos pos;
    loader_get_pos(ss->L, &pos);
    return loader_pos_to_json(&pos);
}

static int shard_seek(BatchSource* src, const char* json, char* err, size_t err_len) {
    ShardSource* ss = src->self;
    LoaderPos pos;
    if (!json) {
        snprintf(err, err_len, "the checkpoint has no loader position");
        return -1;
    }
    if (loader_pos_from_json(json, &pos, err, err_len) != 0) return -1;
    return loader_seek(ss->L, &pos, err, err_len);
}

static int64_t shard_skipped(BatchSource* src) {
    ShardSource* ss = src->self;
    LoaderStats st;
    loader_stats(ss->L, &st);
    return st.skipped_damaged + st.skipped_oversize;
}

static void shard_free(BatchSource* src) {
    ShardSource* ss = src->self;
    loader_close(ss->L);
    free(ss);
    src->self = NULL;
}

int batch_source_shards_ex(BatchSource* src, const Recipe* r, const char* shards, uint64_t tok_hash, int eval,
                           char* err, size_t err_len) {
    LoaderConfig c;
    loader_config_default(&c);
    c.shards = shards;
    c.tokenizer_hash = tok_hash;
    c.microbatch_tokens = r->microbatch_tokens;
    c.microbatches = r->microbatches;
    if (loader_policy_parse(r->policy, &c.policy) != 0) {
        snprintf(err, err_len, "data.policy '%s' is not known to the loader", r->policy);
        return -1;
    }
    /* eval: stream order, so the first N samples are one whole epoch (each held-out sample once) */
    if (eval) c.policy = LOADER_POLICY_FIFO;
    c.window = r->window;
    c.workers = r->workers;
    c.seed = (uint64_t)r->data_seed;
    c.patch = r->patch;
    c.min_patches = r->min_patches;
    c.max_patches = r->max_patches;
    c.dp_rank = 0;
    c.dp_size = 1;
    c.fatal_errors = !strcmp(r->on_error, "fatal");
    c.skip_oversize = 0;
    c.decode_images = 1;
    Loader* L = loader_open(&c, NULL, err, err_len);
    if (!L) return -1;
    ShardSource* ss = callocCheck(1, sizeof *ss);
    ss->L = L;
    LoaderStats st;
    loader_stats(L, &st);
    ss->dataset_samples = st.dataset_samples;
    memset(src, 0, sizeof *src);
    src->self = ss;
    src->name = "shards";
    src->next = shard_next;
    src->position = shard_position;
    src->seek = shard_seek;
    src->skipped = shard_skipped;
    src->free = shard_free;
    src->dataset_samples = st.dataset_samples;
    return 0;
}

int batch_source_shards(BatchSource* src, const Recipe* r, char* err, size_t err_len) {
    Tokenizer* tok = tokenizer_load(r->tokenizer, err, err_len);
    if (!tok) return -1;
    uint64_t h = tokenizer_hash(tok);
    tokenizer_free(tok);
    return batch_source_shards_ex(src, r, r->shards, h, 0, err, err_len);
}

/* ------------------------------------------------------------------------------------------------
 * the trainer */

ModelConfig trainer_model_config(const Recipe* r, int vocab) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.patch = r->patch;
    c.Dv = r->vision_width, c.Lv = r->vision_layers, c.Hv = r->vision_heads;
    c.Dt = r->text_width, c.Lt = r->text_layers, c.Ht = r->text_heads;
    c.F = r->ffn_hidden;
    c.V = vocab;
    c.min_patches = r->min_patches, c.max_patches = r->max_patches;
    c.init_std = 0.02f;
    c.seed = (uint64_t)r->seed;
    return c;
}

static int trainer_mkdirs(const char* path, char* err, size_t err_len) {
    char tmp[RECIPE_STR + 64];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char* p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) goto fail;
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) goto fail;
    return 0;
fail:
    snprintf(err, err_len, "cannot create folder '%s': %s", tmp, strerror(errno));
    return -1;
}

int trainer_init(Trainer* t, const Recipe* r, int eval_only, char* err, size_t err_len) {
    memset(t, 0, sizeof *t);
    t->r = r;
    int vocab = r->vocab;
    uint64_t tok_hash = 0;
    if (!strcmp(r->source, "shards")) {
        Tokenizer* tok = tokenizer_load(r->tokenizer, err, err_len);
        if (!tok) return -1;
        int tv = tokenizer_vocab_size(tok);
        tok_hash = tokenizer_hash(tok);
        tokenizer_free(tok);
        if (vocab != 0 && vocab != tv) {
            snprintf(err, err_len, "%s: model.vocab = %d but the tokenizer %s has %d tokens; allowed: 0 or %d",
                     recipe_origin(r, "model", "vocab"), vocab, r->tokenizer, tv, tv);
            return -1;
        }
        vocab = tv;
    }
    t->mc = trainer_model_config(r, vocab);
    if (model_config_check(&t->mc, err, err_len) != 0) return -1;
    const Backend* be = &backend_cpu;
    if (strcmp(r->backend, "cpu") != 0) {
        char why[256];
        be = backend_cuda_get(why, sizeof why);
        if (!be) {
            snprintf(err, err_len, "%s: runtime.backend = %s: %s", recipe_origin(r, "runtime", "backend"), r->backend,
                     why);
            return -1;
        }
    }
    snprintf(t->run_dir, sizeof t->run_dir, "%s", r->run_dir);
    if (r->ckpt_dir[0]) snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s", r->ckpt_dir);
    else snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s/checkpoints", r->run_dir);
    if (trainer_mkdirs(t->run_dir, err, err_len) != 0) return -1;

    t->tok_hash = tok_hash;
    int rc = !strcmp(r->source, "synthetic")
                 ? batch_source_synthetic(&t->src, r, vocab, err, err_len)
                 : batch_source_shards_ex(&t->src, r, r->shards, tok_hash, 0, err, err_len);
    if (rc != 0) return -1;
    if (r->tp > 1 || r->dp > 1) {
        snprintf(err, err_len, "%s: parallel.tp = %d, parallel.dp = %d: tensor and data parallelism are not built yet; "
                 "allowed: 1 (pipeline parallelism: parallel.pp)", recipe_origin(r, "parallel", r->tp > 1 ? "tp" : "dp"),
                 r->tp, r->dp);
        return -1;
    }
    if (r->pp > 1) {
        if (eval_only) {
            snprintf(err, err_len, "evaluation runs in one process: add --set parallel.pp=1 (a checkpoint written under "
                     "any pipeline layout loads into any other)");
            return -1;
        }
        if (trainer_pp_init(t, be, err, err_len) != 0) return -1;
    } else {
        stage_init(&t->st, &t->mc, 0, t->mc.Lt, be);
        params_alloc_optimizer(&t->st.params);
        /* one microbatch in flight; every position may be an image patch */
        stage_acts_init(&t->acts, &t->st, r->microbatch_tokens, r->microbatch_tokens, 0);
    }
    t->last_step = r->stop_at > 0 ? r->stop_at : r->steps;

    int64_t resume_step = 0;
    if (r->resume[0]) {
        char dir[RECIPE_STR + 64];
        if (!strcmp(r->resume, "latest")) {
            if (checkpoint_latest(t->ckpt_root, dir, sizeof dir) < 0) {
                snprintf(err, err_len, "checkpoint.resume = latest: no checkpoint in '%s'", t->ckpt_root);
                return -1;
            }
        } else {
            snprintf(dir, sizeof dir, "%s", r->resume);
        }
        CheckpointState cs;
        if (t->pl ? trainer_pp_load(t, dir, &cs, err, err_len) != 0
                  : checkpoint_load(dir, &t->st.params, &cs, NULL, err, err_len) != 0)
            return -1;
        if (!eval_only && cs.recipe_hash != recipe_hash(r)) {
            snprintf(err, err_len,
                     "%s was written by a run with recipe hash %016llx, this recipe hashes to %016llx: a model, data, "
                     "optimiser or seed key differs (keys marked *(hashed)* in recipes/README.md)",
                     dir, (unsigned long long)cs.recipe_hash, (unsigned long long)recipe_hash(r));
            checkpoint_state_free(&cs);
            return -1;
        }
        if (t->src.seek(&t->src, cs.loader, err, err_len) != 0) {
            checkpoint_state_free(&cs);
            return -1;
        }
        t->step = cs.step;
        t->opt_step = cs.opt_step;
        resume_step = cs.step;
        checkpoint_state_free(&cs);
        if (!eval_only && t->pp_rank == 0) fprintf(stderr, "rrfp-mm: resumed from %s at step %lld\n", dir, (long long)t->step);
    }
    char mpath[RECIPE_STR + 32];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", t->run_dir);
    if (!eval_only && t->pp_rank == 0 && metrics_open(&t->metrics, mpath, resume_step, err, err_len) != 0) return -1;
    t->t_begin = rr_now();
    return 0;
}

/* RUN_DIR/dump-N/: config.json, weights.safetensors (before the step), microbatch-K.safetensors
 * (inputs, logits, loss_sum), grads.safetensors (the step's summed, unclipped gradients),
 * step.json (loss, denominator, lr, grad norm). Layout: README.md "Step dumps". */
static int trainer_dump_begin(Trainer* t, char* dir, size_t n, char* err, size_t err_len) {
    snprintf(dir, n, "%s/dump-%lld", t->run_dir, (long long)(t->step + 1));
    if (trainer_mkdirs(dir, err, err_len) != 0) return -1;
    char path[RECIPE_STR + 128];
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    return stage_dump_params(&t->st, 0, path, err, err_len);
}

int trainer_step(Trainer* t, StepStats* s, char* err, size_t err_len) {
    const Recipe* r = t->r;
    double t0 = rr_now();
    StepPlan plan;
    if (t->src.next(&t->src, &plan, err, err_len) != 0) return -1;
    double t_data = rr_now() - t0;
    if (plan.n_supervised <= 0) {
        snprintf(err, err_len, "step %lld has no supervised targets (no assistant tokens in any sample)",
                 (long long)(t->step + 1));
        return -1;
    }
    int dumping = r->dump_step == t->step + 1;
    if (dumping && t->pl) {
        snprintf(err, err_len, "%s: train.dump_step = %d: step dumps are written by one process; allowed: with "
                 "parallel.pp = 1", recipe_origin(r, "train", "dump_step"), r->dump_step);
        return -1;
    }
    char ddir[RECIPE_STR + 64], path[RECIPE_STR + 128];
    if (dumping && trainer_dump_begin(t, ddir, sizeof ddir, err, err_len) != 0) return -1;

    float scale = (float)(1.0 / (double)plan.n_supervised);
    double loss_sum = 0.0, norm = 0.0;
    if (t->pl && trainer_pp_compute(t, &plan, scale, &loss_sum, &norm, err, err_len) != 0) return -1;
    if (!t->pl) params_zero_grad(&t->st.params);
    for (int m = 0; !t->pl && m < plan.M; m++) {
        float ls = 0.0f;
        stage_forward(&t->st, &t->acts, &plan.mbs[m], NULL, NULL, &ls);
        loss_sum += ls;
        if (dumping) {
            snprintf(path, sizeof path, "%s/microbatch-%d.safetensors", ddir, m);
            if (stage_dump_microbatch(&t->st, &t->acts, &plan.mbs[m], path, err, err_len) != 0) return -1;
        }
        stage_backward(&t->st, &t->acts, NULL, scale, NULL);
    }
    if (!t->pl) norm = sqrt(trainer_grad_sum_squares(&t->st));
    float lr = lr_schedule((int)t->step, r->warmup, r->steps, (float)r->lr, (float)r->min_lr);
    float loss = (float)(loss_sum / (double)plan.n_supervised);
    if (dumping) {
        snprintf(path, sizeof path, "%s/grads.safetensors", ddir);
        if (stage_dump_params(&t->st, 1, path, err, err_len) != 0) return -1;
        char extra[512];
        snprintf(extra, sizeof extra,
                 "{\"step\": %lld, \"microbatches\": %d, \"n_supervised\": %lld, \"loss\": %.9g, \"loss_hex\": \"%a\", "
                 "\"loss_sum\": %.17g, \"lr\": %.9g, \"grad_norm\": %.17g}",
                 (long long)(t->step + 1), plan.M, (long long)plan.n_supervised, (double)loss, (double)loss, loss_sum,
                 (double)lr, norm);
        snprintf(path, sizeof path, "%s/config.json", ddir);
        if (model_dump_config(&t->mc, extra, path, err, err_len) != 0) return -1;
        snprintf(path, sizeof path, "%s/step.json", ddir);
        if (rr_write_file_atomic(path, extra, strlen(extra)) != 0) {
            snprintf(err, err_len, "cannot write '%s': %s", path, strerror(errno));
            return -1;
        }
    }
    if (!isfinite(loss) || !isfinite(norm)) {
        snprintf(err, err_len, "step %lld: loss %g, grad norm %g: training diverged (lower optim.lr?)",
                 (long long)(t->step + 1), (double)loss, norm);
        return -1;
    }
    t->opt_step++;
    if (t->pl) trainer_pp_optimizer(t, lr, trainer_clip_coef(norm, r->grad_clip));
    else trainer_optimizer_step(&t->st, r, lr, (int)t->opt_step, trainer_clip_coef(norm, r->grad_clip));
    t->step++;
    double dt = rr_now() - t0;
    /* ETA from the steps timed in this process, leaving out the first (warm-up of caches, pages) */
    if (t->steps_timed++ > 0) t->time_timed += dt;
    double per = t->steps_timed > 1 ? t->time_timed / (double)(t->steps_timed - 1) : dt;

    memset(s, 0, sizeof *s);
    s->step = t->step;
    s->loss = loss;
    s->lr = lr;
    s->grad_norm = norm;
    s->tokens = plan.tokens;
    s->supervised = plan.n_supervised;
    s->patches = plan.patches;
    s->step_time_s = dt;
    s->tokens_per_s = (double)plan.tokens / dt;
    s->data_wait_s = t_data;
    s->peak_mem_mb = metrics_peak_rss_mb();
    s->eta_s = per * (double)(t->last_step - t->step);
    s->bubble = t->pl ? t->bubble : -1;
    s->skipped = t->src.skipped(&t->src);
    metrics_write(&t->metrics, s);
    return 0;
}

int trainer_checkpoint(Trainer* t, char* err, size_t err_len) {
    CheckpointState cs = {.step = t->step,
                          .opt_step = t->opt_step,
                          .recipe_hash = recipe_hash(t->r),
                          .seed = (uint64_t)t->r->seed,
                          .data_seed = (uint64_t)t->r->data_seed,
                          .loader = t->src.position(&t->src)};
    char out[RECIPE_STR + 64];
    int rc = t->pl ? trainer_pp_checkpoint(t, &cs, out, sizeof out, err, err_len)
                   : checkpoint_save(t->ckpt_root, &t->st.params, &cs, NULL, out, sizeof out, err, err_len);
    free(cs.loader);
    if (rc == 0 && t->pp_rank == 0) {
        checkpoint_prune(t->ckpt_root, t->r->keep);
        fprintf(stderr, "rrfp-mm: checkpoint %s\n", out);
    }
    return rc;
}

void trainer_free(Trainer* t) {
    metrics_close(&t->metrics);
    if (t->src.free) t->src.free(&t->src);
    if (t->pl) trainer_pp_free(t);
    else if (t->acts.block) stage_acts_free(&t->acts, &t->st);
    stage_free(&t->st);
}

/* A failure on one pipeline rank must end every rank (the others would wait for its messages). */
static int trainer_fail(const Trainer* t, const char* err) {
    fprintf(stderr, "rrfp-mm: error: %s\n", err);
    if (t && t->pp > 1) {
        fprintf(stderr, "rrfp-mm: error: pipeline rank %d failed; ending all %d ranks\n", t->pp_rank, t->pp);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 1;
}

int trainer_run(const Recipe* r, FILE* log) {
    int threads = r->threads;
    const char* local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (threads == 0 && r->pp > 1 && local && atoi(local) > 1) { /* ranks of one machine share its cores */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = (int)(cores / atoi(local));
        if (threads < 1) threads = 1;
    }
    trainer_set_threads(threads);
    Trainer* t = callocCheck(1, sizeof *t);
    char err[2048];
    if (trainer_init(t, r, 0, err, sizeof err) != 0) {
        int mpi = 0;
        MPI_Initialized(&mpi);
        Trainer shown = {.pp = mpi ? r->pp : 1};
        if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &shown.pp_rank);
        free(t);
        return trainer_fail(&shown, err);
    }
    FILE* devnull = NULL;
    if (t->pp_rank != 0) log = devnull = fopen("/dev/null", "w"); /* one log: rank 0's */
    RecipeParamCounts pc;
    recipe_param_counts(r, t->mc.V, &pc);
    fprintf(log, "train %s: %.2fM parameters (vision %.2fM, projector %.2fM, text %.2fM), V %d, source %s, "
                 "%d microbatches x %d tokens, steps %lld..%lld of %d, run %s\n",
            r->path, pc.total / 1e6, pc.vision / 1e6, pc.projector / 1e6, pc.text / 1e6, t->mc.V, t->src.name,
            r->microbatches, r->microbatch_tokens, (long long)t->step + 1, (long long)t->last_step, r->steps,
            t->run_dir);
    fflush(log);
    int rc = 0;
    while (t->step < t->last_step) {
        StepStats s;
        if (trainer_step(t, &s, err, sizeof err) != 0) {
            rc = trainer_fail(t, err);
            break;
        }
        if (t->step % r->log_every == 0 || t->step == t->last_step || t->step == 1) {
            char line[512];
            metrics_log_line(line, sizeof line, &s, r->steps);
            fprintf(log, "%s\n", line);
            fflush(log);
        }
        int ck = (r->checkpoint_every > 0 && t->step % r->checkpoint_every == 0) || t->step == t->last_step;
        if (ck && trainer_checkpoint(t, err, sizeof err) != 0) {
            rc = trainer_fail(t, err);
            break;
        }
    }
    if (rc == 0)
        fprintf(log, "done: %lld steps in %.1f s; metrics %s\n", (long long)t->step, rr_now() - t->t_begin,
                t->metrics.path);
    trainer_free(t);
    free(t);
    if (devnull) fclose(devnull);
    return rc;
}

/* ------------------------------------------------------------------------------------------------
 * held-out evaluation */

typedef struct {
    uint64_t question, answer;
} EvalKey;

static int eval_key_cmp(const void* a, const void* b) {
    const EvalKey *x = a, *y = b;
    if (x->question != y->question) return x->question < y->question ? -1 : 1;
    if (x->answer != y->answer) return x->answer < y->answer ? -1 : 1;
    return 0;
}

int trainer_eval(Trainer* t, int64_t max_samples, FILE* predictions, EvalResult* res, char* err, size_t err_len) {
    const Recipe* r = t->r;
    memset(res, 0, sizeof *res);
    BatchSource src;
    int synthetic = !strcmp(r->source, "synthetic");
    if (synthetic) {
        if (batch_source_synthetic(&src, r, t->mc.V, err, err_len) != 0) return -1;
        ((SynSource*)src.self)->heldout = 1;
    } else {
        if (!r->eval_shards[0]) {
            snprintf(err, err_len, "%s: data.eval_shards is not set: no held-out data to evaluate on",
                     recipe_origin(r, "data", "eval_shards"));
            return -1;
        }
        if (batch_source_shards_ex(&src, r, r->eval_shards, t->tok_hash, 1, err, err_len) != 0) return -1;
        /* each held-out sample once: the stream runs on into the next epoch */
        if (src.dataset_samples < max_samples) max_samples = src.dataset_samples;
    }
    const Stage* st = &t->st;
    int V = t->mc.V;
    float* hl = NULL;
    size_t hl_n = 0;
    int on_host = !strcmp(st->be->name, "cpu");
    EvalKey* keys = NULL;
    int64_t nkeys = 0, capkeys = 0;
    double loss_sum = 0;
    int rc = 0;
    while (res->samples < max_samples) {
        StepPlan plan;
        if (src.next(&src, &plan, err, err_len) != 0) {
            rc = -1;
            break;
        }
        if (plan.M == 0) break; /* the held-out shards are exhausted */
        for (int m = 0; m < plan.M && res->samples < max_samples; m++) {
            const Microbatch* mb = &plan.mbs[m];
            float ls = 0;
            stage_forward(&t->st, &t->acts, mb, NULL, NULL, &ls);
            t->acts.state = ACTS_EMPTY; /* forward only: no backward will consume these activations */
            loss_sum += ls;
            res->supervised += mb->n_supervised;
            const float* logits = t->acts.logits;
            if (!on_host) {
                size_t need = (size_t)mb->T * (size_t)V;
                if (need > hl_n) hl = reallocCheck(hl, need * sizeof(float)), hl_n = need;
                st->be->copy_d2h(hl, t->acts.logits, need * sizeof(float));
                logits = hl;
            }
            for (int s = 0; s < mb->S && res->samples < max_samples; s++) {
                int a = mb->cu_seqlens[s], b = mb->cu_seqlens[s + 1];
                int first_sup = -1, all_ok = 1;
                uint64_t ans = 1469598103934665603ull;
                for (int u = a; u < b; u++) {
                    int tg = mb->targets[u];
                    if (tg == -100) continue;
                    if (first_sup < 0) first_sup = u;
                    const float* row = logits + (size_t)u * V;
                    int best = 0;
                    for (int v = 1; v < V; v++)
                        if (row[v] > row[best]) best = v;
                    if (best != tg) all_ok = 0;
                    ans = (ans ^ (uint64_t)tg) * 1099511628211ull;
                }
                if (first_sup < 0) continue; /* nothing to answer */
                res->samples++;
                res->greedy_correct += all_ok;
                if (predictions) {
                    /* the predicted answer tokens (argmax at each answer position) */
                    fprintf(predictions, "{\"sample_index\":%lld,\"correct\":%s,\"predicted\":[",
                            (long long)mb->sample_index[s], all_ok ? "true" : "false");
                    int first = 1;
                    for (int u = a; u < b; u++) {
                        if (mb->targets[u] == -100) continue;
                        const float* row = logits + (size_t)u * V;
                        int best = 0;
                        for (int v = 1; v < V; v++)
                            if (row[v] > row[best]) best = v;
                        fprintf(predictions, "%s%d", first ? "" : ",", best);
                        first = 0;
                    }
                    fprintf(predictions, "]}\n");
                }
                if (synthetic) {
                    /* the 8 colour answers as candidates, scored by their logit at the answer position */
                    const float* row = logits + (size_t)first_sup * V;
                    int best = SYN_TOK_ANSWER0;
                    for (int k = 1; k < SYN_COLOURS; k++)
                        if (row[SYN_TOK_ANSWER0 + k] > row[best]) best = SYN_TOK_ANSWER0 + k;
                    res->candidate_correct += best == mb->targets[first_sup];
                } else {
                    /* question = the tokens after the sample's last image position up to the answer */
                    int q0 = a;
                    for (int u = a; u < first_sup; u++)
                        if (mb->ids[u] < 0) q0 = u + 1;
                    uint64_t q = 1469598103934665603ull;
                    for (int u = q0; u <= first_sup; u++) q = (q ^ (uint64_t)(uint32_t)mb->ids[u]) * 1099511628211ull;
                    if (nkeys == capkeys) {
                        capkeys = capkeys ? 2 * capkeys : 256;
                        keys = reallocCheck(keys, (size_t)capkeys * sizeof(EvalKey));
                    }
                    keys[nkeys].question = q;
                    keys[nkeys].answer = ans;
                    nkeys++;
                }
            }
        }
    }
    src.free(&src);
    free(hl);
    if (rc != 0) {
        free(keys);
        return -1;
    }
    if (res->samples == 0) {
        free(keys);
        snprintf(err, err_len, "no held-out sample with an answer to evaluate");
        return -1;
    }
    res->loss = res->supervised ? loss_sum / (double)res->supervised : 0;
    if (synthetic) {
        res->candidates = SYN_COLOURS;
        res->chance = 1.0 / SYN_COLOURS;
    } else {
        /* chance = mean over samples of 1 / (distinct answers to the same question) */
        qsort(keys, (size_t)nkeys, sizeof(EvalKey), eval_key_cmp);
        double ch = 0;
        for (int64_t i = 0; i < nkeys;) {
            int64_t j = i, distinct = 0;
            while (j < nkeys && keys[j].question == keys[i].question) {
                if (j == i || keys[j].answer != keys[j - 1].answer) distinct++;
                j++;
            }
            ch += (double)(j - i) / (double)distinct;
            i = j;
        }
        res->chance = ch / (double)nkeys;
    }
    free(keys);
    return 0;
}
