/* sim.c — the RRFP simulator: duration files, the duration generator, the lower bound of docs/scheduler.md, and
 * a discrete-event run of one step that drives the runtime's own PpDispatcher under a virtual clock.
 *
 * Semantics (docs/scheduler.md "The simulator's semantics", one chunk per rank; V chunks split each rank's durations evenly):
 * - a message leaves when its producer finishes and arrives `latency` later (fixed, ready);
 * - all events at one time (completions, arrivals, unblocked senders) are applied before any idle
 *   rank chooses, so `ready` takes, of the tasks eligible at t, the smallest hint rank, and a rank
 *   with nothing eligible waits for the next event (the task that becomes eligible first; ties by
 *   hint rank because they become eligible in the same batch of events);
 * - fixed-sync: the receive for a task with a cross-rank input is posted when the task before it in
 *   the sequence finishes computing (time 0 for the first); a send completes at max(producer finish,
 *   post time), the message arrives `latency` later, and the producer starts nothing before then.
 *
 * Generator (pp_durations_generate), in units of one average forward:
 * - text: microbatches are packed to a token budget, so a microbatch's cost varies a little and
 *   alike on every stage: F[s][m] = a_m * e_sm, a_m ~ lognormal(sigma = V), e_sm ~ lognormal(V/4),
 *   both with mean 1;
 * - mm: LM stages as text with sigma 0.05; the first stage also runs the ViT, whose cost follows the
 *   images of the microbatch: n_m ~ uniform{0..4} images of size s_i ~ lognormal(0, 0.6) (mean-one
 *   scaled), X_m = sum_i s_i / 2 (mean 1), F[0][m] = max(0.1, 1 - V) * lm_0m + V * X_m (a partitioner
 *   balances the mean, the variance stays);
 * - B = 2F without a split backward; with one, B = F and W = F (the same total work). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "engine/util.h"
#include "runtime/sim/sim.h"

/* ---- duration files ----------------------------------------------------------------------------- */

static int json_error_line(const char* text, const char* at) {
    int line = 1;
    for (const char* p = text; p < at && *p; p++)
        if (*p == '\n') line++;
    return line;
}

/* A value as the message shows it: cJSON prints a number beyond the double range (1e999, read as infinity)
 * as "null", which is not what the file says. Returns a malloc'd string (NULL when out of memory). */
static char* value_text(const cJSON* x) {
    if (cJSON_IsNumber(x) && !isfinite(x->valuedouble)) return strdup("a number beyond the range of a double");
    return cJSON_PrintUnformatted(x);
}

static int parse_matrix(const cJSON* root, const char* key, const char* name, int P, int M, double** out,
                        char* err, size_t errlen) {
    const cJSON* a = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsArray(a)) {
        snprintf(err, errlen, "%s: \"%s\" must be an array of %d rows (one per stage) of %d durations", name, key,
                 P, M);
        return -1;
    }
    int rows = cJSON_GetArraySize(a);
    if (rows != P) {
        snprintf(err, errlen, "%s: %s has %d rows, expected stages=%d", name, key, rows, P);
        return -1;
    }
    double* v = mallocCheck(sizeof(double) * P * M);
    int s = 0;
    const cJSON* row;
    cJSON_ArrayForEach(row, a) {
        if (!cJSON_IsArray(row)) {
            snprintf(err, errlen, "%s: %s[%d] must be an array of %d durations", name, key, s, M);
            free(v);
            return -1;
        }
        int n = cJSON_GetArraySize(row);
        if (n != M) {
            snprintf(err, errlen, "%s: %s[%d] has %d entries, expected M=%d", name, key, s, n, M);
            free(v);
            return -1;
        }
        int m = 0;
        const cJSON* x;
        cJSON_ArrayForEach(x, row) {
            if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < 0) {
                char* js = value_text(x);
                snprintf(err, errlen, "%s: %s[%d][%d] must be a finite non-negative number, got %s", name, key, s, m,
                         js ? js : "?");
                free(js);
                free(v);
                return -1;
            }
            v[s * M + m] = x->valuedouble;
            m++;
        }
        s++;
    }
    *out = v;
    return 0;
}

static int parse_count(const cJSON* root, const char* key, const char* name, int max, int* out, char* err,
                       size_t errlen) {
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!x) {
        snprintf(err, errlen, "%s: missing key \"%s\"", name, key);
        return -1;
    }
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 1 ||
        x->valuedouble > max) {
        char* js = value_text(x);
        snprintf(err, errlen, "%s: \"%s\" must be an integer in [1, %d], got %s", name, key, max, js ? js : "?");
        free(js);
        return -1;
    }
    *out = (int)x->valuedouble;
    return 0;
}

int pp_sim_check_size(long P, long M, char* err, size_t errlen) {
    if (P * M > PP_SIM_MAX_TASKS) {
        snprintf(err, errlen,
                 "stages x microbatches = %ld x %ld = %ld is too large for the simulator (its tables take memory in "
                 "proportion); allowed: stages x microbatches <= %ld (2^22)",
                 P, M, P * M, (long)PP_SIM_MAX_TASKS);
        return -1;
    }
    return 0;
}

/* Every entry finite and non-negative, and their sum (with the latency of every message) finite: the
 * simulator adds them up (1e308 + 1e308 is infinite, and so is a latency of 1e308 times the messages). */
int pp_durations_check(const PpDurations* d, const char* name, char* err, size_t errlen) {
    const double* mats[3] = {d->F, d->B, d->W};
    const char* keys[3] = {"F", "B", "W"};
    if (!isfinite(d->latency) || d->latency < 0) {
        snprintf(err, errlen, "%s: the latency must be a finite non-negative number, got %g", name, d->latency);
        return -1;
    }
    double total = d->latency * 2.0 * d->P * d->M;
    if (!isfinite(total)) {
        snprintf(err, errlen, "%s: the latency %g times the messages of a step (2 x %d x %d) is not finite; allowed: "
                 "a latency whose step total is finite", name, d->latency, d->P, d->M);
        return -1;
    }
    for (int k = 0; k < 3; k++)
        for (int i = 0; mats[k] && i < d->P * d->M; i++) {
            if (!isfinite(mats[k][i]) || mats[k][i] < 0) {
                snprintf(err, errlen, "%s: %s[%d][%d] must be a finite non-negative number, got %g", name, keys[k],
                         i / d->M, i % d->M, mats[k][i]);
                return -1;
            }
            total += mats[k][i];
            if (!isfinite(total)) {
                snprintf(err, errlen,
                         "%s: the durations add up to infinity at %s[%d][%d] = %g (the step's makespan would "
                         "overflow); allowed: finite non-negative durations with a finite sum",
                         name, keys[k], i / d->M, i % d->M, mats[k][i]);
                return -1;
            }
        }
    return 0;
}

