/* hints.c — pipeline tasks, the schedule hints as pure functions, and validity checks.
 *
 * A hint ranks every task of a rank (position in the returned order = hint rank, smaller is
 * preferred). Under the fixed modes the order is executed as a sequence; under `ready` it only breaks
 * ties between tasks whose inputs are in. Definitions follow docs/scheduler.md "Tasks, hints and dispatch modes"; interleaved-1f1b is
 * Megatron-LM's schedule table (forward_backward_pipelining_with_interleaving) and zb-h1 is Qi et
 * al.'s ZB-H1 as Megatron-DeepSpeed's ZeroBubbleH1Pipeline writes it with exact semantics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/sched/sched.h"

/* ---- tasks -------------------------------------------------------------------------------------- */

int pp_shape_tasks(const PpShape* s) { return s->chunks * s->M * (s->split ? 3 : 2); }

int pp_task_index(const PpShape* s, PpTask t) { return (t.kind * s->chunks + t.chunk) * s->M + t.mb; }

PpTask pp_task_from_index(const PpShape* s, int index) {
    PpTask t;
    t.mb = index % s->M;
    int kc = index / s->M;
    t.chunk = kc % s->chunks;
    t.kind = kc / s->chunks;
    return t;
}

static const char pp_kind_char[3] = {'F', 'B', 'W'};

int pp_vstage(const PpShape* s, int rank, int chunk) {
    if (s->vshape) return chunk == 0 ? rank : 2 * s->P - 1 - rank;
    return chunk * s->P + rank;
}

void pp_vstage_owner(const PpShape* s, int v, int* rank, int* chunk) {
    if (s->vshape) {
        *chunk = v < s->P ? 0 : 1;
        *rank = v < s->P ? v : 2 * s->P - 1 - v;
        return;
    }
    *rank = v % s->P;
    *chunk = v / s->P;
}

char* pp_task_label(const PpShape* s, PpTask t, int rank, char* buf, size_t n) {
    snprintf(buf, n, "%d%c%d", pp_vstage(s, rank, t.chunk), pp_kind_char[t.kind], t.mb);
    return buf;
}

char* pp_task_format(PpTask t, int rank, int P, char* buf, size_t n) {
    snprintf(buf, n, "%d%c%d", t.chunk * P + rank, pp_kind_char[t.kind], t.mb);
    return buf;
}

int pp_task_parse(const char* s, int rank, int P, PpTask* out) {
    char* end;
    long stage = strtol(s, &end, 10);
    if (end == s || stage < 0) return -1;
    int kind = -1;
    for (int k = 0; k < 3; k++)
        if (*end == pp_kind_char[k]) kind = k;
    if (kind < 0) return -1;
    const char* p = end + 1;
    long mb = strtol(p, &end, 10);
    if (end == p || mb < 0 || *end != '\0') return -1;
    if (stage % P != rank) return -1;
    out->chunk = (int32_t)(stage / P);
    out->kind = kind;
    out->mb = (int32_t)mb;
    return 0;
}

/* The task next to rank's task t on the way its data flows (F up the virtual stages, B down): the one it takes its
 * input from (out = 0) or gives its output to (out = 1), with its owner; 0 when there is none (a W, the first
 * stage's F input, the last stage's B input: the loss is computed locally on the last virtual stage, and the
 * outputs of the last F and the first B) */
static int task_neighbour(const PpShape* s, int rank, PpTask t, int out, int* peer_rank, PpTask* peer) {
    if (t.kind != PP_F && t.kind != PP_B) return 0;
    int u = pp_vstage(s, rank, t.chunk) + ((t.kind == PP_F) == (out != 0) ? 1 : -1);
    if (u < 0 || u >= s->chunks * s->P) return 0;
    int c;
    pp_vstage_owner(s, u, peer_rank, &c);
    peer->chunk = c;
    peer->kind = t.kind;
    peer->mb = t.mb;
    return 1;
}

