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
#include "text/tokenizer.h"

void trainer_set_threads(int n) { cpu_set_num_threads(n); }

/* ------------------------------------------------------------------------------------------------
 * batch sources from the recipe */

int trainer_source_synthetic(BatchSource* src, const Recipe* r, int vocab, int heldout, char* err, size_t err_len) {
    SynthSourceConfig c = {.patch = r->patch,
                           .min_patches = r->min_patches,
                           .max_patches = r->max_patches,
                           .microbatch_tokens = r->microbatch_tokens,
                           .microbatches = r->microbatches,
                           .seed = r->data_seed,
                           .fixed_batch = r->fixed_batch,
                           .heldout = heldout};
    return batch_source_synthetic(src, &c, vocab, err, err_len);
}

int trainer_source_shards(BatchSource* src, const Recipe* r, const char* shards, uint64_t tok_hash, int eval,
                          int decode_images, char* err, size_t err_len) {
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
    if (rc == 0 && !eval_only) rc = t->src.seek(&t->src, cs.loader, err, err_len);
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
    if (!eval_only) {
        int rc = !strcmp(r->source, "synthetic")
                     ? trainer_source_synthetic(&t->src, r, vocab, 0, err, err_len)
                     : trainer_source_shards(&t->src, r, r->shards, t->tok_hash, 0, t->ex->decode_images, err, err_len);
        if (rc != 0) return -1;
    }
    t->last_step = r->stop_at > 0 ? r->stop_at : r->steps;

    int64_t resume_step = 0;
    if (r->resume[0] && trainer_resume(t, eval_only, &resume_step, err, err_len) != 0) return -1;
    char mpath[RECIPE_STR + 32];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", t->run_dir);
    if (!eval_only && t->ex->log_rank && metrics_open(&t->metrics, mpath, resume_step, err, err_len) != 0) return -1;
    if (!eval_only && t->ex->log_rank && trainer_write_recipe(t, err, err_len) != 0) return -1;
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
        step_exec_run_hooks(ex, err, err_len) != 0 || step_exec_grad_norm(ex, &norm, err, err_len) != 0)
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

int trainer_checkpoint(Trainer* t, char* err, size_t err_len) {
    CheckpointState cs = {.step = t->step,
                          .opt_step = t->opt_step,
                          .recipe_hash = recipe_hash(t->r),
                          .seed = (uint64_t)t->r->seed,
                          .data_seed = (uint64_t)t->r->data_seed,
                          .loader = t->src.position(&t->src)};
    char out[RECIPE_STR + 64];
    int rc = t->ex->save(t->ex, t->ckpt_root, &cs, out, sizeof out, err, err_len);
    free(cs.loader);
    if (rc == 0 && t->ex->log_rank) {
        checkpoint_prune(t->ckpt_root, t->r->keep);
        fprintf(stderr, "rrfp-mm: checkpoint %s\n", out);
    }
    return rc;
}

void trainer_free(Trainer* t) {
    if (t->metrics.f) metrics_close(&t->metrics);
    if (t->src.free) t->src.free(&t->src);
    if (t->ex) t->ex->free(t->ex);
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
