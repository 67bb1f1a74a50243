/* test_tokenizer.c — unit tests of text/tokenizer.c on small hand-built tokenizer.json files: the
 * GPT-2 byte map, merge priority, the GPT-2 split (with invalid UTF-8), added tokens as HF matches
 * them, byte-exact round trips of random bytes, the hash, error messages, and thread safety.
 * (Agreement with Hugging Face's own implementation on GPT-2's real vocabulary is checked by
 * tests/text/tokenizer_peer.sh.)
 * The trainer (text/bpe_train.c) is checked against a naive reference trainer written here (recount
 * every pair each step, sort, take the maximum with the documented tie-break): same merges, same order.
 * usage: test_tokenizer [--corpus FILE] [TOKENIZER.json ...]
 *   --corpus: text to train on (one text per line); extra files: round-trip random bytes through each */
#define _GNU_SOURCE /* memmem */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "text/bpe_internal.h"
#include "text/bpe_train.h"
#include "text/tokenizer.h"

#include "tests/support/check.h"

/* ---- building small tokenizer.json files ------------------------------------------------------ */

/* byte string -> its byte-level token string */
static void mapped(const char* bytes, size_t n, char* out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)bpe_byte_to_utf8((uint8_t)bytes[i], out + o);
    out[o] = 0;
}

/* Vocab: the 256 byte tokens at ids 0..255 (id = byte value), then one token per merge (256 + rank).
 * merges[i] = {left bytes, right bytes}. added: JSON array text or NULL. */
static char* tok_json(const char* merges[][2], int n_merges, const char* added, int add_prefix_space, int pairs,
                      int pretty) {
    cJSON* root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddItemToObject(root, "added_tokens", added ? cJSON_Parse(added) : cJSON_CreateArray());
    cJSON_AddNullToObject(root, "normalizer");
    cJSON* pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "ByteLevel");
    cJSON_AddBoolToObject(pt, "add_prefix_space", add_prefix_space);
    cJSON_AddBoolToObject(pt, "trim_offsets", 1);
    cJSON_AddBoolToObject(pt, "use_regex", 1);
    cJSON* dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON* model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON* vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON* ml = cJSON_AddArrayToObject(model, "merges");
    char a[64], b[64], ab[128], s[200];
    for (int i = 0; i < 256; i++) {
        char c = (char)i;
        mapped(&c, 1, a);
        cJSON_AddNumberToObject(vocab, a, i);
    }
    for (int i = 0; i < n_merges; i++) {
        mapped(merges[i][0], strlen(merges[i][0]), a);
        mapped(merges[i][1], strlen(merges[i][1]), b);
        snprintf(ab, sizeof ab, "%s%s", a, b);
        cJSON_AddNumberToObject(vocab, ab, 256 + i);
        if (pairs) {
            cJSON* p = cJSON_CreateArray();
            cJSON_AddItemToArray(p, cJSON_CreateString(a));
            cJSON_AddItemToArray(p, cJSON_CreateString(b));
            cJSON_AddItemToArray(ml, p);
        } else {
            snprintf(s, sizeof s, "%s %s", a, b);
            cJSON_AddItemToArray(ml, cJSON_CreateString(s));
        }
    }
    char* out = pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

static Tokenizer* load(const char* json) {
    char err[512];
    Tokenizer* t = tokenizer_load_json(json, strlen(json), "test.json", err, sizeof err);
    if (!t) fprintf(stderr, "load failed: %s\n", err);
    RR_ASSERT(t);
    return t;
}

/* encode and compare with expected ids (terminated by -1) */
static int enc_eq(const Tokenizer* t, const char* text, size_t n, const int* want) {
    int32_t* ids;
    int k = tokenizer_encode(t, text, n, &ids);
    int ok = 1, i = 0;
    for (; want[i] >= 0; i++) ok &= i < k && ids[i] == want[i];
    ok &= i == k;
    if (!ok) {
        fprintf(stderr, "  \"%.*s\" -> got", (int)n, text);
        for (int j = 0; j < k; j++) fprintf(stderr, " %d", ids[j]);
        fprintf(stderr, ", want");
        for (int j = 0; want[j] >= 0; j++) fprintf(stderr, " %d", want[j]);
        fprintf(stderr, "\n");
    }
    free(ids);
    return ok;
}
#define ENC(t, s, ...) enc_eq((t), (s), strlen(s), (const int[]){__VA_ARGS__, -1})

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_byte_map(void) {
    /* GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 + n in order */
    char u[3] = {0};
    int k = bpe_byte_to_utf8('!', u);
    CHECK(k == 1 && u[0] == '!', "'!'");
    k = bpe_byte_to_utf8(' ', u);
    CHECK(k == 2 && !memcmp(u, "\xC4\xA0", 2), "space is U+0120 'G-dot'");
    k = bpe_byte_to_utf8('\n', u);
    CHECK(k == 2 && !memcmp(u, "\xC4\x8A", 2), "newline is U+010A");
    k = bpe_byte_to_utf8(0x00, u);
    CHECK(k == 2 && !memcmp(u, "\xC4\x80", 2), "NUL is U+0100");
    k = bpe_byte_to_utf8(0xAD, u);
    CHECK(k == 2 && !memcmp(u, "\xC5\x83", 2), "0xAD (soft hyphen) is U+0143, the last one");
    int seen[256] = {0}, bijective = 1;
    for (uint32_t cp = 0; cp < 400; cp++) {
        int b = bpe_codepoint_to_byte(cp);
        if (b >= 0) bijective &= !seen[b]++;
    }
    for (int b = 0; b < 256; b++) bijective &= seen[b] == 1;
    CHECK(bijective, "the map is a bijection onto 256 code points");
}

