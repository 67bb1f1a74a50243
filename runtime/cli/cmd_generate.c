/* cmd_generate.c — `rrfp-mm generate`: answers from a checkpoint (runtime/train/generate.h). Two forms:
 * one question about one image (the answer on stdout), or every record of a LLaVA manifest (the first
 * human turn of each, answered into a JSONL file as LLaVA's model_vqa.py writes it). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/manifest.h"
#include "engine/json.h"
#include "engine/util.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/args.h"
#include "runtime/comm/comm.h"
#include "runtime/train/generate.h"
#include "runtime/train/guard.h"
#include "runtime/train/trained.h"
#include "runtime/train/outguard.h"
#include "runtime/train/trainer.h"


static void generate_usage(FILE* f) {
    fprintf(f,
            "usage: rrfp-mm generate RECIPE.ini --checkpoint DIR|latest [--set section.key=value ...]\n"
            "                        --image FILE [--image FILE ...] --prompt TEXT\n"
            "       rrfp-mm generate RECIPE.ini --checkpoint DIR|latest --manifest FILE.json --images DIR --out ANSWERS.jsonl\n"
            "                        [--resume] [--samples N] [--model-id NAME]\n"
            "  decoding: [--max-new-tokens N (64)] [--temperature T (0: greedy)] [--top-p P (1)] [--seed S (0)]\n\n"
            "Answers questions about images with a checkpoint's model (a run's, or an import's as it is):\n"
            "autoregressive decoding with a KV cache through the training forward, on runtime.backend. As the\n"
            "model's data was made (the checkpoint's record, else data.shards'): the question through that chat\n"
            "template, images through the loader's preprocessing, stopping at the template's end of answer; a\n"
            "tokenizer of another hash is refused. An import's model keys come from the checkpoint.\n"
            "  --image FILE --prompt TEXT   one question (\"<image>\" marks the image; without it the image\n"
            "                               comes first); prints the answer. --image repeated: several images, in\n"
            "                               order (one \"<image>\" each in the prompt, or none: all come first;\n"
            "                               at most 16, as a manifest record)\n"
            "  --manifest FILE --images DIR the first human turn of every record (JSON array or JSONL), one line\n"
            "  --out ANSWERS.jsonl          each: {\"question_id\", \"prompt\", \"text\", \"model_id\"} as LLaVA's\n"
            "                               model_vqa.py writes them, appended and flushed as each is answered (an\n"
            "                               interrupted run keeps every answer written, each line whole); a\n"
            "                               progress line on stderr. An existing non-empty file needs --resume.\n"
            "                               Refused before the model loads: a path that is an input (the manifest,\n"
            "                               an image, the recipe, its tokenizer or shards), a file in a checkpoint\n"
            "                               or a run folder's own file, or a folder (docs/reliability.md)\n"
            "  --resume                     continue ANSWERS.jsonl: the question ids it holds are skipped, the\n"
            "                               other records answered and appended (a torn last line is dropped;\n"
            "                               a file that is not an answers file, or one of another --model-id, is\n"
            "                               refused)\n"
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
                 rr_read_file_why(errno, "an image file (JPEG, PNG or GIF)", why, sizeof why));
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

/* The key a record's answer is found by in an answers file: its question_id as JSON text (the manifest's
 * "id", or the record's index when it has none). malloc'd. */
static char* generate_qid_key(const cJSON* id, int index) {
    if (!id) {
        char b[32];
        snprintf(b, sizeof b, "%d", index);
        return strdup(b);
    }
    return cJSON_PrintUnformatted(id);
}

