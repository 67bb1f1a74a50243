/* sim.h — the discrete-event simulator over the RRFP dispatcher (runtime/sched/), duration files and
 * their generator (docs/scheduler.md "The simulator's semantics"). The simulator feeds the dispatcher the same three
 * notifications the real runtime does, under a virtual clock. */
#ifndef RRFP_SIM_H
#define RRFP_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/sched/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- durations and the simulator ----------------------------------------------------------------- */

/* The duration file of docs/scheduler.md "The simulator's semantics": {"stages": P, "microbatches": M, "latency": L,
 * "F": [[P x M]], "B": [[P x M]], "W": [[P x M]] (optional: present = split backward)}. */
typedef struct {
    int P, M, split;
    double latency;
    double* F;  // (P, M)
    double* B;  // (P, M)
    double* W;  // (P, M), NULL unless split
} PpDurations;

/* Parse a duration file's text. `name` is used in messages ("run.json: F[3] has 7 entries, expected
 * M=8"). Returns 0, or -1 with the message in err and nothing allocated. */
int pp_durations_parse(const char* text, const char* name, PpDurations* d, char* err, size_t errlen);
int pp_durations_load(const char* path, PpDurations* d, char* err, size_t errlen);
/* The checks a duration file gets, for durations from elsewhere (generated, calibrated): every entry
 * finite and >= 0 and the step's total (latency x 2PM included) finite. 0, or -1 with a message. */
int pp_durations_check(const PpDurations* d, const char* name, char* err, size_t errlen);
/* Serialise as a duration file (malloc'd JSON text). */
char* pp_durations_to_json(const PpDurations* d);
void pp_durations_free(PpDurations* d);

typedef enum { PP_GEN_TEXT = 0, PP_GEN_MM = 1 } PpGenKind;
/* Generate a duration set (the generator is documented in sim.c and bench/README.md). */
void pp_durations_generate(PpDurations* d, int P, int M, double variance, PpGenKind kind, uint64_t seed,
                           int split, double latency);

/* The lower bound of docs/scheduler.md "The simulator's semantics"; with V > 1 chunks each rank's durations are split evenly over its chunks
 * and the microbatch path runs over the P*V virtual stages (V = 1 is exactly the one-chunk formula). */
double pp_lower_bound(const PpDurations* d, int chunks);

/* One message of a simulated run: the output of `task` on rank src for rank dst. */
typedef struct {
    int src, dst;
    PpTask task;
    double send, arrive;
} PpSimMsg;

typedef struct {
    double makespan, lower_bound, efficiency, bubble;
    int deadlock;       // 1: the schedule cannot finish; msg says where it stuck
    char msg[512];
    int P;
    PpExec** exec;      // (P) executed tasks of each rank in start order
    int* n_exec;        // (P)
    int* cap;           // (P) resolved caps (ready)
    int* peak_inflight; // (P)
    long decisions;     // calls of pp_dispatcher_next
    long waits;         // lookahead: decisions that stayed idle for an announced task; rollout: that waited
    long rollouts;      // rollout: decisions that simulated their continuations (ready's pick not the hint's next)
    double rollout_rise;// rollout: the largest rise of the chosen continuation's makespan from one such decision
                        // to the next, or to the step's makespan (0 with exact estimates: the improvement property)
    PpMode chosen;      // the mode the step ran under (adaptive: its plan's choice; else the mode)
    double predicted[3];// adaptive: predicted makespans of ready, lookahead, fixed (NAN = not a candidate); of the
                        // order that ran (below)
    PpCap plan_cap;     // adaptive: the in-flight cap its plan chose (pp_plan_order_cap; the configured one or tighter)
    int* order;         // adaptive: (M) the step ran reordered, slot s holding microbatch order[s] (pp_plan_order);
                        // NULL = as it is. exec, msgs and every PpTask.mb of the result are slots, not microbatches
    PpSimMsg* msgs;     // (n_msgs) in send order
    int n_msgs;
} PpSimResult;


/* What a rank's cost model knows (lookahead): the estimate of a task is its true duration times a
 * factor drawn uniformly from [1 - estimate_error, 1 + estimate_error], per (rank, task), as a pure
 * function of estimate_seed (the same draw for every mode and hint). estimate_error 0 = exact. */