int pp_durations_parse(const char* text, const char* name, PpDurations* d, char* err, size_t errlen) {
    memset(d, 0, sizeof *d);
    const char* end = NULL;
    cJSON* root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        const char* at = cJSON_GetErrorPtr();
        if (!at) at = text;
        snprintf(err, errlen, "%s:%d: not valid JSON near '%.20s'", name, json_error_line(text, at), at);
        return -1;
    }
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "%s: expected a JSON object {\"stages\", \"microbatches\", \"latency\", \"F\", \"B\", "
                 "\"W\"} at the top level", name);
        goto done;
    }
    /* the keys: each at most once (cJSON would take the first of two "F"s and drop the other), and none that
     * differs from one only in case ("w" or "Latency" would be ignored: a silently unsplit or zero-latency
     * step). Other keys (a generator's own metadata) are ignored (docs/scheduler.md "The simulator's
     * semantics"). */
    {
        static const char* known[] = {"stages", "microbatches", "latency", "F", "B", "W"};
        int seen[6] = {0};
        const cJSON* k;
        cJSON_ArrayForEach(k, root) {
            for (int i = 0; i < 6; i++) {
                if (!k->string) continue;
                if (!strcmp(k->string, known[i]) && seen[i]++) {
                    snprintf(err, errlen, "%s: key \"%s\" appears more than once; allowed: each key once", name,
                             known[i]);
                    goto done;
                }
                if (strcmp(k->string, known[i]) && !strcasecmp(k->string, known[i])) {
                    snprintf(err, errlen, "%s: key \"%s\" is not \"%s\" (keys are case-sensitive: it would be "
                             "ignored)", name, k->string, known[i]);
                    goto done;
                }
            }
        }
    }
    if (parse_count(root, "stages", name, 65536, &d->P, err, errlen)) goto done;
    if (parse_count(root, "microbatches", name, 1 << 20, &d->M, err, errlen)) goto done;
    char why[512];
    if (pp_sim_check_size(d->P, d->M, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", name, why);
        goto done;
    }
    const cJSON* lat = cJSON_GetObjectItemCaseSensitive(root, "latency");
    d->latency = 0;
    if (lat) {
        if (!cJSON_IsNumber(lat) || !isfinite(lat->valuedouble) || lat->valuedouble < 0) {
            char* js = value_text(lat);
            snprintf(err, errlen, "%s: \"latency\" must be a finite non-negative number, got %s", name, js ? js : "?");
            free(js);
            goto done;
        }
        d->latency = lat->valuedouble;
    }
    if (parse_matrix(root, "F", name, d->P, d->M, &d->F, err, errlen)) goto done;
    if (parse_matrix(root, "B", name, d->P, d->M, &d->B, err, errlen)) goto done;
    const cJSON* w = cJSON_GetObjectItemCaseSensitive(root, "W");
    if (w && !cJSON_IsNull(w)) {
        if (parse_matrix(root, "W", name, d->P, d->M, &d->W, err, errlen)) goto done;
        d->split = 1;
    }
    if (pp_durations_check(d, name, err, errlen) != 0) goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) pp_durations_free(d);
    return rc;
}

int pp_durations_load(const char* path, PpDurations* d, char* err, size_t errlen) {
    size_t size;
    char* text = rr_read_file_err(path, &size, RR_MAX_JSON, "a duration file (JSON, docs/scheduler.md)", err, errlen,
                                  "cannot read duration file '%s': %s");
    if (!text) {
        memset(d, 0, sizeof *d);
        return -1;
    }
    /* the parser reads a C string: what follows a NUL byte would be dropped unread */
    const char* nul = memchr(text, 0, size);
    if (nul) {
        snprintf(err, errlen, "%s: a NUL byte at offset %zu (a duration file is JSON text)", path, (size_t)(nul - text));
        free(text);
        memset(d, 0, sizeof *d);
        return -1;
    }
    int rc = pp_durations_parse(text, path, d, err, errlen);
    free(text);
    return rc;
}

/* A number written with 17 significant digits, which read back bit for bit (cJSON's own printing tries 15
 * digits and keeps them when they read back within a relative epsilon: 1.77770000038537e+28 for
 * 17777000003853698980976496185, a different double). Entries are finite (checked). */
static cJSON* exact_json(double x) {
    char b[40];
    snprintf(b, sizeof b, "%.17g", x);
    return cJSON_CreateRaw(b);
}

static cJSON* matrix_json(const double* v, int P, int M) {
    cJSON* a = cJSON_CreateArray();
    for (int s = 0; s < P; s++) {
        cJSON* row = cJSON_CreateArray();
        for (int m = 0; m < M; m++) cJSON_AddItemToArray(row, exact_json(v[(size_t)s * M + m]));
        cJSON_AddItemToArray(a, row);
    }
    return a;
}

char* pp_durations_to_json(const PpDurations* d) {
    cJSON* root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "stages", d->P);
    cJSON_AddNumberToObject(root, "microbatches", d->M);
    cJSON_AddItemToObject(root, "latency", exact_json(d->latency));
    cJSON_AddItemToObject(root, "F", matrix_json(d->F, d->P, d->M));
    cJSON_AddItemToObject(root, "B", matrix_json(d->B, d->P, d->M));
    if (d->split) cJSON_AddItemToObject(root, "W", matrix_json(d->W, d->P, d->M));
    char* s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

void pp_durations_free(PpDurations* d) {
    free(d->F);
    free(d->B);
    free(d->W);
    d->F = d->B = d->W = NULL;
}

/* ---- generator ---------------------------------------------------------------------------------- */

