/* cmd_train.c — `rrfp-mm train` and `rrfp-mm eval`: arguments, the recipe, then runtime/train/. */
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/util.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/args.h"
#include "runtime/comm/comm.h"
#include "runtime/train/guard.h"
#include "runtime/train/trained.h"
#include "runtime/train/outguard.h"
#include "runtime/train/trainer.h"

/* ------------------------------------------------------------------------------------------------
 * SIGTERM / SIGINT (preemption): the first finishes the step, checkpoints and exits 128 + signal; a
 * second one, 2 s or more after the first, exits at once (docs/reliability.md "Preemption: SIGTERM and SIGINT"). */

static volatile sig_atomic_t train_stop_signal = 0;
static struct timespec train_first_signal;

static void train_on_signal(int sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    /* Under mpirun a preemption's SIGTERM often arrives twice within moments (from the scheduler, and
     * forwarded by mpirun): a repeat within 2 s is the same request, not a second one. */
    if (train_stop_signal && (double)(now.tv_sec - train_first_signal.tv_sec) +
                                     1e-9 * (double)(now.tv_nsec - train_first_signal.tv_nsec) < 2.0)
        return;
    if (train_stop_signal) {
        static const char m[] = "rrfp-mm: second signal: exiting now, without a checkpoint\n";
        ssize_t w = write(2, m, sizeof m - 1);
        (void)w;
        _exit(128 + sig);
    }
    train_stop_signal = sig;
    train_first_signal = now;
    static const char m[] = "rrfp-mm: signal received: finishing this step, then a checkpoint and exit "
                            "(a second signal exits at once)\n";
    ssize_t w = write(2, m, sizeof m - 1);
    (void)w;
}

static void train_catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = train_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/* ------------------------------------------------------------------------------------------------
 * the command */

static void train_usage(FILE* f) {
    fprintf(f,
            "usage: rrfp-mm train RECIPE.ini [--set section.key=value ...] [--resume DIR|latest|auto] [--dry-run]\n"
            "       rrfp-mm train RECIPE.ini --print-recipe      print every key after overrides\n"
            "       rrfp-mm train --list-keys                    the key table as markdown (recipes/README.md)\n\n"
            "Trains the recipe's model; every key is documented in recipes/README.md.\n"
            "  --set section.key=value  override one key (repeatable; errors name \"--set\")\n"
            "  --resume DIR             resume from a checkpoint folder (same as --set checkpoint.resume=DIR;\n"
            "                           `latest`: this run's newest checkpoint; `auto`: this run's newest if any,\n"
            "                           else a fresh start: one line for the first start and every requeue)\n"
            "  --dry-run                print parameters per component and memory per pipeline rank, allocate nothing\n");
}

static void train_list_keys(FILE* f) {
    fprintf(f, "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n");
    for (int i = 0; i < recipe_key_count(); i++) {
        const RecipeKey* k = recipe_key_get(i);
        char allowed[128];
        switch (k->type) {
        case RKEY_INT:
        case RKEY_I64:
            if (k->max >= 9e15) snprintf(allowed, sizeof allowed, ">= %.0f", k->min);
            else snprintf(allowed, sizeof allowed, "%.0f .. %.0f", k->min, k->max);
            break;
        case RKEY_FLOAT: snprintf(allowed, sizeof allowed, "%g .. %g", k->min, k->max); break;
        case RKEY_STRING: snprintf(allowed, sizeof allowed, "path / text (< %zu bytes)", k->size); break;
        case RKEY_ENUM: {
            /* a|b|c -> `a`, `b`, `c` */
            size_t o = 0;
            const char* c = k->choices;
            while (*c && o + 8 < sizeof allowed) {
                const char* bar = strchr(c, '|');
                size_t l = bar ? (size_t)(bar - c) : strlen(c);
                o += (size_t)snprintf(allowed + o, sizeof allowed - o, "%s`%.*s`", o ? ", " : "", (int)l, c);
                c += l + (bar ? 1 : 0);
            }
            break;
        }
        case RKEY_BOOL: snprintf(allowed, sizeof allowed, "`true`, `false`"); break;
        }
        fprintf(f, "| `%s.%s` | %s | `%s` | %s | ", k->section, k->key, recipe_key_type_name(k->type), k->def, allowed);
        for (const char* c = k->doc; *c; c++) /* a | of the text would end the table's cell: markdown's \| */
            fputs(*c == '|' ? "\\|" : (char[2]){*c, 0}, f);
        fprintf(f, "%s |\n", k->hashed ? " *(hashed)*" : "");
    }
}