static int generate_key_cmp(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* What an answers file (--out with --resume) holds. */
typedef struct {
    char** keys;          /* question ids answered (generate_qid_key), sorted */
    int n;
    char model_id[256];   /* the first line's model_id */
    int model_line;       /* a line whose model_id differs from the first's (0 = none) */
    long long whole;      /* bytes of whole lines (a torn last line after them is dropped) */
} Answered;

static void answered_free(Answered* a) {
    for (int i = 0; i < a->n; i++) free(a->keys[i]);
    free(a->keys);
    memset(a, 0, sizeof *a);
}

/* Read answers file `path` (absent: nothing answered). Every whole line must be an answer as generate
 * writes it: {"question_id": string or number, "prompt", "text", "model_id": strings}. 0, or -1 with a
 * message naming the line. */
static int answered_load(const char* path, Answered* a, char* err, size_t err_len) {
    memset(a, 0, sizeof *a);
    size_t n = 0;
    char* text = rr_read_file(path, &n, RR_MAX_JSONL);
    if (!text) {
        if (errno == ENOENT) return 0;
        char why[160];
        snprintf(err, err_len, "--resume: %s: cannot read: %s", path, rr_read_file_why(errno, "an answers file (JSONL)", why, sizeof why));
        return -1;
    }
    int cap = 0, line = 0, rc = 0;
    for (size_t at = 0; at < n && rc == 0; line++) {
        char* nl = memchr(text + at, '\n', n - at);
        if (!nl) break; /* a torn last line: dropped by the caller */
        /* the line's one JSON value, nothing after it (a NUL byte or text after the object is damage, not an answer) */
        cJSON* j = rr_json_parse_whole(text + at, (size_t)(nl - (text + at)), NULL);
        const cJSON* q = j ? cJSON_GetObjectItemCaseSensitive(j, "question_id") : NULL;
        const cJSON* mid = j ? cJSON_GetObjectItemCaseSensitive(j, "model_id") : NULL;
        if (!cJSON_IsObject(j) || !(cJSON_IsString(q) || cJSON_IsNumber(q)) || !cJSON_IsString(mid) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "prompt")) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "text"))) {
            snprintf(err, err_len, "--resume: %s:%d: not an answer (a JSON object with \"question_id\", \"prompt\", "
                     "\"text\" and \"model_id\", as generate writes it): refusing to append answers to a file that is "
                     "not an answers file (give another --out)", path, line + 1);
            rc = -1;
        } else {
            if (a->n == cap) {
                cap = cap ? 2 * cap : 64;
                a->keys = reallocCheck(a->keys, (size_t)cap * sizeof(char*));
            }
            a->keys[a->n++] = cJSON_PrintUnformatted(q);
            if (a->n == 1) snprintf(a->model_id, sizeof a->model_id, "%s", mid->valuestring);
            else if (!a->model_line && strcmp(a->model_id, mid->valuestring)) a->model_line = line + 1;
        }
        cJSON_Delete(j);
        at = (size_t)(nl - text) + 1;
        if (rc == 0) a->whole = (long long)at;
    }
    free(text);
    if (rc != 0) {
        answered_free(a);
        return -1;
    }
    if (a->n) qsort(a->keys, (size_t)a->n, sizeof(char*), generate_key_cmp);
    if ((long long)n > a->whole)
        fprintf(stderr, "rrfp-mm: warning: --resume: %s:%d: dropped a torn last line without its newline (%lld bytes): "
                "what an interrupted write leaves\n", path, line + 1, (long long)n - a->whole);
    return 0;
}

static int answered_has(const Answered* a, const char* key) {
    return a->n && bsearch(&key, a->keys, (size_t)a->n, sizeof(char*), generate_key_cmp) != NULL;
}

/* Append one line (text + '\n') to fd in one piece; on a failure the file is cut back to where it was, so
 * it never ends in part of a line. 0, or -1 with errno. */
static int generate_append_line(int fd, const char* text) {
    size_t n = strlen(text);
    char* b = mallocCheck(n + 1);
    memcpy(b, text, n);
    b[n] = '\n';
    off_t at = lseek(fd, 0, SEEK_END);
    size_t done = 0;
    while (done < n + 1) {
        ssize_t w = write(fd, b + done, n + 1 - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            int cut = at >= 0 ? ftruncate(fd, at) : -1; /* best effort: the write's error is the one reported */
            (void)cut;
            free(b);
            errno = e;
            return -1;
        }
        done += (size_t)w;
    }
    free(b);
    return 0;
}

/* The manifest form: the records of m (the first `samples`) not in `done`, each answer appended to fd
 * (out_path) as it is made, so an interrupted run keeps the answers so far; fd is closed here (its close checked
 * before the summary says the answers are written). Returns the exit status. */