static double rng_uniform(uint64_t* x) { return ((rr_splitmix64(x) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double rng_normal(uint64_t* x) {
    double u = rng_uniform(x), v = rng_uniform(x);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
/* Lognormal with mean 1. */
static double rng_lognormal1(uint64_t* x, double sigma) { return exp(sigma * rng_normal(x) - 0.5 * sigma * sigma); }

void pp_durations_generate(PpDurations* d, int P, int M, double V, PpGenKind kind, uint64_t seed, int split,
                           double latency) {
    memset(d, 0, sizeof *d);
    d->P = P;
    d->M = M;
    d->split = split;
    d->latency = latency;
    d->F = mallocCheck(sizeof(double) * P * M);
    d->B = mallocCheck(sizeof(double) * P * M);
    if (split) d->W = mallocCheck(sizeof(double) * P * M);
    uint64_t st = seed * 0x2545F4914F6CDD1Dull + 1;
    double* a = mallocCheck(sizeof(double) * M);
    if (kind == PP_GEN_TEXT) {
        for (int m = 0; m < M; m++) a[m] = rng_lognormal1(&st, V);
        for (int s = 0; s < P; s++)
            for (int m = 0; m < M; m++) d->F[s * M + m] = a[m] * rng_lognormal1(&st, V / 4);
    } else {
        const double size_sigma = 0.6, lm_sigma = 0.05;
        for (int m = 0; m < M; m++) {
            int n = (int)(rng_uniform(&st) * 5);
            if (n > 4) n = 4;
            double x = 0;
            for (int i = 0; i < n; i++) x += rng_lognormal1(&st, size_sigma);
            a[m] = x / 2;
        }
        double lm0 = 1 - V > 0.1 ? 1 - V : 0.1;
        for (int s = 0; s < P; s++)
            for (int m = 0; m < M; m++) {
                double lm = rng_lognormal1(&st, lm_sigma);
                d->F[s * M + m] = s == 0 ? lm0 * lm + V * a[m] : lm;
            }
    }
    for (int i = 0; i < P * M; i++) {
        if (split) {
            d->B[i] = d->F[i];
            d->W[i] = d->F[i];
        } else {
            d->B[i] = 2 * d->F[i];
        }
    }
    free(a);
}

/* ---- lower bound -------------------------------------------------------------------------------- */

double pp_lower_bound(const PpDurations* d, int V) {
    int P = d->P, M = d->M;
    double L = d->latency, lb = 0;
    double* pf = callocCheck(M, sizeof(double));  // running sum over stages s' < s of F[s'][m] / V
    double* pb = callocCheck(M, sizeof(double));
    for (int s = 0; s < P; s++) {
        double h = INFINITY, t = INFINITY, fb = 0, fbw = 0;
        for (int m = 0; m < M; m++) {
            if (pf[m] < h) h = pf[m];
            if (pb[m] < t) t = pb[m];
            fb += d->F[s * M + m] + d->B[s * M + m];
            fbw += d->F[s * M + m] + d->B[s * M + m] + (d->W ? d->W[s * M + m] : 0);
        }
        h += s * L;
        t += s * L;
        if (h + fb + t > lb) lb = h + fb + t;
        if (h + fbw > lb) lb = h + fbw;
        for (int m = 0; m < M; m++) {
            pf[m] += d->F[s * M + m] / V;
            pb[m] += d->B[s * M + m] / V;
        }
    }
    for (int m = 0; m < M; m++) {  // summed in the formula's order: sum F + sum B + 2(PV-1)L + W[0][m]/V
        double sf = 0, sb = 0;
        for (int s = 0; s < P; s++) {
            sf += d->F[s * M + m];
            sb += d->B[s * M + m];
        }
        double path = sf + sb + 2.0 * (P * V - 1) * L + (d->W ? d->W[m] / V : 0);
        if (path > lb) lb = path;
    }
    free(pf);
    free(pb);
    return lb;
}

/* ---- the event loop ----------------------------------------------------------------------------- */

enum { EV_DONE = 0, EV_ARRIVE = 1, EV_NOTICE = 2 };

typedef struct {
    double t;
    long seq;  // insertion order: a deterministic tie break (the outcome does not depend on it)
    int type, rank, task;
    double val;  // EV_NOTICE: predicted arrival of the announced input
} SimEvent;

typedef struct {
    SimEvent* h;
    int n, cap;
    long seq;
} EventHeap;

static int ev_less(const SimEvent* a, const SimEvent* b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

static void ev_push_val(EventHeap* q, double t, int type, int rank, int task, double val) {
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 1024;
        q->h = reallocCheck(q->h, sizeof(SimEvent) * q->cap);
    }
    SimEvent e = {t, q->seq++, type, rank, task, val};
    int i = q->n++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!ev_less(&e, &q->h[p])) break;
        q->h[i] = q->h[p];
        i = p;
    }
    q->h[i] = e;
}

static void ev_push(EventHeap* q, double t, int type, int rank, int task) { ev_push_val(q, t, type, rank, task, 0); }

static SimEvent ev_pop(EventHeap* q) {
    SimEvent top = q->h[0], v = q->h[--q->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && ev_less(&q->h[c + 1], &q->h[c])) c++;
        if (!ev_less(&q->h[c], &v)) break;
        q->h[i] = q->h[c];
        i = c;
    }
    if (q->n > 0) q->h[i] = v;
    return top;
}

typedef struct {
    const PpDurations* d;
    PpShape sh;
    PpMode mode;
    int n;              // tasks per rank
    PpDispatcher* disp; // (P)
    EventHeap q;
    int* busy;          // (P) 0 idle, 1 computing, 2 blocked in a send (fixed-sync)
    int* slot;          // (P) exec slot of the running task
    int* dirty;         // (P) rank had an event at the current time
    int* dirty_list;
    int n_dirty;
    double* post;       // (P, n) fixed-sync: receive post time, NAN = not yet posted
    double* pend;       // (P, n) fixed-sync: finish time of a producer blocked on that receive, NAN = none
    int* pend_from;     // (P, n) that producer's rank
    int msgs_cap;
    PpSimResult* res;
    PpSimOptions opt;
    uint8_t* fwd;       // (P, n) lookahead: the first notice of this task's input has been passed on
    double* busy_until; // (P) lookahead: estimated end of the running task
    /* the decisions of one time: the ranks with an event then, in rank order, and the one deciding now (a
     * rollout continuation starts half-way through them) */
    int* batch;         // (P)
    int nbatch, ibatch;
    double now;
    double* run_start;  // (P) start of the running task
    /* rollout (PP_MODE_ROLLOUT) */
    int policy;         // SIM_POL_*: how an idle rank chooses
    int roll_seq;       // the hint is a sequence (else rollout is ready)
    int roll_base;      // the continuations' base policies: bit 0 fixed, bit 1 ready
    PpDurations fit;    // PP_ROLLOUT_FIT: the estimates' low-rank fit (the continuations' durations)
    double roll_last;   // the last decision's chosen continuation makespan
    int sample;         // PP_ROLLOUT_SAMPLES: the continuation's draw (1 ..), 0: the estimates as they are
    uint64_t sample_seed;
    /* a continuation: durations from the estimates (cont_table: the fit), nothing recorded */
    int cont;
    const PpDurations* cont_table;
    double bound;       // stop once the clock reaches it (then the makespan cannot be shorter): aborted
    int aborted;
    double last_end;    // the latest task end so far
    void* clone_mem;
} Sim;

enum { SIM_POL_MODE = 0, SIM_POL_ROLLOUT, SIM_POL_FIXED, SIM_POL_READY };

/* A task's duration as the simulation takes it: the truth in the step itself; in a continuation what the
 * ranks know, the estimate (or its fit), for a task started in it and (`running`) for one running when it
 * began (the diagnostic variants put the truth in either place). */
static double sim_duration_as(const Sim* S, int r, PpTask t, int running) {
    int known = running ? PP_ROLLOUT_RUNNING_TRUE : PP_ROLLOUT_FUTURE_TRUE;
    if (S->cont && !(S->opt.rollout & known)) {
        double v;
        if (!S->cont_table) {
            v = pp_sim_estimate(S->d, S->sh.chunks, &S->opt, r, t);
        } else {
            const PpDurations* e = S->cont_table;
            const double* a = t.kind == PP_F ? e->F : t.kind == PP_B ? e->B : e->W;
            v = a[r * e->M + t.mb] / S->sh.chunks;
        }
        if (S->sample > 0) {  // PP_ROLLOUT_SAMPLES: a duration the estimate allows, estimate / f, f in [1 - E, 1 + E]
            uint64_t x = S->sample_seed * 0xD1B54A32D192ED03ull ^ ((uint64_t)S->sample << 56) ^ ((uint64_t)r << 40) ^
                         ((uint64_t)t.kind << 36) ^ ((uint64_t)t.chunk << 28) ^ (uint64_t)t.mb;
            v /= 1 + S->opt.estimate_error * (2 * rng_uniform(&x) - 1);
        }
        return v;
    }
    const PpDurations* d = S->d;
    const double* a = t.kind == PP_F ? d->F : t.kind == PP_B ? d->B : d->W;
    return a[r * d->M + t.mb] / S->sh.chunks;
}

static double sim_duration(const Sim* S, int r, PpTask t) { return sim_duration_as(S, r, t, 0); }

/* Per-(rank, task) estimate factor in [1 - e, 1 + e]: a hash of (seed, rank, task), so every mode sees
 * the same cost model. */
double pp_sim_estimate(const PpDurations* d, int chunks, const PpSimOptions* opt, int r, PpTask t) {
    const double* a = t.kind == PP_F ? d->F : t.kind == PP_B ? d->B : d->W;
    double v = a[r * d->M + t.mb] / chunks;
    if (!opt || opt->estimate_error <= 0) return v;
    uint64_t mb = (uint64_t)(opt->order ? opt->order[t.mb] : t.mb);  // a reordered step: the microbatch's draw
    uint64_t x = opt->estimate_seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)r << 40) ^
                 ((uint64_t)t.kind << 36) ^ ((uint64_t)t.chunk << 28) ^ mb;
    double u = rng_uniform(&x);
    return v * (1 + opt->estimate_error * (2 * u - 1));
}

