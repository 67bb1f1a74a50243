/* cmd_trace.c — `rrfp-mm trace FILES... --svg OUT [--json MERGED]`: merge per-rank Chrome traces
 * (runtime or simulator) and draw the timeline: one row per rank, F/B/W coloured, idle visible. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/util.h"
#include "runtime/cli/cli.h"
#include "runtime/sim/sim.h"
#include "runtime/trace/trace.h"

static void trace_usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm trace FILE... --svg OUT.svg [--json MERGED.json] [--title TEXT]\n"
               "                             [--durations OUT.json [--latency L]]\n\n"
               "Merges per-rank Chrome trace JSON files (written by the runtime, or by rrfp-mm sim --trace)\n"
               "and draws an SVG timeline: one row per rank, F blue, B orange, W green, idle grey, time in ms.\n"
               "--json writes the merged trace (open it in Perfetto or chrome://tracing).\n"
               "--durations writes the F/B/W durations (ms) of the last step in the traces of a real run as a\n"
               "simulator duration file, with message latency L ms (default 0), so `rrfp-mm sim --durations`\n"
               "can replay that step under another mode, hint or cap. It prints the measured step time.\n");
}

/* The last step's durations: each (rank, kind, microbatch) runs once per step, so the last span of each
 * key belongs to the last step. One chunk per rank only (the duration-file format's scope). */
static int write_durations(const PpTraceSet* set, const char* path, double latency_ms) {
    int P = 0, M = 0, split = 0, stated = -1;
    for (int i = 0; i < set->n; i++) {
        const PpTraceSpan* sp = &set->spans[i];
        if (sp->chunk != 0) {
            fprintf(stderr, "rrfp-mm: error: --durations: the trace has model chunk %d (interleaved); duration files "
                            "describe one chunk per rank\n", sp->chunk);
            return 1;
        }
        if (sp->mb < 0) {
            fprintf(stderr, "rrfp-mm: error: --durations: a %c task span of rank %d has no microbatch (\"args\": "
                            "{\"mb\": N}); traces of `rrfp-mm train` carry one\n", sp->kind, sp->rank);
            return 1;
        }
        if (sp->rank + 1 > P) P = sp->rank + 1;
        if (sp->mb + 1 > M) M = sp->mb + 1;
        if (sp->kind == 'W') split = 1;
        if (sp->stages > 0 && stated > 0 && sp->stages != stated) {
            fprintf(stderr, "rrfp-mm: error: --durations: the traces are of pipelines of %d and %d stages (give the "
                            "files of one run)\n", stated, sp->stages);
            return 1;
        }
        if (sp->stages > 0) stated = sp->stages;
    }
    /* the pipeline's size is what the spans say (or, in older traces, the peers their messages name), not
     * the ranks whose files were given: rank 0's file of a 2-stage run is not a 1-stage pipeline */
    int stages = stated > P ? stated : P;
    if (set->max_peer + 1 > stages) stages = set->max_peer + 1;
    if (stages > P) {
        fprintf(stderr, "rrfp-mm: error: --durations: the traces are of a %d-stage pipeline but hold the tasks of "
                        "ranks 0 .. %d only; give every rank's file (RUN_DIR/trace-rank*.json)\n", stages, P - 1);
        return 1;
    }
    char err[1024];
    if (pp_sim_check_size(P, M, err, sizeof err) != 0) {
        fprintf(stderr, "rrfp-mm: error: --durations: %s\n", err);
        return 1;
    }
    size_t n = (size_t)P * (size_t)M;
    const PpTraceSpan** last = callocCheck(3 * n, sizeof *last);
    for (int i = 0; i < set->n; i++) {
        const PpTraceSpan* sp = &set->spans[i];
        int k = sp->kind == 'F' ? 0 : sp->kind == 'B' ? 1 : 2;
        const PpTraceSpan** slot = &last[(size_t)k * n + (size_t)sp->rank * M + sp->mb];
        if (!*slot || sp->ts > (*slot)->ts) *slot = sp;
    }
    PpDurations d = {.P = P, .M = M, .split = split, .latency = latency_ms};
    d.F = callocCheck(n, sizeof(double));
    d.B = callocCheck(n, sizeof(double));
    d.W = split ? callocCheck(n, sizeof(double)) : NULL;
    double t0 = 1e300, t1 = -1e300;
    int rc = 0;
    for (int k = 0; k < (split ? 3 : 2) && !rc; k++)
        for (int r = 0; r < P && !rc; r++)
            for (int m = 0; m < M; m++) {
                const PpTraceSpan* sp = last[(size_t)k * n + (size_t)r * M + m];
                if (!sp) {
                    fprintf(stderr, "rrfp-mm: error: --durations: no %c task of microbatch %d on rank %d in the traces "
                                    "(give every rank's file)\n", "FBW"[k], m, r);
                    rc = 1;
                    break;
                }
                double* dst = k == 0 ? d.F : k == 1 ? d.B : d.W;
                dst[(size_t)r * M + m] = sp->dur / 1000.0;
                if (sp->ts < t0) t0 = sp->ts;
                if (sp->ts + sp->dur > t1) t1 = sp->ts + sp->dur;
            }
    if (!rc) {
        char* text = pp_durations_to_json(&d);
        /* what is written is what `sim --durations` reads: checked by its own parser first */
        PpDurations back;
        if (pp_durations_parse(text, path, &back, err, sizeof err) != 0) {
            fprintf(stderr, "rrfp-mm: error: --durations: the traces give durations sim cannot use: %s\n", err);
            rc = 1;
        } else {
            pp_durations_free(&back);
        }
        if (rc) {
            /* nothing written */
        } else if (rr_write_file_atomic(path, text, strlen(text)) != 0) {
            fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s\n", path, strerror(errno));
            rc = 1;
        } else {
            printf("durations of the last step: P=%d M=%d%s -> %s; measured step (first task start to last task "
                   "end) %.3f ms\n", P, M, split ? " split backward" : "", path, (t1 - t0) / 1000.0);
        }
        free(text);
    }
    free(last);
    pp_durations_free(&d);
    return rc;
}

