/* test_trace.c — the trace writer and reader (runtime/trace/trace.h) as the runtime uses them: one file per rank,
 * written independently; the flows of a message link up when the files are merged; a file that is not JSON is refused
 * with its name; a bad path leaves nothing behind. Usage: test_trace */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/trace/trace.h"

#include "tests/support/check.h"

/* The runtime's use of the trace writer: one file per rank, written independently; the flows of a
 * message link up when the files are merged, and a bad path leaves nothing behind. */
static void test_trace_writer(void) {
    char dir[] = "/tmp/test_trace_XXXXXX", p0[128], p1[128], err[512];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(p0, sizeof p0, "%s/r0.json", dir);
    snprintf(p1, sizeof p1, "%s/r1.json", dir);
    double origin = 100.0;  // the runtime passes its own clock; ts are relative to the origin
    PpTrace* a = pp_trace_open(p0, origin);
    PpTrace* b = pp_trace_open(p1, origin);
    pp_trace_rank(a, 0);
    pp_trace_rank(b, 1);
    PpTask f0 = {0, PP_F, 0}, b0 = {0, PP_B, 0};
    pp_trace_task(a, 0, 2, f0, 100.000, 100.001);
    pp_trace_send(a, 0, 1, f0, 4096, 100.001);
    pp_trace_recv(b, 1, 0, f0, 4096, 100.0012);
    pp_trace_task(b, 1, 2, f0, 100.0012, 100.0022);
    pp_trace_task(b, 1, 2, b0, 100.0022, 100.0042);
    pp_trace_send(b, 1, 0, b0, 4096, 100.0042);
    pp_trace_recv(a, 0, 1, b0, 4096, 100.0043);
    pp_trace_task(a, 0, 2, b0, 100.0043, 100.0063);
    pp_trace_step(a, 0, 7, 100.0, 100.0063);
    CHECK(pp_trace_close(a, err, sizeof err) == 0, "%s", err);
    CHECK(pp_trace_close(b, err, sizeof err) == 0, "%s", err);
    PpTraceSet set = {0};
    CHECK(pp_trace_load(&set, p0, err, sizeof err) == 0 && pp_trace_load(&set, p1, err, sizeof err) == 0, "%s", err);
    CHECK(set.n == 4, "4 task spans, got %d", set.n);
    int found = 0;
    for (int i = 0; i < set.n; i++)
        if (set.spans[i].rank == 1 && set.spans[i].kind == 'B' && set.spans[i].mb == 0) {
            found = 1;
            CHECK(fabs(set.spans[i].ts - 2200) < 1e-3 && fabs(set.spans[i].dur - 2000) < 1e-3, "ts %g dur %g (us)",
                  set.spans[i].ts, set.spans[i].dur);
        }
    CHECK(found, "rank 1 B0 span");
    char* js = pp_trace_set_json(&set);
    // Each message's flow start (rank of the sender) and end (receiver) carry the same id.
    CHECK(strstr(js, "\"ph\":\"s\",\"bp\":\"e\",\"id\":\"F.c0.m0.r0-r1\"") &&
              strstr(js, "\"ph\":\"f\",\"bp\":\"e\",\"id\":\"F.c0.m0.r0-r1\"") &&
              strstr(js, "\"id\":\"B.c0.m0.r1-r0\""), "flow ids: %.300s", js);
    free(js);
    char* svg = pp_trace_set_svg(&set, "a <test> & more");
    CHECK(strstr(svg, "a &lt;test&gt; &amp; more") && strstr(svg, "class=\"task B\""), "svg escape / rects");
    free(svg);
    // A trace that is not JSON is refused with its name, and the set is left as it was.
    FILE* f = fopen(p1, "w");
    fputs("{\"traceEvents\": [", f);
    fclose(f);
    CHECK(pp_trace_load(&set, p1, err, sizeof err) == -1 && strstr(err, "r1.json") && set.n == 4, "%s", err);
    pp_trace_set_free(&set);
    char bad[160];
    snprintf(bad, sizeof bad, "%s/no/such/dir/t.json", dir);
    PpTrace* c = pp_trace_open(bad, 0);
    CHECK(pp_trace_close(c, err, sizeof err) == -1 && strstr(err, "cannot write trace"), "%s", err);
    remove(p0);
    remove(p1);
    rmdir(dir);
}

int main(void) {
    test_trace_writer();
    printf("%d checks, %d failed\n", check_count, check_failures);
    if (!check_failures) printf("trace writer: ok\n");
    return check_failures ? 1 : 0;
}
