/* report.c — the HTML report page of a run (see report.h): curves from metrics.jsonl, the recipe, the
 * pipeline timeline of the last traced step, and held-out questions with their images and answers. */
#include "runtime/report/report.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "data/image.h"
#include "data/shard.h"
#include "data/template.h"
#include "runtime/train/runckpt.h"
#include "engine/json.h"
#include "engine/util.h"
#include "runtime/trace/trace.h"
#include "runtime/train/generate.h"
#include "runtime/train/trained.h"
#include "text/tokenizer.h"

/* ---- a growing text buffer ------------------------------------------------------------------------ */

typedef struct {
    char* s;
    size_t n, cap;
} Html;

static void h_reserve(Html* h, size_t more) {
    if (h->n + more + 1 <= h->cap) return;
    size_t cap = h->cap ? h->cap : 4096;
    while (cap < h->n + more + 1) cap *= 2;
    h->s = reallocCheck(h->s, cap);
    h->cap = cap;
}

static void h_put(Html* h, const char* s, size_t n) {
    h_reserve(h, n);
    memcpy(h->s + h->n, s, n);
    h->n += n;
    h->s[h->n] = 0;
}

static void h_printf(Html* h, const char* fmt, ...) RR_PRINTF(2, 3);
static void h_printf(Html* h, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    h_reserve(h, (size_t)need);
    va_start(ap, fmt);
    vsnprintf(h->s + h->n, (size_t)need + 1, fmt, ap);
    va_end(ap);
    h->n += (size_t)need;
}

/* Text as HTML: the five special characters as references; other bytes as they are (UTF-8). */
static void h_text(Html* h, const char* s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': h_put(h, "&amp;", 5); break;
        case '<': h_put(h, "&lt;", 4); break;
        case '>': h_put(h, "&gt;", 4); break;
        case '"': h_put(h, "&quot;", 6); break;
        case '\'': h_put(h, "&#39;", 5); break;
        default: h_put(h, s, 1);
        }
    }
}

char* report_html_escape(const char* s) {
    Html h = {0};
    h_reserve(&h, 0);
    h.s[0] = 0;
    h_text(&h, s);
    return h.s;
}

