/* tokenizer.c — byte-level BPE read from a Hugging Face tokenizer.json: load, hash, accessors, and
 * GPT-2's byte <-> unicode map (encoding and decoding are in tokenizer_encode.c).
 *
 * What is read: model BPE (vocab; merges as "a b" strings or ["a", "b"] pairs, a repeated merge
 * taking its last rank; unk_token, fuse_unk, ignore_merges, byte_fallback), pre_tokenizer ByteLevel,
 * optionally after Split(Regex or String, Isolated) steps in a Sequence, decoder ByteLevel; or, without a
 * pre_tokenizer, SentencePiece-style BPE (Llama-2): normalizer Prepend / Replace(String) steps and the
 * decoder Sequence Replace, ByteFallback, Fuse, Strip, or its newer form with a Metaspace pre-tokenizer (and
 * optionally a Metaspace decoder); and added_tokens
 * with HF's ids (the model's id if the content is a model token, else the next free one) and
 * options. Anything else is refused with a message naming the file and the field.
 *
 * Regexes run in PCRE2 (UTF + UCP, JIT). Oniguruma, which HF uses, takes \s as Unicode White_Space.
 * PCRE2's UCP \s is its own list (category Z plus the \h and \v characters); it agrees with
 * White_Space in the PCRE2 we build with (checked with U+0085 and U+180E in the peer corpus), but to
 * keep that from depending on the PCRE2 version, \s and \S are rewritten into the explicit
 * White_Space class before compiling (see regex_rewrite_space).
 *
 * Not applied: post_processor, truncation and padding (encode gives the ids of the text itself, as
 * HF's encode(text, add_special_tokens=False); the prompt template adds the special tokens it needs). */
#define _GNU_SOURCE
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json.h"
#include "engine/util.h"
#include "text/bpe_internal.h"
#include "text/tokenizer_impl.h"

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
int bpe_utf8_decode(const uint8_t* s, size_t n, uint32_t* cp) {
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
        int k = bpe_utf8_decode(s + i, n - i, &cp);
        if (!k) break;
        i += k;
    }
    return i;
}

size_t bpe_utf8_invalid_run(const uint8_t* s, size_t n) {
    size_t i = 0;
    uint32_t cp;
    while (i < n && !bpe_utf8_decode(s + i, n - i, &cp)) i++;
    return i;
}

