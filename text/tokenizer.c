/* tokenizer.c — byte-level BPE read from a Hugging Face tokenizer.json: load, encode, decode, hash.
 *
 * Encoding follows the HF Rust implementation step for step:
 *   1. added tokens are cut out literally (leftmost-longest; first the tokens with normalized=false,
 *      then those with normalized=true in the remaining pieces; single_word/lstrip/rstrip as HF);
 *   2. each remaining piece goes through the pre-tokenizer: optional Split(Regex, Isolated) steps,
 *      then ByteLevel (prefix space if add_prefix_space and the piece does not start with ' ';
 *      the GPT-2 split pattern if use_regex);
 *   3. BPE on each pre-token: its bytes become the byte symbols, then the pair of lowest merge rank
 *      (leftmost on ties) is merged until no pair has a rank (HF's priority-queue loop).
 * Regexes run in PCRE2 (UTF + UCP, JIT). Oniguruma, which HF uses, takes \s as Unicode White_Space.
 * PCRE2's UCP \s is its own list (category Z plus the \h and \v characters); it agrees with
 * White_Space in the PCRE2 we build with (checked with U+0085 and U+180E in the peer corpus), but to
 * keep that from depending on the PCRE2 version, \s and \S are rewritten into the explicit
 * White_Space class before compiling (see regex_rewrite_space).
 *
 * Invalid UTF-8 (which HF never sees: Rust strings are valid by construction): in a regex step the
 * text is cut into maximal valid runs and maximal runs of invalid bytes; valid runs are split by the
 * regex, each invalid run is one pre-token of its own. BPE works on bytes, so every byte, valid or
 * not, is encoded and decodes back to itself.
 *
 * Decoding is HF's ByteLevel decoder: each token's characters are mapped back to bytes; a token with
 * a character outside the byte map (an added token such as "<| end |>") contributes its raw UTF-8.
 * Unlike HF (which finishes with a lossy UTF-8 conversion) the bytes are returned unchanged, so
 * decode(encode(x)) == x for any bytes x when add_prefix_space is false.
 *
 * Not applied: post_processor, truncation and padding (encode gives the ids of the text itself, as
 * HF's encode(text, add_special_tokens=False); the prompt template adds the special tokens it needs).
 *
 * Thread safety: after load a Tokenizer is read-only except for the word cache, which a mutex
 * guards; encode and decode may be called from many threads at once. */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "text/bpe_internal.h"

/* ---- small hash tables ------------------------------------------------------------------------ */

static uint64_t hash_bytes(const void* p, size_t n) {
    /* FNV-1a, then a final mix so that the low bits used for the slot index are well spread. */
    uint64_t h = rr_fnv1a64(p, n);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

/* byte string -> int32; keys are not owned. */
typedef struct {
    const char* key;
    uint32_t len;
    int32_t val;
    uint64_t h;
} StrSlot;
typedef struct {
    StrSlot* slots;
    size_t cap, n; /* cap: power of two */
} StrMap;

static void strmap_init(StrMap* m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap <<= 1;
    m->slots = callocCheck(cap, sizeof(StrSlot));
    m->cap = cap;
    m->n = 0;
}
static void strmap_free(StrMap* m) { free(m->slots); }
static StrSlot* strmap_find(const StrMap* m, const char* key, size_t len, uint64_t h) {
    size_t i = h & (m->cap - 1);
    for (;;) {
        StrSlot* s = &m->slots[i];
        if (!s->key) return s;
        if (s->h == h && s->len == len && !memcmp(s->key, key, len)) return s;
        i = (i + 1) & (m->cap - 1);
    }
}
static int32_t strmap_get(const StrMap* m, const char* key, size_t len) {
    StrSlot* s = strmap_find(m, key, len, hash_bytes(key, len));
    return s->key ? s->val : -1;
}
/* Returns 0 if inserted, 1 if the key was there already (value left unchanged). */
static int strmap_put(StrMap* m, const char* key, size_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        StrMap big;
        strmap_init(&big, m->cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) *strmap_find(&big, m->slots[i].key, m->slots[i].len, m->slots[i].h) = m->slots[i];
        big.n = m->n;
        free(m->slots);
        *m = big;
    }
    uint64_t h = hash_bytes(key, len);
    StrSlot* s = strmap_find(m, key, len, h);
    if (s->key) return 1;
    s->key = key;
    s->len = (uint32_t)len;
    s->val = val;
    s->h = h;
    m->n++;
    return 0;
}

/* (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t key; /* UINT64_MAX: empty */
    int32_t rank, new_id;
} PairSlot;
typedef struct {
    PairSlot* slots;
    size_t cap;
} PairMap;

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
static size_t pair_slot(uint64_t key, size_t cap) {
    uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    return (h ^ (h >> 29)) & (cap - 1);
}
static void pairmap_init(PairMap* m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap <<= 1;
    m->slots = mallocCheck(cap * sizeof(PairSlot));
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->cap = cap;
}
static PairSlot* pairmap_find(const PairMap* m, uint64_t key) {
    size_t i = pair_slot(key, m->cap);
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
    return &m->slots[i];
}

/* ---- byte-level mapping and UTF-8 ------------------------------------------------------------- */

static uint16_t g_byte_cp[256];  /* byte -> code point */
static int16_t g_cp_byte[324];   /* code point -> byte, -1 if unmapped */
static pthread_once_t g_map_once = PTHREAD_ONCE_INIT;

static void byte_map_init(void) {
    /* bytes_to_unicode from GPT-2's encoder.py: printable latin-1 bytes keep their code point, the
     * remaining 68 bytes take 256, 257, ... in byte order. */
    int n = 0;
    for (int i = 0; i < 324; i++) g_cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        g_byte_cp[b] = (uint16_t)(printable ? b : 256 + n++);
        g_cp_byte[g_byte_cp[b]] = (int16_t)b;
    }
}

