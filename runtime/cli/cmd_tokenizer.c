/* cmd_tokenizer.c — `rrfp-mm tokenizer train|encode|decode|info|add-special`: train a byte-level BPE
 * tokenizer on a manifest's conversations, use any Hugging Face byte-level BPE tokenizer.json from the
 * shell (the peer test in tests/support/node compares these ids with Hugging Face's own implementation), and add
 * special tokens (such as a template's </s> and <image>) to one. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/json.h"
#include "engine/util.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/args.h"
#include "runtime/train/outguard.h"
#include "text/bpe_train.h"
#include "text/tokenizer.h"

static void tokenizer_usage(FILE* f) {
    fprintf(f,
            "usage:\n"
            "  rrfp-mm tokenizer train  --vocab N --manifest M [--manifest M2 ...] [--text-file F ...] --out tok.json\n"
            "                           [--min-frequency K] [--special TOKEN ...] [--quiet]\n"
            "  rrfp-mm tokenizer encode --tokenizer tok.json [--text S | --file F] [--lines] [--count]\n"
            "  rrfp-mm tokenizer decode --tokenizer tok.json [--ids \"1 2 3\" | --file F]\n"
            "  rrfp-mm tokenizer info   --tokenizer tok.json\n"
            "  rrfp-mm tokenizer add-special --tokenizer IN.json --add \"</s>,<image>\" [--add TOKEN ...] --out OUT.json\n"
            "\n"
            "train   learns byte-level BPE merges from the \"value\" of every conversation turn in LLaVA\n"
            "        manifests (JSON array or JSONL) and plain text files, and writes a Hugging Face\n"
            "        tokenizer.json: 256 byte tokens, then merges, then the special tokens %s\n"
            "        (plus any --special); N counts all of them. Merges stop early when no pair occurs\n"
            "        K times (default %d). --out is refused before any text is read when it is one of the\n"
            "        inputs, a folder, a file in a checkpoint or a run folder's own file (docs/reliability.md);\n"
            "        it is written to a temporary name and renamed. --quiet: no progress lines on stderr.\n"
            "encode  prints the ids of the text (stdin if neither --text nor --file), space-separated;\n"
            "        --lines encodes each line separately (without its newline), one output line each;\n"
            "        --count prints only the number of ids, and the encoding speed on stderr.\n"
            "decode  writes the bytes of the ids (from --ids, --file or stdin) to stdout.\n"
            "info    prints the vocabulary size, the number of merges, the added tokens and the hash.\n"
            "add-special writes IN with the tokens (comma-separated, --add repeatable) added as special tokens,\n"
            "        as Hugging Face's added_tokens: a new token takes the next id after the vocabulary, one of\n"
            "        the vocabulary keeps its id, one IN already has as an added token is left as it is. OUT must\n"
            "        not be IN (never written over). A model using OUT needs model.vocab >= its vocab size.\n",
            BPE_TRAIN_DEFAULT_SPECIALS, BPE_TRAIN_DEFAULT_MIN_FREQUENCY);
}

/* stdin whole, up to the cap of a text file (NULL with errno EFBIG past it). */
static char* read_stdin(size_t* n) { return rr_read_stream(stdin, n, RR_MAX_JSONL); }

/* "PATH: cannot read: <why>" for a failed read of a text file (or stdin). */
static void read_failed(const char* what) {
    char why[160];
    fprintf(stderr, "rrfp-mm: error: %s: cannot read: %s\n", what ? what : "stdin",
            rr_read_file_why(errno, "a text file", why, sizeof why));
}

static Tokenizer* load_or_die(const char* path) {
    if (!path) {
        fprintf(stderr, "rrfp-mm tokenizer: --tokenizer tok.json is required\n");
        return NULL;
    }
    char err[512];
    Tokenizer* tok = tokenizer_load(path, err, sizeof err);
    if (!tok) fprintf(stderr, "rrfp-mm: error: %s\n", err);
    return tok;
}

static void print_ids(const int32_t* ids, int n) {
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
}