typedef struct PpPlanLearn PpPlanLearn;
typedef struct {
    double estimate_error;  // in [0, 1)
    uint64_t estimate_seed;
    PpPlanLearn* learn;     // adaptive: the run's learner (below), read and updated by the step; NULL = none
    int rollout;            // rollout's variant (PP_ROLLOUT_* bits; 0: as sched.h describes it)
    const int* order;       // the step's microbatches are reordered (d's slot s is microbatch order[s]): slot s's
                            // estimates are microbatch order[s]'s draws (the same estimates, permuted); NULL = as is
    int keep_order;         // adaptive: plan the mode and the in-flight cap (pp_plan_order_cap, the order kept), never
                            // reorder: as the MPI runtime under replay, with an estimate callback (bench_replay) or
                            // parallel.reorder = false, or to compare (bench_adaptive)
} PpSimOptions;
/* rollout's variants (experiments, docs/scheduler.md; bits, combined): FIT: continuations on the estimates' low-rank fit
 * (pp_durations_smooth) instead of the estimates; PLAN_BASE: the plan's choice (pp_sim_plan: ready or fixed)
 * as the only base policy instead of both; MARGIN: wait only when its continuation is shorter by more than
 * PP_ROLLOUT_MARGIN_VALUE (relative). Diagnostics, information no rank has: RUNNING_TRUE: the running tasks'
 * true ends; FUTURE_TRUE: the true durations of the tasks not yet started (both: the step itself). */
enum {
    PP_ROLLOUT_FIT = 1,
    PP_ROLLOUT_PLAN_BASE = 2,
    PP_ROLLOUT_RUNNING_TRUE = 4,
    PP_ROLLOUT_FUTURE_TRUE = 8,
    PP_ROLLOUT_MARGIN = 16,
    PP_ROLLOUT_SAMPLES = 32  // each continuation the mean over PP_ROLLOUT_SAMPLES_K draws of durations the
                             // estimates allow (estimate / f, f uniform in [1 - E, 1 + E]): expected makespans
};
#define PP_ROLLOUT_SAMPLES_K 4
#define PP_ROLLOUT_MARGIN_VALUE 0.005
/* Run one step under the virtual clock under a mode that needs no plan: every mode but adaptive. bases:
 * rollout's base policies for its continuations (bit 0 fixed, bit 1 ready; 0 = both), the plan's choice
 * under PP_ROLLOUT_PLAN_BASE. The simulator's entry for every mode is pp_sim_run / pp_sim_run_opts
 * (runtime/plan/plan.h). Returns 0 with *res filled (res->deadlock set when stuck), or -1 with a message
 * in err when the hint/mode/shape combination is invalid. */
int pp_sim_run_policy(const PpDurations* d, PpHint hint, PpMode mode, PpCap cap, int chunks, const PpSimOptions* opt,
                      int bases, PpSimResult* res, char* err, size_t errlen);
/* The estimate pp_sim_run_opts gives rank r's task t (also the replay benchmark's). */
double pp_sim_estimate(const PpDurations* d, int chunks, const PpSimOptions* opt, int r, PpTask t);

/* The estimated durations of d as the simulator's cost model gives them (pp_sim_estimate per rank and
 * task, chunks summed per rank): the input of pp_sim_plan. */
void pp_sim_estimated_durations(const PpDurations* d, int chunks, const PpSimOptions* opt, PpDurations* est);
/* The estimates denoised (adaptive's plan runs on this): each of F, B, W replaced by its low-rank fit,
 * a stage's rate times a microbatch's size, plus further components only where they stand out of the
 * residual noise (sim.c, fit_low_rank). out gets its own arrays (pp_durations_free). */
void pp_durations_smooth(const PpDurations* in, PpDurations* out);
/* in's durations in arrays of out's own (pp_durations_free) */
void pp_durations_copy(const PpDurations* in, PpDurations* out);
/* d's microbatches (its columns) reordered: slot s of the result is microbatch perm[s] of d, in place. */
void pp_durations_permute(PpDurations* d, const int* perm);
void pp_sim_result_free(PpSimResult* r);



#ifdef __cplusplus
}
#endif
/* ---- the calibrated duration generator (calib.c; docs/scheduler.md) ------------------------------ */

/* anyres: LLaVA-NeXT's any-resolution images (docs/anyres.md, LLaVA-1.6's pinpoints, tiles of `tile` pixels): the
 * mm mix's text with each image a photograph (its size as mm's) or, with probability doc_share, a document page
 * (about 1240 px wide, A4's 1.41 aspect, both lognormal), its LM positions and tower patches those of data/anyres.h */
typedef enum { PP_WORKLOAD_TEXT = 0, PP_WORKLOAD_MM = 1, PP_WORKLOAD_ANYRES = 2 } PpWorkload;