static void test_merges(void) {
    const char* m[][2] = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"b", "c"}, {"a", "b"},
                          {"a", "a"}, {"x", "y"}, {"y", "z"}};
    char* js = tok_json(m, 10, NULL, 0, 0, 0);
    Tokenizer* t = load(js);
    CHECK(tokenizer_vocab_size(t) == 266, "vocab size %d", tokenizer_vocab_size(t));
    /* "hello" merges to one token; " world" is a pre-token starting with a space */
    CHECK(ENC(t, "hello world", 259, 260, 'o', 'r', 'l', 'd'), "hello world");
    /* rank decides, not position: (b,c) ranks before (a,b) */
    CHECK(ENC(t, "abc", 'a', 261), "abc -> a bc");
    CHECK(ENC(t, "ab", 262), "ab");
    /* equal rank: leftmost first */
    CHECK(ENC(t, "aaa", 263, 'a'), "aaa -> aa a");
    CHECK(ENC(t, "aaaa", 263, 263), "aaaa -> aa aa");
    /* (x,y) ranks before (y,z) */
    CHECK(ENC(t, "xyz", 264, 'z'), "xyz -> xy z");
    int32_t* ids;
    CHECK(tokenizer_encode(t, "", 0, &ids) == 0 && ids, "empty text gives no ids and a valid pointer");
    free(ids);
    CHECK(tokenizer_token_id(t, "hello") == 259 && tokenizer_token_id(t, "Ġw") == 260 &&
              tokenizer_token_id(t, "zz") == -1, "token_id");
    CHECK(tokenizer_token_str(t, 262) && !strcmp(tokenizer_token_str(t, 262), "ab") && !tokenizer_token_str(t, 266) &&
              !tokenizer_token_str(t, -1), "token_str");
    /* the "a b" string form and the ["a","b"] pair form, pretty or compact, are the same tokenizer */
    char* js2 = tok_json(m, 10, NULL, 0, 1, 1);
    Tokenizer* t2 = load(js2);
    CHECK(tokenizer_hash(t) == tokenizer_hash(t2), "hash ignores the merges form and the formatting");
    CHECK(ENC(t2, "hello world", 259, 260, 'o', 'r', 'l', 'd'), "pair form encodes the same");
    /* a different merge list is a different tokenizer */
    const char* m3[][2] = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"b", "c"}, {"a", "b"},
                           {"a", "a"}, {"y", "z"}, {"x", "y"}};
    char* js3 = tok_json(m3, 10, NULL, 0, 0, 0);
    Tokenizer* t3 = load(js3);
    CHECK(tokenizer_hash(t) != tokenizer_hash(t3), "hash depends on merge order");
    CHECK(ENC(t3, "xyz", 'x', 264), "xyz -> x yz when (y,z) ranks first");
    /* The hash is stored in shard headers, so its definition must not drift: this constant was
     * computed by this implementation when the format was fixed; change it only together with the
     * "rrfp-tokenizer-v1" tag in tokenizer_compute_hash. */
    CHECK(tokenizer_hash(t) == 0x65daa76b54866afaULL, "hash %016" PRIx64 " changed", tokenizer_hash(t));
    tokenizer_free(t);
    tokenizer_free(t2);
    tokenizer_free(t3);
    free(js);
    free(js2);
    free(js3);
}