static int cmd_encode(int argc, char** argv) {
    const char *tok_path = NULL, *text = NULL, *file = NULL;
    int lines = 0, count = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--count")) count = 1;
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "--lines")) lines = 1;
        else {
            cli_unknown_option("tokenizer encode", argv[i], tokenizer_usage, "rrfp-mm tokenizer encode ");
            return 2;
        }
    }
    if (text && file) {
        fprintf(stderr, "rrfp-mm tokenizer encode: give --text or --file, not both\n");
        return 2;
    }
    Tokenizer* tok = load_or_die(tok_path);
    if (!tok) return tok_path ? 1 : 2;
    size_t n;
    char* buf;
    if (text) {
        buf = strdup(text);
        n = strlen(text);
    } else if (file) {
        if (!(buf = rr_read_file(file, &n, RR_MAX_JSONL))) {
            read_failed(file);
            tokenizer_free(tok);
            return 1;
        }
    } else if (!(buf = read_stdin(&n))) {
        read_failed(NULL);
        tokenizer_free(tok);
        return 1;
    }
    int32_t* ids;
    long long total = 0, n_lines = 0;
    double t0 = rr_now();
    if (lines) {
        size_t start = 0;
        while (start < n) {
            const char* nl = memchr(buf + start, '\n', n - start);
            size_t end = nl ? (size_t)(nl - buf) : n;
            int k = tokenizer_encode(tok, buf + start, end - start, &ids);
            if (!count) print_ids(ids, k);
            total += k;
            n_lines++;
            free(ids);
            start = end + 1;
        }
    } else {
        int k = tokenizer_encode(tok, buf, n, &ids);
        if (!count) print_ids(ids, k);
        total = k;
        free(ids);
    }
    if (count) {
        double dt = rr_now() - t0;
        printf("%lld\n", total);
        char what[64] = "";
        if (lines) snprintf(what, sizeof what, " in %lld lines", n_lines);
        fprintf(stderr, "tokenizer encode: %zu bytes%s -> %lld ids in %.3f s (%.2f MB/s, one thread)\n", n, what, total,
                dt, dt > 0 ? n / dt / 1e6 : 0.0);
    }
    free(buf);
    tokenizer_free(tok);
    return 0;
}

static int cmd_decode(int argc, char** argv) {
    const char *tok_path = NULL, *ids_arg = NULL, *file = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_arg = argv[++i];
        else if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
        else {
            cli_unknown_option("tokenizer decode", argv[i], tokenizer_usage, "rrfp-mm tokenizer decode ");
            return 2;
        }
    }
    Tokenizer* tok = load_or_die(tok_path);
    if (!tok) return tok_path ? 1 : 2;
    size_t n;
    char* buf = ids_arg ? strdup(ids_arg) : file ? rr_read_file(file, &n, RR_MAX_JSONL) : read_stdin(&n);
    if (!buf) {
        read_failed(file);
        tokenizer_free(tok);
        return 1;
    }
    const char* src = ids_arg ? "--ids" : file ? file : "stdin";
    int32_t* ids = NULL;
    int n_ids = 0, cap = 0, rc = 0;
    for (char* p = buf;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        char* end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= tokenizer_vocab_size(tok) || !tokenizer_token_str(tok, (int)v)) {
            int len = 0;
            while (p[len] && p[len] != ' ' && p[len] != '\n' && len < 20) len++;
            fprintf(stderr, "rrfp-mm: error: %s: '%.*s' (id #%d) is not a token id of %s (vocab size %d)\n", src, len,
                    p, n_ids + 1, tok_path, tokenizer_vocab_size(tok));
            rc = 1;
            break;
        }
        if (n_ids == cap) ids = reallocCheck(ids, (size_t)(cap = cap ? 2 * cap : 256) * sizeof(int32_t));
        ids[n_ids++] = (int32_t)v;
        p = end;
    }
    if (!rc) {
        size_t len;
        char* out = tokenizer_decode(tok, ids, n_ids, &len);
        fwrite(out, 1, len, stdout);
        free(out);
    }
    free(ids);
    free(buf);
    tokenizer_free(tok);
    return rc;
}

