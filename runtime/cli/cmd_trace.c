/* cmd_trace.c — `rrfp-mm trace FILES... --svg OUT [--json MERGED]`: merge per-rank Chrome traces
 * (runtime or simulator) and draw the timeline: one row per rank, F/B/W coloured, idle visible. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/util.h"
#include "runtime/cli/args.h"
#include "runtime/cli/cli.h"
#include "runtime/train/outguard.h"
#include "runtime/sim/sim.h"
#include "runtime/trace/trace.h"

static void trace_usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm trace FILE... --svg OUT.svg [--json MERGED.json] [--title TEXT]\n"
               "                             [--durations OUT.json] [--durations-dir DIR] [--latency L]\n\n"
               "Merges per-rank Chrome trace JSON files (written by the runtime, or by rrfp-mm sim --trace)\n"
               "and draws an SVG timeline: one row per rank, F blue, B orange, W green, idle grey, time in ms.\n"
               "--json writes the merged trace (open it in Perfetto or chrome://tracing).\n"
               "--durations writes the F/B/W durations (ms) of the last step in the traces of a real run as a\n"
               "simulator duration file, with message latency L ms (default 0), so `rrfp-mm sim --durations`\n"
               "can replay that step under another mode, hint or cap. It prints the measured step time.\n"
               "--durations-dir writes every step of the traces as its own duration file DIR/step-NNNNNN.json\n"
               "(the runtime's step number, 6 digits: a shell glob lists them in step order), so\n"
               "  rrfp-mm sim $(for f in DIR/step-*.json; do printf -- '--durations %%s ' \"$f\"; done) --mode adaptive\n"
               "replays the run. Task spans go to the step whose step span (one per rank and step, written by the\n"
               "runtime) holds them; spans outside every step span are left out. Every step is built and checked\n"
               "(every rank's file, each task once) before any file is written; DIR is created (one level) and\n"
               "must not hold step files of other steps. One line per step and a summary are printed.\n"
               "With step spans in the traces, --durations takes the last step's spans (the highest number);\n"
               "traces without them (older files) give each task's last span.\n"
               "Every output is refused before anything is read when it is an input trace (the same file: links\n"
               "count), another output, a folder where a file is wanted, a file in a checkpoint or a run folder's\n"
               "own file (docs/reliability.md); files are written to a temporary name and renamed.\n");
}

/* ---- duration files from a run's traces ------------------------------------------------------------ */

/* The pipeline's size P from every task span (one chunk per rank: the duration-file format's scope). The
 * size is what the spans say (or, in older traces, the peers their messages name), not the ranks whose files
 * were given: rank 0's file of a 2-stage run is not a 1-stage pipeline. 0, or 1 after printing the error. */
static int trace_pipeline_size(const PpTraceSet* set, const char* flag, int* P_out) {
    int P = 0, stated = -1;
    for (int i = 0; i < set->n; i++) {
        const PpTraceSpan* sp = &set->spans[i];
        if (sp->chunk != 0) {
            fprintf(stderr, "rrfp-mm: error: %s: the trace has model chunk %d (interleaved); duration files "
                            "describe one chunk per rank\n", flag, sp->chunk);
            return 1;
        }
        if (sp->mb < 0) {
            fprintf(stderr, "rrfp-mm: error: %s: a %c task span of rank %d has no microbatch (\"args\": "
                            "{\"mb\": N}); traces of `rrfp-mm train` carry one\n", flag, sp->kind, sp->rank);
            return 1;
        }
        if (sp->rank + 1 > P) P = sp->rank + 1;
        if (sp->stages > 0 && stated > 0 && sp->stages != stated) {
            fprintf(stderr, "rrfp-mm: error: %s: the traces are of pipelines of %d and %d stages (give the "
                            "files of one run)\n", flag, stated, sp->stages);
            return 1;
        }
        if (sp->stages > 0) stated = sp->stages;
    }
    int stages = stated > P ? stated : P;
    if (set->max_peer + 1 > stages) stages = set->max_peer + 1;
    if (stages > P) {
        fprintf(stderr, "rrfp-mm: error: %s: the traces are of a %d-stage pipeline but hold the tasks of "
                        "ranks 0 .. %d only; give every rank's file (RUN_DIR/trace-rank*.json)\n", flag, stages, P - 1);
        return 1;
    }
    *P_out = P;
    return 0;
}