int pp_task_input(const PpShape* s, int rank, PpTask t, int* src_rank, PpTask* src) {
    return task_neighbour(s, rank, t, 0, src_rank, src);
}

int pp_task_output(const PpShape* s, int rank, PpTask t, int* dst_rank, PpTask* dst) {
    return task_neighbour(s, rank, t, 1, dst_rank, dst);
}

/* ---- names -------------------------------------------------------------------------------------- */

static const char* pp_hint_names[PP_HINT_COUNT] = {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "bf", "bfw",
                                                     "zbv", "dualpipev"};
static const char* pp_mode_names[PP_MODE_ALL_COUNT] = {"fixed-sync", "fixed", "ready", "lookahead", "adaptive",
                                                         "rollout"};

const char* pp_hint_name(PpHint h) { return (h >= 0 && h < PP_HINT_COUNT) ? pp_hint_names[h] : "?"; }

int pp_hint_parse(const char* name, PpHint* h) {
    for (int i = 0; i < PP_HINT_COUNT; i++)
        if (!strcmp(name, pp_hint_names[i])) {
            *h = (PpHint)i;
            return 0;
        }
    return -1;
}

int pp_hint_is_sequence(PpHint h) { return h != PP_HINT_BF && h != PP_HINT_BFW; }

int pp_hint_vshape(PpHint h) { return h == PP_HINT_ZBV || h == PP_HINT_DUALPIPEV; }

const char* pp_mode_name(PpMode m) { return (m >= 0 && m < PP_MODE_ALL_COUNT) ? pp_mode_names[m] : "?"; }

int pp_mode_parse(const char* name, PpMode* m) {
    for (int i = 0; i < PP_MODE_ALL_COUNT; i++)
        if (!strcmp(name, pp_mode_names[i])) {
            *m = (PpMode)i;
            return 0;
        }
    return -1;
}

/* ---- cap ---------------------------------------------------------------------------------------- */

int pp_cap_parse(const char* text, PpCap* cap, char* err, size_t errlen) {
    char* end;
    double v = strtod(text, &end);
    if (end == text || !isfinite(v) || v <= 0) goto bad;
    if (*end == 'x' && end[1] == '\0') {
        cap->kind = PP_CAP_MULTIPLE;
        cap->value = v;
        return 0;
    }
    if (*end == '\0' && v == floor(v) && v < 1e9) {
        cap->kind = PP_CAP_COUNT;
        cap->value = v;
        return 0;
    }
bad:
    snprintf(err, errlen, "bad cap '%s': expected a positive integer (e.g. 4) or a multiple of the hint's "
             "peak in-flight count (e.g. 1.5x)", text);
    return -1;
}

int pp_cap_resolve(PpCap cap, int hint_peak, int P, int rank) {
    if (cap.kind == PP_CAP_COUNT) return (int)cap.value;
    if (cap.kind == PP_CAP_MULTIPLE) {
        int c = (int)floor(cap.value * hint_peak + 1e-9);
        return c < 1 ? 1 : c;
    }
    return hint_peak > 0 ? hint_peak : P - rank;
}

int pp_cap_default_peak(PpHint h, const PpShape* s, int rank) {
    return s->chunks > 1 ? pp_hint_peak(h, s, rank) : 0;
}

int pp_cap_for(PpCap cap, PpHint h, const PpShape* s, int rank) {
    int peak = cap.kind == PP_CAP_MULTIPLE ? pp_hint_peak(h, s, rank)
               : cap.kind == PP_CAP_DEFAULT ? pp_cap_default_peak(h, s, rank) : 0;
    return pp_cap_resolve(cap, peak, s->P, rank);
}

char* pp_cap_format(PpCap cap, char* buf, size_t n) {
    if (cap.kind == PP_CAP_COUNT) snprintf(buf, n, "%d", (int)cap.value);
    else if (cap.kind == PP_CAP_MULTIPLE) snprintf(buf, n, "%gx", cap.value);
    else snprintf(buf, n, "P-r");
    return buf;
}

