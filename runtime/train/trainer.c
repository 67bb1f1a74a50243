/* trainer.c — the training loop (see trainer.h). Nothing here knows whether a step is pipelined: the
 * step executor (exec.h) runs it. */
#include "runtime/train/trainer.h"
#include "runtime/train/optim.h"

#include <errno.h>
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
                           .heldout = heldout,
                           .dp_rank = dp_rank,
                           .dp_size = dp_size};
    return batch_source_synthetic(src, &c, vocab, err, err_len);
}

int trainer_source_shards(BatchSource* src, const Recipe* r, const char* shards, uint64_t tok_hash, int eval,
                          int decode_images, int dp_rank, int dp_size, char* err, size_t err_len) {
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
    c.dp_rank = dp_rank;
    c.dp_size = dp_size;
    c.fatal_errors = !strcmp(r->on_error, "fatal");
    c.skip_oversize = 0;
    c.decode_images = decode_images;
    return batch_source_shards(src, &c, err, err_len);
}

/* ------------------------------------------------------------------------------------------------
 * the trainer */

static int trainer_mkdirs(const char* path, char* err, size_t err_len) {
    if (rr_mkdirs(path) == 0) return 0;
    snprintf(err, err_len, "cannot create folder '%s': %s", path, strerror(errno));
    return -1;
}

/* The vocabulary (from data.tokenizer for shards) and the tokenizer's hash. */
static int trainer_vocab(const Recipe* r, int* vocab, uint64_t* tok_hash, char* err, size_t err_len) {
    *vocab = r->vocab;
    *tok_hash = 0;
    if (strcmp(r->source, "shards") != 0) return 0;
    Tokenizer* tok = tokenizer_load(r->tokenizer, err, err_len);
    if (!tok) return -1;
    int tv = tokenizer_vocab_size(tok);
    *tok_hash = tokenizer_hash(tok);
    tokenizer_free(tok);
    if (*vocab != 0 && *vocab != tv) {
        snprintf(err, err_len, "%s: model.vocab = %d but the tokenizer %s has %d tokens; allowed: 0 or %d",
                 recipe_origin(r, "model", "vocab"), *vocab, r->tokenizer, tv, tv);
        return -1;
    }
    *vocab = tv;
    return 0;
}

/* The loader position of a checkpoint: the source's own position when every replica's was the same
 * (always for the synthetic source, whose position is the step), else {"dp": [replica 0's, ...]}. */
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
                 "%s was written with parallel.dp = %d and its replicas' loader positions differ (the shard loader "
                 "deals each epoch's samples to the replicas by rank); it resumes only with parallel.dp = %d (the "
                 "parameters load under any layout: start a new run from them with checkpoint.resume and the same dp)",
                 dir, n, n);
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

static int trainer_resume(Trainer* t, int eval_only, int64_t* resume_step, char* err, size_t err_len) {
    const Recipe* r = t->r;
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
    if (t->ex->load(t->ex, dir, &cs, err, err_len) != 0) return -1;
    int rc = 0;
    if (!eval_only && cs.recipe_hash != recipe_hash(r)) {
        snprintf(err, err_len,
                 "%s was written by a run with recipe hash %016llx, this recipe hashes to %016llx: a model, data, "
                 "optimiser or seed key differs (keys marked *(hashed)* in recipes/README.md)",
                 dir, (unsigned long long)cs.recipe_hash, (unsigned long long)recipe_hash(r));
        rc = -1;
    }
    if (rc == 0 && !eval_only) rc = trainer_seek(t, dir, cs.loader, err, err_len);
    if (rc == 0) {
        t->step = cs.step;
        t->opt_step = cs.opt_step;
        *resume_step = cs.step;
        if (!eval_only && t->ex->log_rank)
            fprintf(stderr, "rrfp-mm: resumed from %s at step %lld\n", dir, (long long)t->step);
    }
    checkpoint_state_free(&cs);
    return rc;
}