char* report_base64(const unsigned char* d, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char* out = mallocCheck(4 * ((n + 2) / 3) + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        out[k++] = A[v >> 18 & 63];
        out[k++] = A[v >> 12 & 63];
        out[k++] = i + 1 < n ? A[v >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? A[v & 63] : '=';
    }
    out[k] = 0;
    return out;
}

static void warnf(const ReportConfig* c, const char* fmt, ...) RR_PRINTF(2, 3);
static void warnf(const ReportConfig* c, const char* fmt, ...) {
    if (!c->warn) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(c->warn, "rrfp-mm report: warning: ");
    vfprintf(c->warn, fmt, ap);
    fprintf(c->warn, "\n");
    va_end(ap);
}

/* ---- metrics.jsonl ------------------------------------------------------------------------------- */

typedef struct {
    int n;
    double *step, *loss, *lr, *gnorm, *tps, *bubble, *peak, *eval; /* bubble, eval (eval_loss): NAN when absent */
} Series;

static void series_free(Series* s) {
    free(s->step), free(s->loss), free(s->lr), free(s->gnorm), free(s->tps), free(s->bubble), free(s->peak);
    free(s->eval);
}

static double num_field(const cJSON* o, const char* k) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int metrics_read(const ReportConfig* c, const char* path, Series* s, char* err, size_t err_len) {
    memset(s, 0, sizeof *s);
    size_t len;
    char* text = rr_read_file(path, &len, RR_MAX_JSONL);
    if (!text) {
        char why[160];
        snprintf(err, err_len, "%s: %s (RUN_DIR must be a run folder: `rrfp-mm train` writes metrics.jsonl there)",
                 path, rr_read_file_why(errno, "a metrics.jsonl file", why, sizeof why));
        return -1;
    }
    int cap = 0, line = 0, rc = 0;
    for (char* p = text; p < text + len && rc == 0;) {
        char* nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        line++;
        char* next = p + l + (nl ? 1 : 0);
        int blank = 1;
        for (size_t i = 0; i < l; i++) blank &= p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
        if (!blank) {
            cJSON* o = rr_json_parse_whole(p, l, NULL); /* one object a line: text after it is damage */
            double st = num_field(o, "step"), lo = num_field(o, "loss");
            if ((!cJSON_IsObject(o) || !isfinite(st)) && !nl) {
                /* the last row without its newline: what a killed run or a full disk leaves (resume drops it
                 * too); the run is drawn without it */
                warnf(c, "%s:%d: a torn last row (%zu bytes, no newline: the run was killed or its disk filled "
                      "while writing it) is left out", path, line, l);
            } else if (!cJSON_IsObject(o) || !isfinite(st)) {
                snprintf(err, err_len, "%s:%d: not a metrics line (a JSON object with \"step\" and \"loss\", as "
                         "rrfp-mm train writes)", path, line);
                rc = -1;
            } else {
                /* a resumed run appends its rows after those of a lost attempt (metrics.h): the last row
                 * of a step counts, and a step's row supersedes the rows after it */
                while (s->n > 0 && s->step[s->n - 1] >= st) s->n--;
                if (s->n == cap) {
                    cap = cap ? 2 * cap : 256;
                    double** cols[] = {&s->step, &s->loss, &s->lr, &s->gnorm, &s->tps, &s->bubble, &s->peak, &s->eval};
                    for (int k = 0; k < 8; k++) *cols[k] = reallocCheck(*cols[k], sizeof(double) * (size_t)cap);
                }
                s->step[s->n] = st;
                s->loss[s->n] = lo;
                s->lr[s->n] = num_field(o, "lr");
                s->gnorm[s->n] = num_field(o, "grad_norm");
                s->tps[s->n] = num_field(o, "tokens_per_s");
                s->bubble[s->n] = num_field(o, "bubble");
                s->peak[s->n] = num_field(o, "peak_mem_mb");
                s->eval[s->n] = num_field(o, "eval_loss");
                s->n++;
            }
            cJSON_Delete(o);
        }
        p = next;
    }
    free(text);
    if (rc == 0 && s->n == 0) {
        snprintf(err, err_len, "%s: no steps (the run has not finished a step yet)", path);
        rc = -1;
    }
    if (rc != 0) series_free(s);
    return rc;
}

/* ---- curves -------------------------------------------------------------------------------------- */

static double nice_step(double range, int ticks) {
    double raw = range / ticks, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* The k-th tick of an axis from lo to hi at step st (a nice_step of hi - lo), NAN past the last one. Ticks are
 * counted, never accumulated: values far from zero with a range below their resolution (steps 1e17 and
 * 1e17 + 32 of a forged metrics.jsonl: 1e17 + 5 rounds back to 1e17) would add nothing, and a loop of
 * "v += st" drew ticks forever. At most CHART_TICKS_MAX (nice_step gives about `ticks` + 1). */
#define CHART_TICKS_MAX 24
static double chart_tick(double lo, double hi, double st, int k) {
    if (!(st > 0) || !isfinite(st) || k >= CHART_TICKS_MAX) return NAN;
    double v = ceil(lo / st) * st + k * st;
    return v <= hi ? v : NAN;
}

/* One line chart (class "curve" path, one point per finite value) of y against x. logy: log10 axis
 * when every value is positive and they span more than a factor 20. */
/* y2 (may be NULL): a second series over the same x, drawn as class "heldout" with a dot per finite
 * value (the held-out loss beside the training loss), with a legend naming both. */
static void chart2(Html* h, const char* id, const char* title, const double* x, const double* y, int n, int logy,
                   const double* y2, const char* name1, const char* name2) {
    const double W = 560, H = 260, L = 64, R = 16, T = 28, B = 36, pw = W - L - R, ph = H - T - B;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    int finite = 0, finite2 = 0;
    for (int i = 0; i < n; i++) {
        if (y2 && isfinite(y2[i]) && isfinite(x[i])) {
            if (y2[i] <= 0) logy = 0;
            finite2++;
        }
        if (!isfinite(y[i]) || !isfinite(x[i])) continue;
        if (y[i] <= 0) logy = 0;
        finite++;
    }
    if (!finite2) y2 = NULL;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (isfinite(y[i]) && isfinite(x[i])) lo = fmin(lo, y[i]), hi = fmax(hi, y[i]);
        if (y2 && isfinite(y2[i]) && isfinite(x[i])) lo = fmin(lo, y2[i]), hi = fmax(hi, y2[i]);
    }
    if (logy && hi < 20 * lo) logy = 0; /* less than ~1.3 decades: a linear axis reads better */
    for (int i = 0; i < n; i++) {
        if (y2 && isfinite(y2[i]) && isfinite(x[i])) {
            double v = logy ? log10(y2[i]) : y2[i];
            x0 = fmin(x0, x[i]), x1 = fmax(x1, x[i]), y0 = fmin(y0, v), y1 = fmax(y1, v);
        }
        if (!isfinite(y[i]) || !isfinite(x[i])) continue;
        double v = logy ? log10(y[i]) : y[i];
        x0 = fmin(x0, x[i]), x1 = fmax(x1, x[i]), y0 = fmin(y0, v), y1 = fmax(y1, v);
    }
    h_printf(h, "<figure class=\"chart\" id=\"%s\"><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %.0f %.0f\" "
             "width=\"%.0f\" height=\"%.0f\" role=\"img\"><title>", id, W, H, W, H);
    h_text(h, title);
    h_printf(h, "</title><text class=\"ct\" x=\"%.0f\" y=\"18\">", L);
    h_text(h, title);
    h_printf(h, "%s</text>\n", logy ? " (log scale)" : "");
    if (finite == 0) {
        h_printf(h, "<text x=\"%.0f\" y=\"%.0f\">no finite values</text></svg></figure>\n", L, T + ph / 2);
        return;
    }
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) {
        double d = fabs(y0) > 0 ? fabs(y0) * 0.05 : 1;
        y0 -= d, y1 += d;
    }
    double pad = (y1 - y0) * 0.04;
    y0 -= pad, y1 += pad;
    h_printf(h, "<rect class=\"plot\" x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\"/>\n", L, T, pw, ph);
    /* y ticks (log: decades and their 2x, 5x) */
    if (logy) {
        for (int e = (int)floor(y0) - 1; e <= (int)ceil(y1); e++)
            for (int m = 1; m <= 5; m += m == 1 ? 1 : 3) {
                double v = e + log10(m);
                if (v < y0 || v > y1) continue;
                double py = T + ph * (1 - (v - y0) / (y1 - y0));
                h_printf(h, "<line class=\"grid\" x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\"/><text class=\"yt\" "
                         "x=\"%.0f\" y=\"%.1f\">%g</text>\n", L, py, L + pw, py, L - 4, py + 4, pow(10, v));
            }
    } else {
        double st = nice_step(y1 - y0, 5), v;
        for (int t = 0; !isnan(v = chart_tick(y0, y1, st, t)); t++) {
            double py = T + ph * (1 - (v - y0) / (y1 - y0));
            h_printf(h, "<line class=\"grid\" x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\"/><text class=\"yt\" "
                     "x=\"%.0f\" y=\"%.1f\">%.4g</text>\n", L, py, L + pw, py, L - 4, py + 4, fabs(v) < st * 1e-6 ? 0 : v);
        }
    }
    double sx = nice_step(x1 - x0, 6), xv;
    for (int t = 0; !isnan(xv = chart_tick(x0, x1, sx, t)); t++) {
        double px = L + pw * (xv - x0) / (x1 - x0);
        h_printf(h, "<text class=\"xt\" x=\"%.1f\" y=\"%.0f\">%g</text>\n", px, T + ph + 16, xv);
    }
    h_printf(h, "<text class=\"xt\" x=\"%.0f\" y=\"%.0f\">step</text>\n", L + pw / 2, H - 4);
    /* the curve: at most ~1200 points (every k-th step and the last) */
    int k = n > 1200 ? (n + 1199) / 1200 : 1, first = 1;
    h_printf(h, "<path class=\"curve\" d=\"");
    for (int i = 0; i < n; i++) {
        if ((i % k && i != n - 1) || !isfinite(y[i]) || !isfinite(x[i])) continue;
        double v = logy ? log10(y[i]) : y[i];
        h_printf(h, "%s%.1f,%.1f", first ? "M" : " L", L + pw * (x[i] - x0) / (x1 - x0),
                 T + ph * (1 - (v - y0) / (y1 - y0)));
        first = 0;
    }
    h_printf(h, "\"/>\n");
    if (y2) {
        /* every held-out point (they are few: one per train.eval_every steps) */
        first = 1;
        h_printf(h, "<path class=\"heldout\" d=\"");
        for (int i = 0; i < n; i++) {
            if (!isfinite(y2[i]) || !isfinite(x[i])) continue;
            double v = logy ? log10(y2[i]) : y2[i];
            h_printf(h, "%s%.1f,%.1f", first ? "M" : " L", L + pw * (x[i] - x0) / (x1 - x0), T + ph * (1 - (v - y0) / (y1 - y0)));
            first = 0;
        }
        h_printf(h, "\"/>\n");
        for (int i = 0; i < n; i++) {
            if (!isfinite(y2[i]) || !isfinite(x[i])) continue;
            double v = logy ? log10(y2[i]) : y2[i];
            h_printf(h, "<circle class=\"heldout-dot\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\"><title>step %g: ", L + pw * (x[i] - x0) / (x1 - x0),
                     T + ph * (1 - (v - y0) / (y1 - y0)), x[i]);
            h_text(h, name2);
            h_printf(h, " %.4f</title></circle>\n", y2[i]);
        }
        h_printf(h, "<line class=\"curve\" x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\"/><text class=\"lg\" x=\"%.0f\" "
                 "y=\"%.0f\">", L + pw - 190, T + 12.0, L + pw - 172, T + 12.0, L + pw - 168, T + 16.0);
        h_text(h, name1);
        h_printf(h, "</text><line class=\"heldout\" x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\"/><text class=\"lg\" "
                 "x=\"%.0f\" y=\"%.0f\">", L + pw - 190, T + 28.0, L + pw - 172, T + 28.0, L + pw - 168, T + 32.0);
        h_text(h, name2);
        h_printf(h, "</text>\n");
    }
    h_printf(h, "</svg></figure>\n");
}