/* One training step's durations, in seconds, from a model and a data mix (not invented distributions):
 * samples drawn from a LLaVA-1.5-like instruction mix are packed by the loader's own packer
 * (loader_pack_window: ffd / balanced over a window; fifo as the loader closes microbatches) at the
 * recipe's token budget into M microbatches; the LM layers are split over P stages by the
 * partitioner (partition_auto on the trainer's assumptions); each (stage, microbatch) costs the
 * partitioner's FLOP model (partition_cost_model with the microbatch's tokens, patches, sum of squared
 * sample lengths / tokens and sum of squared patch counts / patches) divided by a GPU's effective FLOP
 * rate; then per-task jitter and stragglers. */
typedef struct {
    int P, M;               /* stages, microbatches per step */
    PpWorkload workload;    /* text: every sample text-only and no ViT cost; mm: the mix below */
    int policy, window;     /* 0 fifo, 1 ffd, 2 balanced (LoaderPolicy); ffd / balanced window in samples */
    int microbatch_tokens;  /* the token budget (data.microbatch_tokens) */
    int Dv, Lv, Dt, Lt, F, V, patch, min_patches, max_patches; /* the model (recipe [model], data.*_patches) */
    int split;              /* 1: B and W separately (1/3 each of forward + backward), else B = 2/3 */
    /* train.recompute of the LM blocks and the tower (Recompute, engine.h; 0 = none): under full recompute B grows by
     * the recomputed forward, and so does W under the split backward (its own recompute); selective re-runs an
     * elementwise op the FLOP model does not count */
    int recompute_lm, recompute_tower;
    /* 1 (default): the tower's blocks over stages where it costs more than a stage's share (partition_auto_tower,
     * docs/anyres.md "The tower over stages"); 0: the whole tower on stage 0 (partition_auto, as the trainer runs) */
    int tower_split;
    /* the split's objective (parallel.partition, partition_auto_path): 0 balance (the least max stage cost), 1 path
     * (the least longest fill + stage work + drain for the step's M microbatches) */
    int partition_path;
    /* sample mix (defaults: LLaVA-1.5's 665K mix, approximated) */
    double text_only_share;   /* share of text-only samples (ShareGPT: 40,688 of 665,298 = 0.061) */
    double extra_image_prob;  /* each further image with this probability (LLaVA-1.5: 0, one image each) */
    double image_text_mean, image_text_sigma; /* text tokens of a sample with images: lognormal */
    double text_only_mean, text_only_sigma;   /* text tokens of a text-only conversation: lognormal */
    double image_px_mean, image_px_sigma, aspect_sigma; /* pixels (lognormal), log aspect ratio (normal) */
    int tile;                 /* anyres: the tile side (model.vision_image_size; 336) */
    double doc_share;         /* anyres: share of document pages among the images (0.25) */
    /* hardware */
    double flops;             /* effective FLOP/s of one pipeline rank's device (default 400e12) */
    double link_GBps, link_latency_s, act_bytes; /* message latency = link latency + mean activation / bw */
    /* variability */
    double jitter;            /* per-task compute jitter: lognormal factor with this sigma, mean 1 */
    double straggler_factor;  /* a straggling rank runs this many times slower ... */
    int straggler_len;        /* ... for this many consecutive microbatches ... */
    double straggler_prob;    /* ... an episode starting with this probability per (rank, microbatch) */
    uint64_t seed;
} PpCalibConfig;

typedef struct {
    int samples;
    double tokens, patches, fill, min_T, max_T; /* fill = tokens / (M x budget) */
    double step_work_s, straggler_share;
    int layers[128];                            /* the LM layers of each stage (first 128) */
    int tower[128];                             /* the tower's blocks of each stage (first 128) */
    int tower_spans;                            /* 1: the tower's blocks are on more stages than stage 0 */
} PpCalibStats;

/* The largest jitter sigma pp_calib_generate takes (its median factor exp(-sigma^2/2) is 0.61 there). */
#define PP_CALIB_MAX_JITTER 1.0
/* The defaults: the 7B recipe (recipes/llava-1.5-7b.ini) at P = 8, M = 32, balanced, window 256. */
void pp_calib_defaults(PpCalibConfig* c);
/* Generate; returns 0 with d filled (seconds) and st (may be NULL), or -1 with a message. */
int pp_calib_generate(const PpCalibConfig* c, PpDurations* d, PpCalibStats* st, char* err, size_t errlen);

/* The largest stages x microbatches the simulator takes (2^22: its per-task tables stay under a few
 * hundred MB). pp_sim_check_size returns 0, or -1 with a message naming P, M and the bound. */
#define PP_SIM_MAX_TASKS (1L << 22)
int pp_sim_check_size(long P, long M, char* err, size_t errlen);

#endif
