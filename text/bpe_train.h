/* bpe_train.h — learn a byte-level BPE tokenizer from text and write it as a Hugging Face
 * tokenizer.json that text/tokenizer.h (and Hugging Face's own library) loads.
 *
 * The vocabulary, in id order:
 *   0..255             one token per byte (id = byte value), in GPT-2's byte-to-unicode spelling;
 *   256..256+M-1       one token per merge, in the order learned (the merge's rank);
 *   256+M..            the special tokens: BPE_TRAIN_DEFAULT_SPECIALS, then any extra ones. They are
 *                      cut out of the text before counting (as encoding does), so BPE never learns
 *                      pieces of them, and they are listed both in model.vocab and in added_tokens
 *                      (special, not normalized).
 * The special tokens are what the prompt template needs: "<image>" marks where an image's patches
 * go, "<|endoftext|>" ends a turn / a sample.
 *
 * Training: the text is split exactly as encoding splits it (added tokens, then GPT-2's pattern with
 * ByteLevel, add_prefix_space false); words are counted; then, repeatedly, the adjacent pair with the
 * highest count over all words (weighted by word count) is merged into a new token, until the
 * vocabulary has the requested size or no pair occurs min_frequency times. Ties in count go to the
 * pair with the smaller left id, then the smaller right id (ids grow in creation order, bytes by
 * value), so a run is fully deterministic. Pair counts are kept incrementally with a lazy max-heap
 * (only the words that contain the merged pair are revisited), so a few MB of text take seconds. */
#ifndef RRFP_BPE_TRAIN_H
#define RRFP_BPE_TRAIN_H

#include <stddef.h>

#define BPE_TRAIN_DEFAULT_SPECIALS_LIST {"<image>", "<|endoftext|>"}
#define BPE_TRAIN_DEFAULT_SPECIALS "\"<image>\", \"<|endoftext|>\""
#define BPE_TRAIN_DEFAULT_MIN_FREQUENCY 2

typedef struct BpeTrainer BpeTrainer;

/* A trainer whose special tokens are the defaults followed by extra[0..n_extra) (duplicates and
 * empty strings are refused). Returns NULL with a message in err on error. */
BpeTrainer* bpe_trainer_new(const char* const* extra, int n_extra, char* err, size_t err_len);
void bpe_trainer_free(BpeTrainer* tr);
/* Count the words of one text (any bytes). */
void bpe_trainer_feed(BpeTrainer* tr, const char* text, size_t len);
/* Number of words fed so far and the number of distinct ones. */
void bpe_trainer_counts(const BpeTrainer* tr, long long* words, long long* unique);
/* Learn merges for a vocabulary of vocab_size tokens (bytes + merges + specials) and return the
 * tokenizer.json text (malloc'd, NUL-terminated), or NULL with a message in err (vocab_size too
 * small). *n_merges gets the number of merges learned (fewer than asked when no pair reaches
 * min_frequency). With verbose, progress lines go to stderr about once a second. The trainer's
 * word counts are not changed: finish may be called again (another size) or more text fed. */
char* bpe_trainer_finish(BpeTrainer* tr, int vocab_size, int min_frequency, int verbose, int* n_merges, char* err,
                         size_t err_len);

#endif