static int cmd_info(int argc, char** argv) {
    const char* tok_path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else {
            cli_unknown_option("tokenizer info", argv[i], tokenizer_usage, "rrfp-mm tokenizer info ");
            return 2;
        }
    }
    Tokenizer* tok = load_or_die(tok_path);
    if (!tok) return tok_path ? 1 : 2;
    printf("tokenizer: %s\n", tok_path);
    printf("vocab size: %d\n", tokenizer_vocab_size(tok));
    printf("merges: %d\n", tokenizer_n_merges(tok));
    printf("hash: %016" PRIx64 "\n", tokenizer_hash(tok));
    int n_added = 0, id;
    while (tokenizer_added(tok, n_added, &id)) n_added++;
    printf("added tokens: %d\n", n_added);
    const char* s;
    for (int i = 0; (s = tokenizer_added(tok, i, &id)); i++) { /* the file's text, its bytes shown safely */
        for (; *s; s++)
            if ((unsigned char)*s < 0x20 || *s == 0x7f) printf("\\x%02x", (unsigned char)*s);
            else putchar(*s);
        printf(": %d\n", id);
    }
    const char* probe[] = {"<image>", "<|endoftext|>"}; /* the ones the templates use, also as vocabulary tokens */
    for (int i = 0; i < 2; i++) {
        int pid = tokenizer_token_id(tok, probe[i]), added = 0;
        for (int j = 0; (s = tokenizer_added(tok, j, &id)); j++) added |= !strcmp(s, probe[i]);
        if (pid >= 0 && !added) printf("%s: %d (a vocabulary token)\n", probe[i], pid);
    }
    tokenizer_free(tok);
    return 0;
}

/* `tokenizer add-special`: tokens added to a tokenizer.json, written to another file. */
static int cmd_add_special(int argc, char** argv) {
    const char *in = NULL, *out = NULL;
    char** lists = mallocCheck((size_t)(argc + 1) * sizeof(char*));
    int n_lists = 0, rc = 2;
    const char** tokens = NULL;
    int* ids = NULL;
    int* added = NULL;
    char *text = NULL, *json = NULL;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) in = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--add") && i + 1 < argc) lists[n_lists++] = strdup(argv[++i]);
        else {
            cli_unknown_option("tokenizer add-special", argv[i], tokenizer_usage, "rrfp-mm tokenizer add-special ");
            goto done;
        }
    }
    if (!in || !out || !n_lists) {
        fprintf(stderr, "rrfp-mm tokenizer add-special: --tokenizer IN, --add TOKENS and --out OUT are required\n\n");
        tokenizer_usage(stderr);
        goto done;
    }
    /* the tokens: each --add split at commas */
    size_t cap = 0;
    for (int l = 0; l < n_lists; l++) cap += strlen(lists[l]) / 2 + 1;
    tokens = mallocCheck((cap + 1) * sizeof(char*));
    for (int l = 0; l < n_lists; l++)
        for (char *p = lists[l], *c; p; p = c) {
            if ((c = strchr(p, ','))) *c++ = 0;
            if (!*p) {
                fprintf(stderr, "rrfp-mm tokenizer add-special: --add #%d has an empty token (tokens are separated by "
                        "single commas)\n", l + 1);
                goto done;
            }
            tokens[n++] = p;
        }
    /* never written over its input (a link or another name of the same file included) */
    struct stat si, so;
    if (stat(out, &so) == 0) {
        if (stat(in, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
            fprintf(stderr, "rrfp-mm: error: tokenizer add-special: --out %s is the input tokenizer %s: it is never "
                    "written over; give another --out\n", out, in);
            goto done;
        }
        if (S_ISDIR(so.st_mode)) {
            fprintf(stderr, "rrfp-mm: error: tokenizer add-special: --out %s is a folder; give a file name\n", out);
            goto done;
        }
    }
    rc = 1;
    size_t len;
    if (!(text = rr_read_file(in, &len, RR_MAX_TOKENIZER))) {
        char why[160];
        fprintf(stderr, "rrfp-mm: error: %s: cannot read the tokenizer: %s\n", in,
                rr_read_file_why(errno, "a tokenizer.json file", why, sizeof why));
        goto done;
    }
    ids = mallocCheck((size_t)n * sizeof(int));
    added = mallocCheck((size_t)n * sizeof(int));
    char err[1024];
    if (!(json = tokenizer_json_add_special(text, len, in, tokens, n, -1, ids, added, err, sizeof err))) {
        fprintf(stderr, "rrfp-mm: error: tokenizer add-special: %s\n", err);
        goto done;
    }
    if (rr_write_file_atomic(out, json, strlen(json)) != 0) {
        fprintf(stderr, "rrfp-mm: error: %s: cannot write the tokenizer: %s\n", out, strerror(errno));
        goto done;
    }
    Tokenizer* before = tokenizer_load_json(text, len, in, err, sizeof err);
    Tokenizer* after = tokenizer_load_json(json, strlen(json), out, err, sizeof err);
    RR_ASSERT(before && after); /* both loaded inside tokenizer_json_add_special */
    for (int i = 0; i < n; i++)
        printf("%s: id %d (%s)\n", tokens[i], ids[i], added[i] ? "added, special" : "already an added token: kept");
    printf("wrote %s: vocab size %d -> %d (a model using it needs model.vocab >= %d)\n", out,
           tokenizer_vocab_size(before), tokenizer_vocab_size(after), tokenizer_vocab_size(after));
    tokenizer_free(before);
    tokenizer_free(after);
    rc = 0;
done:
    for (int l = 0; l < n_lists; l++) free(lists[l]);
    free(lists);
    free(tokens);
    free(ids);
    free(added);
    free(text);
    free(json);
    return rc;
}