typedef struct {
    char pieces[32][64];
    size_t len[32];
    int added[32];
    int n;
} Pieces;
static void collect(void* ctx, const char* s, size_t n, int added_id) {
    Pieces* p = ctx;
    if (p->n < 32 && n < 64) {
        memcpy(p->pieces[p->n], s, n);
        p->len[p->n] = n;
        p->added[p->n] = added_id;
    }
    p->n++;
}
static int pieces_eq(const Tokenizer* t, const char* text, size_t n, const char* const* want, int n_want) {
    Pieces p = {0};
    tokenizer_pretokenize(t, text, n, collect, &p);
    int ok = p.n == n_want;
    for (int i = 0; ok && i < n_want; i++) ok = p.len[i] == strlen(want[i]) && !memcmp(p.pieces[i], want[i], p.len[i]);
    if (!ok) {
        fprintf(stderr, "  pieces:");
        for (int i = 0; i < p.n && i < 32; i++) fprintf(stderr, " [%.*s]", (int)p.len[i], p.pieces[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}
#define PIECES(t, s, ...)                                                                   \
    pieces_eq((t), (s), sizeof(s) - 1, (const char* const[]){__VA_ARGS__},                  \
              (int)(sizeof((const char* const[]){__VA_ARGS__}) / sizeof(const char*)))

static void test_split(void) {
    char* js = tok_json(NULL, 0, NULL, 0, 0, 0);
    Tokenizer* t = load(js);
    /* GPT-2 pattern: contractions, letters / numbers / other with one optional leading space, and a
     * whitespace run gives all but its last space to the run when a word follows */
    CHECK(PIECES(t, "Hello world's  123abc!!  ", "Hello", " world", "'s", " ", " 123", "abc", "!!", "  "), "basic");
    CHECK(PIECES(t, "I'm they'll we'D", "I", "'m", " they", "'ll", " we", "'", "D"), "contractions are lower case only");
    CHECK(PIECES(t, "a\t\tb\n\nc", "a", "\t", "\t", "b", "\n", "\n", "c"), "tabs and newlines (only ' ' prefixes a word)");
    CHECK(PIECES(t, "na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC 12\xD9\xA3", "na\xC3\xAFve", " \xE6\x97\xA5\xE6\x9C\xAC", " 12\xD9\xA3"),
          "Unicode letters and digits");
    /* U+0085 (NEL) and U+3000 are White_Space, as in Oniguruma */
    CHECK(PIECES(t, "x\xC2\x85\xC2\x85y", "x", "\xC2\x85", "\xC2\x85", "y"), "NEL is white space");
    CHECK(PIECES(t, "x\xE3\x80\x80y", "x", "\xE3\x80\x80", "y"), "ideographic space is white space");
    /* invalid UTF-8: each maximal invalid run is a piece; valid text around it splits as usual */
    CHECK(PIECES(t, "ab\x80\x81" "cd \xFF end", "ab", "\x80\x81", "cd", " ", "\xFF", " end"), "invalid bytes");
    CHECK(PIECES(t, "\xE6\x97 x", "\xE6\x97", " x"), "truncated sequence");
    CHECK(PIECES(t, "\xED\xA0\x80z", "\xED\xA0\x80", "z"), "encoded surrogate is invalid");
    CHECK(PIECES(t, "\xC0\xAF", "\xC0\xAF"), "overlong is invalid");
    CHECK(enc_eq(t, "a\0b", 3, (const int[]){'a', 0, 'b', -1}), "NUL is an ordinary byte");
    tokenizer_free(t);
    free(js);
}

static void test_added(void) {
    const char* m[][2] = {{"a", "b"}, {" ", "x"}};
    const char* added =
        "[{\"id\":258,\"content\":\"<image>\",\"special\":true,\"normalized\":false},"
        " {\"id\":259,\"content\":\"<im\",\"special\":true,\"normalized\":false},"
        " {\"id\":260,\"content\":\"<|endoftext|>\",\"special\":true,\"normalized\":false},"
        " {\"id\":261,\"content\":\"<mask>\",\"special\":true,\"normalized\":false,\"lstrip\":true},"
        " {\"id\":262,\"content\":\"<r>\",\"special\":true,\"normalized\":false,\"rstrip\":true},"
        " {\"id\":263,\"content\":\"ony\",\"special\":false,\"normalized\":true,\"single_word\":true},"
        " {\"id\":264,\"content\":\"pq\",\"special\":false,\"normalized\":true},"
        " {\"id\":265,\"content\":\"qr\",\"special\":false,\"normalized\":false},"
        " {\"id\":257,\"content\":\"Ġx\",\"special\":false,\"normalized\":false}]";
    char* js = tok_json(m, 2, added, 0, 0, 0);
    Tokenizer* t = load(js);
    CHECK(tokenizer_vocab_size(t) == 266, "vocab size counts added ids: %d", tokenizer_vocab_size(t));
    CHECK(tokenizer_token_id(t, "<image>") == 258 && tokenizer_token_id(t, "<|endoftext|>") == 260, "added ids");
    CHECK(!strcmp(tokenizer_token_str(t, 258), "<image>"), "added str");
    /* literal match before pre-tokenization; longest wins ("<image>" over "<im") */
    CHECK(ENC(t, "<image>\nab", 258, 10, 256), "image at start");
    CHECK(ENC(t, "x<image><image>y<imz", 'x', 258, 258, 'y', 259, 'z'), "adjacent, longest first");
    CHECK(ENC(t, "ab<|endoftext|> ab", 256, 260, ' ', 256), "endoftext; the space stays with the text");
    CHECK(ENC(t, "<image", 259, 'a', 'g', 'e'), "without its '>', <image is <im + age");
    /* lstrip eats white space on the left, rstrip on the right */
    CHECK(ENC(t, "ab  <mask> ab", 256, 261, ' ', 256), "lstrip");
    CHECK(ENC(t, "ab <r>  ab", 256, ' ', 262, 256), "rstrip");
    /* single_word: only where no word character touches it */
    CHECK(ENC(t, "tony ony", 't', 'o', 'n', 'y', ' ', 263), "single_word");
    /* HF's two passes: normalized=false tokens first ("qr"), then normalized=true ones ("pq") in the
     * rest, so "pqr" is p + qr although "pq" starts further left */
    CHECK(ENC(t, "pqr", 'p', 265), "non-normalized tokens are matched first");
    /* an added token may reuse a model token's id; its content is matched literally ("Ġx", not " x") */
    CHECK(tokenizer_token_id(t, "Ġx") == 257, "added token with a model id");
    CHECK(ENC(t, "\xC4\xA0x x", 257, 257), "literal Ġx is the added token; \" x\" BPE-merges to the same id");
    /* decoding an added token gives its content */
    int32_t ids[] = {258, 'a', 260, 261};
    size_t n;
    char* s = tokenizer_decode(t, ids, 4, &n);
    CHECK(n == 27 && !strcmp(s, "<image>a<|endoftext|><mask>"), "decode added: %s", s);
    free(s);
    tokenizer_free(t);
    free(js);
    /* HF ignores the file's ids of added tokens and assigns its own on load (the model's id if the
     * content is a model token, else the next free one); a file that disagrees gets HF's ids */
    js = tok_json(NULL, 0, "[{\"id\":999,\"content\":\"<image>\",\"special\":true},"
                  " {\"id\":5,\"content\":\"!\",\"special\":true}]", 0, 0, 0);
    t = load(js);
    CHECK(tokenizer_token_id(t, "<image>") == 256 && tokenizer_token_id(t, "!") == '!' && tokenizer_vocab_size(t) == 257,
          "HF's ids for added tokens: <image> %d, ! %d", tokenizer_token_id(t, "<image>"), tokenizer_token_id(t, "!"));
    tokenizer_free(t);
    free(js);
}

/* random bytes: a mix of arbitrary bytes (invalid UTF-8, NUL), ASCII words and spaces, and valid
 * multi-byte characters (CJK, emoji with ZWJ, combining marks, white space of every kind), plus the
 * added tokens */
static uint64_t rng = 0x243F6A8885A308D3ULL;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static size_t random_text(char* buf, size_t max) {
    static const char* chunks[] = {
        "the", " cat", "'s", "'ll", " ", "  ", "\t", "\n", "\r\n", "123", " 4567", "!!", "?", ".", "<image>",
        "<|endoftext|>", "<image", "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\xA4\x97", "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
        "e\xCC\x81", "\xCC\x88\xCC\x88", "\xC2\x85", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\xA8", "\xEF\xBB\xBF",
        "\xD9\x85\xD8\xB1\xD8\xAD", "\xE0\xA4\xA8\xE0\xA4\xAE", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC0\xAF", "\0",
    };
    size_t n = 0, target = rnd() % max;
    while (n < target) {
        size_t k;
        if (rnd() % 3 == 0) {
            k = 1 + rnd() % 6;
            if (n + k > max) break;
            for (size_t i = 0; i < k; i++) buf[n + i] = (char)(rnd() & 0xFF);
        } else {
            int c = (int)(rnd() % (sizeof chunks / sizeof chunks[0]));
            k = c == (int)(sizeof chunks / sizeof chunks[0]) - 1 ? 1 : strlen(chunks[c]);
            if (n + k > max) break;
            memcpy(buf + n, chunks[c], k);
        }
        n += k;
    }
    return n;
}

/* n bytes of text encoded, then decoded: the same bytes */
static int round_trips(const Tokenizer* t, const char* text, size_t n) {
    int32_t* ids;
    int k = tokenizer_encode(t, text, n, &ids);
    size_t m;
    char* back = tokenizer_decode(t, ids, k, &m);
    int same = m == n && !memcmp(back, text, n);
    free(ids);
    free(back);
    return same;
}

static void roundtrip(const Tokenizer* t, int iters, const char* what) {
    char buf[512];
    int bad = 0;
    for (int it = 0; it < iters; it++) {
        size_t n = random_text(buf, sizeof buf);
        int32_t* ids;
        int k = tokenizer_encode(t, buf, n, &ids);
        size_t m;
        char* back = tokenizer_decode(t, ids, k, &m);
        if (m != n || memcmp(back, buf, n)) {
            if (bad++ < 3) fprintf(stderr, "  round trip differs (%zu -> %zu bytes)\n", n, m);
        }
        for (int i = 0; i < k; i++) bad += ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t);
        free(ids);
        free(back);
    }
    CHECK(bad == 0, "%s: %d of %d random texts did not round-trip", what, bad, iters);
}

static void test_roundtrip(void) {
    const char* m[][2] = {{"t", "h"}, {"th", "e"}, {" ", "c"}, {" c", "a"}, {" ca", "t"}, {"\xE6", "\x97"},
                          {"\xE6\x97", "\xA5"}, {"\xF0", "\x9F"}, {" ", " "}, {"1", "2"}, {"12", "3"}, {"\xFF", "\xFE"}};
    const char* added = "[{\"id\":268,\"content\":\"<image>\",\"special\":true,\"normalized\":false},"
                        " {\"id\":269,\"content\":\"<|endoftext|>\",\"special\":true,\"normalized\":false}]";
    char* js = tok_json(m, 12, added, 0, 0, 0);
    Tokenizer* t = load(js);
    roundtrip(t, 3000, "small tokenizer");
    /* longer than the word cache takes, and a long word of one letter */
    size_t n = 100000;
    char* big = mallocCheck(n);
    for (size_t i = 0; i < n; i++) big[i] = (char)(rnd() & 0xFF);
    CHECK(round_trips(t, big, n), "100 kB of random bytes round-trip");
    memset(big, 'a', n);
    int32_t* ids;
    int k = tokenizer_encode(t, big, n, &ids);
    CHECK(k == (int)n, "a 100 kB word with no merges gives one id per byte (%d)", k);
    free(ids);
    free(big);
    /* add_prefix_space: every piece between added tokens gets a leading space unless it has one */
    char* js2 = tok_json(m, 12, added, 1, 0, 0);
    Tokenizer* t2 = load(js2);
    CHECK(ENC(t2, "cat", 260), "prefix space: cat -> ' cat'");
    CHECK(ENC(t2, " cat", 260), "no second space");
    CHECK(ENC(t2, "the<image>cat", ' ', 257, 268, 260), "each piece gets its space");
    CHECK(tokenizer_hash(t) != tokenizer_hash(t2), "add_prefix_space is part of the hash");
    tokenizer_free(t);
    tokenizer_free(t2);
    free(js);
    free(js2);
}

static void test_threads(void) {
    const char* m[][2] = {{"t", "h"}, {"th", "e"}, {" ", "c"}, {" c", "a"}, {" ca", "t"}};
    char* js = tok_json(m, 5, NULL, 0, 0, 0);
    Tokenizer* t = load(js);
    enum { N = 400 };
    static char texts[N][256];
    static size_t lens[N];
    static int32_t* serial[N];
    static int serial_n[N];
    for (int i = 0; i < N; i++) {
        lens[i] = random_text(texts[i], sizeof texts[i]);
        serial_n[i] = tokenizer_encode(t, texts[i], lens[i], &serial[i]);
    }
    int bad = 0;
#pragma omp parallel for num_threads(4) reduction(+ : bad) schedule(dynamic, 1)
    for (int j = 0; j < 4 * N; j++) {
        int i = (j * 7) % N;
        int32_t* ids;
        int k = tokenizer_encode(t, texts[i], lens[i], &ids);
        bad += k != serial_n[i] || memcmp(ids, serial[i], (size_t)k * sizeof(int32_t));
        free(ids);
    }
    CHECK(bad == 0, "%d encodes differ when 4 threads share the tokenizer and its cache", bad);
    for (int i = 0; i < N; i++) free(serial[i]);
    tokenizer_free(t);
    free(js);
}

static void expect_error(const char* json, const char* want) {
    char err[512] = {0};
    Tokenizer* t = tokenizer_load_json(json, strlen(json), "tok.json", err, sizeof err);
    CHECK(!t && strstr(err, want), "want error containing \"%s\", got \"%s\"", want, err);
    tokenizer_free(t);
}

/* js with its first `from` replaced by `to`: refused with `want` */
static void expect_error_edit(const char* js, const char* from, const char* to, const char* want) {
    const char* p = strstr(js, from);
    RR_ASSERT(p);
    char* bad = mallocCheck(strlen(js) + strlen(to) + 1);
    sprintf(bad, "%.*s%s%s", (int)(p - js), js, to, p + strlen(from));
    expect_error(bad, want);
    free(bad);
}

static void test_errors(void) {
    expect_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"},"
                 " \"decoder\": {\"type\": \"ByteLevel\"}}",
                 "tok.json: model.type is WordPiece, only BPE is supported");
    expect_error("{\n\"model\": {\n\"type\": \"BPE\",,\n}}", "tok.json:3: not valid JSON");
    expect_error("[1, 2]", "tok.json: no \"model\" object");
    char* js = tok_json(NULL, 0, NULL, 0, 0, 0);
    /* a merge naming a token that is not in the vocab */
    expect_error_edit(js, "\"merges\":[]", "\"merges\":[\"a zz\"]",
                      "tok.json: model.merges[0]: token \"zz\" is not in model.vocab");
    expect_error_edit(js, "\"merges\":[]", "\"merges\":[\"a b\"]",
                      "model.merges[0]: merged token \"ab\" is not in model.vocab");
    expect_error_edit(js, "\"merges\":[]", "\"merges\":[\"abc\"]",
                      "model.merges[0] \"abc\": expected two tokens separated by one space");
    /* unsupported parts name themselves */
    expect_error_edit(js, "\"normalizer\":null", "\"normalizer\":{\"type\":\"NFC\"}",
                      "tok.json: normalizer NFC is not supported");
    expect_error_edit(js, "\"type\":\"ByteLevel\",\"add_prefix_space\"",
                      "\"type\":\"Whitespace\",\"add_prefix_space\"", "tok.json: pre_tokenizer type Whitespace is not supported");
    /* a byte token missing from the vocab: its bytes could not be encoded */
    expect_error_edit(js, "\"!\":33,", "", "tok.json: model.vocab lacks the byte token \"!\" (byte 0x21)");
    expect_error_edit(js, "\"!\":33,", "\"!\":300000000,", "model.vocab[\"!\"]: id must be an integer in [0, 2^28)");
    expect_error_edit(js, "\"!\":33,", "\"!\":100000,",
                      "tok.json: model.vocab: id 100000 is far above its 256 tokens");
    char err[256];
    CHECK(!tokenizer_load("/nonexistent/tok.json", err, sizeof err) && strstr(err, "/nonexistent/tok.json: cannot read"),
          "missing file: %s", err);
    free(js);
}

/* ---- the trainer against a naive reference ------------------------------------------------------ */

typedef struct {
    char** w;
    size_t* n;
    int64_t* c;
    int count, cap;
    int64_t n_added; /* added-token pieces seen */
} WordList;
static void naive_collect(void* ctx, const char* s, size_t n, int added_id) {
    WordList* wl = ctx;
    if (added_id >= 0) {
        wl->n_added++;
        return;
    }
    for (int i = 0; i < wl->count; i++) /* linear search: slow but obviously right */
        if (wl->n[i] == n && !memcmp(wl->w[i], s, n)) {
            wl->c[i]++;
            return;
        }
    if (wl->count == wl->cap) {
        wl->cap = wl->cap ? 2 * wl->cap : 256;
        wl->w = reallocCheck(wl->w, (size_t)wl->cap * sizeof(char*));
        wl->n = reallocCheck(wl->n, (size_t)wl->cap * sizeof(size_t));
        wl->c = reallocCheck(wl->c, (size_t)wl->cap * sizeof(int64_t));
    }
    wl->w[wl->count] = mallocCheck(n);
    memcpy(wl->w[wl->count], s, n);
    wl->n[wl->count] = n;
    wl->c[wl->count++] = 1;
}
typedef struct {
    int32_t a, b;
    int64_t c;
} PairCount;
static int paircount_cmp(const void* x, const void* y) {
    const PairCount *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    return 0;
}
/* Naive BPE: words as id arrays; each step counts every adjacent pair from scratch, picks the
 * highest count (ties: smaller left id, then smaller right id), merges it everywhere left to right.
 * Returns the number of merges; merges[2r], merges[2r+1] = ids (bytes 0..255, merge r = 256 + r). */
static int naive_train(WordList* wl, int max_merges, int min_freq, int32_t* merges, int64_t* n_tokens) {
    int32_t** sym = mallocCheck((size_t)wl->count * sizeof(int32_t*));
    int* len = mallocCheck((size_t)wl->count * sizeof(int));
    size_t total = 0;
    for (int i = 0; i < wl->count; i++) {
        sym[i] = mallocCheck((wl->n[i] + 1) * sizeof(int32_t));
        len[i] = (int)wl->n[i];
        for (size_t k = 0; k < wl->n[i]; k++) sym[i][k] = (uint8_t)wl->w[i][k];
        total += wl->n[i];
    }
    PairCount* pc = mallocCheck((total + 1) * sizeof(PairCount));
    int r = 0;
    for (; r < max_merges; r++) {
        size_t np = 0;
        for (int i = 0; i < wl->count; i++)
            for (int k = 0; k + 1 < len[i]; k++) pc[np++] = (PairCount){sym[i][k], sym[i][k + 1], wl->c[i]};
        qsort(pc, np, sizeof(PairCount), paircount_cmp);
        PairCount best = {0, 0, 0};
        for (size_t k = 0; k < np;) {
            PairCount sum = pc[k];
            size_t j = k + 1;
            for (; j < np && !paircount_cmp(&pc[j], &pc[k]); j++) sum.c += pc[j].c;
            if (sum.c > best.c) best = sum; /* sorted by (a, b): the first of equal counts wins */
            k = j;
        }
        if (best.c < min_freq) break;
        merges[2 * r] = best.a;
        merges[2 * r + 1] = best.b;
        for (int i = 0; i < wl->count; i++) {
            int m = 0;
            for (int k = 0; k < len[i];) {
                if (k + 1 < len[i] && sym[i][k] == best.a && sym[i][k + 1] == best.b) {
                    sym[i][m++] = 256 + r;
                    k += 2;
                } else
                    sym[i][m++] = sym[i][k++];
            }
            len[i] = m;
        }
    }
    *n_tokens = wl->n_added; /* the text in tokens at the end: every word's symbols, times its count */
    for (int i = 0; i < wl->count; i++) *n_tokens += (int64_t)len[i] * wl->c[i];
    for (int i = 0; i < wl->count; i++) free(sym[i]);
    free(sym);
    free(len);
    free(pc);
    return r;
}

/* token string (byte-level spelling) -> bytes */
static size_t unmapped(const char* s, char* out) {
    size_t o = 0;
    for (const unsigned char* p = (const unsigned char*)s; *p;) {
        uint32_t cp = *p < 0x80 ? *p : ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
        p += *p < 0x80 ? 1 : 2;
        out[o++] = (char)bpe_codepoint_to_byte(cp);
    }
    return o;
}

static void test_train(const char* corpus_path) {
    size_t n;
    char* corpus = rr_read_file(corpus_path, &n, RR_MAX_JSONL);
    CHECK(corpus != NULL, "cannot read %s", corpus_path);
    if (!corpus) return;
    char err[512];
    BpeTrainer* tr = bpe_trainer_new(NULL, 0, err, sizeof err);
    RR_ASSERT(tr);
    /* the naive side splits with a tokenizer of bytes + the two specials */
    const char* added = "[{\"id\":256,\"content\":\"<image>\",\"special\":true,\"normalized\":false},"
                        " {\"id\":257,\"content\":\"<|endoftext|>\",\"special\":true,\"normalized\":false}]";
    char* js = tok_json(NULL, 0, added, 0, 0, 0);
    Tokenizer* base = load(js);
    WordList wl = {0};
    for (size_t start = 0; start < n;) {
        const char* nl = memchr(corpus + start, '\n', n - start);
        size_t end = nl ? (size_t)(nl - corpus) : n;
        bpe_trainer_feed(tr, corpus + start, end - start);
        tokenizer_pretokenize(base, corpus + start, end - start, naive_collect, &wl);
        start = end + 1;
    }
    long long words, unique;
    bpe_trainer_counts(tr, &words, &unique);
    long long naive_words = 0;
    for (int i = 0; i < wl.count; i++) naive_words += wl.c[i];
    CHECK(unique == wl.count && words == naive_words, "word counts: %lld/%lld vs naive %d/%lld", unique, words, wl.count,
          naive_words);
    /* 400 merges at min frequency 2 on the corpus (the corpus has more than that many pairs seen twice) */
    int vocab = 256 + 400 + 2, n_merges;
    char* out = bpe_trainer_finish(tr, vocab, 2, 0, &n_merges, err, sizeof err);
    RR_ASSERT(out);
    int32_t* want = mallocCheck(2 * 400 * sizeof(int32_t));
    int64_t naive_tokens;
    int n_want = naive_train(&wl, 400, 2, want, &naive_tokens);
    CHECK(n_merges == 400 && n_want == 400, "merges: %d, naive %d", n_merges, n_want);
    /* compare the merges of the written JSON with the naive ones, as byte strings */
    cJSON* root = cJSON_Parse(out);
    const cJSON* ml = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges");
    char** tokb = callocCheck((size_t)256 + n_want, sizeof(char*));
    size_t* tokn = mallocCheck(((size_t)256 + n_want) * sizeof(size_t));
    for (int b = 0; b < 256; b++) {
        tokb[b] = mallocCheck(1);
        tokb[b][0] = (char)b;
        tokn[b] = 1;
    }
    int same = cJSON_GetArraySize(ml) == n_want, first_diff = -1;
    for (int r = 0; r < n_want && same; r++) {
        const char* m = cJSON_GetArrayItem(ml, r)->valuestring;
        const char* sp = strchr(m, ' ');
        char left[256], right[256], la[512], rb[512];
        memcpy(left, m, (size_t)(sp - m));
        left[sp - m] = 0;
        strcpy(right, sp + 1);
        size_t nl = unmapped(left, la), nr = unmapped(right, rb);
        int32_t a = want[2 * r], b = want[2 * r + 1];
        same = nl == tokn[a] && !memcmp(la, tokb[a], nl) && nr == tokn[b] && !memcmp(rb, tokb[b], nr);
        if (!same) first_diff = r;
        tokn[256 + r] = tokn[a] + tokn[b];
        tokb[256 + r] = mallocCheck(tokn[256 + r]);
        memcpy(tokb[256 + r], tokb[a], tokn[a]);
        memcpy(tokb[256 + r] + tokn[a], tokb[b], tokn[b]);
    }
    CHECK(same, "trainer and naive reference differ first at merge %d", first_diff);
    cJSON_Delete(root);
    /* the trained file loads; vocab layout; special ids; round trips; compression; determinism */
    Tokenizer* t = load(out);
    CHECK(tokenizer_vocab_size(t) == vocab, "vocab %d", tokenizer_vocab_size(t));
    CHECK(tokenizer_token_id(t, "<image>") == 656 && tokenizer_token_id(t, "<|endoftext|>") == 657, "special ids");
    roundtrip(t, 2000, "trained tokenizer");
    CHECK(round_trips(t, corpus, n), "the training text round-trips");
    int32_t* ids;
    /* Encoding (lowest rank first per word) reproduces the trainer's own segmentation (each merge
     * everywhere in turn), because a pair of rank r cannot reappear after step r: so the training
     * lines, encoded one by one, take exactly as many tokens as the naive trainer's words end with. */
    int64_t enc_tokens = 0;
    for (size_t start = 0; start < n;) {
        const char* nl = memchr(corpus + start, '\n', n - start);
        size_t end = nl ? (size_t)(nl - corpus) : n;
        enc_tokens += tokenizer_encode(t, corpus + start, end - start, &ids);
        free(ids);
        start = end + 1;
    }
    CHECK(enc_tokens == naive_tokens, "encoded training text: %lld tokens, naive trainer's words: %lld (of %zu bytes)",
          (long long)enc_tokens, (long long)naive_tokens, n);
    BpeTrainer* tr2 = bpe_trainer_new(NULL, 0, err, sizeof err);
    for (size_t start = 0; start < n;) {
        const char* nl = memchr(corpus + start, '\n', n - start);
        size_t end = nl ? (size_t)(nl - corpus) : n;
        bpe_trainer_feed(tr2, corpus + start, end - start);
        start = end + 1;
    }
    char* out2 = bpe_trainer_finish(tr2, vocab, 2, 0, &n_merges, err, sizeof err);
    CHECK(out2 && !strcmp(out, out2), "training twice gives the same file");
    /* a vocabulary larger than the text supports stops early at min_frequency */
    char* out3 = bpe_trainer_finish(tr2, 1 << 20, 2, 0, &n_merges, err, sizeof err);
    want = reallocCheck(want, 2 * (size_t)(1 << 20) * sizeof(int32_t));
    int n_naive_all = naive_train(&wl, 1 << 20, 2, want, &naive_tokens);
    CHECK(out3 && n_merges == n_naive_all, "all merges with count >= 2: %d, naive %d", n_merges, n_naive_all);
    free(out3);
    /* errors */
    CHECK(!bpe_trainer_finish(tr2, 257, 2, 0, &n_merges, err, sizeof err) && strstr(err, "--vocab 257 is too small"),
          "%s", err);
    const char* dup[] = {"<x>", "<image>"};
    CHECK(!bpe_trainer_new(dup, 2, err, sizeof err) && strstr(err, "special token \"<image>\" is given twice"), "%s", err);
    BpeTrainer* tr3 = bpe_trainer_new(dup, 1, err, sizeof err);
    CHECK(tr3 != NULL, "extra special");
    bpe_trainer_feed(tr3, "a<x>b", 5);
    char* out4 = bpe_trainer_finish(tr3, 259, 2, 0, &n_merges, err, sizeof err);
    Tokenizer* t4 = load(out4);
    CHECK(tokenizer_token_id(t4, "<x>") == 258 && ENC(t4, "a<x>b", 'a', 258, 'b'), "extra special after the defaults");
    tokenizer_free(t4);
    free(out4);
    bpe_trainer_free(tr3);
    for (int i = 0; i < 256 + n_want; i++) free(tokb[i]);
    free(tokb);
    free(tokn);
    free(want);
    free(out2);
    bpe_trainer_free(tr2);
    tokenizer_free(t);
    free(out);
    bpe_trainer_free(tr);
    for (int i = 0; i < wl.count; i++) free(wl.w[i]);
    free(wl.w);
    free(wl.n);
    free(wl.c);
    tokenizer_free(base);
    free(js);
    free(corpus);
}

/* Damaged files: random byte edits of a valid tokenizer.json (flips, deletions, duplicated spans,
 * JSON punctuation and odd numbers spliced in) must load or fail with a message naming the file,
 * never crash; whatever loads must encode and decode random text. */
static void mutations_run(const char* js, const char* what);

static void test_mutations(void) {
    const char* m[][2] = {{"t", "h"}, {"th", "e"}, {" ", "c"}, {" c", "a"}};
    const char* added = "[{\"id\":260,\"content\":\"<image>\",\"special\":true,\"normalized\":false,\"lstrip\":true},"
                        " {\"id\":261,\"content\":\"the\",\"single_word\":true,\"normalized\":true}]";
    char* js = tok_json(m, 4, added, 0, 1, 1);
    mutations_run(js, "");
    free(js);
}

/* 1,500 randomly damaged copies of js: each loads or is refused naming the file; what loads encodes random
 * text to valid ids and decodes them */
static void mutations_run(const char* js, const char* what) {
    size_t n = strlen(js);
    static const char* splice[] = {"\"", "{", "}", "[", "]", ",", ":", "null", "-1", "1e30", "0.5", "true", "\"\"",
                                   "\"a b\"", "[\"a\"]", "\\u0000", "\"type\":\"Sequence\""};
    char* buf = mallocCheck(2 * n + 64);
    int loaded = 0, failed_ok = 0, bad = 0;
    for (int it = 0; it < 1500; it++) {
        memcpy(buf, js, n);
        size_t len = n;
        for (int k = 0, edits = 1 + rnd() % 4; k < edits; k++) {
            size_t at = rnd() % len;
            switch (rnd() % 4) {
            case 0: buf[at] = (char)(rnd() & 0xFF); break;
            case 1: { /* delete up to 16 bytes */
                size_t d = 1 + rnd() % 16;
                if (at + d > len) d = len - at;
                memmove(buf + at, buf + at + d, len - at - d);
                len -= d;
                break;
            }
            case 2: { /* duplicate a span */
                size_t d = 1 + rnd() % 32;
                if (at + d > len) d = len - at;
                if (len + d > 2 * n) break;
                memmove(buf + at + d, buf + at, len - at);
                len += d;
                break;
            }
            default: {
                const char* sp = splice[rnd() % (sizeof splice / sizeof splice[0])];
                size_t d = strlen(sp);
                if (len + d > 2 * n) break;
                memmove(buf + at + d, buf + at, len - at);
                memcpy(buf + at, sp, d);
                len += d;
            }
            }
            if (len == 0) break;
        }
        char err[512] = {0};
        Tokenizer* t = tokenizer_load_json(buf, len, "mut.json", err, sizeof err);
        if (!t) {
            if (!strncmp(err, "mut.json", 8)) failed_ok++;
            else if (bad++ < 3) fprintf(stderr, "  error without the file name: %s\n", err);
            continue;
        }
        loaded++;
        char text[256];
        size_t tn = random_text(text, sizeof text);
        int32_t* ids;
        int k = tokenizer_encode(t, text, tn, &ids);
        for (int i = 0; i < k; i++) bad += ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t);
        size_t dn;
        free(tokenizer_decode(t, ids, k, &dn));
        free(ids);
        tokenizer_free(t);
    }
    CHECK(bad == 0 && loaded + failed_ok == 1500, "mutated files%s: %d loaded, %d refused with the name, %d bad", what,
          loaded, failed_ok, bad);
    printf("mutated tokenizer.json%s: %d of 1500 still load, %d refused with a message\n", what, loaded, failed_ok);
    free(buf);
}