/* ---- hints -------------------------------------------------------------------------------------- */

typedef struct {
    PpTask* out;
    int n;
    int split;
} OrderBuf;

static void ob_push(OrderBuf* b, int kind, int chunk, int mb) {
    b->out[b->n].kind = kind;
    b->out[b->n].chunk = chunk;
    b->out[b->n].mb = mb;
    b->n++;
}

/* B(c, m), followed directly by W(c, m) when the backward is split (docs/scheduler.md: "with a split backward
 * these sequences put W(m) directly after B(m)"). */
static void ob_push_bw(OrderBuf* b, int chunk, int mb) {
    ob_push(b, PP_B, chunk, mb);
    if (b->split) ob_push(b, PP_W, chunk, mb);
}

int pp_hint_check_shape(PpHint h, const PpShape* s, char* err, size_t errlen) {
    if (s->P < 1 || s->M < 1 || s->chunks < 1) {
        snprintf(err, errlen, "bad pipeline shape P=%d M=%d chunks=%d: each must be >= 1", s->P, s->M, s->chunks);
        return -1;
    }
    if (h < 0 || h >= PP_HINT_COUNT) {
        snprintf(err, errlen, "unknown hint %d", (int)h);
        return -1;
    }
    if (s->vshape && !pp_hint_vshape(h)) {
        snprintf(err, errlen, "hint %s does not run in the V layout (only zbv and dualpipev do)", pp_hint_name(h));
        return -1;
    }
    if (h == PP_HINT_INTERLEAVED) {
        if (s->chunks < 2) {
            snprintf(err, errlen, "hint interleaved-1f1b needs parallel.chunks > 1 model chunks per rank, got %d",
                     s->chunks);
            return -1;
        }
        if (s->P < 2) {
            snprintf(err, errlen, "hint interleaved-1f1b needs at least 2 pipeline ranks, got P=%d", s->P);
            return -1;
        }
        if (s->M % s->P != 0) {
            snprintf(err, errlen,
                     "hint interleaved-1f1b needs the microbatch count to be divisible by the pipeline size "
                     "(as Megatron's interleaved schedule does): M=%d, P=%d; use M=%d or %d",
                     s->M, s->P, s->M / s->P * s->P > 0 ? s->M / s->P * s->P : s->P, (s->M / s->P + 1) * s->P);
            return -1;
        }
    } else if (pp_hint_vshape(h)) {
        if (s->chunks != 2 || !s->vshape) {
            snprintf(err, errlen, "hint %s places exactly 2 model chunks per rank in a V (parallel.chunks = 2), got "
                     "chunks=%d%s", pp_hint_name(h), s->chunks, s->chunks == 2 ? " in the interleaved layout" : "");
            return -1;
        }
        if (!s->split) {
            snprintf(err, errlen, "hint %s schedules weight-gradient passes (W): it needs the split backward "
                     "(--split-backward, a duration file with W)", pp_hint_name(h));
            return -1;
        }
        if (h == PP_HINT_DUALPIPEV && s->M < 2 * s->P) {
            snprintf(err, errlen, "hint dualpipev needs at least as many microbatches as virtual stages (as torch's "
                     "ScheduleDualPipeV does): M=%d < 2P=%d", s->M, 2 * s->P);
            return -1;
        }
        return 0;
    } else if (s->chunks != 1) {
        snprintf(err, errlen, "hint %s runs one model chunk per rank, got chunks=%d (only interleaved-1f1b "
                 "interleaves chunks)", pp_hint_name(h), s->chunks);
        return -1;
    }
    return 0;
}