/* Feed the "value" of every turn of one manifest sample; errors name the file and line / index. */
static int feed_sample(BpeTrainer* tr, const cJSON* sample, const char* where, long long* n_turns) {
    const cJSON* conv = cJSON_GetObjectItemCaseSensitive(sample, "conversations");
    if (!cJSON_IsObject(sample) || !cJSON_IsArray(conv)) {
        fprintf(stderr, "rrfp-mm: error: %s: expected a sample object with a \"conversations\" array\n", where);
        return -1;
    }
    const cJSON* turn;
    int i = 0;
    cJSON_ArrayForEach(turn, conv) {
        const cJSON* v = cJSON_GetObjectItemCaseSensitive(turn, "value");
        if (!cJSON_IsString(v)) {
            fprintf(stderr, "rrfp-mm: error: %s: conversations[%d] has no string \"value\"\n", where, i);
            return -1;
        }
        bpe_trainer_feed(tr, v->valuestring, strlen(v->valuestring));
        (*n_turns)++;
        i++;
    }
    return 0;
}

/* A LLaVA manifest: one JSON array of samples, or JSONL (one sample per non-empty line). */
static int feed_manifest(BpeTrainer* tr, const char* path, long long* n_samples, long long* n_turns) {
    const long long before = *n_samples;
    size_t n;
    char* buf = rr_read_file(path, &n, RR_MAX_MANIFEST);
    if (!buf) {
        char why[160];
        fprintf(stderr, "rrfp-mm: error: %s: cannot read the manifest: %s\n", path,
                rr_read_file_why(errno, "a JSON or JSONL manifest file", why, sizeof why));
        return -1;
    }
    if (n >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3)) memset(buf, ' ', 3); /* a UTF-8 BOM, as data/manifest.c */
    size_t i = 0;
    while (i < n && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r')) i++;
    char where[600];
    int rc = 0;
    if (i < n && buf[i] == '[') {
        size_t off = 0;
        cJSON* root = rr_json_parse_whole(buf, n, &off);
        if (!root) {
            int line = 1;
            for (size_t k = 0; k < off && k < n; k++) line += buf[k] == '\n';
            fprintf(stderr, "rrfp-mm: error: %s:%d: not valid JSON (a manifest is a JSON array of samples or JSONL)\n",
                    path, line);
            free(buf);
            return -1;
        }
        const cJSON* s;
        int k = 0;
        cJSON_ArrayForEach(s, root) {
            snprintf(where, sizeof where, "%s: sample %d", path, k++);
            if ((rc = feed_sample(tr, s, where, n_turns))) break;
            (*n_samples)++;
        }
        cJSON_Delete(root);
    } else {
        int line = 0;
        for (size_t start = 0; start < n && !rc;) {
            const char* nl = memchr(buf + start, '\n', n - start);
            size_t end = nl ? (size_t)(nl - buf) : n;
            line++;
            size_t j = start;
            while (j < end && (buf[j] == ' ' || buf[j] == '\t' || buf[j] == '\r')) j++;
            if (j < end) {
                cJSON* s = rr_json_parse_whole(buf + start, end - start, NULL);
                snprintf(where, sizeof where, "%s:%d", path, line);
                if (!s) {
                    fprintf(stderr, "rrfp-mm: error: %s: not valid JSON (a manifest is a JSON array of samples or JSONL)\n",
                            where);
                    rc = -1;
                } else {
                    rc = feed_sample(tr, s, where, n_turns);
                    (*n_samples)++;
                    cJSON_Delete(s);
                }
            }
            start = end + 1;
        }
    }
    free(buf);
    /* an empty manifest (or a FIFO with no writer, which reads as empty) trains nothing: a tokenizer of
     * bytes only, written as if it had learnt from the file */
    if (rc == 0 && *n_samples == before) {
        fprintf(stderr, "rrfp-mm: error: %s: the manifest holds no samples (expected a JSON array of samples or JSONL)\n",
                path);
        rc = -1;
    }
    return rc;
}