int cmd_train(int argc, char** argv) {
    const char* recipe_path = NULL;
    int dry_run = 0, print_recipe = 0;
    const char** sets = callocCheck((size_t)argc + 1, sizeof(char*));
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            train_usage(stdout);
            free(sets);
            return 0;
        } else if (!strcmp(a, "--list-keys")) {
            train_list_keys(stdout);
            free(sets);
            return 0;
        } else if (!strcmp(a, "--dry-run")) {
            dry_run = 1;
        } else if (!strcmp(a, "--print-recipe")) {
            print_recipe = 1;
        } else if (!strcmp(a, "--set") || !strcmp(a, "--resume")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rrfp-mm train: %s needs a value\n\n", a);
                train_usage(stderr);
                free(sets);
                return 2;
            }
            if (!strcmp(a, "--set")) sets[n_sets++] = argv[++i];
            else {
                static char buf[RECIPE_STR + 32];
                snprintf(buf, sizeof buf, "checkpoint.resume=%s", argv[++i]);
                sets[n_sets++] = buf;
            }
        } else if (!strncmp(a, "--set=", 6)) {
            sets[n_sets++] = a + 6;
        } else if (a[0] == '-') {
            cli_unknown_option("train", a, train_usage, NULL);
            free(sets);
            return 2;
        } else if (!recipe_path) {
            recipe_path = a;
        } else {
            cli_second_recipe("train", recipe_path, a, train_usage);
            free(sets);
            return 2;
        }
    }
    if (!recipe_path) /* said before the usage: what is missing and where the recipes are */
        fprintf(stderr, "rrfp-mm train: no recipe given (a RECIPE.ini: the shipped ones are recipes/*.ini, "
                        "recipes/README.md)\n\n");
    Recipe* r = cli_recipe_given(recipe_path != NULL, recipe_path, sets, n_sets, train_usage);
    if (!r) return 2;
    char err[2048];
    int rc;
    if (print_recipe) {
        recipe_print(r, stdout);
        free(r);
        return 0;
    }
    /* train.init_from an import: its model keys, where the recipe leaves them at their defaults (a dry run plans
     * before the checkpoint exists: without it, the recipe's keys as they are) */
    char ipath[RECIPE_STR + 32];
    snprintf(ipath, sizeof ipath, "%s/state.json", r->init_from);
    int absent = dry_run && access(ipath, F_OK) != 0 && errno == ENOENT;
    if (absent && r->init_from[0])
        printf("train.init_from = %s: no %s yet: the recipe's model keys as they are\n", r->init_from, ipath);
    if (r->init_from[0] && !absent && trained_apply_keys(r, r->init_from, "train.init_from", err, sizeof err) < 0) {
        fprintf(stderr, "rrfp-mm: error: %s: train.init_from = %s: %s\n", recipe_origin(r, "train", "init_from"),
                r->init_from, err);
        free(r);
        return 1;
    }
    int vocab = r->vocab;
    if (dry_run) {
        if (vocab == 0) vocab = train_tokenizer_vocab(r, err, sizeof err);
        if (vocab <= 0) {
            /* a fresh clone's demo recipes: the demo data is made, not shipped (as a run says it, trainer.c) */
            int demo = !strncmp(r->tokenizer, "demo/", 5) && access(r->tokenizer, F_OK) != 0;
            fprintf(stderr, "rrfp-mm: error: %s\n---> HINT: %s\n", err,
                    demo ? "the demo data (demo/tokenizer.json, demo/shards) is not part of the repository: make it with "
                           "`make demo`; or size the model without it: --set model.vocab=N"
                         : "set model.vocab, or make data.tokenizer exist");
            free(r);
            return 1;
        }
        /* train.epochs: the steps it gives, as the run would derive them (dp as set) */
        rc = r->epochs > 0 ? trainer_epochs_to_steps(r, r->dp, stdout, err, sizeof err) : 0;
        /* the default memory budget: this process's device, as a run would see it */
        char note[256];
        if (rc == 0) rc = guard_device_memory(r, NULL, note, sizeof note, err, sizeof err);
        if (rc == 0 && note[0]) printf("runtime.backend = %s: no device memory to budget by here (%s)\n", r->backend, note);
        if (rc == 0) rc = train_dry_run(r, vocab, stdout, err, sizeof err);
        if (rc != 0) fprintf(stderr, "rrfp-mm: error: %s\n", err);
        free(r);
        return rc ? 1 : 0;
    }
    /* Every training job is an MPI job (a process started without mpirun is a world of one), so the
     * number of ranks comes from MPI itself and is checked against the layout before anything starts. */
    /* The handlers go in before MPI starts: a SIGTERM while MPI_Init runs its start-up exchange would
     * otherwise kill the rank in the middle of it, and mpirun can then wait forever for the others (seen
     * as "PMIX ERROR: UNREACHABLE" and a hung job). Caught, it stops the run at the first step end. */
    train_catch_signals();
    Comm* world = comm_mpi_world(err, sizeof err);
    if (!world) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        free(r);
        return 1;
    }
    /* parallel.dp left unset: the data-parallel replicas are what the world holds beyond pp x tp (as
     * torchrun users expect), e.g. mpirun -np 4 with pp 2 gives dp 2 */
    if (!strcmp(recipe_origin(r, "parallel", "dp"), "default") && world->size != r->pp * r->tp * r->dp &&
        world->size % (r->pp * r->tp) == 0) {
        char set[64], origin[64];
        snprintf(set, sizeof set, "parallel.dp=%d", world->size / (r->pp * r->tp));
        snprintf(origin, sizeof origin, "the world size %d / (pp %d x tp %d)", world->size, r->pp, r->tp);
        rc = recipe_set_derived(r, set, origin, err, sizeof err);
        if (rc == 0) rc = recipe_validate(r, err, sizeof err);
        if (rc != 0) {
            fprintf(stderr, "rrfp-mm: error: %s\n", err);
            world->ops->free(world);
            comm_mpi_finalize();
            free(r);
            return 2;
        }
    }
    if (r->epochs > 0) {
        rc = trainer_epochs_to_steps(r, r->dp, world->rank == 0 ? stdout : NULL, err, sizeof err);
        if (rc == 0) rc = recipe_validate(r, err, sizeof err);
        if (rc != 0) {
            fprintf(stderr, "rrfp-mm: error: %s\n", err);
            world->ops->free(world);
            comm_mpi_finalize();
            free(r);
            return 1;
        }
    }
    /* the default memory budget: the smallest device of the job */
    rc = guard_device_memory(r, world, NULL, 0, err, sizeof err);
    if (rc == 0) rc = trainer_run(r, world, stdout, &train_stop_signal, err, sizeof err);
    if (rc == 1) {
        /* stopped at a step end agreed by every rank, checkpoint written: 128 + the signal, as a shell
         * reports a process ended by it (143 SIGTERM, 130 SIGINT; a rank that saw none says 143) */
        int sig = train_stop_signal ? (int)train_stop_signal : SIGTERM;
        world->ops->free(world);
        comm_mpi_finalize();
        free(r);
        return 128 + sig;
    }
    if (rc != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        if (world->size > 1) {
            /* the other ranks would wait for this one's messages: end them all */
            fprintf(stderr, "rrfp-mm: error: rank %d of %d failed; ending every rank of the job\n", world->rank,
                    world->size);
            comm_abort(world, 1);
        }
    }
    world->ops->free(world);
    comm_mpi_finalize();
    free(r);
    return rc ? 1 : 0;
}