/* ---- SentencePiece-style BPE (Llama-2's tokenizer.json) ----------------------------------------- */

/* Llama-2's layout by hand: <unk> <s> </s>, the 256 byte pieces <0x00>.. (ids 3..258), "\u2581" 259, a few
 * characters and merges; normalizer Prepend + Replace, no pre-tokenizer, Llama-2's decoder. */
static char* sp_json(int byte_fallback, const char* normalizer) {
    cJSON* root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "added_tokens",
                          cJSON_Parse("[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
                                      "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
                                      "{\"id\":2,\"content\":\"</s>\",\"special\":true,\"normalized\":false}]"));
    cJSON_AddItemToObject(root, "normalizer", cJSON_Parse(normalizer));
    cJSON_AddNullToObject(root, "pre_tokenizer");
    cJSON_AddItemToObject(root, "decoder", cJSON_Parse(
        "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xE2\x96\x81\"},\"content\":\" \"},"
        "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}"));
    cJSON* model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddStringToObject(model, "unk_token", "<unk>");
    cJSON_AddBoolToObject(model, "fuse_unk", 1);
    cJSON_AddBoolToObject(model, "byte_fallback", byte_fallback);
    cJSON* vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON_AddNumberToObject(vocab, "<unk>", 0);
    cJSON_AddNumberToObject(vocab, "<s>", 1);
    cJSON_AddNumberToObject(vocab, "</s>", 2);
    char b[8];
    for (int i = 0; i < 256; i++) {
        snprintf(b, sizeof b, "<0x%02X>", i);
        cJSON_AddNumberToObject(vocab, b, 3 + i);
    }
    const char* toks[] = {"\xE2\x96\x81", "t", "h", "e", "c", "a", "\xE2\x96\x81t", "he", "\xE2\x96\x81the", "at",
                          "\xE2\x96\x81" "c", "\xE2\x96\x81" "cat", "\xE6\x97\xA5"};
    for (int i = 0; i < 13; i++) cJSON_AddNumberToObject(vocab, toks[i], 259 + i);
    cJSON_AddItemToObject(model, "merges", cJSON_Parse("[\"\xE2\x96\x81 t\", \"h e\", \"\xE2\x96\x81t he\", \"a t\", "
                                                       "\"\xE2\x96\x81 c\", \"\xE2\x96\x81" "c at\"]"));
    char* out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

