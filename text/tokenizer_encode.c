/* tokenizer_encode.c — encoding and decoding with a loaded tokenizer (see tokenizer.c for loading).
 *
 * Encoding follows the HF Rust implementation step for step:
 *   1. added tokens are cut out literally (leftmost-longest; first the tokens with normalized=false,
 *      then those with normalized=true in the remaining pieces; single_word/lstrip/rstrip as HF);
 *   2. each remaining piece goes through the pre-tokenizer: optional Split(Regex, Isolated) steps,
 *      then ByteLevel (prefix space if add_prefix_space and the piece does not start with ' ';
 *      the GPT-2 split pattern if use_regex); empty pieces are dropped;
 *   3. BPE on each pre-token: its bytes become the byte symbols, then the pair of lowest merge rank
 *      (leftmost on ties) is merged until no pair has a rank (HF's priority-queue loop).
 *
 * Invalid UTF-8 (which HF never sees: Rust strings are valid by construction): in a regex step the
 * text is cut into maximal valid runs and maximal runs of invalid bytes; valid runs are split by the
 * regex, each invalid run is one pre-token of its own. BPE works on bytes, so every byte, valid or
 * not, is encoded and decodes back to itself.
 *
 * SentencePiece-style BPE (Llama-2's file; t->sp): between steps 1's two passes each piece goes through
 * the normalizer (Prepend "\u2581" to a non-empty piece, Replace " " by "\u2581"), as HF's
 * AddedVocabulary::extract_and_normalize does; there is no pre-tokenizer, so a piece is one word; its
 * initial BPE symbols are its characters, and a character the vocabulary lacks becomes the "<0xXX>"
 * tokens of its bytes (byte_fallback; without it, or for a missing byte token, unk, fused if fuse_unk).
 * Invalid UTF-8 bytes take the byte tokens too, so they round-trip. Decoding maps "<0xXX>" to its byte
 * and "\u2581" to a space, then strips the decoder's leading spaces (Llama-2: one), as HF's
 * Replace, ByteFallback, Fuse, Strip chain.
 *
 * Decoding is HF's ByteLevel decoder: each token's characters are mapped back to bytes; a token with
 * a character outside the byte map (an added token such as "<| end |>") contributes its raw UTF-8.
 * Unlike HF (which finishes with a lossy UTF-8 conversion) the bytes are returned unchanged, so
 * decode(encode(x)) == x for any bytes x when add_prefix_space is false.
 *
 * Thread safety: after load a Tokenizer is read-only except for the word cache, which a mutex
 * guards; encode and decode may be called from many threads at once. */
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "text/bpe_internal.h"
#include "text/tokenizer_impl.h"

/* Unicode White_Space (what Oniguruma's and Rust regex's \s match). */
static int is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Byte length of the white-space character starting at s, 0 if none. */
static size_t ws_at(const char* s, size_t n) {
    uint32_t cp;
    int k = bpe_utf8_decode((const uint8_t*)s, n, &cp);
    return (k && is_white_space(cp)) ? (size_t)k : 0;
}
/* Byte length of the white-space character ending at s[n-1], 0 if none. */
static size_t ws_before(const char* s, size_t n) {
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        uint32_t cp;
        if (bpe_utf8_decode((const uint8_t*)s + n - k, k, &cp) == (int)k) return is_white_space(cp) ? k : 0;
    }
    return 0;
}

/* ---- splitting: added tokens, then the pre-tokenizer ------------------------------------------ */

typedef struct {
    TokenizerPieceFn fn;
    void* ctx;
    pcre2_match_data* md;
    char* scratch[MAX_STEPS]; /* prefix-space copies, one per step depth */
    size_t scratch_cap[MAX_STEPS];
    char* norm[2];            /* the normalizer's output and its work copy */
    size_t norm_cap[2];
    int cont;                 /* tokenizer_encode_continue: 1 the text's first piece continues text (no Prepend),
                                 2 the text follows an added token; 0: the text starts the sequence */
    const char* text;         /* the whole text (its first piece is the one at text) */
} SplitCtx;

static void pretok_step(const Tokenizer* t, SplitCtx* c, int k, const char* s, size_t n);

/* Metaspace (step k): ' ' -> the replacement, which is prepended (always: unless the piece starts with it;
 * first: also only to the piece that starts the text, as HF's offsets_original().0 == 0; never), then the
 * piece is cut before each replacement (split) or passed on whole. A piece that continues text
 * (tokenizer_encode_continue) gets no prepend. */
