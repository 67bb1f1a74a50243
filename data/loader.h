/* loader.h — the variable-length loader: .rrs shards -> steps of packed Microbatches.
 *
 * Sample stream. The shards of a folder (*.rrs in name order) are concatenated into global sample
 * indices 0..N-1. Epoch e is a permutation of them (Fisher-Yates keyed by (seed, e)). The stream runs
 * on across epochs forever, and it is the same for every data-parallel replica.
 *
 * Worker threads (pthreads) walk the stream ahead of the consumer: read the frame, check zstd's
 * checksum and the payload against the index, then decode each image (JPEG, PNG or GIF, data/image.h) and
 * resize / normalise / patchify it. A damaged frame (zstd's checksum, the payload against the index)
 * is reported on stderr with shard, sample index, id and reason, skipped in the stream and counted (or,
 * with fatal_errors, ends the step with an error): every rank reads every frame, so every rank skips it.
 *
 * Images that do not decode. A frame can be intact while its image does not decode here (a shard
 * from elsewhere, another decoder, a damaged copy: pack decoded it, but not this rank), and only the
 * ranks that decode pixels can know. So such a sample never changes the plan: it stays in its
 * microbatch (zero pixels) and the step names it (LoaderStep.undecoded); loader_drop_samples removes it
 * from its microbatch (microbatch_drop_samples) and counts it in skipped_damaged. Alone
 * (agree_skips = 0) the loader does that itself when it hands the step out, and reports it on stderr.
 * With agree_skips the caller gathers every decoding rank's undecoded samples of the step (the first
 * pipeline stage's, each replica's) and gives the union to loader_drop_samples on every rank before the
 * step's shapes are used: every rank drops the same samples, none inferring another's decision
 * (runtime/train/trainer.c). The plan, the positions and the steps after it never depend on a decode.
 *
 * Packing. Each sample costs L = text tokens - images + patches LM positions (patch grids from the
 * index, no decoding). The packer fills microbatches of at most microbatch_tokens positions:
 *   fifo      samples in stream order; a microbatch closes when the next sample does not fit.
 *   ffd       first-fit-decreasing over a window of `window` samples: sorted by L (largest first,
 *             ties in stream order), each goes to the first open microbatch it fits; microbatches are
 *             emitted in the order they were opened.
 *   balanced  the window is split into as many microbatches as ffd needs, then samples are placed,
 *             largest cost first, into the microbatch with the least cost so far that has room (a new
 *             one when none has); cost = L + (L^2 + sum over images of patches^2) / attn_tokens, the
 *             linear layers plus causal and ViT attention, so microbatches take similar compute
 *             time rather than similar token counts.
 * A sample with L > microbatch_tokens is an error naming it at open (or, with skip_oversize, skipped
 * and counted when the stream reaches it).
 *
 * A step is `microbatches` consecutive microbatches: loader_next_step returns all of them with their
 * n_supervised, so the loss denominator is known before the first forward.
 *
 * Data parallelism (dp_size D > 1). Every replica plans the global step: the same stream and the same
 * packing as one process with microbatches x D microbatches per step (the plan needs only the index's
 * lengths and patch grids, and the frames' checksums for damage), and replica d keeps microbatches
 * d, d + D, d + 2D, ... of it (as the synthetic source does, data/batch.h), so the replicas' union is
 * exactly the one-process step. Its n_supervised is the replica's share; the trainer sums it over the
 * replicas. The workers only read and check frames; the planner decodes the JPEGs of the kept
 * microbatches alone (on `workers` threads: itself and workers - 1 helpers), so a replica decodes about
 * 1/D of the images. A planner thread forms and
 * assembles whole steps (up to 2) ahead of the trainer from the workers' samples, so loader_next_step
 * only hands one over. Everything is a pure function of (shards, seed, policy, window, budget, dp) —
 * the worker count and the timing of the threads change nothing.
 *
 * Resuming. LoaderPos is where the next step starts (the first stream position of the current packing
 * group and how many of its microbatches were already handed out, plus the counters); opening with it,
 * or loader_seek, replays exactly the steps that followed. It is plain integers (loader_pos_to_json /
 * loader_pos_from_json give the checkpoint text) and carries a hash of the plan-defining settings, so
 * a position from another data set or packing configuration is refused. Positions count the global
 * step (all replicas' microbatches and samples) and the hash takes microbatches x D, not D: every
 * replica holds the same position, and it resumes under any dp with the same global step (dp 2 x 2
 * microbatches <-> one process x 4, and the reverse). */