int trainer_init(Trainer* t, const Recipe* r, Comm* world, int eval_only, char* err, size_t err_len) {
    memset(t, 0, sizeof *t);
    t->r = r;
    int vocab;
    if (trainer_vocab(r, &vocab, &t->tok_hash, err, err_len) != 0) return -1;
    t->mc = train_model_config(r, vocab);
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
    if (r->tp > 1) {
        snprintf(err, err_len, "%s: parallel.tp = %d: tensor parallelism is not built yet (docs/parallel.md); "
                 "allowed: 1", recipe_origin(r, "parallel", "tp"), r->tp);
        return -1;
    }
    if (eval_only && r->pp * r->tp * r->dp > 1) {
        snprintf(err, err_len, "evaluation runs in one process: add --set parallel.pp=1 (a checkpoint written under "
                 "any layout loads into any other)");
        return -1;
    }
    char e[512];
    if (comm_grid_init(&t->grid, world, r->pp, r->tp, r->dp, e, sizeof e) != 0) {
        snprintf(err, err_len, "%s: parallel.pp = %d, parallel.tp = %d, parallel.dp = %d: %s",
                 recipe_origin(r, "parallel", "pp"), r->pp, r->tp, r->dp, e);
        return -1;
    }
    snprintf(t->run_dir, sizeof t->run_dir, "%s", r->run_dir);
    if (r->ckpt_dir[0]) snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s", r->ckpt_dir);
    else snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s/checkpoints", r->run_dir);
    if (!eval_only && trainer_mkdirs(t->run_dir, err, err_len) != 0) return -1;

    t->ex = r->pp > 1 ? step_exec_pipeline_create(r, &t->mc, be, &t->grid, t->run_dir, err, err_len)
                      : step_exec_single_create(r, &t->mc, be, err, err_len);
    if (!t->ex) return -1;
    t->ex->log_rank = t->grid.rank == 0; /* one log and one metrics file per job */
    /* DP: the gradient sum over the replicas at the step end (its buckets start early where the
     * executor reports chunks done) */
    if (step_exec_add_dp_reduce(t->ex, t->grid.dp_group, r->dp_bucket_mb, 600, err, err_len) != 0) return -1;
    if (!eval_only) {
        int rc = !strcmp(r->source, "synthetic")
                     ? trainer_source_synthetic(&t->src, r, vocab, 0, t->grid.d, t->grid.dp, err, err_len)
                     : trainer_source_shards(&t->src, r, r->shards, t->tok_hash, 0, t->ex->decode_images, t->grid.d,
                                             t->grid.dp, err, err_len);
        if (rc != 0) return -1;
    }
    t->last_step = r->stop_at > 0 ? r->stop_at : r->steps;

    int64_t resume_step = 0;
    if (r->resume[0] && trainer_resume(t, eval_only, &resume_step, err, err_len) != 0) return -1;
    char mpath[RECIPE_STR + 32];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", t->run_dir);
    if (!eval_only && t->ex->log_rank && metrics_open(&t->metrics, mpath, resume_step, err, err_len) != 0) return -1;
    t->t_begin = rr_now();
    return 0;
}

/* RUN_DIR/dump-N/: config.json, weights[.<stage>].safetensors (before the step),
 * microbatch-{m}[.<stage>].safetensors (inputs; logits, loss_sum from the last stage),
 * grads[.<stage>].safetensors (the step's summed, unclipped gradients), step.json (loss, denominator,
 * lr, grad norm). Layout: docs/training.md "Step dumps". Every rank writes its own files. */