#define WHITE_SPACE_CLASS \
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"


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
        for (int b = 0; b < 256; b++) free(t->added_lens[p][b]);
    strmap_free(&t->added_map);
    if (t->word_re) pcre2_code_free(t->word_re);
    for (int i = 0; i < t->n_steps; i++) {
        free(t->steps[i].pattern);
        if (t->steps[i].re) pcre2_code_free(t->steps[i].re);
    }
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].from);
        free(t->norm[i].to);
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
        rr_fail(err, err_len, "%s: %s: cannot compile the regex \"%s\": %s", name, where, pattern, (char*)msg);
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
        rr_fail(err, err_len, "%s: pre_tokenizer has no \"type\"; expected ByteLevel or a Sequence ending in ByteLevel",
                name);
        return -1;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON* list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list)) {
            rr_fail(err, err_len, "%s: pre_tokenizer Sequence has no \"pretokenizers\" array", name);
            return -1;
        }
        const cJSON* it;
        cJSON_ArrayForEach(it, list) if (pretok_parse(t, it, name, err, err_len)) return -1;
        return 0;
    }
    if (t->n_steps == MAX_STEPS) {
        rr_fail(err, err_len, "%s: more than %d pre-tokenizer steps", name, MAX_STEPS);
        return -1;
    }
    if (t->n_steps > 0 && t->steps[t->n_steps - 1].kind == STEP_BYTELEVEL) {
        rr_fail(err, err_len, "%s: pre_tokenizer %s after ByteLevel is not supported (ByteLevel must be the last step)",
                name, type);
        return -1;
    }
    PretokStep* s = &t->steps[t->n_steps];
    memset(s, 0, sizeof *s);
    if (!strcmp(type, "ByteLevel")) {
        int use_regex;
        if (json_bool(pt, "add_prefix_space", 1, &s->add_prefix_space) || json_bool(pt, "use_regex", 1, &use_regex)) {
            rr_fail(err, err_len, "%s: pre_tokenizer ByteLevel: add_prefix_space and use_regex must be true or false",
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
            rr_fail(err, err_len, "%s: pre_tokenizer Split: \"pattern\" must be {\"Regex\": ...} or {\"String\": ...}",
                    name);
            return -1;
        }
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") || json_bool(pt, "invert", 0, &invert) ||
            invert) {
            rr_fail(err, err_len, "%s: pre_tokenizer Split: only behavior \"Isolated\" with invert false is supported",
                    name);
            return -1;
        }
        s->kind = STEP_SPLIT;
        s->pattern = strdup(re ? re->valuestring : lit->valuestring);
        if (!(s->re = regex_compile(s->pattern, !re, name, "pre_tokenizer Split", err, err_len))) return -1;
    } else {
        rr_fail(err, err_len,
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
    if (id < 0)
        rr_fail(err, err_len, "%s: model.merges[%d]: %s \"%.*s\" is not in model.vocab", name, rank, what, (int)n, s);
    return id;
}

static int model_parse(Tokenizer* t, const cJSON* model, const char* name, char* err, size_t err_len) {
    const char* type = json_type(model);
    if (!type && !cJSON_GetObjectItemCaseSensitive(model, "merges")) type = "(none)";
    if (type && strcmp(type, "BPE")) {
        rr_fail(err, err_len, "%s: model.type is %s, only BPE is supported", name, type);
        return -1;
    }
    const cJSON* v;
    v = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0.0)) {
        rr_fail(err, err_len, "%s: model.dropout is set; BPE dropout is not supported (encoding must be deterministic)",
                name);
        return -1;
    }
    const char* affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = cJSON_GetObjectItemCaseSensitive(model, affix[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0])) {
            rr_fail(err, err_len, "%s: model.%s is set; not supported with byte-level BPE", name, affix[i]);
            return -1;
        }
    }
    if (json_bool(model, "fuse_unk", 0, &t->fuse_unk) || json_bool(model, "ignore_merges", 0, &t->ignore_merges) ||
        json_bool(model, "byte_fallback", 0, &t->byte_fallback)) {
        rr_fail(err, err_len, "%s: model.fuse_unk, model.ignore_merges and model.byte_fallback must be true or false",
                name);
        return -1;
    }
    const cJSON* vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) {
        rr_fail(err, err_len, "%s: model.vocab must be an object mapping token strings to ids", name);
        return -1;
    }
    /* first pass: the largest id, so the id arrays can be sized */
    int max_id = -1, n_vocab = 0;
    cJSON_ArrayForEach(v, vocab) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= (1 << 28) ||
            v->valuedouble != (double)(int)v->valuedouble) {
            rr_fail(err, err_len, "%s: model.vocab[\"%s\"]: id must be an integer in [0, 2^28)", name, v->string);
            return -1;
        }
        if (v->valueint > max_id) max_id = v->valueint;
        n_vocab++;
    }
    if (max_id >= 2 * n_vocab + 1024) { /* would size the id tables by a stray id; real files are dense */
        rr_fail(err, err_len, "%s: model.vocab: id %d is far above its %d tokens (ids must be nearly dense)", name,
                max_id, n_vocab);
        return -1;
    }
    t->n_ids = max_id + 1;
    strmap_init(&t->vocab, (size_t)n_vocab);
    t->model_str = callocCheck((size_t)t->n_ids + 1, sizeof(char*));
    cJSON_ArrayForEach(v, vocab) {
        int id = v->valueint;
        if (t->model_str[id]) {
            rr_fail(err, err_len, "%s: model.vocab: id %d is given to both \"%s\" and \"%s\"", name, id,
                    t->model_str[id], v->string);
            return -1;
        }
        t->model_str[id] = strdup(v->string);
        if (strmap_put(&t->vocab, t->model_str[id], strlen(v->string), id)) {
            rr_fail(err, err_len, "%s: model.vocab: token \"%s\" appears twice", name, v->string);
            return -1;
        }
    }
    /* unknown token */
    t->unk_id = -1;
    v = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(v)) {
        t->unk_id = strmap_get(&t->vocab, v->valuestring, strlen(v->valuestring));
        if (t->unk_id < 0) {
            rr_fail(err, err_len, "%s: model.unk_token \"%s\" is not in model.vocab", name, v->valuestring);
            return -1;
        }
    }
    /* merges: "a b" strings (tokenizers < 0.20) or ["a", "b"] pairs (newer) */
    const cJSON* merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (merges && !cJSON_IsArray(merges)) {
        rr_fail(err, err_len, "%s: model.merges must be an array", name);
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
                rr_fail(err, err_len, "%s: model.merges[%d] \"%s\": expected two tokens separated by one space", name,
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
            rr_fail(err, err_len, "%s: model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]", name, rank);
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
        char u[2], fb[8];
        int k = bpe_byte_to_utf8((uint8_t)b, u);
        t->byte_id[b] = strmap_get(&t->vocab, u, (size_t)k);
        snprintf(fb, sizeof fb, "<0x%02X>", b); /* SentencePiece's byte pieces (byte_fallback) */
        t->fb_id[b] = strmap_get(&t->vocab, fb, 6);
    }
    return 0;
}

