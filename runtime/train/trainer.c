/* trainer.c — the training loop (see trainer.h). Nothing here knows whether a step is pipelined: the
 * step executor (exec.h) runs it. */
#include "runtime/train/trainer.h"
#include "runtime/train/runckpt.h"
#include "runtime/train/optim.h"
#include "runtime/train/guard.h"
#include "runtime/train/trained.h"

#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/loader.h"
#include "engine/checkpoint.h"
#include "engine/engine.h"
#include "engine/util.h"
#include <cjson/cJSON.h>
#include "text/tokenizer.h"

void trainer_set_threads(int n) { cpu_set_num_threads(n); }

/* ------------------------------------------------------------------------------------------------
 * batch sources from the recipe */

int trainer_source_synthetic(BatchSource* src, const Recipe* r, int vocab, int heldout, int dp_rank, int dp_size,
                             char* err, size_t err_len) {
    SynthSourceConfig c = {.patch = r->patch,
                           .min_patches = r->min_patches,
                           .max_patches = r->max_patches,
                           .microbatch_tokens = r->microbatch_tokens,
                           .microbatches = r->microbatches,
                           .seed = r->data_seed,
                           .fixed_batch = r->fixed_batch,
                           .plan = r->synthetic_plan,
                           .heldout = heldout,
                           .dp_rank = dp_rank,
                           .dp_size = dp_size};
    return batch_source_synthetic(src, &c, vocab, err, err_len);
}

/* trainer_source_shards; agree = 1: samples whose images do not decode are left to the trainer's decision
 * (trainer_agree_skips), and with quiet = 1 this rank reports no skip (the log rank does). */
static int source_shards(BatchSource* src, const Recipe* r, const char* shards, uint64_t tok_hash, int eval,
                         int decode_images, int dp_rank, int dp_size, int agree, int quiet, char* err, size_t err_len) {
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
    c.workers = guard_data_workers(r);
    c.seed = (uint64_t)r->data_seed;
    c.patch = r->patch;
    c.min_patches = r->min_patches;
    c.max_patches = r->max_patches;
    c.dp_rank = dp_rank;
    c.dp_size = dp_size;
    c.fatal_errors = !strcmp(r->on_error, "fatal");
    c.skip_oversize = 0;
    c.decode_images = decode_images;
    c.agree_skips = agree;
    c.quiet = quiet;
    return batch_source_shards(src, &c, err, err_len);
}

int trainer_source_shards(BatchSource* src, const Recipe* r, const char* shards, uint64_t tok_hash, int eval,
                          int decode_images, int dp_rank, int dp_size, char* err, size_t err_len) {
    return source_shards(src, r, shards, tok_hash, eval, decode_images, dp_rank, dp_size, 0, 0, err, err_len);
}

static int trainer_vocab(const Recipe* r, int* vocab, uint64_t* tok_hash, char* err, size_t err_len);
static void trainer_demo_hint(const char* path, char* err, size_t err_len);