/* One step's duration file. */
typedef struct {
    int step;       // the runtime's step number; -1 for traces without step spans
    int M, split;
    double ms;      // measured step: first task start to last task end, ms
    char* text;     // the duration file (what `sim --durations` reads back)
} StepFile;

/* The duration file of one step from its task spans sp[0..n) on a P-stage pipeline. With step >= 0 every
 * (rank, kind, microbatch) of the step appears exactly once; with step -1 (traces without step spans) each
 * key's last span is taken, which is the last step's when every step runs every key once. The text is
 * checked by sim's own parser (as `name`). 0, or 1 after printing the error naming the step, rank, kind
 * and microbatch. */
static int step_file_build(const PpTraceSpan* const* sp, int n, int P, int step, double latency_ms, const char* flag,
                           const char* name, StepFile* out) {
    char what[48] = "";
    if (step >= 0) snprintf(what, sizeof what, "step %d: ", step);
    int M = 0, split = 0;
    for (int i = 0; i < n; i++) {
        if (sp[i]->mb + 1 > M) M = sp[i]->mb + 1;
        if (sp[i]->kind == 'W') split = 1;
    }
    if (n == 0) {
        fprintf(stderr, "rrfp-mm: error: %s: %sno task spans within the step's spans\n", flag, what);
        return 1;
    }
    char err[1024];
    if (pp_sim_check_size(P, M, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: %s: %s%s\n", flag, what, err);
        return 1;
    }
    size_t cells = (size_t)P * (size_t)M;
    const PpTraceSpan** key = callocCheck(3 * cells, sizeof *key);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        int k = sp[i]->kind == 'F' ? 0 : sp[i]->kind == 'B' ? 1 : 2;
        const PpTraceSpan** slot = &key[(size_t)k * cells + (size_t)sp[i]->rank * M + sp[i]->mb];
        if (*slot && step >= 0) {
            fprintf(stderr, "rrfp-mm: error: %s: %sthe %c task of microbatch %d on rank %d appears twice (at %.3f and "
                            "%.3f us; give the files of one run, once each)\n", flag, what, sp[i]->kind, sp[i]->mb,
                    sp[i]->rank, (*slot)->ts, sp[i]->ts);
            rc = 1;
        } else if (!*slot || sp[i]->ts > (*slot)->ts) {
            *slot = sp[i];
        }
    }
    PpDurations d = {.P = P, .M = M, .split = split, .latency = latency_ms};
    d.F = callocCheck(cells, sizeof(double));
    d.B = callocCheck(cells, sizeof(double));
    d.W = split ? callocCheck(cells, sizeof(double)) : NULL;
    double t0 = 1e300, t1 = -1e300;
    for (int k = 0; k < (split ? 3 : 2) && !rc; k++)
        for (int r = 0; r < P && !rc; r++)
            for (int m = 0; m < M; m++) {
                const PpTraceSpan* s = key[(size_t)k * cells + (size_t)r * M + m];
                if (!s) {
                    fprintf(stderr, "rrfp-mm: error: %s: %sno %c task of microbatch %d on rank %d in the traces "
                                    "(give every rank's file)\n", flag, what, "FBW"[k], m, r);
                    rc = 1;
                    break;
                }
                double* dst = k == 0 ? d.F : k == 1 ? d.B : d.W;
                dst[(size_t)r * M + m] = s->dur / 1000.0;
                if (s->ts < t0) t0 = s->ts;
                if (s->ts + s->dur > t1) t1 = s->ts + s->dur;
            }
    if (!rc) {
        char* text = pp_durations_to_json(&d);
        /* what is written is what `sim --durations` reads: checked by its own parser first */
        PpDurations back;
        if (pp_durations_parse(text, name, &back, err, sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm: error: %s: %sthe traces give durations sim cannot use: %s\n", flag, what, err);
            free(text);
            rc = 1;
        } else {
            pp_durations_free(&back);
            *out = (StepFile){.step = step, .M = M, .split = split, .ms = (t1 - t0) / 1000.0, .text = text};
        }
    }
    free(key);
    pp_durations_free(&d);
    return rc;
}

static int cmp_int(const void* a, const void* b) { return (*(const int*)a > *(const int*)b) - (*(const int*)a < *(const int*)b); }

static int cmp_step_rank_ts(const void* a, const void* b) { /* by rank, then start */
    const PpTraceStep *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

typedef struct {
    int step, idx; /* a task span's step and its index in the set (the file order within a step) */
} SpanStep;

static int cmp_span_step(const void* a, const void* b) {
    const SpanStep *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Slack for the %.3f rounding of the written ts and dur (0.0005 us each: a start 0.001 us, an end 0.002 us
 * off at most) and the double arithmetic on large times. */
static double step_tol(const PpTraceStep* st) { return 2.5e-3 + 8 * 2.2e-16 * (fabs(st->ts) + st->dur); }

/* The traces' steps: the task spans of each step, assigned by the runtime's step spans (a task span of rank
 * r belongs to step N when it lies within rank r's step-N span; spans outside every step span belong to
 * none). With only_last, the last step (the highest number) only. Checks: every rank 0 .. P-1 has one span
 * of each step, a rank's step spans do not overlap. *files gets the steps in step order (their text built
 * and checked); *outside the task spans in no step. 0, or 1 after printing the error. */
static int trace_steps_build(const PpTraceSet* set, int P, double latency_ms, int only_last, const char* flag,
                             const char* name, StepFile** files, int* n_files, int* outside) {
    *files = NULL, *n_files = 0, *outside = 0;
    int ns = set->n_steps;
    RR_ASSERT(ns > 0);
    PpTraceStep* st = mallocCheck(sizeof *st * (size_t)(ns + 1));
    memcpy(st, set->steps, sizeof *st * (size_t)ns);
    qsort(st, (size_t)ns, sizeof *st, cmp_step_rank_ts);
    int* first = callocCheck((size_t)P + 1, sizeof(int)); /* rank r's spans: st[first[r] .. first[r + 1]) */
    for (int i = 0; i < ns; i++)
        if (st[i].rank >= P) {
            fprintf(stderr, "rrfp-mm: error: %s: a step span of rank %d (step %d), but the traces' task spans are of "
                            "ranks 0 .. %d (give the files of one run)\n", flag, st[i].rank, st[i].step, P - 1);
            free(st), free(first);
            return 1;
        }
    for (int i = 0, r = 0; r <= P; r++) {
        while (i < ns && st[i].rank < r) i++;
        first[r] = i;
    }
    /* the step numbers: every rank has each exactly once */
    int* nums = mallocCheck(sizeof(int) * (size_t)(ns + 1));
    for (int i = 0; i < ns; i++) nums[i] = st[i].step;
    qsort(nums, (size_t)ns, sizeof(int), cmp_int);
    int nn = 0;
    for (int i = 0; i < ns; i++)
        if (nn == 0 || nums[i] != nums[nn - 1]) nums[nn++] = nums[i];
    int* count = callocCheck((size_t)nn * (size_t)P, sizeof(int)); /* [step index][rank] */
    int rc = 0;
    for (int i = 0; i < ns; i++) {
        int* at = bsearch(&st[i].step, nums, (size_t)nn, sizeof(int), cmp_int);
        count[(size_t)(at - nums) * P + st[i].rank]++;
    }
    for (int q = 0; q < nn && !rc; q++)
        for (int r = 0; r < P && !rc; r++)
            if (count[(size_t)q * P + r] != 1) {
                if (count[(size_t)q * P + r] == 0)
                    fprintf(stderr, "rrfp-mm: error: %s: step %d: no step span of rank %d (its trace ends before the "
                                    "step, or was written without step spans; give every rank's file of one run)\n",
                            flag, nums[q], r);
                else
                    fprintf(stderr, "rrfp-mm: error: %s: step %d: rank %d has %d step spans (give the files of one "
                                    "run, once each)\n", flag, nums[q], r, count[(size_t)q * P + r]);
                rc = 1;
            }
    free(count);
    for (int i = 1; i < ns && !rc; i++)
        if (st[i].rank == st[i - 1].rank && st[i].ts < st[i - 1].ts + st[i - 1].dur - step_tol(&st[i - 1])) {
            fprintf(stderr, "rrfp-mm: error: %s: the spans of steps %d and %d of rank %d overlap (%.3f + %.3f us and "
                            "%.3f us; a rank runs one step at a time: give the files of one run)\n", flag,
                    st[i - 1].step, st[i].step, st[i].rank, st[i - 1].ts, st[i - 1].dur, st[i].ts);
            rc = 1;
            break;
        }
    /* each task span's step */
    SpanStep* ss = mallocCheck(sizeof *ss * (size_t)(set->n + 1));
    int na = 0;
    for (int i = 0; i < set->n && !rc; i++) {
        const PpTraceSpan* sp = &set->spans[i];
        int lo = first[sp->rank], hi = first[sp->rank + 1] - 1, j = lo - 1;
        while (lo <= hi) { /* the last step span of the rank starting before the task (within the slack) */
            int mid = lo + (hi - lo) / 2;
            if (st[mid].ts - step_tol(&st[mid]) <= sp->ts) j = mid, lo = mid + 1;
            else hi = mid - 1;
        }
        /* that one, or (within the slack of adjacent steps) one before it */
        int found = -1;
        for (int k = j; k >= first[sp->rank] && st[k].ts + st[k].dur + step_tol(&st[k]) >= sp->ts; k--)
            if (sp->ts >= st[k].ts - step_tol(&st[k]) && sp->ts + sp->dur <= st[k].ts + st[k].dur + step_tol(&st[k])) {
                found = k;
                break;
            }
        if (found >= 0) ss[na++] = (SpanStep){.step = st[found].step, .idx = i};
        else ++*outside;
    }
    qsort(ss, (size_t)na, sizeof *ss, cmp_span_step);
    const PpTraceSpan** sp = mallocCheck(sizeof *sp * (size_t)(na + 1));
    StepFile* out = callocCheck((size_t)nn + 1, sizeof *out);
    int nf = 0;
    for (int q = only_last ? nn - 1 : 0, a = 0; q < nn && !rc; q++) {
        while (a < na && ss[a].step < nums[q]) a++;
        int n = 0;
        for (; a < na && ss[a].step == nums[q]; a++) sp[n++] = &set->spans[ss[a].idx];
        rc = step_file_build(sp, n, P, nums[q], latency_ms, flag, name, &out[nf]);
        if (!rc) nf++;
    }
    if (rc) {
        for (int i = 0; i < nf; i++) free(out[i].text);
        free(out);
    } else {
        *files = out, *n_files = nf;
    }
    free(sp), free(ss), free(nums), free(first), free(st);
    return rc;
}

/* Write one output file atomically. 0, or 1 after printing the error. */
static int write_output(const char* path, const char* text) {
    if (rr_write_file_atomic(path, text, strlen(text)) == 0) return 0;
    fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s\n", path, strerror(errno));
    return 1;
}

/* DIR/step-NNNNNN.json (malloc'd). */
static char* step_path(const char* dir, int step) {
    size_t n = strlen(dir) + 32;
    char* p = mallocCheck(n);
    snprintf(p, n, "%s/step-%06d.json", dir, step);
    return p;
}

/* The step number of a file name "step-<digits>.json", or -1. */
static int step_of_name(const char* name) {
    if (strncmp(name, "step-", 5)) return -1;
    const char* p = name + 5;
    long long v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 12; p++, digits++) v = v * 10 + (*p - '0');
    if (digits == 0 || strcmp(p, ".json") || v > 2147483647LL) return -1;
    return (int)v;
}

/* Before anything is written to DIR: no step-*.json in it that this export would not replace (an export of
 * fewer steps into the folder of an earlier one would mix two runs in `DIR/step-*.json`), and no file to
 * write that is another output (the inputs: guard_output). 0, 1 (data) or 2 (usage) after printing the
 * error. */
static int durations_dir_check(const char* dir, const StepFile* sf, int n, const char* const* others, int n_others) {
    for (int i = 0; i < n; i++) {
        char* p = step_path(dir, sf[i].step);
        for (int k = 0; k < n_others; k++)
            if (others[k] && guard_same_file(p, others[k])) {
                fprintf(stderr, "rrfp-mm trace: --durations-dir would write '%s', another output of this command\n", p);
                free(p);
                return 2;
            }
        free(p);
    }
    DIR* d = opendir(dir);
    if (!d && errno == ENOENT) return 0; /* created later */
    if (!d) { /* unchecked, an earlier run's step files would mix with these */
        fprintf(stderr, "rrfp-mm: error: --durations-dir: cannot list '%s' for step files of another run: %s\n", dir,
                strerror(errno));
        return 1;
    }
    int rc = 0;
    struct dirent* e;
    while (!rc && (e = readdir(d)) != NULL) {
        int step = step_of_name(e->d_name);
        if (step < 0) continue;
        int lo = 0, hi = n - 1, found = 0;
        while (lo <= hi && !found) {
            int mid = lo + (hi - lo) / 2;
            if (sf[mid].step == step) found = 1;
            else if (sf[mid].step < step) lo = mid + 1;
            else hi = mid - 1;
        }
        if (!found) {
            fprintf(stderr, "rrfp-mm: error: --durations-dir: '%s' holds %s, which is not a step of these traces "
                            "(steps %d .. %d): its step files would mix two runs; give a new or empty directory, or "
                            "remove the old step files\n", dir, e->d_name, sf[0].step, sf[n - 1].step);
            rc = 1;
        }
    }
    closedir(d);
    return rc;
}

/* Write DIR/step-NNNNNN.json for every step (each atomically), creating DIR (one level, 0755). 0 or 1. A failed
 * write (a full disk) into a DIR this call created removes the step files written before it and DIR: no partial
 * set of step files is left under the name. */
static int durations_dir_write(const char* dir, const StepFile* sf, int n, int P, int outside) {
    int created = mkdir(dir, 0755) == 0;
    if (!created && errno != EEXIST) {
        fprintf(stderr, "rrfp-mm: error: --durations-dir: cannot create directory '%s': %s%s\n", dir, strerror(errno),
                errno == ENOENT ? " (its parent must exist: one level is created)" : "");
        return 1;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "rrfp-mm: error: --durations-dir: '%s' is not a directory\n", dir);
        return 1;
    }
    double total = 0;
    for (int i = 0; i < n; i++) {
        char* p = step_path(dir, sf[i].step);
        if (rr_write_file_atomic(p, sf[i].text, strlen(sf[i].text)) != 0) {
            int e = errno;
            if (created) { /* this call's folder: what it wrote goes with it */
                for (int k = 0; k < i; k++) {
                    char* q = step_path(dir, sf[k].step);
                    unlink(q);
                    free(q);
                }
                rmdir(dir);
            }
            fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s (%d of %d step files written%s)\n", p, strerror(e),
                    i, n, created ? "; removed with the folder this command created" : "");
            free(p);
            return 1;
        }
        printf("step %d: P=%d M=%d%s -> %s; measured step (first task start to last task end) %.3f ms\n", sf[i].step,
               P, sf[i].M, sf[i].split ? " split backward" : "", p, sf[i].ms);
        total += sf[i].ms;
        free(p);
    }
    printf("durations of %d step%s (steps %d .. %d) -> %s: measured steps %.3f ms in all, %.3f ms on average; %d task "
           "span%s outside every step span left out\n", n, n == 1 ? "" : "s", sf[0].step, sf[n - 1].step, dir, total,
           total / n, outside, outside == 1 ? "" : "s");
    return 0;
}

