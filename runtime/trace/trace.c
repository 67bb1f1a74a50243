/* trace.c — Chrome trace JSON writer (runtime and simulator), reader, merger and SVG timeline.
 * The format is described in trace.h. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/json.h"
#include "engine/util.h"
#include "runtime/trace/trace.h"

/* ---- growing text buffer ------------------------------------------------------------------------ */

typedef struct {
    char* s;
    size_t n, cap;
} TextBuf;

static void tb_printf(TextBuf* b, const char* fmt, ...) RR_PRINTF(2, 3);
static void tb_printf(TextBuf* b, const char* fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        RR_ASSERT(w >= 0);
        if (b->s && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + (size_t)w + 1) cap *= 2;
        b->s = reallocCheck(b->s, cap);
        b->cap = cap;
    }
}

/* XML text escape. */
static void tb_xml(TextBuf* b, const char* s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': tb_printf(b, "&amp;"); break;
        case '<': tb_printf(b, "&lt;"); break;
        case '>': tb_printf(b, "&gt;"); break;
        case '"': tb_printf(b, "&quot;"); break;
        default: tb_printf(b, "%c", *s);
        }
    }
}

/* ---- writer ------------------------------------------------------------------------------------- */

struct PpTrace {
    char* path;
    double origin;
    TextBuf ev;
    int n_events;
};

static const char kind_char[3] = {'F', 'B', 'W'};

PpTrace* pp_trace_open(const char* path, double origin) {
    PpTrace* tr = callocCheck(1, sizeof(PpTrace));
    tr->path = strdup(path);
    if (!tr->path) rr_die("out of memory");
    tr->origin = origin;
    return tr;
}

static void trace_sep(PpTrace* tr) {
    if (tr->n_events++) tb_printf(&tr->ev, ",\n");
}

static double us(const PpTrace* tr, double t) { return (t - tr->origin) * 1e6; }

void pp_trace_rank(PpTrace* tr, int rank) {
    static const char* threads[3] = {"compute", "p2p", "step"};
    trace_sep(tr);
    tb_printf(&tr->ev, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", rank,
              rank);
    trace_sep(tr);
    tb_printf(&tr->ev, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", rank,
              rank);
    for (int i = 0; i < 3; i++) {
        trace_sep(tr);
        tb_printf(&tr->ev, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                  rank, i, threads[i]);
    }
}

void pp_trace_task(PpTrace* tr, int rank, int P, PpTask t, double start, double end) {
    pp_trace_task_stage(tr, rank, P, t.chunk * P + rank, t, start, end);
}

void pp_trace_task_stage(PpTrace* tr, int rank, int P, int stage, PpTask t, double start, double end) {
    trace_sep(tr);
    tb_printf(&tr->ev,
              "{\"name\":\"%c%d\",\"cat\":\"%c\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":0,"
              "\"args\":{\"chunk\":%d,\"mb\":%d,\"stage\":%d,\"stages\":%d}}",
              kind_char[t.kind], t.mb, kind_char[t.kind], us(tr, start), (end - start) * 1e6, rank, t.chunk, t.mb,
              stage, P);
}

/* The flow id names the message by its producer and endpoints, so a sender's and a receiver's files
 * written independently link up. */
static void trace_msg(PpTrace* tr, int rank, int src, int dst, PpTask t, size_t bytes, double time, int send) {
    char id[96];
    snprintf(id, sizeof id, "%c.c%d.m%d.r%d-r%d", kind_char[t.kind], t.chunk, t.mb, src, dst);
    trace_sep(tr);
    tb_printf(&tr->ev,
              "{\"name\":\"%s %c%d %s r%d\",\"cat\":\"p2p\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,\"pid\":%d,\"tid\":1,"
              "\"args\":{\"bytes\":%zu,\"chunk\":%d,\"mb\":%d}}",
              send ? "send" : "recv", kind_char[t.kind], t.mb, send ? "->" : "<-", send ? dst : src, us(tr, time), rank,
              bytes, t.chunk, t.mb);
    trace_sep(tr);
    tb_printf(&tr->ev, "{\"name\":\"%c%d\",\"cat\":\"msg\",\"ph\":\"%s\",\"bp\":\"e\",\"id\":\"%s\",\"ts\":%.3f,"
              "\"pid\":%d,\"tid\":1}",
              kind_char[t.kind], t.mb, send ? "s" : "f", id, us(tr, time), rank);
}