static int generate_manifest(Generator* g, const Manifest* m, const char* manifest, const char* images, const char* out_path,
                             int fd, long long samples, const char* model_id, const Answered* done, const GenOptions* o) {
    int n = m->n;
    if (samples > 0 && samples < n) n = (int)samples;
    int answered = 0, failed = 0, verify_bad = 0, skipped = 0, wrc = 0;
    long long tokens = 0;
    double maxdiff = 0, t0 = rr_now();
    int every = n >= 20 ? n / 20 : 1;
    for (int i = 0; i < n && !wrc; i++) {
        const ManifestRecord* rec = &m->recs[i];
        const char* why = NULL;
        char e[1024] = "";
        const cJSON* id = rec->rec ? cJSON_GetObjectItemCaseSensitive(rec->rec, "id") : NULL;
        if (done->n) {
            char* key = generate_qid_key(id, i);
            int have = answered_has(done, key);
            free(key);
            if (have) {
                skipped++;
                continue;
            }
        }
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
        if (generate_append_line(fd, js) != 0) {
            fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s (the %d answer%s written before it stay; --resume "
                    "continues)\n", out_path, strerror(errno), answered, answered == 1 ? "" : "s");
            wrc = 1;
        }
        free(js);
        cJSON_Delete(line);
        free(answer);
        if (wrc) break;
        answered++;
        rr_test_pause("RRFP_TEST_GEN_SLEEP_MS");
        if ((i + 1) % every == 0 || i + 1 == n) {
            double dt = rr_now() - t0;
            fprintf(stderr, "generate: %d / %d records answered (%.1f / s)%s\n", i + 1, n, dt > 0 ? (i + 1) / dt : 0.0,
                    failed ? " (some not: see above)" : "");
        }
    }
    int rc = wrc;
    if (fsync(fd) != 0 && errno != EINVAL && !rc) {
        fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s\n", out_path, strerror(errno));
        rc = 1;
    }
    /* NFS reports a write-back error at close: the answers would be reported written and are not */
    if (close(fd) != 0 && !rc) {
        fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s (--resume checks what it holds and continues)\n",
                out_path, strerror(errno));
        rc = 1;
    }
    /* the file's entry (made by this run, or an earlier one) durable too */
    if (!rc && rr_fsync_parent(out_path) != 0) {
        fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s (fsync of its folder)\n", out_path, strerror(errno));
        rc = 1;
    }
    if (rc == 0)
        fprintf(stderr, "generate: %d answers (%lld tokens generated) in %s (%.1f s)\n", answered, tokens, out_path,
                rr_now() - t0);
    if (skipped)
        fprintf(stderr, "generate: --resume: %d record%s already answered in %s skipped\n", skipped,
                skipped == 1 ? "" : "s", out_path);
    if (o->verify)
        fprintf(stderr, "generate: verify: max |logit(KV cache) - logit(full re-forward)| %.3g over every step, greedy "
                "token differs at %d step%s\n", maxdiff, verify_bad, verify_bad == 1 ? "" : "s");
    if (failed) {
        fprintf(stderr, "rrfp-mm: error: %d of %d records not answered (named above; --resume answers them)\n", failed, n);
        rc = 1;
    }
    return rc;
}

/* Before the model loads (the manifest form): the output guard on --out against every input (the recipe's,
 * the checkpoint, the manifest, --images and the image of each record to answer), then the answers file
 * --resume continues (or, without --resume, an existing one refused). 0, 2 (usage) or 1 with err. */
static int generate_out_check(const Recipe* r, const char* ckpt, const char* manifest, const char* images,
                              const Manifest* m, long long samples, const char* out, int resume, Answered* done,
                              char* err, size_t err_len) {
    GuardInputs in = {0};
    guard_inputs_add_recipe(&in, r);
    if (strcmp(ckpt, "latest") && strcmp(ckpt, "auto")) guard_inputs_add(&in, ckpt, "the checkpoint", 1);
    guard_inputs_add(&in, manifest, "the manifest", 0);
    guard_inputs_add(&in, images, "the --images folder", 0);
    int rc = guard_output("--out", out, GUARD_OUT_FILE, NULL, &in, err, err_len) != 0 ? 2 : 0;
    guard_inputs_free(&in);
    /* the image of every record to answer (one at a time: a manifest names hundreds of thousands) */
    struct stat sb;
    int n = m->n;
    if (samples > 0 && samples < n) n = (int)samples;
    int exists = stat(out, &sb) == 0; /* a file yet to be made is no image */
    for (int i = 0; !rc && exists && i < n; i++) {
        const cJSON* img = m->recs[i].rec ? cJSON_GetObjectItemCaseSensitive(m->recs[i].rec, "image") : NULL;
        const cJSON* first = cJSON_IsArray(img) ? img->child : img;
        for (const cJSON* it = first; it && !rc; it = cJSON_IsArray(img) ? it->next : NULL) {
            char e[512], what[64];
            char* p = cJSON_IsString(it) ? generate_image_path(images, it->valuestring, e, sizeof e) : NULL;
            snprintf(what, sizeof what, "an image of record %d", i + 1);
            if (p && guard_output_input("--out", out, p, what, err, err_len) != 0) rc = 2;
            free(p);
        }
    }
    if (rc) return rc;
    if (resume) return answered_load(out, done, err, err_len) != 0 ? 1 : 0;
    if (stat(out, &sb) == 0 && sb.st_size > 0) {
        snprintf(err, err_len, "--out '%s' already holds answers (%lld bytes): --resume continues it (the question ids "
                 "it holds are skipped), or remove it or give another --out", out, (long long)sb.st_size);
        return 2;
    }
    return 0;
}

