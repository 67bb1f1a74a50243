/* dryrun.c — `rrfp-mm train --dry-run`: parameters per component and memory per pipeline rank for
 * a recipe's layout, computed from the shapes alone (nothing is allocated), so a full-size recipe
 * can be checked on a laptop. The parameter count is the same table the model registers (tested
 * against the real ParamTable for the tiny recipe); activation memory is an estimate from the
 * per-token formulas below. */
#include <mpi.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/partition.h"
#include "runtime/trainer.h"

void recipe_param_counts(const Recipe* r, int vocab, RecipeParamCounts* c) {
    double Dv = r->vision_width, Dt = r->text_width, F = r->ffn_hidden, V = vocab, p = r->patch;
    memset(c, 0, sizeof *c);
    c->vision_embed = 3 * p * p * Dv + Dv;
    /* ln1 (w, b), qkv (W, b), out (W, b), ln2 (w, b), fc1 (W, b), fc2 (W, b) */
    c->vision_block = 2 * Dv + (3 * Dv * Dv + 3 * Dv) + (Dv * Dv + Dv) + 2 * Dv + (4 * Dv * Dv + 4 * Dv) + (4 * Dv * Dv + Dv);
    c->vision_final = 2 * Dv;
    c->projector = (Dv * Dt + Dt) + (Dt * Dt + Dt);
    c->text_embed = V * Dt;
    /* norm1, q k v o, norm2, gate up down */
    c->text_block = Dt + 4 * Dt * Dt + Dt + 3 * Dt * F;
    c->text_final = Dt;
    c->head = V * Dt;
    c->vision = c->vision_embed + r->vision_layers * c->vision_block + c->vision_final;
    c->text = c->text_embed + r->text_layers * c->text_block + c->text_final + c->head;
    c->total = c->vision + c->projector + c->text;
}

static void fmt_count(char* s, size_t n, double x) {
    if (x >= 1e9) snprintf(s, n, "%.2fB", x / 1e9);
    else if (x >= 1e6) snprintf(s, n, "%.2fM", x / 1e6);
    else if (x >= 1e3) snprintf(s, n, "%.1fk", x / 1e3);
    else snprintf(s, n, "%.0f", x);
}

static void fmt_bytes(char* s, size_t n, double x) {
    if (x >= (double)(1ull << 30)) snprintf(s, n, "%.2f GiB", x / (double)(1ull << 30));
    else snprintf(s, n, "%.1f MiB", x / (double)(1 << 20));
}