static void chart(Html* h, const char* id, const char* title, const double* x, const double* y, int n, int logy) {
    chart2(h, id, title, x, y, n, logy, NULL, NULL, NULL);
}

/* ---- recipe.ini ---------------------------------------------------------------------------------- */

typedef struct {
    int n;
    char (*sec)[64];
    char (*key)[64];
    char (*val)[1100];
} RecipeText;

static const char* recipe_text_get(const RecipeText* r, const char* sec, const char* key) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->sec[i], sec) && !strcmp(r->key[i], key)) return r->val[i];
    return NULL;
}

static void trim(char* s) {
    size_t a = 0, b = strlen(s);
    while (s[a] == ' ' || s[a] == '\t') a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r' || s[b - 1] == '\n')) b--;
    memmove(s, s + a, b - a);
    s[b - a] = 0;
}

/* Read "[section]" and "key = value" lines (recipe_print's form). Returns 1 read, 0 absent, -1 damaged. */
/* A file the report shows when it is there: the whole of `path` (at most cap bytes) into *text, *len; NULL with *rc
 * = 0 when there is no such file, -1 when it cannot be read (why says which; what: the kind of file) */
static char* optional_file_read(const char* path, size_t cap, const char* what, size_t* len, int* rc, char* why,
                                size_t why_len) {
    char* text = rr_read_file(path, len, cap);
    if (!text) {
        int e = errno;
        char w[160];
        snprintf(why, why_len, "%.1800s: %s", path, rr_read_file_why(e, what, w, sizeof w));
        *rc = e == ENOENT ? 0 : -1;
    }
    return text;
}

static int recipe_text_read(const char* path, RecipeText* r, char* why, size_t why_len) {
    memset(r, 0, sizeof *r);
    size_t len;
    int rc;
    char* text = optional_file_read(path, RR_MAX_INI, "a recipe .ini file", &len, &rc, why, why_len);
    if (!text) return rc;
    char line[2048], sec[64] = "";
    int ln = 0, cap = 0;
    for (char* p = text; p < text + len;) {
        char* nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        p += n + (nl != NULL);
        ln++;
        trim(line);
        if (!line[0] || line[0] == ';' || line[0] == '#') continue;
        if (line[0] == '[') {
            char* e = strchr(line, ']');
            if (!e || e - line - 1 >= (long)sizeof sec) goto bad;
            *e = 0;
            snprintf(sec, sizeof sec, "%.63s", line + 1);
            continue;
        }
        char* eq = strchr(line, '=');
        if (!eq || !sec[0]) goto bad;
        *eq = 0;
        if (r->n == cap) {
            cap = cap ? 2 * cap : 64;
            r->sec = reallocCheck(r->sec, sizeof *r->sec * (size_t)cap);
            r->key = reallocCheck(r->key, sizeof *r->key * (size_t)cap);
            r->val = reallocCheck(r->val, sizeof *r->val * (size_t)cap);
        }
        snprintf(r->sec[r->n], sizeof r->sec[0], "%.63s", sec);
        snprintf(r->key[r->n], sizeof r->key[0], "%.63s", line);
        snprintf(r->val[r->n], sizeof r->val[0], "%.1099s", eq + 1);
        trim(r->key[r->n]);
        trim(r->val[r->n]);
        r->n++;
        continue;
    bad:
        snprintf(why, why_len, "%.1800s:%d: expected \"[section]\" or \"key = value\"", path, ln);
        free(text);
        free(r->sec), free(r->key), free(r->val);
        memset(r, 0, sizeof *r);
        return -1;
    }
    free(text);
    return 1;
}

static void recipe_text_free(RecipeText* r) { free(r->sec), free(r->key), free(r->val); }

/* ---- traces -------------------------------------------------------------------------------------- */