/* ---- SentencePiece-style BPE: normalizer and decoder ----------------------------------------------- */

static int norm_step_parse(Tokenizer* t, const cJSON* n, const char* name, char* err, size_t err_len) {
    const char* type = json_type(n);
    if (t->n_norm == MAX_NORM) {
        rr_fail(err, err_len, "%s: normalizer: more than %d steps", name, MAX_NORM);
        return -1;
    }
    NormStep* s = &t->norm[t->n_norm];
    if (type && !strcmp(type, "Prepend")) {
        const cJSON* p = cJSON_GetObjectItemCaseSensitive(n, "prepend");
        if (!cJSON_IsString(p)) {
            rr_fail(err, err_len, "%s: normalizer Prepend has no \"prepend\" string", name);
            return -1;
        }
        *s = (NormStep){.kind = NORM_PREPEND, .to = strdup(p->valuestring), .to_len = strlen(p->valuestring)};
    } else if (type && !strcmp(type, "Replace")) {
        const cJSON* pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const cJSON* str = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
        const cJSON* content = cJSON_GetObjectItemCaseSensitive(n, "content");
        if (!cJSON_IsString(str) || !str->valuestring[0] || !cJSON_IsString(content)) {
            rr_fail(err, err_len, "%s: normalizer Replace: only {\"pattern\": {\"String\": ...}, \"content\": ...} with a "
                    "non-empty string is supported", name);
            return -1;
        }
        *s = (NormStep){.kind = NORM_REPLACE, .from = strdup(str->valuestring), .from_len = strlen(str->valuestring),
                        .to = strdup(content->valuestring), .to_len = strlen(content->valuestring)};
    } else {
        rr_fail(err, err_len, "%s: normalizer %s is not supported (null, or Prepend / Replace(String) steps in a "
                "Sequence, as Llama-2's tokenizer.json has)", name, type ? type : "without a type");
        return -1;
    }
    t->n_norm++;
    return 0;
}

static int normalizer_parse(Tokenizer* t, const cJSON* n, const char* name, char* err, size_t err_len) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char* type = json_type(n);
    if (type && !strcmp(type, "Sequence")) {
        const cJSON* list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list)) {
            rr_fail(err, err_len, "%s: normalizer Sequence has no \"normalizers\" array", name);
            return -1;
        }
        const cJSON* x;
        cJSON_ArrayForEach(x, list) if (norm_step_parse(t, x, name, err, err_len)) return -1;
        return 0;
    }
    return norm_step_parse(t, n, name, err, err_len);
}

/* A Metaspace's prepend_scheme ("always" | "first" | "never"), or the older add_prefix_space (true: always). */
static int meta_prepend_parse(const cJSON* m, int* prepend) {
    const cJSON* ps = cJSON_GetObjectItemCaseSensitive(m, "prepend_scheme");
    if (cJSON_IsString(ps)) {
        if (!strcmp(ps->valuestring, "always")) *prepend = META_ALWAYS;
        else if (!strcmp(ps->valuestring, "first")) *prepend = META_FIRST;
        else if (!strcmp(ps->valuestring, "never")) *prepend = META_NEVER;
        else return -1;
        return 0;
    }
    int aps;
    if (json_bool(m, "add_prefix_space", 1, &aps)) return -1;
    *prepend = aps ? META_ALWAYS : META_NEVER;
    return 0;
}