int bpe_byte_to_utf8(uint8_t b, char out[2]) {
    pthread_once(&g_map_once, byte_map_init);
    uint16_t cp = g_byte_cp[b];
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int bpe_codepoint_to_byte(uint32_t cp) {
    pthread_once(&g_map_once, byte_map_init);
    return cp < 324 ? g_cp_byte[cp] : -1;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes there are not one. Writes the
 * code point to *cp when valid. */
static int utf8_decode(const uint8_t* s, size_t n, uint32_t* cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte (Table 3-7) */
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (n < (size_t)len || s[1] < lo || s[1] > hi) return 0;
    v = (v << 6) | (s[1] & 0x3F);
    for (int i = 2; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

size_t bpe_utf8_valid_prefix(const uint8_t* s, size_t n) {
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_decode(s + i, n - i, &cp);
        if (!k) break;
        i += k;
    }
    return i;
}

size_t bpe_utf8_invalid_run(const uint8_t* s, size_t n) {
    size_t i = 0;
    uint32_t cp;
    while (i < n && !utf8_decode(s + i, n - i, &cp)) i++;
    return i;
}

/* Unicode White_Space (what Oniguruma's and Rust regex's \s match). */
static int is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}
#define WHITE_SPACE_CLASS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Byte length of the white-space character starting at s, 0 if none. */
static size_t ws_at(const char* s, size_t n) {
    uint32_t cp;
    int k = utf8_decode((const uint8_t*)s, n, &cp);
    return (k && is_white_space(cp)) ? (size_t)k : 0;
}
/* Byte length of the white-space character ending at s[n-1], 0 if none. */
static size_t ws_before(const char* s, size_t n) {
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        uint32_t cp;
        if (utf8_decode((const uint8_t*)s + n - k, k, &cp) == (int)k) return is_white_space(cp) ? k : 0;
    }
    return 0;
}

/* ---- the tokenizer ---------------------------------------------------------------------------- */

typedef struct {
    char* content;
    size_t len;
    int32_t id;
    int special, single_word, lstrip, rstrip, normalized;
} AddedToken;

typedef enum { STEP_SPLIT, STEP_BYTELEVEL } StepKind;
typedef struct {
    StepKind kind;
    char* pattern;         /* as written in the file (STEP_SPLIT; GPT-2's for a ByteLevel with use_regex) */
    pcre2_code* re;        /* NULL: ByteLevel with use_regex false */
    int add_prefix_space;  /* ByteLevel only */
} PretokStep;

#define MAX_STEPS 8

typedef struct {
    /* word (pre-token bytes) -> ids; cleared when it grows past its budget */
    pthread_mutex_t mu;
    StrMap map;         /* key -> index into entries */
    char* keys;         /* key bytes (arena) */
    size_t keys_n, keys_cap;
    int32_t* ids;       /* ids (arena) */
    size_t ids_n, ids_cap;
    uint32_t* ent_off;  /* per entry: offset in ids, count */
    uint32_t* ent_cnt;
    size_t n_ent;
} WordCache;
#define CACHE_MAX_ENTRIES 65536
#define CACHE_KEY_BYTES (1u << 21)
#define CACHE_IDS (1u << 19)
#define CACHE_MAX_WORD 256 /* longer words are not cached */

struct Tokenizer {
    char* name;
    int n_ids;             /* max id + 1 over vocab and added tokens */
    char** model_str;      /* (n_ids) model token string by id, NULL for ids the model lacks */
    StrMap vocab;          /* model token string -> id (keys point into model_str) */
    PairMap merges;
    int n_merges;
    int32_t* merge_pairs;  /* (n_merges, 2) left and right ids in rank order */
    int32_t byte_id[256];  /* id of each byte's one-character token, -1 if the vocab lacks it */
    int32_t unk_id;
    int fuse_unk, ignore_merges;
    AddedToken* added;
    int n_added;
    int32_t* added_first[2][256]; /* per pass (normalized 0/1) and first byte: indices into added, longest first, -1 ends */
    pcre2_code* word_re;   /* \w test for single_word */
    PretokStep steps[MAX_STEPS];
    int n_steps;
    int32_t* added_of_id;  /* (n_ids) index into added, -1 if the id is not an added token */
    char** dec;            /* (n_ids) decoded bytes of each id, NULL for holes */
    uint32_t* dec_len;
    uint64_t hash;
    WordCache cache;
};

static void set_err(char* err, size_t err_len, const char* fmt, ...) RR_PRINTF(3, 4);
static void set_err(char* err, size_t err_len, const char* fmt, ...) {
    if (!err || !err_len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

void tokenizer_free(Tokenizer* t) {
    if (!t) return;
    for (int i = 0; i < t->n_ids; i++) { /* a half-loaded tokenizer may lack either table */
        if (t->model_str) free(t->model_str[i]);
        if (t->dec) free(t->dec[i]);
    }
    free(t->model_str);
    free(t->dec);
    free(t->dec_len);
    strmap_free(&t->vocab);
    free(t->merges.slots);
    free(t->merge_pairs);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t->added_of_id);
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < 256; b++) free(t->added_first[p][b]);
    if (t->word_re) pcre2_code_free(t->word_re);
    for (int i = 0; i < t->n_steps; i++) {
        free(t->steps[i].pattern);
        if (t->steps[i].re) pcre2_code_free(t->steps[i].re);
    }
    pthread_mutex_destroy(&t->cache.mu);
    strmap_free(&t->cache.map);
    free(t->cache.keys);
    free(t->cache.ids);
    free(t->cache.ent_off);
    free(t->cache.ent_cnt);
    free(t->name);
    free(t);
}

/* Rewrite \s and \S so they mean Unicode White_Space as in Oniguruma (see the file comment). \S
 * inside a bracket class has no equivalent without class subtraction and is left to PCRE2. */
static char* regex_rewrite_space(const char* p) {
    size_t n = strlen(p);
    char* out = mallocCheck(n * 24 + 1 + 64 * 4);
    size_t o = 0;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            const char* rep = NULL;
            if (d == 's') rep = in_class ? WHITE_SPACE_CLASS : "[" WHITE_SPACE_CLASS "]";
            else if (d == 'S' && !in_class) rep = "[^" WHITE_SPACE_CLASS "]";
            if (rep) {
                size_t k = strlen(rep);
                memcpy(out + o, rep, k);
                o += k;
            } else {
                out[o++] = c;
                out[o++] = d;
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            out[o++] = c;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && p[i + 1] == '^') out[o++] = p[++i];
            if (i + 1 < n && p[i + 1] == ']') out[o++] = p[++i];
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* POSIX [:alpha:] */
            const char* end = strstr(p + i + 2, ":]");
            if (end) {
                size_t k = (size_t)(end + 2 - (p + i));
                memcpy(out + o, p + i, k);
                o += k;
                i += k - 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = 0;
        out[o++] = c;
    }
    out[o] = 0;
    return out;
}

static pcre2_code* regex_compile(const char* pattern, int literal, const char* name, const char* where, char* err,
                                 size_t err_len) {
    char* rewritten = literal ? strdup(pattern) : regex_rewrite_space(pattern);
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code* re = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED, opts, &ec, &eo, NULL);
    free(rewritten);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        set_err(err, err_len, "%s: %s: cannot compile the regex \"%s\": %s", name, where, pattern, (char*)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
    return re;
}

static const char* GPT2_PATTERN =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* JSON helpers: a missing key or null reads as the default. Return -1 on a wrong type. */
static int json_bool(const cJSON* obj, const char* key, int def, int* out) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v)) return -1;
    *out = cJSON_IsTrue(v);
    return 0;
}
static const char* json_type(const cJSON* obj) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int pretok_parse(Tokenizer* t, const cJSON* pt, const char* name, char* err, size_t err_len) {
    const char* type = json_type(pt);
    if (!type) {
        set_err(err, err_len, "%s: pre_tokenizer has no \"type\"; expected ByteLevel or a Sequence ending in ByteLevel",
                name);
        return -1;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON* list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list)) {
            set_err(err, err_len, "%s: pre_tokenizer Sequence has no \"pretokenizers\" array", name);
            return -1;
        }
        const cJSON* it;
        cJSON_ArrayForEach(it, list) if (pretok_parse(t, it, name, err, err_len)) return -1;
        return 0;
    }
    if (t->n_steps == MAX_STEPS) {
        set_err(err, err_len, "%s: more than %d pre-tokenizer steps", name, MAX_STEPS);
        return -1;
    }
    if (t->n_steps > 0 && t->steps[t->n_steps - 1].kind == STEP_BYTELEVEL) {
        set_err(err, err_len, "%s: pre_tokenizer %s after ByteLevel is not supported (ByteLevel must be the last step)",
                name, type);
        return -1;
    }
    PretokStep* s = &t->steps[t->n_steps];
    memset(s, 0, sizeof *s);
    if (!strcmp(type, "ByteLevel")) {
        int use_regex;
        if (json_bool(pt, "add_prefix_space", 1, &s->add_prefix_space) || json_bool(pt, "use_regex", 1, &use_regex)) {
            set_err(err, err_len, "%s: pre_tokenizer ByteLevel: add_prefix_space and use_regex must be true or false",
                    name);
            return -1;
        }
        s->kind = STEP_BYTELEVEL;
        s->pattern = strdup(use_regex ? GPT2_PATTERN : "");
        if (use_regex && !(s->re = regex_compile(GPT2_PATTERN, 0, name, "ByteLevel", err, err_len))) return -1;
    } else if (!strcmp(type, "Split")) {
        const cJSON* pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        const cJSON* re = pat ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
        const cJSON* lit = pat ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
        const cJSON* beh = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
        int invert;
        if (!(cJSON_IsString(re) || cJSON_IsString(lit))) {
            set_err(err, err_len, "%s: pre_tokenizer Split: \"pattern\" must be {\"Regex\": ...} or {\"String\": ...}",
                    name);
            return -1;
        }
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") || json_bool(pt, "invert", 0, &invert) ||
            invert) {
            set_err(err, err_len, "%s: pre_tokenizer Split: only behavior \"Isolated\" with invert false is supported",
                    name);
            return -1;
        }
        s->kind = STEP_SPLIT;
        s->pattern = strdup(re ? re->valuestring : lit->valuestring);
        if (!(s->re = regex_compile(s->pattern, !re, name, "pre_tokenizer Split", err, err_len))) return -1;
    } else {
        set_err(err, err_len,
                "%s: pre_tokenizer type %s is not supported; expected ByteLevel, optionally after Split steps in a "
                "Sequence", name, type);
        return -1;
    }
    t->n_steps++;
    return 0;
}

