/* sim.h — the discrete-event simulator over the RRFP dispatcher (runtime/sched/), duration files and
 * their generator (DESIGN.md section 6). The simulator feeds the dispatcher the same three
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

/* The duration file of DESIGN.md section 6: {"stages": P, "microbatches": M, "latency": L,
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
/* Serialise as a duration file (malloc'd JSON text). */
char* pp_durations_to_json(const PpDurations* d);
void pp_durations_free(PpDurations* d);

typedef enum { PP_GEN_TEXT = 0, PP_GEN_MM = 1 } PpGenKind;
/* Generate a duration set (the generator is documented in sim.c and bench/README.md). */
void pp_durations_generate(PpDurations* d, int P, int M, double variance, PpGenKind kind, uint64_t seed,
                           int split, double latency);

/* DESIGN.md's lower bound; with V > 1 chunks each rank's durations are split evenly over its chunks
 * and the microbatch path runs over the P*V virtual stages (V = 1 is exactly DESIGN.md's formula). */
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
    long waits;         // lookahead: decisions that stayed idle for an announced task
    PpSimMsg* msgs;     // (n_msgs) in send order
    int n_msgs;
} PpSimResult;

/* Run one step under the virtual clock. Returns 0 with *res filled (res->deadlock set when stuck), or
 * -1 with a message in err when the hint/mode/shape combination is invalid. */
int pp_sim_run(const PpDurations* d, PpHint hint, PpMode mode, PpCap cap, int chunks, PpSimResult* res,
               char* err, size_t errlen);

/* What a rank's cost model knows (lookahead): the estimate of a task is its true duration times a
 * factor drawn uniformly from [1 - estimate_error, 1 + estimate_error], per (rank, task), as a pure
 * function of estimate_seed (the same draw for every mode and hint). estimate_error 0 = exact. */
typedef struct {
    double estimate_error;  // in [0, 1)
    uint64_t estimate_seed;
} PpSimOptions;
int pp_sim_run_opts(const PpDurations* d, PpHint hint, PpMode mode, PpCap cap, int chunks, const PpSimOptions* opt,
                    PpSimResult* res, char* err, size_t errlen);
/* The estimate pp_sim_run_opts gives rank r's task t (also the replay benchmark's). */
double pp_sim_estimate(const PpDurations* d, int chunks, const PpSimOptions* opt, int r, PpTask t);
void pp_sim_result_free(PpSimResult* r);

/* Dry run before a real step: simulate the hint x mode x cap on uniform durations (F = 1, B = 2, or
 * B = W = 1 when split; latency 0) and report whether every rank finishes. Returns 0, or -1 with the
 * reason (invalid combination, or where it deadlocks) in err. */
int pp_dry_run(PpHint h, const PpShape* s, PpMode mode, PpCap cap, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
/* The largest stages x microbatches the simulator takes (2^22: its per-task tables stay under a few
 * hundred MB). pp_sim_check_size returns 0, or -1 with a message naming P, M and the bound. */
#define PP_SIM_MAX_TASKS (1L << 22)
int pp_sim_check_size(long P, long M, char* err, size_t errlen);

#endif