static double sim_estimate(void* ctx, int r, PpTask t) {
    const Sim* S = ctx;
    return pp_sim_estimate(S->d, S->sh.chunks, &S->opt, r, t);
}

static void sim_mark(Sim* S, int r) {
    if (!S->dirty[r]) {
        S->dirty[r] = 1;
        S->dirty_list[S->n_dirty++] = r;
    }
}

/* The message of producer `src`'s task for (dst, consumer kz) leaves at t_send. */
static void sim_send(Sim* S, int src, int dst, int kz, double t_send) {
    double arrive = t_send + S->d->latency;
    ev_push(&S->q, arrive, EV_ARRIVE, dst, kz);
    if (S->cont) return;
    PpSimResult* res = S->res;
    if (res->n_msgs == S->msgs_cap) {
        S->msgs_cap = S->msgs_cap ? 2 * S->msgs_cap : 1024;
        res->msgs = reallocCheck(res->msgs, sizeof(PpSimMsg) * S->msgs_cap);
    }
    PpTask z = pp_task_from_index(&S->sh, kz);
    int sr;
    PpTask x;
    RR_ASSERT(pp_task_input(&S->sh, dst, z, &sr, &x) && sr == src);
    PpSimMsg m = {src, dst, x, t_send, arrive};
    res->msgs[res->n_msgs++] = m;
}

/* Rank r posts, at time t, the receives its sequence needs next (fixed-sync; the dispatcher says
 * which, so the runtime posts the same ones). */
static void sim_post(Sim* S, int r, int k, double t);
static void sim_post_ahead(Sim* S, int r, double t) {
    PpTask y[4];
    int n = pp_dispatcher_sequence_receives(&S->disp[r], y);
    for (int i = 0; i < n; i++) {
        int k = pp_task_index(&S->sh, y[i]);
        if (isnan(S->post[(size_t)r * S->n + k])) sim_post(S, r, k, t);
    }
}

/* Rank r posts the receive for its task `k` (dense index) at time t (fixed-sync). */
static void sim_post(Sim* S, int r, int k, double t) {
    size_t i = (size_t)r * S->n + k;
    S->post[i] = t;
    if (!isnan(S->pend[i])) {  // the producer finished earlier and has been blocked on this send
        int p = S->pend_from[i];
        sim_send(S, p, r, k, t);
        S->pend[i] = NAN;
        RR_ASSERT(S->busy[p] == 2);
        S->busy[p] = 0;
        sim_mark(S, p);
    }
}