/* 1F1B (Megatron's forward_backward_pipelining_without_interleaving), three phases. */
static void hint_1f1b(OrderBuf* b, int P, int M, int r) {
    int w = P - 1 - r < M ? P - 1 - r : M;
    int f = 0, bw = 0;
    for (; f < w; f++) ob_push(b, PP_F, 0, f);   // warm-up: fill the pipeline
    for (; f < M; f++, bw++) {                   // steady state: one forward, one backward
        ob_push(b, PP_F, 0, f);
        ob_push_bw(b, 0, bw);
    }
    for (; bw < M; bw++) ob_push_bw(b, 0, bw);   // cool-down: drain the backwards
}

/* ZB-H1: 1F1B's warm-up, then stage r defers its first r weight passes (F B pairs without W), runs
 * F B W in the steady state, B W in the cool-down, and the r deferred W last. Without a split
 * backward there are no W tasks and this is 1F1B. */
static void hint_zbh1(OrderBuf* b, int P, int M, int r) {
    if (!b->split) {
        hint_1f1b(b, P, M, r);
        return;
    }
    int warm = P - r - 1 < M ? P - r - 1 : M;
    int f = 0, bw = 0, w = 0;
    for (; f < warm; f++) ob_push(b, PP_F, 0, f);
    for (int i = 0; i < r && f < M; i++, f++, bw++) {  // F B: the weight pass waits
        ob_push(b, PP_F, 0, f);
        ob_push(b, PP_B, 0, bw);
    }
    for (; f < M; f++, bw++, w++) {  // F B W
        ob_push(b, PP_F, 0, f);
        ob_push(b, PP_B, 0, bw);
        ob_push(b, PP_W, 0, w);
    }
    for (; bw < M; bw++, w++) {  // B W
        ob_push(b, PP_B, 0, bw);
        ob_push(b, PP_W, 0, w);
    }
    for (; w < M; w++) ob_push(b, PP_W, 0, w);
}

/* Megatron's interleaved schedule: virtual microbatch k maps through the schedule table (groups of
 * P microbatches; within a group every chunk in turn; the backward walks the chunks in reverse).
 * Warm-up 2(P-r-1) + (V-1)P forwards (clamped to the total), then F/B pairs, then the remaining B. */
static void interleaved_entry(int k, int P, int V, int forward, int* chunk, int* mb) {
    int group = k / (P * V), in = k % (P * V);
    int c = in / P;
    *mb = group * P + in % P;
    *chunk = forward ? c : V - 1 - c;
}

static void hint_interleaved(OrderBuf* b, int P, int M, int V, int r) {
    int total = M * V;
    int warm = 2 * (P - r - 1) + (V - 1) * P;
    if (warm > total) warm = total;
    int c, m;
    for (int k = 0; k < warm; k++) {
        interleaved_entry(k, P, V, 1, &c, &m);
        ob_push(b, PP_F, c, m);
    }
    for (int k = 0; k < total - warm; k++) {
        interleaved_entry(k + warm, P, V, 1, &c, &m);
        ob_push(b, PP_F, c, m);
        interleaved_entry(k, P, V, 0, &c, &m);
        ob_push_bw(b, c, m);
    }
    for (int k = total - warm; k < total; k++) {
        interleaved_entry(k, P, V, 0, &c, &m);
        ob_push_bw(b, c, m);
    }
}

/* ZBV (torch.distributed.pipelining's ScheduleZBVZeroBubble._calculate_single_rank_operations): chunk 0
 * is stage r, chunk 1 stage 2P-1-r. Warm-up 2(P-r)-1 forwards of chunk 0; r pairs (F chunk 1, F chunk 0);
 * P-r triples (F B W of chunk 1); then, while forwards remain, F chunk 0 (while there are microbatches),
 * B W chunk 0, F B W chunk 1; cool-down r pairs (B chunk 0, B chunk 1) whose W are deferred, P-r pairs
 * (B W chunk 0), the deferred W of chunk 1 and then of chunk 0. torch runs max(2P-1, M) microbatches and
 * drops the actions of microbatches >= M; so do we. */