static int trainer_dump_end(Trainer* t, const char* dir, const StepPlan* plan, double loss_sum, float loss, float lr,
                            double norm, char* err, size_t err_len) {
    if (t->ex->dump_params(t->ex, dir, 1, err, err_len) != 0) return -1;
    if (!t->ex->log_rank) return 0;
    char extra[512], path[RECIPE_STR + 128];
    snprintf(extra, sizeof extra,
             "{\"step\": %lld, \"microbatches\": %d, \"n_supervised\": %lld, \"loss\": %.9g, \"loss_hex\": \"%a\", "
             "\"loss_sum\": %.17g, \"lr\": %.9g, \"grad_norm\": %.17g}",
             (long long)(t->step + 1), plan->M, (long long)plan->n_supervised, (double)loss, (double)loss, loss_sum,
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

int trainer_step(Trainer* t, StepStats* s, char* err, size_t err_len) {
    const Recipe* r = t->r;
    StepExec* ex = t->ex;
    double t0 = rr_now();
    StepPlan plan;
    if (t->src.next(&t->src, &plan, err, err_len) != 0) return -1;
    double t_data = rr_now() - t0;
    /* The global step: every replica's plan, summed before the first forward (the loss denominator). */
    int64_t tot[4] = {plan.n_supervised, plan.tokens, plan.patches, plan.samples};
    if (comm_allreduce(t->grid.dp_group, tot, 4, COMM_I64, COMM_SUM, err, err_len) != 0) return -1;
    plan.n_supervised = tot[0], plan.tokens = tot[1], plan.patches = tot[2], plan.samples = tot[3];
    if (plan.n_supervised <= 0) {
        snprintf(err, err_len, "step %lld has no supervised targets (no assistant tokens in any sample)",
                 (long long)(t->step + 1));
        return -1;
    }
    int dumping = r->dump_step == t->step + 1;
    char ddir[RECIPE_STR + 64];
    if (dumping) {
        snprintf(ddir, sizeof ddir, "%s/dump-%lld", t->run_dir, (long long)(t->step + 1));
        if (trainer_mkdirs(ddir, err, err_len) != 0 || ex->dump_params(ex, ddir, 0, err, err_len) != 0) return -1;
    }

    float scale = (float)(1.0 / (double)plan.n_supervised);
    double loss_sum = 0.0, norm = 0.0;
    if (ex->forward_backward(ex, &plan, scale, (int)t->step + 1, dumping ? ddir : NULL, &loss_sum, err, err_len) != 0 ||
        step_exec_run_hooks(ex, err, err_len) != 0 || step_exec_grad_norm(ex, &norm, err, err_len) != 0 ||
        comm_allreduce(t->grid.dp_group, &loss_sum, 1, COMM_F64, COMM_SUM, err, err_len) != 0)
        return -1;
    float lr = lr_schedule((int)t->step, r->warmup, r->steps, (float)r->lr, (float)r->min_lr);
    float loss = (float)(loss_sum / (double)plan.n_supervised);
    if (dumping && trainer_dump_end(t, ddir, &plan, loss_sum, loss, lr, norm, err, err_len) != 0) return -1;
    if (!isfinite(loss) || !isfinite(norm)) {
        snprintf(err, err_len, "step %lld: loss %g, grad norm %g: training diverged (lower optim.lr?)",
                 (long long)(t->step + 1), (double)loss, norm);
        return -1;
    }
    t->opt_step++;
    step_exec_optimizer(ex, r, lr, (int)t->opt_step, optim_clip_coef(norm, r->grad_clip));
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
    s->bubble = ex->bubble;
    s->skipped = t->src.skipped(&t->src);
    if (ex->log_rank) metrics_write(&t->metrics, s);
    return 0;
}

/* DP replicas hold the same parameters and optimiser state: replica 0 writes the checkpoint (with every
 * replica's loader position) and tells the others how it went. */
int trainer_checkpoint(Trainer* t, char* err, size_t err_len) {
    CheckpointState cs = {.step = t->step,
                          .opt_step = t->opt_step,
                          .recipe_hash = recipe_hash(t->r),
                          .seed = (uint64_t)t->r->seed,
                          .data_seed = (uint64_t)t->r->data_seed};
    if (trainer_position(t, &cs.loader, err, err_len) != 0) return -1;
    char out[RECIPE_STR + 64];
    int rc = 0;
    if (t->grid.d == 0) rc = t->ex->save(t->ex, t->ckpt_root, &cs, out, sizeof out, err, err_len);
    free(cs.loader);
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
        checkpoint_prune(t->ckpt_root, t->r->keep);
        fprintf(stderr, "rrfp-mm: checkpoint %s\n", out);
    }
    return rc;
}

void trainer_free(Trainer* t) {
    if (t->metrics.f) metrics_close(&t->metrics);
    if (t->src.free) t->src.free(&t->src);
    if (t->ex) {
        step_exec_free_hooks(t->ex);
        t->ex->free(t->ex);
    }
    t->ex = NULL;
    comm_grid_free(&t->grid);
}

/* Threads per rank: runtime.threads, or the cores of this machine shared by the ranks on it. */
static int trainer_threads(const Recipe* r, Comm* world) {
    if (r->threads > 0 || world->size == 1) return r->threads;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char* all = callocCheck((size_t)world->size, sizeof host);
    char err[256];
    int local = 1;
    if (world->ops->allgather(world, host, all, sizeof host, err, sizeof err) == 0) {
        local = 0;
        for (int i = 0; i < world->size; i++) local += !strcmp(all + (size_t)i * sizeof host, host);
    }
    free(all);
    int n = (int)(cores / (local > 0 ? local : 1));
    return n < 1 ? 1 : n;
}

int trainer_run(const Recipe* r, Comm* world, FILE* log, char* err, size_t err_len) {
    trainer_set_threads(trainer_threads(r, world));
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
    fprintf(log, "train %s: %.2fM parameters (vision %.2fM, projector %.2fM, text %.2fM), V %d, source %s, "
                 "%d microbatches x %d tokens, %s, steps %lld..%lld of %d, run %s\n",
            r->path, pc.total / 1e6, pc.vision / 1e6, pc.projector / 1e6, pc.text / 1e6, t->mc.V, t->src.name,
            r->microbatches, r->microbatch_tokens, t->ex->name, (long long)t->step + 1, (long long)t->last_step,
            r->steps, t->run_dir);
    fflush(log);
    int rc = 0;
    while (t->step < t->last_step) {
        StepStats s;
        if (trainer_step(t, &s, err, err_len) != 0) {
            rc = -1;
            break;
        }
        if (t->grid.dp > 1 && s.step == 1 && t->ex->log_rank) {
            int nb, early;
            step_exec_dp_stats(t->ex, &nb, &early);
            fprintf(stderr, "rrfp-mm: data parallel: %d replicas, gradient all-reduce in %d bucket(s) of <= %g MiB, "
                    "%d started while the backward still ran (step 1)\n", t->grid.dp, nb, r->dp_bucket_mb,
                    early);
        }
        if (t->step % r->log_every == 0 || t->step == t->last_step || t->step == 1) {
            char line[512];
            metrics_log_line(line, sizeof line, &s, r->steps);
            fprintf(log, "%s\n", line);
            fflush(log);
        }
        int ck = (r->checkpoint_every > 0 && t->step % r->checkpoint_every == 0) || t->step == t->last_step;
        if (ck && trainer_checkpoint(t, err, err_len) != 0) {
            rc = -1;
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