int trainer_epochs_to_steps(Recipe* r, int dp, FILE* log, char* err, size_t err_len) {
    if (r->epochs <= 0) return 0;
    int vocab;
    uint64_t tok_hash;
    if (trainer_vocab(r, &vocab, &tok_hash, err, err_len) != 0) return -1;
    LoaderConfig c;
    loader_config_default(&c);
    c.shards = r->shards;
    c.tokenizer_hash = tok_hash;
    c.microbatch_tokens = r->microbatch_tokens;
    c.microbatches = r->microbatches * dp;
    c.seed = (uint64_t)r->data_seed;
    c.patch = r->patch;
    c.min_patches = r->min_patches;
    c.max_patches = r->max_patches;
    c.decode_images = 0;
    if (loader_policy_parse(r->policy, &c.policy) != 0) {
        snprintf(err, err_len, "data.policy '%s' is not known to the loader", r->policy);
        return -1;
    }
    Loader* L = loader_open(&c, NULL, err, err_len);
    if (!L) {
        trainer_demo_hint(r->shards, err, err_len);
        return -1;
    }
    /* One epoch packed from the index's costs (no frame read): fifo fills microbatches in order; ffd
     * and balanced (which opens as many microbatches as ffd) pack windows of data.window samples. The
     * loader packs a shuffled stream, so this count is an estimate within a few microbatches; the
     * epoch the log shows is measured (samples seen / records). */
    int N = loader_sample_count(L);
    int64_t mbs = 0;
    if (c.policy == LOADER_POLICY_FIFO) {
        int fill = 0;
        for (int i = 0; i < N; i++) {
            int l = loader_sample_tokens(L, i);
            if (fill > 0 && fill + l > r->microbatch_tokens) mbs++, fill = 0;
            fill += l;
        }
        if (fill > 0) mbs++;
    } else {
        int W = r->window;
        int* cl = mallocCheck((size_t)W * sizeof(int));
        int64_t* key = mallocCheck((size_t)W * sizeof(int64_t));
        int* bin = mallocCheck((size_t)W * sizeof(int));
        for (int i0 = 0; i0 < N; i0 += W) {
            int n = N - i0 < W ? N - i0 : W;
            for (int i = 0; i < n; i++) cl[i] = loader_sample_tokens(L, i0 + i), key[i] = i0 + i;
            mbs += loader_pack_window(LOADER_POLICY_FFD, n, cl, NULL, key, r->microbatch_tokens, bin);
        }
        free(cl), free(key), free(bin);
    }
    loader_close(L);
    int64_t per_step = (int64_t)r->microbatches * dp;
    double steps = ceil(r->epochs * (double)mbs / (double)per_step);
    if (N == 0 || steps < 1 || steps > 1e9) {
        snprintf(err, err_len, "%s: train.epochs = %g over %d records (%lld microbatches an epoch) gives %.0f steps; "
                 "allowed: 1 .. 1e9 steps", recipe_origin(r, "train", "epochs"), r->epochs, N, (long long)mbs, steps);
        return -1;
    }
    char set[64], e[1024];
    snprintf(set, sizeof set, "train.steps=%.0f", steps);
    char was[RECIPE_STR + 32];
    snprintf(was, sizeof was, "%d from %s", r->steps, recipe_origin(r, "train", "steps"));
    if (recipe_set_derived(r, set, "train.epochs", e, sizeof e) != 0) {
        snprintf(err, err_len, "train.epochs: %s", e);
        return -1;
    }
    if (log)
        fprintf(log, "train.epochs = %g: %d records, packed (%s, %d tokens) into about %lld microbatches an epoch, "
                     "%lld per step (%d x dp %d): train.steps = %d (was %s)\n",
                r->epochs, N, r->policy, r->microbatch_tokens, (long long)mbs, (long long)per_step, r->microbatches,
                dp, r->steps, was);
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * the trainer */

static int trainer_mkdirs(const char* path, char* err, size_t err_len) {
    if (rr_mkdirs(path) == 0) return 0;
    snprintf(err, err_len, "cannot create folder '%s': %s", path, strerror(errno));
    return -1;
}

/* A path under demo/ that does not exist: the demo data is made by `make demo` (a fresh clone has none). */
static void trainer_demo_hint(const char* path, char* err, size_t err_len) {
    struct stat sb;
    if (strncmp(path, "demo/", 5) != 0 || stat(path, &sb) == 0) return;
    size_t n = strlen(err);
    snprintf(err + n, err_len - n,
             "\n---> HINT: the demo data (demo/tokenizer.json, demo/shards) is not part of the repository: make it "
             "with `make demo` (data, tokenizer, shards, then a training run), or by hand:\n"
             "    rrfp-mm demo-data --out demo/data\n"
             "    rrfp-mm tokenizer train --vocab 448 --manifest demo/data/train.json --out demo/tokenizer.json\n"
             "    rrfp-mm pack --manifest demo/data/train.json --images demo/data/images --tokenizer "
             "demo/tokenizer.json --out demo/shards\n"
             "    rrfp-mm pack --manifest demo/data/heldout.json --images demo/data/images --tokenizer "
             "demo/tokenizer.json --out demo/eval-shards");
}

/* The vocabulary (from data.tokenizer for shards) and the tokenizer's hash. */
static int trainer_vocab(const Recipe* r, int* vocab, uint64_t* tok_hash, char* err, size_t err_len) {
    *vocab = r->vocab;
    *tok_hash = 0;
    if (strcmp(r->source, "shards") != 0) return 0;
    Tokenizer* tok = tokenizer_load(r->tokenizer, err, err_len);
    if (!tok) {
        trainer_demo_hint(r->tokenizer, err, err_len);
        return -1;
    }
    int tv = tokenizer_vocab_size(tok);
    *tok_hash = tokenizer_hash(tok);
    tokenizer_free(tok);
    if (*vocab != 0 && *vocab < tv) {
        snprintf(err, err_len, "%s: model.vocab = %d but the tokenizer %s has %d tokens; allowed: 0 (= %d) or more (a "
                 "padded vocabulary, as Hugging Face checkpoints have)", recipe_origin(r, "model", "vocab"), *vocab,
                 r->tokenizer, tv, tv);
        return -1;
    }
    if (*vocab == 0) *vocab = tv; /* more: rows no token id reaches (an imported checkpoint's padding) */
    return 0;
}

/* The loader position of a checkpoint: the source's own position when every replica's was the same
 * (both sources: the synthetic one's is the step, the shard loader's counts the global step), else
 * {"dp": [replica 0's, ...]} (checkpoints of builds whose shard loader dealt samples to replicas). */
static int trainer_seek(Trainer* t, const char* dir, const char* pos, char* err, size_t err_len) {
    if (!pos || strncmp(pos, "{\"dp\":", 6) != 0) return t->src.seek(&t->src, pos, err, err_len);
    cJSON* j = cJSON_Parse(pos);
    const cJSON* a = j ? cJSON_GetObjectItemCaseSensitive(j, "dp") : NULL;
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    int rc = -1;
    if (n < 1) {
        snprintf(err, err_len, "%s: the loader position has a \"dp\" entry that is not a list of positions", dir);
    } else if (n != t->grid.dp) {
        snprintf(err, err_len,
                 "%s holds %d per-replica loader positions (written by a build whose shard loader dealt samples to "
                 "the replicas); they resume only under parallel.dp = %d, and only where this build's loader accepts "
                 "them (the parameters load under any layout: train.init_from starts a new run from them)", dir, n, n);
    } else {
        char* one = cJSON_PrintUnformatted(cJSON_GetArrayItem(a, t->grid.d));
        rc = t->src.seek(&t->src, one, err, err_len);
        free(one);
    }
    cJSON_Delete(j);
    return rc;
}

/* Every replica's loader position, as trainer_seek reads it (malloc'd). Collective over the DP group. */
static int trainer_position(Trainer* t, char** out, char* err, size_t err_len) {
    char* mine = t->src.position(&t->src);
    Comm* dp = t->grid.dp_group;
    if (dp->size == 1) {
        *out = mine;
        return 0;
    }
    enum { POS_MAX = 4096 };
    char* buf = callocCheck(1, POS_MAX);
    char* all = callocCheck((size_t)dp->size, POS_MAX);
    int rc = 0;
    if (mine && strlen(mine) >= POS_MAX) {
        snprintf(err, err_len, "internal: loader position of %zu bytes exceeds %d", strlen(mine), POS_MAX);
        rc = -1;
    } else {
        snprintf(buf, POS_MAX, "%s", mine ? mine : "null");
        rc = dp->ops->allgather(dp, buf, all, POS_MAX, err, err_len);
    }
    if (rc == 0) {
        int same = 1;
        for (int i = 1; i < dp->size; i++) same &= !strcmp(all, all + (size_t)i * POS_MAX);
        if (same) {
            *out = mine;
            mine = NULL;
        } else {
            size_t cap = (size_t)dp->size * (POS_MAX + 1) + 16, n = 0;
            char* s = mallocCheck(cap);
            n += (size_t)snprintf(s + n, cap - n, "{\"dp\":[");
            for (int i = 0; i < dp->size; i++)
                n += (size_t)snprintf(s + n, cap - n, "%s%s", i ? "," : "", all + (size_t)i * POS_MAX);
            snprintf(s + n, cap - n, "]}");
            *out = s;
        }
    }
    free(mine);
    free(buf);
    free(all);
    return rc;
}

/* A checkpoint's state (checked alone by checkpoint_load) against the recipe that resumes it: the seeds it
 * was trained with, a step inside train.steps, and a loader position at that same step. */
static int trainer_state_check(const Trainer* t, const char* dir, const CheckpointState* cs, const RunRecord* rec,
                               char* err, size_t err_len) {
    const Recipe* r = t->r;
    if (rec->seed != (uint64_t)r->seed || rec->data_seed != (uint64_t)r->data_seed) {
        snprintf(err, err_len, "%s/state.json: seed %llu, data_seed %llu, but this recipe has model.seed %lld, data.seed "
                 "%lld: not this run's checkpoint", dir, (unsigned long long)rec->seed,
                 (unsigned long long)rec->data_seed, (long long)r->seed, (long long)r->data_seed);
        return -1;
    }
    if (cs->step > r->steps) {
        snprintf(err, err_len, "%s/state.json: step %lld is past train.steps = %d (%s): not a step of this run",
                 dir, (long long)cs->step, r->steps, recipe_origin(r, "train", "steps"));
        return -1;
    }
    /* both sources count steps in their position ("synthetic_step", the shard loader's "steps") */
    cJSON* j = rec->loader ? cJSON_Parse(rec->loader) : NULL;
    const cJSON* at = j ? cJSON_GetObjectItemCaseSensitive(j, "synthetic_step") : NULL;
    if (j && !at) at = cJSON_GetObjectItemCaseSensitive(j, "steps");
    int rc = 0;
    if (at && (!cJSON_IsNumber(at) || at->valuedouble != (double)cs->step)) {
        snprintf(err, err_len, "%s/state.json: the loader position is at step %.17g, but \"step\" is %lld: the data "
                 "would not continue where the model stopped", dir, cJSON_IsNumber(at) ? at->valuedouble : -1.0,
                 (long long)cs->step);
        rc = -1;
    }
    cJSON_Delete(j);
    return rc;
}

static int trainer_resume(Trainer* t, int eval_only, int64_t* resume_step, char* err, size_t err_len) {
    const Recipe* r = t->r;
    char dir[RECIPE_STR + 64];
    if (!eval_only) {
        snprintf(dir, sizeof dir, "%s", t->start.resume_dir); /* decided by world rank 0 (rundir_prepare) */
    } else if (!strcmp(r->resume, "latest") || !strcmp(r->resume, "auto")) {
        char e[1024];
        if (rundir_latest(t->run_dir, t->ckpt_root, dir, sizeof dir, e, sizeof e) != 0) {
            snprintf(err, err_len, "checkpoint %s: %s", r->resume, e);
            return -1;
        }
    } else {
        snprintf(dir, sizeof dir, "%s", r->resume);
    }
    CheckpointState cs;
    if (!eval_only) {
        if (t->ex->load(t->ex, dir, &cs, err, err_len) != 0) return -1;
    } else {
        /* a reader takes the model as it is (an import too): the values only; an import's never-used tensors
         * that its source lacked keep their initialisation (one process: one stage) */
        char** absent = NULL;
        int n_absent = 0;
        if (trained_absent_tensors(dir, &absent, &n_absent, err, err_len) != 0) return -1;
        int lrc = checkpoint_load_model(dir, &t->ex->stages[0]->params, (const char* const*)absent, n_absent, &cs, err,
                                        err_len);
        trained_free_names(absent, n_absent);
        if (lrc != 0) {
            /* a run's checkpoint read with other model keys than it was trained with (a common first mistake:
             * trained with --set model.*, read without them): name them from the run's recipe.ini */
            char diff[2048], model[2048] = "";
            size_t m = 0;
            if (rundir_recipe_diff(r, t->run_dir, t->ckpt_root, dir, diff, sizeof diff) > 0)
                for (char* line = strtok(diff, "\n"); line; line = strtok(NULL, "\n"))
                    if (!strncmp(line + strspn(line, " "), "model.", 6) && m + strlen(line) + 2 < sizeof model)
                        m += (size_t)snprintf(model + m, sizeof model - m, "\n  %s", line + strspn(line, " "));
            if (m) {
                size_t n = strlen(err);
                snprintf(err + n, err_len - n,
                         "\nthe run that wrote it was trained with other model keys (its recipe.ini -> this recipe):%s\n"
                         "---> HINT: give this command the run's recipe (its recipe.ini) or the same --set values",
                         model);
            }
            return -1;
        }
    }
    /* the run's record in it, checked (runckpt.h) */
    char spath[RECIPE_STR + 80];
    snprintf(spath, sizeof spath, "%s/state.json", dir);
    RunRecord rec;
    if (runckpt_record_parse(spath, cs.record, &rec, err, err_len) != 0) {
        checkpoint_state_free(&cs);
        return -1;
    }
    int rc = 0;
    if (!eval_only && rec.recipe_hash != recipe_hash(r)) {
        char diff[2048];
        int nd = rundir_recipe_diff(r, t->run_dir, t->ckpt_root, dir, diff, sizeof diff);
        snprintf(err, err_len,
                 "%s was written by a run with recipe hash %016llx, this recipe hashes to %016llx: %s (keys marked "
                 "*(hashed)* in recipes/README.md change the math of a run):\n%s\n---> HINT: resume with the run's own "
                 "values, or start a new run from these parameters with train.init_from=%s and another train.run_dir",
                 dir, (unsigned long long)rec.recipe_hash, (unsigned long long)recipe_hash(r),
                 nd > 0 ? (nd == 1 ? "a hashed key differs" : "hashed keys differ")
                        : "a model, data, optimiser or seed key differs",
                 diff, dir);
        rc = -1;
    }
    if (rc == 0 && !eval_only) rc = trainer_state_check(t, dir, &cs, &rec, err, err_len);
    if (rc == 0 && !eval_only) rc = trainer_seek(t, dir, rec.loader, err, err_len);
    if (rc == 0) {
        t->step = cs.step;
        t->opt_step = cs.opt_step;
        /* samples seen (the epoch): the shard loader's global count where it was sought, which includes the
         * microbatches of a packing group handed out before the checkpoint (the position's "samples" is
         * the count at the group's start: the epoch went backwards on resume) */
        if (!eval_only && t->src.samples) {
            t->samples_seen = t->src.samples(&t->src);
        } else {
            cJSON* lj = rec.loader ? cJSON_Parse(rec.loader) : NULL;
            const cJSON* ns = lj ? cJSON_GetObjectItemCaseSensitive(lj, "samples") : NULL;
            t->samples_seen = cJSON_IsNumber(ns) ? (int64_t)ns->valuedouble : 0;
            cJSON_Delete(lj);
        }
        *resume_step = cs.step;
        if (!eval_only && t->ex->log_rank)
            fprintf(stderr, "rrfp-mm: resumed from %s at step %lld\n", dir, (long long)t->step);
    }
    runckpt_record_free(&rec);
    checkpoint_state_free(&cs);
    return rc;
}

/* Before anything is allocated: the run folder's lock (held by world rank 0 for the job's life), the
 * leftovers of killed checkpoint writers, and the memory this layout needs. Collective over world; every
 * rank returns the same verdict. */
static int trainer_start_checks(Trainer* t, const Backend* be, Comm* world, char* err, size_t err_len) {
    const Recipe* r = t->r;
    char e[1024] = "";
    int rc = 0;
    if (world->rank == 0) {
        t->lock_fd = guard_run_lock(t->run_dir, e, sizeof e);
        if (t->lock_fd < 0) rc = -1;
        /* and the checkpoint folder: another run folder's job in the same checkpoint.dir is refused */
        if (rc == 0 && guard_ckpt_lock(t->ckpt_root, t->run_dir, &t->ckpt_lock_fd, e, sizeof e) != 0) rc = -1;
        char removed[1024];
        int n = rc == 0 ? runckpt_clean_stale(t->ckpt_root, removed, sizeof removed) : 0;
        if (n > 0)
            fprintf(stderr, "rrfp-mm: removed %d unfinished checkpoint folder%s of killed runs in %s: %s\n", n,
                    n == 1 ? "" : "s", t->ckpt_root, removed);
        /* which run this is and where it starts: one decision, on the rank holding the lock */
        if (rc == 0 && rundir_prepare(r, t->run_dir, t->ckpt_root, &t->start, stderr, e, sizeof e) != 0) rc = -1;
        /* a fresh start that moved a used run folder aside moved its checkpoints/ (and the lock in it)
         * too: the new folder is locked again */
        if (rc == 0 && !guard_lock_current(t->ckpt_lock_fd, t->ckpt_root)) {
            guard_run_unlock(t->ckpt_lock_fd);
            if (guard_ckpt_lock(t->ckpt_root, t->run_dir, &t->ckpt_lock_fd, e, sizeof e) != 0) rc = -1;
        }
    }
    if (comm_bcast(world, &rc, sizeof rc, 0, err, err_len) != 0) return -1;
    if (rc != 0) {
        if (world->rank == 0) snprintf(err, err_len, "%s", e);
        else snprintf(err, err_len, "rank 0 refused to start (see its message)");
        return -1;
    }
    if (comm_bcast(world, &t->start, sizeof t->start, 0, err, err_len) != 0) return -1;
    TrainRankBytes b;
    if (train_rank_bytes(r, &t->mc, t->grid.p, &b, err, err_len) != 0) return -1;
    char detail[256], sw[32], sa[32], sx[32];
    train_fmt_bytes(sw, sizeof sw, b.weights + b.grads);
    train_fmt_bytes(sa, sizeof sa, b.adam);
    train_fmt_bytes(sx, sizeof sx, b.acts);
    snprintf(detail, sizeof detail,
             "pipeline rank %d: weights + grads %s, AdamW m + v %s, activations %s (see --dry-run)", t->grid.p, sw,
             sa, sx);
    return guard_memory(be, world, b.total, detail, r->allow_overcommit, err, err_len);
}

/* A value of /proc/self/status in KiB ("VmRSS", "VmHWM", "RssAnon"); -1 when unreadable. */
static long trainer_status_kib(const char* key) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') v = atol(line + n + 1);
    fclose(f);
    return v;
}