static const char* SP_NORM = "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xE2\x96\x81\"},"
                             "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xE2\x96\x81\"}]}";

static int dec_eq(const Tokenizer* t, const int32_t* ids, int n, const char* want) {
    size_t m;
    char* s = tokenizer_decode(t, ids, n, &m);
    int ok = m == strlen(want) && !memcmp(s, want, m);
    if (!ok) fprintf(stderr, "  decode gave '%s', want '%s'\n", s, want);
    free(s);
    return ok;
}

static void test_sentencepiece(void) {
    char* js = sp_json(1, SP_NORM);
    Tokenizer* t = load(js);
    const int FB = 3; /* <0x00> */
    CHECK(ENC(t, "the cat", 267, 270), "merges by rank over characters: '\\u2581the\\u2581cat'");
    CHECK(ENC(t, " the", 259, 267), "a leading space: two metaspaces, the first alone");
    CHECK(ENC(t, "\xE6\x97\xA5x", 259, 271, FB + 'x'), "a character outside the vocabulary: its byte piece");
    CHECK(ENC(t, "\xF0\x9F\xA4\x97", 259, FB + 0xF0, FB + 0x9F, FB + 0xA4, FB + 0x97), "an emoji: its four byte pieces");
    CHECK(ENC(t, "\xFF" "a", 259, FB + 0xFF, 264), "an invalid UTF-8 byte: its byte piece");
    CHECK(ENC(t, "a\nb", 259, 264, FB + '\n', FB + 'b'), "newline through byte fallback");
    CHECK(ENC(t, "<s>the", 1, 267), "added token, then the normalized piece after it");
    CHECK(ENC(t, "the<s> cat</s>", 267, 1, 259, 270, 2), "each piece between added tokens gets its metaspace (HF)");
    int32_t* ids;
    CHECK(tokenizer_encode(t, "", 0, &ids) == 0, "empty text: no ids (Prepend skips empty text)");
    free(ids);
    CHECK(dec_eq(t, (const int32_t[]){267, 270}, 2, "the cat"), "decode: metaspaces to spaces, one leading space stripped");
    CHECK(dec_eq(t, (const int32_t[]){259, 267}, 2, " the"), "decode: only one leading space stripped");
    CHECK(dec_eq(t, (const int32_t[]){259, FB + 0xF0, FB + 0x9F, FB + 0xA4, FB + 0x97}, 5, "\xF0\x9F\xA4\x97"),
          "decode: byte pieces to bytes");
    CHECK(dec_eq(t, (const int32_t[]){1, 267, 2}, 3, "<s> the</s>"), "decode: added tokens as their text");
    /* round trips of random text (without a literal U+2581 or an added token's text, which do not come
     * back by design: HF decodes U+2581 as a space and adds a metaspace after an added token) */
    char buf[512];
    int bad = 0, n_ok = 0;
    for (int it = 0; it < 3000; it++) {
        size_t n = random_text(buf, sizeof buf);
        if (memmem(buf, n, "\xE2\x96\x81", 3) || memmem(buf, n, "<s>", 3) || memmem(buf, n, "</s>", 4) ||
            memmem(buf, n, "<unk>", 5))
            continue;
        int k = tokenizer_encode(t, buf, n, &ids);
        size_t m;
        char* back = tokenizer_decode(t, ids, k, &m);
        if (m != n || memcmp(back, buf, n)) bad++;
        for (int i = 0; i < k; i++) bad += ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t) || ids[i] == 0;
        n_ok++;
        free(ids);
        free(back);
    }
    CHECK(bad == 0 && n_ok > 2000, "%d of %d random texts did not round-trip (or gave unk)", bad, n_ok);
    /* without byte fallback: unknown characters are one fused unk */
    char* js2 = sp_json(0, SP_NORM);
    Tokenizer* t2 = load(js2);
    CHECK(ENC(t2, "xy\xF0\x9F\xA4\x97 the", 259, 0, 267), "no byte fallback: unknown characters fuse into one <unk>");
    CHECK(tokenizer_hash(t) != tokenizer_hash(t2), "byte_fallback is part of the hash");
    /* what is refused, naming the field */
    char err[512];
    char* js3 = sp_json(1, "{\"type\":\"Lowercase\"}");
    Tokenizer* t3 = tokenizer_load_json(js3, strlen(js3), "sp.json", err, sizeof err);
    CHECK(!t3 && strstr(err, "normalizer Lowercase is not supported"), "a Lowercase normalizer refused: %s", err);
    char* js4 = sp_json(1, "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\"x\"}");
    Tokenizer* t4 = tokenizer_load_json(js4, strlen(js4), "sp.json", err, sizeof err);
    CHECK(!t4 && strstr(err, "normalizer Replace"), "a Regex Replace refused: %s", err);
    tokenizer_free(t3);
    tokenizer_free(t4);
    free(js3);
    free(js4);
    tokenizer_free(t);
    tokenizer_free(t2);
    free(js);
    free(js2);
}