void pp_trace_send(PpTrace* tr, int rank, int peer, PpTask t, size_t bytes, double time) {
    trace_msg(tr, rank, rank, peer, t, bytes, time, 1);
}

void pp_trace_recv(PpTrace* tr, int rank, int peer, PpTask t, size_t bytes, double time) {
    trace_msg(tr, rank, peer, rank, t, bytes, time, 0);
}

void pp_trace_step(PpTrace* tr, int rank, int step, double start, double end) {
    trace_sep(tr);
    tb_printf(&tr->ev, "{\"name\":\"step %d\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
              "\"tid\":2,\"args\":{\"step\":%d}}",
              step, us(tr, start), (end - start) * 1e6, rank, step);
}

int pp_trace_close(PpTrace* tr, char* err, size_t errlen) {
    TextBuf out = {0};
    tb_printf(&out, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n%s\n]}\n", tr->ev.s ? tr->ev.s : "");
    int rc = 0;
    if (rr_write_file_atomic(tr->path, out.s, out.n)) {
        snprintf(err, errlen, "cannot write trace '%s': %s", tr->path, strerror(errno));
        rc = -1;
    }
    free(out.s);
    free(tr->ev.s);
    free(tr->path);
    free(tr);
    return rc;
}

/* ---- reader ------------------------------------------------------------------------------------- */

static int span_from_event(const cJSON* e, PpTraceSpan* s) {
    const cJSON* ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
    const cJSON* cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
    if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X") || !cJSON_IsString(cat)) return 0;
    const char* c = cat->valuestring;
    if (strlen(c) != 1 || (c[0] != 'F' && c[0] != 'B' && c[0] != 'W')) return 0;
    const cJSON* pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
    const cJSON* ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
    const cJSON* dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
    if (!cJSON_IsNumber(pid) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(dur)) return -1;
    /* a duration is finite and >= 0, a rank >= 0: what `sim` accepts of the files --durations writes */
    /* times within 1e15 us (31 years) of the origin: the timeline's range and ticks stay exact (ts 4e42 with
     * dur 1 gave an empty range and an endless axis loop, found by fuzz_trace) */
    if (!(fabs(ts->valuedouble) <= 1e15) || !(dur->valuedouble >= 0 && dur->valuedouble <= 1e15) ||
        pid->valuedouble < 0 || pid->valuedouble > 65535)
        return -2;
    s->rank = pid->valueint;
    s->kind = c[0];
    s->ts = ts->valuedouble;
    s->dur = dur->valuedouble;
    s->mb = -1;
    s->chunk = 0;
    s->stages = -1;
    const cJSON* args = cJSON_GetObjectItemCaseSensitive(e, "args");
    const cJSON* mb = args ? cJSON_GetObjectItemCaseSensitive(args, "mb") : NULL;
    const cJSON* ch = args ? cJSON_GetObjectItemCaseSensitive(args, "chunk") : NULL;
    const cJSON* st = args ? cJSON_GetObjectItemCaseSensitive(args, "stages") : NULL;
    /* integers in the ranges the runtime writes (a microbatch < 2^20, a chunk or a pipeline size <= 65535):
     * `--durations` computes the file's M and P from them */
    if (mb && !(cJSON_IsNumber(mb) && mb->valuedouble >= 0 && mb->valuedouble < (1 << 20) &&
                mb->valuedouble == (int)mb->valuedouble))
        return -3;
    if (ch && !(cJSON_IsNumber(ch) && ch->valuedouble >= 0 && ch->valuedouble <= 65535 &&
                ch->valuedouble == (int)ch->valuedouble))
        return -3;
    if (st && !(cJSON_IsNumber(st) && st->valuedouble >= 1 && st->valuedouble <= 65536 &&
                st->valuedouble == (int)st->valuedouble && st->valuedouble > pid->valuedouble))
        return -3;
    if (mb) s->mb = (int)mb->valuedouble;
    if (ch) s->chunk = (int)ch->valuedouble;
    if (st) s->stages = (int)st->valuedouble;
    return 1;
}

/* A step span (ph "X", cat "step"): 1 read into *s, 0 not a step span, -1 without numeric pid/ts/dur,
 * -2 out of range, -3 without an integer args.step in [0, 2^31). Checked as a task span is (sizes and
 * step numbers come from it: `trace --durations-dir` names a file after the step). */
