/* bpe_train.c — byte-level BPE trainer (see bpe_train.h for the vocabulary layout, the tie-break
 * and the algorithm). Words are split by the same code that encodes (tokenizer_pretokenize on a
 * tokenizer that has only the byte tokens and the special tokens), so what is learned is what the
 * encoder will see. */
#include "text/bpe_train.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "text/bpe_internal.h"
#include "text/tokenizer.h"

/* ---- word counts: byte string -> count, keys in chunked arenas that never move ------------------ */

typedef struct {
    const char* key;
    uint32_t len;
    int64_t count;
    uint64_t h;
} WordSlot;

#define ARENA_CHUNK (1u << 20)

struct BpeTrainer {
    Tokenizer* base; /* byte tokens + specials: used only to split text */
    char** specials;
    int n_specials;
    WordSlot* slots;
    size_t cap, n_unique;
    long long n_words;
    char** chunks; /* key arenas */
    int n_chunks;
    size_t chunk_used;
};

static uint64_t word_hash(const char* s, size_t n) {
    uint64_t h = rr_fnv1a64(s, n);
    return h ^ (h >> 31);
}

static WordSlot* word_find(WordSlot* slots, size_t cap, const char* s, size_t n, uint64_t h) {
    size_t i = h & (cap - 1);
    while (slots[i].key && !(slots[i].h == h && slots[i].len == n && !memcmp(slots[i].key, s, n)))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static const char* arena_copy(BpeTrainer* tr, const char* s, size_t n) {
    if (tr->n_chunks == 0 || tr->chunk_used + n > ARENA_CHUNK) {
        size_t size = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        tr->chunks = reallocCheck(tr->chunks, (size_t)(tr->n_chunks + 1) * sizeof(char*));
        tr->chunks[tr->n_chunks++] = mallocCheck(size);
        tr->chunk_used = 0;
    }
    char* p = tr->chunks[tr->n_chunks - 1] + tr->chunk_used;
    memcpy(p, s, n);
    tr->chunk_used += n;
    return p;
}

static void count_piece(void* ctx, const char* s, size_t n, int added_id) {
    BpeTrainer* tr = ctx;
    if (added_id >= 0) return; /* special tokens are not learned from */
    tr->n_words++;
    if ((tr->n_unique + 1) * 2 > tr->cap) {
        size_t cap = tr->cap * 2;
        WordSlot* slots = callocCheck(cap, sizeof(WordSlot));
        for (size_t i = 0; i < tr->cap; i++)
            if (tr->slots[i].key)
                *word_find(slots, cap, tr->slots[i].key, tr->slots[i].len, tr->slots[i].h) = tr->slots[i];
        free(tr->slots);
        tr->slots = slots;
        tr->cap = cap;
    }
    uint64_t h = word_hash(s, n);
    WordSlot* w = word_find(tr->slots, tr->cap, s, n, h);
    if (!w->key) {
        w->key = arena_copy(tr, s, n);
        w->len = (uint32_t)n;
        w->h = h;
        tr->n_unique++;
    }
    w->count++;
}

/* ---- the tokenizer.json writer ---------------------------------------------------------------- */

static char* mapped_str(const char* bytes, size_t n) {
    char* out = mallocCheck(2 * n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)bpe_byte_to_utf8((uint8_t)bytes[i], out + o);
    out[o] = 0;
    return out;
}

/* tok_bytes[id] / tok_len[id]: the bytes of tokens 0..n_model-1; merges[2*r], merges[2*r+1]: ids. */
static char* tokenizer_json_write(char* const* tok_bytes, const uint32_t* tok_len, int n_model, const int32_t* merges,
                                  int n_merges, char* const* specials, int n_specials) {
    cJSON* root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON* added = cJSON_AddArrayToObject(root, "added_tokens");
    for (int i = 0; i < n_specials; i++) {
        cJSON* a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", n_model + i);
        cJSON_AddStringToObject(a, "content", specials[i]);
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", 1);
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNullToObject(root, "normalizer");
    cJSON* pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "ByteLevel");
    cJSON_AddBoolToObject(pt, "add_prefix_space", 0);
    cJSON_AddBoolToObject(pt, "trim_offsets", 1);
    cJSON_AddBoolToObject(pt, "use_regex", 1);
    cJSON_AddNullToObject(root, "post_processor");
    cJSON* dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON_AddBoolToObject(dec, "add_prefix_space", 1);
    cJSON_AddBoolToObject(dec, "trim_offsets", 1);
    cJSON_AddBoolToObject(dec, "use_regex", 1);
    cJSON* model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON* vocab = cJSON_AddObjectToObject(model, "vocab");
    char** mapped = mallocCheck((size_t)n_model * sizeof(char*));
    for (int id = 0; id < n_model; id++) {
        mapped[id] = mapped_str(tok_bytes[id], tok_len[id]);
        cJSON_AddNumberToObject(vocab, mapped[id], id);
    }
    for (int i = 0; i < n_specials; i++) cJSON_AddNumberToObject(vocab, specials[i], n_model + i);
    /* the "a b" form: byte-level token strings never contain a space (it is spelled U+0120), and
     * every version of Hugging Face tokenizers reads it */
    cJSON* ml = cJSON_AddArrayToObject(model, "merges");
    for (int r = 0; r < n_merges; r++) {
        const char *a = mapped[merges[2 * r]], *b = mapped[merges[2 * r + 1]];
        size_t na = strlen(a), nb = strlen(b);
        char* s = mallocCheck(na + nb + 2);
        memcpy(s, a, na);
        s[na] = ' ';
        memcpy(s + na + 1, b, nb + 1);
        cJSON_AddItemToArray(ml, cJSON_CreateString(s));
        free(s);
    }
    char* out = cJSON_Print(root);
    if (!out) rr_die("tokenizer train: out of memory printing the tokenizer JSON");
    cJSON_Delete(root);
    for (int id = 0; id < n_model; id++) free(mapped[id]);
    free(mapped);
    return out;
}

/* ---- trainer ------------------------------------------------------------------------------------ */

BpeTrainer* bpe_trainer_new(const char* const* extra, int n_extra, char* err, size_t err_len) {
    static const char* defaults[] = BPE_TRAIN_DEFAULT_SPECIALS_LIST;
    int n_def = (int)(sizeof defaults / sizeof defaults[0]);
    BpeTrainer* tr = callocCheck(1, sizeof(BpeTrainer));
    tr->n_specials = n_def + n_extra;
    tr->specials = callocCheck((size_t)tr->n_specials, sizeof(char*));
    for (int i = 0; i < tr->n_specials; i++) {
        const char* s = i < n_def ? defaults[i] : extra[i - n_def];
        int dup = !s[0];
        for (int j = 0; j < i; j++) dup |= !strcmp(tr->specials[j], s);
        if (dup) {
            snprintf(err, err_len, "special token \"%s\" is %s", s, s[0] ? "given twice (or is a default)" : "empty");
            bpe_trainer_free(tr);
            return NULL;
        }
        tr->specials[i] = strdup(s);
    }
    /* the splitting tokenizer: bytes + specials */
    char* tok_bytes[256];
    uint32_t tok_len[256];
    char bytes[256];
    for (int b = 0; b < 256; b++) {
        bytes[b] = (char)b;
        tok_bytes[b] = &bytes[b];
        tok_len[b] = 1;
    }
    char* json = tokenizer_json_write(tok_bytes, tok_len, 256, NULL, 0, tr->specials, tr->n_specials);
    tr->base = tokenizer_load_json(json, strlen(json), "(trainer)", err, err_len);
    free(json);
    if (!tr->base) {
        bpe_trainer_free(tr);
        return NULL;
    }
    tr->cap = 1 << 12;
    tr->slots = callocCheck(tr->cap, sizeof(WordSlot));
    return tr;
}

void bpe_trainer_free(BpeTrainer* tr) {
    if (!tr) return;
    tokenizer_free(tr->base);
    for (int i = 0; i < tr->n_specials; i++) free(tr->specials[i]);
    free(tr->specials);
    free(tr->slots);
    for (int i = 0; i < tr->n_chunks; i++) free(tr->chunks[i]);
    free(tr->chunks);
    free(tr);
}

void bpe_trainer_feed(BpeTrainer* tr, const char* text, size_t len) {
    tokenizer_pretokenize(tr->base, text, len, count_piece, tr);
}

void bpe_trainer_counts(const BpeTrainer* tr, long long* words, long long* unique) {
    *words = tr->n_words;
    *unique = (long long)tr->n_unique;
}

/* pair statistics */
typedef struct {
    int32_t a, b;
    int64_t count;
    int32_t* where; /* words that contained the pair when it was counted (may be stale or repeated) */
    int32_t n_where, cap_where;
    int32_t touched; /* merge step that last raised the count (to push it on the heap once) */
} Pair;

typedef struct {
    uint64_t* keys; /* UINT64_MAX: empty */
    int32_t* idx;
    size_t cap, n;
    Pair* pairs;
    size_t n_pairs, cap_pairs;
} PairTable;

static uint64_t pkey(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
static size_t pslot(uint64_t k, size_t cap) {
    uint64_t h = k * 0x9E3779B97F4A7C15ULL;
    return (h ^ (h >> 31)) & (cap - 1);
}

static void ptable_grow(PairTable* t) {
    size_t cap = t->cap ? t->cap * 2 : 1 << 14;
    uint64_t* keys = mallocCheck(cap * sizeof(uint64_t));
    int32_t* idx = mallocCheck(cap * sizeof(int32_t));
    for (size_t i = 0; i < cap; i++) keys[i] = UINT64_MAX;
    for (size_t i = 0; i < t->cap; i++)
        if (t->keys[i] != UINT64_MAX) {
            size_t j = pslot(t->keys[i], cap);
            while (keys[j] != UINT64_MAX) j = (j + 1) & (cap - 1);
            keys[j] = t->keys[i];
            idx[j] = t->idx[i];
        }
    free(t->keys);
    free(t->idx);
    t->keys = keys;
    t->idx = idx;
    t->cap = cap;
}

/* The pair's index, created with count 0 if absent. */
static int32_t ptable_get(PairTable* t, int32_t a, int32_t b) {
    if ((t->n + 1) * 2 > t->cap) ptable_grow(t);
    uint64_t k = pkey(a, b);
    size_t j = pslot(k, t->cap);
    while (t->keys[j] != UINT64_MAX && t->keys[j] != k) j = (j + 1) & (t->cap - 1);
    if (t->keys[j] == k) return t->idx[j];
    if (t->n_pairs == t->cap_pairs) {
        t->cap_pairs = t->cap_pairs ? 2 * t->cap_pairs : 1 << 14;
        t->pairs = reallocCheck(t->pairs, t->cap_pairs * sizeof(Pair));
    }
    Pair* p = &t->pairs[t->n_pairs];
    memset(p, 0, sizeof *p);
    p->a = a;
    p->b = b;
    p->touched = -1;
    t->keys[j] = k;
    t->idx[j] = (int32_t)t->n_pairs;
    t->n++;
    return (int32_t)t->n_pairs++;
}

static void pair_where_add(Pair* p, int32_t w) {
    if (p->n_where > 0 && p->where[p->n_where - 1] == w) return;
    if (p->n_where == p->cap_where) {
        p->cap_where = p->cap_where ? 2 * p->cap_where : 4;
        p->where = reallocCheck(p->where, (size_t)p->cap_where * sizeof(int32_t));
    }
    p->where[p->n_where++] = w;
}

/* max-heap on (count desc, a asc, b asc) */
typedef struct {
    int64_t count;
    int32_t a, b;
} HeapItem;
static int heap_above(const HeapItem* x, const HeapItem* y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}
typedef struct {
    HeapItem* v;
    size_t n, cap;
} Heap;
static void hpush(Heap* h, HeapItem it) {
    if (h->n == h->cap) h->v = reallocCheck(h->v, (h->cap = h->cap ? 2 * h->cap : 1 << 14) * sizeof(HeapItem));
    size_t i = h->n++;
    while (i > 0 && heap_above(&it, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = it;
}
static HeapItem hpop(Heap* h) {
    HeapItem top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const HeapItem* best = &last;
        if (l < h->n && heap_above(&h->v[l], best)) m = l, best = &h->v[l];
        if (r < h->n && heap_above(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

char* bpe_trainer_finish(BpeTrainer* tr, int vocab_size, int min_frequency, int verbose, int* n_merges_out, char* err,
                         size_t err_len) {
    int min_vocab = 256 + tr->n_specials;
    if (vocab_size < min_vocab) {
        snprintf(err, err_len, "--vocab %d is too small: the vocabulary needs at least %d tokens (256 bytes + %d special)",
                 vocab_size, min_vocab, tr->n_specials);
        return NULL;
    }
    if (min_frequency < 1) min_frequency = 1;
    int target = vocab_size - min_vocab;
    double t0 = rr_now();

    /* words as symbol arrays (byte ids = byte values), in one buffer; merging only shrinks them */
    int32_t n_w = (int32_t)tr->n_unique;
    size_t total = 0;
    for (size_t i = 0; i < tr->cap; i++) total += tr->slots[i].key ? tr->slots[i].len : 0;
    int32_t* sym = mallocCheck((total + 1) * sizeof(int32_t));
    size_t* off = mallocCheck(((size_t)n_w + 1) * sizeof(size_t));
    int32_t* len = mallocCheck(((size_t)n_w + 1) * sizeof(int32_t));
    int64_t* cnt = mallocCheck(((size_t)n_w + 1) * sizeof(int64_t));
    int32_t* seen = mallocCheck(((size_t)n_w + 1) * sizeof(int32_t));
    /* (the order of words does not matter: counts are sums and the tie-break is on ids) */
    WordSlot** order = mallocCheck(((size_t)n_w + 1) * sizeof(WordSlot*));
    int32_t w = 0;
    for (size_t i = 0; i < tr->cap; i++)
        if (tr->slots[i].key) order[w++] = &tr->slots[i];
    size_t o = 0;
    for (w = 0; w < n_w; w++) {
        const WordSlot* s = order[w];
        off[w] = o;
        len[w] = (int32_t)s->len;
        cnt[w] = s->count;
        seen[w] = -1;
        for (uint32_t i = 0; i < s->len; i++) sym[o++] = (uint8_t)s->key[i];
    }
    free(order);

    PairTable pt = {0};
    for (w = 0; w < n_w; w++)
        for (int32_t i = 0; i + 1 < len[w]; i++) {
            int32_t p = ptable_get(&pt, sym[off[w] + i], sym[off[w] + i + 1]);
            pt.pairs[p].count += cnt[w];
            pair_where_add(&pt.pairs[p], w);
        }
    Heap heap = {0};
    for (size_t p = 0; p < pt.n_pairs; p++) hpush(&heap, (HeapItem){pt.pairs[p].count, pt.pairs[p].a, pt.pairs[p].b});

    /* token bytes, for the JSON */
    int n_model_cap = 256 + target;
    char** tok_bytes = mallocCheck((size_t)n_model_cap * sizeof(char*));
    uint32_t* tok_len = mallocCheck((size_t)n_model_cap * sizeof(uint32_t));
    for (int b = 0; b < 256; b++) {
        tok_bytes[b] = mallocCheck(1);
        tok_bytes[b][0] = (char)b;
        tok_len[b] = 1;
    }
    int32_t* merges = mallocCheck(((size_t)target + 1) * 2 * sizeof(int32_t));
    int n_merges = 0;
    int64_t last_count = 0;
    double t_report = rr_now();
    int32_t* touched = NULL;
    size_t n_touched = 0, cap_touched = 0;

    while (n_merges < target && heap.n > 0) {
        HeapItem top = hpop(&heap);
        int32_t pi = ptable_get(&pt, top.a, top.b);
        int64_t actual = pt.pairs[pi].count;
        if (actual != top.count) { /* stale: counts only fall for existing pairs; requeue the true count */
            if (actual > 0) hpush(&heap, (HeapItem){actual, top.a, top.b});
            continue;
        }
        if (actual < min_frequency) break;
        int32_t a = top.a, b = top.b, c = 256 + n_merges;
        merges[2 * n_merges] = a;
        merges[2 * n_merges + 1] = b;
        tok_len[c] = tok_len[a] + tok_len[b];
        tok_bytes[c] = mallocCheck(tok_len[c]);
        memcpy(tok_bytes[c], tok_bytes[a], tok_len[a]);
        memcpy(tok_bytes[c] + tok_len[a], tok_bytes[b], tok_len[b]);
        last_count = actual;
        /* revisit the words that contained (a, b); pt.pairs may move as pairs are added, so keep
         * this pair's word list by value (it is never appended to during its own merge) */
        int32_t* where = pt.pairs[pi].where;
        int32_t n_where = pt.pairs[pi].n_where;
        n_touched = 0;
        for (int32_t k = 0; k < n_where; k++) {
            int32_t wi = where[k];
            if (seen[wi] == n_merges) continue;
            seen[wi] = n_merges;
            int32_t* s = sym + off[wi];
            int32_t n = len[wi], found = 0;
            for (int32_t i = 0; i + 1 < n && !found; i++) found = s[i] == a && s[i + 1] == b;
            if (!found) continue;
            for (int32_t i = 0; i + 1 < n; i++) pt.pairs[ptable_get(&pt, s[i], s[i + 1])].count -= cnt[wi];
            int32_t m = 0;
            for (int32_t i = 0; i < n;) {
                if (i + 1 < n && s[i] == a && s[i + 1] == b) {
                    s[m++] = c;
                    i += 2;
                } else
                    s[m++] = s[i++];
            }
            len[wi] = n = m;
            for (int32_t i = 0; i + 1 < n; i++) {
                int32_t q = ptable_get(&pt, s[i], s[i + 1]);
                pt.pairs[q].count += cnt[wi];
                if (s[i] == c || s[i + 1] == c) {
                    pair_where_add(&pt.pairs[q], wi);
                    if (pt.pairs[q].touched != n_merges) {
                        pt.pairs[q].touched = n_merges;
                        if (n_touched == cap_touched) {
                            cap_touched = cap_touched ? 2 * cap_touched : 1024;
                            touched = reallocCheck(touched, cap_touched * sizeof(int32_t));
                        }
                        touched[n_touched++] = q;
                    }
                }
            }
        }
        for (size_t k = 0; k < n_touched; k++) {
            const Pair* q = &pt.pairs[touched[k]];
            if (q->count > 0) hpush(&heap, (HeapItem){q->count, q->a, q->b});
        }
        /* this pair is gone from every word; free its word list */
        free(pt.pairs[pi].where);
        pt.pairs[pi].where = NULL;
        pt.pairs[pi].n_where = pt.pairs[pi].cap_where = 0;
        n_merges++;
        if (verbose && rr_now() - t_report > 1.0) {
            t_report = rr_now();
            fprintf(stderr, "tokenizer train: %d / %d merges, last pair seen %lld times, %.1f s\n", n_merges, target,
                    (long long)last_count, t_report - t0);
        }
    }
    if (verbose)
        fprintf(stderr, "tokenizer train: %d merges in %.2f s (last pair seen %lld times)\n", n_merges, rr_now() - t0,
                (long long)last_count);

    char* json = tokenizer_json_write(tok_bytes, tok_len, 256 + n_merges, merges, n_merges, tr->specials, tr->n_specials);
    for (int id = 0; id < 256 + n_merges; id++) free(tok_bytes[id]);
    free(tok_bytes);
    free(tok_len);
    free(merges);
    free(touched);
    free(heap.v);
    for (size_t p = 0; p < pt.n_pairs; p++) free(pt.pairs[p].where);
    free(pt.pairs);
    free(pt.keys);
    free(pt.idx);
    free(sym);
    free(off);
    free(len);
    free(cnt);
    free(seen);
    *n_merges_out = n_merges;
    return json;
}
