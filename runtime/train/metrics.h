/* metrics.h — per-step metrics: one JSON object per step beside the checkpoints, and the log line. */
#ifndef RRFP_TRAIN_METRICS_H
#define RRFP_TRAIN_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"

typedef struct {
    int64_t step;         /* 1-based step just finished */
    float loss;           /* sum CE / supervised targets of the step */
    double lr, grad_norm; /* grad_norm before clipping */
    int64_t tokens;       /* LM positions in the step */
    int64_t supervised;   /* loss denominator */
    int64_t patches;      /* image patches in the step */
    int64_t samples, images;             /* samples and tower images in the step */
    int64_t attn_pairs, vit_attn_pairs;  /* LM causal attention pairs (l (l + 1) / 2 a sample), tower pairs (n^2 an
                                          * image): with the above, what the step's model FLOPs depend on */
    double step_time_s, tokens_per_s, data_wait_s;
    double peak_mem_mb;   /* process peak RSS */
    double eta_s;
    double bubble;        /* pipeline bubble fraction, < 0 when not pipelined */
    int64_t skipped;      /* damaged samples skipped so far */
    int64_t recomputed_blocks; /* blocks (LM and tower) whose activations this rank's backward recomputed in the step
                                * (train.recompute; 0: the metrics row leaves it out) */
    double epoch;         /* samples seen / data set records (< 0: no data set, the synthetic source) */
    double eval_loss;     /* held-out loss at this step (train.eval_every; < 0: none) */
    /* device memory (CUDA backend; has_device 0 elsewhere): the backend's high-water mark and what the
     * device has in use (cudaMemGetInfo: total - free, the CUDA context and other processes included) */
    int has_device;
    double device_peak_mb, device_used_mb;
    double device_peak_by_mb[MEM_TAGS]; /* the high-water mark split by what it held (MemTag): weights, grads, ... */
    /* runtime.profile: this step's GPU time / launches / op calls per op kind (engine.h, ProfKind) */
    int has_profile;
    double prof_ms[PROF_KINDS];
    long prof_launches[PROF_KINDS];
} StepStats;

typedef struct {
    FILE* f;
    char path[4096];
    char dropped[512]; /* metrics_open: what it dropped that was not a whole row ("" when nothing) */
    char error[1024];  /* the caller's copy of a write error (trainer.c stops the run on it) */
} Metrics;
/* Open PATH for appending; whole rows are never removed. resume_step > 0: rows past resume_step (an
 * attempt lost after its checkpoint) stay, noted on stderr, and the rows the resumed run writes follow
 * them, so the last row of a step is the one that counts. A torn last row (no newline: what a killed run
 * or a full disk leaves) is cut off and described in m->dropped for the caller to report. Returns 0, or
 * -1 with err. */
int metrics_open(Metrics* m, const char* path, int64_t resume_step, char* err, size_t err_len);
/* Append one line (written through: fflush) and check that it reached the file; the loss also as a C99
 * hex float ("loss_hex") so runs compare bit for bit. Returns 0, or -1 with a message naming the file
 * (a full disk: "No space left on device"); the row may then be torn. */
int metrics_write(Metrics* m, const StepStats* s, char* err, size_t err_len);
/* The rows written so far made durable (flushed and fsync'd): the log rank calls it before each checkpoint, so a
 * checkpoint that survives a power loss never finds its steps' rows missing. 0, or -1 with a message naming the
 * file and the step. */
int metrics_sync(Metrics* m, int64_t step, char* err, size_t err_len);
/* Close, the rows fsync'd first; 0, or -1 with a message when the last bytes could not be written. */
int metrics_close(Metrics* m, char* err, size_t err_len);
/* Format one human log line (step, loss, lr, grad norm, tokens/s, step time, bubble, peak mem, ETA; and
 * "data wait N%" where the step waited for the loader, metrics_data_bound). */
void metrics_log_line(char* out, size_t n, const StepStats* s, int64_t total_steps);
/* The share of a step's time spent waiting for the loader above which the step counts as waiting for data. */
#define METRICS_DATA_WAIT_SHARE 0.02
/* 1 when the step (after the first, which fills the loader's window) waited for the loader more than
 * METRICS_DATA_WAIT_SHARE of its time. */
int metrics_data_bound(const StepStats* s);
/* Peak resident set size of this process in MiB (from /proc/self/status VmHWM). */
double metrics_peak_rss_mb(void);

#endif