static int step_from_event(const cJSON* e, PpTraceStep* s) {
    const cJSON* ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
    const cJSON* cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
    if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X") || !cJSON_IsString(cat) || strcmp(cat->valuestring, "step"))
        return 0;
    const cJSON* pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
    const cJSON* ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
    const cJSON* dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
    if (!cJSON_IsNumber(pid) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(dur)) return -1;
    if (!(fabs(ts->valuedouble) <= 1e15) || !(dur->valuedouble >= 0 && dur->valuedouble <= 1e15) ||
        !(pid->valuedouble >= 0 && pid->valuedouble <= 65535) || pid->valuedouble != (int)pid->valuedouble)
        return -2;
    const cJSON* args = cJSON_GetObjectItemCaseSensitive(e, "args");
    const cJSON* st = args ? cJSON_GetObjectItemCaseSensitive(args, "step") : NULL;
    if (!cJSON_IsNumber(st) || !(st->valuedouble >= 0 && st->valuedouble < 2147483648.0) ||
        st->valuedouble != (double)(long long)st->valuedouble)
        return -3;
    s->rank = (int)pid->valuedouble;
    s->step = (int)st->valuedouble;
    s->ts = ts->valuedouble;
    s->dur = dur->valuedouble;
    return 1;
}

/* The peer a p2p instant names ("send F3 -> r2", "recv B0 <- r1"), or -1. */
static int peer_from_event(const cJSON* e) {
    const cJSON* ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
    const cJSON* cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
    const cJSON* name = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "i") || !cJSON_IsString(cat) || strcmp(cat->valuestring, "p2p") ||
        !cJSON_IsString(name))
        return -1;
    char kind, arrow[3];
    int mb, peer, used = 0;
    if (sscanf(name->valuestring, "%*4[sendrcv] %c%d %2s r%d%n", &kind, &mb, arrow, &peer, &used) != 4 ||
        name->valuestring[used] != 0 || peer < 0 || peer > 65535)
        return -1;
    return peer;
}

/* err: "PATH: traceEvents[I] = EVENT: NEED" (the event as compact JSON, its first 200 characters) */
static void event_error(char* err, size_t errlen, const char* path, int i, const cJSON* e, const char* need) {
    char* js = cJSON_PrintUnformatted(e);
    snprintf(err, errlen, "%s: traceEvents[%d] = %.200s: %s", path, i, js ? js : "?", need);
    free(js);
}

