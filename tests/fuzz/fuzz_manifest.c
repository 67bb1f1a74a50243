/* fuzz_manifest.c — libFuzzer target for the manifest parser and record checks (data/manifest.c):
 * any bytes as a manifest (JSON array or JSONL) must parse to records or give an error naming a
 * line, and every record must be accepted or rejected with a reason, never crash. The tokenizer is
 * the byte-level BPE in $FUZZ_TOKENIZER (run_fuzz.sh trains one on the demo data). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Manifest m;
    char err[1024];
    if (manifest_parse((const char*)data, size, "fuzz.json", &m, err, sizeof err) != 0) return 0;
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