int recipe_dry_run(const Recipe* r, int vocab, FILE* out) {
    RecipeParamCounts c;
    recipe_param_counts(r, vocab, &c);
    char a[32], b[32];
    fprintf(out, "recipe %s (hash %016llx)\n", r->path, (unsigned long long)recipe_hash(r));
    fprintf(out, "model: ViT Dv %d x %d layers, %d heads, patch %d; LM Dt %d x %d layers, %d heads, F %d, V %d\n",
            r->vision_width, r->vision_layers, r->vision_heads, r->patch, r->text_width, r->text_layers, r->text_heads,
            r->ffn_hidden, vocab);
    fprintf(out, "parameters:\n");
    fmt_count(a, sizeof a, c.vision);
    fmt_count(b, sizeof b, c.vision_block);
    fprintf(out, "  vision     %10s  %14.0f  (patch embed, %d blocks of %s, final LayerNorm)\n", a, c.vision,
            r->vision_layers, b);
    fmt_count(a, sizeof a, c.projector);
    fprintf(out, "  projector  %10s  %14.0f  (mlp2x_gelu)\n", a, c.projector);
    fmt_count(a, sizeof a, c.text);
    fmt_count(b, sizeof b, c.text_block);
    fprintf(out, "  text       %10s  %14.0f  (embedding, %d blocks of %s, final RMSNorm, LM head)\n", a, c.text,
            r->text_layers, b);
    fmt_count(a, sizeof a, c.total);
    fprintf(out, "  total      %10s  %14.0f\n", a, c.total);

    /* Layout: LM layers over pp x chunks virtual stages; rank r holds virtual stages r, r + pp, ... */
    int P = r->pp, S = r->pp * r->chunks, T = r->microbatch_tokens, M = r->microbatches;
    int* layers = mallocCheck((size_t)S * sizeof(int));
    /* Cost model at the token budget, assuming half the positions are image patches. */
    PartitionCost cost = partition_cost_model(r->vision_width, r->vision_layers, r->text_width, r->ffn_hidden, vocab, T,
                                              T * 0.5, r->max_patches, T / 2.0, r->patch);
    if (r->layers[0]) {
        char why[256];
        if (partition_parse(r->layers, r->text_layers, S, layers, why, (int)sizeof why) != 0) {
            fprintf(stderr, "rrfp-mm: error: parallel.layers: %s\n", why);
            free(layers);
            return -1;
        }
    } else {
        partition_auto(r->text_layers, S, cost, layers);
    }
    fprintf(out, "layout: pp %d x tp %d x dp %d = %d ranks, %d chunk(s) per rank, hint %s, mode %s\n", r->pp, r->tp,
            r->dp, r->pp * r->tp * r->dp, r->chunks, r->hint, r->mode);
    fprintf(out, "LM layers per virtual stage:");
    for (int s = 0; s < S; s++) fprintf(out, "%s%d", s ? "," : " ", layers[s]);
    fprintf(out, " (%s)\n", r->layers[0] ? "parallel.layers" : "cost-balanced");
    fprintf(out,
            "memory per rank (f32; weights, grads and AdamW m + v: the stage's parameter table; activations: the\n"
            "stage's StageActs block for a %d-token microbatch with every position an image patch (worst case),\n"
            "times microbatches in flight: gpipe M, otherwise min(P - r, M) x chunks, or runtime.cap; / tp when tp > 1):\n",
            T);
    fprintf(out, "  %-5s %-8s %12s %12s %12s %12s %12s %12s\n", "rank", "layers", "params", "weights", "grads",
            "adam m+v", "activations", "total");
    /* Exact per-stage sizes from the model's own tables (runtime/model.h), nothing allocated. With
     * tp > 1 they are divided by tp: exact for the split matrices, a slight under-count for the
     * replicated norms and biases. */
    ModelConfig mc = trainer_model_config(r, vocab);
    double tp = r->tp;
    double max_total = 0;
    int l_at = 0;
    int* l0s = mallocCheck((size_t)S * sizeof(int));
    for (int s = 0; s < S; s++) l0s[s] = l_at, l_at += layers[s];
    for (int rank = 0; rank < P; rank++) {
        double params = 0, act_mb = 0;
        int nl = 0;
        for (int ch = 0; ch < r->chunks; ch++) {
            int s = rank + ch * P;
            nl += layers[s];
            params += (double)model_stage_param_count(&mc, l0s[s], l0s[s] + layers[s]) / tp;
            /* every position of the microbatch may be an image patch: the worst case */
            act_mb += (double)model_stage_acts_bytes(&mc, l0s[s], l0s[s] + layers[s], T, T, 0) / tp;
        }
        int inflight;
        if (!strcmp(r->hint, "gpipe")) inflight = M;
        else inflight = (P - rank < M ? P - rank : M) * r->chunks;
        if (!strcmp(r->mode, "ready") && strcmp(r->cap, "0") != 0) {
            double cv = atof(r->cap);
            int c = strchr(r->cap, 'x') ? (int)(cv * inflight + 0.999) : (int)cv;
            inflight = c < M ? c : M;
        }
        double w = params * 4, g = params * 4, adam = params * 8, act = act_mb * inflight;
        double total = w + g + adam + act;
        if (total > max_total) max_total = total;
        char sp[32], sw[32], sg[32], sa[32], sx[32], st[32];
        fmt_count(sp, sizeof sp, params);
        fmt_bytes(sw, sizeof sw, w);
        fmt_bytes(sg, sizeof sg, g);
        fmt_bytes(sa, sizeof sa, adam);
        fmt_bytes(sx, sizeof sx, act);
        fmt_bytes(st, sizeof st, total);
        char ly[16];
        snprintf(ly, sizeof ly, "%d%s", nl, rank == 0 ? "+ViT" : "");
        fprintf(out, "  %-5d %-8s %12s %12s %12s %12s %12s %12s\n", rank, ly, sp, sw, sg, sa, sx, st);
    }
    char mt[32];
    fmt_bytes(mt, sizeof mt, max_total);
    fprintf(out, "largest rank: %s; tokens per step: %d x %d microbatches x dp %d = %d\n", mt, T, M, r->dp,
            T * M * r->dp);
    fprintf(out, "dry run: nothing allocated, no training.\n");
    free(l0s);
    free(layers);
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * the command */

static void train_usage(FILE* f) {
    fprintf(f,
            "usage: rrfp-mm train RECIPE.ini [--set section.key=value ...] [--resume DIR] [--dry-run]\n"
            "       rrfp-mm train RECIPE.ini --print-recipe      print every key after overrides\n"
            "       rrfp-mm train --list-keys                    the key table as markdown (recipes/README.md)\n\n"
            "Trains the recipe's model; every key is documented in recipes/README.md.\n"
            "  --set section.key=value  override one key (repeatable; errors name \"--set\")\n"
            "  --resume DIR             resume from a checkpoint folder (same as --set checkpoint.resume=DIR;\n"
            "                           `latest` picks the newest in checkpoint.dir)\n"
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
        fprintf(f, "| `%s.%s` | %s | `%s` | %s | %s%s |\n", k->section, k->key, recipe_key_type_name(k->type), k->def,
                allowed, k->doc, k->hashed ? " *(hashed)*" : "");
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
            fprintf(stderr, "rrfp-mm train: unknown option '%s'\n\n", a);
            train_usage(stderr);
            free(sets);
            return 2;
        } else if (!recipe_path) {
            recipe_path = a;
        } else {
            fprintf(stderr, "rrfp-mm train: more than one recipe ('%s', '%s')\n\n", recipe_path, a);
            train_usage(stderr);
            free(sets);
            return 2;
        }
    }
    if (!recipe_path) {
        train_usage(stderr);
        free(sets);
        return 2;
    }
    Recipe* r = mallocCheck(sizeof(Recipe));
    char err[2048];
    int rc = recipe_load(r, recipe_path, err, sizeof err);
    for (int i = 0; rc == 0 && i < n_sets; i++) rc = recipe_set(r, sets[i], err, sizeof err);
    if (rc == 0) rc = recipe_validate(r, err, sizeof err);
    free(sets);
    if (rc != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        free(r);
        return 2;
    }
    if (print_recipe) {
        recipe_print(r, stdout);
        free(r);
        return 0;
    }
    int vocab = r->vocab;
    if (dry_run) {
        if (vocab == 0) vocab = trainer_tokenizer_vocab(r, err, sizeof err);
        if (vocab <= 0) {
            fprintf(stderr, "rrfp-mm: error: %s\n---> HINT: set model.vocab, or make data.tokenizer exist\n", err);
            free(r);
            return 1;
        }
        rc = recipe_dry_run(r, vocab, stdout);
        free(r);
        return rc ? 1 : 0;
    }
    /* Pipeline ranks run under mpirun; one process needs no MPI at all. */
    const char* world_env = getenv("OMPI_COMM_WORLD_SIZE");
    int world = world_env ? atoi(world_env) : 1;
    if (world > 1 && r->pp == 1) {
        fprintf(stderr, "rrfp-mm: error: mpirun started %d ranks but parallel.pp = 1\n---> HINT: add --set "
                        "parallel.pp=%d (one rank per pipeline stage)\n", world, world);
        free(r);
        return 2;
    }
    int use_mpi = r->pp > 1;
    if (use_mpi) MPI_Init(NULL, NULL);
    rc = trainer_run(r, stdout);
    free(r);
    if (use_mpi) MPI_Finalize();
    return rc;
}