int cmd_trace(int argc, char** argv) {
    const char *svg = NULL, *json = NULL, *title = NULL, *durations = NULL, *ddir = NULL;
    double latency = 0.0;
    const char** files = mallocCheck(sizeof(char*) * (argc + 1));
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            trace_usage(stdout);
            free(files);
            return 0;
        }
        if (!strcmp(a, "--latency") && i + 1 < argc) {
            char* end;
            latency = strtod(argv[++i], &end);
            if (end == argv[i] || *end || !isfinite(latency) || latency < 0) {
                fprintf(stderr, "rrfp-mm trace: --latency needs a number >= 0 (ms), got '%s'\n", argv[i]);
                free(files);
                return 2;
            }
        } else if (!strcmp(a, "--durations") && i + 1 < argc) {
            durations = argv[++i];
        } else if (!strcmp(a, "--durations-dir") && i + 1 < argc) {
            ddir = argv[++i];
        } else if (!strcmp(a, "--svg") || !strcmp(a, "--json") || !strcmp(a, "--title")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rrfp-mm trace: %s needs a value\n", a);
                free(files);
                return 2;
            }
            const char** dst = !strcmp(a, "--svg") ? &svg : !strcmp(a, "--json") ? &json : &title;
            *dst = argv[++i];
        } else if (a[0] == '-' && a[1] == '-') {
            cli_unknown_option("trace", a, trace_usage, NULL);
            free(files);
            return 2;
        } else {
            files[nf++] = a;
        }
    }
    if (nf == 0 || (!svg && !json && !durations && !ddir)) {
        fprintf(stderr, "rrfp-mm trace: give at least one trace file and --svg OUT (and/or --json, --durations, "
                        "--durations-dir)\n\n");
        trace_usage(stderr);
        free(files);
        return 2;
    }
    /* an output that is one of the inputs would replace it (`trace t.json --svg t.json`): the output guard,
     * before anything is read */
    const char* outs[4] = {svg, json, durations, ddir};
    const char* out_flags[4] = {"--svg", "--json", "--durations", "--durations-dir"};
    GuardInputs gin = {0};
    for (int i = 0; i < nf; i++) guard_inputs_add(&gin, files[i], "the input trace", 0);
    char gerr[2048];
    for (int o = 0; o < 4; o++)
        if (outs[o] && guard_output(out_flags[o], outs[o], o == 3 ? GUARD_OUT_FOLDER : GUARD_OUT_FILE,
                                    o == 3 ? "step-*.json" : NULL, &gin, gerr, sizeof gerr) != 0) {
            fprintf(stderr, "rrfp-mm trace: %s\n", gerr);
            guard_inputs_free(&gin);
            free(files);
            return 2;
        }
    guard_inputs_free(&gin);
    for (int o = 0; o < 4; o++)
        for (int q = o + 1; q < 4; q++)
            if (outs[o] && outs[q] && guard_same_file(outs[o], outs[q])) {
                fprintf(stderr, "rrfp-mm trace: %s and %s name the same file '%s'\n", out_flags[o], out_flags[q], outs[o]);
                free(files);
                return 2;
            }
    PpTraceSet set = {0};
    char err[1024];
    int rc = 0;
    for (int i = 0; i < nf && !rc; i++)
        if (pp_trace_load(&set, files[i], err, sizeof err)) {
            fprintf(stderr, "rrfp-mm: error: %s\n", err);
            rc = 1;
        }
    if (!rc && set.n == 0) {
        fprintf(stderr, "rrfp-mm: error: no task spans (events with ph \"X\" and cat F, B or W) in %d file(s)\n", nf);
        rc = 1;
    }
    /* the duration files are built and checked before anything is written: the traces' steps once, for
     * --durations-dir all of them, for --durations alone the last; traces without step spans give
     * --durations each task's last span */
    StepFile old = {0}, *steps = NULL;
    const StepFile* last = NULL; /* --durations' step: steps' last, or `old` */
    int P = 0, n_steps = 0, outside = 0;
    if (!rc && (durations || ddir)) {
        const char* flag = ddir ? "--durations-dir" : "--durations";
        if (ddir && set.n_steps == 0) {
            fprintf(stderr, "rrfp-mm: error: --durations-dir: the traces have no step spans (events with ph \"X\" and "
                            "cat \"step\", written by the runtime at the end of each step); --durations takes the last "
                            "step of traces without them\n");
            rc = 1;
        } else {
            rc = trace_pipeline_size(&set, flag, &P);
        }
        if (!rc && set.n_steps > 0) {
            rc = trace_steps_build(&set, P, latency, !ddir, flag, ddir ? ddir : durations, &steps, &n_steps, &outside);
            if (!rc) last = &steps[n_steps - 1];
        } else if (!rc) {
            const PpTraceSpan** all = mallocCheck(sizeof *all * (size_t)(set.n + 1));
            for (int i = 0; i < set.n; i++) all[i] = &set.spans[i];
            rc = step_file_build(all, set.n, P, -1, latency, flag, durations, &old);
            free(all);
            if (!rc) last = &old;
        }
        if (!rc && ddir) rc = durations_dir_check(ddir, steps, n_steps, (const char* const[]){svg, json, durations}, 3);
    }
    if (!rc && svg) {
        char t[512];
        if (!title) {
            snprintf(t, sizeof t, "%s%s (%d tasks)", files[0], nf > 1 ? " ..." : "", set.n);
            title = t;
        }
        char* s = pp_trace_set_svg(&set, title);
        rc = write_output(svg, s);
        free(s);
    }
    if (!rc && json) {
        char* s = pp_trace_set_json(&set);
        rc = write_output(json, s);
        free(s);
    }
    if (!rc && durations && !(rc = write_output(durations, last->text))) {
        char which[48] = "";
        if (last->step >= 0) snprintf(which, sizeof which, " (step %d)", last->step);
        printf("durations of the last step%s: P=%d M=%d%s -> %s; measured step (first task start to last task "
               "end) %.3f ms\n", which, P, last->M, last->split ? " split backward" : "", durations, last->ms);
    }
    if (!rc && ddir) rc = durations_dir_write(ddir, steps, n_steps, P, outside);
    if (!rc) fprintf(stderr, "rrfp-mm trace: %d task spans from %d file(s)%s%s%s%s\n", set.n, nf, svg ? " -> " : "",
                     svg ? svg : "", json ? " -> " : "", json ? json : "");
    free(old.text);
    for (int i = 0; i < n_steps; i++) free(steps[i].text);
    free(steps);
    pp_trace_set_free(&set);
    free(files);
    return rc;
}