#ifndef RRFP_DATA_LOADER_H
#define RRFP_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "data/microbatch.h"
#include "data/shard.h"

typedef enum { LOADER_POLICY_FIFO = 0, LOADER_POLICY_FFD, LOADER_POLICY_BALANCED } LoaderPolicy;

typedef struct {
    const char* shards;        /* a folder of .rrs files, or one .rrs file */
    uint64_t tokenizer_hash;   /* must match every shard header; 0 = do not check */
    int microbatch_tokens;     /* LM positions per microbatch */
    int microbatches;          /* per step and replica (the global step has microbatches x dp_size) */
    LoaderPolicy policy;
    int window;                /* ffd / balanced look-ahead in samples */
    int workers;               /* decode threads (>= 1) */
    uint64_t seed;
    int patch, min_patches, max_patches;
    int dp_rank, dp_size;      /* replica d of D keeps microbatches d, d + D, ... of the global step */
    int fatal_errors;          /* a damaged sample stops the loader instead of being skipped */
    int skip_oversize;         /* a sample above the budget is skipped and counted instead of an error */
    int decode_images;         /* 0: no pixels (grids, positions and targets are still filled) */
    int prefetch;              /* samples decoded ahead beyond the window (0 = 4 steps' worth, estimated) */
    double attn_tokens;        /* balanced cost model (0 = 512) */
    int agree_skips;           /* 1: samples whose images did not decode are dropped by the caller's
                                * loader_drop_samples (every rank's decision); 0: by loader_next_step */
    int quiet;                 /* 1: no warning on stderr for a skipped sample (another rank reports it) */
} LoaderConfig;

/* Defaults: policy ffd, window 64, 1 worker, dp 0 of 1, decode_images 1, p 8, patches 16..64. */
void loader_config_default(LoaderConfig* c);
int loader_policy_parse(const char* s, LoaderPolicy* p); /* "fifo" | "ffd" | "balanced"; 0 or -1 */
/* The ffd / balanced packer over one window of n samples (the loader's own, also used by the duration
 * generator of runtime/sim/): cost_L[i] LM positions, cost_b[i] balanced cost (loader_balanced_cost),
 * key[i] stream position (ties), budget = microbatch_tokens (every cost_L[i] <= budget). Fills
 * bin_of[i] (microbatch of sample i, in the order microbatches were opened) and returns the count.
 * fifo is not a window packer (it closes a microbatch when the next sample does not fit): returns 0. */
int loader_pack_window(LoaderPolicy policy, int n, const int* cost_L, const double* cost_b, const int64_t* key,
                       int budget, int* bin_of);
/* balanced's cost of a sample of lm LM positions whose images have sum of squared patch counts
 * patches_sq: lm + (lm^2 + patches_sq) / attn_tokens (linear layers plus causal and ViT attention). */
double loader_balanced_cost(double lm, double patches_sq, double attn_tokens);

typedef struct {
    int64_t stream_pos;    /* first stream position of the current packing group */
    int64_t group_done;    /* microbatches of that group already handed out (all replicas') */
    int64_t steps;         /* steps handed out */
    int64_t samples;       /* samples packed into handed-out microbatches (all replicas') */
    int64_t skipped_damaged, skipped_oversize;
    uint64_t config_hash;  /* plan-defining settings and data set; checked on resume */
} LoaderPos;

typedef struct {
    int64_t steps, microbatches, samples, tokens, patches, supervised; /* samples: all replicas'; microbatches,
                                                                       * tokens, patches, supervised: this one's */
    int64_t skipped_damaged;   /* corrupt frames, and samples whose images did not decode (dropped from
                                * their steps: every replica's) */
    int64_t skipped_oversize;  /* samples above microbatch_tokens (with skip_oversize) */
    int64_t epoch;             /* epoch of the last sample handed out */
    int64_t bytes_read;        /* compressed frame bytes read by the workers */
    int64_t images_decoded;    /* JPEGs decoded into patches (0 when decode_images is off; dp > 1: those of the
                                * kept microbatches of the steps planned so far) */
    double wait_s;             /* time loader_next_step spent blocked, waiting for a step to be ready */
    int64_t dataset_samples;   /* N over all shards */
    int shards;
} LoaderStats;