/* ------------------------------------------------------------------------------------------------
 * rrfp-mm eval */

static void eval_usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm eval RECIPE.ini --checkpoint DIR|latest [--samples N] [--predictions OUT.jsonl]\n"
               "                    [--set section.key=value ...]\n\n"
               "Answers held-out questions with a checkpoint's model (greedy, exact match) and prints the accuracy\n"
               "against chance. Held-out data: data.eval_shards, or the synthetic source's held-out stream.\n");
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
            fprintf(stderr, "rrfp-mm eval: unknown option or missing value: '%s'\n\n", a);
            eval_usage(stderr);
            free(sets);
            return 2;
        } else if (!recipe_path) {
            recipe_path = a;
        } else {
            eval_usage(stderr);
            free(sets);
            return 2;
        }
    }
    if (!recipe_path || !ckpt) {
        eval_usage(stderr);
        free(sets);
        return 2;
    }
    Recipe* r = mallocCheck(sizeof(Recipe));
    char err[2048];
    int rc = recipe_load(r, recipe_path, err, sizeof err);
    for (int i = 0; rc == 0 && i < n_sets; i++) rc = recipe_set(r, sets[i], err, sizeof err);
    if (rc == 0) rc = recipe_validate(r, err, sizeof err);
    free(sets);
    if (rc != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        free(r);
        return 2;
    }
    snprintf(r->resume, sizeof r->resume, "%s", ckpt);
    trainer_set_threads(r->threads);
    Trainer* t = callocCheck(1, sizeof *t);
    if (trainer_init(t, r, 1, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        free(t);
        free(r);
        return 1;
    }
    EvalResult res;
    double t0 = rr_now();
    FILE* pf = NULL;
    if (pred_path && !(pf = fopen(pred_path, "w"))) {
        fprintf(stderr, "rrfp-mm: error: cannot write --predictions '%s': %s\n", pred_path, strerror(errno));
        trainer_free(t);
        free(t);
        free(r);
        return 1;
    }
    rc = trainer_eval(t, samples, pf, &res, err, sizeof err);
    if (pf) fclose(pf);
    if (rc != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
    } else {
        printf("eval %s at step %lld on %lld held-out %s samples (%.1f s):\n", recipe_path, (long long)t->step,
               (long long)res.samples, r->source, rr_now() - t0);
        printf("  held-out loss      %.4f over %lld answer tokens\n", res.loss, (long long)res.supervised);
        printf("  greedy exact match %.1f%% (%lld / %lld)\n", 100.0 * res.greedy_correct / res.samples,
               (long long)res.greedy_correct, (long long)res.samples);
        if (res.candidates)
            printf("  best of %d answers %.1f%%\n", res.candidates, 100.0 * res.candidate_correct / res.samples);
        printf("  chance             %.1f%% (%s)\n", 100.0 * res.chance,
               res.candidates ? "1 / 8 colours" : "per question, 1 / its distinct answers among the held-out samples");
        printf("{\"eval_step\":%lld,\"samples\":%lld,\"greedy_accuracy\":%.6f,\"candidate_accuracy\":%.6f,"
               "\"chance\":%.6f,\"loss\":%.6f}\n",
               (long long)t->step, (long long)res.samples, (double)res.greedy_correct / res.samples,
               res.candidates ? (double)res.candidate_correct / res.samples : -1.0, res.chance, res.loss);
    }
    trainer_free(t);
    free(t);
    free(r);
    return rc ? 1 : 0;
}