/* Look a token string up in the model vocab; as HF, a merge naming an unknown token is an error. */
static int merge_token_id(const Tokenizer* t, const char* s, size_t n, int rank, const char* what, const char* name,
                          char* err, size_t err_len) {
    int32_t id = strmap_get(&t->vocab, s, n);
    if (id < 0) set_err(err, err_len, "%s: model.merges[%d]: %s \"%.*s\" is not in model.vocab", name, rank, what, (int)n, s);
    return id;
}

static int model_parse(Tokenizer* t, const cJSON* model, const char* name, char* err, size_t err_len) {
    const char* type = json_type(model);
    if (!type && !cJSON_GetObjectItemCaseSensitive(model, "merges")) type = "(none)";
    if (type && strcmp(type, "BPE")) {
        set_err(err, err_len, "%s: model.type is %s, only BPE is supported", name, type);
        return -1;
    }
    const cJSON* v;
    v = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0.0)) {
        set_err(err, err_len, "%s: model.dropout is set; BPE dropout is not supported (encoding must be deterministic)",
                name);
        return -1;
    }
    const char* affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = cJSON_GetObjectItemCaseSensitive(model, affix[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0])) {
            set_err(err, err_len, "%s: model.%s is set; not supported with byte-level BPE", name, affix[i]);
            return -1;
        }
    }
    if (json_bool(model, "fuse_unk", 0, &t->fuse_unk) || json_bool(model, "ignore_merges", 0, &t->ignore_merges)) {
        set_err(err, err_len, "%s: model.fuse_unk and model.ignore_merges must be true or false", name);
        return -1;
    }
    const cJSON* vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) {
        set_err(err, err_len, "%s: model.vocab must be an object mapping token strings to ids", name);
        return -1;
    }
    /* first pass: the largest id, so the id arrays can be sized */
    int max_id = -1, n_vocab = 0;
    cJSON_ArrayForEach(v, vocab) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= (1 << 28) ||
            v->valuedouble != (double)(int)v->valuedouble) {
            set_err(err, err_len, "%s: model.vocab[\"%s\"]: id must be an integer in [0, 2^28)", name, v->string);
            return -1;
        }
        if (v->valueint > max_id) max_id = v->valueint;
        n_vocab++;
    }
    if (max_id >= 2 * n_vocab + 1024) { /* would size the id tables by a stray id; real files are dense */
        set_err(err, err_len, "%s: model.vocab: id %d is far above its %d tokens (ids must be nearly dense)", name, max_id,
                n_vocab);
        return -1;
    }
    t->n_ids = max_id + 1;
    strmap_init(&t->vocab, (size_t)n_vocab);
    t->model_str = callocCheck((size_t)t->n_ids + 1, sizeof(char*));
    cJSON_ArrayForEach(v, vocab) {
        int id = v->valueint;
        if (t->model_str[id]) {
            set_err(err, err_len, "%s: model.vocab: id %d is given to both \"%s\" and \"%s\"", name, id,
                    t->model_str[id], v->string);
            return -1;
        }
        t->model_str[id] = strdup(v->string);
        if (strmap_put(&t->vocab, t->model_str[id], strlen(v->string), id)) {
            set_err(err, err_len, "%s: model.vocab: token \"%s\" appears twice", name, v->string);
            return -1;
        }
    }
    /* unknown token */
    t->unk_id = -1;
    v = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(v)) {
        t->unk_id = strmap_get(&t->vocab, v->valuestring, strlen(v->valuestring));
        if (t->unk_id < 0) {
            set_err(err, err_len, "%s: model.unk_token \"%s\" is not in model.vocab", name, v->valuestring);
            return -1;
        }
    }
    /* merges: "a b" strings (tokenizers < 0.20) or ["a", "b"] pairs (newer) */
    const cJSON* merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (merges && !cJSON_IsArray(merges)) {
        set_err(err, err_len, "%s: model.merges must be an array", name);
        return -1;
    }
    t->n_merges = merges ? cJSON_GetArraySize(merges) : 0;
    t->merge_pairs = mallocCheck(((size_t)t->n_merges + 1) * 2 * sizeof(int32_t));
    pairmap_init(&t->merges, (size_t)t->n_merges);
    int rank = 0;
    char* buf = NULL;
    size_t buf_cap = 0;
    cJSON_ArrayForEach(v, merges) {
        const char *a, *b;
        size_t na, nb;
        if (cJSON_IsString(v)) {
            const char* sp = strchr(v->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                set_err(err, err_len, "%s: model.merges[%d] \"%s\": expected two tokens separated by one space", name,
                        rank, v->valuestring);
                free(buf);
                return -1;
            }
            a = v->valuestring, na = (size_t)(sp - a), b = sp + 1, nb = strlen(b);
        } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsString(cJSON_GetArrayItem(v, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(v, 1))) {
            a = cJSON_GetArrayItem(v, 0)->valuestring, na = strlen(a);
            b = cJSON_GetArrayItem(v, 1)->valuestring, nb = strlen(b);
        } else {
            set_err(err, err_len, "%s: model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]", name, rank);
            free(buf);
            return -1;
        }
        int32_t ia = merge_token_id(t, a, na, rank, "token", name, err, err_len);
        int32_t ib = ia < 0 ? -1 : merge_token_id(t, b, nb, rank, "token", name, err, err_len);
        if (ib < 0) {
            free(buf);
            return -1;
        }
        if (na + nb + 1 > buf_cap) buf = reallocCheck(buf, buf_cap = 2 * (na + nb + 1));
        memcpy(buf, a, na);
        memcpy(buf + na, b, nb);
        int32_t ic = merge_token_id(t, buf, na + nb, rank, "merged token", name, err, err_len);
        if (ic < 0) {
            free(buf);
            return -1;
        }
        PairSlot* s = pairmap_find(&t->merges, pair_key(ia, ib));
        s->key = pair_key(ia, ib); /* a repeated merge takes its last rank, as in HF (a map insert) */
        s->rank = rank;
        s->new_id = ic;
        t->merge_pairs[2 * rank] = ia;
        t->merge_pairs[2 * rank + 1] = ib;
        rank++;
    }
    free(buf);
    for (int b = 0; b < 256; b++) {
        char u[2];
        int k = bpe_byte_to_utf8((uint8_t)b, u);
        t->byte_id[b] = strmap_get(&t->vocab, u, (size_t)k);
    }
    return 0;
}