int cmd_generate(int argc, char** argv) {
    const char *recipe_path = NULL, *ckpt = NULL, *prompt = NULL, *manifest = NULL, *images = NULL, *out = NULL,
               *model_id = NULL;
    const char* image[MANIFEST_MAX_IMAGES + 1];
    long long samples = 0;
    int threads = 1, n_image = 0, resume = 0;
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
        } else if (!strcmp(a, "--resume")) {
            resume = 1;
        } else if (a[0] == '-' && strcmp(a, "--set") && strcmp(a, "--checkpoint") && strcmp(a, "--image") &&
                   strcmp(a, "--prompt") && strcmp(a, "--manifest") && strcmp(a, "--images") && strcmp(a, "--out") &&
                   strcmp(a, "--samples") && strcmp(a, "--model-id") && strcmp(a, "--max-new-tokens") && strcmp(a, "--threads") &&
                   strcmp(a, "--temperature") && strcmp(a, "--top-p") && strcmp(a, "--seed")) {
            cli_unknown_option("generate", a, generate_usage, NULL);
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
            else if (!strcmp(a, "--image")) {
                /* several images in order, as a manifest record's "image" array */
                if (n_image == MANIFEST_MAX_IMAGES) {
                    fprintf(stderr, "rrfp-mm generate: more than %d --image: a question takes at most %d images\n",
                            MANIFEST_MAX_IMAGES, MANIFEST_MAX_IMAGES);
                    free(sets);
                    return 2;
                }
                image[n_image++] = v;
            }
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
            cli_second_recipe("generate", recipe_path, a, generate_usage);
            free(sets);
            return 2;
        }
    }
    int one = n_image || prompt, many = manifest || images || out || resume;
    if (!recipe_path || !ckpt || one == many || (one && (!n_image || !prompt)) || (many && (!manifest || !images || !out))) {
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
    int rc = 1, fd = -1;
    Manifest m = {0};
    int have_m = 0;
    Answered done = {0};
    if (many) {
        /* before the model loads: the manifest, the output guard, the answers file to continue */
        if (manifest_load(manifest, &m, err, sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm: error: %s\n", err);
            goto done;
        }
        have_m = 1;
        rc = generate_out_check(r, ckpt, manifest, images, &m, samples, out, resume, &done, err, sizeof err);
        if (rc != 0) {
            fprintf(stderr, "rrfp-mm%s: %s\n", rc == 2 ? " generate" : ": error", err);
            goto done;
        }
        rc = 1;
    }
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
        size_t n[MANIFEST_MAX_IMAGES];
        uint8_t* b[MANIFEST_MAX_IMAGES] = {0};
        int ok = 1;
        for (int k = 0; k < n_image && ok; k++) ok = (b[k] = generate_read_image(image[k], &n[k], err, sizeof err)) != NULL;
        char* answer = NULL;
        GenStats st;
        int at = 0, used = 0;
        if (!ok) {
            fprintf(stderr, "rrfp-mm: error: %s\n", err);
        } else if (generator_answer(g, prompt, (const uint8_t* const*)b, n, n_image, &o, &answer, &st, err, sizeof err) != 0) {
            /* "image K: why" (generate.c, K from 1): the file is named, not only its place */
            if (sscanf(err, "image %d: %n", &at, &used) == 1 && used > 0 && at >= 1 && at <= n_image)
                fprintf(stderr, "rrfp-mm: error: --image %s (image %d): %s\n", image[at - 1], at, err + used);
            else
                fprintf(stderr, "rrfp-mm: error: %s\n", err);
        } else {
            printf("%s\n", answer);
            generate_print_stats(&st, &o);
            rc = o.verify && st.argmax_differs ? 1 : 0;
        }
        free(answer);
        for (int k = 0; k < n_image; k++) free(b[k]);
    } else if (done.n && (strcmp(done.model_id, model_id) != 0 || done.model_line)) {
        char more[64] = "";
        if (done.model_line) snprintf(more, sizeof more, " (and another from line %d on)", done.model_line);
        fprintf(stderr, "rrfp-mm: error: --resume: %s holds answers of model '%s'%s, this run's are '%s' (--model-id): "
                "resuming would mix two models' answers in one file\n---> HINT: give --model-id '%s' if this is that "
                "model, or another --out\n", out, done.model_id, more, model_id, done.model_id);
    } else if ((fd = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0 ||
               (done.whole >= 0 && resume && ftruncate(fd, (off_t)done.whole) != 0)) {
        fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s\n", out, strerror(errno));
    } else {
        rc = generate_manifest(g, &m, manifest, images, out, fd, samples, model_id, &done, &o);
        fd = -1; /* closed there */
    }
done:
    if (fd >= 0) close(fd); /* not written: a refusal before generate_manifest */
    answered_free(&done);
    if (have_m) manifest_free(&m);
    generator_free(g);
    trainer_free(t);
    free(t);
    self->ops->free(self);
    free(r);
    return rc;
}
