/* dispatch.c — one rank's ready-set arbitration (the PpDispatcher of sched.h).
 *
 * The same code decides for the simulator (virtual clock, sim.c) and for the MPI runtime (wall
 * clock): both report arrivals, starts and completions and ask next(). A task is ready once its
 * unmet-dependency count (cross-rank input, local predecessor F->B->W) reaches zero; ready tasks sit
 * in two binary min-heaps keyed by hint rank, forwards apart because the in-flight cap and the
 * activation byte budget can hold every forward back while a B or W may still run. Entries whose task
 * was started out of turn (a TP follower runs its leader's choice) are dropped lazily at the top. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/sched/sched.h"

/* The in-flight unit is a microbatch admitted to this rank: its first-chunk forward F(0, m) started
 * and its first-chunk backward B(0, m) (the last backward of m on the rank) not finished. Only F(0, m)
 * is gated by the cap and the byte budget; later chunks of an admitted microbatch never are, so an
 * admitted microbatch can always finish (with one chunk this is the contract's "F started, B not finished",
 * and with several it cannot deadlock on its own chunks). */
static inline int task_gated(PpTask t) { return t.kind == PP_F && t.chunk == 0; }

/* ---- binary min-heap of hint ranks -------------------------------------------------------------- */

static void heap_push(int* h, int* n, int v) {
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static void heap_pop(int* h, int* n) {
    int v = h[--(*n)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = v;
}

/* Drop heap tops that are no longer ready (started out of turn). */
static void heap_clean(const PpDispatcher* d, int* h, int* n) {
    while (*n > 0 && d->state[h[0]] != PP_TS_READY) heap_pop(h, n);
}

/* ---- init / free -------------------------------------------------------------------------------- */

int pp_dispatcher_init(PpDispatcher* d, const PpDispatchConfig* cfg, char* err, size_t errlen) {
    const PpShape* s = &cfg->shape;
    int sequence = !pp_mode_is_ready(cfg->mode);
    if (pp_order_check(s, cfg->rank, cfg->order, cfg->n, sequence, err, errlen)) {
        if (sequence) {
            size_t l = strlen(err);
            snprintf(err + l, errlen - l, " (mode %s runs the hint as a sequence; rankings such as bf/bfw need "
                     "--mode ready)", pp_mode_name(cfg->mode));
        }
        return -1;
    }
    memset(d, 0, sizeof *d);
    d->shape = *s;
    d->rank = cfg->rank;
    d->n = cfg->n;
    d->mode = cfg->mode;
    d->cap = cfg->cap;
    d->act_budget = cfg->act_budget;
    if (cfg->act_bytes) {
        d->act_bytes = mallocCheck(sizeof(double) * s->M);
        memcpy(d->act_bytes, cfg->act_bytes, sizeof(double) * s->M);
    }
    int n = cfg->n;
    d->order = mallocCheck(sizeof(PpTask) * n);
    memcpy(d->order, cfg->order, sizeof(PpTask) * n);
    d->hrank = mallocCheck(sizeof(int) * n);
    d->need = callocCheck(n, 1);
    d->state = callocCheck(n, 1);
    d->heap_f = mallocCheck(sizeof(int) * n);
    d->heap_o = mallocCheck(sizeof(int) * n);
    for (int i = 0; i < n; i++) d->hrank[pp_task_index(s, d->order[i])] = i;
    if (pp_mode_waits(cfg->mode)) {
        d->sequence_hint = pp_order_check(s, cfg->rank, cfg->order, cfg->n, 1, err, errlen) == 0;
        err[0] = 0;
        d->estimate = cfg->estimate;
        d->estimate_ctx = cfg->estimate_ctx;
        d->pred = mallocCheck(sizeof(double) * n);
        for (int i = 0; i < n; i++) d->pred[i] = NAN;
        d->noticed = mallocCheck(sizeof(int) * n);
    }
    if (!pp_mode_is_ready(cfg->mode)) {
        /* next F / B at or after each hint rank; in the V layout per chunk too (kind * 2 + chunk) */
        int w = s->vshape ? 4 : 2;
        d->next_fb = mallocCheck(sizeof(int) * (size_t)w * (n + 1));
        for (int j = 0; j < w; j++) d->next_fb[(size_t)w * n + j] = -1;
        for (int i = n - 1; i >= 0; i--)
            for (int j = 0; j < w; j++) {
                PpTask t = d->order[i];
                int hit = w == 4 ? (t.kind == j / 2 && t.chunk == j % 2) : t.kind == j;
                d->next_fb[(size_t)w * i + j] = hit ? i : d->next_fb[(size_t)w * (i + 1) + j];
            }
    }
    for (int i = 0; i < n; i++) {
        PpTask t = d->order[i], src;
        int sr;
        d->need[i] = (uint8_t)(pp_task_input(s, d->rank, t, &sr, &src) + (t.kind != PP_F));
        if (d->need[i] == 0) {
            d->state[i] = PP_TS_READY;
            if (task_gated(t)) heap_push(d->heap_f, &d->nf, i);
            else heap_push(d->heap_o, &d->no, i);
        }
    }
    return 0;
}

int pp_dispatcher_init_hint(PpDispatcher* d, PpHint h, const PpShape* s0, int rank, PpMode mode, PpCap cap,
                            double act_budget, const double* act_bytes, char* err, size_t errlen) {
    PpShape sv = *s0;  // the layout follows the hint
    sv.vshape = pp_hint_vshape(h);
    const PpShape* s = &sv;
    if (!pp_mode_is_ready(mode) && !pp_hint_is_sequence(h)) {
        snprintf(err, errlen, "hint %s ranks every backward before every forward, so it is not an executable "
                 "sequence: mode %s cannot run it; use --mode ready", pp_hint_name(h), pp_mode_name(mode));
        return -1;
    }
    int n = pp_shape_tasks(s);
    PpTask* order = mallocCheck(sizeof(PpTask) * n);
    if (pp_hint_build(h, s, rank, order, err, errlen) < 0) {
        free(order);
        return -1;
    }
    PpDispatchConfig cfg = {*s, rank, mode, order, n, pp_mode_is_ready(mode) ? pp_cap_for(cap, h, s, rank) : 0,
                            act_budget, act_bytes, NULL, NULL};
    int rc = pp_dispatcher_init(d, &cfg, err, errlen);
    free(order);
    return rc;
}

size_t pp_dispatcher_clone_bytes(const PpDispatcher* src) {
    size_t b = (size_t)src->n * (2 * sizeof(int) + 2);
    return (b + sizeof(double) - 1) / sizeof(double) * sizeof(double);
}

void pp_dispatcher_clone(PpDispatcher* dst, const PpDispatcher* src, void* mem) {
    size_t n = (size_t)src->n;
    char* m = mem;
    *dst = *src;
    dst->heap_f = (int*)m;
    memcpy(dst->heap_f, src->heap_f, sizeof(int) * (size_t)src->nf);
    dst->heap_o = (int*)(m + sizeof(int) * n);
    memcpy(dst->heap_o, src->heap_o, sizeof(int) * (size_t)src->no);
    dst->need = (uint8_t*)(m + 2 * sizeof(int) * n);
    memcpy(dst->need, src->need, n);
    dst->state = dst->need + n;
    memcpy(dst->state, src->state, n);
}

void pp_dispatcher_free(PpDispatcher* d) {
    free(d->act_bytes);
    free(d->order);
    free(d->hrank);
    free(d->need);
    free(d->state);
    free(d->heap_f);
    free(d->heap_o);
    free(d->next_fb);
    free(d->pred);
    free(d->noticed);
    memset(d, 0, sizeof *d);
}

/* ---- notifications ------------------------------------------------------------------------------ */

static void dispatcher_satisfy(PpDispatcher* d, int i) {
    RR_ASSERT(d->need[i] > 0);
    if (--d->need[i] == 0) {
        d->state[i] = PP_TS_READY;
        if (task_gated(d->order[i])) heap_push(d->heap_f, &d->nf, i);
        else heap_push(d->heap_o, &d->no, i);
    }
}

/* lookahead: drop hint rank i from the noticed list (its input is in). */
static void notice_drop(PpDispatcher* d, int i) {
    if (!d->pred || isnan(d->pred[i])) return;
    d->pred[i] = NAN;
    for (int k = 0; k < d->n_noticed; k++)
        if (d->noticed[k] == i) {
            d->noticed[k] = d->noticed[--d->n_noticed];
            return;
        }
}

void pp_dispatcher_input_arrived(PpDispatcher* d, PpTask t) {
    int i = d->hrank[pp_task_index(&d->shape, t)];
    notice_drop(d, i);
    dispatcher_satisfy(d, i);
}

void pp_dispatcher_notice(PpDispatcher* d, PpTask t, double arrive_at) {
    if (!d->pred) return;
    int i = d->hrank[pp_task_index(&d->shape, t)];
    if (d->state[i] != PP_TS_WAIT) return;  // input already in
    if (isnan(d->pred[i])) d->noticed[d->n_noticed++] = i;
    d->pred[i] = arrive_at;  // a later notice (the producer's own start) replaces a forwarded one
}

void pp_dispatcher_started(PpDispatcher* d, PpTask t) {
    int i = d->hrank[pp_task_index(&d->shape, t)];
    RR_ASSERT(d->state[i] == PP_TS_READY);  // a task never starts before its inputs are in
    d->state[i] = PP_TS_RUNNING;
    d->n_started++;
    if (!pp_mode_is_ready(d->mode)) {
        RR_ASSERT(i == d->pos);
        d->pos++;
    }
    if (task_gated(t)) {
        d->inflight++;
        if (d->inflight > d->peak_inflight) d->peak_inflight = d->inflight;
        if (d->act_bytes) d->inflight_bytes += d->act_bytes[t.mb];
    }
}

void pp_dispatcher_finished(PpDispatcher* d, PpTask t) {
    int i = d->hrank[pp_task_index(&d->shape, t)];
    RR_ASSERT(d->state[i] == PP_TS_RUNNING);
    d->state[i] = PP_TS_DONE;
    d->n_done++;
    if (t.kind == PP_B && t.chunk == 0) {
        d->inflight--;
        if (d->act_bytes) d->inflight_bytes -= d->act_bytes[t.mb];
    }
    // Local successor: F -> B, and B -> W when the backward is split.
    if (t.kind == PP_F || (t.kind == PP_B && d->shape.split)) {
        PpTask nx = t;
        nx.kind = t.kind + 1;
        dispatcher_satisfy(d, d->hrank[pp_task_index(&d->shape, nx)]);
    }
}

/* ---- arbitration -------------------------------------------------------------------------------- */

static int dispatcher_forward_allowed(const PpDispatcher* d, int mb) {
    if (d->inflight == 0) return 1;  // otherwise a budget smaller than one microbatch deadlocks
    if (d->cap > 0 && d->inflight >= d->cap) return 0;
    if (d->act_budget > 0 && d->act_bytes && d->inflight_bytes + d->act_bytes[mb] > d->act_budget) return 0;
    return 1;
}

int pp_dispatcher_next(PpDispatcher* d, PpTask* t) { return pp_dispatcher_next_at(d, NAN, t); }

/* lookahead: whether to stay idle for a better-ranked announced task than `best` (hint rank).
 * - Only under a hint that is a sequence (1f1b, zb-h1, ...): the wait protects the order the hint
 *   means against the greedy rule's list-scheduling anomaly; a ranking (bf, bfw) is made to be run
 *   greedily and waiting there starves the pipeline (measured: up to 25% slower than ready).
 * - Never instead of a forward: a forward is what creates the work of every later stage and, through
 *   it, the gradients this rank waits for; idling in its place lost up to 40% under bfw.
 * - x counts only when its announced input is its last missing dependency and, for a gated forward,
 *   the cap and the byte budget would admit it now and no earlier forward is held back. */
static int lookahead_wait(PpDispatcher* d, int best, double now) {
    if (d->n_noticed == 0 || !d->estimate || !d->sequence_hint || isnan(now)) return 0;
    if (d->order[best].kind == PP_F) return 0;
    double e = d->estimate(d->estimate_ctx, d->rank, d->order[best]);
    if (!(e > 0)) return 0;
    for (int k = 0; k < d->n_noticed; k++) {
        int i = d->noticed[k];
        if (i >= best || d->need[i] != 1 || d->pred[i] >= now + e) continue;
        PpTask x = d->order[i];
        if (task_gated(x)) {
            if (!dispatcher_forward_allowed(d, x.mb)) continue;
            if (d->nf > 0 && d->heap_f[0] < i) continue;
        }
        d->n_waits++;
        return 1;
    }
    return 0;
}

int pp_dispatcher_next_at(PpDispatcher* d, double now, PpTask* t) {
    d->n_decisions++;
    if (d->n_started == d->n) return -1;
    if (!pp_mode_is_ready(d->mode)) {
        if (d->state[d->pos] != PP_TS_READY) return 0;
        *t = d->order[d->pos];
        return 1;
    }
    heap_clean(d, d->heap_o, &d->no);
    heap_clean(d, d->heap_f, &d->nf);
    int best = -1;
    if (d->no > 0) best = d->heap_o[0];
    if (d->nf > 0 && (best < 0 || d->heap_f[0] < best) && dispatcher_forward_allowed(d, d->order[d->heap_f[0]].mb))
        best = d->heap_f[0];
    if (best < 0) return 0;
    if (pp_mode_waits(d->mode) && lookahead_wait(d, best, now)) return 0;
    *t = d->order[best];
    return 1;
}

int pp_dispatcher_next_scan(const PpDispatcher* d, PpTask* t) {
    if (d->n_started == d->n) return -1;
    if (!pp_mode_is_ready(d->mode)) {
        if (d->state[d->pos] != PP_TS_READY) return 0;
        *t = d->order[d->pos];
        return 1;
    }
    int seen_f = 0;  // forwards are admitted in hint order: only the first ready F may be eligible
    for (int i = 0; i < d->n; i++) {
        if (d->state[i] != PP_TS_READY) continue;
        if (task_gated(d->order[i])) {
            if (seen_f++ || !dispatcher_forward_allowed(d, d->order[i].mb)) continue;
        }
        *t = d->order[i];
        return 1;
    }
    return 0;
}

int pp_dispatcher_first_unstarted(PpDispatcher* d, PpTask* t, int* eligible) {
    while (d->first < d->n && d->state[d->first] >= PP_TS_RUNNING) d->first++;
    if (d->first >= d->n) return 0;
    int i = d->first;
    *t = d->order[i];
    *eligible = d->state[i] == PP_TS_READY && (!task_gated(*t) || dispatcher_forward_allowed(d, t->mb));
    return 1;
}

int pp_dispatcher_peek_sequence(const PpDispatcher* d, PpTask* t) {
    if (d->pos >= d->n) return 0;
    *t = d->order[d->pos];
    return 1;
}

int pp_dispatcher_sequence_receives(const PpDispatcher* d, PpTask out[4]) {
    int cand[4], nc = 0, k = 0;
    if (d->pos >= d->n) return 0;
    if (d->shape.chunks == 1) {
        cand[nc++] = d->pos;
    } else {
        int w = d->shape.vshape ? 4 : 2;
        for (int j = 0; j < w; j++)
            if (d->next_fb[(size_t)w * d->pos + j] >= 0) cand[nc++] = d->next_fb[(size_t)w * d->pos + j];
    }
    for (int i = 0; i < nc; i++) {
        int sr;
        PpTask src;
        if (pp_task_input(&d->shape, d->rank, d->order[cand[i]], &sr, &src)) out[k++] = d->order[cand[i]];
    }
    return k;
}
