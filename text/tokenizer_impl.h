/* tokenizer_impl.h — the Tokenizer's layout and the small hash tables it uses, shared by
 * tokenizer.c (load, hash, accessors) and tokenizer_encode.c (split, BPE, encode, decode). Private
 * to text/. */
#ifndef RRFP_TOKENIZER_IMPL_H
#define RRFP_TOKENIZER_IMPL_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "text/tokenizer.h"

/* ---- small hash tables ------------------------------------------------------------------------ */

static inline uint64_t hash_bytes(const void* p, size_t n) {
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

static inline void strmap_init(StrMap* m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap <<= 1;
    m->slots = callocCheck(cap, sizeof(StrSlot));
    m->cap = cap;
    m->n = 0;
}
static inline void strmap_free(StrMap* m) { free(m->slots); }
static inline StrSlot* strmap_find(const StrMap* m, const char* key, size_t len, uint64_t h) {
    size_t i = h & (m->cap - 1);
    for (;;) {
        StrSlot* s = &m->slots[i];
        if (!s->key) return s;
        if (s->h == h && s->len == len && !memcmp(s->key, key, len)) return s;
        i = (i + 1) & (m->cap - 1);
    }
}
static inline int32_t strmap_get(const StrMap* m, const char* key, size_t len) {
    StrSlot* s = strmap_find(m, key, len, hash_bytes(key, len));
    return s->key ? s->val : -1;
}
/* Returns 0 if inserted, 1 if the key was there already (value left unchanged). */
static inline int strmap_put(StrMap* m, const char* key, size_t len, int32_t val) {
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

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
static inline size_t pair_slot(uint64_t key, size_t cap) {
    uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    return (h ^ (h >> 29)) & (cap - 1);
}
static inline void pairmap_init(PairMap* m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap <<= 1;
    m->slots = mallocCheck(cap * sizeof(PairSlot));
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->cap = cap;
}
static inline PairSlot* pairmap_find(const PairMap* m, uint64_t key) {
    size_t i = pair_slot(key, m->cap);
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
    return &m->slots[i];
}

/* ---- the tokenizer ---------------------------------------------------------------------------- */

typedef struct {
    char* content;
    size_t len;
    int32_t id;
    int special, single_word, lstrip, rstrip, normalized;
} AddedToken;

typedef enum { STEP_SPLIT, STEP_BYTELEVEL, STEP_METASPACE } StepKind;
enum { META_NEVER = 0, META_ALWAYS = 1, META_FIRST = 2 }; /* Metaspace prepend_scheme */
typedef struct {
    StepKind kind;
    char* pattern;         /* as written in the file (STEP_SPLIT; GPT-2's for a ByteLevel with use_regex; the
                              replacement of a Metaspace) */
    pcre2_code* re;        /* NULL: ByteLevel with use_regex false */
    int add_prefix_space;  /* ByteLevel only */
    int prepend, split;    /* Metaspace only: prepend_scheme (META_*), split on the replacement */
} PretokStep;

#define MAX_STEPS 8

/* SentencePiece-style BPE (Llama-2's tokenizer.json): a normalizer of Prepend / Replace(String) steps
 * applied to each piece between added tokens, no pre-tokenizer (a piece is one word), characters as
 * the initial symbols, bytes of a character the vocabulary lacks as "<0xXX>" tokens (byte_fallback). */
typedef enum { NORM_PREPEND, NORM_REPLACE } NormKind;
typedef struct {
    NormKind kind;
    char* from; /* NORM_REPLACE: the literal string replaced */
    char* to;   /* the text prepended / put in its place */
    size_t from_len, to_len;
} NormStep;
#define MAX_NORM 8

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
    /* per pass (normalized 0/1) and first byte: the lengths of its added tokens, distinct, longest first, 0 ends;
     * added_map: content -> index into added (contents are distinct) */
    size_t* added_lens[2][256];
    StrMap added_map;
    pcre2_code* word_re;   /* \w test for single_word */
    PretokStep steps[MAX_STEPS];
    int n_steps;
    int32_t* added_of_id;  /* (n_ids) index into added, -1 if the id is not an added token */
    char** dec;            /* (n_ids) decoded bytes of each id, NULL for holes */
    uint32_t* dec_len;
    uint64_t hash;
    WordCache cache;
    /* SentencePiece-style BPE (sp = 1; byte-level BPE otherwise) */
    int sp;
    int byte_fallback;     /* model.byte_fallback: a character not in the vocab becomes its "<0xXX>" tokens */
    int32_t fb_id[256];    /* id of "<0xXX>", -1 if absent */
    NormStep norm[MAX_NORM];
    int n_norm;
    int dec_strip;         /* decoder Strip: leading ' ' removed from the decoded text (Llama-2: 1) */
    int dec_bytes;         /* the decoder has ByteFallback: "<0xXX>" decodes to its byte */
};

#endif