static void sim_done(Sim* S, int r, int k, double t) {
    PpTask x = pp_task_from_index(&S->sh, k);
    if (S->cont) {
        if (t > S->last_end) S->last_end = t;
    } else {
        S->res->exec[r][S->slot[r]].end = t;
    }
    pp_dispatcher_finished(&S->disp[r], x);
    S->busy[r] = 0;
    if (S->mode == PP_MODE_FIXED_SYNC) sim_post_ahead(S, r, t);
    int dst;
    PpTask z;
    if (pp_task_output(&S->sh, r, x, &dst, &z)) {
        int kz = pp_task_index(&S->sh, z);
        size_t i = (size_t)dst * S->n + kz;
        if (S->mode == PP_MODE_FIXED_SYNC && isnan(S->post[i])) {
            S->pend[i] = t;  // blocked until the receiver posts
            S->pend_from[i] = r;
            S->busy[r] = 2;
        } else {
            sim_send(S, r, dst, kz, t);
        }
    }
}

/* Rank r starts x at t. */
static void sim_start(Sim* S, int r, PpTask x, double t) {
    pp_dispatcher_started(&S->disp[r], x);
    int dst;
    PpTask z;
    if (pp_mode_waits(S->mode) && pp_task_output(&S->sh, r, x, &dst, &z)) {
        // The start notice travels like a message; it carries the producer's own estimate.
        double at = t + S->d->latency;
        ev_push_val(&S->q, at, EV_NOTICE, dst, pp_task_index(&S->sh, z), at + sim_estimate(S, r, x));
    }
    if (pp_mode_waits(S->mode)) S->busy_until[r] = t + sim_estimate(S, r, x);
    S->busy[r] = 1;
    S->run_start[r] = t;
    if (!S->cont) {
        int slot = S->res->n_exec[r]++;
        S->slot[r] = slot;
        S->res->exec[r][slot].task = x;
        S->res->exec[r][slot].start = t;
        S->res->exec[r][slot].end = NAN;
    }
    ev_push(&S->q, t + sim_duration(S, r, x), EV_DONE, r, pp_task_index(&S->sh, x));
}

static int sim_rollout_pick(Sim* S, int r, double t, PpTask* x);
static void sim_notice(Sim* S, int r, int k, double val, double t);

static void sim_decide(Sim* S, int r, double t) {
    if (S->busy[r]) return;
    PpTask x;
    int eligible = 0;
    if (!S->cont) S->res->decisions++;
    switch (S->policy) {
    case SIM_POL_ROLLOUT:
        if (!sim_rollout_pick(S, r, t, &x)) return;
        break;
    case SIM_POL_FIXED:  // the hint's order, skipping the tasks already started, within the cap
        if (!pp_dispatcher_first_unstarted(&S->disp[r], &x, &eligible) || !eligible) return;
        break;
    case SIM_POL_READY:
        if (pp_dispatcher_next(&S->disp[r], &x) != 1) return;
        break;
    default:
        if (pp_dispatcher_next_at(&S->disp[r], t, &x) != 1) return;
    }
    sim_start(S, r, x, t);
}

/* The event loop from the current state: the rest of the current time's decisions (batch[ibatch..]), then
 * every later time, events first. Returns the last time reached. A continuation stops (aborted) once the
 * clock reaches its bound: an event at time t means a task still ends at t or later. */
static double sim_loop(Sim* S) {
    double t = S->now;
    for (; S->ibatch < S->nbatch; S->ibatch++) sim_decide(S, S->batch[S->ibatch], t);
    while (S->q.n > 0) {
        t = S->q.h[0].t;
        if (t >= S->bound) {
            S->aborted = 1;
            return t;
        }
        // Apply every event at time t before any rank chooses (completions first).
        while (S->q.n > 0 && S->q.h[0].t == t) {
            SimEvent e = ev_pop(&S->q);
            if (e.type == EV_DONE) sim_done(S, e.rank, e.task, t);
            else if (e.type == EV_NOTICE) sim_notice(S, e.rank, e.task, e.val, t);
            else pp_dispatcher_input_arrived(&S->disp[e.rank], pp_task_from_index(&S->sh, e.task));
            sim_mark(S, e.rank);
        }
        // Ranks in increasing order: a rank's choice depends only on its own dispatcher (and, under
        // rollout, on the state the ranks before it have left).
        int nd = S->n_dirty;
        for (int i = 0; i < nd; i++) {
            S->dirty[S->dirty_list[i]] = 0;
            S->batch[i] = S->dirty_list[i];
        }
        S->n_dirty = 0;
        int* list = S->batch;
        // sort the few dirty ranks so decisions are made in rank order (cheap insertion sort)
        for (int i = 1; i < nd; i++)
            for (int j = i; j > 0 && list[j - 1] > list[j]; j--) {
                int tmp = list[j];
                list[j] = list[j - 1];
                list[j - 1] = tmp;
            }
        S->nbatch = nd;
        S->now = t;
        for (S->ibatch = 0; S->ibatch < S->nbatch; S->ibatch++) sim_decide(S, S->batch[S->ibatch], t);
    }
    return t;
}

/* ---- rollout ------------------------------------------------------------------------------------ */

/* A copy of the running step's state for a continuation: the dispatchers' mutable tables (the orders are
 * shared), the ranks' state and the pending events, with each running task's end re-predicted from what
 * a rank knows at `now`: its start plus its estimate, or now when the estimate is already overdue (the
 * larger of the estimate and the elapsed time). Arrivals in flight keep their times (a message is on its
 * way: its arrival is known). Only ready and fixed continue (no notices, no fixed-sync). */
static void sim_clone(Sim* C, const Sim* S, int sample) {
    *C = *S;
    C->sample = sample;
    C->sample_seed = (uint64_t)S->res->rollouts * 1000003u + S->opt.estimate_seed;
    int P = S->sh.P;
    C->cont = 1;
    C->res = NULL;
    C->aborted = 0;
    C->last_end = 0;
    size_t per = pp_dispatcher_clone_bytes(&S->disp[0]);  // every rank's dispatcher has the step's n tasks
    size_t ranks = (size_t)P * (5 * sizeof(int) + sizeof(double));
    ranks = (ranks + sizeof(double) - 1) / sizeof(double) * sizeof(double);
    char* m = mallocCheck(sizeof(PpDispatcher) * P + ranks + per * P);
    C->clone_mem = m;
    C->disp = (PpDispatcher*)m;
    m += sizeof(PpDispatcher) * P;
    C->run_start = (double*)m;
    memcpy(C->run_start, S->run_start, sizeof(double) * P);
    int* im = (int*)(m + sizeof(double) * P);
    int** ia[5] = {&C->busy, &C->slot, &C->dirty, &C->batch, &C->dirty_list};
    const int* is[5] = {S->busy, S->slot, S->dirty, S->batch, S->dirty_list};
    for (int k = 0; k < 5; k++) {
        *ia[k] = im;
        memcpy(im, is[k], sizeof(int) * P);
        im += P;
    }
    m += ranks;
    RR_ASSERT(S->n_dirty == 0);  // a decision is taken with every event of its time applied
    for (int r = 0; r < P; r++) pp_dispatcher_clone(&C->disp[r], &S->disp[r], m + per * (size_t)r);
    C->q.cap = S->q.n + 64;
    C->q.n = 0;
    C->q.h = mallocCheck(sizeof(SimEvent) * C->q.cap);
    for (int i = 0; i < S->q.n; i++) {
        SimEvent e = S->q.h[i];
        if (e.type == EV_DONE && !(S->opt.rollout & PP_ROLLOUT_RUNNING_TRUE)) {
            e.t = S->run_start[e.rank] + sim_duration_as(C, e.rank, pp_task_from_index(&S->sh, e.task), 1);
            if (e.t < S->now) e.t = S->now;
        }
        ev_push_val(&C->q, e.t, e.type, e.rank, e.task, e.val);
    }
}

