/* pipeline.c — one pipeline rank's step: dispatcher + transport + stages. See pipeline.h. */
#include "runtime/pipeline/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <sched.h>

/* replay: the last part of a task's wait spent yielding instead of sleeping (s), and the longest sleep
 * between two progress calls before that: without a doorbell (s), and with one (s; a message posted to
 * this rank rings it, so the slice only bounds what a lost ring could delay) */
#define REPLAY_SPIN_S 100e-6
#define REPLAY_SLICE_S 1e-3
#define REPLAY_SLICE_BELL_S 10e-3

#include "engine/util.h"
#include "runtime/plan/plan.h"

/* Saved activations of one chunk: a pool that grows to the peak number of microbatches in flight
 * during the first step and is reused afterwards (the step itself allocates nothing once warm). */
typedef struct {
    StageActs* acts;
    int* busy;
    int n;
} ActsPool;

struct Pipeline {
    PipelineConfig cfg;
    Comm* comm;
    Transport* tr;
    Stage** stages;
    int S;  /* virtual stages P * chunks */
    int Dt;
    size_t edge;       /* floats of the largest message of this rank's chunks (stage_edge_max_floats: the LM's (max_tokens,
                        * Dt), or the tower's (tokens, Dv) where the tower runs over stages) */
    PpShape shape;
    PpTask* order;
    int n_tasks;
    ActsPool* pools;   /* (chunks) */
    int** mb_slot;     /* (chunks, M) pool slot of each microbatch in flight */
    float** act_in;    /* (chunks) -> (M, max_tokens, Dt) received activations */
    float** grad_in;   /* (chunks) -> (M, max_tokens, Dt) received gradients */
    float* out_buf;    /* (max_tokens, Dt) output of the task just run, before it is sent (backend memory) */
    /* Device backends: messages travel through host memory (MPI is not assumed CUDA-aware). Received
     * payloads land in host act_in / grad_in and are copied to dev_in before the task; outputs are
     * copied from out_buf to host_out before the send. On the CPU backend both are unused. */
    int on_host;
    float* dev_in;     /* (max_tokens, Dt) backend memory */
    float* host_out;   /* (max_tokens, Dt) host memory */
    /* A device Comm (NCCL, comm->device_memory) on a device backend: messages go device to device.
     * act_in / grad_in are backend memory, received into directly: a task's input is ready when its
     * receive's CUDA event has completed (the transport polls it, never blocking). A send copies
     * out_buf, on the compute stream, into a buffer of send_pool, and the communication stream waits
     * for the copy's event (send_ev), not the host. */
    int dev_comm;
    void** send_pool;  /* (n_send_pool) device buffers of (max_tokens, Dt) floats */
    int* send_busy;
    int n_send_pool;
    void* send_ev;
    long pool_allocs;  /* send_pool buffers allocated past ensure_buffers' two per direction per chunk */
    int M_alloc;
    int M_checked;         /* the microbatch count whose dry run passed */
    double act_bytes_max; /* one microbatch's StageActs at the full budget */
    const char* dump_dir;  /* of the step being run, or NULL */
    char* err;             /* of the step being run */
    size_t err_len;
    const Microbatch* mbs; /* of the step being run (the cost model's units) */
    double* cost_s;        /* (chunks, 3) lookahead cost model: measured seconds ... */
    double* cost_u;        /* (chunks, 3) ... and work units, summed over every task run so far */
    double* notice_in;     /* (chunks, 2, 2, M) received notices and ahead-notices, in seconds */
    uint8_t* ahead_sent;   /* (chunks, 3, M) lookahead: the ahead-notice of this task's output went out */
    int look;              /* this step's ranks send start notices (lookahead, or adaptive's choice of it) */
    PpMode step_mode;      /* the mode this step runs under (adaptive: its plan's choice) */
    PpCap step_cap;        /* the in-flight cap it runs ready under (adaptive: its plan's, plan_step) */
    PpCap meas_cap;        /* the cap of the step measured for the learner */
    /* adaptive's learner (sim.h, PpPlanLearn): this rank's measured task durations of the step being run
     * (3, meas_M: kind x microbatch, chunks summed), valid once that step finished (meas_ok), and the
     * plan's predictions for it; the next step's plan shares them over the pipeline group */
    double* meas;
    int meas_M, meas_ok;
    double meas_pred[3];
    PpPlanLearn learn;
    int* step_order;       /* (M) the last step's order (adaptive reordered it: slot s = microbatch step_order[s]) */
    int step_reordered;    /* ... and whether it was reordered (pipeline_step_order) */
    PipelineGradsDone grads_done;
    void* grads_done_ctx;
    int* grad_tasks;       /* (chunks) weight-gradient tasks (W, or fused B) finished this step */
    PipelineTaskHook task_hook;
    void* task_hook_ctx;
};

/* ---- leader-decides (docs/parallel.md "Tensor parallelism"): the TP leader's choices travel to its peers */
#define TP_CHOICE_TAG 7
typedef struct {
    Comm* tp;
    int leader, follower;
    int32_t* sent;       /* leader: (n, 3) choices, alive until their sends complete */
    CommReq** sreq;      /* leader: (n, T - 1) */
    int n_sent;
    int32_t rbuf[3];     /* peer: the posted receive of the next choice */
    CommReq* rreq;
    int received, have;  /* peer: choices received; one is waiting to run */
    PpTask want;
    double t_have;       /* when `want` arrived */
} TpCoord;

static int tp_choice_send(TpCoord* c, PpTask t, char* err, size_t err_len) {
    int32_t* b = c->sent + 3 * c->n_sent;
    b[0] = (int32_t)t.kind, b[1] = t.chunk, b[2] = t.mb;
    for (int q = 1; q < c->tp->size; q++) {
        char e[256];
        CommReq** r = &c->sreq[(size_t)c->n_sent * (size_t)(c->tp->size - 1) + (size_t)(q - 1)];
        if (c->tp->ops->isend(c->tp, q, TP_CHOICE_TAG, b, sizeof(int32_t) * 3, 0, r, e, sizeof e) != 0) {
            snprintf(err, err_len, "TP leader: sending its choice to TP rank %d: %s", q, e);
            return -1;
        }
    }
    c->n_sent++;
    return 0;
}

static int tp_choice_post(TpCoord* c, char* err, size_t err_len) {
    char e[256];
    if (c->tp->ops->irecv(c->tp, 0, TP_CHOICE_TAG, c->rbuf, sizeof c->rbuf, &c->rreq, e, sizeof e) != 0) {
        snprintf(err, err_len, "TP rank %d: posting the receive of the leader's next choice: %s", c->tp->rank, e);
        return -1;
    }
    return 0;
}

/* Peer: take the next choice when it has arrived. Returns 0 or -1 with a message. */
static int tp_choice_poll(TpCoord* c, const PpShape* shape, int n, char* err, size_t err_len) {
    if (c->have || !c->rreq) return 0;
    int done = 0;
    size_t bytes = 0;
    char e[256];
    if (c->tp->ops->test(c->tp, &c->rreq, &done, &bytes, e, sizeof e) != 0) {
        snprintf(err, err_len, "TP rank %d: receiving the leader's choice: %s", c->tp->rank, e);
        return -1;
    }
    if (!done) return 0;
    if (bytes != sizeof c->rbuf || c->rbuf[0] < PP_F || c->rbuf[0] > PP_W || c->rbuf[1] < 0 ||
        c->rbuf[1] >= shape->chunks || c->rbuf[2] < 0 || c->rbuf[2] >= shape->M) {
        snprintf(err, err_len, "TP rank %d: the leader's choice %d is malformed (%zu bytes: kind %d, chunk %d, mb %d)",
                 c->tp->rank, c->received, bytes, (int)c->rbuf[0], (int)c->rbuf[1], (int)c->rbuf[2]);
        return -1;
    }
    c->want = (PpTask){c->rbuf[1], (PpKind)c->rbuf[0], c->rbuf[2]};
    c->have = 1;
    c->t_have = rr_now();
    if (++c->received < n) return tp_choice_post(c, err, err_len);
    return 0;
}

