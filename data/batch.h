/* batch.h — batch sources: where a training step's microbatches come from. A source yields the step
 * plan (every microbatch of the step, with the loss denominator known before the first forward) and
 * can save and restore its position, so a resumed run replays the same following steps.
 *
 * Two sources: the shard loader (data/loader.h) and the synthetic colour task (data/synth.h). */
#ifndef RRFP_BATCH_H
#define RRFP_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "data/loader.h"
#include "data/microbatch.h"

/* All microbatches of one step. */
typedef struct {
    Microbatch* mbs; /* (M) */
    int M;
    int64_t n_supervised; /* loss denominator: supervised targets in the whole step (this source) */
    int64_t tokens, patches, samples;
} StepPlan;

typedef struct BatchSource {
    void* self;
    const char* name;
    /* The next step's plan; valid until the next call. Returns 0, or -1 with err. */
    int (*next)(struct BatchSource* s, StepPlan* plan, char* err, size_t err_len);
    /* Position (JSON text, malloc'd) such that seek() to it replays the same following steps. */
    char* (*position)(struct BatchSource* s);
    int (*seek)(struct BatchSource* s, const char* json, char* err, size_t err_len);
    int64_t (*skipped)(struct BatchSource* s); /* damaged samples skipped so far */
    int64_t (*images_decoded)(struct BatchSource* s); /* JPEGs decoded so far (0: none, or no JPEGs) */
    /* Samples handed out so far, every replica's (after a seek: up to the position; NULL: not counted) */
    int64_t (*samples)(struct BatchSource* s);
    int64_t dataset_samples; /* samples in one epoch (0 = endless, synthetic) */
    void (*free)(struct BatchSource* s);
    /* The record id of sample `index` (Microbatch.sample_index): the manifest's "id" (may be NULL: the
     * synthetic source has none). */
    const char* (*sample_id)(struct BatchSource* s, int64_t index);
    /* Samples of the step last handed out whose images did not decode here, left in place (zero pixels)
     * for the job to decide (data/loader.h, "Images that do not decode"): *v gets them, the return value
     * how many (0 on a rank that decodes nothing). NULL when the source leaves no such decision to its
     * caller (the synthetic source; the shard source without LoaderConfig.agree_skips). */
    int (*undecoded)(struct BatchSource* s, const LoaderSkip** v);
    /* With undecoded: drop the samples of v (the union over every rank of the job) from the step last
     * handed out, once per step, before its shapes are used; plan's sums are updated (loader_drop_samples).
     * Returns 0, or -1 with err. */
    int (*drop)(struct BatchSource* s, const LoaderSkip* v, int n, StepPlan* plan, char* err, size_t err_len);
} BatchSource;

/* The synthetic colour task (data.source = synthetic): each image is one of 8 colours plus noise,
 * the prompt a few filler tokens and a question token, the supervised answer the colour's token and an
 * end token, so a model learns only by looking at the image. Deterministic in (seed, step). */
#define SYNTH_COLOURS 8
#define SYNTH_TOK_QUESTION 1
#define SYNTH_TOK_ANSWER0 2 /* answer tokens 2 .. 2 + SYNTH_COLOURS - 1; fillers after; end token V - 1 */
typedef struct {
    int patch, min_patches, max_patches; /* image grids: square-ish, patch counts in [min, max] */
    int microbatch_tokens, microbatches;
    int64_t seed;    /* data.seed */
    int fixed_batch; /* 1: every training step repeats step 0's samples (overfitting checks) */
    /* NULL / "" or a file of sample shapes (data.synthetic_plan): line k holds microbatch k's samples as
     * `HxW+F` (grid H x W, F >= 4 text tokens); microbatch i of a step's global index uses line i mod lines,
     * the colours and pixels still drawn from (seed, step). Read and checked by batch_source_synthetic. */
    const char* plan;
    int heldout;     /* 1: the held-out stream (another key: never seen in training) */
    /* Data parallelism: replica dp_rank of dp_size draws microbatches dp_rank, dp_rank + dp_size, ... of
     * the step's dp_size x microbatches (interleaved), so the replicas of one step together train on
     * exactly the step of one process with dp_size x microbatches. 0 and 1 (or 0 and 0) without DP. */
    int dp_rank, dp_size;
} SynthSourceConfig;
/* Returns 0, or -1 with a message (vocabulary below 16, a token budget too small for one sample). */
int batch_source_synthetic(BatchSource* src, const SynthSourceConfig* c, int vocab, char* err, size_t err_len);

/* The loader over c->shards (data.source = shards). Returns 0, or -1 with the loader's message. */
int batch_source_shards(BatchSource* src, const LoaderConfig* c, char* err, size_t err_len);

#endif