static void sim_clone_free(Sim* C) {
    free(C->clone_mem);
    free(C->q.h);
}

/* The makespan of the rest of the step, on what the ranks know, when rank r (deciding now) starts *c (or,
 * c NULL, waits for its next event) and then every rank follows `policy` (SIM_POL_FIXED or SIM_POL_READY).
 * INFINITY when it does not finish or cannot end before `bound`. */
static double sim_continue_k(const Sim* S, int r, const PpTask* c, int policy, double bound, int sample) {
    Sim C;
    sim_clone(&C, S, sample);
    C.policy = policy;
    C.bound = bound;
    if (c) sim_start(&C, r, *c, S->now);
    C.ibatch = S->ibatch + 1;
    sim_loop(&C);
    double ms = C.aborted ? INFINITY : C.last_end;
    for (int k = 0; k < S->sh.P && ms < INFINITY; k++)
        if (!pp_dispatcher_all_done(&C.disp[k])) ms = INFINITY;
    sim_clone_free(&C);
    return ms;
}

/* The same, or with PP_ROLLOUT_SAMPLES the mean over PP_ROLLOUT_SAMPLES_K draws of durations the estimates
 * allow (no bound: a mean needs every draw). */
static double sim_continue(const Sim* S, int r, const PpTask* c, int policy, double bound) {
    if (!(S->opt.rollout & PP_ROLLOUT_SAMPLES) || !(S->opt.estimate_error > 0))
        return sim_continue_k(S, r, c, policy, bound, 0);
    double sum = 0;
    for (int k = 1; k <= PP_ROLLOUT_SAMPLES_K; k++) sum += sim_continue_k(S, r, c, policy, INFINITY, k);
    return sum / PP_ROLLOUT_SAMPLES_K;
}

static int task_eq(PpTask a, PpTask b) { return a.chunk == b.chunk && a.kind == b.kind && a.mb == b.mb; }

/* rollout's decision for idle rank r at t (sched.h): c = ready's pick, h = the hint's first task not yet
 * started; c == h (or a ranking hint): run c. Otherwise start c or wait, whichever's better continuation
 * (each base policy after the action) ends first; ties: start c. Returns 1 with *x to start, 0 to wait. */
static int sim_rollout_pick(Sim* S, int r, double t, PpTask* x) {
    (void)t;
    PpDispatcher* d = &S->disp[r];
    PpTask c, h;
    int eligible;
    if (pp_dispatcher_next(d, &c) != 1) return 0;
    if (!S->roll_seq || !pp_dispatcher_first_unstarted(d, &h, &eligible) || task_eq(c, h)) {
        *x = c;
        return 1;
    }
    S->res->rollouts++;
    static const int pol[2] = {SIM_POL_FIXED, SIM_POL_READY};
    double start = INFINITY, wait = INFINITY;
    for (int b = 0; b < 2; b++)
        if (S->roll_base & (1 << b)) {
            double v = sim_continue(S, r, &c, pol[b], start);
            if (v < start) start = v;
        }
    for (int b = 0; b < 2; b++)
        if (S->roll_base & (1 << b)) {
            double v = sim_continue(S, r, NULL, pol[b], wait < start ? wait : start);
            if (v < wait) wait = v;
        }
    int w = wait < start * ((S->opt.rollout & PP_ROLLOUT_MARGIN) ? 1 - PP_ROLLOUT_MARGIN_VALUE : 1);
    /* the chosen continuation's makespan: with exact durations the step can only improve on it (the
     * improvement property), so it never rises from one decision to the next nor to the step's end */
    double q = w ? wait : start;
    if (S->res->rollouts > 1 && q - S->roll_last > S->res->rollout_rise) S->res->rollout_rise = q - S->roll_last;
    S->roll_last = q;
    if (w) {
        S->res->waits++;
        return 0;
    }
    *x = c;
    return 1;
}

/* A notice for rank r's task k (dense) arrives at t, predicting its input at `val`. Forwarding: the
 * first notice of a task is passed on at once to the consumer of the task's own output, predicting it
 * at max(input, end of what r runs now) + r's estimate of the task (+ latency): a rank hears of a
 * wave of work several ranks upstream, not only from its neighbour's start. */
static void sim_notice(Sim* S, int r, int k, double val, double t) {
    PpTask z = pp_task_from_index(&S->sh, k), z2;
    pp_dispatcher_notice(&S->disp[r], z, val);
    size_t i = (size_t)r * S->n + k;
    int dst;
    if (S->fwd[i] || !pp_task_output(&S->sh, r, z, &dst, &z2)) return;
    S->fwd[i] = 1;
    double start = val > S->busy_until[r] ? val : S->busy_until[r];
    if (start < t) start = t;
    double at = t + S->d->latency;
    ev_push_val(&S->q, at, EV_NOTICE, dst, pp_task_index(&S->sh, z2), start + sim_estimate(S, r, z) + S->d->latency);
}