static void metaspace_step(const Tokenizer* t, SplitCtx* c, int k, const char* s, size_t n) {
    const PretokStep* st = &t->steps[k];
    const char* r = st->pattern;
    size_t rl = strlen(r), cap = n * rl + rl + 64;
    if (c->scratch_cap[k] < cap) c->scratch[k] = reallocCheck(c->scratch[k], c->scratch_cap[k] = 2 * cap);
    char* out = c->scratch[k];
    size_t o = 0;
    int at_start = s == c->text && c->cont == 0;
    int starts = (n >= 1 && s[0] == ' ') || (n >= rl && !memcmp(s, r, rl)); /* HF checks after the replace */
    if ((st->prepend == META_ALWAYS && !(c->cont == 1 && s == c->text)) || (st->prepend == META_FIRST && at_start))
        if (!starts) memcpy(out, r, rl), o = rl;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') memcpy(out + o, r, rl), o += rl;
        else out[o++] = s[i];
    }
    if (!st->split) {
        pretok_step(t, c, k + 1, out, o);
        return;
    }
    size_t last = 0;
    for (size_t i = 1; i + rl <= o; i++)
        if (!memcmp(out + i, r, rl)) { /* MergedWithNext: the replacement starts the next piece */
            pretok_step(t, c, k + 1, out + last, i - last);
            last = i;
            i += rl - 1;
        }
    pretok_step(t, c, k + 1, out + last, o - last);
}

/* The normalizer (SentencePiece-style) of s into c->norm[0]; returns its length. skip_prepend: leave out the
 * Prepend steps (a piece that continues earlier text). */
static size_t normalize(const Tokenizer* t, SplitCtx* c, const char* s, size_t n, int skip_prepend) {
    size_t len = n;
    int cur = 0;
    for (int k = 0; k < 2; k++)
        if (c->norm_cap[k] < 2 * n + 64) c->norm[k] = reallocCheck(c->norm[k], c->norm_cap[k] = 2 * n + 64);
    memcpy(c->norm[0], s, n);
    for (int i = 0; i < t->n_norm; i++) {
        const NormStep* st = &t->norm[i];
        const char* in = c->norm[cur];
        size_t out_max = st->kind == NORM_PREPEND ? len + st->to_len
                                                  : len + (st->to_len > st->from_len ? len / st->from_len * (st->to_len - st->from_len) : 0);
        if (c->norm_cap[1 - cur] < out_max + 1)
            c->norm[1 - cur] = reallocCheck(c->norm[1 - cur], c->norm_cap[1 - cur] = 2 * out_max + 64);
        char* out = c->norm[1 - cur];
        size_t o = 0;
        if (st->kind == NORM_PREPEND) {
            if (len == 0 || skip_prepend) continue; /* HF prepends to non-empty text only */
            memcpy(out, st->to, st->to_len);
            memcpy(out + st->to_len, in, len);
            o = st->to_len + len;
        } else {
            for (size_t j = 0; j < len;) {
                if (j + st->from_len <= len && !memcmp(in + j, st->from, st->from_len)) {
                    memcpy(out + o, st->to, st->to_len);
                    o += st->to_len;
                    j += st->from_len;
                } else {
                    out[o++] = in[j++];
                }
            }
        }
        len = o;
        cur = 1 - cur;
    }
    if (cur == 1) { /* the result lives in norm[1]: swap so that norm[0] holds it */
        char* x = c->norm[0];
        size_t xc = c->norm_cap[0];
        c->norm[0] = c->norm[1], c->norm_cap[0] = c->norm_cap[1];
        c->norm[1] = x, c->norm_cap[1] = xc;
    }
    return len;
}

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
                int len = bpe_utf8_decode((const uint8_t*)run + pos, v - pos, &cp);
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
    if (st->kind == STEP_METASPACE) {
        metaspace_step(t, c, k, s, n);
        return;
    }
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

static void added_split(const Tokenizer* t, SplitCtx* c, int p, const char* s, size_t n);
static void added_split_normalized(const Tokenizer* t, SplitCtx* c, const char* s, size_t n);

static int is_word_char_at(const Tokenizer* t, const char* s, size_t n, pcre2_match_data* md) {
    return n > 0 && pcre2_match(t->word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED, md, NULL) > 0;
}

/* Find added tokens of pass p (0: normalized=false, 1: normalized=true) in s; pass 0's gaps go to
 * pass 1, pass 1's gaps to the pre-tokenizer. */