/* pre_tokenizer Metaspace (newer Llama / Mistral files): ' ' replaced, the replacement prepended by its scheme,
 * optionally split before each replacement. */
static int metaspace_parse(Tokenizer* t, const cJSON* m, const char* name, char* err, size_t err_len) {
    PretokStep* s = &t->steps[0];
    memset(s, 0, sizeof *s);
    const cJSON* r = cJSON_GetObjectItemCaseSensitive(m, "replacement");
    int split;
    if (!cJSON_IsString(r) || !r->valuestring[0] || meta_prepend_parse(m, &s->prepend) || json_bool(m, "split", 1, &split)) {
        rr_fail(err, err_len, "%s: pre_tokenizer Metaspace: needs a \"replacement\" string, prepend_scheme always / "
                "first / never (or add_prefix_space) and a boolean split", name);
        return -1;
    }
    s->kind = STEP_METASPACE;
    s->pattern = strdup(r->valuestring);
    s->split = split;
    t->n_steps = 1;
    return 0;
}

/* Llama-2's decoder: Sequence [Replace("\u2581" -> " "), ByteFallback, Fuse, Strip(" ", start, 0)]; the
 * steps may be a subset, in that order; or a Metaspace decoder ("\u2581" -> " ", the first token's leading
 * space dropped unless its prepend_scheme is never). Sets dec_strip and dec_bytes. */
static int sp_decoder_parse(Tokenizer* t, const cJSON* d, const char* name, char* err, size_t err_len) {
    const cJSON* list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
    const char* type = json_type(d);
    if (type && !strcmp(type, "Metaspace")) {
        const cJSON* r = cJSON_GetObjectItemCaseSensitive(d, "replacement");
        int prepend;
        if (!cJSON_IsString(r) || strcmp(r->valuestring, "\xe2\x96\x81") || meta_prepend_parse(d, &prepend)) {
            rr_fail(err, err_len, "%s: decoder Metaspace: only replacement \"\u2581\" with a prepend_scheme is supported",
                    name);
            return -1;
        }
        t->dec_strip = prepend != META_NEVER;
        return 0;
    }
    if (!type || strcmp(type, "Sequence") || !cJSON_IsArray(list)) {
        rr_fail(err, err_len, "%s: decoder %s: a tokenizer without a pre_tokenizer (SentencePiece-style) needs Llama-2's "
                "decoder, a Sequence of Replace(\"\u2581\" -> \" \"), ByteFallback, Fuse, Strip", name, type ? type : "missing");
        return -1;
    }
    static const char* order[4] = {"Replace", "ByteFallback", "Fuse", "Strip"};
    int at = 0, replace = 0;
    const cJSON* x;
    cJSON_ArrayForEach(x, list) {
        const char* k = json_type(x);
        while (at < 4 && (!k || strcmp(k, order[at]))) at++;
        if (at == 4) {
            rr_fail(err, err_len, "%s: decoder step %s is not supported here (expected Replace, ByteFallback, Fuse, Strip "
                    "in that order)", name, k ? k : "without a type");
            return -1;
        }
        if (at == 1) t->dec_bytes = 1;
        if (at == 0) {
            const cJSON* pat = cJSON_GetObjectItemCaseSensitive(x, "pattern");
            const cJSON* str = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
            const cJSON* content = cJSON_GetObjectItemCaseSensitive(x, "content");
            if (!cJSON_IsString(str) || strcmp(str->valuestring, "\xe2\x96\x81") || !cJSON_IsString(content) ||
                strcmp(content->valuestring, " ")) {
                rr_fail(err, err_len, "%s: decoder Replace: only \"\u2581\" -> \" \" is supported", name);
                return -1;
            }
            replace = 1;
        } else if (at == 3) {
            const cJSON* c = cJSON_GetObjectItemCaseSensitive(x, "content");
            const cJSON* start = cJSON_GetObjectItemCaseSensitive(x, "start");
            const cJSON* stop = cJSON_GetObjectItemCaseSensitive(x, "stop");
            if (!cJSON_IsString(c) || strcmp(c->valuestring, " ") || !cJSON_IsNumber(start) || start->valuedouble < 0 ||
                start->valuedouble > 16 || !cJSON_IsNumber(stop) || stop->valuedouble != 0) {
                rr_fail(err, err_len, "%s: decoder Strip: only content \" \", start 0..16, stop 0 is supported", name);
                return -1;
            }
            t->dec_strip = start->valueint;
        }
        at++;
    }
    if (!replace) {
        rr_fail(err, err_len, "%s: decoder Sequence has no Replace(\"\u2581\" -> \" \") step", name);
        return -1;
    }
    return 0;
}

