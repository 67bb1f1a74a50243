/* tokenizer.h — BPE in the Hugging Face tokenizer.json format: byte-level (ByteLevel pre-tokenizer with
 * the GPT-2 split pattern, ByteLevel decoder) or SentencePiece-style as Llama-2's file (Prepend / Replace
 * metaspace normalizer, no pre-tokenizer, byte_fallback, Replace / ByteFallback / Fuse / Strip decoder),
 * with added special tokens. */
#ifndef RRFP_TOKENIZER_H
#define RRFP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;

/* Load a tokenizer.json. On error returns NULL and writes a message naming the file and the problem
 * into err (err_len bytes). */
Tokenizer* tokenizer_load(const char* path, char* err, size_t err_len);
/* Same, from an in-memory JSON document (`name` is used in error messages). */
Tokenizer* tokenizer_load_json(const char* json, size_t len, const char* name, char* err, size_t err_len);
void tokenizer_free(Tokenizer* tok);

int tokenizer_vocab_size(const Tokenizer* tok);      /* includes added tokens */
int tokenizer_token_id(const Tokenizer* tok, const char* token); /* exact token string -> id, -1 if absent */
const char* tokenizer_token_str(const Tokenizer* tok, int id);   /* id -> token string (NULL if out of range) */
int tokenizer_n_merges(const Tokenizer* tok);
/* The i-th added token (added_tokens, in the file's order) and its id in *id; NULL when i is out of range. */
const char* tokenizer_added(const Tokenizer* tok, int i, int* id);

/* Encode `len` bytes of text (any bytes: invalid UTF-8 is still encoded). Added special tokens
 * (such as "<image>") are matched literally first, as Hugging Face does. Returns the number of ids
 * and sets *ids to a malloc'd array the caller frees. */
int tokenizer_encode(const Tokenizer* tok, const char* text, size_t len, int32_t** ids);
/* The same for text that continues a sequence whose last id so far is prev_id (-1: none), so that
 * encoding a text piece by piece gives the ids of encoding it whole, as far as the pieces are cut where
 * no merge crosses (the chat templates cut before a space): a SentencePiece-style tokenizer's Prepend
 * is applied to the first piece only when it starts the sequence or follows an added token (HF
 * normalizes each piece between added tokens on its own). Byte-level tokenizers: tokenizer_encode. */
int tokenizer_encode_continue(const Tokenizer* tok, const char* text, size_t len, int prev_id, int32_t** ids);
/* Decode ids back to bytes (malloc'd, NUL-terminated; *len excludes the NUL). */
char* tokenizer_decode(const Tokenizer* tok, const int32_t* ids, int n, size_t* len);

/* 64-bit hash identifying the tokenizer (vocabulary, merges and added tokens), stored in shard
 * headers so a loader refuses shards made with another tokenizer. */
uint64_t tokenizer_hash(const Tokenizer* tok);

/* tokenizer.json text (len bytes; `name` in messages) with each of tokens[0..n) added as a special token, as
 * Hugging Face's add_special_tokens writes it: an added_tokens entry with special true, normalized, lstrip,
 * rstrip and single_word false. A token the file already has as an added token is kept as it is (ids[i] its
 * id, added[i] = 0); one of the vocabulary gets an entry with its vocabulary id; a new one the next id
 * (first_id for the first new one when >= 0, else the tokenizer's size: after the vocabulary and the added
 * tokens). The result is loaded back and each token must have the id written (the id HF gives it on load).
 * Returns the new text (malloc'd), or NULL with a message in err (a token given twice or empty, a file the
 * loader refuses, an id HF would give otherwise). */
char* tokenizer_json_add_special(const char* json, size_t len, const char* name, const char* const* tokens, int n,
                                 int first_id, int* ids, int* added, char* err, size_t err_len);

#endif