/* Do two paths name one file: the same text, or (when both exist) the same device and inode (a link,
 * "./t.json" against "t.json"). */
static int same_file(const char* a, const char* b) {
    if (!strcmp(a, b)) return 1;
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cmd_trace(int argc, char** argv) {
    const char *svg = NULL, *json = NULL, *title = NULL, *durations = NULL;
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
        } else if (!strcmp(a, "--svg") || !strcmp(a, "--json") || !strcmp(a, "--title")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "rrfp-mm trace: %s needs a value\n", a);
                free(files);
                return 2;
            }
            const char** dst = !strcmp(a, "--svg") ? &svg : !strcmp(a, "--json") ? &json : &title;
            *dst = argv[++i];
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "rrfp-mm trace: unknown option '%s'\n\n", a);
            trace_usage(stderr);
            free(files);
            return 2;
        } else {
            files[nf++] = a;
        }
    }
    if (nf == 0 || (!svg && !json && !durations)) {
        fprintf(stderr, "rrfp-mm trace: give at least one trace file and --svg OUT (and/or --json, --durations)\n\n");
        trace_usage(stderr);
        free(files);
        return 2;
    }
    /* an output that is one of the inputs would replace it (`trace t.json --svg t.json`) */
    const char* outs[3] = {svg, json, durations};
    const char* out_flags[3] = {"--svg", "--json", "--durations"};
    for (int o = 0; o < 3; o++)
        for (int i = 0; outs[o] && i < nf; i++)
            if (same_file(outs[o], files[i])) {
                fprintf(stderr, "rrfp-mm trace: %s '%s' is the input trace '%s'; refusing to overwrite an input (give "
                                "another output path)\n", out_flags[o], outs[o], files[i]);
                free(files);
                return 2;
            }
    for (int o = 0; o < 3; o++)
        for (int q = o + 1; q < 3; q++)
            if (outs[o] && outs[q] && same_file(outs[o], outs[q])) {
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
    if (!rc && svg) {
        char t[512];
        if (!title) {
            snprintf(t, sizeof t, "%s%s (%d tasks)", files[0], nf > 1 ? " ..." : "", set.n);
            title = t;
        }
        char* s = pp_trace_set_svg(&set, title);
        if (rr_write_file_atomic(svg, s, strlen(s))) {
            fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s\n", svg, strerror(errno));
            rc = 1;
        }
        free(s);
    }
    if (!rc && json) {
        char* s = pp_trace_set_json(&set);
        if (rr_write_file_atomic(json, s, strlen(s))) {
            fprintf(stderr, "rrfp-mm: error: cannot write '%s': %s\n", json, strerror(errno));
            rc = 1;
        }
        free(s);
    }
    if (!rc && durations) rc = write_durations(&set, durations, latency);
    if (!rc) fprintf(stderr, "rrfp-mm trace: %d task spans from %d file(s)%s%s%s%s\n", set.n, nf, svg ? " -> " : "",
                     svg ? svg : "", json ? " -> " : "", json ? json : "");
    pp_trace_set_free(&set);
    free(files);
    return rc;
}