/* Tests only (RRFP_TEST_LOAD_PEAK set): the peak memory this rank reaches while train.init_from loads, over
 * what it held before, beside what the load needs (its stages' tensors and the largest of them): the reader
 * holds one tensor at a time, not the checkpoint's files (docs/engine.md "Safetensors files"). The peak
 * mark is reset first ("5" to /proc/self/clear_refs); "reset 0" says it could not be, and the growth is then
 * measured against the process's old peak. */
static void trainer_load_probe(const Trainer* t, int end, long* rss0, int* reset) {
    if (!getenv("RRFP_TEST_LOAD_PEAK")) return;
    if (!end) {
        FILE* f = fopen("/proc/self/clear_refs", "w");
        *reset = f && fputs("5", f) >= 0;
        if (f && fclose(f) != 0) *reset = 0;
        *rss0 = trainer_status_kib("VmRSS");
        return;
    }
    size_t stage = 0, largest = 0;
    for (int c = 0; c < t->ex->n_stages; c++) {
        const ParamTable* pt = &t->ex->stages[c]->params;
        for (int i = 0; i < pt->n; i++) {
            size_t b = pt->specs[i].numel * sizeof(float);
            stage += b;
            if (b > largest) largest = b;
        }
    }
    fprintf(stderr, "test: rank %d init_from peak growth %ld KiB (VmHWM %ld, RssAnon %ld, reset %d), stage tensors "
            "%zu KiB, largest tensor %zu KiB\n", t->grid.p, trainer_status_kib("VmHWM") - *rss0,
            trainer_status_kib("VmHWM"), trainer_status_kib("RssAnon"), *reset, stage / 1024, largest / 1024);
}

/* train.init_from: every rank loads its own stages' matching tensors; the log rank reports for the whole
 * model (the matching rule is by name and shape, so its report is what the ranks together did). Step 0,
 * fresh optimiser state: nothing else is read. */
static int trainer_init_from(Trainer* t, char* err, size_t err_len) {
    const Recipe* r = t->r;
    char e[1024];
    long rss0 = 0;
    int reset = 0;
    trainer_load_probe(t, 0, &rss0, &reset);
    for (int c = 0; c < t->ex->n_stages; c++)
        if (checkpoint_init_from(r->init_from, &t->ex->stages[c]->params, NULL, e, sizeof e) != 0) {
            snprintf(err, err_len, "%s: train.init_from = %s: %s", recipe_origin(r, "train", "init_from"), r->init_from, e);
            return -1;
        }
    trainer_load_probe(t, 1, &rss0, &reset);
    if (t->ex->log_rank) {
        ParamTable whole;
        model_params_register(&t->mc, 0, t->mc.Lt, &whole);
        int rc = checkpoint_init_from(r->init_from, &whole, stderr, e, sizeof e);
        params_free(&whole);
        if (rc != 0) {
            snprintf(err, err_len, "train.init_from = %s: %s", r->init_from, e);
            return -1;
        }
    }
    return 0;
}

/* RUN_DIR/recipe.ini: the recipe as trained (file + overrides, every key), loadable again; the report
 * page and a later `rrfp-mm eval` read it. Written atomically at every (re)start. */
static int trainer_write_recipe(const Trainer* t, char* err, size_t err_len) {
    char* text = NULL;
    size_t n = 0;
    FILE* f = open_memstream(&text, &n);
    if (!f) {
        snprintf(err, err_len, "cannot format the recipe: %s", strerror(errno));
        return -1;
    }
    fprintf(f, "; the recipe as trained: %s and its --set overrides, every key (rrfp-mm train)\n", t->r->path);
    recipe_print(t->r, f);
    fclose(f);
    char path[RECIPE_STR + 32];
    snprintf(path, sizeof path, "%s/recipe.ini", t->run_dir);
    int rc = rr_write_file_atomic(path, text, n);
    if (rc != 0) snprintf(err, err_len, "cannot write '%s': %s", path, strerror(errno));
    free(text);
    return rc;
}