int pp_trace_load(PpTraceSet* set, const char* path, char* err, size_t errlen) {
    size_t size;
    char* text = rr_read_file_err(path, &size, RR_MAX_JSONL, "a Chrome trace JSON file (RUN_DIR/trace-rank*.json)",
                                  err, errlen, "cannot read trace '%s': %s");
    if (!text) return -1;
    size_t off = 0;
    cJSON* root = rr_json_parse_whole(text, size, &off);
    if (!root) {
        int line = 1;
        for (size_t i = 0; i < off && i < size; i++) line += text[i] == '\n';
        snprintf(err, errlen, "%s:%d: not valid JSON (expected a Chrome trace: {\"traceEvents\": [...]} or [...])", path,
                 line);
        free(text);
        return -1;
    }
    free(text);
    cJSON* events = cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    if (!cJSON_IsArray(events)) {
        snprintf(err, errlen, "%s: no \"traceEvents\" array (expected a Chrome trace JSON)", path);
        cJSON_Delete(root);
        return -1;
    }
    // Validate every task span and step span before changing the set, so a bad file leaves it as it was.
    int i = 0, n_new = 0, n_new_steps = 0;
    const cJSON* e;
    cJSON_ArrayForEach(e, events) {
        PpTraceSpan s;
        int k = span_from_event(e, &s);
        if (k == -2 || k == -3) {
            event_error(err, errlen, path, i, e,
                        k == -2 ? "a task span needs a \"ts\" in -1e15 .. 1e15 (microseconds), a \"dur\" in 0 .. 1e15 "
                                  "and a rank \"pid\" in 0 .. 65535"
                                : "a task span's \"args\" need an integer \"mb\" in 0 .. 1048575, \"chunk\" in 0 .. "
                                  "65535 and \"stages\" in 1 .. 65536 above its pid");
            cJSON_Delete(root);
            return -1;
        }
        if (k < 0) {
            snprintf(err, errlen, "%s: traceEvents[%d] is a task span without numeric pid/ts/dur", path, i);
            cJSON_Delete(root);
            return -1;
        }
        PpTraceStep st;
        int q = step_from_event(e, &st);
        if (q < 0) {
            event_error(err, errlen, path, i, e,
                        q == -1   ? "a step span (\"cat\": \"step\") needs a numeric \"pid\", \"ts\" and \"dur\""
                        : q == -2 ? "a step span (\"cat\": \"step\") needs a \"ts\" in -1e15 .. 1e15 (microseconds), a "
                                    "\"dur\" in 0 .. 1e15 and an integer rank \"pid\" in 0 .. 65535"
                                  : "a step span (\"cat\": \"step\") needs \"args\": {\"step\": N} with N an integer in "
                                    "0 .. 2147483647");
            cJSON_Delete(root);
            return -1;
        }
        n_new += k;
        n_new_steps += q;
        i++;
    }
    /* sizes in 64 bits: a file holds at most RR_MAX_JSONL bytes, but the set grows over many files */
    if ((long long)set->n + n_new > 1000000000LL || (long long)set->n_steps + n_new_steps > 1000000000LL) {
        snprintf(err, errlen, "%s: more than 10^9 task or step spans in the traces given", path);
        cJSON_Delete(root);
        return -1;
    }
    if (set->n + n_new > set->cap) {
        set->cap = (set->n + n_new) * 2 + 16;
        set->spans = reallocCheck(set->spans, sizeof(PpTraceSpan) * (size_t)set->cap);
    }
    if (set->n_steps + n_new_steps > set->cap_steps) {
        set->cap_steps = (set->n_steps + n_new_steps) * 2 + 16;
        set->steps = reallocCheck(set->steps, sizeof(PpTraceStep) * (size_t)set->cap_steps);
    }
    if (set->n == 0 && !set->merged) set->max_peer = -1;
    cJSON_ArrayForEach(e, events) {
        PpTraceSpan s;
        if (span_from_event(e, &s) == 1) set->spans[set->n++] = s;
        PpTraceStep st;
        if (step_from_event(e, &st) == 1) set->steps[set->n_steps++] = st;
        int peer = peer_from_event(e);
        if (peer > set->max_peer) set->max_peer = peer;
    }
    if (!set->merged) set->merged = cJSON_CreateArray();
    while (events->child) cJSON_AddItemToArray(set->merged, cJSON_DetachItemFromArray(events, 0));
    cJSON_Delete(root);
    return 0;
}

void pp_trace_set_free(PpTraceSet* set) {
    free(set->spans);
    free(set->steps);
    cJSON_Delete(set->merged);
    memset(set, 0, sizeof *set);
}