/* A sample of a step whose image did not decode on the rank that decoded it. */
#define LOADER_WHY_MAX 512
typedef struct {
    int replica;              /* the data-parallel replica whose step holds it (its dp_rank) */
    int mb, slot;             /* its microbatch in that replica's step (0 .. M-1) and its sample there */
    int64_t sample;           /* its global sample index (Microbatch.sample_index) */
    char why[LOADER_WHY_MAX]; /* "SHARD sample I (id 'ID'): image K: the decoder's reason" */
} LoaderSkip;

typedef struct {
    int M;
    Microbatch* mbs;       /* (M), owned by the loader until the next call */
    int64_t n_supervised;  /* sum over the M microbatches: this replica's share of the loss denominator */
    int64_t tokens, patches, samples;
    /* agree_skips: the samples of this step whose images did not decode here (in step order), still in
     * their microbatches with zero pixels until loader_drop_samples; owned by the loader. 0 / NULL on a
     * rank that decodes nothing, and always without agree_skips (dropped already). */
    int n_undecoded;
    const LoaderSkip* undecoded;
} LoaderStep;

typedef struct Loader Loader;

/* Open the shards (every header and index checked, tokenizer hash compared, oversize samples found),
 * start the workers. resume: NULL for the start of the stream. Returns NULL with a message in err. */
Loader* loader_open(const LoaderConfig* cfg, const LoaderPos* resume, char* err, size_t err_len);
/* The next step: `microbatches` microbatches, decoded. Returns 0, or -1 with err (fatal damage). */
int loader_next_step(Loader* L, LoaderStep* step, char* err, size_t err_len);
/* agree_skips: drop from the step last handed out the samples of v, the job's decision: the union of
 * every decoding rank's LoaderStep.undecoded for this step (duplicates allowed: the TP ranks of the first
 * stage decode the same images). Those of this replica (replica == dp_rank) leave their microbatches
 * (microbatch_drop_samples); all of them are counted in skipped_damaged and leave the sample count, so
 * every replica holds the same position. *step gets the new sums. Once per step, after loader_next_step
 * and before the next one; n = 0 is allowed. Returns 0, or -1 with err when an entry names no sample of
 * this step (ranks that planned different steps). */
int loader_drop_samples(Loader* L, const LoaderSkip* v, int n, LoaderStep* step, char* err, size_t err_len);
/* Position after the last step handed out (resume point). This function can't fail. */
void loader_get_pos(const Loader* L, LoaderPos* pos);
/* Restart the stream at pos (as loader_open with resume). Returns 0, or -1 with err. */
int loader_seek(Loader* L, const LoaderPos* pos, char* err, size_t err_len);
void loader_stats(const Loader* L, LoaderStats* s);
void loader_close(Loader* L);

/* What shaped the samples of `shards` (a folder of .rrs files or one): the header and index record every
 * shard carries (data/shard.h: the tokenizer's hash, the <image> id, the patch bounds, the image
 * preprocessing, the chat template), checked to be the same in every shard. first gets the first shard's
 * path (the file that records it). Reads headers and indexes only, no frame. Returns 0, or -1 with a
 * message naming the file. */
int loader_shards_info(const char* shards, ShardInfo* info, char* first, size_t first_len, char* err, size_t err_len);

/* Samples in the data set, and the LM positions of global sample i (from the index, no decoding). */
int loader_sample_count(const Loader* L);
int loader_sample_tokens(const Loader* L, int64_t i); /* LM positions L of sample i */
/* The record id of global sample i (the manifest's "id", from the shard index; "" out of range). */
const char* loader_sample_id(const Loader* L, int64_t i);

/* Checkpoint text: {"stream_pos": .., "group_done": .., ...} (malloc'd) and back. */
char* loader_pos_to_json(const LoaderPos* pos);
int loader_pos_from_json(const char* json, LoaderPos* pos, char* err, size_t err_len);

#endif