static int added_parse(Tokenizer* t, const cJSON* list, const char* name, char* err, size_t err_len) {
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) {
        set_err(err, err_len, "%s: added_tokens must be an array", name);
        return -1;
    }
    t->added = callocCheck((size_t)cJSON_GetArraySize(list) + 1, sizeof(AddedToken));
    const cJSON* it;
    int i = 0;
    cJSON_ArrayForEach(it, list) {
        const cJSON* id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON* content = cJSON_GetObjectItemCaseSensitive(it, "content");
        AddedToken* a = &t->added[t->n_added];
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 28) || !cJSON_IsString(content)) {
            set_err(err, err_len, "%s: added_tokens[%d]: needs an integer \"id\" in [0, 2^28) and a string \"content\"",
                    name, i);
            return -1;
        }
        if (json_bool(it, "special", 0, &a->special) || json_bool(it, "single_word", 0, &a->single_word) ||
            json_bool(it, "lstrip", 0, &a->lstrip) || json_bool(it, "rstrip", 0, &a->rstrip) ||
            json_bool(it, "normalized", !a->special, &a->normalized)) {
            set_err(err, err_len, "%s: added_tokens[%d] \"%s\": special, single_word, lstrip, rstrip and normalized "
                    "must be true or false", name, i, content->valuestring);
            return -1;
        }
        i++;
        if (!content->valuestring[0]) continue; /* HF ignores empty added tokens */
        int dup = -1;
        for (int j = 0; j < t->n_added; j++)
            if (!strcmp(t->added[j].content, content->valuestring)) dup = j;
        if (dup >= 0) { /* HF keeps the id and takes the later entry's options */
            AddedToken* d = &t->added[dup];
            d->special = a->special, d->single_word = a->single_word, d->lstrip = a->lstrip;
            d->rstrip = a->rstrip, d->normalized = a->normalized;
            continue;
        }
        a->content = strdup(content->valuestring);
        a->len = strlen(a->content);
        /* The id is the one HF gives on load, whatever the file says: the model's id if the content is
         * a model token, else the next id after the model vocabulary (counted in entries) and the added
         * tokens so far. Files written by HF or by our trainer agree; for one that does not, HF warns
         * and uses its id, and so do we. */
        int32_t model_id = strmap_get(&t->vocab, a->content, a->len);
        if (model_id >= 0) a->id = model_id;
        else {
            int32_t model_size = (int32_t)t->vocab.n, max = -1;
            for (int j = 0; j < t->n_added; j++)
                if (t->added[j].id > max) max = t->added[j].id;
            a->id = max < 0 ? model_size : (max >= model_size || model_size == 0) ? max + 1 : model_size;
        }
        if (a->id != id->valueint)
            rr_warn("%s: added_tokens[%d] \"%s\" has id %d in the file but gets id %d, as Hugging Face gives it",
                    name, i - 1, a->content, id->valueint, a->id);
        t->n_added++;
    }
    return 0;
}