static void ob_push_lt(OrderBuf* b, int kind, int chunk, int mb, int M) {
    if (mb < M) ob_push(b, kind, chunk, mb);
}

static void hint_zbv(OrderBuf* b, int P, int M, int r) {
    int n = 2 * P - 1 > M ? 2 * P - 1 : M;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int i = 0; i < 2 * (P - r) - 1; i++) ob_push_lt(b, PP_F, 0, f0++, M);
    for (int i = 0; i < r; i++) {
        ob_push_lt(b, PP_F, 1, f1++, M);
        ob_push_lt(b, PP_F, 0, f0++, M);
    }
    for (int i = 0; i < P - r; i++) {
        ob_push_lt(b, PP_F, 1, f1, M);
        ob_push_lt(b, PP_B, 1, b1, M);
        ob_push_lt(b, PP_W, 1, b1, M);
        f1++, b1++;
    }
    while (f1 < f0 || f0 < n) {
        if (f0 < n) ob_push_lt(b, PP_F, 0, f0++, M);
        ob_push_lt(b, PP_B, 0, b0, M);
        ob_push_lt(b, PP_W, 0, b0, M);
        b0++;
        ob_push_lt(b, PP_F, 1, f1, M);
        ob_push_lt(b, PP_B, 1, b1, M);
        ob_push_lt(b, PP_W, 1, b1, M);
        f1++, b1++;
    }
    int w0 = b0, w1 = b1;
    for (int i = 0; i < r; i++) {
        ob_push_lt(b, PP_B, 0, b0++, M);
        ob_push_lt(b, PP_B, 1, b1++, M);
    }
    for (int i = 0; i < P - r; i++) {
        ob_push_lt(b, PP_B, 0, b0++, M);
        ob_push_lt(b, PP_W, 0, w0++, M);
    }
    while (w1 < b1) ob_push_lt(b, PP_W, 1, w1++, M);
    while (w0 < b0) ob_push_lt(b, PP_W, 0, w0++, M);
}

/* DualPipeV (torch's ScheduleDualPipeV._calculate_single_rank_operations, DeepSeek's DualPipe V
 * variant): chunk 0 is stage r, chunk 1 stage 2P-1-r. An overlapped pair (forward of one chunk, full
 * backward of the other) runs here as the forward, then the backward (B W); a B without its W queues
 * the W, which a later "pending weight" slot runs (oldest first). Steps 1-8 as torch numbers them. */
typedef struct {
    OrderBuf* b;
    int f[2], bk[2];      // next forward / backward microbatch of each chunk
    int wq[256][2], wh, wt; // queued (chunk, mb) of backwards whose W is deferred
} Dpv;

static void dpv_f(Dpv* x, int c) { ob_push(x->b, PP_F, c, x->f[c]++); }
static void dpv_full_b(Dpv* x, int c) {
    ob_push(x->b, PP_B, c, x->bk[c]);
    ob_push(x->b, PP_W, c, x->bk[c]++);
}
static void dpv_b_input(Dpv* x, int c) {
    ob_push(x->b, PP_B, c, x->bk[c]);
    RR_ASSERT(x->wt - x->wh < 256);
    x->wq[x->wt % 256][0] = c;
    x->wq[x->wt % 256][1] = x->bk[c]++;
    x->wt++;
}
static void dpv_w_pending(Dpv* x) {
    if (x->wh == x->wt) return;
    int* q = x->wq[x->wh++ % 256];
    ob_push(x->b, PP_W, q[0], q[1]);
}