static void sim_describe_deadlock(Sim* S, double t) {
    PpSimResult* res = S->res;
    char* p = res->msg;
    size_t left = sizeof res->msg;
    int w = snprintf(p, left, "deadlock at t=%g:", t);
    p += w;
    left -= w;
    for (int r = 0; r < S->sh.P && left > 40; r++) {
        PpDispatcher* d = &S->disp[r];
        if (pp_dispatcher_all_done(d)) continue;
        char b[32];
        PpTask y;
        if (S->busy[r] == 2) w = snprintf(p, left, " rank %d blocked in a send;", r);
        else if (!pp_mode_is_ready(S->mode) && pp_dispatcher_peek_sequence(d, &y))
            w = snprintf(p, left, " rank %d waits for the input of %s;", r, pp_task_label(&S->sh, y, r, b, sizeof b));
        else w = snprintf(p, left, " rank %d has %d tasks left, none eligible (in flight %d, cap %d);", r,
                          d->n - d->n_started, d->inflight, d->cap);
        if (w < 0 || (size_t)w >= left) break;
        p += w;
        left -= w;
    }
}


void pp_sim_estimated_durations(const PpDurations* d, int chunks, const PpSimOptions* opt, PpDurations* est) {
    memset(est, 0, sizeof *est);
    int P = d->P, M = d->M;
    est->P = P, est->M = M, est->split = d->split, est->latency = d->latency;
    double** dst[3] = {&est->F, &est->B, &est->W};
    for (int k = 0; k < (d->split ? 3 : 2); k++) {
        double* a = mallocCheck(sizeof(double) * (size_t)P * (size_t)M);
        for (int r = 0; r < P; r++)
            for (int m = 0; m < M; m++) {
                double v = 0;
                for (int c = 0; c < chunks; c++) v += pp_sim_estimate(d, chunks, opt, r, (PpTask){c, k, m});
                a[(size_t)r * M + m] = v;
            }
        *dst[k] = a;
    }
}

/* One matrix (P x M, row-major) replaced by its low-rank fit: components are taken one at a time (the
 * leading singular pair of the residual, by power iteration) while each stands out of the noise left
 * after it: singular value s > PP_FIT_EDGE x sigma x (sqrt(P) + sqrt(M)), sigma the residual's RMS per
 * entry after removing it (the largest singular value of a P x M matrix of independent noise is about
 * sigma (sqrt(P) + sqrt(M))). At most PP_FIT_MAX_RANK components; the first is always kept. */
#define PP_FIT_EDGE 1.5
#define PP_FIT_MAX_RANK 4
static void fit_low_rank(double* A, int P, int M) {
    size_t n = (size_t)P * M;
    double* R = mallocCheck(sizeof(double) * n);  // residual
    double* F = callocCheck(n, sizeof(double));   // fit
    double* u = mallocCheck(sizeof(double) * P);
    double* v = mallocCheck(sizeof(double) * M);
    memcpy(R, A, sizeof(double) * n);
    double total = 0;
    for (size_t i = 0; i < n; i++) total += A[i] * A[i];
    int maxk = PP_FIT_MAX_RANK < P ? PP_FIT_MAX_RANK : P;
    if (maxk > M) maxk = M;
    for (int k = 0; k < maxk; k++) {
        // leading right singular vector of R: start from the column sums (the microbatch profile) for the
        // first, from an alternating combination of rows plus a fixed perturbation for the next, iterate
        for (int m = 0; m < M; m++) {
            double a = 0;
            for (int s = 0; s < P; s++) a += R[(size_t)s * M + m] * (k == 0 ? 1.0 : (s & 1 ? 1.0 : -0.5));
            v[m] = a + (k > 0 ? 1e-3 * ((m * 2654435761u) % 1000) / 1000.0 : 0);
        }
        double sv = 0;
        for (int it = 0; it < 60; it++) {
            double nv = 0;
            for (int m = 0; m < M; m++) nv += v[m] * v[m];
            nv = sqrt(nv);
            if (!(nv > 0)) break;
            for (int m = 0; m < M; m++) v[m] /= nv;
            for (int s = 0; s < P; s++) {
                double a = 0;
                for (int m = 0; m < M; m++) a += R[(size_t)s * M + m] * v[m];
                u[s] = a;
            }
            double nu = 0;
            for (int s = 0; s < P; s++) nu += u[s] * u[s];
            nu = sqrt(nu);
            if (!(nu > 0)) break;
            for (int s = 0; s < P; s++) u[s] /= nu;
            double prev = sv;
            for (int m = 0; m < M; m++) {
                double a = 0;
                for (int s = 0; s < P; s++) a += R[(size_t)s * M + m] * u[s];
                v[m] = a;
            }
            sv = 0;
            for (int m = 0; m < M; m++) sv += v[m] * v[m];
            sv = sqrt(sv);
            if (it > 3 && fabs(sv - prev) <= 1e-9 * sv) break;
        }
        if (!(sv > 1e-12 * sqrt(total))) break;  // nothing left (exactly low rank)
        // residual after removing the component (v = sv * unit right vector)
        double left = 0;
        for (int s = 0; s < P; s++)
            for (int m = 0; m < M; m++) {
                double x = R[(size_t)s * M + m] - u[s] * v[m];
                left += x * x;
            }
        double dof = (double)(P - k - 1) * (double)(M - k - 1);
        double sigma = dof > 0 ? sqrt(left / dof) : 0;
        if (k > 0 && !(sv > PP_FIT_EDGE * sigma * (sqrt((double)P) + sqrt((double)M)))) break;
        for (int s = 0; s < P; s++)
            for (int m = 0; m < M; m++) {
                F[(size_t)s * M + m] += u[s] * v[m];
                R[(size_t)s * M + m] -= u[s] * v[m];
            }
    }
    // a fit is a duration: keep it positive (a component may dip below 0 on a tiny task)
    for (size_t i = 0; i < n; i++) A[i] = F[i] > 0.05 * A[i] ? F[i] : (A[i] > 0 ? 0.05 * A[i] : A[i]);
    free(R);
    free(F);
    free(u);
    free(v);
}

void pp_durations_copy(const PpDurations* in, PpDurations* out) {
    *out = *in;
    size_t n = (size_t)in->P * (size_t)in->M;
    double* const* src[3] = {&in->F, &in->B, &in->W};
    double** dst[3] = {&out->F, &out->B, &out->W};
    for (int k = 0; k < 3; k++)
        if (*src[k]) {
            *dst[k] = mallocCheck(sizeof(double) * n);
            memcpy(*dst[k], *src[k], sizeof(double) * n);
        }
}

void pp_durations_smooth(const PpDurations* in, PpDurations* out) {
    pp_durations_copy(in, out);
    double* mats[3] = {out->F, out->B, out->W};
    for (int k = 0; k < 3; k++)
        if (mats[k] && in->P > 1 && in->M > 1) fit_low_rank(mats[k], in->P, in->M);
}