/* Precompute, per pass and first byte, the added tokens to try at a position, longest first
 * (leftmost-longest matching as HF's Aho-Corasick with MatchKind::LeftmostLongest). */
static void added_index(Tokenizer* t) {
    int* order = mallocCheck(((size_t)t->n_added + 1) * sizeof(int));
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < 256; b++) {
            int n = 0;
            for (int i = 0; i < t->n_added; i++)
                if (t->added[i].normalized == p && (uint8_t)t->added[i].content[0] == b) order[n++] = i;
            if (!n) continue;
            for (int i = 1; i < n; i++) /* insertion sort by length, descending; stable */
                for (int j = i; j > 0 && t->added[order[j]].len > t->added[order[j - 1]].len; j--) {
                    int tmp = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = tmp;
                }
            t->added_first[p][b] = mallocCheck(((size_t)n + 1) * sizeof(int32_t));
            for (int i = 0; i < n; i++) t->added_first[p][b][i] = order[i];
            t->added_first[p][b][n] = -1;
        }
    free(order);
}

/* The stable identity of the tokenizer: everything that changes which ids a text gets or what the
 * ids decode to, serialised in a fixed order (never the JSON text, so formatting does not count). */
static uint64_t tokenizer_compute_hash(const Tokenizer* t) {
    size_t cap = 1 << 16, n = 0;
    char* buf = mallocCheck(cap);
#define PUT(p, k)                                                   \
    do {                                                            \
        size_t k_ = (k);                                            \
        while (n + k_ > cap) buf = reallocCheck(buf, cap *= 2);     \
        memcpy(buf + n, (p), k_);                                   \
        n += k_;                                                    \
    } while (0)
#define PUT32(x)                  \
    do {                          \
        int32_t v_ = (int32_t)(x); \
        PUT(&v_, 4);              \
    } while (0)
    PUT("rrfp-tokenizer-v1", 17);
    PUT32(t->n_ids);
    for (int i = 0; i < t->n_ids; i++) {
        if (!t->model_str[i]) {
            PUT32(-1);
            continue;
        }
        size_t k = strlen(t->model_str[i]);
        PUT32(k);
        PUT(t->model_str[i], k);
    }
    PUT32(t->n_merges);
    PUT(t->merge_pairs, (size_t)t->n_merges * 2 * sizeof(int32_t));
    PUT32(t->n_added);
    for (int i = 0; i < t->n_added; i++) {
        const AddedToken* a = &t->added[i];
        PUT32(a->id);
        PUT32(a->special | a->single_word << 1 | a->lstrip << 2 | a->rstrip << 3 | a->normalized << 4);
        PUT32(a->len);
        PUT(a->content, a->len);
    }
    PUT32(t->n_steps);
    for (int i = 0; i < t->n_steps; i++) {
        PUT32(t->steps[i].kind);
        PUT32(t->steps[i].add_prefix_space);
        size_t k = strlen(t->steps[i].pattern);
        PUT32(k);
        PUT(t->steps[i].pattern, k);
    }
    PUT32(t->unk_id);
    PUT32(t->fuse_unk | t->ignore_merges << 1);
#undef PUT
#undef PUT32
    uint64_t h = rr_fnv1a64(buf, n);
    free(buf);
    return h;
}

/* HF's ByteLevel decoder, per token: map every character back to its byte; if one is not a mapped
 * character, the token's own UTF-8 bytes are used. */
static void decode_table_build(Tokenizer* t) {
    t->dec = callocCheck((size_t)t->n_ids + 1, sizeof(char*));
    t->dec_len = callocCheck((size_t)t->n_ids + 1, sizeof(uint32_t));
    for (int id = 0; id < t->n_ids; id++) {
        const char* s = tokenizer_token_str(t, id);
        if (!s) continue;
        size_t n = strlen(s), o = 0, i = 0;
        char* out = mallocCheck(n + 1);
        while (i < n) {
            uint32_t cp;
            int k = utf8_decode((const uint8_t*)s + i, n - i, &cp);
            int b = k ? bpe_codepoint_to_byte(cp) : -1;
            if (b < 0) break;
            out[o++] = (char)b;
            i += (size_t)k;
        }
        if (i < n) {
            memcpy(out, s, n);
            o = n;
        }
        out[o] = 0;
        t->dec[id] = out;
        t->dec_len[id] = (uint32_t)o;
    }
}