static void hint_dualpipev(OrderBuf* b, int P, int M, int r) {
    Dpv x = {b, {0, 0}, {0, 0}, {{0}}, 0, 0};
    for (int i = 0; i < 2 * (P - r - 1); i++) dpv_f(&x, 0);          // step 1
    for (int i = 0; i < r + 1; i++) dpv_f(&x, 0), dpv_f(&x, 1);       // step 2
    for (int i = 0; i < P - r - 1; i++) {                             // step 3
        dpv_b_input(&x, 1);
        dpv_w_pending(&x);
        dpv_f(&x, 1);
    }
    for (int i = 0; i < M - 2 * P + r + 1; i++) {                     // step 4: overlapped pairs
        dpv_f(&x, 0), dpv_full_b(&x, 1);  // (rank P-1's first is F then B unpaired: the same order here)
        dpv_f(&x, 1), dpv_full_b(&x, 0);
    }
    for (int i = 0; i < P - r - 1; i++) {                             // step 5
        dpv_full_b(&x, 1);
        dpv_f(&x, 1), dpv_full_b(&x, 0);
    }
    int zb = 0;                                                       // step 6
    for (int i = 0; i < r + 1; i++) {
        if (i == (r + 1) / 2 && r % 2 == 1) zb = 1;
        if (zb) dpv_b_input(&x, 1);
        else dpv_full_b(&x, 1);
        if (i == (r + 1) / 2 && r % 2 == 0) zb = 1;
        if (zb) dpv_b_input(&x, 0);
        else dpv_full_b(&x, 0);
    }
    for (int i = 0; i < P - r - 1; i++) {                             // step 7
        dpv_w_pending(&x);
        if (zb) dpv_b_input(&x, 0);
        else dpv_full_b(&x, 0);
    }
    for (int i = 0; i < r + 1; i++) dpv_w_pending(&x);                // step 8
    RR_ASSERT(x.wh == x.wt);
}

int pp_hint_build(PpHint h, const PpShape* s0, int rank, PpTask* order, char* err, size_t errlen) {
    PpShape sv = *s0;  // the layout follows the hint
    sv.vshape = pp_hint_vshape(h);
    const PpShape* s = &sv;
    if (pp_hint_check_shape(h, s, err, errlen)) return -1;
    if (rank < 0 || rank >= s->P) {
        snprintf(err, errlen, "rank %d out of range for P=%d", rank, s->P);
        return -1;
    }
    OrderBuf b = {order, 0, s->split};
    int M = s->M;
    switch (h) {
    case PP_HINT_GPIPE:
        for (int m = 0; m < M; m++) ob_push(&b, PP_F, 0, m);
        for (int m = 0; m < M; m++) ob_push_bw(&b, 0, m);
        break;
    case PP_HINT_1F1B: hint_1f1b(&b, s->P, M, rank); break;
    case PP_HINT_ZBH1: hint_zbh1(&b, s->P, M, rank); break;
    case PP_HINT_INTERLEAVED: hint_interleaved(&b, s->P, M, s->chunks, rank); break;
    case PP_HINT_ZBV: hint_zbv(&b, s->P, M, rank); break;
    case PP_HINT_DUALPIPEV: hint_dualpipev(&b, s->P, M, rank); break;
    case PP_HINT_BF:
        for (int m = 0; m < M; m++) ob_push_bw(&b, 0, m);
        for (int m = 0; m < M; m++) ob_push(&b, PP_F, 0, m);
        break;
    case PP_HINT_BFW:
        for (int m = 0; m < M; m++) ob_push(&b, PP_B, 0, m);
        for (int m = 0; m < M; m++) ob_push(&b, PP_F, 0, m);
        if (s->split)
            for (int m = 0; m < M; m++) ob_push(&b, PP_W, 0, m);
        break;
    default: snprintf(err, errlen, "unknown hint %d", (int)h); return -1;
    }
    RR_ASSERT(b.n == pp_shape_tasks(s));
    return b.n;
}

int pp_order_peak(const PpTask* order, int n) {
    int cur = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        if (order[i].chunk != 0) continue;  // in flight = admitted microbatches (see dispatch.c)
        if (order[i].kind == PP_F) cur++;
        else if (order[i].kind == PP_B) cur--;
        if (cur > peak) peak = cur;
    }
    return peak;
}