static int added_parse(Tokenizer* t, const cJSON* list, const char* name, char* err, size_t err_len) {
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) {
        rr_fail(err, err_len, "%s: added_tokens must be an array", name);
        return -1;
    }
    t->added = callocCheck((size_t)cJSON_GetArraySize(list) + 1, sizeof(AddedToken));
    /* per kept entry: its index in the file and the id the file gives it (a token listed twice must
     * give one id: HF keeps the first listing's, while a reader of the file such as `export hf` might
     * take the last: refused rather than resolved two ways) */
    int* file_at = mallocCheck(((size_t)cJSON_GetArraySize(list) + 1) * sizeof(int));
    int* file_id = mallocCheck(((size_t)cJSON_GetArraySize(list) + 1) * sizeof(int));
    /* the kept entries by content, and the largest id given so far: each entry costs O(1), not a scan of those
     * before it (a file of 40,000 added tokens took 14 s to load, one of a million hours) */
    StrMap seen;
    strmap_init(&seen, (size_t)cJSON_GetArraySize(list));
    int32_t max_added = -1;
    int rc = 0;
    const cJSON* it;
    int i = 0;
    cJSON_ArrayForEach(it, list) {
        const cJSON* id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON* content = cJSON_GetObjectItemCaseSensitive(it, "content");
        AddedToken* a = &t->added[t->n_added];
        /* a whole number (1.5 was read as 1); the cast only once the range is known */
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 28) ||
            id->valuedouble != (double)(int)id->valuedouble || !cJSON_IsString(content)) {
            rr_fail(err, err_len, "%s: added_tokens[%d]: needs an integer \"id\" in [0, 2^28) and a string \"content\"",
                    name, i);
            rc = -1;
            break;
        }
        if (json_bool(it, "special", 0, &a->special) || json_bool(it, "single_word", 0, &a->single_word) ||
            json_bool(it, "lstrip", 0, &a->lstrip) || json_bool(it, "rstrip", 0, &a->rstrip) ||
            json_bool(it, "normalized", !a->special, &a->normalized)) {
            rr_fail(err, err_len, "%s: added_tokens[%d] \"%s\": special, single_word, lstrip, rstrip and normalized "
                    "must be true or false", name, i, content->valuestring);
            rc = -1;
            break;
        }
        i++;
        if (!content->valuestring[0]) continue; /* HF ignores empty added tokens */
        int dup = strmap_get(&seen, content->valuestring, strlen(content->valuestring));
        if (dup >= 0 && file_id[dup] != id->valueint) {
            rr_fail(err, err_len, "%s: added_tokens[%d] and added_tokens[%d] both list \"%s\", with ids %d and %d: a "
                    "token has one id (remove one of the two entries)", name, file_at[dup], i - 1, content->valuestring,
                    file_id[dup], id->valueint);
            rc = -1;
            break;
        }
        if (dup >= 0) { /* the same id twice: HF keeps the id and takes the later entry's options */
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
            int32_t model_size = (int32_t)t->vocab.n, max = max_added;
            a->id = max < 0 ? model_size : (max >= model_size || model_size == 0) ? max + 1 : model_size;
        }
        if (a->id > max_added) max_added = a->id;
        strmap_put(&seen, a->content, a->len, t->n_added);
        if (a->id != id->valueint)
            rr_warn("%s: added_tokens[%d] \"%s\" has id %d in the file but gets id %d, as Hugging Face gives it",
                    name, i - 1, a->content, id->valueint, a->id);
        file_at[t->n_added] = i - 1;
        file_id[t->n_added] = id->valueint;
        t->n_added++;
    }
    strmap_free(&seen);
    free(file_at);
    free(file_id);
    return rc;
}

