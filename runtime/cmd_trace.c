/* cmd_trace.c — `rrfp-mm trace FILES... --svg OUT [--json MERGED]`: merge per-rank Chrome traces
 * (runtime or simulator) and draw the timeline: one row per rank, F/B/W coloured, idle visible. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/cli.h"
#include "runtime/rrfp.h"

static void trace_usage(FILE* f) {
    fprintf(f, "usage: rrfp-mm trace FILE... --svg OUT.svg [--json MERGED.json] [--title TEXT]\n\n"
               "Merges per-rank Chrome trace JSON files (written by the runtime, or by rrfp-mm sim --trace)\n"
               "and draws an SVG timeline: one row per rank, F blue, B orange, W green, idle grey, time in ms.\n"
               "--json writes the merged trace (open it in Perfetto or chrome://tracing).\n");
}

int cmd_trace(int argc, char** argv) {
    const char *svg = NULL, *json = NULL, *title = NULL;
    const char** files = mallocCheck(sizeof(char*) * (argc + 1));
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            trace_usage(stdout);
            free(files);
            return 0;
        }
        if (!strcmp(a, "--svg") || !strcmp(a, "--json") || !strcmp(a, "--title")) {
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
    if (nf == 0 || (!svg && !json)) {
        fprintf(stderr, "rrfp-mm trace: give at least one trace file and --svg OUT (and/or --json OUT)\n\n");
        trace_usage(stderr);
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
    if (!rc) fprintf(stderr, "rrfp-mm trace: %d task spans from %d file(s)%s%s%s%s\n", set.n, nf, svg ? " -> " : "",
                     svg ? svg : "", json ? " -> " : "", json ? json : "");
    pp_trace_set_free(&set);
    free(files);
    return rc;
}