Tokenizer* tokenizer_load_json(const char* json, size_t len, const char* name, char* err, size_t err_len) {
    if (!name) name = "tokenizer.json";
    cJSON* root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char* at = cJSON_GetErrorPtr();
        size_t off = (at && at >= json && at <= json + len) ? (size_t)(at - json) : 0;
        int line = 1;
        for (size_t i = 0; i < off; i++) line += json[i] == '\n';
        set_err(err, err_len, "%s:%d: not valid JSON (near byte %zu)", name, line, off);
        return NULL;
    }
    Tokenizer* t = callocCheck(1, sizeof(Tokenizer));
    t->name = strdup(name);
    pthread_mutex_init(&t->cache.mu, NULL);
    strmap_init(&t->cache.map, 1024);
    const cJSON* model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON* norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON* pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON* dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    int ok = 0;
    if (!cJSON_IsObject(root) || !cJSON_IsObject(model)) {
        set_err(err, err_len, "%s: no \"model\" object; expected a Hugging Face tokenizer.json", name);
    } else if (norm && !cJSON_IsNull(norm)) {
        set_err(err, err_len, "%s: normalizer %s is not supported (only null: byte-level BPE without normalization)",
                name, json_type(norm) ? json_type(norm) : "?");
    } else if (!cJSON_IsObject(pt)) {
        set_err(err, err_len, "%s: pre_tokenizer is missing; expected ByteLevel (byte-level BPE)", name);
    } else if (!cJSON_IsObject(dec) || !json_type(dec) || strcmp(json_type(dec), "ByteLevel")) {
        set_err(err, err_len, "%s: decoder is %s, expected ByteLevel", name,
                cJSON_IsObject(dec) && json_type(dec) ? json_type(dec) : "missing");
    } else if (!model_parse(t, model, name, err, err_len) && !pretok_parse(t, pt, name, err, err_len) &&
               !added_parse(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), name, err, err_len)) {
        ok = 1;
        if (t->n_steps == 0 || t->steps[t->n_steps - 1].kind != STEP_BYTELEVEL) {
            set_err(err, err_len, "%s: the pre_tokenizer has no ByteLevel step; expected byte-level BPE", name);
            ok = 0;
        }
        for (int b = 0; ok && b < 256; b++)
            if (t->byte_id[b] < 0 && t->unk_id < 0) {
                /* HF would silently drop such bytes; we refuse, since the text could not round-trip */
                char u[3] = {0};
                bpe_byte_to_utf8((uint8_t)b, u);
                set_err(err, err_len, "%s: model.vocab lacks the byte token \"%s\" (byte 0x%02X) and there is no unk_token",
                        name, u, b);
                ok = 0;
            }
    }
    cJSON_Delete(root);
    if (!ok) {
        tokenizer_free(t);
        return NULL;
    }
    /* ids of added tokens extend the id space */
    int max_id = t->n_ids - 1;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id > max_id) max_id = t->added[i].id;
    if (max_id + 1 > t->n_ids) {
        t->model_str = reallocCheck(t->model_str, ((size_t)max_id + 2) * sizeof(char*));
        for (int i = t->n_ids; i <= max_id + 1; i++) t->model_str[i] = NULL;
        t->n_ids = max_id + 1;
    }
    added_index(t);
    t->added_of_id = mallocCheck((size_t)t->n_ids * sizeof(int32_t));
    for (int i = 0; i < t->n_ids; i++) t->added_of_id[i] = -1;
    for (int i = 0; i < t->n_added; i++) t->added_of_id[t->added[i].id] = i;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].single_word && !t->word_re) {
            /* Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners */
            t->word_re = regex_compile("[\\p{L}\\p{Nl}\\p{Nd}\\p{M}\\p{Pc}\\x{200C}\\x{200D}]", 0, name, "single_word",
                                       err, err_len);
            RR_ASSERT(t->word_re);
        }
    decode_table_build(t);
    t->hash = tokenizer_compute_hash(t);
    return t;
}

Tokenizer* tokenizer_load(const char* path, char* err, size_t err_len) {
    size_t n;
    char* json = rr_read_file(path, &n);
    if (!json) {
        set_err(err, err_len, "%s: cannot read the tokenizer: %s", path, strerror(errno));
        return NULL;
    }
    Tokenizer* t = tokenizer_load_json(json, n, path, err, err_len);
    free(json);
    return t;
}

int tokenizer_vocab_size(const Tokenizer* t) { return t->n_ids; }

int tokenizer_token_id(const Tokenizer* t, const char* token) {
    for (int i = 0; i < t->n_added; i++)
        if (!strcmp(t->added[i].content, token)) return t->added[i].id;
    return strmap_get(&t->vocab, token, strlen(token));
}

const char* tokenizer_token_str(const Tokenizer* t, int id) {
    if (id < 0 || id >= t->n_ids) return NULL;
    if (t->added_of_id && t->added_of_id[id] >= 0) return t->added[t->added_of_id[id]].content;
    return t->model_str[id];
}

uint64_t tokenizer_hash(const Tokenizer* t) { return t->hash; }

/* ---- splitting: added tokens, then the pre-tokenizer ------------------------------------------ */

typedef struct {
    TokenizerPieceFn fn;
    void* ctx;
    pcre2_match_data* md;
    char* scratch[MAX_STEPS]; /* prefix-space copies, one per step depth */
    size_t scratch_cap[MAX_STEPS];
} SplitCtx;

static void pretok_step(const Tokenizer* t, SplitCtx* c, int k, const char* s, size_t n);

/* Split s by step k's regex (Isolated: matches and the gaps between them are pieces) and hand each
 * piece to step k+1. Invalid UTF-8 runs are pieces of their own (see the file comment). */
static void regex_split(const Tokenizer* t, SplitCtx* c, int k, const pcre2_code* re, const char* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t v = bpe_utf8_valid_prefix((const uint8_t*)s + i, n - i);
        if (v == 0) {
            size_t bad = bpe_utf8_invalid_run((const uint8_t*)s + i, n - i);
            pretok_step(t, c, k + 1, s + i, bad);
            i += bad;
            continue;
        }
        const char* run = s + i;
        size_t pos = 0, last = 0;
        while (pos < v) {
            int rc = pcre2_match(re, (PCRE2_SPTR)run, v, pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            RR_ASSERT(rc > 0); /* the subject is valid UTF-8; other errors would be resource limits */
            PCRE2_SIZE* ov = pcre2_get_ovector_pointer(c->md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* empty match: step over one character */
                uint32_t cp;
                int len = utf8_decode((const uint8_t*)run + pos, v - pos, &cp);
                pos += len > 0 ? (size_t)len : 1;
                continue;
            }
            if (ms > last) pretok_step(t, c, k + 1, run + last, ms - last);
            pretok_step(t, c, k + 1, run + ms, me - ms);
            last = pos = me;
        }
        if (last < v) pretok_step(t, c, k + 1, run + last, v - last);
        i += v;
    }
}