int pp_hint_peak(PpHint h, const PpShape* s, int rank) {
    if (!pp_hint_is_sequence(h)) return s->P - rank < s->M ? s->P - rank : s->M;
    int n = pp_shape_tasks(s);
    PpTask* order = mallocCheck(sizeof(PpTask) * n);
    char err[256];
    int k = pp_hint_build(h, s, rank, order, err, sizeof err);
    int peak = k < 0 ? 0 : pp_order_peak(order, k);
    free(order);
    return peak;
}

void pp_hint_print_grid(PpHint h, const PpShape* s0, void* file) {
    FILE* f = file;
    PpShape sv = *s0;
    sv.vshape = pp_hint_vshape(h);
    const PpShape* s = &sv;
    int n = pp_shape_tasks(s);
    PpTask* order = mallocCheck(sizeof(PpTask) * n);
    char err[256], buf[32];
    int width = 0;
    // Cell width from the widest label so the columns line up (steps are columns).
    snprintf(buf, sizeof buf, "%dW%d", s->chunks * s->P - 1, s->M - 1);
    width = (int)strlen(buf);
    fprintf(f, "hint %s  P=%d M=%d chunks=%d%s\n", pp_hint_name(h), s->P, s->M, s->chunks,
            s->split ? " split-backward" : "");
    fprintf(f, "%6s", "step");
    for (int i = 0; i < n; i++) fprintf(f, " %*d", width, i);
    fputc('\n', f);
    for (int r = 0; r < s->P; r++) {
        int k = pp_hint_build(h, s, r, order, err, sizeof err);
        if (k < 0) {
            fprintf(f, "error: %s\n", err);
            break;
        }
        fprintf(f, "%5s%d", "r", r);
        for (int i = 0; i < k; i++) fprintf(f, " %*s", width, pp_task_label(s, order[i], r, buf, sizeof buf));
        fputc('\n', f);
    }
    free(order);
}

/* ---- validity checks ---------------------------------------------------------------------------- */

int pp_order_check(const PpShape* s, int rank, const PpTask* order, int n, int sequence, char* err,
                   size_t errlen) {
    int total = pp_shape_tasks(s);
    char buf[32];
    if (n != total) {
        snprintf(err, errlen, "rank %d: order has %d tasks, expected %d", rank, n, total);
        return -1;
    }
    int* pos = mallocCheck(sizeof(int) * total);
    for (int i = 0; i < total; i++) pos[i] = -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        PpTask t = order[i];
        if (t.kind < 0 || t.kind > (s->split ? PP_W : PP_B) || t.chunk < 0 || t.chunk >= s->chunks || t.mb < 0 ||
            t.mb >= s->M) {
            snprintf(err, errlen, "rank %d: step %d: task (chunk %d, kind %d, mb %d) is not a task of this shape",
                     rank, i, t.chunk, t.kind, t.mb);
            rc = -1;
            break;
        }
        int k = pp_task_index(s, t);
        if (pos[k] >= 0) {
            snprintf(err, errlen, "rank %d: task %s appears twice (steps %d and %d)", rank,
                     pp_task_label(s, t, rank, buf, sizeof buf), pos[k], i);
            rc = -1;
        }
        pos[k] = i;
    }
    if (!rc && sequence) {
        for (int c = 0; c < s->chunks && !rc; c++)
            for (int m = 0; m < s->M && !rc; m++) {
                PpTask f = {c, PP_F, m}, b = {c, PP_B, m}, w = {c, PP_W, m};
                if (pos[pp_task_index(s, f)] > pos[pp_task_index(s, b)]) {
                    snprintf(err, errlen, "rank %d: %s is ordered before its forward %s", rank,
                             pp_task_label(s, b, rank, buf, sizeof buf),
                             pp_task_label(s, f, rank, buf + 16, 16));
                    rc = -1;
                } else if (s->split && pos[pp_task_index(s, b)] > pos[pp_task_index(s, w)]) {
                    snprintf(err, errlen, "rank %d: %s is ordered before its backward %s", rank,
                             pp_task_label(s, w, rank, buf, sizeof buf),
                             pp_task_label(s, b, rank, buf + 16, 16));
                    rc = -1;
                }
            }
    }
    free(pos);
    return rc;
}