static void added_split(const Tokenizer* t, SplitCtx* c, int p, const char* s, size_t n) {
    size_t i = 0, start_offset = 0;
    while (i < n) {
        const size_t* len = t->added_lens[p][(uint8_t)s[i]];
        int hit = -1;
        for (; len && *len; len++) { /* the longest of this pass that the text holds here (contents are distinct) */
            int32_t k = *len <= n - i ? strmap_get(&t->added_map, s + i, *len) : -1;
            if (k >= 0 && (t->added[k].normalized != 0) == p) {
                hit = k;
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
            int after = stop < n ? bpe_utf8_decode((const uint8_t*)s + stop, n - stop, &cp) : 0;
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
            if (p == 0) added_split_normalized(t, c, s + start_offset, start - start_offset);
            else pretok_step(t, c, 0, s + start_offset, start - start_offset);
        }
        c->fn(c->ctx, s + start, stop - start, a->id);
        start_offset = stop;
    }
    if (start_offset < n) {
        if (p == 0) added_split_normalized(t, c, s + start_offset, n - start_offset);
        else pretok_step(t, c, 0, s + start_offset, n - start_offset);
    }
}

/* A gap of pass 0: normalized (when the tokenizer has a normalizer), then pass 1 on the result. The
 * normalized text is copied out of the shared buffer first: pass 1 hands pieces of it on and the
 * buffer is reused by the next gap only after this one is done. */
static void added_split_normalized(const Tokenizer* t, SplitCtx* c, const char* s, size_t n) {
    if (t->n_norm == 0) {
        added_split(t, c, 1, s, n);
        return;
    }
    size_t len = normalize(t, c, s, n, c->cont == 1 && s == c->text);
    char* copy = mallocCheck(len + 1);
    memcpy(copy, c->norm[0], len);
    added_split(t, c, 1, copy, len);
    free(copy);
}

static void pretokenize(const Tokenizer* t, const char* text, size_t len, int cont, TokenizerPieceFn fn, void* ctx) {
    SplitCtx c = {.fn = fn, .ctx = ctx, .cont = cont, .text = text};
    c.md = pcre2_match_data_create(4, NULL);
    if (!c.md) rr_die("tokenizer: out of memory (pcre2_match_data_create)");
    added_split(t, &c, 0, text, len);
    pcre2_match_data_free(c.md);
    for (int k = 0; k < MAX_STEPS; k++) free(c.scratch[k]);
    free(c.norm[0]);
    free(c.norm[1]);
}

void tokenizer_pretokenize(const Tokenizer* t, const char* text, size_t len, TokenizerPieceFn fn, void* ctx) {
    pretokenize(t, text, len, 0, fn, ctx);
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

/* A symbol that is not in the vocabulary: unk, fused with an unk just before it when fuse_unk (HF). */
static int32_t unk_symbol(const Tokenizer* t, const EncodeCtx* e, int32_t ns) {
    if (t->fuse_unk && ns > 0 && e->sym[ns - 1] == t->unk_id) return -2; /* fused: no new symbol */
    return t->unk_id;
}

/* SentencePiece-style initial symbols: one per character of the vocabulary; other characters (and
 * invalid UTF-8 bytes) become their bytes' "<0xXX>" tokens (byte_fallback), else unk. Returns the count. */
static int32_t sp_symbols(const Tokenizer* t, EncodeCtx* e, const uint8_t* w, size_t n) {
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = bpe_utf8_decode(w + i, n - i, &cp);
        size_t len = k > 0 ? (size_t)k : 1;
        int32_t id = k > 0 ? strmap_get(&t->vocab, (const char*)w + i, len) : -1;
        if (id >= 0) {
            e->sym[ns++] = id;
        } else {
            int fb = t->byte_fallback;
            for (size_t j = 0; fb && j < len; j++) fb = t->fb_id[w[i + j]] >= 0;
            if (fb) {
                for (size_t j = 0; j < len; j++) e->sym[ns++] = t->fb_id[w[i + j]];
            } else {
                id = unk_symbol(t, e, ns);
                if (id != -2) e->sym[ns++] = id;
            }
        }
        i += len;
    }
    return ns;
}

/* BPE-encode one pre-token of n bytes, appending its ids. */
static void bpe_word(const Tokenizer* t, EncodeCtx* e, const uint8_t* w, size_t n) {
    if (t->ignore_merges && t->sp) { /* the word itself as a token (its characters as they are) */
        int32_t id = strmap_get(&t->vocab, (const char*)w, n);
        if (id >= 0) {
            out_push(e, id);
            return;
        }
    } else if (t->ignore_merges) { /* a word that is itself a token is taken whole (HF, ignore_merges) */
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
    if (t->sp) ns = sp_symbols(t, e, w, n);
    else
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

static int encode(const Tokenizer* t, const char* text, size_t len, int cont, int32_t** ids) {
    EncodeCtx e = {.t = t};
    pretokenize(t, text, len, cont, encode_piece, &e);
    free(e.sym);
    free(e.prev);
    free(e.next);
    free(e.heap);
    free(e.mapped);
    if (!e.ids) e.ids = mallocCheck(sizeof(int32_t)); /* a valid pointer even for no ids */
    *ids = e.ids;
    return (int)e.n;
}

int tokenizer_encode(const Tokenizer* t, const char* text, size_t len, int32_t** ids) { return encode(t, text, len, 0, ids); }

int tokenizer_encode_continue(const Tokenizer* t, const char* text, size_t len, int prev_id, int32_t** ids) {
    /* HF normalizes each piece between added tokens on its own: a piece after an added token (or at the
     * start) gets the Prepend, one that continues ordinary text does not */
    int cont = prev_id < 0 ? 0 : prev_id < t->n_ids && t->added_of_id[prev_id] >= 0 ? 2 : 1;
    return encode(t, text, len, cont, ids);
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
    size_t cut = 0; /* SentencePiece-style: the decoder's Strip of leading spaces */
    while (t->sp && cut < (size_t)t->dec_strip && cut < o && out[cut] == ' ') cut++;
    if (cut) memmove(out, out + cut, o - cut);
    o -= cut;
    out[o] = 0;
    if (len) *len = o;
    return out;
}
