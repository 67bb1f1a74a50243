/* bpe_internal.h — pieces of the tokenizer shared by tokenizer.c (load, encode, decode) and
 * bpe_train.c (the trainer): GPT-2's byte <-> unicode mapping and the split of text into the
 * pieces that BPE sees. Not a public header: only text/ includes it. */
#ifndef RRFP_BPE_INTERNAL_H
#define RRFP_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

/* GPT-2's bytes_to_unicode: byte b is written in token strings as one code point (printable bytes
 * as themselves, the others as U+0100 + n). Writes the UTF-8 of that code point (1 or 2 bytes) into
 * out and returns its length. This function can't fail. */
int bpe_byte_to_utf8(uint8_t b, char out[2]);
/* Inverse: the byte a code point stands for, or -1 if cp is not one of the 256 mapped code points. */
int bpe_codepoint_to_byte(uint32_t cp);

/* Called once per piece of text in order. added_id >= 0: the piece is that added token (matched
 * literally); added_id < 0: a pre-token that BPE encodes (its bytes, after any prefix space). */
typedef void (*TokenizerPieceFn)(void* ctx, const char* piece, size_t len, int added_id);
/* Split text exactly as encoding does (added tokens first, then the pre-tokenizer) without BPE. */
void tokenizer_pretokenize(const Tokenizer* tok, const char* text, size_t len, TokenizerPieceFn fn, void* ctx);

/* Length of the valid UTF-8 sequence at s (1..4), writing its code point to *cp, or 0 if the bytes
 * there are not one (Unicode Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF). */
int bpe_utf8_decode(const uint8_t* s, size_t n, uint32_t* cp);
/* Length of the longest prefix of s that is valid UTF-8 (Unicode Table 3-7: no overlongs, no
 * surrogates, nothing above U+10FFFF) and the length of the invalid run that follows it. */
size_t bpe_utf8_valid_prefix(const uint8_t* s, size_t n);
size_t bpe_utf8_invalid_run(const uint8_t* s, size_t n);

#endif