static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* The sorted paths in dir whose names start with prefix and end with suffix (malloc'd, *n set). */
static char** list_files(const char* dir, const char* prefix, const char* suffix, int* n) {
    *n = 0;
    DIR* d = opendir(dir);
    if (!d) return NULL;
    char** v = NULL;
    int cap = 0;
    size_t lp = strlen(prefix), ls = strlen(suffix);
    for (struct dirent* de; (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l < lp + ls || strncmp(de->d_name, prefix, lp) || strcmp(de->d_name + l - ls, suffix)) continue;
        if (*n == cap) v = reallocCheck(v, sizeof(char*) * (size_t)(cap = cap ? 2 * cap : 8));
        size_t pl = strlen(dir) + l + 2;
        v[*n] = mallocCheck(pl);
        snprintf(v[*n], pl, "%s/%s", dir, de->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n) qsort(v, (size_t)*n, sizeof(char*), cmp_str);
    return v;
}

static void free_list(char** v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* The device (CUDA backend): its memory peak and, with runtime.profile, the GPU time and launches per op
 * kind: the mean of the rows after the first (warm-up), from metrics.jsonl's "device_peak_mb" and "profile". */
static void section_device(Html* h, const ReportConfig* c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", c->run_dir);
    size_t len;
    char* text = rr_read_file(path, &len, RR_MAX_JSONL);
    if (!text) return;
    double peak = NAN, used = NAN, ms[16] = {0}, launches[16] = {0};
    char names[16][24];
    int nk = 0, rows = 0, prof_rows = 0;
    for (char* p = text; p < text + len;) {
        char* nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        cJSON* o = cJSON_ParseWithLength(p, l);
        p += l + (nl ? 1 : 0);
        if (!cJSON_IsObject(o)) {
            cJSON_Delete(o);
            continue;
        }
        double pk = num_field(o, "device_peak_mb"), us = num_field(o, "device_used_mb");
        if (isfinite(pk)) peak = isfinite(peak) ? fmax(peak, pk) : pk;
        if (isfinite(us)) used = isfinite(used) ? fmax(used, us) : us;
        const cJSON* pr = cJSON_GetObjectItemCaseSensitive(o, "profile");
        if (cJSON_IsObject(pr) && rows++ > 0) { /* the first row is the warm-up */
            prof_rows++;
            for (const cJSON* k = pr->child; k; k = k->next) {
                int i = 0;
                while (i < nk && strcmp(names[i], k->string)) i++;
                if (i == nk) {
                    if (nk == 16) continue;
                    snprintf(names[nk++], sizeof names[0], "%s", k->string);
                }
                double v = num_field(k, "ms"), n = num_field(k, "launches");
                if (isfinite(v)) ms[i] += v;
                if (isfinite(n)) launches[i] += n;
            }
        }
        cJSON_Delete(o);
    }
    free(text);
    if (!isfinite(peak) && prof_rows == 0) return;
    h_printf(h, "<section id=\"device\"><h2>Device</h2>\n");
    if (isfinite(peak))
        h_printf(h, "<p>Device memory: peak <b>%.1f MiB</b> held by the backend; up to %.1f MiB in use on the device "
                    "(cudaMemGetInfo: the CUDA context and other processes included). Host memory is the summary's "
                    "peak.</p>\n", peak, used);
    if (prof_rows) {
        double total = 0;
        for (int i = 0; i < nk; i++) total += ms[i];
        h_printf(h, "<table class=\"profile\"><tr><th>op kind</th><th>GPU ms / step</th><th>share</th>"
                    "<th>launches / step</th></tr>\n");
        for (int i = 0; i < nk; i++) {
            h_printf(h, "<tr><td>");
            h_text(h, names[i]);
            h_printf(h, "</td><td>%.3f</td><td>%.1f%%</td><td>%.1f</td></tr>\n", ms[i] / prof_rows,
                     total > 0 ? 100 * ms[i] / total : 0.0, launches[i] / prof_rows);
        }
        h_printf(h, "<tr><td>total</td><td>%.3f</td><td></td><td></td></tr></table>\n", total / prof_rows);
        h_printf(h, "<p class=\"note\">runtime.profile: mean of %d steps after the first; each op timed by CUDA events "
                    "on its stream (ops of different streams may overlap).</p>\n", prof_rows);
    }
    h_printf(h, "</section>\n");
}

/* The timeline of the last step in RUN_DIR/trace-rank*.json: a step ends with the optimiser after every
 * task of every rank, so the last step's tasks are those from the earliest start among the ranks' last step
 * spans ("step N", cat "step") on. Traces without step spans: from the last start of the lowest rank's F of
 * microbatch 0 (the first task of a step in the data's order; adaptive may run another microbatch first). */
static void section_timeline(Html* h, const ReportConfig* c, const Series* m) {
    int n;
    char** files = list_files(c->run_dir, "trace-rank", ".json", &n);
    h_printf(h, "<section id=\"timeline\"><h2>Pipeline timeline</h2>\n");
    double bsum = 0;
    int bn = 0;
    for (int i = 0; i < m->n; i++)
        if (isfinite(m->bubble[i])) bsum += m->bubble[i], bn++;
    if (bn) h_printf(h, "<p>Bubble (metrics.jsonl, mean of %d steps): <b>%.1f%%</b>.</p>\n", bn, 100 * bsum / bn);
    if (n == 0) {
        h_printf(h, "<p class=\"note\">No trace in this run folder (pipelined runs write trace-rank*.json with "
                    "<code>--set runtime.trace=true</code>).</p></section>\n");
        free_list(files, n);
        return;
    }
    PpTraceSet set = {0};
    char err[1024];
    for (int i = 0; i < n; i++)
        if (pp_trace_load(&set, files[i], err, sizeof err) != 0) {
            warnf(c, "timeline left out: %s", err);
            h_printf(h, "<p class=\"note\">Timeline left out: ");
            h_text(h, err);
            h_printf(h, "</p></section>\n");
            pp_trace_set_free(&set);
            free_list(files, n);
            return;
        }
    double start = -INFINITY;
    int min_rank = 1 << 30;
    for (int i = 0; i < set.n; i++) min_rank = set.spans[i].rank < min_rank ? set.spans[i].rank : min_rank;
    /* each rank's last step span (pid = rank), then the earliest of them */
    int n_ranks_seen = 0;
    double last_by_rank[256];
    int rank_of[256];
    const cJSON* ev;
    cJSON_ArrayForEach(ev, (const cJSON*)set.merged) {
        const cJSON* cat = cJSON_GetObjectItemCaseSensitive(ev, "cat");
        const cJSON* ph = cJSON_GetObjectItemCaseSensitive(ev, "ph");
        const cJSON* pid = cJSON_GetObjectItemCaseSensitive(ev, "pid");
        const cJSON* ts = cJSON_GetObjectItemCaseSensitive(ev, "ts");
        if (!cJSON_IsString(cat) || strcmp(cat->valuestring, "step") || !cJSON_IsString(ph) || strcmp(ph->valuestring, "X") ||
            !cJSON_IsNumber(pid) || !(pid->valuedouble >= 0 && pid->valuedouble <= 65535) || !cJSON_IsNumber(ts) ||
            !isfinite(ts->valuedouble))
            continue; /* not a step span, or a rank out of the trace format's range (never cast) */
        int k = 0;
        while (k < n_ranks_seen && rank_of[k] != (int)pid->valuedouble) k++;
        if (k == n_ranks_seen) {
            if (n_ranks_seen == (int)(sizeof rank_of / sizeof *rank_of)) continue; /* more ranks: the first 256 decide */
            rank_of[n_ranks_seen] = (int)pid->valuedouble, last_by_rank[n_ranks_seen++] = -INFINITY;
        }
        if (ts->valuedouble > last_by_rank[k]) last_by_rank[k] = ts->valuedouble;
    }
    if (n_ranks_seen > 0) {
        start = INFINITY;
        for (int k = 0; k < n_ranks_seen; k++) start = last_by_rank[k] < start ? last_by_rank[k] : start;
    } else {
        for (int i = 0; i < set.n; i++) {
            const PpTraceSpan* s = &set.spans[i];
            if (s->rank == min_rank && s->kind == 'F' && s->mb == 0 && s->chunk == 0 && s->ts > start) start = s->ts;
        }
    }
    PpTraceSet last = {0};
    last.spans = mallocCheck(sizeof(PpTraceSpan) * (size_t)(set.n + 1));
    for (int i = 0; i < set.n; i++)
        if (set.spans[i].ts >= start) last.spans[last.n++] = set.spans[i];
    last.cap = last.n;
    if (last.n == 0) {
        h_printf(h, "<p class=\"note\">The traces hold no task spans.</p></section>\n");
    } else {
        char title[256];
        snprintf(title, sizeof title, "last traced step: %d tasks from %d rank file%s", last.n, n, n > 1 ? "s" : "");
        char* svg = pp_trace_set_svg(&last, title);
        const char* body = strstr(svg, "<svg");
        h_printf(h, "<div class=\"timeline\">%s</div>\n", body ? body : svg);
        free(svg);
    }
    h_printf(h, "</section>\n");
    free(last.spans);
    pp_trace_set_free(&set);
    free_list(files, n);
}

/* ---- held-out questions -------------------------------------------------------------------------- */

typedef struct {
    int64_t index;
    int correct;
    int32_t* pred;
    int n_pred;
} Prediction;

static void predictions_free(Prediction* p, int n) {
    for (int i = 0; i < n; i++) free(p[i].pred);
    free(p);
}

/* Returns 1 read, 0 absent, -1 damaged (why names the file and line). */
static int predictions_read(const char* path, Prediction** out, int* n, char* why, size_t why_len) {
    *out = NULL, *n = 0;
    size_t len;
    int rc;
    char* text = optional_file_read(path, RR_MAX_JSONL, "a predictions.jsonl file", &len, &rc, why, why_len);
    if (!text) return rc;
    int cap = 0, line = 0;
    rc = 1;
    Prediction* v = NULL;
    for (char* p = text; p < text + len && rc == 1;) {
        char* nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        line++;
        if (l > 0) {
            cJSON* o = rr_json_parse_whole(p, l, NULL);
            const cJSON *si = cJSON_GetObjectItemCaseSensitive(o, "sample_index"),
                        *co = cJSON_GetObjectItemCaseSensitive(o, "correct"),
                        *pr = cJSON_GetObjectItemCaseSensitive(o, "predicted");
            if (!cJSON_IsNumber(si) || !(si->valuedouble >= 0 && si->valuedouble <= 9007199254740992.0) ||
                si->valuedouble != floor(si->valuedouble) || !cJSON_IsBool(co) || !cJSON_IsArray(pr)) {
                snprintf(why, why_len, "%.1800s:%d: expected {\"sample_index\": N, \"correct\": true|false, \"predicted\": "
                         "[token ids]} (rrfp-mm eval --predictions)", path, line);
                rc = -1;
            } else {
                if (*n == cap) v = reallocCheck(v, sizeof *v * (size_t)(cap = cap ? 2 * cap : 256));
                Prediction* q = &v[(*n)++];
                q->index = (int64_t)si->valuedouble;
                q->correct = cJSON_IsTrue(co);
                q->n_pred = cJSON_GetArraySize(pr);
                q->pred = mallocCheck(sizeof(int32_t) * (size_t)(q->n_pred + 1));
                int k = 0;
                for (const cJSON* it = pr->child; it; it = it->next) q->pred[k++] = cJSON_IsNumber(it) ? it->valueint : -1;
            }
            cJSON_Delete(o);
        }
        p += l + (nl ? 1 : 0);
    }
    free(text);
    if (rc != 1) {
        predictions_free(v, *n);
        *out = NULL, *n = 0;
        return -1;
    }
    *out = v;
    return 1;
}

/* The image re-encoded to fit a 128 x 128 box (JPEG quality 85) as a data URI; NULL with why. */
static char* image_data_uri(JpegCodec* jc, const uint8_t* jpg, size_t n, char* why, size_t why_len) {
    int w, h;
    if (image_read_header(jc, jpg, n, &w, &h, why, why_len) != 0) return NULL;
    const int box = 128;
    double s = fmin(1.0, fmin((double)box / w, (double)box / h));
    int ow = (int)lround(w * s), oh = (int)lround(h * s);
    if (ow < 1) ow = 1;
    if (oh < 1) oh = 1;
    int dw, dh;
    uint8_t* rgb = image_decode_rgb(jc, jpg, n, image_dct_scale(w, h, ow, oh), &dw, &dh, why, why_len);
    if (!rgb) return NULL;
    float* f = mallocCheck(sizeof(float) * 3 * (size_t)ow * (size_t)oh);
    image_resize_bilinear(rgb, dw, dh, f, ow, oh);
    for (size_t i = 0; i < 3 * (size_t)ow * (size_t)oh; i++) {
        float v = f[i] + 0.5f;
        rgb[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    free(f);
    size_t len;
    uint8_t* out = jpeg_encode_rgb(jc, rgb, ow, oh, 85, 0, &len);
    free(rgb);
    char* b64 = report_base64(out, len);
    free(out);
    size_t bl = strlen(b64);
    char* uri = mallocCheck(bl + 32);
    memcpy(uri, "data:image/jpeg;base64,", 23);
    memcpy(uri + 23, b64, bl + 1);
    free(b64);
    return uri;
}

/* Decode ids[a, b) skipping image and end-of-text tokens; valid UTF-8 (a byte-level BPE's answer can end
 * inside a character, an untrained model's anywhere: generate_utf8_clean), trimmed. */
static char* decode_span(const Tokenizer* tok, const int32_t* ids, int a, int b, int image_id, int eot_id) {
    int32_t* v = mallocCheck(sizeof(int32_t) * (size_t)(b - a + 1));
    int k = 0;
    for (int i = a; i < b; i++)
        if (ids[i] >= 0 && ids[i] != image_id && ids[i] != eot_id && ids[i] < tokenizer_vocab_size(tok)) v[k++] = ids[i];
    size_t len;
    char* raw = tokenizer_decode(tok, v, k, &len);
    free(v);
    char* s = generate_utf8_clean(raw ? raw : "", raw ? len : 0);
    free(raw);
    trim(s);
    return s;
}

typedef struct {
    int n;
    char** paths;
    Shard* shards;
    int64_t* base; /* (n+1) first global sample index of each shard, as the loader numbers them */
} ShardSet;

static void shard_set_close(ShardSet* s) {
    for (int i = 0; i < s->n; i++) shard_close(&s->shards[i]);
    free_list(s->paths, s->n);
    free(s->shards), free(s->base);
    memset(s, 0, sizeof *s);
}

/* data.eval_shards: one .rrs file or a folder of them, in name order (the loader's global numbering). */
static int shard_set_open(const char* path, ShardSet* s, char* why, size_t why_len) {
    memset(s, 0, sizeof *s);
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, why_len, "data.eval_shards '%s': %s", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        s->paths = list_files(path, "", ".rrs", &s->n);
    } else {
        s->paths = mallocCheck(sizeof(char*));
        s->paths[0] = strdup(path);
        s->n = 1;
    }
    if (s->n == 0) {
        snprintf(why, why_len, "data.eval_shards '%s' holds no .rrs shard", path);
        return -1;
    }
    s->shards = callocCheck((size_t)s->n, sizeof(Shard));
    s->base = callocCheck((size_t)s->n + 1, sizeof(int64_t));
    for (int i = 0; i < s->n; i++) {
        if (shard_open(s->paths[i], &s->shards[i], why, why_len) != 0) {
            for (int j = 0; j < i; j++) shard_close(&s->shards[j]);
            free_list(s->paths, s->n);
            free(s->shards), free(s->base);
            memset(s, 0, sizeof *s);
            return -1;
        }
        s->base[i + 1] = s->base[i] + (int64_t)s->shards[i].n;
    }
    return 0;
}

/* An any-resolution image's tiles (docs/anyres.md): the padded canvas of its tile grid with the image resized and
 * pasted into it (the thumbnail's data URI), the tiles' outlines and the unpadded features' region (a feature is a
 * patch of the canvas), and a caption: the grid, the tower images (the base image and the tiles), the original
 * size and the LM positions. The grid is the shard index's (what the loader plans with); the resize and paste are
 * anyres_layout's over the shard's pinpoints, which must pick the same grid. */
static void card_anyres_tiles(Html* h, const ReportConfig* c, const Shard* sh, const ShardImage* im, const char* uri,
                              int64_t index, int k) {
    const ShardInfo* in = &sh->info;
    int tile = (int)in->prep_size, p = (int)in->patch;
    AnyresLayout l, g;
    char why[512];
    if (anyres_layout_grid(im->h, im->w, im->grid_h, im->grid_w, tile, p, ANYRES_SELECT_DEFAULT, &g, why, sizeof why) != 0 ||
        anyres_layout(im->h, im->w, &in->pins, tile, p, ANYRES_SELECT_DEFAULT, &l, why, sizeof why) != 0 ||
        (l.rows != g.rows || l.cols != g.cols ? snprintf(why, sizeof why, "the index's %d x %d tile grid is not the "
                                                         "pinpoints' %d x %d", g.rows, g.cols, l.rows, l.cols) : 0)) {
        warnf(c, "held-out sample %lld: image %d: tiles left out: %s", (long long)index, k + 1, why);
        h_printf(h, "<p class=\"note\">image %d tiles: ", k + 1);
        h_text(h, why);
        h_printf(h, "</p>");
        return;
    }
    int cw = l.cols * tile, ch = l.rows * tile, box = 128;
    double s = (double)box / (cw > ch ? cw : ch);
    h_printf(h, "<figure class=\"tiles\" data-image=\"%d\" data-orig-w=\"%d\" data-orig-h=\"%d\" data-rows=\"%d\" "
                "data-cols=\"%d\" data-tower-images=\"%d\" data-positions=\"%d\" data-feat-h=\"%d\" data-feat-w=\"%d\">"
                "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%.0f\" height=\"%.0f\">"
                "<rect class=\"pad\" x=\"0\" y=\"0\" width=\"%d\" height=\"%d\"/>",
             k + 1, im->w, im->h, l.rows, l.cols, l.n_tiles, l.n_positions, l.feat_h, l.feat_w, cw, ch, cw * s, ch * s, cw, ch);
    if (uri)
        h_printf(h, "<image href=\"%s\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" preserveAspectRatio=\"none\"/>", uri,
                 l.pad_left, l.pad_top, l.resized_w, l.resized_h);
    for (int r = 0; r < l.rows; r++)
        for (int q = 0; q < l.cols; q++)
            h_printf(h, "<rect class=\"tile\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>", q * tile, r * tile, tile, tile);
    h_printf(h, "<rect class=\"unpad\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/></svg>", l.feat_left * p,
             l.feat_top * p, l.feat_w * p, l.feat_h * p);
    h_printf(h, "<figcaption>%d x %d tiles of %d px + the base image = %d tower images; original %d x %d px; %d positions "
                "(%d base, %d x %d unpadded, %d image_newline)</figcaption></figure>",
             l.rows, l.cols, tile, l.n_tiles, im->w, im->h, l.n_positions, l.base, l.feat_h, l.feat_w, l.feat_h);
}

/* One card: image(s), question, reference and the model's answer. */
static void card(Html* h, const ReportConfig* c, JpegCodec* jc, const Tokenizer* tok, const ShardSet* ss,
                 ZSTD_DCtx* dctx, const Prediction* p, const Prediction* zs, int image_id, int eot_id) {
    char why[1024] = "";
    int si = -1;
    for (int i = 0; i < ss->n; i++)
        if (p->index >= ss->base[i] && p->index < ss->base[i + 1]) si = i;
    ShardSample smp;
    memset(&smp, 0, sizeof smp);
    int ok = si >= 0;
    if (si < 0) snprintf(why, sizeof why, "sample_index %lld is not in data.eval_shards (%lld samples)",
                         (long long)p->index, (long long)ss->base[ss->n]);
    else if (shard_read_sample(&ss->shards[si], (uint64_t)(p->index - ss->base[si]), dctx, &smp, why, sizeof why) != 0) {
        char w2[1024];
        snprintf(w2, sizeof w2, "%s sample %lld: %s", ss->paths[si], (long long)(p->index - ss->base[si]), why);
        snprintf(why, sizeof why, "%s", w2);
        ok = 0;
    }
    h_printf(h, "<div class=\"card %s\" data-sample=\"%lld\">", p->correct ? "right" : "wrong", (long long)p->index);
    if (!ok) {
        warnf(c, "held-out sample %lld left out: %s", (long long)p->index, why);
        h_printf(h, "<p class=\"note\">");
        h_text(h, why);
        h_printf(h, "</p></div>\n");
        return;
    }
    const Shard* sh = &ss->shards[si];
    const ShardEntry* ent = &sh->entries[p->index - ss->base[si]];
    for (int k = 0; k < smp.n_images; k++) {
        char* uri = image_data_uri(jc, smp.jpeg[k], smp.jpeg_len[k], why, sizeof why);
        if (uri) {
            h_printf(h, "<img src=\"%s\" alt=\"held-out sample %lld, image %d\">", uri, (long long)p->index, k + 1);
        } else {
            warnf(c, "held-out sample %lld: image %d: %s", (long long)p->index, k + 1, why);
            h_printf(h, "<p class=\"note\">image %d: ", k + 1);
            h_text(h, why);
            h_printf(h, "</p>");
        }
        if (sh->info.prep == IMAGE_PREP_ANYRES && (uint32_t)k < ent->n_images)
            card_anyres_tiles(h, c, sh, &sh->images[ent->image0 + (uint32_t)k], uri, p->index, k);
        free(uri);
    }
    /* question: the prompt after the last image up to the first answer token; reference: that answer */
    int first = -1, q0 = 0;
    for (int i = 0; i < smp.n_tokens && first < 0; i++) {
        if (smp.mask[i]) first = i;
        else if (smp.ids[i] == image_id) q0 = i + 1;
    }
    int a1 = first;
    while (a1 >= 0 && a1 < smp.n_tokens && smp.mask[a1]) a1++;
    char* q = decode_span(tok, smp.ids, q0, first < 0 ? smp.n_tokens : first, image_id, eot_id);
    char* ref = first < 0 ? strdup("") : decode_span(tok, smp.ids, first, a1, image_id, eot_id);
    /* the model's answer: its argmax at each answer position, up to its first end-of-text */
    int np = 0;
    while (np < p->n_pred && p->pred[np] != eot_id) np++;
    char* ans = decode_span(tok, p->pred, 0, np, -2, eot_id);
    size_t ql = strlen(q);
    if (ql >= 10 && !strcmp(q + ql - 10, "ASSISTANT:")) q[ql - 10] = 0, trim(q); /* the prompt template's tail */
    if (!strncmp(q, "USER:", 5)) memmove(q, q + 5, strlen(q + 5) + 1), trim(q);
    h_printf(h, "<p class=\"q\">");
    h_text(h, q);
    h_printf(h, "</p><p class=\"ref\">reference: <b>");
    h_text(h, ref);
    h_printf(h, "</b></p><p class=\"ans\">model: <b>");
    h_text(h, ans[0] ? ans : "(nothing)");
    h_printf(h, "</b> %s</p>", p->correct ? "&#10003;" : "&#10007;");
    if (zs) { /* the same question before fine-tuning (RUN_DIR/zero-shot.jsonl) */
        int nz = 0;
        while (nz < zs->n_pred && zs->pred[nz] != eot_id) nz++;
        char* za = decode_span(tok, zs->pred, 0, nz, -2, eot_id);
        h_printf(h, "<p class=\"zs\">zero-shot: <b>");
        h_text(h, za[0] ? za : "(nothing)");
        h_printf(h, "</b> %s</p>", zs->correct ? "&#10003;" : "&#10007;");
        free(za);
    }
    h_printf(h, "</div>\n");
    free(q), free(ref), free(ans);
    shard_sample_free(&smp);
}

static int prediction_index_cmp(const void* a, const void* b) {
    const Prediction *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The held-out questions' section ends without cards: the warning, and a note saying why (after lead) */
static void cards_left_out(Html* h, const ReportConfig* c, const char* lead, const char* why) {
    warnf(c, "held-out question cards left out: %s", why);
    h_printf(h, "<p class=\"note\">%s", lead);
    h_text(h, why);
    h_printf(h, "</p></section>\n");
}

static void section_questions(Html* h, const ReportConfig* c, const RecipeText* rt, int have_recipe) {
    char path[4096], why[2048];
    if (c->predictions) snprintf(path, sizeof path, "%s", c->predictions);
    else snprintf(path, sizeof path, "%s/predictions.jsonl", c->run_dir);
    h_printf(h, "<section id=\"questions\"><h2>Held-out questions</h2>\n");
    /* the zero-shot eval (the published model before fine-tuning: rrfp-mm eval --checkpoint IMPORT
     * --predictions RUN_DIR/zero-shot.jsonl), shown beside the fine-tuned one */
    char zpath[4096], zwhy[2048];
    snprintf(zpath, sizeof zpath, "%s/zero-shot.jsonl", c->run_dir);
    Prediction* zp = NULL;
    int nz = 0, zr = predictions_read(zpath, &zp, &nz, zwhy, sizeof zwhy), zright = 0;
    if (zr < 0) warnf(c, "the zero-shot eval left out: %s", zwhy);
    for (int i = 0; i < nz; i++) zright += zp[i].correct;
    Prediction* pr;
    int n;
    int r = predictions_read(path, &pr, &n, why, sizeof why);
    if (zr > 0)
        h_printf(h, "<p class=\"acc zero-shot\">Zero-shot (before fine-tuning, zero-shot.jsonl): greedy exact match "
                    "on <b>%d</b> held-out questions: <b>%.1f%%</b> (%d right, %d wrong).</p>\n", nz,
                 nz ? 100.0 * zright / nz : 0.0, zright, nz - zright);
    if (r <= 0) {
        if (r < 0) warnf(c, "held-out questions left out: %s", why);
        h_printf(h, "<p class=\"note\">");
        if (r < 0) h_text(h, why);
        else h_printf(h, "Not evaluated: no predictions.jsonl (<code>rrfp-mm eval RECIPE --checkpoint latest "
                         "--predictions RUN_DIR/predictions.jsonl</code> writes it).");
        h_printf(h, "</p></section>\n");
        predictions_free(zp, nz);
        return;
    }
    int right = 0;
    for (int i = 0; i < n; i++) right += pr[i].correct;
    h_printf(h, "<p class=\"acc\">%s on <b>%d</b> held-out questions: <b>%.1f%%</b> (%d right, "
                "%d wrong).</p>\n", zr > 0 ? "Fine-tuned (predictions.jsonl): greedy exact match" : "Greedy exact match", n,
             n ? 100.0 * right / n : 0.0, right, n - right);
    /* each question's zero-shot prediction (matched by sample_index: the same held-out shards) */
    const Prediction** zof = callocCheck((size_t)n + 1, sizeof *zof);
    int both = 0, gained = 0, lost = 0, matched = 0;
    /* an empty zero-shot.jsonl (zr 1, nz 0) has no array: qsort and bsearch take none, even of 0 elements */
    if (zr > 0 && nz > 0) qsort(zp, (size_t)nz, sizeof *zp, prediction_index_cmp);
    for (int i = 0; i < n && zr > 0 && nz > 0; i++) {
        Prediction key = {.index = pr[i].index};
        zof[i] = bsearch(&key, zp, (size_t)nz, sizeof *zp, prediction_index_cmp);
        if (!zof[i]) continue;
        matched++;
        both += pr[i].correct && zof[i]->correct;
        gained += pr[i].correct && !zof[i]->correct;
        lost += !pr[i].correct && zof[i]->correct;
    }
    if (zr > 0)
        h_printf(h, "<p class=\"acc compare\">Of %d questions in both: right in both %d, right only after fine-tuning "
                    "%d, right only before %d.</p>\n", matched, both, gained, lost);
    const char* source = have_recipe ? recipe_text_get(rt, "data", "source") : NULL;
    const char* shards = have_recipe ? recipe_text_get(rt, "data", "eval_shards") : NULL;
    const char* tokp = have_recipe ? recipe_text_get(rt, "data", "tokenizer") : NULL;
    if (source && !strcmp(source, "synthetic")) {
        h_printf(h, "<p class=\"note\">Synthetic source: its held-out samples are generated in memory, there are "
                    "no images or texts to show.</p></section>\n");
        goto out;
    }
    if (!shards || !shards[0] || !tokp || !tokp[0]) {
        snprintf(why, sizeof why, "%.1800s/recipe.ini %s: the cards need data.eval_shards and data.tokenizer", c->run_dir,
                 have_recipe ? "does not name them" : "is missing");
        cards_left_out(h, c, "", why);
        goto out;
    }
    ShardSet ss;
    Tokenizer* tok = NULL;
    if (shard_set_open(shards, &ss, why, sizeof why) != 0 || !(tok = tokenizer_load(tokp, why, sizeof why))) {
        if (!tok && ss.n) shard_set_close(&ss);
        cards_left_out(h, c, "Cards left out: ", why);
        goto out;
    }
    /* the end of an answer: the held-out shards' chat template's (their record, data/shard.h) */
    int image_id = tokenizer_token_id(tok, "<image>");
    int eot_id = template_stop_id((TemplateKind)ss.shards[0].info.chat_template, tok);
    /* up to questions/2 right and wrong ones each (the rest from the other kind), spread over the file */
    int want = c->questions > 0 ? c->questions : 24;
    int want_w = want / 2 < n - right ? want / 2 : n - right;
    int want_r = want - want_w < right ? want - want_w : right;
    if (want_r + want_w < want) want_w = want - want_r < n - right ? want - want_r : n - right;
    JpegCodec* jc = jpeg_codec_new();
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    for (int kind = 1; kind >= 0; kind--) {
        int total = kind ? right : n - right, take = kind ? want_r : want_w;
        h_printf(h, "<h3>%s (%d of %d shown)</h3>\n<div class=\"cards\">\n", kind ? "Right" : "Wrong", take, total);
        int seen = 0, shown = 0;
        for (int i = 0; i < n && shown < take; i++) {
            if (pr[i].correct != kind) continue;
            /* the k-th shown is the floor(k * total / take)-th of its kind */
            if (seen++ != (int)((int64_t)shown * total / take)) continue;
            card(h, c, jc, tok, &ss, dctx, &pr[i], zof[i], image_id, eot_id);
            shown++;
        }
        h_printf(h, "</div>\n");
    }
    ZSTD_freeDCtx(dctx);
    jpeg_codec_free(jc);
    tokenizer_free(tok);
    shard_set_close(&ss);
    h_printf(h, "</section>\n");
out:
    predictions_free(pr, n);
    predictions_free(zp, nz);
    free(zof);
}

/* ---- the page ------------------------------------------------------------------------------------ */

static const char* CSS =
    "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1240px}"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}"
    "h3{font-size:15px}code{background:#f3f3f3;padding:0 3px}.note{color:#777}"
    ".summary td,.recipe td{padding:2px 10px 2px 0}.recipe th{text-align:left;padding-top:8px;color:#555}"
    ".charts{display:flex;flex-wrap:wrap;gap:12px}.chart{margin:0}.chart svg{max-width:100%;height:auto}"
    ".plot{fill:#fafafa;stroke:#bbb}.grid{stroke:#e4e4e4}.curve{fill:none;stroke:#2f6db5;stroke-width:1.4}"
    ".heldout{fill:none;stroke:#d2691e;stroke-width:1.4}.heldout-dot{fill:#d2691e}.lg{font-size:11px;fill:#444}"
    ".ct{font-size:13px;font-weight:600}.yt{font-size:10px;text-anchor:end;fill:#555}"
    ".xt{font-size:10px;text-anchor:middle;fill:#555}"
    ".timeline svg{max-width:100%;height:auto;border:1px solid #ddd}"
    ".cards{display:flex;flex-wrap:wrap;gap:10px}.card{width:200px;border:1px solid #ccc;border-radius:6px;"
    "padding:8px;font-size:13px}.card.right{border-left:5px solid #3a9a4a}.card.wrong{border-left:5px solid #c8412f}"
    ".card img{width:128px;image-rendering:pixelated;display:block;margin-bottom:6px}.card p{margin:3px 0}"
    ".card .zs{color:#666}"
    ".tiles{margin:0 0 6px}.tiles svg{display:block}.tiles .pad{fill:#000}.tiles .tile{fill:none;stroke:#f0c020;"
    "stroke-width:1;vector-effect:non-scaling-stroke}.tiles .unpad{fill:none;stroke:#3a9a4a;stroke-width:1.5;"
    "stroke-dasharray:3 2;vector-effect:non-scaling-stroke}.tiles figcaption{font-size:11px;color:#555}";

int report_write(const ReportConfig* c, char* out_path, size_t out_len, char* err, size_t err_len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", c->run_dir);
    Series m;
    if (metrics_read(c, path, &m, err, err_len) != 0) return -1;
    RecipeText rt;
    char why[2048];
    snprintf(path, sizeof path, "%s/recipe.ini", c->run_dir);
    int have_recipe = recipe_text_read(path, &rt, why, sizeof why);
    if (have_recipe < 0) warnf(c, "recipe left out: %s", why);

    Html h = {0};
    h_printf(&h, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta name=\"viewport\" content=\"width=device-width\"><title>rrfp-mm report: ");
    h_text(&h, c->run_dir);
    h_printf(&h, "</title><style>%s</style></head><body>\n<h1>rrfp-mm run <code>", CSS);
    h_text(&h, c->run_dir);
    h_printf(&h, "</code></h1>\n");

    /* summary */
    int k = m.n / 10 > 0 ? m.n / 10 : 1;
    double a = 0, b = 0;
    for (int i = 0; i < k; i++) a += m.loss[i], b += m.loss[m.n - k + i];
    double* t = mallocCheck(sizeof(double) * (size_t)m.n);
    int nt = 0;
    double peak = 0;
    for (int i = 0; i < m.n; i++) {
        if (isfinite(m.tps[i])) t[nt++] = m.tps[i];
        if (isfinite(m.peak[i]) && m.peak[i] > peak) peak = m.peak[i];
    }
    for (int i = 1; i < nt; i++) /* insertion sort: a median of a few thousand values */
        for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    h_printf(&h, "<table class=\"summary\"><tr><td>steps</td><td>%g .. %g (%d lines)</td></tr>"
                 "<tr><td>loss</td><td>%.4f (mean of the first %d steps) &rarr; %.4f (last %d)</td></tr>"
                 "<tr><td>median throughput</td><td>%.0f tokens/s</td></tr><tr><td>peak host memory (RSS)</td><td>%.1f MiB</td></tr>"
                 "", m.step[0], m.step[m.n - 1], m.n, a / k, k, b / k, k, nt ? t[nt / 2] : 0.0, peak);
    free(t);
    /* what shaped the training data: the newest checkpoint's record (runtime/train/trained.h) */
    char root[4200], ck[4400];
    const char* cdir = have_recipe > 0 ? recipe_text_get(&rt, "checkpoint", "dir") : NULL;
    if (cdir && cdir[0]) snprintf(root, sizeof root, "%s", cdir);
    else snprintf(root, sizeof root, "%s/checkpoints", c->run_dir);
    TrainedData td;
    char twhy[1024];
    if (runckpt_latest(root, ck, sizeof ck) >= 0) {
        if (trained_data_of_checkpoint(ck, &td, twhy, sizeof twhy) != 0) {
            warnf(c, "the training data's record left out: %s", twhy);
        } else if (td.chat_template >= 0 || td.has_prep || td.has_hash) {
            char line[2048];
            snprintf(line, sizeof line, "template %s, image preprocessing %s", td.chat_template >= 0 ?
                     template_name((TemplateKind)td.chat_template) : "?", td.has_prep ? image_prep_name(td.prep.kind) : "?");
            if (td.has_prep && td.prep.kind == IMAGE_PREP_LLAVA)
                snprintf(line + strlen(line), sizeof line - strlen(line), " (%d px)", td.prep.size);
            if (td.has_prep && td.prep.kind == IMAGE_PREP_ANYRES) { /* docs/anyres.md */
                char pins[1024];
                anyres_pinpoints_format(&td.prep.pins, pins, sizeof pins);
                snprintf(line + strlen(line), sizeof line - strlen(line), " (tiles of %d px, grid pinpoints %.900s)",
                         td.prep.size, pins);
            }
            if (td.has_hash)
                snprintf(line + strlen(line), sizeof line - strlen(line), ", tokenizer %.900s (hash %016llx)",
                         td.tokenizer[0] ? td.tokenizer : "?", (unsigned long long)td.tokenizer_hash);
            h_printf(&h, "<tr><td>training data</td><td>");
            h_text(&h, line);
            h_printf(&h, "</td></tr>");
        }
    }
    h_printf(&h, "</table>\n");

    h_printf(&h, "<section id=\"curves\"><h2>Training curves</h2><div class=\"charts\">\n");
    chart2(&h, "loss", "loss", m.step, m.loss, m.n, 1, m.eval, "training loss", "held-out loss (train.eval_every)");
    chart(&h, "lr", "learning rate", m.step, m.lr, m.n, 0);
    chart(&h, "grad_norm", "grad norm (before clipping)", m.step, m.gnorm, m.n, 1);
    chart(&h, "tokens_per_s", "tokens/s", m.step, m.tps, m.n, 0);
    h_printf(&h, "</div></section>\n");

    section_timeline(&h, c, &m);
    section_device(&h, c);
    section_questions(&h, c, &rt, have_recipe > 0);

    h_printf(&h, "<section id=\"recipe\"><h2>Recipe</h2>\n");
    if (have_recipe > 0) {
        h_printf(&h, "<table class=\"recipe\">\n");
        const char* sec = "";
        for (int i = 0; i < rt.n; i++) {
            if (strcmp(sec, rt.sec[i])) {
                h_printf(&h, "<tr><th colspan=\"2\">[");
                h_text(&h, rt.sec[i]);
                h_printf(&h, "]</th></tr>\n");
                sec = rt.sec[i];
            }
            h_printf(&h, "<tr><td>");
            h_text(&h, rt.key[i]);
            h_printf(&h, "</td><td>");
            h_text(&h, rt.val[i]);
            h_printf(&h, "</td></tr>\n");
        }
        h_printf(&h, "</table>\n");
    } else {
        h_printf(&h, "<p class=\"note\">");
        h_text(&h, have_recipe < 0 ? why : "No recipe.ini in the run folder (rrfp-mm train writes it at start).");
        h_printf(&h, "</p>\n");
    }
    h_printf(&h, "</section>\n");
    time_t now = time(NULL);
    char ts[64];
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    h_printf(&h, "<p class=\"note\">Written by rrfp-mm report at %s.</p>\n</body></html>\n", ts);

    if (c->out) snprintf(out_path, out_len, "%s", c->out);
    else snprintf(out_path, out_len, "%s/report.html", c->run_dir);
    int rc = 0;
    if (rr_write_file_atomic(out_path, h.s, h.n) != 0) {
        snprintf(err, err_len, "cannot write '%s': %s", out_path, strerror(errno));
        rc = -1;
    }
    free(h.s);
    if (have_recipe > 0) recipe_text_free(&rt);
    series_free(&m);
    return rc;
}
