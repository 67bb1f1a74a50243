/* cmd_generate.c — `rrfp-mm generate`: answers from a checkpoint (runtime/train/generate.h). Two forms:
 * one question about one image (the answer on stdout), or every record of a LLaVA manifest (the first
 * human turn of each, answered into a JSONL file as LLaVA's model_vqa.py writes it). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/manifest.h"
#include "engine/util.h"
#include "runtime/cli/cli.h"
#include "runtime/comm/comm.h"
#include "runtime/train/generate.h"
#include "runtime/train/guard.h"
#include "runtime/train/trained.h"
#include "runtime/train/trainer.h"


static void generate_usage(FILE* f) {
    fprintf(f,
            "usage: rrfp-mm generate RECIPE.ini --checkpoint DIR|latest [--set section.key=value ...]\n"
            "                        --image FILE --prompt TEXT\n"
            "       rrfp-mm generate RECIPE.ini --checkpoint DIR|latest --manifest FILE.json --images DIR --out ANSWERS.jsonl\n"
            "                        [--samples N] [--model-id NAME]\n"
            "  decoding: [--max-new-tokens N (64)] [--temperature T (0: greedy)] [--top-p P (1)] [--seed S (0)]\n\n"
            "Answers questions about images with a checkpoint's model (a run's, or an import's as it is):\n"
            "autoregressive decoding with a KV cache through the training forward, on runtime.backend. As the\n"
            "model's data was made (the checkpoint's record, else data.shards'): the question through that chat\n"
            "template, images through the loader's preprocessing, stopping at the template's end of answer; a\n"
            "tokenizer of another hash is refused. An import's model keys come from the checkpoint.\n"
            "  --image FILE --prompt TEXT   one question (\"<image>\" marks the image; without it the image\n"
            "                               comes first); prints the answer\n"
            "  --manifest FILE --images DIR the first human turn of every record (JSON array or JSONL), one line\n"
            "  --out ANSWERS.jsonl          each: {\"question_id\", \"prompt\", \"text\", \"model_id\"} as LLaVA's\n"
            "                               model_vqa.py writes them; a progress line on stderr\n"
            "  --samples N                  the first N records only\n"
            "  --model-id NAME              the answers' model_id (default: the run folder's name)\n"
            "  --threads N                  CPU threads (default 1: a decoding step's ops are one row; 0 = every core)\n"
            "  --verify                     also run every step as a full re-forward and compare (slow; tests)\n");
}

/* DIR/NAME for a manifest's image name: relative, without "..". NULL with err otherwise. */
static char* generate_image_path(const char* dir, const char* name, char* err, size_t err_len) {
    if (name[0] == '/' || !strcmp(name, "..") || !strncmp(name, "../", 3) || strstr(name, "/../") ||
        (strlen(name) >= 3 && !strcmp(name + strlen(name) - 3, "/.."))) {
        snprintf(err, err_len, "image name '%.200s' is absolute or leads outside --images (\"..\")", name);
        return NULL;
    }
    size_t n = strlen(dir) + strlen(name) + 2;
    char* p = mallocCheck(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static uint8_t* generate_read_image(const char* path, size_t* n, char* err, size_t err_len) {
    /* capped before anything is read or allocated: RR_MAX_IMAGE, the image reader's own limit */
    uint8_t* b = (uint8_t*)rr_read_file(path, n, RR_MAX_IMAGE);
    if (!b) {
        char why[160];
        snprintf(err, err_len, "%s: cannot read: %s", path,
                 rr_read_file_why(errno, "an image file (JPEG or PNG)", why, sizeof why));
        return NULL;
    }
    return b;
}

static void generate_print_stats(const GenStats* st, const GenOptions* o) {
    fprintf(stderr, "generate: %d prompt positions, %d new tokens (%s)", st->prompt_tokens, st->new_tokens,
            st->stopped ? "end of turn" : "--max-new-tokens reached");
    if (o->verify)
        fprintf(stderr, "; verify: max |logit(KV cache) - logit(full re-forward)| %.3g, greedy token differs at %d step%s",
                st->max_logit_diff, st->argmax_differs, st->argmax_differs == 1 ? "" : "s");
    fprintf(stderr, "\n");
}

/* The manifest form. Returns the exit status. */
static int generate_manifest(Generator* g, const char* manifest, const char* images, const char* out_path, long long samples,
                             const char* model_id, const GenOptions* o) {
    Manifest m;
    char err[2048];
    if (manifest_load(manifest, &m, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        return 1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out_path, (int)getpid());
    FILE* f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s\n", tmp, strerror(errno));
        manifest_free(&m);
        return 1;
    }
    int n = m.n;
    if (samples > 0 && samples < n) n = (int)samples;
    int answered = 0, failed = 0, verify_bad = 0;
    long long tokens = 0;
    double maxdiff = 0, t0 = rr_now();
    int every = n >= 20 ? n / 20 : 1;
    for (int i = 0; i < n; i++) {
        const ManifestRecord* rec = &m.recs[i];
        const char* why = NULL;
        char e[1024] = "";
        const cJSON* id = rec->rec ? cJSON_GetObjectItemCaseSensitive(rec->rec, "id") : NULL;
        const cJSON* img = rec->rec ? cJSON_GetObjectItemCaseSensitive(rec->rec, "image") : NULL;
        const cJSON* conv = rec->rec ? cJSON_GetObjectItemCaseSensitive(rec->rec, "conversations") : NULL;
        const char* human = NULL;
        for (const cJSON* t = cJSON_IsArray(conv) ? conv->child : NULL; t && !human; t = t->next) {
            const cJSON* from = cJSON_GetObjectItemCaseSensitive(t, "from");
            const cJSON* value = cJSON_GetObjectItemCaseSensitive(t, "value");
            if (cJSON_IsString(from) && cJSON_IsString(value) &&
                (!strcmp(from->valuestring, "human") || !strcmp(from->valuestring, "user")))
                human = value->valuestring;
        }
        const char* names[MANIFEST_MAX_IMAGES];
        int ni = 0;
        if (!rec->rec) why = "not valid JSON";
        else if (!human) why = "no human turn (\"conversations\" with a {\"from\": \"human\", \"value\": ...})";
        else if (cJSON_IsString(img)) names[ni++] = img->valuestring;
        else if (cJSON_IsArray(img)) {
            for (const cJSON* it = img->child; it && !why; it = it->next) {
                if (!cJSON_IsString(it)) why = "\"image\" must be a file name or an array of file names";
                else if (ni == MANIFEST_MAX_IMAGES) why = "more images than the template takes";
                else names[ni++] = it->valuestring;
            }
        } else if (img) why = "\"image\" must be a file name or an array of file names";
        uint8_t* bytes[MANIFEST_MAX_IMAGES] = {0};
        size_t lens[MANIFEST_MAX_IMAGES];
        for (int k = 0; !why && k < ni; k++) {
            char* p = generate_image_path(images, names[k], e, sizeof e);
            if (p) bytes[k] = generate_read_image(p, &lens[k], e, sizeof e);
            free(p);
            if (!bytes[k]) why = e;
        }
        char* answer = NULL;
        GenStats st;
        char e2[1024];
        if (!why && generator_answer(g, human, (const uint8_t* const*)bytes, lens, ni, o, &answer, &st, e2, sizeof e2) != 0)
            why = e2;
        for (int k = 0; k < ni; k++) free(bytes[k]);
        if (why) {
            fprintf(stderr, "%s:%d: record '%s' not answered: %s\n", manifest, rec->line,
                    cJSON_IsString(id) ? id->valuestring : "?", why);
            failed++;
            continue;
        }
        tokens += st.new_tokens;
        if (o->verify) {
            maxdiff = st.max_logit_diff > maxdiff ? st.max_logit_diff : maxdiff;
            verify_bad += st.argmax_differs;
        }
        /* {"question_id", "prompt", "text", "model_id"} as LLaVA's model_vqa.py, the id as the manifest has it */
        cJSON* line = cJSON_CreateObject();
        cJSON_AddItemToObject(line, "question_id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNumber(i));
        cJSON_AddStringToObject(line, "prompt", human);
        cJSON_AddStringToObject(line, "text", answer);
        cJSON_AddStringToObject(line, "model_id", model_id);
        char* js = cJSON_PrintUnformatted(line);
        fprintf(f, "%s\n", js);
        free(js);
        cJSON_Delete(line);
        free(answer);
        answered++;
        if ((i + 1) % every == 0 || i + 1 == n) {
            double dt = rr_now() - t0;
            fprintf(stderr, "generate: %d / %d records answered (%.1f / s)%s\n", i + 1, n, dt > 0 ? (i + 1) / dt : 0.0,
                    failed ? " (some not: see above)" : "");
        }
    }
    int rc = 0;
    if (fclose(f) != 0 || rename(tmp, out_path) != 0) {
        fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s\n", out_path, strerror(errno));
        unlink(tmp);
        rc = 1;
    }
    manifest_free(&m);
    if (rc == 0)
        fprintf(stderr, "generate: %d answers (%lld tokens generated) in %s (%.1f s)\n", answered, tokens, out_path,
                rr_now() - t0);
    if (o->verify)
        fprintf(stderr, "generate: verify: max |logit(KV cache) - logit(full re-forward)| %.3g over every step, greedy "
                "token differs at %d step%s\n", maxdiff, verify_bad, verify_bad == 1 ? "" : "s");
    if (failed) {
        fprintf(stderr, "rrfp-mm: error: %d of %d records not answered (named above)\n", failed, n);
        rc = 1;
    }
    return rc;
}

int cmd_generate(int argc, char** argv) {
    const char *recipe_path = NULL, *ckpt = NULL, *image = NULL, *prompt = NULL, *manifest = NULL, *images = NULL,
               *out = NULL, *model_id = NULL;
    long long samples = 0;
    int threads = 1;
    GenOptions o = {.max_new = 64, .temperature = 0, .top_p = 1, .seed = 0, .verify = 0};
    const char** sets = callocCheck((size_t)argc + 1, sizeof(char*));
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        char* end = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            generate_usage(stdout);
            free(sets);
            return 0;
        } else if (!strcmp(a, "--verify")) {
            o.verify = 1;
        } else if (a[0] == '-' && strcmp(a, "--set") && strcmp(a, "--checkpoint") && strcmp(a, "--image") &&
                   strcmp(a, "--prompt") && strcmp(a, "--manifest") && strcmp(a, "--images") && strcmp(a, "--out") &&
                   strcmp(a, "--samples") && strcmp(a, "--model-id") && strcmp(a, "--max-new-tokens") && strcmp(a, "--threads") &&
                   strcmp(a, "--temperature") && strcmp(a, "--top-p") && strcmp(a, "--seed")) {
            fprintf(stderr, "rrfp-mm generate: unknown option '%s'\n\n", a);
            generate_usage(stderr);
            free(sets);
            return 2;
        } else if (a[0] == '-') {
            if (!v) {
                fprintf(stderr, "rrfp-mm generate: %s needs a value\n", a);
                free(sets);
                return 2;
            }
            i++;
            int bad = 0;
            if (!strcmp(a, "--set")) sets[n_sets++] = v;
            else if (!strcmp(a, "--checkpoint")) ckpt = v;
            else if (!strcmp(a, "--image")) image = v;
            else if (!strcmp(a, "--prompt")) prompt = v;
            else if (!strcmp(a, "--manifest")) manifest = v;
            else if (!strcmp(a, "--images")) images = v;
            else if (!strcmp(a, "--out")) out = v;
            else if (!strcmp(a, "--model-id")) model_id = v;
            else if (!strcmp(a, "--samples")) bad = (samples = strtoll(v, &end, 10)) < 1 || *end;
            else if (!strcmp(a, "--threads")) {
                long long x = strtoll(v, &end, 10);
                bad = *end || x < 0 || x > 1024;
                threads = (int)x;
            }
            else if (!strcmp(a, "--max-new-tokens")) {
                long long x = strtoll(v, &end, 10);
                bad = *end || x < 1 || x > 1 << 20;
                o.max_new = (int)x;
            } else if (!strcmp(a, "--temperature")) bad = (o.temperature = strtod(v, &end)) < 0 || *end || !(o.temperature <= 100);
            else if (!strcmp(a, "--top-p")) {
                o.top_p = strtod(v, &end);
                bad = *end || !(o.top_p > 0 && o.top_p <= 1);
            }
            else if (!strcmp(a, "--seed")) {
                unsigned long long x = strtoull(v, &end, 10);
                bad = *end || v[0] == '-';
                o.seed = x;
            }
            if (bad) {
                fprintf(stderr, "rrfp-mm generate: %s '%s' is out of range (--samples, --max-new-tokens >= 1; "
                        "--temperature in [0, 100]; --top-p in (0, 1]; --seed >= 0; --threads 0 .. 1024)\n", a, v);
                free(sets);
                return 2;
            }
        } else if (!recipe_path) {
            recipe_path = a;
        } else {
            fprintf(stderr, "rrfp-mm generate: more than one recipe ('%s', '%s')\n\n", recipe_path, a);
            generate_usage(stderr);
            free(sets);
            return 2;
        }
    }
    int one = image || prompt, many = manifest || images || out;
    if (!recipe_path || !ckpt || one == many || (one && (!image || !prompt)) || (many && (!manifest || !images || !out))) {
        fprintf(stderr, "rrfp-mm generate: give RECIPE, --checkpoint, and either --image and --prompt, or --manifest, "
                "--images and --out\n\n");
        generate_usage(stderr);
        free(sets);
        return 2;
    }
    Recipe* r = cli_recipe_from_args(recipe_path, sets, n_sets);
    free(sets);
    if (!r) return 2;
    char err[2048];
    /* the checkpoint folder (latest / auto resolved), and an import's model keys */
    if (trained_checkpoint_dir(r, ckpt, r->resume, sizeof r->resume, err, sizeof err) != 0 ||
        trained_apply_model_keys(r, r->resume, "rrfp-mm generate --checkpoint", err, sizeof err) < 0 ||
        (!strcmp(r->source, "shards") && trained_check_recipe_tokenizer(r, r->resume, err, sizeof err) != 0)) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        free(r);
        return 1;
    }
    /* generation computes in f32 (the checkpoint's master weights) on the recipe's backend */
    snprintf(r->precision, sizeof r->precision, "fp32");
    /* one process holds the whole model, whatever layout trained it (a checkpoint loads into any) */
    r->pp = r->tp = r->dp = r->chunks = 1;
    r->layers[0] = 0;
    Comm* self = comm_self();
    /* A decoding step's ops are one row each: on the CPU, threads' start-up and barriers cost more than
     * they save at the sizes this runs (measured on this 2-core machine under load: 30 demo answers in
     * 86 s with 2 threads, 0.1 s with 1), so --threads (default 1), not the recipe's runtime.threads. */
    r->threads = threads;
    trainer_set_threads(guard_threads(r, self));
    Trainer* t = callocCheck(1, sizeof *t);
    Generator* g = NULL;
    int rc = 1;
    if (trainer_init(t, r, self, 1, err, sizeof err) != 0 || !(g = generator_new(t, o.max_new, err, sizeof err))) {
        fprintf(stderr, "rrfp-mm: error: %s\n", err);
        goto done;
    }
    char mid[RECIPE_STR + 32];
    if (!model_id) {
        /* the run folder's name, as LLaVA names a model by its folder (an import: its own folder's) */
        const char* named = trained_has_keys(r->resume) ? r->resume : r->run_dir;
        const char* b = strrchr(named, '/');
        if (named == r->resume) snprintf(mid, sizeof mid, "%s", b && b[1] ? b + 1 : named);
        else snprintf(mid, sizeof mid, "%s-step%lld", b && b[1] ? b + 1 : named, (long long)t->step);
        model_id = mid;
    }
    if (one) {
        size_t n = 0;
        uint8_t* b = generate_read_image(image, &n, err, sizeof err);
        char* answer = NULL;
        GenStats st;
        if (!b || generator_answer(g, prompt, (const uint8_t* const*)&b, &n, 1, &o, &answer, &st, err, sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm: error: %s\n", err);
        } else {
            printf("%s\n", answer);
            generate_print_stats(&st, &o);
            rc = o.verify && st.argmax_differs ? 1 : 0;
        }
        free(answer);
        free(b);
    } else {
        rc = generate_manifest(g, manifest, images, out, samples, model_id, &o);
    }
done:
    generator_free(g);
    trainer_free(t);
    free(t);
    self->ops->free(self);
    free(r);
    return rc;
}