void pp_durations_permute(PpDurations* d, const int* perm) {
    int P = d->P, M = d->M;
    double* mats[3] = {d->F, d->B, d->W};
    double* tmp = mallocCheck(sizeof(double) * (size_t)M);
    for (int a = 0; a < 3; a++) {
        if (!mats[a]) continue;
        for (int r = 0; r < P; r++) {
            double* row = mats[a] + (size_t)r * M;
            for (int s = 0; s < M; s++) tmp[s] = row[perm[s]];
            memcpy(row, tmp, sizeof(double) * (size_t)M);
        }
    }
    free(tmp);
}






int pp_sim_run_policy(const PpDurations* d, PpHint hint, PpMode mode, PpCap cap, int chunks, const PpSimOptions* opt,
                      int bases, PpSimResult* res, char* err, size_t errlen) {
    memset(res, 0, sizeof *res);
    PpShape sh = {d->P, d->M, chunks, d->split, pp_hint_vshape(hint)};
    if (pp_hint_check_shape(hint, &sh, err, errlen)) return -1;
    if (mode == PP_MODE_ADAPTIVE) {
        snprintf(err, errlen, "internal: mode adaptive is planned before it is simulated (runtime/plan/plan.h)");
        return -1;
    }
    res->chosen = mode;
    for (int i = 0; i < 3; i++) res->predicted[i] = NAN;
    Sim S;
    memset(&S, 0, sizeof S);
    S.d = d;
    S.sh = sh;
    S.mode = mode;
    S.n = pp_shape_tasks(&sh);
    S.res = res;
    if (opt) S.opt = *opt;
    S.bound = INFINITY;
    if (mode == PP_MODE_ROLLOUT) {
        S.policy = SIM_POL_ROLLOUT;
        S.roll_seq = pp_hint_is_sequence(hint);
        S.roll_base = bases ? bases : 3;
        int flags = opt ? opt->rollout : 0;
        if (flags & PP_ROLLOUT_FIT) {
            PpDurations est;
            pp_sim_estimated_durations(d, chunks, opt, &est);
            if ((flags & PP_ROLLOUT_FIT) && opt->estimate_error != 0) {
                pp_durations_smooth(&est, &S.fit);
                S.cont_table = &S.fit;
            }
            pp_durations_free(&est);
        }
    }
    int P = d->P, n = S.n;
    S.disp = callocCheck(P, sizeof(PpDispatcher));
    res->P = P;
    res->exec = callocCheck(P, sizeof(PpExec*));
    res->n_exec = callocCheck(P, sizeof(int));
    res->cap = callocCheck(P, sizeof(int));
    res->peak_inflight = callocCheck(P, sizeof(int));
    for (int r = 0; r < P; r++) {
        if (pp_dispatcher_init_hint(&S.disp[r], hint, &sh, r, mode, cap, 0, NULL, err, errlen)) {
            for (int k = 0; k < r; k++) pp_dispatcher_free(&S.disp[k]);
            free(S.disp);
            pp_sim_result_free(res);
            return -1;
        }
        S.disp[r].estimate = sim_estimate;
        S.disp[r].estimate_ctx = &S;
        res->cap[r] = S.disp[r].cap;
        res->exec[r] = mallocCheck(sizeof(PpExec) * n);
    }
    S.busy = callocCheck(P, sizeof(int));
    S.fwd = callocCheck((size_t)P * n, 1);
    S.busy_until = callocCheck(P, sizeof(double));
    S.slot = callocCheck(P, sizeof(int));
    S.dirty = callocCheck(P, sizeof(int));
    S.dirty_list = mallocCheck(sizeof(int) * P);
    S.batch = mallocCheck(sizeof(int) * P);
    S.run_start = callocCheck(P, sizeof(double));
    if (mode == PP_MODE_FIXED_SYNC) {
        S.post = mallocCheck(sizeof(double) * P * n);
        S.pend = mallocCheck(sizeof(double) * P * n);
        S.pend_from = mallocCheck(sizeof(int) * P * n);
        for (size_t i = 0; i < (size_t)P * n; i++) S.post[i] = S.pend[i] = NAN;
        for (int r = 0; r < P; r++) sim_post_ahead(&S, r, 0);  // the first receives are posted at time 0
    }
    for (int r = 0; r < P; r++) S.batch[r] = r;  // every rank decides at time 0
    S.nbatch = P;
    double t = sim_loop(&S);
    double makespan = 0, work = 0;
    for (int r = 0; r < P; r++) {
        for (int i = 0; i < res->n_exec[r]; i++) {
            if (res->exec[r][i].end > makespan) makespan = res->exec[r][i].end;
        }
        for (int m = 0; m < d->M; m++)
            work += d->F[r * d->M + m] + d->B[r * d->M + m] + (d->W ? d->W[r * d->M + m] : 0);
        res->peak_inflight[r] = S.disp[r].peak_inflight;
        res->waits += S.disp[r].n_waits;
        if (!pp_dispatcher_all_done(&S.disp[r])) res->deadlock = 1;
    }
    if (res->deadlock) sim_describe_deadlock(&S, t);
    res->makespan = makespan;
    if (res->rollouts > 0 && makespan - S.roll_last > res->rollout_rise) res->rollout_rise = makespan - S.roll_last;
    res->lower_bound = pp_lower_bound(d, chunks);
    res->efficiency = makespan > 0 ? res->lower_bound / makespan : 1.0;
    res->bubble = makespan > 0 ? 1.0 - work / (P * makespan) : 0.0;
    for (int r = 0; r < P; r++) pp_dispatcher_free(&S.disp[r]);
    free(S.disp);
    free(S.q.h);
    free(S.busy);
    free(S.fwd);
    free(S.busy_until);
    free(S.slot);
    free(S.dirty);
    free(S.dirty_list);
    free(S.batch);
    free(S.run_start);
    pp_durations_free(&S.fit);
    free(S.post);
    free(S.pend);
    free(S.pend_from);
    return 0;
}

void pp_sim_result_free(PpSimResult* r) {
    if (r->exec)
        for (int i = 0; i < r->P; i++) free(r->exec[i]);
    free(r->exec);
    free(r->n_exec);
    free(r->cap);
    free(r->peak_inflight);
    free(r->msgs);
    free(r->order);
    memset(r, 0, sizeof *r);
}

