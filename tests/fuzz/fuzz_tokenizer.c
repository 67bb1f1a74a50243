/* fuzz_tokenizer.c — libFuzzer target for text/tokenizer.c (built with -DRRFP_FUZZ=ON and clang).
 * The first input byte picks the mode:
 *   even: the rest is a tokenizer.json: loading must succeed or fail with a message naming the file;
 *         whatever loads must encode and decode a fixed text with valid ids;
 *   odd:  the rest is text: encoded with a fixed tokenizer (merges, the GPT-2 split, added tokens),
 *         it must decode back to exactly the same bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

static Tokenizer* fixed;

static const char* FIXED_JSON =
    "{\"added_tokens\":[{\"id\":258,\"content\":\"<image>\",\"special\":true,\"normalized\":false},"
    "{\"id\":259,\"content\":\"<|endoftext|>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{%s\"th\":256,\"the\":257},"
    "\"merges\":[\"t h\",\"th e\"]}}";

static void build_fixed(void) {
    /* the 256 byte tokens, spelled as GPT-2's bytes_to_unicode does */
    static char vocab[256 * 16], json[256 * 16 + 1024];
    size_t o = 0;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)n++;
        char u[4];
        int k;
        if (cp < 0x80) u[0] = (char)cp, k = 1;
        else u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), k = 2;
        if (cp == '"' || cp == '\\') o += (size_t)snprintf(vocab + o, sizeof vocab - o, "\"\\%c\":%d,", (char)cp, b);
        else o += (size_t)snprintf(vocab + o, sizeof vocab - o, "\"%.*s\":%d,", k, u, b);
    }
    snprintf(json, sizeof json, FIXED_JSON, vocab);
    char err[256];
    fixed = tokenizer_load_json(json, strlen(json), "fixed.json", err, sizeof err);
    if (!fixed) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (!fixed) build_fixed();
    if (size == 0) return 0;
    const char* body = (const char*)data + 1;
    size_t n = size - 1;
    if ((data[0] & 1) == 0) {
        char err[512] = {0};
        Tokenizer* t = tokenizer_load_json(body, n, "fuzz.json", err, sizeof err);
        if (!t) {
            if (strncmp(err, "fuzz.json", 9)) abort(); /* every refusal names the file */
            return 0;
        }
        static const char text[] = "the cat's <image> 123 \xff\xfe caf\xc3\xa9 \xf0\x9f\xa4\x97  ";
        int32_t* ids;
        int k = tokenizer_encode(t, text, sizeof text - 1, &ids);
        for (int i = 0; i < k; i++)
            if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t)) abort();
        size_t len;
        free(tokenizer_decode(t, ids, k, &len));
        free(ids);
        tokenizer_free(t);
    } else {
        int32_t* ids;
        int k = tokenizer_encode(fixed, body, n, &ids);
        size_t len;
        char* back = tokenizer_decode(fixed, ids, k, &len);
        if (len != n || memcmp(back, body, n)) abort(); /* byte-exact round trip for any bytes */
        free(back);
        free(ids);
    }
    return 0;
}
