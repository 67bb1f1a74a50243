/* trace.h — Chrome trace JSON (Perfetto / chrome://tracing) of pipeline tasks and messages.
 *
 * Writer: the runtime opens one trace per rank (the simulator one for all ranks), records task spans,
 * message sends/receives and step spans, and writes the file atomically on close. Events are
 * buffered as text, so recording costs an snprintf and no allocation per event in the steady state.
 *
 * Layout of the JSON: {"traceEvents": [...], "displayTimeUnit": "ms"}; pid = pipeline rank (named
 * "rank r"), tid 0 = compute (task spans "F3"/"B3"/"W3", cat = kind, args chunk/mb/stage), tid 1 =
 * p2p (instants "send F3 -> r2" / "recv F3 <- r0" plus a flow arrow from send to receive; the flow id
 * is derived from (kind, chunk, microbatch, src, dst) so separately written rank files link up when
 * merged), tid 2 = step spans ("step 7"). Timestamps are microseconds from the trace's origin.
 *
 * Reader: pp_trace_load collects the task spans and step spans of one or more files for `rrfp-mm trace`. */
#ifndef RRFP_TRACE_H
#define RRFP_TRACE_H

#include <stddef.h>

#include "runtime/sched/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PpTrace PpTrace;

/* Start a trace that will be written to `path`. `origin` is the time (seconds, any clock) that
 * becomes ts = 0. This function can't fail (the file is written by pp_trace_close). */
PpTrace* pp_trace_open(const char* path, double origin);
/* Name rank r's process and threads (call once per rank that appears). */
void pp_trace_rank(PpTrace* tr, int rank);
/* A task of `rank` ran from start to end (seconds on the origin's clock). P is the pipeline size
 * (for the task's virtual stage in args). */
void pp_trace_task(PpTrace* tr, int rank, int P, PpTask t, double start, double end);
/* The same with the task's virtual stage given (the V layout of zbv / dualpipev: pp_vstage). */
void pp_trace_task_stage(PpTrace* tr, int rank, int P, int stage, PpTask t, double start, double end);
/* The message of task t (its output) left `rank` for `peer`, or arrived at `rank` from `peer`.
 * For a receive, t is the task that produced the message (the sender's task). */
void pp_trace_send(PpTrace* tr, int rank, int peer, PpTask t, size_t bytes, double time);
void pp_trace_recv(PpTrace* tr, int rank, int peer, PpTask t, size_t bytes, double time);
/* Step `step` of `rank` ran from start to end. */
void pp_trace_step(PpTrace* tr, int rank, int step, double start, double end);
/* Write the file atomically and free the trace. Returns 0, or -1 with a message in err (nothing is
 * left at path). The trace is freed either way. */
int pp_trace_close(PpTrace* tr, char* err, size_t errlen);

/* One task span read back. */
typedef struct {
    int rank;
    char kind;       // 'F', 'B' or 'W'
    int mb, chunk;   // mb -1 when the span has none; both checked in [0, 2^20] and [0, 65535]
    int stages;      // the pipeline's P ("args": {"stages": P}; older traces lack it), -1 when absent
    double ts, dur;  // microseconds
} PpTraceSpan;

/* One step span read back (ph "X", cat "step": rank `rank` ran step `step` from ts for dur). */
typedef struct {
    int rank;        // checked in [0, 65535]
    int step;        // "args": {"step": N}, an integer in [0, 2^31)
    double ts, dur;  // microseconds, as a task span's
} PpTraceStep;

typedef struct {
    PpTraceSpan* spans;
    int n, cap;
    PpTraceStep* steps;  // the step spans, in the order read
    int n_steps, cap_steps;
    int max_peer;    // the highest rank a p2p instant ("send F3 -> r2", "recv B0 <- r1") names, -1 if none
    void* merged;    // cJSON array of every event of every loaded file (for --json)
} PpTraceSet;

/* Append the events of the trace file `path` (a {"traceEvents": [...]} object or a bare array): its task
 * spans to set->spans, its step spans to set->steps. Every task and step span is validated first.
 * Returns 0, or -1 with a message naming the file (and the event's index) in err (the set is unchanged then). */
int pp_trace_load(PpTraceSet* set, const char* path, char* err, size_t errlen);
void pp_trace_set_free(PpTraceSet* set);
/* The merged events as {"traceEvents": [...]} text (malloc'd). */
char* pp_trace_set_json(const PpTraceSet* set);
/* Draw the timeline as SVG (malloc'd text): one row per rank (rect class "row", the idle background),
 * one rect per task (class "task F" / "task B" / "task W"), a time axis in ms. */
char* pp_trace_set_svg(const PpTraceSet* set, const char* title);

#ifdef __cplusplus
}
#endif
#endif