int pp_exec_check(const PpShape* s, PpExec* const* exec, const int* n_exec, double latency, char* err,
                  size_t errlen) {
    int total = pp_shape_tasks(s);
    char b1[32], b2[32];
    // (P, tasks) start/end of every task, to look up producers and local predecessors.
    double* start = mallocCheck(sizeof(double) * s->P * total);
    double* end = mallocCheck(sizeof(double) * s->P * total);
    for (int i = 0; i < s->P * total; i++) start[i] = end[i] = NAN;
    int rc = 0;
    for (int r = 0; r < s->P && !rc; r++) {
        if (n_exec[r] != total) {
            snprintf(err, errlen, "rank %d ran %d tasks, expected %d", r, n_exec[r], total);
            rc = -1;
            break;
        }
        for (int i = 0; i < n_exec[r]; i++) {
            PpExec e = exec[r][i];
            int k = pp_task_index(s, e.task);
            if (!isnan(start[r * total + k])) {
                snprintf(err, errlen, "rank %d ran %s twice", r, pp_task_label(s, e.task, r, b1, sizeof b1));
                rc = -1;
                break;
            }
            if (!(e.end >= e.start)) {
                snprintf(err, errlen, "rank %d: %s ends (%g) before it starts (%g)", r,
                         pp_task_label(s, e.task, r, b1, sizeof b1), e.end, e.start);
                rc = -1;
                break;
            }
            if (i > 0 && e.start < exec[r][i - 1].end - 1e-9 * (1 + fabs(e.start))) {
                snprintf(err, errlen, "rank %d: %s starts at %g while %s runs until %g", r,
                         pp_task_label(s, e.task, r, b1, sizeof b1), e.start,
                         pp_task_label(s, exec[r][i - 1].task, r, b2, sizeof b2), exec[r][i - 1].end);
                rc = -1;
                break;
            }
            start[r * total + k] = e.start;
            end[r * total + k] = e.end;
        }
    }
    for (int r = 0; r < s->P && !rc; r++)
        for (int k = 0; k < total && !rc; k++) {
            PpTask t = pp_task_from_index(s, k);
            double st = start[r * total + k];
            double tol = 1e-9 * (1 + fabs(st));
            if (t.kind != PP_F) {  // local predecessor: F before B, B before W
                PpTask pre = t;
                pre.kind = t.kind - 1;
                double pe = end[r * total + pp_task_index(s, pre)];
                if (st < pe - tol) {
                    snprintf(err, errlen, "rank %d: %s starts at %g before %s ends at %g", r,
                             pp_task_label(s, t, r, b1, sizeof b1), st,
                             pp_task_label(s, pre, r, b2, sizeof b2), pe);
                    rc = -1;
                }
            }
            int sr;
            PpTask src;
            if (!rc && pp_task_input(s, r, t, &sr, &src)) {
                double pe = end[sr * total + pp_task_index(s, src)];
                if (st < pe + latency - tol) {
                    snprintf(err, errlen, "rank %d: %s starts at %g before its input from rank %d (%s, ended %g, "
                             "latency %g) can arrive", r, pp_task_label(s, t, r, b1, sizeof b1), st, sr,
                             pp_task_label(s, src, sr, b2, sizeof b2), pe, latency);
                    rc = -1;
                }
            }
        }
    free(start);
    free(end);
    return rc;
}