char* pp_trace_set_json(const PpTraceSet* set) {
    cJSON* root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    cJSON* arr = set->merged ? cJSON_Duplicate(set->merged, 1) : cJSON_CreateArray();
    cJSON_AddItemToObject(root, "traceEvents", arr);
    char* s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ---- SVG ---------------------------------------------------------------------------------------- */

static int cmp_int(const void* a, const void* b) { return (*(const int*)a > *(const int*)b) - (*(const int*)a < *(const int*)b); }

static double nice_step(double range) {
    double raw = range / 8, mag = pow(10, floor(log10(raw)));
    const double mult[4] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (mult[i] * mag >= raw) return mult[i] * mag;
    return 10 * mag;
}

char* pp_trace_set_svg(const PpTraceSet* set, const char* title) {
    // Ranks that have task spans, in order; time range over all spans.
    int* ranks = mallocCheck(sizeof(int) * (set->n + 1));
    int nr = 0;
    double t0 = INFINITY, t1 = -INFINITY;
    for (int i = 0; i < set->n; i++) {
        ranks[nr++] = set->spans[i].rank;
        if (set->spans[i].ts < t0) t0 = set->spans[i].ts;
        if (set->spans[i].ts + set->spans[i].dur > t1) t1 = set->spans[i].ts + set->spans[i].dur;
    }
    qsort(ranks, nr, sizeof(int), cmp_int);
    int u = 0;
    for (int i = 0; i < nr; i++)
        if (i == 0 || ranks[i] != ranks[u - 1]) ranks[u++] = ranks[i];
    nr = u;
    if (set->n == 0) t0 = 0, t1 = 1;
    if (t1 <= t0) t1 = t0 + 1;
    double* busy = callocCheck(nr + 1, sizeof(double));
    const double left = 90, right = 80, top = 46, row_h = 22, gap = 6, width = 1400;
    const double plot_w = width - left - right;
    double height = top + nr * (row_h + gap) + 60;
    double scale = plot_w / (t1 - t0);
    TextBuf b = {0};
    tb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                  "font-family=\"monospace\" font-size=\"11\">\n", width, height, width, height);
    tb_printf(&b, "<style>.row{fill:#eeeeee;stroke:#cccccc}.F{fill:#4c78a8}.B{fill:#f58518}.W{fill:#54a24b}"
                  ".lbl{fill:#ffffff;font-size:9px}.axis{stroke:#444444}</style>\n");
    tb_printf(&b, "<text x=\"%.0f\" y=\"18\" font-size=\"13\">", left);
    tb_xml(&b, title ? title : "rrfp-mm trace");
    tb_printf(&b, "</text>\n");
    // Legend: kinds and what the grey background means.
    const char* legend[4][2] = {{"F", "forward"}, {"B", "backward"}, {"W", "weight grad"}, {"row", "idle"}};
    for (int i = 0; i < 4; i++) {
        double x = left + 420 + i * 130;
        tb_printf(&b, "<rect class=\"legend %s\" x=\"%.0f\" y=\"8\" width=\"14\" height=\"12\"/>"
                      "<text x=\"%.0f\" y=\"18\">%s</text>\n", legend[i][0], x, x + 18, legend[i][1]);
    }
    for (int i = 0; i < nr; i++) {
        double y = top + i * (row_h + gap);
        tb_printf(&b, "<rect class=\"row\" data-rank=\"%d\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.0f\"/>\n",
                  ranks[i], left, y, plot_w, row_h);
        tb_printf(&b, "<text x=\"8\" y=\"%.1f\">rank %d</text>\n", y + row_h * 0.7, ranks[i]);
    }
    for (int i = 0; i < set->n; i++) {
        const PpTraceSpan* s = &set->spans[i];
        int row = 0, lo = 0, hi = nr - 1;
        while (lo <= hi) {  // binary search the rank's row
            int mid = (lo + hi) / 2;
            if (ranks[mid] == s->rank) {
                row = mid;
                break;
            }
            if (ranks[mid] < s->rank) lo = mid + 1;
            else hi = mid - 1;
        }
        busy[row] += s->dur;
        double x = left + (s->ts - t0) * scale, w = s->dur * scale, y = top + row * (row_h + gap);
        tb_printf(&b, "<rect class=\"task %c\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\">"
                      "<title>rank %d %c%d chunk %d: %.3f-%.3f ms</title></rect>\n",
                  s->kind, x, y, w > 0.3 ? w : 0.3, row_h, s->rank, s->kind, s->mb, s->chunk, (s->ts - t0) / 1e3,
                  (s->ts + s->dur - t0) / 1e3);
        if (w >= 7.0 * (s->mb >= 100 ? 4 : s->mb >= 10 ? 3 : 2))
            tb_printf(&b, "<text class=\"lbl\" x=\"%.2f\" y=\"%.1f\">%c%d</text>\n", x + 2, y + row_h * 0.68, s->kind,
                      s->mb);
    }
    // Busy share per rank at the right end of each row; the rest of the span is idle.
    double total_busy = 0;
    for (int i = 0; i < nr; i++) {
        total_busy += busy[i];
        tb_printf(&b, "<text x=\"%.0f\" y=\"%.1f\">%4.1f%% busy</text>\n", left + plot_w + 6,
                  top + i * (row_h + gap) + row_h * 0.7, 100 * busy[i] / (t1 - t0));
    }
    // Time axis in ms.
    double axis_y = top + nr * (row_h + gap) + 4;
    double range_ms = (t1 - t0) / 1e3, step = nice_step(range_ms);
    tb_printf(&b, "<line class=\"axis\" x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\"/>\n", left, axis_y,
              left + plot_w, axis_y);
    for (int k = 0; k <= 100 && step > 0 && k * step <= range_ms * (1 + 1e-9); k++) { /* nice_step: ~10 ticks */
        double v = k * step;
        double x = left + v * 1e3 * scale;
        tb_printf(&b, "<line class=\"axis\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>"
                      "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                  x, axis_y, x, axis_y + 5, x, axis_y + 17, v);
    }
    tb_printf(&b, "<text x=\"%.0f\" y=\"%.1f\">time (ms); makespan %.3f ms, bubble %.1f%%</text>\n", left,
              axis_y + 36, range_ms, nr ? 100 * (1 - total_busy / (nr * (t1 - t0))) : 0.0);
    tb_printf(&b, "</svg>\n");
    free(ranks);
    free(busy);
    return b.s;
}