/* Precompute what finds the added token at a position (leftmost-longest matching as HF's Aho-Corasick with
 * MatchKind::LeftmostLongest): a map from content to token, and per pass and first byte the lengths its tokens
 * have, longest first; a position then costs a lookup per length, whatever the number of tokens (a scan of every
 * token of that first byte, and an insertion sort of them here, made 100,000 added tokens starting with '<' cost
 * minutes to load and 2 ms per '<' of the text). */
static int size_desc_cmp(const void* a, const void* b) {
    size_t x = *(const size_t*)a, y = *(const size_t*)b;
    return (x < y) - (x > y);
}

static void added_index(Tokenizer* t) {
    strmap_init(&t->added_map, (size_t)t->n_added);
    for (int i = 0; i < t->n_added; i++) strmap_put(&t->added_map, t->added[i].content, t->added[i].len, i);
    int start[2 * 256 + 1] = {0}; /* bucket k = 256 p + first byte: its tokens' lengths at [start[k], start[k + 1]) */
    for (int i = 0; i < t->n_added; i++) start[256 * (t->added[i].normalized != 0) + (uint8_t)t->added[i].content[0] + 1]++;
    for (int k = 0; k < 2 * 256; k++) start[k + 1] += start[k];
    size_t* lens = mallocCheck(((size_t)t->n_added + 1) * sizeof *lens);
    int fill[2 * 256];
    memcpy(fill, start, sizeof fill);
    for (int i = 0; i < t->n_added; i++)
        lens[fill[256 * (t->added[i].normalized != 0) + (uint8_t)t->added[i].content[0]]++] = t->added[i].len;
    for (int k = 0; k < 2 * 256; k++) {
        int n = start[k + 1] - start[k], m = 0;
        if (!n) continue;
        size_t* b = lens + start[k];
        qsort(b, (size_t)n, sizeof *b, size_desc_cmp);
        size_t* v = mallocCheck(((size_t)n + 1) * sizeof *v);
        for (int i = 0; i < n; i++)
            if (i == 0 || b[i] != b[i - 1]) v[m++] = b[i];
        v[m] = 0;
        t->added_lens[k / 256][k % 256] = v;
    }
    free(lens);
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
    if (t->sp) { /* SentencePiece-style: its own settings (byte-level files hash as before) */
        PUT("sp", 2);
        PUT32(t->byte_fallback | t->dec_strip << 1 | t->dec_bytes << 8);
        for (int i = 0; i < t->n_steps; i++) PUT32(t->steps[i].prepend | t->steps[i].split << 2);
        PUT32(t->n_norm);
        for (int i = 0; i < t->n_norm; i++) {
            PUT32(t->norm[i].kind);
            PUT32(t->norm[i].from_len);
            if (t->norm[i].from_len) PUT(t->norm[i].from, t->norm[i].from_len);
            PUT32(t->norm[i].to_len);
            PUT(t->norm[i].to, t->norm[i].to_len);
        }
    }
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
        if (t->sp) { /* Llama-2's decoder: "<0xXX>" is that byte (ByteFallback), U+2581 is a space (Replace) */
            size_t n = strlen(s), o = 0;
            char* out = mallocCheck(n + 1);
            unsigned hex;
            int used = 0;
            if (t->dec_bytes && n == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' && sscanf(s + 3, "%2X%n", &hex, &used) == 1 &&
                used == 2) {
                out[o++] = (char)hex;
            } else {
                for (size_t i = 0; i < n;) {
                    if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
                        out[o++] = ' ';
                        i += 3;
                    } else {
                        out[o++] = s[i++];
                    }
                }
            }
            out[o] = 0;
            t->dec[id] = out;
            t->dec_len[id] = (uint32_t)o;
            continue;
        }
        size_t n = strlen(s), o = 0, i = 0;
        char* out = mallocCheck(n + 1);
        while (i < n) {
            uint32_t cp;
            int k = bpe_utf8_decode((const uint8_t*)s + i, n - i, &cp);
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
    size_t off = 0;
    cJSON* root = rr_json_parse_whole(json, len, &off);
    if (!root) {
        int line = 1;
        for (size_t i = 0; i < off; i++) line += json[i] == '\n';
        rr_fail(err, err_len, "%s:%d: not valid JSON (near byte %zu)", name, line, off);
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
        rr_fail(err, err_len, "%s: no \"model\" object; expected a Hugging Face tokenizer.json", name);
    } else if (((!pt || cJSON_IsNull(pt)) && ((norm && !cJSON_IsNull(norm)) || !cJSON_IsObject(dec) ||
                                             !json_type(dec) || strcmp(json_type(dec), "ByteLevel"))) ||
               (json_type(pt) && !strcmp(json_type(pt), "Metaspace"))) {
        /* SentencePiece-style BPE: no pre-tokenizer, the normalizer inserting the metaspaces (Llama-2), or the
         * Metaspace pre-tokenizer doing it (newer files, without a normalizer) */
        t->sp = 1;
        int meta = cJSON_IsObject(pt);
        if (meta && norm && !cJSON_IsNull(norm)) {
            rr_fail(err, err_len, "%s: a normalizer together with the Metaspace pre_tokenizer is not supported", name);
        } else if ((!meta || !metaspace_parse(t, pt, name, err, err_len)) && !normalizer_parse(t, norm, name, err, err_len) &&
                   !sp_decoder_parse(t, dec, name, err, err_len) &&
            !model_parse(t, model, name, err, err_len) &&
            !added_parse(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), name, err, err_len)) {
            ok = 1;
            int fb_all = 1;
            for (int b = 0; b < 256; b++) fb_all &= t->fb_id[b] >= 0;
            if (!(t->byte_fallback && fb_all) && t->unk_id < 0) {
                rr_fail(err, err_len, "%s: model: neither byte_fallback with all 256 \"<0xXX>\" tokens nor an unk_token: "
                        "characters outside the vocabulary could not be encoded", name);
                ok = 0;
            }
        }
    } else if (norm && !cJSON_IsNull(norm)) {
        rr_fail(err, err_len, "%s: normalizer %s is not supported with a pre_tokenizer (byte-level BPE has none; "
                "SentencePiece-style BPE has no pre_tokenizer)", name, json_type(norm) ? json_type(norm) : "?");
    } else if (!cJSON_IsObject(pt)) {
        rr_fail(err, err_len, "%s: pre_tokenizer is missing; expected ByteLevel (byte-level BPE)", name);
    } else if (!cJSON_IsObject(dec) || !json_type(dec) || strcmp(json_type(dec), "ByteLevel")) {
        rr_fail(err, err_len, "%s: decoder is %s, expected ByteLevel", name,
                cJSON_IsObject(dec) && json_type(dec) ? json_type(dec) : "missing");
    } else if (!model_parse(t, model, name, err, err_len) && !pretok_parse(t, pt, name, err, err_len) &&
               !added_parse(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), name, err, err_len)) {
        ok = 1;
        if (t->n_steps == 0 || t->steps[t->n_steps - 1].kind != STEP_BYTELEVEL) {
            rr_fail(err, err_len, "%s: the pre_tokenizer has no ByteLevel step; expected byte-level BPE", name);
            ok = 0;
        }
        for (int b = 0; ok && b < 256; b++)
            if (t->byte_id[b] < 0 && t->unk_id < 0) {
                /* HF would silently drop such bytes; we refuse, since the text could not round-trip */
                char u[3] = {0};
                bpe_byte_to_utf8((uint8_t)b, u);
                rr_fail(err, err_len,
                        "%s: model.vocab lacks the byte token \"%s\" (byte 0x%02X) and there is no unk_token", name,
                        u, b);
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
    char* json = rr_read_file_err(path, &n, RR_MAX_TOKENIZER, "a tokenizer.json file", err, err_len,
                                  "%s: cannot read the tokenizer: %s");
    if (!json) return NULL;
    Tokenizer* t = tokenizer_load_json(json, n, path, err, err_len);
    free(json);
    return t;
}

int tokenizer_vocab_size(const Tokenizer* t) { return t->n_ids; }

int tokenizer_n_merges(const Tokenizer* t) { return t->n_merges; }

const char* tokenizer_added(const Tokenizer* t, int i, int* id) {
    if (i < 0 || i >= t->n_added) return NULL;
    *id = t->added[i].id;
    return t->added[i].content;
}

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