/* Leader: wait until every choice's send completed (peers may still be running). */
static int tp_choice_flush(TpCoord* c, double timeout_s, char* err, size_t err_len) {
    size_t k = (size_t)c->n_sent * (size_t)(c->tp->size - 1);
    double t0 = rr_now();
    for (;;) {
        int left = 0;
        for (size_t i = 0; i < k; i++) {
            if (!c->sreq[i]) continue;
            int done = 0;
            char e[256];
            if (c->tp->ops->test(c->tp, &c->sreq[i], &done, NULL, e, sizeof e) != 0) {
                snprintf(err, err_len, "TP leader: a choice's send failed: %s", e);
                return -1;
            }
            left += !done;
        }
        if (!left) return 0;
        if (timeout_s > 0 && rr_now() - t0 > timeout_s) {
            snprintf(err, err_len, "TP leader: %d choice(s) not delivered after %.0f s: a TP peer probably died", left,
                     rr_now() - t0);
            return -1;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

const int* pipeline_step_order(const Pipeline* p) { return p->step_reordered ? p->step_order : NULL; }

void pipeline_set_task_hook(Pipeline* p, PipelineTaskHook fn, void* ctx) {
    p->task_hook = fn;
    p->task_hook_ctx = ctx;
}

void pipeline_set_grads_done(Pipeline* p, PipelineGradsDone fn, void* ctx) {
    p->grads_done = fn;
    p->grads_done_ctx = ctx;
}

int pipeline_hint_splits(PpHint h) {
    return h == PP_HINT_ZBH1 || h == PP_HINT_BFW || h == PP_HINT_ZBV || h == PP_HINT_DUALPIPEV;
}

static int vstage(const Pipeline* p, int chunk) { return pp_vstage(&p->shape, p->cfg.rank, chunk); }

/* Refuse a hint x mode x cap that cannot finish with M microbatches (the simulator on uniform durations),
 * at start, instead of a rank timing out. */
static int pipeline_dry_run(Pipeline* p, int M, char* err, size_t err_len) {
    if (M == p->M_checked) return 0;
    PpShape s = p->shape;
    s.M = M;
    char e[512];
    if (pp_dry_run(p->cfg.hint, &s, p->cfg.mode, p->cfg.cap, e, sizeof e) != 0) {
        snprintf(err, err_len, "hint %s, mode %s with %d ranks x %d chunk(s) and %d microbatches cannot run: %s",
                 pp_hint_name(p->cfg.hint), pp_mode_name(p->cfg.mode), p->cfg.P, p->cfg.chunks, M, e);
        return -1;
    }
    p->M_checked = M;
    return 0;
}

/* ---- device sends (dev_comm): the pool of send buffers ----
 * A buffer is busy from its send until the transport sees the send complete; every send of a step completes before
 * the step ends (transport_flush). How many are in flight at once depends on when the peers receive (readiness,
 * load), up to every send of the step (one per microbatch per direction per chunk), each the stage's largest message:
 * allocating that bound would double what receiving holds (LLaVA-1.5-7B at 32 microbatches of 4096 tokens: 64 messages
 * of 64 MiB, 4 GiB more a stage). ensure_buffers allocates, before the first step, two per direction per chunk (or the step's every send
 * where there are fewer): a send and the next one while it completes, where a pool grown only in the first step
 * grew in whichever later step first had one more in flight (a device allocation, and a synchronisation, after the
 * first step: docs/cuda.md "A stage's memory, allocated once"). A pool that needs more still grows (pool_allocs
 * counts it). */
static void send_pool_grow(Pipeline* p, int n) {
    if (n <= p->n_send_pool) return;
    const Backend* be = p->stages[0]->be;
    p->send_pool = reallocCheck(p->send_pool, sizeof(void*) * (size_t)n);
    p->send_busy = reallocCheck(p->send_busy, sizeof(int) * (size_t)n);
    for (int i = p->n_send_pool; i < n; i++) {
        p->send_pool[i] = be->dev->alloc(sizeof(float) * p->edge);
        p->send_busy[i] = 0;
    }
    p->n_send_pool = n;
}
static void* send_acquire(void* ctx, size_t bytes) {
    Pipeline* p = ctx;
    RR_ASSERT(bytes <= sizeof(float) * p->edge);
    for (int i = 0; i < p->n_send_pool; i++)
        if (!p->send_busy[i]) {
            p->send_busy[i] = 1;
            return p->send_pool[i];
        }
    send_pool_grow(p, p->n_send_pool + 1);
    p->send_busy[p->n_send_pool - 1] = 1;
    p->pool_allocs++;
    return p->send_pool[p->n_send_pool - 1];
}
static void send_release(void* ctx, void* buf) {
    Pipeline* p = ctx;
    for (int i = 0; i < p->n_send_pool; i++)
        if (p->send_pool[i] == buf) {
            p->send_busy[i] = 0;
            return;
        }
    rr_die("internal: a send buffer that is not the pipeline's");
}
static void* send_copy_mark(void* ctx, void* dst, const void* src, size_t bytes) {
    Pipeline* p = ctx;
    const Backend* be = p->stages[0]->be;
    if (bytes) be->dev->copy_d2d(be, dst, src, bytes);
    be->dev->event_record(be, p->send_ev);
    return p->send_ev;
}

Pipeline* pipeline_create(const PipelineConfig* cfg, Stage** stages, Comm* comm, int M, char* err, size_t err_len) {
    PpShape shape = {cfg->P, 1, cfg->chunks, cfg->split || pipeline_hint_splits(cfg->hint), pp_hint_vshape(cfg->hint)};
    if ((int)cfg->mode < 0 || (int)cfg->mode >= PP_MODE_COUNT) {
        snprintf(err, err_len,
                 "mode '%s' is a simulator experiment (it simulates the rest of the step with every rank's state at "
                 "each decision, which no rank of a running pipeline has): run it with rrfp-mm sim or "
                 "rrfp-bench-adaptive; the runtime's modes are fixed-sync, fixed, ready, lookahead and adaptive",
                 pp_mode_name(cfg->mode));
        return NULL;
    }
    if (!pp_mode_is_ready(cfg->mode) && !pp_hint_is_sequence(cfg->hint)) {
        snprintf(err, err_len,
                 "hint %s ranks every backward before every forward, which is not an executable sequence: it runs "
                 "under runtime mode 'ready' only (got '%s')",
                 pp_hint_name(cfg->hint), pp_mode_name(cfg->mode));
        return NULL;
    }
    Pipeline* p = callocCheck(1, sizeof *p);
    p->cfg = *cfg;
    p->cfg.split = shape.split;
    p->comm = comm;
    p->stages = stages;
    p->S = cfg->P * cfg->chunks;
    p->Dt = stages[0]->cfg.Dt;
    for (int c = 0; c < cfg->chunks; c++) {
        size_t e = stage_edge_max_floats(stages[c], cfg->max_tokens, cfg->max_patches);
        if (e > p->edge) p->edge = e;
    }
    p->shape = shape;
    if (comm->size != cfg->P || comm->rank != cfg->rank) {
        snprintf(err, err_len, "internal: pipeline group has %d ranks (this one %d), the config says %d (rank %d)",
                 comm->size, comm->rank, cfg->P, cfg->rank);
        free(p);
        return NULL;
    }
    p->tr = transport_create(cfg->transport, comm);
    transport_enable_doorbell(p->tr); /* collective: an idle rank wakes when a message is posted to it */
    p->cost_s = callocCheck((size_t)cfg->chunks * 3, sizeof(double));
    p->cost_u = callocCheck((size_t)cfg->chunks * 3, sizeof(double));
    p->pools = callocCheck((size_t)cfg->chunks, sizeof *p->pools);
    p->mb_slot = callocCheck((size_t)cfg->chunks, sizeof *p->mb_slot);
    p->act_in = callocCheck((size_t)cfg->chunks, sizeof *p->act_in);
    p->grad_in = callocCheck((size_t)cfg->chunks, sizeof *p->grad_in);
    p->grad_tasks = callocCheck((size_t)cfg->chunks, sizeof *p->grad_tasks);
    const Backend* be = stages[0]->be;
    size_t one = sizeof(float) * p->edge;
    p->on_host = be->dev->host_addressable;
    p->dev_comm = !p->on_host && comm->device_memory;
    if (p->dev_comm) {
        static const TransportDevice ops = {NULL, send_acquire, send_release, send_copy_mark};
        TransportDevice d = ops;
        d.ctx = p;
        transport_set_device(p->tr, &d);
        p->send_ev = be->dev->event_create();
    }
    p->out_buf = be->dev->alloc(one);
    if (!p->on_host && !p->dev_comm) {
        p->dev_in = be->dev->alloc(one);
        p->host_out = mallocCheck(one);
    }
    p->act_bytes_max = (double)stage_acts_bytes(stages[0], cfg->max_tokens, cfg->max_patches, shape.split);
    for (int c = 0; c < cfg->chunks; c++) {
        Stage* st = stages[c];
        int v = pp_vstage(&shape, cfg->rank, c);
        if ((v == 0) != !stage_takes_hidden(st) || (v == p->S - 1) != (st->last != 0)) {
            snprintf(err, err_len, "internal: chunk %d of rank %d is virtual stage %d but its Stage has first=%d last=%d "
                     "(tower blocks [%d, %d))", c, cfg->rank, v, st->first, st->last, st->tv0, st->tv1);
            pipeline_free(p);
            return NULL;
        }
    }
    if (pipeline_dry_run(p, M, err, err_len) != 0) {
        pipeline_free(p);
        return NULL;
    }
    return p;
}

void pipeline_free(Pipeline* p) {
    if (!p) return;
    const Backend* be = p->stages[0]->be;
    for (int c = 0; c < p->cfg.chunks; c++) {
        for (int i = 0; i < p->pools[c].n; i++) stage_acts_free(&p->pools[c].acts[i], p->stages[c]);
        free(p->pools[c].acts);
        free(p->pools[c].busy);
        free(p->mb_slot[c]);
        if (p->on_host || p->dev_comm) {
            if (p->act_in[c]) be->dev->free(p->act_in[c]);
            if (p->grad_in[c]) be->dev->free(p->grad_in[c]);
        } else {
            free(p->act_in[c]);
            free(p->grad_in[c]);
        }
    }
    transport_free(p->tr); /* its sends are done with the pool's buffers */
    p->tr = NULL;
    for (int i = 0; i < p->n_send_pool; i++) be->dev->free(p->send_pool[i]);
    free(p->send_pool);
    free(p->send_busy);
    if (p->send_ev) be->dev->event_destroy(p->send_ev);
    free(p->pools);
    free(p->mb_slot);
    free(p->act_in);
    free(p->grad_in);
    free(p->grad_tasks);
    be->dev->free(p->out_buf);
    if (p->dev_in) be->dev->free(p->dev_in);
    free(p->host_out);
    free(p->order);
    free(p->cost_s);
    free(p->meas);
    free(p->step_order);
    free(p->cost_u);
    free(p->notice_in);
    free(p->ahead_sent);
    free(p);
}

static StageActs* acts_acquire(Pipeline* p, int chunk, int mb) {
    ActsPool* pool = &p->pools[chunk];
    int slot = -1;
    for (int i = 0; i < pool->n; i++)
        if (!pool->busy[i]) {
            slot = i;
            break;
        }
    if (slot < 0) {
        pool->acts = reallocCheck(pool->acts, sizeof(StageActs) * (size_t)(pool->n + 1));
        pool->busy = reallocCheck(pool->busy, sizeof(int) * (size_t)(pool->n + 1));
        slot = pool->n++;
        stage_acts_init(&pool->acts[slot], p->stages[chunk], p->cfg.max_tokens, p->cfg.max_patches, p->cfg.split);
    }
    pool->busy[slot] = 1;
    p->mb_slot[chunk][mb] = slot;
    return &pool->acts[slot];
}

static StageActs* acts_of(Pipeline* p, int chunk, int mb) {
    int slot = p->mb_slot[chunk][mb];
    RR_ASSERT(slot >= 0 && p->pools[chunk].busy[slot]);
    return &p->pools[chunk].acts[slot];
}

static void acts_release(Pipeline* p, int chunk, int mb) {
    int slot = p->mb_slot[chunk][mb];
    RR_ASSERT(slot >= 0);
    p->pools[chunk].busy[slot] = 0;
    p->mb_slot[chunk][mb] = -1;
}

/* Bytes of task t's input message (F: the stage's hidden_in; B: the gradient of its hidden_out) and of its output
 * (F: hidden_out; B: the gradient of hidden_in): the LM's (T, Dt), or the tower's (tokens, Dv) at an edge inside the
 * tower; a gradient no block below needs (a frozen tower's) travels as an empty message, the B task's readiness only */
static size_t task_in_bytes(const Pipeline* p, PpTask t, const Microbatch* mb) {
    const Stage* st = p->stages[t.chunk];
    size_t n = t.kind == PP_F ? stage_in_floats(st, mb) : stage_takes_grad(st) ? stage_out_floats(st, mb) : 0;
    return sizeof(float) * n;
}
static size_t task_out_bytes(const Pipeline* p, PpTask t, const Microbatch* mb) {
    const Stage* st = p->stages[t.chunk];
    size_t n = t.kind == PP_F ? stage_out_floats(st, mb) : stage_gives_grad(st) ? stage_in_floats(st, mb) : 0;
    return sizeof(float) * n;
}

static float* in_buf(Pipeline* p, PpTask t) {
    float** base = t.kind == PP_F ? p->act_in : p->grad_in;
    return base[t.chunk] + (size_t)t.mb * p->edge;
}

/* ---- lookahead: the cost model and the start notices ------------------------------------------- */

/* a microbatch's work units on a chunk: its tokens, plus its patches on a chunk that runs tower blocks, plus 1 */
static double mb_units(const Microbatch* mb, int vit) { return (double)mb->T + (vit ? (double)mb->Np : 0.0) + 1.0; }

static double task_units(const Pipeline* p, PpTask t) { return mb_units(&p->mbs[t.mb], p->stages[t.chunk]->tower); }

static double cost_model_estimate(void* ctx, int rank, PpTask t) {
    (void)rank;
    const Pipeline* p = ctx;
    int k = t.chunk * 3 + t.kind;
    if (p->cost_u[k] <= 0) return 0;  /* nothing of this (chunk, kind) measured yet: unknown */
    return p->cost_s[k] / p->cost_u[k] * task_units(p, t);
}

static double task_estimate(Pipeline* p, PpTask t) {
    if (p->cfg.estimate) return p->cfg.estimate(p->cfg.estimate_ctx, p->cfg.rank, t);
    return cost_model_estimate(p, p->cfg.rank, t);
}

static double* notice_slot(Pipeline* p, PpTask t, int ahead) {
    return &p->notice_in[(((size_t)t.chunk * 2 + (t.kind == PP_F ? 0 : 1)) * 2 + (size_t)ahead) * (size_t)p->M_alloc +
                         (size_t)t.mb];
}

/* Send the ahead-notice of task t's output once: `in_s` seconds until t can start (0 when it starts
 * now), plus t's estimate; 0 = unknown when either is. */
static int send_ahead(Pipeline* p, PpTask t, double in_s, int known, char* err, size_t err_len) {
    uint8_t* sent = &p->ahead_sent[((size_t)t.chunk * 3 + (size_t)t.kind) * (size_t)p->M_alloc + (size_t)t.mb];
    int dst;
    PpTask dst_task;
    if (*sent || t.kind == PP_W || !pp_task_output(&p->shape, p->cfg.rank, t, &dst, &dst_task)) return 0;
    *sent = 1;
    if (dst == p->cfg.rank) return 0; /* a local hand-off needs no notice: it is in as soon as t ends */
    double e = task_estimate(p, t);
    double v = known && e > 0 ? (in_s > 0 ? in_s : 0) + e : 0;
    MsgKey k = {t.kind == PP_F ? MSG_AHEAD_ACT : MSG_AHEAD_GRAD, dst_task.chunk, t.mb};
    return transport_isend(p->tr, dst, k, &v, sizeof v, err, err_len);
}

/* The message key of the input of local task t (what its producer sends). */
static MsgKey input_key(PpTask t) { return (MsgKey){t.kind == PP_F ? MSG_ACT : MSG_GRAD, t.chunk, t.mb}; }

static int post_input(Pipeline* p, PpTask t, const Microbatch* mbs) {
    int src;
    PpTask src_task;
    if (t.kind == PP_W || !pp_task_input(&p->shape, p->cfg.rank, t, &src, &src_task)) return 0;
    if (src == p->cfg.rank) return 0; /* the V's tip feeds itself: handed over locally (local_handoff) */
    if (p->look) {
        MsgKey nk = {t.kind == PP_F ? MSG_NOTICE_ACT : MSG_NOTICE_GRAD, t.chunk, t.mb};
        MsgKey ak = {t.kind == PP_F ? MSG_AHEAD_ACT : MSG_AHEAD_GRAD, t.chunk, t.mb};
        if (transport_post_recv(p->tr, src, nk, notice_slot(p, t, 0), sizeof(double), p->err, p->err_len) != 0 ||
            transport_post_recv(p->tr, src, ak, notice_slot(p, t, 1), sizeof(double), p->err, p->err_len) != 0)
            return -1;
    }
    return transport_post_recv(p->tr, src, input_key(t), in_buf(p, t), task_in_bytes(p, t, &mbs[t.mb]), p->err, p->err_len);
}

/* fixed-sync: post the receives the dispatcher says are due now, each once. */
static int post_sequence_receives(Pipeline* p, const PpDispatcher* d, const Microbatch* mbs, uint8_t* posted) {
    PpTask due[4];
    int k = pp_dispatcher_sequence_receives(d, due);
    for (int i = 0; i < k; i++) {
        int idx = pp_task_index(&p->shape, due[i]);
        if (posted[idx]) continue;
        posted[idx] = 1;
        if (post_input(p, due[i], mbs) != 0) return -1;
    }
    return 0;
}

static void ensure_buffers(Pipeline* p, int M) {
    if (M <= p->M_alloc) return;
    const Backend* be = p->stages[0]->be;
    size_t per = p->edge;
    for (int c = 0; c < p->cfg.chunks; c++) {
        int v = vstage(p, c);
        size_t bytes = sizeof(float) * per * (size_t)M;
        if (p->on_host || p->dev_comm) {
            if (p->act_in[c]) be->dev->free(p->act_in[c]);
            if (p->grad_in[c]) be->dev->free(p->grad_in[c]);
            p->act_in[c] = v > 0 ? be->dev->alloc(bytes) : NULL;
            p->grad_in[c] = v < p->S - 1 ? be->dev->alloc(bytes) : NULL;
        } else {
            free(p->act_in[c]);
            free(p->grad_in[c]);
            p->act_in[c] = v > 0 ? mallocCheck(bytes) : NULL;
            p->grad_in[c] = v < p->S - 1 ? mallocCheck(bytes) : NULL;
        }
        p->mb_slot[c] = reallocCheck(p->mb_slot[c], sizeof(int) * (size_t)M);
        for (int m = 0; m < M; m++) p->mb_slot[c][m] = -1;
    }
    if (p->dev_comm) { /* the sends a step has in flight at once: see send_pool_grow */
        int sends = 0, per = M < 2 ? M : 2;
        for (int c = 0; c < p->cfg.chunks; c++) sends += per * ((vstage(p, c) < p->S - 1) + (vstage(p, c) > 0));
        send_pool_grow(p, sends);
    }
    p->notice_in = reallocCheck(p->notice_in, sizeof(double) * (size_t)p->cfg.chunks * 4 * (size_t)M);
    p->ahead_sent = reallocCheck(p->ahead_sent, (size_t)p->cfg.chunks * 3 * (size_t)M);
    p->M_alloc = M;
}

/* The received input of task t where the backend can read it. */
static const float* task_input(Pipeline* p, PpTask t, const Microbatch* mb) {
    float* h = in_buf(p, t);
    if (p->on_host || p->dev_comm) return h; /* dev_comm: its receive's event has completed */
    p->stages[t.chunk]->be->dev->copy_h2d(p->stages[t.chunk]->be, p->dev_in, h, task_in_bytes(p, t, mb));
    return p->dev_in;
}

/* The output of the task just run, in host memory for the transport. */
static const float* task_output(Pipeline* p, size_t bytes) {
    if (p->on_host || p->dev_comm) return p->out_buf;
    p->stages[0]->be->dev->copy_d2h(p->stages[0]->be, p->host_out, p->out_buf, bytes);
    return p->host_out;
}

/* The V layout's tip (rank P-1 holds stages P-1 and P): the output of the task just run (p->out_buf) is
 * the input of another chunk of this rank, copied straight into that chunk's input slot instead of
 * travelling through the transport (which has no messages to self). */
static void local_handoff(Pipeline* p, PpTask dst_task, size_t bytes) {
    float* to = in_buf(p, dst_task);
    const Backend* be = p->stages[0]->be;
    if (p->on_host) memcpy(to, p->out_buf, bytes);
    else if (p->dev_comm) be->dev->copy_d2d(be, to, p->out_buf, bytes);
    else be->dev->copy_d2h(be, to, p->out_buf, bytes);
}

/* Run task t; returns 1 when it produced a message (left in p->out_buf) for *dst / *key, 0 when not,
 * -1 with p->err on a failed dump. */
static int run_task(Pipeline* p, PpTask t, const Microbatch* mbs, float loss_scale, double* loss_sum, int* dst,
                    MsgKey* key) {
    Stage* st = p->stages[t.chunk];
    const Microbatch* mb = &mbs[t.mb];
    int v = vstage(p, t.chunk);
    PpTask dst_task;
    int has_out = t.kind != PP_W && pp_task_output(&p->shape, p->cfg.rank, t, dst, &dst_task);
    if (has_out) *key = (MsgKey){t.kind == PP_F ? MSG_ACT : MSG_GRAD, dst_task.chunk, t.mb};
    if (p->cfg.replay[0]) {
        /* Replay: wait the task's recorded duration (sleeping, so many ranks share a core); the output
         * buffer keeps whatever it holds, the message has the real size. The wait is computed from the
         * absolute deadline, so the time spent progressing and the wake-ups' lateness never add up. Up
         * to REPLAY_SPIN_S before the end it sleeps in the transport (transport_sleep_until: woken by
         * the doorbell when a message is posted to this rank, else every slice, every 200 us for a while
         * after one of its own sends), progressing messages as a GPU rank's host thread
         * does while the device computes (a large message's rendezvous must not wait for the task's
         * end); then it yields the core until the deadline (a wake-up from a sleep comes late on a
         * loaded machine; a yield loop gives the core away and still notices the deadline soon after). */
        double s = p->cfg.replay[t.kind][(size_t)p->cfg.rank * (size_t)p->cfg.replay_M + (size_t)t.mb] *
                   p->cfg.replay_scale / p->cfg.chunks;
        double until = rr_now() + s;
        double slice = transport_has_doorbell(p->tr) ? REPLAY_SLICE_BELL_S : REPLAY_SLICE_S;
        if (transport_sleep_until(p->tr, until - REPLAY_SPIN_S, slice, p->err, p->err_len) != 0) return -1;
        for (double now = rr_now(); now < until; now = rr_now()) {
            sched_yield();
            if (transport_progress(p->tr, p->err, p->err_len) != 0) return -1;
        }
        return has_out;
    }
    switch (t.kind) {
    case PP_F: {
        StageActs* a = acts_acquire(p, t.chunk, t.mb);
        float ls = 0.0f;
        stage_forward(st, a, mb, v > 0 ? task_input(p, t, mb) : NULL, has_out ? p->out_buf : NULL, st->last ? &ls : NULL);
        if (st->last) *loss_sum += ls;
        if (p->dump_dir && (!stage_takes_hidden(st) || st->last)) { /* the model's inputs: the stage of the patch embedding */
            char path[4096];
            if (p->cfg.tp && p->cfg.tp->size > 1)
                snprintf(path, sizeof path, "%s/microbatch-%d.pp%dtp%dc%d.safetensors", p->dump_dir, mb->index, p->cfg.rank,
                         p->cfg.tp->rank, t.chunk);
            else
                snprintf(path, sizeof path, "%s/microbatch-%d.pp%dc%d.safetensors", p->dump_dir, mb->index, p->cfg.rank,
                         t.chunk);
            if (stage_dump_microbatch(st, a, mb, path, p->err, p->err_len) != 0) return -1;
        }
        break;
    }
    case PP_B: {
        StageActs* a = acts_of(p, t.chunk, t.mb);
        const float* dout = v < p->S - 1 && stage_takes_grad(st) ? task_input(p, t, mb) : NULL;
        float* din = has_out && stage_gives_grad(st) ? p->out_buf : NULL; /* else an empty message */
        if (p->cfg.split) {
            stage_backward_input(st, a, dout, loss_scale, din);
        } else {
            stage_backward(st, a, dout, loss_scale, din);
            acts_release(p, t.chunk, t.mb);
        }
        break;
    }
    case PP_W:
        stage_backward_weight(st, acts_of(p, t.chunk, t.mb));
        acts_release(p, t.chunk, t.mb);
        break;
    }
    if (stage_tp_error(st)) { /* a TP collective of the task failed (a lost TP peer) */
        snprintf(p->err, p->err_len, "pipeline rank %d, %s chunk %d mb %d: %s", p->cfg.rank,
                 t.kind == PP_F ? "F" : t.kind == PP_B ? "B" : "W", t.chunk, t.mb, stage_tp_error(st));
        return -1;
    }
    return has_out;
}

/* Whether rank r's chunk c (on every rank alike: the configuration's) runs tower blocks: the first
 * cfg->tower_vstages virtual stages, virtual stage 0 (the patch embedding's) at least */
static int cfg_runs_tower(const PipelineConfig* cfg, int r, int c) {
    PpShape sh = {cfg->P, 0, cfg->chunks, 0, pp_hint_vshape(cfg->hint)};
    return pp_vstage(&sh, r, c) < (cfg->tower_vstages > 1 ? cfg->tower_vstages : 1);
}

void pipeline_order_costs(const PipelineConfig* cfg, const Microbatch* mbs, int M, PpDurations* det) {
    int P = cfg->P, V = cfg->chunks, split = cfg->split || pipeline_hint_splits(cfg->hint); /* as pipeline_create */
    *det = (PpDurations){.P = P, .M = M, .split = split, .latency = 0};
    det->F = callocCheck((size_t)P * M, sizeof(double));
    det->B = callocCheck((size_t)P * M, sizeof(double));
    if (split) det->W = callocCheck((size_t)P * M, sizeof(double));
    double* dm[3] = {det->F, det->B, det->W};
    const double wk[3] = {1.0, split ? 1.0 : 2.0, 1.0};
    for (int r = 0; r < P; r++)
        for (int k = 0; k < (split ? 3 : 2); k++)
            for (int m = 0; m < M; m++) {
                double v = 0;
                for (int c = 0; c < V; c++) v += wk[k] * mb_units(&mbs[m], cfg_runs_tower(cfg, r, c));
                dm[k][(size_t)r * M + m] = v;
            }
}

/* adaptive's microbatch order (pipeline.h): pp_plan_order on a deterministic cost model, never on the measured
 * one. A reordered step sums its weight gradients in another order, so the decision must be the same on every
 * run of the same data (a resumed run, a run with eval, a gate off / on) and on every rank. Each (rank, chunk)
 * task costs its work units (tokens, plus patches on each virtual stage that runs tower blocks, plus 1: as
 * task_units) times a fixed weight per kind (pipeline_order_costs); the partition balances the stages, so every
 * stage weighs the same. */
int pipeline_plan_order(const PipelineConfig* cfg, const Microbatch* mbs, int M, int* perm) {
    int V = cfg->chunks;
    PpDurations det;
    pipeline_order_costs(cfg, mbs, M, &det);
    double pred[3];
    PpMode mode;
    int reordered = pp_plan_order(&det, -1, cfg->hint, cfg->cap, V, !(cfg->act_budget > 0), pred, &mode, perm);
    pp_durations_free(&det);
    return reordered;
}

/* adaptive (sched.h): the step's mode, from a simulation of the step on the estimated durations of
 * every rank (pp_sim_plan). Estimates: cfg->estimate when given (it answers for any rank), else every
 * rank's cost model (per chunk and kind, seconds per work unit), summed over the pipeline group with one
 * small all-reduce (each rank contributes its own entries; the others are 0, so the sum is exact and
 * identical on every rank). Every rank then computes the same choice from the same plan. A rank whose
 * cost model has measured nothing yet (the first step) makes the plan unknown: the step runs lookahead,
 * which without estimates behaves as ready. pred: the predicted makespans (s) or NAN. */
static int plan_step(Pipeline* p, const Microbatch* mbs, int M, PpMode* mode, double pred[3], int* perm, int* reordered,
                     char* err, size_t err_len) {
    const PipelineConfig* cfg = &p->cfg;
    int P = cfg->P, V = cfg->chunks;
    for (int i = 0; i < 3; i++) pred[i] = NAN; /* perm: the identity, *reordered 0 (the caller's) */
    *mode = PP_MODE_LOOKAHEAD;
    double* rate = NULL; /* (P, V, 3): seconds per unit, 0 = unknown */
    /* the learner's sample: the last step's measured durations of every rank, when that step was planned
     * (the same on every rank: its predictions came from the shared plan) */
    int learn = p->meas_ok && p->meas_pred[0] > 0 && p->meas_pred[2] > 0;
    size_t n_cost = cfg->estimate ? 0 : (size_t)P * (size_t)V * 6, n_meas = learn ? (size_t)P * 3 * p->meas_M : 0;
    double* su = NULL;
    if (n_cost + n_meas > 0) {
        su = callocCheck(n_cost + n_meas, sizeof(double));
        if (n_cost)
            for (int k = 0; k < V * 3; k++) {
                su[((size_t)cfg->rank * V * 3 + k) * 2] = p->cost_s[k];
                su[((size_t)cfg->rank * V * 3 + k) * 2 + 1] = p->cost_u[k];
            }
        if (n_meas) memcpy(su + n_cost + (size_t)cfg->rank * 3 * p->meas_M, p->meas, sizeof(double) * 3 * p->meas_M);
        char e[512];
        if (comm_allreduce(p->comm, su, n_cost + n_meas, COMM_F64, COMM_SUM, e, sizeof e) != 0) {
            snprintf(err, err_len, "pipeline rank %d: sharing the cost model (adaptive mode): %s", cfg->rank, e);
            free(su);
            return -1;
        }
    }
    if (n_cost) {
        rate = mallocCheck(sizeof(double) * (size_t)P * V * 3);
        for (size_t k = 0; k < (size_t)P * V * 3; k++) rate[k] = su[2 * k + 1] > 0 ? su[2 * k] / su[2 * k + 1] : 0;
    }
    if (n_meas) { /* the last step in hindsight: ready and fixed simulated on what its tasks took */
        int Mp = p->meas_M;
        PpDurations md = {.P = P, .M = Mp, .split = cfg->split, .latency = cfg->plan_latency_s};
        md.F = callocCheck((size_t)P * Mp, sizeof(double));
        md.B = callocCheck((size_t)P * Mp, sizeof(double));
        if (cfg->split) md.W = callocCheck((size_t)P * Mp, sizeof(double));
        double* mm[3] = {md.F, md.B, md.W};
        for (int r = 0; r < P; r++)
            for (int k = 0; k < (cfg->split ? 3 : 2); k++)
                memcpy(mm[k] + (size_t)r * Mp, su + n_cost + ((size_t)r * 3 + k) * Mp, sizeof(double) * Mp);
        pp_plan_learn_observe(&p->learn, &md, cfg->hint, p->meas_cap, V, p->meas_pred);
        pp_durations_free(&md);
    }
    free(su);
    p->meas_ok = 0;
    /* the order: a function of the step's microbatches and the configuration alone (pipeline_plan_order);
     * under replay or with cfg.estimate it is kept (their tasks are indexed by the plan's microbatches), and
     * with cfg.keep_order (parallel.reorder = false) */
    if (!cfg->estimate && !cfg->replay[0] && !cfg->keep_order) *reordered = pipeline_plan_order(cfg, mbs, M, perm);
    PpDurations est = {.P = P, .M = M, .split = cfg->split, .latency = cfg->plan_latency_s};
    est.F = callocCheck((size_t)P * M, sizeof(double));
    est.B = callocCheck((size_t)P * M, sizeof(double));
    if (cfg->split) est.W = callocCheck((size_t)P * M, sizeof(double));
    double* mats[3] = {est.F, est.B, est.W};
    int known = 1;
    for (int r = 0; r < P && known; r++)
        for (int k = 0; k < (cfg->split ? 3 : 2) && known; k++)
            for (int m = 0; m < M && known; m++) {
                double v = 0;
                for (int c = 0; c < V; c++) {
                    PpTask t = {c, k, m};
                    double e;
                    if (cfg->estimate) {
                        e = cfg->estimate(cfg->estimate_ctx, r, t);
                    } else {
                        /* slot m runs microbatch perm[m]; the virtual stages with tower blocks count its patches */
                        e = rate[((size_t)r * V + c) * 3 + k] * mb_units(&mbs[perm[m]], cfg_runs_tower(cfg, r, c));
                    }
                    if (!(e > 0)) known = 0;
                    v += e;
                }
                mats[k][(size_t)r * M + m] = v;
            }
    if (known) { /* fixed ignores the activation byte budget: not a candidate under one */
        int allow_fixed = !(cfg->act_budget > 0);
        /* the step in the order it runs, and its in-flight cap (pp_plan_order_cap with the order kept: the configured
         * cap or a tighter multiple, on the estimates as the mode; also under replay, an estimate callback or
         * parallel.reorder = false, which keep only the order: the cap changes which task a rank runs when, not the
         * order of a kind's microbatches, so the sums are as under the mode) */
        int* ident = mallocCheck(sizeof(int) * (size_t)M);
        PpMode pm;
        pp_plan_order_cap(&est, -1, cfg->hint, cfg->cap, V, allow_fixed, 1, pred, &pm, ident, &p->step_cap);
        free(ident);
        *mode = pp_plan_learn_choose(&p->learn, pred); /* no step learned yet: the plan's choice */
    }
    /* this step's measurements start empty */
    p->meas = reallocCheck(p->meas, sizeof(double) * 3 * (size_t)M);
    memset(p->meas, 0, sizeof(double) * 3 * (size_t)M);
    p->meas_M = M;
    for (int i = 0; i < 3; i++) p->meas_pred[i] = pred[i];
    p->meas_cap = p->step_cap;
    pp_durations_free(&est);
    free(rate);
    return 0;
}

static int step_run(Pipeline* p, const Microbatch* mbs, int M, PpMode mode, const double pred[3], float loss_scale,
                    PpTrace* trace, int step, PipelineStepStats* out, char* err, size_t err_len);

int pipeline_step(Pipeline* p, const Microbatch* mbs, int M, float loss_scale, PpTrace* trace, int step,
                  const char* dump_dir, PipelineStepStats* out, char* err, size_t err_len) {
    const PipelineConfig* cfg = &p->cfg;
    memset(out, 0, sizeof *out);
    p->err = err, p->err_len = err_len, p->dump_dir = dump_dir;
    for (int m = 0; m < M; m++)
        if (mbs[m].T > cfg->max_tokens) {
            snprintf(err, err_len, "microbatch %d of step %d has %d tokens, more than data.microbatch_tokens = %d", m,
                     step, mbs[m].T, cfg->max_tokens);
            return -1;
        }
    for (int m = 0; m < M; m++)
        for (int c = 0; c < cfg->chunks; c++) {
            char e[1024];
            if (stage_check_microbatch(p->stages[c], NULL, &mbs[m], e, sizeof e) != 0) {
                snprintf(err, err_len, "step %d, microbatch %d: %s", step, m, e);
                return -1;
            }
        }
    if (pipeline_dry_run(p, M, err, err_len) != 0) return -1;
    ensure_buffers(p, M);

    /* The hint order and the dispatcher are rebuilt per step: M may change from step to step. */
    p->shape.M = M;
    int n = pp_shape_tasks(&p->shape);
    p->order = reallocCheck(p->order, sizeof(PpTask) * (size_t)n);
    char e[512];
    if (pp_hint_build(cfg->hint, &p->shape, cfg->rank, p->order, e, sizeof e) < 0) {
        snprintf(err, err_len, "pipeline rank %d: %s", cfg->rank, e);
        return -1;
    }
    PpMode mode = cfg->mode;
    double pred[3] = {NAN, NAN, NAN};
    int* perm = mallocCheck(sizeof(int) * (size_t)M);
    int reordered = 0;
    for (int m = 0; m < M; m++) perm[m] = m;
    p->step_cap = cfg->cap; /* adaptive: its plan may take a tighter one (plan_step) */
    if (mode == PP_MODE_ADAPTIVE && plan_step(p, mbs, M, &mode, pred, perm, &reordered, err, err_len) != 0) {
        free(perm);
        return -1;
    }
    if (cfg->mode == PP_MODE_ADAPTIVE && cfg->tp && cfg->tp->size > 1) {
        /* the TP ranks of a stage plan on their own measurements: the leader's plan (mode, order and in-flight cap) is the
         * stage's */
        int32_t* b = mallocCheck(sizeof(int32_t) * (size_t)(M + 5));
        b[0] = (int32_t)mode, b[1] = reordered;
        for (int m = 0; m < M; m++) b[2 + m] = perm[m];
        b[M + 2] = p->step_cap.kind;
        memcpy(b + M + 3, &p->step_cap.value, sizeof(double)); /* its bits: every rank resolves the same caps */
        if (comm_bcast(cfg->tp, b, sizeof(int32_t) * (size_t)(M + 5), 0, e, sizeof e) != 0) {
            snprintf(err, err_len, "pipeline rank %d, TP rank %d: receiving the TP leader's mode (adaptive): %s", cfg->rank,
                     cfg->tp->rank, e);
            free(b);
            free(perm);
            return -1;
        }
        mode = (PpMode)b[0], reordered = b[1] != 0;
        p->step_cap.kind = b[M + 2];
        memcpy(&p->step_cap.value, b + M + 3, sizeof(double));
        p->meas_cap = p->step_cap;
        memset(perm, 0, sizeof(int) * (size_t)M); /* as a mark: each microbatch once */
        int ok = b[0] >= 0 && b[0] < PP_MODE_COUNT && b[M + 2] >= PP_CAP_DEFAULT && b[M + 2] <= PP_CAP_MULTIPLE;
        for (int m = 0; m < M && ok; m++) {
            ok = b[2 + m] >= 0 && b[2 + m] < M && !perm[b[2 + m]];
            if (ok) perm[b[2 + m]] = 1;
        }
        for (int m = 0; m < M && ok; m++) perm[m] = b[2 + m];
        free(b);
        if (!ok) {
            snprintf(err, err_len, "pipeline rank %d, TP rank %d: the TP leader's plan (adaptive) is malformed: mode %d, a cap or "
                     "an order that is not a permutation of the step's %d microbatches", cfg->rank, cfg->tp->rank,
                     (int)mode, M);
            free(perm);
            return -1;
        }
    }
    /* adaptive reordered the step: it runs on the plan's microbatches in slot order (slot s = microbatch
     * perm[s], shallow copies); tasks, messages, the cost model's units and the learner's measurements are by
     * slot, traces and dumps by the microbatch's own index */
    Microbatch* slots = NULL;
    if (reordered) {
        slots = mallocCheck(sizeof(Microbatch) * (size_t)M);
        for (int s = 0; s < M; s++) slots[s] = mbs[perm[s]];
    }
    free(p->step_order);
    p->step_order = perm;
    p->step_reordered = 0;
    int rc = step_run(p, reordered ? slots : mbs, M, mode, pred, loss_scale, trace, step, out, err, err_len);
    p->mbs = NULL; /* the step's own (slots is freed here) */
    free(slots);
    if (rc == 0) out->reordered = p->step_reordered = reordered;
    return rc;
}

/* a task as the trace names it: by the data's microbatch (a reordered step runs slot s = microbatch
 * step_order[s]; the identity otherwise), so a timeline reads the same whatever order the step ran in */
static PpTask trace_task(const Pipeline* p, PpTask t) {
    if (p->step_order) t.mb = p->step_order[t.mb];
    return t;
}

/* The step's tasks under `mode` on mbs (in the order they run), after the plan: the dispatcher, the transport
 * and the stages. 0, or -1 with the message in err. */
static int step_run(Pipeline* p, const Microbatch* mbs, int M, PpMode mode, const double pred[3], float loss_scale,
                    PpTrace* trace, int step, PipelineStepStats* out, char* err, size_t err_len) {
    const PipelineConfig* cfg = &p->cfg;
    int n = pp_shape_tasks(&p->shape);
    char e[512];
    p->step_mode = mode;
    p->look = pp_mode_waits(mode);
    double* act_bytes = mallocCheck(sizeof(double) * (size_t)M);
    for (int m = 0; m < M; m++) act_bytes[m] = p->act_bytes_max * (double)mbs[m].T / (double)cfg->max_tokens;
    PpDispatchConfig dc = {
        .shape = p->shape,
        .rank = cfg->rank,
        .mode = mode,
        .order = p->order,
        .n = n,
        .cap = pp_mode_is_ready(mode) ? pp_cap_for(p->step_cap, cfg->hint, &p->shape, cfg->rank) : 0, /* as the simulator */
        .act_budget = cfg->act_budget,
        .act_bytes = act_bytes,
    };
    PpDispatcher d;
    int rc = pp_dispatcher_init(&d, &dc, e, sizeof e);
    free(act_bytes);
    if (rc != 0) {
        snprintf(err, err_len, "pipeline rank %d: %s", cfg->rank, e);
        return -1;
    }

    int sync = mode == PP_MODE_FIXED_SYNC, look = p->look;
    p->mbs = mbs;
    memset(p->ahead_sent, 0, (size_t)cfg->chunks * 3 * (size_t)p->M_alloc);
    d.estimate = cfg->estimate ? cfg->estimate : cost_model_estimate;
    d.estimate_ctx = cfg->estimate ? cfg->estimate_ctx : (void*)p;
    for (int c = 0; c < cfg->chunks; c++) p->grad_tasks[c] = 0;
    uint8_t* posted = callocCheck((size_t)n, 1); /* by dense task index */
    if (sync) {
        rc = post_sequence_receives(p, &d, mbs, posted);
    } else {
        for (int i = 0; i < n && rc == 0; i++) rc = post_input(p, p->order[i], mbs);
    }

    /* leader-decides (ready mode, tp > 1) */
    TpCoord tc = {0};
    double tp_wait = 0.0, tp_coord = 0.0, idle_since = rr_now();
    if (rc == 0 && cfg->tp && cfg->tp->size > 1 && pp_mode_is_ready(mode) && !cfg->tp_independent) {
        tc.tp = cfg->tp;
        tc.leader = cfg->tp->rank == 0;
        tc.follower = !tc.leader;
        if (tc.leader) {
            tc.sent = mallocCheck(sizeof(int32_t) * 3 * (size_t)n);
            tc.sreq = callocCheck((size_t)n * (size_t)(cfg->tp->size - 1), sizeof(CommReq*));
        } else if (n > 0) {
            rc = tp_choice_post(&tc, err, err_len);
        }
    }

    double t_start = rr_now(), busy = 0.0, loss_sum = 0.0;
    MsgKey done[64];
    int got = rc == 0 ? transport_poll(p->tr, done, 64, err, err_len) : -1;
    while (got >= 0) {
            for (int i = 0; i < got; i++) {
                int k = done[i].kind, ahead = k == MSG_AHEAD_ACT || k == MSG_AHEAD_GRAD;
                int fwd = k == MSG_ACT || k == MSG_NOTICE_ACT || k == MSG_AHEAD_ACT;
                PpTask t = {done[i].chunk, fwd ? PP_F : PP_B, done[i].mb};
                if (k != MSG_ACT && k != MSG_GRAD) {
                    /* a notice: predict t's input, and pass the prediction on to t's consumer */
                    double est = *notice_slot(p, t, ahead), now = rr_now();
                    if (est > 0) pp_dispatcher_notice(&d, t, now + est);
                    if (send_ahead(p, t, est, est > 0, err, err_len) != 0) {
                        got = -1;
                        break;
                    }
                    continue;
                }
                pp_dispatcher_input_arrived(&d, t);
                if (trace) {
                    int src;
                    PpTask src_task;
                    pp_task_input(&p->shape, cfg->rank, t, &src, &src_task);
                    pp_trace_recv(trace, cfg->rank, src, trace_task(p, src_task), task_in_bytes(p, t, &mbs[t.mb]), rr_now());
                }
            }
            if (got < 0) break;
            PpTask t;
            int r;
            if (tc.follower) {
                /* a TP peer runs the leader's choice, once its inputs are here */
                double c0 = rr_now();
                if (tp_choice_poll(&tc, &p->shape, n, err, err_len) != 0) {
                    got = -1;
                    break;
                }
                tp_coord += rr_now() - c0;
                if (tc.have && d.state[d.hrank[pp_task_index(&p->shape, tc.want)]] == PP_TS_READY) {
                    t = tc.want;
                    tc.have = 0;
                    tp_wait += rr_now() - tc.t_have;
                    r = 1;
                } else {
                    r = d.n_started == n ? -1 : 0;
                }
            } else {
                r = pp_dispatcher_next_at(&d, rr_now(), &t);
            }
            if (r < 0) break;
            if (r == 0) {
                if (!tc.follower) {
                    got = transport_wait(p->tr, done, 64, cfg->timeout_s, cfg->stall_warn_s, err, err_len);
                    continue;
                }
                /* the choice arrives on the TP group, the inputs on the pipeline's: poll both */
                got = transport_poll(p->tr, done, 64, err, err_len);
                if (got > 0 || tc.have != 0) idle_since = got > 0 ? rr_now() : idle_since;
                if (got == 0) {
                    if (cfg->timeout_s > 0 && rr_now() - idle_since > cfg->timeout_s) {
                        if (tc.have)
                            snprintf(err, err_len, "pipeline rank %d, TP rank %d: the inputs of the leader's choice "
                                     "(%s chunk %d mb %d) did not arrive in %.0f s", cfg->rank, tc.tp->rank,
                                     tc.want.kind == PP_F ? "F" : tc.want.kind == PP_B ? "B" : "W", tc.want.chunk,
                                     tc.want.mb, rr_now() - idle_since);
                        else
                            snprintf(err, err_len, "pipeline rank %d, TP rank %d: no choice from the TP leader (TP rank "
                                     "0) for %.0f s: it probably died or stopped", cfg->rank, tc.tp->rank,
                                     rr_now() - idle_since);
                        got = -1;
                        break;
                    }
                    struct timespec ts = {0, 20000};
                    nanosleep(&ts, NULL);
                }
                continue;
            }
            idle_since = rr_now();
            if (tc.leader) {
                /* the choice goes to the peers before the task starts */
                double c0 = rr_now();
                if (tp_choice_send(&tc, t, err, err_len) != 0) {
                    got = -1;
                    break;
                }
                tp_coord += rr_now() - c0;
            }
            pp_dispatcher_started(&d, t);
            if (p->task_hook && p->task_hook(p->task_hook_ctx, t, err, err_len) != 0) {
                got = -1;
                break;
            }
            int dst = -1;
            MsgKey key;
            PpTask dst_task;
            if (look && t.kind != PP_W && pp_task_output(&p->shape, cfg->rank, t, &dst, &dst_task) && dst != cfg->rank) {
                /* the start notice: the consumer learns that its input is on the way and when to expect it */
                double est = task_estimate(p, t);
                MsgKey nk = {t.kind == PP_F ? MSG_NOTICE_ACT : MSG_NOTICE_GRAD, dst_task.chunk, t.mb};
                if (send_ahead(p, t, 0, 1, err, err_len) != 0 ||
                    transport_isend(p->tr, dst, nk, &est, sizeof est, err, err_len) != 0) {
                    got = -1;
                    break;
                }
            }
            double t0 = rr_now();
            int has_out = run_task(p, t, mbs, loss_scale, &loss_sum, &dst, &key);
            if (has_out < 0) {
                got = -1;
                break;
            }
            double t1 = rr_now();
            busy += t1 - t0;
            p->cost_s[t.chunk * 3 + t.kind] += t1 - t0;
            if (p->meas) p->meas[(size_t)t.kind * p->meas_M + t.mb] += t1 - t0;
            p->cost_u[t.chunk * 3 + t.kind] += task_units(p, t);
            pp_dispatcher_finished(&d, t);
            if (trace) pp_trace_task_stage(trace, cfg->rank, cfg->P, vstage(p, t.chunk), trace_task(p, t), t0, t1);
            /* Megatron's paired exchange: the receives of what comes next are posted when this task
             * has finished computing, then this task's send blocks until its receiver posted. */
            if (sync && post_sequence_receives(p, &d, mbs, posted) != 0) {
                got = -1;
                break;
            }
            if (has_out && dst == cfg->rank) {
                PpTask dst_task;
                pp_task_output(&p->shape, cfg->rank, t, &dst, &dst_task);
                local_handoff(p, dst_task, task_out_bytes(p, t, &mbs[t.mb]));
                pp_dispatcher_input_arrived(&d, dst_task);
            } else if (has_out) {
                size_t bytes = task_out_bytes(p, t, &mbs[t.mb]);
                const float* payload = task_output(p, bytes);
                int src = p->dev_comm
                              ? (sync ? transport_send_sync_dev(p->tr, dst, key, payload, bytes, cfg->timeout_s, err, err_len)
                                      : transport_isend_dev(p->tr, dst, key, payload, bytes, err, err_len))
                              : (sync ? transport_send_sync(p->tr, dst, key, payload, bytes, cfg->timeout_s, err, err_len)
                                      : transport_isend(p->tr, dst, key, payload, bytes, err, err_len));
                if (src != 0) {
                    got = -1;
                    break;
                }
                if (trace) pp_trace_send(trace, cfg->rank, dst, trace_task(p, t), bytes, rr_now());
            }
            /* this chunk's weight gradients are final after its M-th W (or fused B) */
            if (t.kind == (cfg->split ? PP_W : PP_B) && ++p->grad_tasks[t.chunk] == M && p->grads_done &&
                p->grads_done(p->grads_done_ctx, t.chunk, !pp_dispatcher_all_done(&d), err, err_len) != 0) {
                got = -1;
                break;
            }
            got = transport_poll(p->tr, done, 64, err, err_len);
    }
    if (got >= 0 && tc.leader) got = tp_choice_flush(&tc, cfg->timeout_s, err, err_len);
    if (tc.rreq) tc.tp->ops->cancel(tc.tp, &tc.rreq);
    for (size_t i = 0; tc.sreq && i < (size_t)tc.n_sent * (size_t)(tc.tp->size - 1); i++)
        if (tc.sreq[i]) tc.tp->ops->cancel(tc.tp, &tc.sreq[i]); /* only after a failure */
    free(tc.sent);
    free(tc.sreq);
    if (got < 0 || transport_flush(p->tr, cfg->timeout_s, err, err_len) != 0) {
        pp_dispatcher_free(&d);
        free(posted);
        return -1;
    }
    RR_ASSERT(pp_dispatcher_all_done(&d));
    double t_end = rr_now();
    if (trace) pp_trace_step(trace, cfg->rank, step, t_start, t_end);
    out->loss_sum = loss_sum;
    out->busy_s = busy;
    out->wall_s = t_end - t_start;
    if (p->meas) p->meas_ok = 1; /* adaptive: the next step's plan learns from this one */
    out->learned = p->learn.n;
    out->wait_s = out->wall_s - busy;
    out->peak_inflight = d.peak_inflight;
    out->decisions = d.n_decisions;
    out->waits = d.n_waits;
    out->mode = mode;
    for (int i = 0; i < 3; i++) out->predicted[i] = pred[i];
    out->cap = p->step_cap;
    out->t_start = t_start;
    out->tp_choices = tc.leader ? tc.n_sent : tc.received;
    out->tp_wait_s = tp_wait;
    out->tp_coord_s = tp_coord;
    pp_dispatcher_free(&d);
    free(posted);
    if (transport_pending_recvs(p->tr) != 0) {
        snprintf(err, err_len, "pipeline rank %d: step %d ended with %d messages still expected (the ranks disagree on "
                 "the plan)", cfg->rank, step, transport_pending_recvs(p->tr));
        return -1;
    }
    return 0;
}
