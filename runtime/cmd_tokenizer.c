/* cmd_tokenizer.c — `rrfp-mm tokenizer train|encode|decode|info`: train a byte-level BPE tokenizer
 * on a manifest's conversations, and use any Hugging Face byte-level BPE tokenizer.json from the
 * shell (the peer test in tests/node compares these ids with Hugging Face's own implementation). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/cli.h"
#include "text/tokenizer.h"

static void tokenizer_usage(FILE* f) {
    fprintf(f,
            "usage:\n"
            "  rrfp-mm tokenizer train  --vocab N --manifest M [--manifest M2 ...] [--text-file F ...] --out tok.json\n"
            "                           [--min-frequency K] [--special TOKEN ...]\n"
            "  rrfp-mm tokenizer encode --tokenizer tok.json [--text S | --file F] [--lines]\n"
            "  rrfp-mm tokenizer decode --tokenizer tok.json [--ids \"1 2 3\" | --file F]\n"
            "  rrfp-mm tokenizer info   --tokenizer tok.json\n"
            "\n"
            "train   learns byte-level BPE merges from the \"value\" of every conversation turn in LLaVA\n"
            "        manifests (JSON array or JSONL) and plain text files, and writes a Hugging Face\n"
            "        tokenizer.json: 256 byte tokens, then merges, then the special tokens %s\n"
            "        (plus any --special); N counts all of them. Merges stop early when no pair occurs\n"
            "        K times (default %d).\n"
            "encode  prints the ids of the text (stdin if neither --text nor --file), space-separated;\n"
            "        --lines encodes each line separately (without its newline), one output line each.\n"
            "decode  writes the bytes of the ids (from --ids, --file or stdin) to stdout.\n"
            "info    prints the vocabulary size, the number of merges, the added tokens and the hash.\n",
            "\"<image>\", \"<|endoftext|>\"", 2);
}

static char* read_stdin(size_t* n) {
    size_t cap = 1 << 16, len = 0;
    char* buf = mallocCheck(cap + 1);
    size_t k;
    while ((k = fread(buf + len, 1, cap - len, stdin)) > 0) {
        len += k;
        if (len == cap) buf = reallocCheck(buf, (cap *= 2) + 1);
    }
    buf[len] = 0;
    *n = len;
    return buf;
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
    int lines = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "--lines")) lines = 1;
        else {
            fprintf(stderr, "rrfp-mm tokenizer encode: unknown or incomplete option '%s'\n\n", argv[i]);
            tokenizer_usage(stderr);
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
        if (!(buf = rr_read_file(file, &n))) {
            fprintf(stderr, "rrfp-mm: error: %s: cannot read: %s\n", file, strerror(errno));
            tokenizer_free(tok);
            return 1;
        }
    } else {
        buf = read_stdin(&n);
    }
    int32_t* ids;
    if (lines) {
        size_t start = 0;
        while (start < n) {
            const char* nl = memchr(buf + start, '\n', n - start);
            size_t end = nl ? (size_t)(nl - buf) : n;
            int k = tokenizer_encode(tok, buf + start, end - start, &ids);
            print_ids(ids, k);
            free(ids);
            start = end + 1;
        }
    } else {
        int k = tokenizer_encode(tok, buf, n, &ids);
        print_ids(ids, k);
        free(ids);
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
            fprintf(stderr, "rrfp-mm tokenizer decode: unknown or incomplete option '%s'\n\n", argv[i]);
            tokenizer_usage(stderr);
            return 2;
        }
    }
    Tokenizer* tok = load_or_die(tok_path);
    if (!tok) return tok_path ? 1 : 2;
    size_t n;
    char* buf = ids_arg ? strdup(ids_arg) : file ? rr_read_file(file, &n) : read_stdin(&n);
    if (!buf) {
        fprintf(stderr, "rrfp-mm: error: %s: cannot read: %s\n", file, strerror(errno));
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
            fprintf(stderr, "rrfp-mm tokenizer info: unknown or incomplete option '%s'\n\n", argv[i]);
            tokenizer_usage(stderr);
            return 2;
        }
    }
    Tokenizer* tok = load_or_die(tok_path);
    if (!tok) return tok_path ? 1 : 2;
    printf("tokenizer: %s\n", tok_path);
    printf("vocab size: %d\n", tokenizer_vocab_size(tok));
    printf("hash: %016" PRIx64 "\n", tokenizer_hash(tok));
    const char* probe[] = {"<image>", "<|endoftext|>"};
    for (int i = 0; i < 2; i++) {
        int id = tokenizer_token_id(tok, probe[i]);
        if (id >= 0) printf("%s: %d\n", probe[i], id);
    }
    tokenizer_free(tok);
    return 0;
}

int cmd_tokenizer(int argc, char** argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        tokenizer_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "encode")) return cmd_encode(argc - 2, argv + 2);
    if (!strcmp(argv[1], "decode")) return cmd_decode(argc - 2, argv + 2);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 2, argv + 2);
    fprintf(stderr, "rrfp-mm tokenizer: unknown subcommand '%s'\n\n", argv[1]);
    tokenizer_usage(stderr);
    return 2;
}