int trainer_init(Trainer* t, const Recipe* r, Comm* world, int eval_only, char* err, size_t err_len) {
    memset(t, 0, sizeof *t);
    t->lock_fd = -1;
    t->ckpt_lock_fd = -1;
    t->r = r;
    int vocab;
    if (trainer_vocab(r, &vocab, &t->tok_hash, err, err_len) != 0) return -1;
    t->mc = train_model_config(r, vocab);
    if (model_config_check(&t->mc, err, err_len) != 0) return -1;
    if (r->tp > 1) {
        char e[1024];
        if (model_tp_check(&t->mc, r->tp, e, sizeof e) != 0) {
            snprintf(err, err_len, "%s: parallel.tp = %d: %s", recipe_origin(r, "parallel", "tp"), r->tp, e);
            return -1;
        }
    }
    if (r->freeze[0]) {
        char e[1024];
        if (model_freeze_check(&t->mc, r->freeze, NULL, e, sizeof e) != 0) {
            snprintf(err, err_len, "%s: train.freeze = %s: %s", recipe_origin(r, "train", "freeze"), r->freeze, e);
            return -1;
        }
    }
    char why[256];
    const Backend* be = backend_open(r->backend, why, sizeof why);
    if (!be) {
        snprintf(err, err_len, "%s: runtime.backend = %s: %s", recipe_origin(r, "runtime", "backend"), r->backend, why);
        return -1;
    }
    Precision prec;
    RR_ASSERT(precision_parse(r->precision, &prec) == 0); /* the recipe reader allowed only fp32 | bf16 */
    be = backend_with_precision(be, prec);
    if (eval_only && r->pp * r->tp * r->dp > 1) {
        snprintf(err, err_len, "evaluation runs in one process: add --set parallel.pp=1 (a checkpoint written under "
                 "any layout loads into any other)");
        return -1;
    }
    comm_set_stall_warn(r->stall_warn_s);
    char e[512];
    if (comm_grid_init(&t->grid, world, r->pp, r->tp, r->dp, e, sizeof e) != 0) {
        snprintf(err, err_len, "%s: parallel.pp = %d, parallel.tp = %d, parallel.dp = %d: %s",
                 recipe_origin(r, "parallel", "pp"), r->pp, r->tp, r->dp, e);
        const char* dpo = recipe_origin(r, "parallel", "dp");
        if (strcmp(dpo, "default") != 0 && world->size % (r->pp * r->tp) == 0) {
            size_t l = strlen(err);
            snprintf(err + l, err_len - l, "\n---> HINT: parallel.dp = %d is set (%s); without it the world size decides "
                     "(dp = %d / (pp %d x tp %d) = %d)", r->dp, dpo, world->size, r->pp, r->tp,
                     world->size / (r->pp * r->tp));
        }
        return -1;
    }
    /* this job's identity, which every file of its checkpoints carries (checkpoint_identity_meta) */
    t->run_id = checkpoint_new_run_id();
    if (comm_bcast(world, &t->run_id, sizeof t->run_id, 0, err, err_len) != 0) return -1;
    if (comm_grid_use_transport(&t->grid, r->comm, e, sizeof e) != 0) {
        snprintf(err, err_len, "%s: runtime.comm = %s: %s", recipe_origin(r, "runtime", "comm"), r->comm, e);
        return -1;
    }
    snprintf(t->run_dir, sizeof t->run_dir, "%s", r->run_dir);
    if (r->ckpt_dir[0]) snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s", r->ckpt_dir);
    else snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s/checkpoints", r->run_dir);
    if (!eval_only && trainer_mkdirs(t->run_dir, err, err_len) != 0) return -1;
    if (!eval_only && trainer_start_checks(t, be, world, err, err_len) != 0) return -1;

    /* tensor parallelism runs through the pipeline executor (one stage when pp = 1): its leader-decides
     * dispatch keeps the TP ranks of a stage on one task sequence */
    t->ex = r->pp > 1 || r->tp > 1 ? step_exec_pipeline_create(r, &t->mc, be, &t->grid, t->run_dir, err, err_len)
                      : step_exec_single_create(r, &t->mc, be, !eval_only, err, err_len);
    if (!t->ex) return -1;
    t->ex->log_rank = t->grid.rank == 0; /* one log and one metrics file per job */
    if (r->trace && !eval_only && r->pp == 1 && r->tp == 1 && t->ex->log_rank) /* said, not silently nothing */
        fprintf(stderr, "rrfp-mm: note: runtime.trace = true: the traces (RUN_DIR/trace-rank*.json) are written by "
                        "pipeline and tensor-parallel runs (parallel.pp or parallel.tp > 1); this one-stage run writes "
                        "none\n");
    /* the backend's own scratch (bf16 GEMM operands, the gradient norm's partial sums, cuDNN attention's
     * buffers) now, at the microbatch budget: no step allocates device memory (the activations and
     * messages are the executors' pools, filled in the first step) */
    for (int c = 0; c < t->ex->n_stages; c++) {
        const Stage* st = t->ex->stages[c];
        size_t gemm = st->be->precision == PRECISION_BF16 ? params_gemm_operand_elems(&st->params, r->microbatch_tokens, st->be->weight_dtype == DTYPE_BF16) : 0;
        AttnReserve attn[2];
        int n_attn = stage_attn_reserve(st, r->microbatch_tokens, r->microbatch_tokens, attn);
        /* each attention call with its storage (AttnReserve.act: 2-byte where the stage runs it on 2-byte activations,
         * lm_act_dtype / vit_act_dtype of the stage's configs), which sets what its scratch holds */
        st->be->dev->reserve(st->be, gemm, st->params.gtotal, attn, n_attn);
    }
    /* runtime.cuda_graphs: the tower's forward replayed as a graph per shape (runtime/model/vit_graph.c); not under
     * runtime.profile, which times each op apart */
    for (int c = 0; c < t->ex->n_stages; c++) t->ex->stages[c]->cuda_graphs = !strcmp(r->cuda_graphs, "auto") && !r->profile;
    /* DP: the gradient sum over the replicas at the step end (its buckets start early where the
     * executor reports chunks done) */
    int zero = r->zero && t->grid.dp > 1 && !eval_only; /* the distributed optimizer, set up after the load below */
    if (!zero && step_exec_add_dp_reduce(t->ex, t->grid.dp_group, r->dp_bucket_mb, r->dp_overlap, 600, err, err_len) != 0)
        return -1;
    /* tied embeddings under a pipeline: the first and last stage's gradients summed, after the DP reduction */
    if (step_exec_add_tied_embed(t->ex, &t->mc, r->pp > 1 ? t->grid.pipe : NULL, t->grid.p, r->pp, err, err_len) != 0)
        return -1;
    if (eval_only) {
        /* evaluation reads the values only: its executor has no moments (never allocated, so never a peak of
         * two more copies of the model), and a checkpoint written under another train.freeze (which has AdamW
         * state for other tensors) evaluates too */
        for (int c = 0; c < t->ex->n_stages; c++) RR_ASSERT(!t->ex->stages[c]->params.m && !t->ex->stages[c]->params.v);
    } else {
        int rc = !strcmp(r->source, "synthetic")
                     ? trainer_source_synthetic(&t->src, r, vocab, 0, t->grid.d, t->grid.dp, err, err_len)
                     : source_shards(&t->src, r, r->shards, t->tok_hash, 0, t->ex->decode_images, t->grid.d,
                                     t->grid.dp, 1, !t->ex->log_rank, err, err_len);
        if (rc != 0) {
            if (strcmp(r->source, "synthetic") != 0) trainer_demo_hint(r->shards, err, err_len);
            return -1;
        }
        if (strcmp(r->source, "synthetic") != 0) {
            /* what shaped the training data (template, image preprocessing, tokenizer): every checkpoint says */
            TrainedData d;
            if (trained_data_of_shards(r->shards, &d, err, err_len) != 0) return -1;
            snprintf(d.tokenizer, sizeof d.tokenizer, "%s", r->tokenizer);
            t->data_record = trained_data_json(&d);
        }
    }
    t->last_step = r->stop_at > 0 ? r->stop_at : r->steps;
    if (!eval_only && r->eval_every > 0) {
        /* the held-out stream, dealt to the replicas as training data is; fifo, so each evaluation is one
         * pass in stream order */
        int rc = !strcmp(r->source, "synthetic")
                     ? trainer_source_synthetic(&t->eval_src, r, vocab, 1, t->grid.d, t->grid.dp, err, err_len)
                     : source_shards(&t->eval_src, r, r->eval_shards, t->tok_hash, 1, t->ex->decode_images,
                                     t->grid.d, t->grid.dp, 1, !t->ex->log_rank, err, err_len);
        if (rc != 0) {
            size_t l = strlen(err);
            snprintf(err + l, err_len - l, " (data.eval_shards, for train.eval_every)");
            return -1;
        }
        t->eval_pos = t->eval_src.position(&t->eval_src);
        t->eval_target = r->eval_samples > 0 ? r->eval_samples
                         : t->eval_src.dataset_samples > 0 ? t->eval_src.dataset_samples : 256;
    }

    int64_t resume_step = 0;
    int resuming = eval_only ? r->resume[0] != 0 : t->start.resume_dir[0] != 0;
    if (resuming && trainer_resume(t, eval_only, &resume_step, err, err_len) != 0) return -1;
    /* a resumed run continues from its own checkpoint: init_from only starts a run */
    if (!resuming && !eval_only && r->init_from[0] && trainer_init_from(t, err, err_len) != 0) return -1;
    /* QLoRA under tensor parallelism: the NF4 slices of values written above (initialisation, a full-precision
     * init_from) quantised as the whole weights are (a QLoRA checkpoint's NF4 form was set as stored) */
    for (int c = 0; c < t->ex->n_stages; c++)
        if (stage_quant_finish(t->ex->stages[c], err, err_len) != 0) return -1;
    /* the distributed optimizer shards what was loaded (the moments of a resume read as its shard); a tied head's
     * gradient sum (the hook before it) must precede the reduce-scatter, so its stages start from the hook */
    if (zero && step_exec_add_zero(t->ex, t->grid.dp_group, r, r->dp_overlap && !(t->mc.tie_embeddings && r->pp > 1),
                                   resuming ? t->start.resume_dir : NULL, err, err_len) != 0)
        return -1;
    char mpath[RECIPE_STR + 32];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", t->run_dir);
    if (!eval_only && t->ex->log_rank && metrics_open(&t->metrics, mpath, resume_step, err, err_len) != 0) return -1;
    if (t->metrics.dropped[0]) rr_warn("%s", t->metrics.dropped);
    if (!eval_only && t->ex->log_rank && trainer_write_recipe(t, err, err_len) != 0) return -1;
    t->t_begin = rr_now();
    return 0;
}