static void pretok_step(const Tokenizer* t, SplitCtx* c, int k, const char* s, size_t n) {
    if (n == 0) return; /* HF drops empty pieces */
    if (k == t->n_steps) {
        c->fn(c->ctx, s, n, -1);
        return;
    }
    const PretokStep* st = &t->steps[k];
    if (st->kind == STEP_BYTELEVEL && st->add_prefix_space && s[0] != ' ') {
        if (c->scratch_cap[k] < n + 1) c->scratch[k] = reallocCheck(c->scratch[k], c->scratch_cap[k] = 2 * n + 64);
        c->scratch[k][0] = ' ';
        memcpy(c->scratch[k] + 1, s, n);
        s = c->scratch[k];
        n++;
    }
    if (!st->re) pretok_step(t, c, k + 1, s, n);
    else regex_split(t, c, k, st->re, s, n);
}

static int is_word_char_at(const Tokenizer* t, const char* s, size_t n, pcre2_match_data* md) {
    return n > 0 && pcre2_match(t->word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED, md, NULL) > 0;
}

/* Find added tokens of pass p (0: normalized=false, 1: normalized=true) in s; pass 0's gaps go to
 * pass 1, pass 1's gaps to the pre-tokenizer. */
static void added_split(const Tokenizer* t, SplitCtx* c, int p, const char* s, size_t n) {
    size_t i = 0, start_offset = 0;
    while (i < n) {
        const int32_t* cand = t->added_first[p][(uint8_t)s[i]];
        int hit = -1;
        for (; cand && *cand >= 0; cand++) {
            const AddedToken* a = &t->added[*cand];
            if (a->len <= n - i && !memcmp(s + i, a->content, a->len)) {
                hit = *cand;
                break;
            }
        }
        if (hit < 0) {
            i++;
            continue;
        }
        const AddedToken* a = &t->added[hit];
        size_t start = i, stop = i + a->len;
        i = stop; /* the scan resumes after the match even if single_word discards it, as HF */
        if (a->single_word) { /* HF: discarded if a \w character touches either end */
            size_t b = start;
            while (b > 0 && start - b < 4 && (b == start || ((uint8_t)s[b] & 0xC0) == 0x80)) b--;
            uint32_t cp;
            int after = stop < n ? utf8_decode((const uint8_t*)s + stop, n - stop, &cp) : 0;
            if ((start > 0 && is_word_char_at(t, s + b, start - b, c->md)) ||
                (after > 0 && is_word_char_at(t, s + stop, (size_t)after, c->md)))
                continue;
        }
        if (a->lstrip) {
            size_t k;
            while (start > start_offset && (k = ws_before(s, start)) && start - k >= start_offset) start -= k;
        }
        if (a->rstrip) {
            size_t k;
            while (stop < n && (k = ws_at(s + stop, n - stop))) stop += k;
            i = stop;
        }
        if (start > start_offset) {
            if (p == 0) added_split(t, c, 1, s + start_offset, start - start_offset);
            else pretok_step(t, c, 0, s + start_offset, start - start_offset);
        }
        c->fn(c->ctx, s + start, stop - start, a->id);
        start_offset = stop;
    }
    if (start_offset < n) {
        if (p == 0) added_split(t, c, 1, s + start_offset, n - start_offset);
        else pretok_step(t, c, 0, s + start_offset, n - start_offset);
    }
}

void tokenizer_pretokenize(const Tokenizer* t, const char* text, size_t len, TokenizerPieceFn fn, void* ctx) {
    SplitCtx c = {.fn = fn, .ctx = ctx};
    c.md = pcre2_match_data_create(4, NULL);
    if (!c.md) rr_die("tokenizer: out of memory (pcre2_match_data_create)");
    added_split(t, &c, 0, text, len);
    pcre2_match_data_free(c.md);
    for (int k = 0; k < MAX_STEPS; k++) free(c.scratch[k]);
}

/* ---- BPE ------------------------------------------------------------------------------------------ */

typedef struct {
    int32_t rank, pos;  /* pos: index of the left symbol */
    int32_t new_id;
} Merge;

