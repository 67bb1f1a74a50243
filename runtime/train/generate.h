/* generate.h — answers from a checkpoint's model (`rrfp-mm generate`): autoregressive
 * decoding with a KV cache through the training forward (stage_forward: the same ops, weights and
 * image path; the LM blocks append each call's keys and values to the cache and attend to all of
 * them, text/lm.h LmSeq), on the recipe's backend (CPU or CUDA), in f32.
 *
 * What shaped the model's data (runtime/train/trained.h) decides the rest: the checkpoint's record (a run
 * writes it), else data.shards' (or data.eval_shards'), the record pack writes. The prompt is the first
 * human turn put through that chat template (data/template.h, as pack renders it: the tokens before the
 * answer's), its images preprocessed by the loader's own pipeline under that image preprocessing
 * (image_load_patches_prep: smart_resize to the recipe's patch bounds and x/127.5 - 1, or LLaVA's pad to
 * square, bicubic resize and CLIP mean / std); decoding stops at that template's end of answer
 * (template_stop_id: <|endoftext|>, </s>, <|eot_id|>, <|im_end|>) or after max_new tokens. A tokenizer
 * whose hash or <image> id is not the record's is refused, naming both files. Greedy by default; temperature > 0 samples from the
 * softmax of logits / temperature, restricted to the smallest set of tokens whose probability reaches
 * top_p, with a generator seeded by `seed` (the same seed gives the same answer).
 *
 * verify = 1 also runs every step as a full re-forward of the whole sequence (no cache) and records
 * the largest logit difference and whether the greedy token differs (tests). */
#ifndef RRFP_TRAIN_GENERATE_H
#define RRFP_TRAIN_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/train/trainer.h"

typedef struct {
    int max_new;         /* tokens generated at most (the end of turn included) */
    double temperature;  /* 0 = greedy */
    double top_p;        /* 1 = no cut */
    uint64_t seed;
    int verify;
} GenOptions;

typedef struct {
    int prompt_tokens, new_tokens;
    int stopped;          /* 1: the end of turn was generated; 0: max_new ran out */
    double max_logit_diff; /* verify: largest |KV-cache logit - full re-forward logit| */
    int argmax_differs;   /* verify: steps whose greedy token differs between the two */
} GenStats;

typedef struct Generator Generator;

/* A generator over t's model (trainer_init with eval_only: one process, the parameters of checkpoint
 * folder r->resume, resolved: trained_checkpoint_dir) and the recipe's data.tokenizer. Sequences up to the recipe's data.microbatch_tokens of prompt plus
 * max_new tokens. Returns NULL with a message. */
Generator* generator_new(Trainer* t, int max_new, char* err, size_t err_len);
void generator_free(Generator* g);

/* The answer to `human` (one human turn's text; "<image>" marks where each image goes: without one, an
 * image is put first, "<image>\n" + text, as LLaVA does) about n_images images (JPEG, PNG or GIF bytes). *answer:
 * the decoded answer (malloc'd, without the end of turn and the template's leading space). Returns 0, or
 * -1 with a message naming the image or the prompt. */
int generator_answer(Generator* g, const char* human, const uint8_t* const* jpeg, const size_t* jpeg_len, int n_images,
                     const GenOptions* o, char** answer, GenStats* st, char* err, size_t err_len);

/* The n bytes of s as valid UTF-8 (malloc'd): each byte that does not start a well-formed sequence
 * becomes U+FFFD, as Hugging Face's decode does (errors="replace"); a byte-level BPE can end a token
 * inside a character. */
char* generate_utf8_clean(const char* s, size_t n);

#endif