/* RUN_DIR/dump-N/: config.json, weights[.<stage>].safetensors (before the step),
 * microbatch-{m}[.<stage>].safetensors (inputs; logits, loss_sum from the last stage),
 * grads[.<stage>].safetensors (the step's summed, unclipped gradients), step.json (loss, denominator,
 * lr, grad norm). Layout: docs/training.md "Step dumps". Every rank writes its own files; under DP,
 * replica 0 the weights and gradients (the same on every replica) and each replica its microbatches,
 * named by their index m x dp + d in the global step, so the files are the one-process dump's. */
static int trainer_dump_end(Trainer* t, const char* dir, const StepPlan* plan, double loss_sum, float loss, float lr,
                            double norm, char* err, size_t err_len) {
    /* DP: the gradients are the global sums on every replica after the all-reduce: replica 0 writes (the
     * distributed optimizer's shards gathered first) */
    if (t->ex->zero && step_exec_zero_dump_begin(t->ex->zero, 1, err, err_len) != 0) return -1;
    if (t->grid.d == 0 && t->ex->dump_params(t->ex, dir, 1, err, err_len) != 0) return -1;
    if (!t->ex->log_rank) return 0;
    char extra[512], path[RECIPE_STR + 128];
    snprintf(extra, sizeof extra,
             "{\"step\": %lld, \"microbatches\": %d, \"n_supervised\": %lld, \"loss\": %.9g, \"loss_hex\": \"%a\", "
             "\"loss_sum\": %.17g, \"lr\": %.9g, \"grad_norm\": %.17g}",
             (long long)(t->step + 1), plan->M * t->grid.dp, (long long)plan->n_supervised, (double)loss, (double)loss, loss_sum,
             (double)lr, norm);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (model_dump_config(&t->mc, extra, path, err, err_len) != 0) return -1;
    snprintf(path, sizeof path, "%s/step.json", dir);
    if (rr_write_file_atomic(path, extra, strlen(extra)) != 0) {
        snprintf(err, err_len, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The job's decision on the samples of the step just drawn from src whose images did not decode (data/loader.h,
 * "Images that do not decode"). Only some ranks decode pixels (the first pipeline stage's TP ranks; under DP
 * each replica its own microbatches), so what each of them found travels to every rank of the job before
 * any rank uses the step's shapes, as the TP leader's choices travel to its peers: every rank drops the
 * union (those of its replica from its microbatches, and counts them all, so the positions agree), and no
 * rank infers another's decision from data it did not see. One all-reduce of the largest count per step;
 * when a rank found one, a second of fixed-size records, each rank's in its own slot and zeros elsewhere,
 * so the sum is every rank's records. The log rank names each sample once. Collective over the world. */
enum { SKIP_WORDS = 5 + LOADER_WHY_MAX / 8 }; /* valid, replica, mb, slot, sample, the reason's bytes */
_Static_assert(LOADER_WHY_MAX % 8 == 0, "a skip record's reason fills whole int64 words");
static int trainer_agree_skips(Trainer* t, BatchSource* src, StepPlan* plan, char* err, size_t err_len) {
    if (!src->undecoded) return 0; /* the same source (and so the same answer) on every rank */
    const LoaderSkip* mine = NULL;
    int n_mine = src->undecoded(src, &mine), W = t->grid.pp * t->grid.tp * t->grid.dp;
    int64_t nmax = n_mine;
    char e[512];
    if (W > 1 && comm_grid_allreduce_all(&t->grid, &nmax, 1, COMM_I64, COMM_MAX, e, sizeof e) != 0) {
        snprintf(err, err_len, "step %lld: sharing the samples whose images did not decode: %s", (long long)(t->step + 1), e);
        return -1;
    }
    if (nmax == 0) return 0;
    size_t words = (size_t)W * (size_t)nmax * SKIP_WORDS;
    int64_t* buf = callocCheck(words, sizeof(int64_t));
    for (int i = 0; i < n_mine; i++) {
        int64_t* r = buf + ((size_t)t->grid.rank * (size_t)nmax + (size_t)i) * SKIP_WORDS;
        r[0] = 1, r[1] = mine[i].replica, r[2] = mine[i].mb, r[3] = mine[i].slot, r[4] = mine[i].sample;
        memcpy(r + 5, mine[i].why, LOADER_WHY_MAX);
    }
    if (W > 1 && comm_grid_allreduce_all(&t->grid, buf, words, COMM_I64, COMM_SUM, e, sizeof e) != 0) {
        snprintf(err, err_len, "step %lld: sharing the samples whose images did not decode: %s", (long long)(t->step + 1), e);
        free(buf);
        return -1;
    }
    LoaderSkip* all = callocCheck((size_t)W * (size_t)nmax, sizeof(LoaderSkip));
    int n = 0;
    for (size_t k = 0; k < (size_t)W * (size_t)nmax; k++) {
        const int64_t* r = buf + k * SKIP_WORDS;
        if (r[0] != 1) continue;
        all[n] = (LoaderSkip){.replica = (int)r[1], .mb = (int)r[2], .slot = (int)r[3], .sample = r[4]};
        memcpy(all[n].why, r + 5, LOADER_WHY_MAX);
        all[n].why[LOADER_WHY_MAX - 1] = 0;
        n++;
    }
    free(buf);
    int64_t before = src->skipped(src);
    int rc = src->drop(src, all, n, plan, err, err_len);
    if (rc == 0 && t->ex->log_rank) {
        /* once per sample: the first stage's TP ranks find the same ones (ranks in order, a sample's first) */
        int64_t k = before;
        for (int i = 0; i < n; i++) {
            int dup = 0;
            for (int j = 0; j < i && !dup; j++)
                dup = all[j].replica == all[i].replica && all[j].mb == all[i].mb && all[j].slot == all[i].slot;
            if (!dup) rr_warn("data: %s; skipped (%lld damaged so far)", all[i].why, (long long)++k);
        }
    }
    free(all);
    return rc;
}

/* train.eval_every: the held-out loss of the current parameters, through the step executor (so under
 * any layout) with loss scale 0: the gradients it leaves are zero and the next step zeroes them anyway;
 * the DP hooks run so that no bucket of it stays in flight. The training stream is not touched. Every
 * evaluation restarts the held-out stream: the same samples each time. Collective over the job. */
static int trainer_eval_loss(Trainer* t, double* out, char* err, size_t err_len) {
    StepExec* ex = t->ex;
    double bubble = ex->bubble; /* the training step's, for its metrics row */
    if (step_exec_check_compute(ex, err, err_len) != 0) return -1;
    if (t->eval_src.seek(&t->eval_src, t->eval_pos, err, err_len) != 0) return -1;
    double loss = 0;
    int64_t sup = 0, seen = 0;
    while (seen < t->eval_target) {
        StepPlan plan;
        if (t->eval_src.next(&t->eval_src, &plan, err, err_len) != 0 ||
            trainer_agree_skips(t, &t->eval_src, &plan, err, err_len) != 0)
            return -1;
        /* this replica's samples as its microbatches hold them (the masking below counts the same way) */
        int64_t mine = 0;
        for (int m = 0; m < plan.M; m++) mine += plan.mbs[m].S;
        int64_t tot[3] = {plan.n_supervised, mine, plan.M};
        if (comm_allreduce(t->grid.dp_group, tot, 3, COMM_I64, COMM_SUM, err, err_len) != 0) return -1;
        if (tot[2] == 0) break; /* nothing left in the held-out stream */
        for (int m = 0; m < plan.M; m++) plan.mbs[m].index = m * t->grid.dp + t->grid.d;
        /* Exactly the first eval_target samples of the stream, whatever the layout: the held-out stream
         * is packed in stream order (fifo), so in the global step's microbatch order (m x dp + d) the
         * samples are the stream's; the samples past the target lose their targets. */
        if (seen + tot[1] > t->eval_target) {
            int dp = t->grid.dp, M = plan.M;
            int64_t* mine = callocCheck((size_t)M, sizeof(int64_t));
            int64_t* all = callocCheck((size_t)M * (size_t)dp, sizeof(int64_t));
            for (int m = 0; m < M; m++) mine[m] = plan.mbs[m].S;
            int rc = dp > 1 ? t->grid.dp_group->ops->allgather(t->grid.dp_group, mine, all, (size_t)M * sizeof(int64_t),
                                                               err, err_len)
                            : (memcpy(all, mine, (size_t)M * sizeof(int64_t)), 0);
            int64_t before = seen; /* samples ahead of global microbatch g */
            for (int g = 0; rc == 0 && g < M * dp; g++) {
                int m = g / dp, d = g % dp;
                int64_t S = all[(size_t)d * (size_t)M + (size_t)m];
                if (d == t->grid.d) {
                    Microbatch* mb = &plan.mbs[m];
                    int64_t keep = t->eval_target - before;
                    keep = keep < 0 ? 0 : keep > S ? S : keep;
                    for (int u = mb->cu_seqlens[keep]; u < mb->T; u++)
                        if (mb->targets[u] != -100) mb->targets[u] = -100, mb->n_supervised--;
                }
                before += S;
            }
            free(mine);
            free(all);
            if (rc != 0) return -1;
            int64_t sups = 0;
            for (int m = 0; m < M; m++) sups += plan.mbs[m].n_supervised;
            tot[0] = sups;
            tot[1] = t->eval_target - seen;
            if (comm_allreduce(t->grid.dp_group, tot, 1, COMM_I64, COMM_SUM, err, err_len) != 0) return -1;
        }
        plan.n_supervised = tot[0];
        double ls = 0;
        ex->quiet = 1;
        int rc = ex->forward_backward(ex, &plan, 0.0f, (int)t->step, NULL, &ls, err, err_len);
        ex->quiet = 0;
        if (rc != 0 ||
            step_exec_run_hooks(ex, err, err_len) != 0 ||
            comm_allreduce(t->grid.dp_group, &ls, 1, COMM_F64, COMM_SUM, err, err_len) != 0)
            return -1;
        loss += ls;
        sup += tot[0];
        seen += tot[1];
    }
    ex->bubble = bubble;
    if (sup == 0) {
        snprintf(err, err_len, "train.eval_every: the held-out data has no supervised target (no assistant tokens)");
        return -1;
    }
    *out = loss / (double)sup;
    return 0;
}

/* What a step's model FLOPs depend on beyond its tokens and patches (the metrics row's "images", "attn_pairs",
 * "vit_attn_pairs": bench/gpu_train_flops.py): the tower images, the LM's causal attention pairs (l (l + 1) / 2
 * per sample of l positions) and the tower's (n^2 per image of n patches). out[3], of this rank's microbatches. */
static void trainer_step_shape(const StepPlan* plan, int64_t* out) {
    for (int m = 0; m < plan->M; m++) {
        const Microbatch* mb = &plan->mbs[m];
        for (int i = 0; i < mb->S; i++) {
            int64_t l = mb->cu_seqlens[i + 1] - mb->cu_seqlens[i];
            out[1] += l * (l + 1) / 2;
        }
        out[0] += mb->I;
        for (int j = 0; j < mb->I && mb->img_cu_patches; j++) {
            int64_t n = mb->img_cu_patches[j + 1] - mb->img_cu_patches[j];
            out[2] += n * n;
        }
    }
}

int trainer_step(Trainer* t, StepStats* s, char* err, size_t err_len) {
    const Recipe* r = t->r;
    StepExec* ex = t->ex;
    double t0 = rr_now();
    StepPlan plan;
    if (step_exec_check_compute(ex, err, err_len) != 0) return -1;
    if (t->src.next(&t->src, &plan, err, err_len) != 0 || trainer_agree_skips(t, &t->src, &plan, err, err_len) != 0)
        return -1;
    double t_data = rr_now() - t0;
    /* The global step: every replica's plan, summed before the first forward (the loss denominator). */
    int64_t tot[7] = {plan.n_supervised, plan.tokens, plan.patches, plan.samples, 0, 0, 0};
    trainer_step_shape(&plan, tot + 4);
    if (comm_allreduce(t->grid.dp_group, tot, 7, COMM_I64, COMM_SUM, err, err_len) != 0) return -1;
    plan.n_supervised = tot[0], plan.tokens = tot[1], plan.patches = tot[2], plan.samples = tot[3];
    if (plan.n_supervised <= 0) {
        snprintf(err, err_len, "step %lld has no supervised targets (no assistant tokens in any sample)",
                 (long long)(t->step + 1));
        return -1;
    }
    /* replica d's m-th microbatch is microbatch m x dp + d of the global step (both sources) */
    for (int m = 0; m < plan.M; m++) plan.mbs[m].index = m * t->grid.dp + t->grid.d;
    int dumping = r->dump_step == t->step + 1;
    char ddir[RECIPE_STR + 64];
    if (dumping) {
        snprintf(ddir, sizeof ddir, "%s/dump-%lld", t->run_dir, (long long)(t->step + 1));
        /* the distributed optimizer's bf16 masters whole for the dump's weights, until its end */
        if (trainer_mkdirs(ddir, err, err_len) != 0 || (ex->zero && step_exec_zero_dump_begin(ex->zero, 0, err, err_len) != 0) ||
            (t->grid.d == 0 && ex->dump_params(ex, ddir, 0, err, err_len) != 0))
            return -1;
        /* every rank (each replica too): the compute copies the step reads are the masters rounded */
        for (int c = 0; c < ex->n_stages; c++) {
            char name[96];
            int bad = params_verify_compute(&ex->stages[c]->params, name, sizeof name);
            if (bad) {
                snprintf(err, err_len, "step dump: %d tensor%s' bf16 compute copy differ%s from the f32 master rounded "
                         "to bf16, first %s", bad, bad == 1 ? "" : "s", bad == 1 ? "s" : "", name);
                return -1;
            }
        }
        if (ex->zero) step_exec_zero_dump_end(ex->zero);
    }

    if (r->profile && !t->profiling && ex->n_stages && ex->stages[0]->be->dev->profile) { /* from the first step on */
        ex->stages[0]->be->dev->profile(1);
        comm_grid_profile(&t->grid, 1); /* the communication kind */
        t->profiling = 1;
    }
    float scale = (float)(1.0 / (double)plan.n_supervised);
    double loss_sum = 0.0, norm = 0.0;
    for (int c = 0; c < ex->n_stages; c++) ex->stages[c]->n_recomputed = 0; /* this step's recomputed blocks */
    if (ex->forward_backward(ex, &plan, scale, (int)t->step + 1, dumping ? ddir : NULL, &loss_sum, err, err_len) != 0 ||
        step_exec_run_hooks(ex, err, err_len) != 0 || step_exec_grad_norm(ex, &norm, err, err_len) != 0 ||
        comm_allreduce(t->grid.dp_group, &loss_sum, 1, COMM_F64, COMM_SUM, err, err_len) != 0)
        return -1;
    float lr = lr_schedule_kind(r->lr_schedule, (int)t->step, r->warmup, r->steps, (float)r->lr, (float)r->min_lr);
    float loss = (float)(loss_sum / (double)plan.n_supervised);
    if (dumping && trainer_dump_end(t, ddir, &plan, loss_sum, loss, lr, norm, err, err_len) != 0) return -1;
    if (!isfinite(loss) || !isfinite(norm)) {
        snprintf(err, err_len, "step %lld: loss %g, grad norm %g: training diverged (lower optim.lr?)",
                 (long long)(t->step + 1), (double)loss, norm);
        return -1;
    }
    t->opt_step++;
    if (step_exec_optimizer(ex, r, lr, (int)t->opt_step, optim_clip_coef(norm, r->grad_clip), err, err_len) != 0)
        return -1;
    t->step++;
    /* runtime.profile: the step's figures now, before the clock stops: the take waits for the step's device
     * work, so the step time includes it (without profiling that tail is absorbed by the next step's first
     * wait; a take after the clock would hide it from every step) */
    BackendProfile prof;
    const Backend* dbe = ex->n_stages ? ex->stages[0]->be : NULL;
    if (t->profiling) {
        dbe->dev->profile_take(&prof);
        comm_grid_profile_take(&t->grid, &prof.ms[PROF_COMM], &prof.launches[PROF_COMM]); /* the device groups' */
    }
    double dt = rr_now() - t0;
    /* ETA from the steps timed in this process, leaving out the first (warm-up of caches, pages) */
    if (t->steps_timed++ > 0) t->time_timed += dt;
    double per = t->steps_timed > 1 ? t->time_timed / (double)(t->steps_timed - 1) : dt;

    t->samples_seen += plan.samples;
    memset(s, 0, sizeof *s);
    s->epoch = t->src.dataset_samples > 0 ? (double)t->samples_seen / (double)t->src.dataset_samples : -1;
    s->eval_loss = -1;
    s->step = t->step;
    s->loss = loss;
    s->lr = lr;
    s->grad_norm = norm;
    s->tokens = plan.tokens;
    s->supervised = plan.n_supervised;
    s->patches = plan.patches;
    s->samples = plan.samples, s->images = tot[4], s->attn_pairs = tot[5], s->vit_attn_pairs = tot[6];
    s->step_time_s = dt;
    s->tokens_per_s = (double)plan.tokens / dt;
    s->data_wait_s = t_data;
    s->peak_mem_mb = metrics_peak_rss_mb();
    s->eta_s = per * (double)(t->last_step - t->step);
    s->bubble = ex->bubble;
    for (int c = 0; c < ex->n_stages; c++) s->recomputed_blocks += ex->stages[c]->n_recomputed;
    s->skipped = t->src.skipped(&t->src);
    /* the device: this rank's backend (every stage of a rank shares it) */
    if (dbe && dbe->dev->memory) {
        BackendMemory mm;
        dbe->dev->memory(&mm);
        s->has_device = 1;
        s->device_peak_mb = (double)mm.peak_bytes / (1 << 20);
        for (int k = 0; k < MEM_TAGS; k++) s->device_peak_by_mb[k] = (double)mm.peak_by[k] / (1 << 20);
        s->device_used_mb = (double)(mm.device_total - mm.device_free) / (1 << 20);
    }
    if (t->profiling) {
        s->has_profile = 1;
        for (int k = 0; k < PROF_KINDS; k++) {
            s->prof_ms[k] = prof.ms[k];
            s->prof_launches[k] = prof.launches[k];
            if (t->steps_timed > 1) t->prof_ms[k] += prof.ms[k], t->prof_launches[k] += prof.launches[k];
        }
        if (t->steps_timed > 1) t->prof_steps++;
    }
    if (r->eval_every > 0 && (t->step % r->eval_every == 0 || t->step == t->last_step)) {
        if (trainer_eval_loss(t, &s->eval_loss, err, err_len) != 0) return -1;
        if (t->profiling) { /* the evaluation's device work is not the next step's: taken and left out */
            BackendProfile ev;
            dbe->dev->profile_take(&ev);
            comm_grid_profile_take(&t->grid, &ev.ms[PROF_COMM], &ev.launches[PROF_COMM]);
        }
    }
    /* a failed write stops the run at this step end, after a checkpoint (trainer_run) */
    if (ex->log_rank && !t->metrics.error[0]) metrics_write(&t->metrics, s, t->metrics.error, sizeof t->metrics.error);
    return 0;
}

/* runtime.profile: the mean per step of the steps after this process's first, one line per kind */
static void trainer_profile_summary(const Trainer* t, FILE* log) {
    if (!t->profiling || t->prof_steps == 0) return;
    double total = 0;
    for (int k = 0; k < PROF_KINDS; k++) total += t->prof_ms[k];
    fprintf(log, "profile (GPU time and launches per step, mean of steps 2..%lld of this process; rank %d):\n",
            (long long)(t->prof_steps + 1), t->grid.rank);
    for (int k = 0; k < PROF_KINDS; k++)
        fprintf(log, "  %-13s %9.3f ms %5.1f%% %8.1f launches\n", prof_kind_name(k), t->prof_ms[k] / t->prof_steps,
                total > 0 ? 100 * t->prof_ms[k] / total : 0.0, (double)t->prof_launches[k] / t->prof_steps);
    fprintf(log, "  %-13s %9.3f ms\n", "total", total / t->prof_steps);
}

/* DP replicas hold the same parameters and optimiser state: replica 0 writes the checkpoint (with every
 * replica's loader position) and tells the others how it went. */
int trainer_checkpoint(Trainer* t, char* err, size_t err_len) {
    CheckpointState cs = {.step = t->step, .opt_step = t->opt_step, .run = t->run_id};
    /* the layout as the executor writes it: one file pair for one process, one per (pp, tp, chunk) shard */
    if (t->r->pp > 1 || t->r->tp > 1)
        snprintf(cs.layout, sizeof cs.layout, "pp=%d tp=%d chunks=%d", t->r->pp, t->r->tp, t->r->chunks);
    snprintf(cs.run_id, sizeof cs.run_id, "%s", t->start.run_id);
    /* the run's record (runckpt.h); the data record is borrowed */
    RunRecord rec = {.recipe_hash = recipe_hash(t->r),
                     .seed = (uint64_t)t->r->seed,
                     .data_seed = (uint64_t)t->r->data_seed,
                     .data = t->data_record};
    if (trainer_position(t, &rec.loader, err, err_len) != 0) return -1;
    cs.record = runckpt_record_json(&rec, err, err_len);
    free(rec.loader);
    if (!cs.record) return -1;
    char out[RECIPE_STR + 64];
    int rc = 0;
    /* the distributed optimizer: the shards gathered into replica 0's host copies, the checkpoint zero = 0 writes */
    if (t->ex->zero && step_exec_zero_save_begin(t->ex->zero, err, err_len) != 0) {
        free(cs.record);
        return -1;
    }
    if (t->grid.d == 0) rc = t->ex->save(t->ex, t->ckpt_root, &cs, out, sizeof out, err, err_len);
    if (t->ex->zero) step_exec_zero_save_end(t->ex->zero);
    free(cs.record);
    if (t->grid.dp > 1) {
        char e[256];
        if (comm_bcast(t->grid.dp_group, &rc, sizeof rc, 0, e, sizeof e) != 0) {
            snprintf(err, err_len, "checkpoint step %lld: %s", (long long)t->step, e);
            return -1;
        }
        if (rc != 0 && t->grid.d != 0)
            snprintf(err, err_len, "data-parallel replica 0 could not write checkpoint step %lld", (long long)t->step);
    }
    if (rc == 0 && t->ex->log_rank) {
        runckpt_prune_run(t->ckpt_root, t->r->keep, t->start.run_id); /* this run's only */
        fprintf(stderr, "rrfp-mm: checkpoint %s\n", out);
    }
    return rc;
}

void trainer_free(Trainer* t) {
    if (t->metrics.f) {
        char e[1024];
        if (metrics_close(&t->metrics, e, sizeof e) != 0 && !t->metrics.error[0]) rr_warn("%s", e);
    }
    if (t->src.free) t->src.free(&t->src);
    if (t->eval_src.free) t->eval_src.free(&t->eval_src);
    free(t->eval_pos);
    t->eval_pos = NULL;
    free(t->data_record);
    t->data_record = NULL;
    if (t->ex) {
        step_exec_free_hooks(t->ex);
        t->ex->free(t->ex);
    }
    t->ex = NULL;
    comm_grid_free(&t->grid);
    guard_run_unlock(t->lock_fd);
    t->lock_fd = -1;
    guard_run_unlock(t->ckpt_lock_fd);
    t->ckpt_lock_fd = -1;
}

/* RUN_DIR/rank-R.json: what this rank of the job did (its grid coordinates, its model chunks, images it
 * decoded, its peak memory), written atomically at the end of the run by every rank. */
static int trainer_rank_summary(const Trainer* t, char* err, size_t err_len) {
    char path[RECIPE_STR + 64], js[1024];
    size_t o = (size_t)snprintf(js, sizeof js,
                                "{\"rank\": %d, \"p\": %d, \"t\": %d, \"d\": %d, \"executor\": \"%s\", \"steps\": %lld, "
                                "\"images_decoded\": %lld, \"decode_images\": %s, \"peak_mem_mb\": %.1f, \"layers\": [",
                                t->grid.rank, t->grid.p, t->grid.t, t->grid.d, t->ex->name, (long long)t->step,
                                (long long)(t->src.images_decoded ? t->src.images_decoded((BatchSource*)&t->src) : 0),
                                t->ex->decode_images ? "true" : "false", metrics_peak_rss_mb());
    for (int c = 0; c < t->ex->n_stages && o < sizeof js; c++)
        o += (size_t)snprintf(js + o, sizeof js - o, "%s[%d, %d]", c ? ", " : "", t->ex->stages[c]->l0, t->ex->stages[c]->l1);
    if (o < sizeof js) snprintf(js + o, sizeof js - o, "]}\n");
    snprintf(path, sizeof path, "%s/rank-%d.json", t->run_dir, t->grid.rank);
    if (rr_write_file_atomic(path, js, strlen(js)) != 0) {
        snprintf(err, err_len, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int trainer_run(const Recipe* r, Comm* world, FILE* log, const volatile sig_atomic_t* stop, char* err,
                size_t err_len) {
    int threads = guard_threads(r, world);
    trainer_set_threads(threads);
    Trainer* t = callocCheck(1, sizeof *t);
    if (trainer_init(t, r, world, 0, err, err_len) != 0) {
        trainer_free(t);
        free(t);
        return -1;
    }
    FILE* devnull = NULL;
    if (!t->ex->log_rank) log = devnull = fopen("/dev/null", "w"); /* one log: the log rank's */
    ModelParamCounts pc;
    model_param_counts(&t->mc, &pc);
    char decode[48] = "no image decoding";
    if (strcmp(r->source, "synthetic") != 0) {
        int w = guard_data_workers(r);
        snprintf(decode, sizeof decode, "%d decode thread%s", w, w == 1 ? "" : "s");
    }
    fprintf(log, "train %s: layout pp %d x tp %d x dp %d = %d rank%s (parallel.dp from %s), %.2fM parameters (vision "
                 "%.2fM, projector %.2fM, text %.2fM), V %d, source %s, "
                 "%d microbatches x %d tokens, %s, %d thread%s per rank, %s%s, steps %lld..%lld of %d, run %s\n",
            r->path, r->pp, r->tp, r->dp, world->size, world->size == 1 ? "" : "s", recipe_origin(r, "parallel", "dp"),
            pc.total / 1e6, pc.vision / 1e6, pc.projector / 1e6, pc.text / 1e6, t->mc.V, t->src.name,
            r->microbatches, r->microbatch_tokens, t->ex->name, threads, threads == 1 ? "" : "s", decode,
            r->workers ? "" : " (data.workers = 0: automatic)", (long long)t->step + 1, (long long)t->last_step,
            r->steps, t->run_dir);
    if (r->freeze[0]) {
        ParamTable whole;
        model_params_register(&t->mc, 0, t->mc.Lt, &whole);
        size_t trainable = model_params_freeze(&whole, r->freeze);
        fprintf(log, "freeze %s: %.2fM of %.2fM parameters train (no gradient, AdamW state or update for the rest)\n",
                r->freeze, (double)trainable / 1e6, (double)whole.total / 1e6);
        params_free(&whole);
    }
    fflush(log);
    int rc = 0;
    while (t->step < t->last_step) {
        StepStats s;
        rr_test_pause("RRFP_TEST_STEP_SLEEP_MS"); /* tests only (fault tests): a step made long enough to aim at */
        if (trainer_step(t, &s, err, err_len) != 0) {
            rc = -1;
            break;
        }
        if (t->grid.dp > 1 && s.step == 1 && t->ex->log_rank && t->ex->zero) {
            size_t total, shard, masters;
            step_exec_zero_sizes(t->ex->zero, 0, &total, &shard, &masters);
            fprintf(stderr, "rrfp-mm: distributed optimizer: %d replicas, rank 0 holds AdamW moments of %zu of its "
                    "stage's %zu trainable values and %zu f32 masters; gradients reduce-scattered, %d stage(s) started "
                    "while the backward still ran (step 1)\n", t->grid.dp, shard, total, masters,
                    step_exec_zero_early(t->ex->zero));
        } else if (t->grid.dp > 1 && s.step == 1 && t->ex->log_rank) {
            int nb, early;
            step_exec_dp_stats(t->ex, &nb, &early);
            fprintf(stderr, "rrfp-mm: data parallel: %d replicas, gradient all-reduce in %d bucket(s) of <= %g MiB, "
                    "%d started while the backward still ran (step 1)\n", t->grid.dp, nb, r->dp_bucket_mb,
                    early);
        }
        /* the first step that waited for data says what to change, once a run */
        if (metrics_data_bound(&s) && !t->data_bound_said && t->ex->log_rank) {
            t->data_bound_said = 1;
            rr_warn("step %lld waited %.3f s of its %.3f s (%.0f%%) for the loader: %d decode thread%s (data.workers%s; "
                    "this process may run on %d cores); more decode ahead (the log's \"data wait\" marks such steps)",
                    (long long)s.step, s.data_wait_s, s.step_time_s, 100 * s.data_wait_s / s.step_time_s,
                    guard_data_workers(r), guard_data_workers(r) == 1 ? "" : "s", r->workers ? "" : " = 0: automatic",
                    guard_cores());
        }
        if (t->step % r->log_every == 0 || t->step == t->last_step || t->step == 1 || s.eval_loss >= 0) {
            char line[512];
            metrics_log_line(line, sizeof line, &s, r->steps);
            errno = 0;
            int bad = fprintf(log, "%s\n", line) < 0;
            bad |= fflush(log) != 0;
            if ((bad || ferror(log)) && !t->metrics.error[0])
                snprintf(t->metrics.error, sizeof t->metrics.error, "cannot write the log (standard output) at step "
                         "%lld: %s", (long long)t->step, strerror(errno ? errno : EIO));
        }
        int ck = (r->checkpoint_every > 0 && t->step % r->checkpoint_every == 0) ||
                 (t->step == t->last_step && r->checkpoint_every >= 0);
        /* A signal reaches the ranks at different instants: every rank stops at the same step end, the
         * first at which any rank has seen one (an all-reduce MAX over the job: over NCCL with
         * runtime.comm = nccl, comm_grid_allreduce_all). */
        /* the rows up to this step on the disk before a checkpoint of it can be (a failure is the metrics
         * file's: the job stops below, after the checkpoint) */
        if ((ck || (stop && *stop)) && t->ex->log_rank && !t->metrics.error[0])
            metrics_sync(&t->metrics, t->step, t->metrics.error, sizeof t->metrics.error);
        /* 2: a rank could not write the metrics or the log: every rank stops here too, after a checkpoint
         * where one can still be written, and the job fails naming the file */
        int stopping = t->metrics.error[0] ? 2 : stop && *stop;
        if (world->size > 1 && comm_grid_allreduce_all(&t->grid, &stopping, 1, COMM_I32, COMM_MAX, err, err_len) != 0) {
            rc = -1;
            break;
        }
        if ((ck || stopping) && trainer_checkpoint(t, err, err_len) != 0) {
            /* A checkpoint that cannot be written (a full disk) stops the run at this step end: training on
             * for hours with nothing saved would lose them at the next failure. Nothing of the failed one is
             * kept (its temporary folder is removed), the checkpoints before it are untouched, and the error
             * says which one a resume starts from (docs/reliability.md "Nothing lost on write errors"). */
            char ck_err[1024], prev[RECIPE_STR + 64] = "", e2[256];
            snprintf(ck_err, sizeof ck_err, "%s", err);
            if (t->ex->log_rank && rundir_latest(t->run_dir, t->ckpt_root, prev, sizeof prev, e2, sizeof e2) != 0)
                prev[0] = 0;
            char then[RECIPE_STR + 160];
            if (!t->ex->log_rank) snprintf(then, sizeof then, "the log rank names the last complete checkpoint");
            else if (prev[0]) snprintf(then, sizeof then, "the last complete checkpoint is %s (resume with --resume "
                                       "latest once there is room)", prev);
            else snprintf(then, sizeof then, "no checkpoint of this run was written before it");
            if (stopping == 2 && t->metrics.error[0])
                snprintf(err, err_len, "%s; the checkpoint of step %lld could not be written either: %s; %s",
                         t->metrics.error, (long long)t->step, ck_err, then);
            else
                snprintf(err, err_len, "the checkpoint of step %lld could not be written: %s; stopped after step "
                         "%lld; %s", (long long)t->step, ck_err, (long long)t->step, then);
            rc = -1;
            break;
        }
        if (stopping == 2) {
            if (t->metrics.error[0])
                snprintf(err, err_len, "%s; stopped after step %lld with checkpoint %s/step-%08lld (resume with "
                         "--resume latest once the file can be written)", t->metrics.error, (long long)t->step,
                         t->ckpt_root, (long long)t->step);
            else
                snprintf(err, err_len, "stopped after step %lld with a checkpoint: the log rank could not write the "
                         "metrics or the log (its message names the file)", (long long)t->step);
            rc = -1;
            break;
        }
        if (stopping && t->step < t->last_step) {
            char dir[RECIPE_STR + 64];
            snprintf(dir, sizeof dir, "%s/step-%08lld", t->ckpt_root, (long long)t->step);
            fprintf(log,
                    "stopped by a signal after step %lld of %lld: checkpoint %s saved (parameters, AdamW state, data "
                    "position); resume with --resume auto (or latest)\n",
                    (long long)t->step, (long long)t->last_step, dir);
            fflush(log);
            rc = 1;
            break;
        }
    }
    /* the last step's device work (the optimizer's kernels on a replica that wrote no checkpoint) ends
     * before the time is taken and the memory is freed */
    for (int c = 0; rc == 0 && t->ex && c < t->ex->n_stages; c++) t->ex->stages[c]->be->dev->synchronize(t->ex->stages[c]->be);
    if ((rc == 0 || rc == 1) && t->ex && t->ex->finish && t->ex->finish(t->ex, err, err_len) != 0) rc = -1;
    if ((rc == 0 || rc == 1) && t->metrics.f && metrics_close(&t->metrics, err, err_len) != 0) rc = -1;
    if (rc == 0) rc = trainer_rank_summary(t, err, err_len);
    if (rc == 0 && t->ex->zero && t->ex->log_rank) {
        long rounds, in_fwd, late, flight;
        step_exec_zero_gather_stats(t->ex->zero, &rounds, &in_fwd, &late, &flight);
        fprintf(stderr, "rrfp-mm: distributed optimizer: the updated weights all-gathered in %ld round(s), %ld completed "
                "inside the next step's forward, %ld of them after a stage's first LM block ran (%ld still in flight when "
                "needed)%s\n", rounds, in_fwd, late, flight,
                r->dp_overlap ? "" : "; parallel.dp_overlap = 0: at the step end");
    }
    if (rc == 0) trainer_profile_summary(t, log);
    if (rc == 0)
        fprintf(log, "done: %lld steps in %.1f s; metrics %s\n", (long long)t->step, rr_now() - t->t_begin,
                t->metrics.path);
    trainer_free(t);
    free(t);
    if (devnull) fclose(devnull);
    return rc;
}