/* ------------------------------------------------------------------------------------------------
 * rrfp-mm eval */

static void eval_usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm eval RECIPE.ini --checkpoint DIR|latest [--samples N] [--predictions OUT.jsonl]\n"
               "                    [--set section.key=value ...]\n\n"
               "Answers held-out questions with a checkpoint's model (greedy, exact match) and prints the accuracy\n"
               "against chance. Held-out data: data.eval_shards, or the synthetic source's held-out stream. The\n"
               "checkpoint may be a run's or an import (rrfp-mm import: read as it is, its model keys from its\n"
               "state.json); held-out shards packed otherwise than the model's training data (another template,\n"
               "image preprocessing or tokenizer: the checkpoint's record) are refused. Each held-out sample counts\n"
               "once; damaged ones skipped are counted and said.\n"
               "--predictions: one JSON line per sample, written to a temporary name and renamed; refused before\n"
               "the model loads when it is an input (the recipe, its tokenizer or shards), a file in a checkpoint,\n"
               "a run folder's own file (metrics.jsonl, recipe.ini, ...) or a folder (docs/reliability.md).\n");
}

int cmd_eval(int argc, char** argv) {
    const char* recipe_path = NULL;
    const char* ckpt = NULL;
    const char* pred_path = NULL;
    long long samples = 1000;
    const char** sets = callocCheck((size_t)argc + 1, sizeof(char*));
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            eval_usage(stdout);
            free(sets);
            return 0;
        } else if ((!strcmp(a, "--set") || !strcmp(a, "--checkpoint") || !strcmp(a, "--samples") ||
                    !strcmp(a, "--predictions")) &&
                   i + 1 < argc) {
            if (!strcmp(a, "--set")) sets[n_sets++] = argv[++i];
            else if (!strcmp(a, "--predictions")) pred_path = argv[++i];
            else if (!strcmp(a, "--checkpoint")) ckpt = argv[++i];
            else {
                char* end;
                samples = strtoll(argv[++i], &end, 10);
                if (*end || samples < 1) {
                    fprintf(stderr, "rrfp-mm eval: --samples '%s' is not a positive integer\n", argv[i]);
                    free(sets);
                    return 2;
                }
            }
        } else if (a[0] == '-') {
            cli_unknown_option("eval", a, eval_usage, NULL);
            free(sets);
            return 2;
        } else if (!recipe_path) {
            recipe_path = a;
        } else {
            cli_second_recipe("eval", recipe_path, a, eval_usage);
            free(sets);
            return 2;
        }
    }
    if (!recipe_path || !ckpt)
        fprintf(stderr, "rrfp-mm eval: %s\n\n",
                !recipe_path ? "no recipe given (the RECIPE.ini the model was trained with)"
                             : "no --checkpoint given (a checkpoint folder, or latest: the newest of the recipe's "
                               "train.run_dir)");
    Recipe* r = cli_recipe_given(recipe_path && ckpt, recipe_path, sets, n_sets, eval_usage);
    if (!r) return 2;
    char err[2048];
    int rc;
    /* the checkpoint folder (latest / auto resolved), and an import's model keys */
    if (trained_checkpoint_dir(r, ckpt, r->resume, sizeof r->resume, err, sizeof err) != 0 ||
        trained_apply_model_keys(r, r->resume, "rrfp-mm eval --checkpoint", err, sizeof err) < 0 ||
        (!strcmp(r->source, "shards") && trained_check_recipe_tokenizer(r, r->resume, err, sizeof err) != 0)) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        free(r);
        return 1;
    }
    if (pred_path) { /* before the model loads: never onto an input, a checkpoint's or a run's own file */
        GuardInputs in = {0};
        guard_inputs_add_recipe(&in, r);
        guard_inputs_add(&in, r->resume, "the checkpoint", 1);
        rc = guard_output("--predictions", pred_path, GUARD_OUT_FILE, NULL, &in, err, sizeof err);
        guard_inputs_free(&in);
        if (rc != 0) {
            fprintf(stderr, "rrfp-mm eval: %s\n", err);
            free(r);
            return 2;
        }
    }
    Comm* self = comm_self();
    trainer_set_threads(guard_threads(r, self));
    Trainer* t = callocCheck(1, sizeof *t);
    if (trainer_init(t, r, self, 1, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        trainer_free(t);
        free(t);
        self->ops->free(self);
        free(r);
        return 1;
    }
    EvalResult res;
    double t0 = rr_now();
    /* the predictions go to a temporary name, renamed when every answer is in */
    FILE* pf = NULL;
    char ptmp[RECIPE_STR + 4200];
    if (pred_path) snprintf(ptmp, sizeof ptmp, "%s.tmp.%d", pred_path, (int)getpid());
    if (pred_path && !(pf = fopen(ptmp, "w"))) {
        fprintf(stderr, "rrfp-mm: error: cannot write --predictions '%s': %s\n", ptmp, strerror(errno));
        trainer_free(t);
        free(t);
        self->ops->free(self);
        free(r);
        return 1;
    }
    rc = trainer_eval(t, samples, pf, &res, err, sizeof err);
    if (pf) {
        int bad = ferror(pf) != 0;
        bad |= fflush(pf) != 0 || fsync(fileno(pf)) != 0;
        bad |= fclose(pf) != 0;
        if (rc == 0 && (bad || rename(ptmp, pred_path) != 0)) {
            snprintf(err, sizeof err, "cannot write --predictions '%s': %s", pred_path, strerror(errno));
            rc = -1;
        } else if (rc == 0 && rr_fsync_parent(pred_path) != 0) { /* the rename durable */
            snprintf(err, sizeof err, "cannot write --predictions '%s': %s (fsync of its folder after the rename)",
                     pred_path, strerror(errno));
            rc = -1;
        }
        if (rc != 0) unlink(ptmp);
    }
    if (rc != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
    } else {
        char sk[96] = "";
        if (res.skipped)
            snprintf(sk, sizeof sk, "; %lld skipped as damaged (named above)", (long long)res.skipped);
        printf("eval %s at step %lld on %lld held-out %s samples%s (%.1f s):\n", recipe_path, (long long)t->step,
               (long long)res.samples, r->source, sk, rr_now() - t0);
        printf("  held-out loss      %.4f over %lld answer tokens\n", res.loss, (long long)res.supervised);
        printf("  greedy exact match %.1f%% (%lld / %lld)\n", 100.0 * res.greedy_correct / res.samples,
               (long long)res.greedy_correct, (long long)res.samples);
        if (res.candidates)
            printf("  best of %d answers %.1f%%\n", res.candidates, 100.0 * res.candidate_correct / res.samples);
        printf("  chance             %.1f%% (%s)\n", 100.0 * res.chance,
               res.candidates ? "1 / 8 colours" : "per question, 1 / its distinct answers among the held-out samples");
        char ar[256] = "";
        if (t->mc.anyres) {
            printf("  any-resolution     %lld images, %lld tower images (base + tiles), %lld image positions (%lld features, "
                   "%lld image_newline)\n",
                   (long long)res.ar_images, (long long)res.ar_tower_images, (long long)(res.ar_features + res.ar_newlines),
                   (long long)res.ar_features, (long long)res.ar_newlines);
            snprintf(ar, sizeof ar, ",\"anyres_images\":%lld,\"anyres_tower_images\":%lld,\"anyres_features\":%lld,"
                     "\"anyres_newlines\":%lld",
                     (long long)res.ar_images, (long long)res.ar_tower_images, (long long)res.ar_features, (long long)res.ar_newlines);
        }
        printf("{\"eval_step\":%lld,\"samples\":%lld,\"skipped\":%lld,\"greedy_accuracy\":%.6f,\"candidate_accuracy\":%.6f,"
               "\"chance\":%.6f,\"loss\":%.6f%s}\n",
               (long long)t->step, (long long)res.samples, (long long)res.skipped, (double)res.greedy_correct / res.samples,
               res.candidates ? (double)res.candidate_correct / res.samples : -1.0, res.chance, res.loss, ar);
    }
    trainer_free(t);
    free(t);
    self->ops->free(self);
    free(r);
    return rc ? 1 : 0;
}