/* damaged copies of a Llama-2-layout file and of its Metaspace form */
static void test_mutations_sp(void) {
    char* js = sp_json(1, SP_NORM);
    mutations_run(js, " (SentencePiece-style)");
    cJSON* j = cJSON_Parse(js);
    cJSON_ReplaceItemInObject(j, "normalizer", cJSON_CreateNull());
    cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_Parse("{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\","
                                                             "\"prepend_scheme\":\"always\",\"split\":true}"));
    char* js2 = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    mutations_run(js2, " (Metaspace)");
    free(js);
    free(js2);
}

int main(int argc, char** argv) {
    test_byte_map();
    test_merges();
    test_split();
    test_added();
    test_roundtrip();
    test_sentencepiece();
    test_mutations_sp();
    test_threads();
    test_errors();
    test_mutations();
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--corpus")) {
        test_train(argv[2]);
        first = 3;
    }
    for (int i = first; i < argc; i++) { /* real tokenizers (GPT-2's, a trained one): round trips */
        char err[512];
        Tokenizer* t = tokenizer_load(argv[i], err, sizeof err);
        CHECK(t != NULL, "%s", err);
        if (t) roundtrip(t, 3000, argv[i]);
        tokenizer_free(t);
    }
    printf("%d passed, %d failed\n", (check_count - check_failures), check_failures);
    return check_failures ? 1 : 0;
}