static int cmd_train_tokenizer(int argc, char** argv) {
    const char* out = NULL;
    long vocab = -1, min_freq = BPE_TRAIN_DEFAULT_MIN_FREQUENCY;
    const char** manifests = mallocCheck((size_t)(argc + 1) * sizeof(char*));
    const char** texts = mallocCheck((size_t)(argc + 1) * sizeof(char*));
    const char** specials = mallocCheck((size_t)(argc + 1) * sizeof(char*));
    int n_man = 0, n_text = 0, n_spec = 0, quiet = 0, rc = 2;
    BpeTrainer* tr = NULL;
    char* json = NULL;
    for (int i = 0; i < argc; i++) {
        char* end = NULL;
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc) {
            vocab = strtol(argv[++i], &end, 10);
            if (*end || vocab <= 0 || vocab > (1 << 24)) {
                fprintf(stderr, "rrfp-mm tokenizer train: --vocab %s: expected an integer in [1, 16777216]\n", argv[i]);
                goto done;
            }
        } else if (!strcmp(argv[i], "--min-frequency") && i + 1 < argc) {
            min_freq = strtol(argv[++i], &end, 10);
            if (*end || min_freq < 1) {
                fprintf(stderr, "rrfp-mm tokenizer train: --min-frequency %s: expected an integer >= 1\n", argv[i]);
                goto done;
            }
        } else if (!strcmp(argv[i], "--manifest") && i + 1 < argc) manifests[n_man++] = argv[++i];
        else if (!strcmp(argv[i], "--text-file") && i + 1 < argc) texts[n_text++] = argv[++i];
        else if (!strcmp(argv[i], "--special") && i + 1 < argc) specials[n_spec++] = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else {
            cli_unknown_option("tokenizer train", argv[i], tokenizer_usage, "rrfp-mm tokenizer train ");
            goto done;
        }
    }
    if (vocab < 0 || !out || n_man + n_text == 0) {
        fprintf(stderr, "rrfp-mm tokenizer train: --vocab N, --out FILE and at least one --manifest or --text-file "
                        "are required\n\n");
        tokenizer_usage(stderr);
        goto done;
    }
    char err[2048];
    { /* the output guard, before the text is read: never onto a manifest or text file it learns from */
        GuardInputs in = {0};
        for (int i = 0; i < n_man; i++) guard_inputs_add(&in, manifests[i], "the --manifest", 0);
        for (int i = 0; i < n_text; i++) guard_inputs_add(&in, texts[i], "the --text-file", 0);
        int bad = guard_output("--out", out, GUARD_OUT_FILE, NULL, &in, err, sizeof err);
        guard_inputs_free(&in);
        if (bad) {
            fprintf(stderr, "rrfp-mm tokenizer train: %s\n", err);
            goto done;
        }
    }
    if (!(tr = bpe_trainer_new(specials, n_spec, err, sizeof err))) {
        fprintf(stderr, "rrfp-mm tokenizer train: %s\n", err);
        goto done;
    }
    rc = 1;
    double t0 = rr_now();
    long long n_samples = 0, n_turns = 0, words, unique;
    for (int i = 0; i < n_man; i++) {
        if (feed_manifest(tr, manifests[i], &n_samples, &n_turns)) goto done;
        if (!quiet && n_man + n_text > 1) /* progress for long runs: one line per input file */
            fprintf(stderr, "tokenizer train: read %s (%lld samples so far, %.1f s)\n", manifests[i], n_samples,
                    rr_now() - t0);
    }
    for (int i = 0; i < n_text; i++) {
        size_t n;
        char* buf = rr_read_file(texts[i], &n, RR_MAX_JSONL);
        if (!buf) {
            read_failed(texts[i]);
            goto done;
        }
        bpe_trainer_feed(tr, buf, n);
        free(buf);
    }
    bpe_trainer_counts(tr, &words, &unique);
    if (!quiet)
        fprintf(stderr, "tokenizer train: %lld samples, %lld turns, %d text files: %lld words (%lld distinct) in %.2f s\n",
                n_samples, n_turns, n_text, words, unique, rr_now() - t0);
    int n_merges;
    if (!(json = bpe_trainer_finish(tr, (int)vocab, (int)min_freq, !quiet, &n_merges, err, sizeof err))) {
        fprintf(stderr, "rrfp-mm tokenizer train: %s\n", err);
        rc = 2;
        goto done;
    }
    /* load it back before writing: the file must be one the loader accepts */
    Tokenizer* tok = tokenizer_load_json(json, strlen(json), out, err, sizeof err);
    RR_ASSERT(tok); /* a trainer bug, not a user error */
    int size = tokenizer_vocab_size(tok);
    if (rr_write_file_atomic(out, json, strlen(json))) {
        fprintf(stderr, "rrfp-mm: error: %s: cannot write the tokenizer: %s\n", out, strerror(errno));
        tokenizer_free(tok);
        goto done;
    }
    if (size < vocab)
        rr_warn("tokenizer train: stopped at %d merges because no pair occurs %ld times; the vocabulary has %d tokens, "
                "not %ld\n---> HINT: give more text, or a lower --min-frequency", n_merges, min_freq, size, vocab);
    if (!quiet)
        fprintf(stderr, "tokenizer train: wrote %s: vocab %d (256 bytes + %d merges + %d special), hash %016llx, %.2f s\n",
                out, size, n_merges, size - 256 - n_merges, (unsigned long long)tokenizer_hash(tok), rr_now() - t0);
    tokenizer_free(tok);
    rc = 0;
done:
    free(json);
    bpe_trainer_free(tr);
    free(manifests);
    free(texts);
    free(specials);
    return rc;
}

int cmd_tokenizer(int argc, char** argv) {
    int rc;
    if (cli_sub_help(argc, argv, tokenizer_usage, &rc)) return rc;
    if (!strcmp(argv[1], "encode")) return cmd_encode(argc - 2, argv + 2);
    if (!strcmp(argv[1], "decode")) return cmd_decode(argc - 2, argv + 2);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 2, argv + 2);
    if (!strcmp(argv[1], "train")) return cmd_train_tokenizer(argc - 2, argv + 2);
    if (!strcmp(argv[1], "add-special")) return cmd_add_special(argc - 2, argv + 2);
    static const char* const subs[] = {"train", "encode", "decode", "info", "add-special"};
    const char* near = cli_nearest(argv[1], subs, 5);
    fprintf(stderr, "rrfp-mm tokenizer: unknown subcommand '%s'%s%s%s\n\n", argv[1], near ? "; did you mean '" : "",
            near ? near : "", near ? "'?" : "");
    tokenizer_usage(stderr);
    return 2;
}
