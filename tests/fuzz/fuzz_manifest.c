/* fuzz_manifest.c — libFuzzer target for the manifest parser and record checks (data/manifest.c):
 * any bytes as a manifest (JSON array or JSONL) must parse to records or give an error naming a
 * line, and every record must be accepted or rejected with a reason, never crash. A UTF-8 byte-order
 * mark in front changes nothing: the same outcome and the same number of records (it once turned a
 * JSON array into JSONL, losing records). The tokenizer is
 * the byte-level BPE in $FUZZ_TOKENIZER (run_fuzz.sh trains one on the demo data). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/manifest.h"

static Tokenizer* tok;
static int image_id, eot_id;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    const char* p = getenv("FUZZ_TOKENIZER");
    char err[512];
    if (!p || !(tok = tokenizer_load(p, err, sizeof err))) {
        fprintf(stderr, "fuzz_manifest: set FUZZ_TOKENIZER to a tokenizer.json (%s)\n", p ? err : "unset");
        exit(1);
    }
    image_id = tokenizer_token_id(tok, "<image>");
    eot_id = tokenizer_token_id(tok, "<|endoftext|>");
    return 0;
}

/* The outcome of parsing with a byte-order mark in front: -1 (an error) or the record count. */
static int with_bom(const uint8_t* data, size_t size) {
    char* b = malloc(size + 3);
    memcpy(b, "\xEF\xBB\xBF", 3);
    memcpy(b + 3, data, size);
    Manifest m;
    char err[1024];
    int n = manifest_parse(b, size + 3, "fuzz.json", &m, err, sizeof err) != 0 ? -1 : m.n;
    if (n >= 0) manifest_free(&m);
    free(b);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Manifest m;
    char err[1024];
    int rc = manifest_parse((const char*)data, size, "fuzz.json", &m, err, sizeof err);
    if (!(size >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3)) && with_bom(data, size) != (rc != 0 ? -1 : m.n)) {
        fprintf(stderr, "fuzz_manifest: a byte-order mark in front changes the outcome (%d records without)\n",
                rc != 0 ? -1 : m.n);
        abort();
    }
    if (rc != 0) return 0;
    for (int i = 0; i < m.n; i++) {
        if (!m.recs[i].rec) continue;
        ManifestSample s;
        char why[512];
        if (manifest_sample_build(m.recs[i].rec, m.recs[i].line, tok, image_id, eot_id, &s, why, sizeof why) ==
            REJECT_NONE) {
            if (s.n_tokens < 1) abort(); /* an accepted record always has its answer and <|endoftext|> */
            manifest_sample_free(&s);
        }
    }
    manifest_free(&m);
    return 0;
}