static int merge_before(const Merge* x, const Merge* y) {
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}
static void heap_push(Merge* h, int* n, Merge m) {
    int i = (*n)++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!merge_before(&m, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = m;
}
static Merge heap_pop(Merge* h, int* n) {
    Merge top = h[0], last = h[--(*n)];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const Merge* best = &last;
        if (l < *n && merge_before(&h[l], best)) m = l, best = &h[l];
        if (r < *n && merge_before(&h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n > 0) h[i] = last;
    return top;
}

typedef struct {
    int32_t* ids; /* output */
    size_t n, cap;
    /* per-word work arrays */
    int32_t *sym, *prev, *next;
    Merge* heap;
    size_t work_cap;
    char* mapped; /* byte-level string of a word (ignore_merges lookups) */
    size_t mapped_cap;
    const Tokenizer* t;
} EncodeCtx;

static void out_push(EncodeCtx* e, int32_t id) {
    if (e->n == e->cap) e->ids = reallocCheck(e->ids, (e->cap = e->cap ? 2 * e->cap : 256) * sizeof(int32_t));
    e->ids[e->n++] = id;
}

static void pair_push(const Tokenizer* t, EncodeCtx* e, int* nh, int32_t pos) {
    int32_t nx = e->next[pos];
    if (nx < 0) return;
    const PairSlot* s = pairmap_find(&t->merges, pair_key(e->sym[pos], e->sym[nx]));
    if (s->key == UINT64_MAX) return;
    heap_push(e->heap, nh, (Merge){s->rank, pos, s->new_id});
}

/* BPE-encode one pre-token of n bytes, appending its ids. */
static void bpe_word(const Tokenizer* t, EncodeCtx* e, const uint8_t* w, size_t n) {
    if (t->ignore_merges) { /* a word that is itself a token is taken whole (HF, ignore_merges) */
        if (e->mapped_cap < 2 * n) e->mapped = reallocCheck(e->mapped, e->mapped_cap = 2 * n + 64);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += (size_t)bpe_byte_to_utf8(w[i], e->mapped + m);
        int32_t id = strmap_get(&t->vocab, e->mapped, m);
        if (id >= 0) {
            out_push(e, id);
            return;
        }
    }
    if (e->work_cap < n) {
        e->work_cap = 2 * n + 64;
        e->sym = reallocCheck(e->sym, e->work_cap * sizeof(int32_t));
        e->prev = reallocCheck(e->prev, e->work_cap * sizeof(int32_t));
        e->next = reallocCheck(e->next, e->work_cap * sizeof(int32_t));
        e->heap = reallocCheck(e->heap, e->work_cap * 2 * sizeof(Merge));
    }
    /* symbols: one per byte; a byte missing from the vocab becomes unk (fused if fuse_unk) */
    int32_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id < 0) {
            if (t->fuse_unk && ns > 0 && e->sym[ns - 1] == t->unk_id) continue;
            id = t->unk_id;
        }
        e->sym[ns++] = id;
    }
    for (int32_t i = 0; i < ns; i++) {
        e->prev[i] = i - 1;
        e->next[i] = i + 1 < ns ? i + 1 : -1;
    }
    int nh = 0;
    for (int32_t i = 0; i + 1 < ns; i++) pair_push(t, e, &nh, i);
    while (nh > 0) {
        Merge m = heap_pop(e->heap, &nh);
        int32_t nx = e->next[m.pos];
        if (e->sym[m.pos] < 0 || nx < 0) continue; /* merged away, or now the last symbol */
        const PairSlot* s = pairmap_find(&t->merges, pair_key(e->sym[m.pos], e->sym[nx]));
        if (s->key == UINT64_MAX || s->new_id != m.new_id) continue; /* stale entry */
        e->sym[m.pos] = m.new_id;
        e->sym[nx] = -1;
        e->next[m.pos] = e->next[nx];
        if (e->next[nx] >= 0) e->prev[e->next[nx]] = m.pos;
        if (e->prev[m.pos] >= 0) pair_push(t, e, &nh, e->prev[m.pos]);
        pair_push(t, e, &nh, m.pos);
    }
    for (int32_t i = 0; i >= 0 && ns > 0; i = e->next[i]) out_push(e, e->sym[i]);
}

/* Word cache: BPE is the costly step and natural text repeats words. */
static int cache_get(const Tokenizer* tc, EncodeCtx* e, const char* w, size_t n) {
    WordCache* c = (WordCache*)&tc->cache; /* the cache is the one mutable part, guarded by its mutex */
    int found = 0;
    pthread_mutex_lock(&c->mu);
    int32_t ent = strmap_get(&c->map, w, n);
    if (ent >= 0) {
        for (uint32_t i = 0; i < c->ent_cnt[ent]; i++) out_push(e, c->ids[c->ent_off[ent] + i]);
        found = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

static void cache_put(const Tokenizer* tc, const char* w, size_t n, const int32_t* ids, size_t k) {
    WordCache* c = (WordCache*)&tc->cache;
    pthread_mutex_lock(&c->mu);
    if (!c->keys) { /* arenas have a fixed size, so keys already in the map never move */
        c->keys = mallocCheck(CACHE_KEY_BYTES);
        c->ids = mallocCheck(CACHE_IDS * sizeof(int32_t));
        c->ent_off = mallocCheck(CACHE_MAX_ENTRIES * sizeof(uint32_t));
        c->ent_cnt = mallocCheck(CACHE_MAX_ENTRIES * sizeof(uint32_t));
    }
    if (c->n_ent == CACHE_MAX_ENTRIES || c->keys_n + n > CACHE_KEY_BYTES || c->ids_n + k > CACHE_IDS) {
        /* full: start over rather than evict (cheap, and natural text refills it with its common words) */
        strmap_free(&c->map);
        strmap_init(&c->map, 1024);
        c->n_ent = c->keys_n = c->ids_n = 0;
    }
    if (strmap_get(&c->map, w, n) < 0) {
        memcpy(c->keys + c->keys_n, w, n);
        memcpy(c->ids + c->ids_n, ids, k * sizeof(int32_t));
        c->ent_off[c->n_ent] = (uint32_t)c->ids_n;
        c->ent_cnt[c->n_ent] = (uint32_t)k;
        strmap_put(&c->map, c->keys + c->keys_n, n, (int32_t)c->n_ent);
        c->keys_n += n;
        c->ids_n += k;
        c->n_ent++;
    }
    pthread_mutex_unlock(&c->mu);
}

static void encode_piece(void* ctx, const char* piece, size_t len, int added_id) {
    EncodeCtx* e = ctx;
    if (added_id >= 0) {
        out_push(e, added_id);
        return;
    }
    if (len > CACHE_MAX_WORD) {
        bpe_word(e->t, e, (const uint8_t*)piece, len);
        return;
    }
    if (cache_get(e->t, e, piece, len)) return;
    size_t before = e->n;
    bpe_word(e->t, e, (const uint8_t*)piece, len);
    cache_put(e->t, piece, len, e->ids + before, e->n - before);
}

int tokenizer_encode(const Tokenizer* t, const char* text, size_t len, int32_t** ids) {
    EncodeCtx e = {.t = t};
    tokenizer_pretokenize(t, text, len, encode_piece, &e);
    free(e.sym);
    free(e.prev);
    free(e.next);
    free(e.heap);
    free(e.mapped);
    if (!e.ids) e.ids = mallocCheck(sizeof(int32_t)); /* a valid pointer even for no ids */
    *ids = e.ids;
    return (int)e.n;
}

char* tokenizer_decode(const Tokenizer* t, const int32_t* ids, int n, size_t* len) {
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->n_ids && t->dec[ids[i]]) total += t->dec_len[ids[i]];
    char* out = mallocCheck(total + 1);
    size_t o = 0;
    for (int i = 0; i < n; i++) /* ids without a token are skipped, as HF does */
        if (ids[i] >= 0 && ids[i] < t->n_ids && t->dec[ids[i]]) {
            memcpy(out + o, t->dec[ids[i]], t->dec_len[ids[i]]);
            o += t->dec_len[ids[i]];
        }
    out[o] = 0;
    if (len) *len = o;
    return out;
}
