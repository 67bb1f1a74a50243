/* exec_zero.c — the distributed optimizer (parallel.zero = 1; docs/parallel.md "The distributed optimizer",
 * Megatron's distributed optimizer, ZeRO stage 1): each stage's f32 master weights and AdamW moments are
 * sharded across the stage's dp replicas.
 *
 * Shards. A stage's trainable elements in gradient order (ParamSpec.goff, the grad block) are cut into D
 * contiguous shards: replica d < D - 1 owns [d q, (d + 1) q) with q = floor(gtotal / D), the last one
 * [(D - 1) q, gtotal) (q plus the remainder, fewer than D elements). A tensor may straddle shards: every
 * loop below takes the part of each tensor inside a range, so weight decay (2-D tensors) and
 * optim.projector_lr stay per element.
 *
 * A step. The grad block is reduce-scattered in place (CommOps.ireduce_scatter of q per replica, and the
 * remainder all-reduced, every replica taking part), started as the all-reduce's buckets are: when the
 * executor reports a chunk's gradients final (overlapping the rest of the backward), chunks from the last
 * to the first, or from the hook. The gradient norm is the sum of squares of each replica's reduced shard
 * (the tensor-parallel and tied-copy rules of optim_grad_sum_squares per element), summed over the
 * model-parallel group and the replicas: the norm of the whole gradient. AdamW runs on the shard only
 * (fp32: on pt->data's elements of the shard; bf16: on the shard's own f32 masters, writing the compute
 * copy's elements of the shard), then the updated weights are all-gathered (bf16: the 2-byte values;
 * fp32: the f32 weights) in rounds of parallel.dp_bucket_mb MiB per replica, non-blocking and in place in the
 * grad block, completed by the next step's forward part by part (Stage.param_wait: each LM block waits for the
 * rounds holding its own tensors) or, with parallel.dp_overlap = 0, at the step end.
 *
 * Memory. Moments: 2 x 4 bytes per trainable element / D. bf16 runs: the trainable masters are the
 * shard's (4 bytes / D), pt->data is freed after the start (frozen tensors have no master on a bf16 table:
 * params_has_master).
 * Gradients stay whole (each replica accumulates its microbatches into the whole block).
 *
 * Checkpoints stay free of the layout: replica 0 gathers the masters and moments into host arrays and
 * writes the checkpoint zero = 0 would (the moments of a resume are read back as the shard's part,
 * checkpoint_load_moments_range). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cuda/kernel_math.h"
#include "engine/util.h"
#include "runtime/train/exec.h"
#include "runtime/train/optim.h"

typedef struct {
    ParamTable* pt;
    size_t q;           /* elements of every shard but the last */
    size_t lo, hi;      /* this replica's shard [lo, hi) of the grad block */
    float *m, *v;       /* (hi - lo) AdamW moments, backend memory */
    float* master;      /* bf16: (hi - lo) f32 masters, backend memory; NULL in fp32 (pt->data holds them) */
    float* host;        /* a device backend over a host DP group: the grad block's host copy */
    CommReq *req, *req_tail;
    float* save_data;   /* during a checkpoint write (replica 0): the stage's whole state on the host */
    float *save_m, *save_v;
    float *keep_data, *keep_m, *keep_v;
    const Backend* keep_be;
    float* full_data;   /* bf16, a step dump: pt->data materialised on the backend */
    /* The updated weights' all-gather (zero_gather_issue), overlapped with the next step's forward: in place in
     * the grad block (dead from AdamW until the next step zeroes it), round k of ground elements per replica at
     * byte k x D x ground x es, replica r's piece (shard elements [r q + k ground, ...)) at r x count in it; the
     * remainder (fewer than D elements, the last replica's) through tail_dev. */
    struct ZeroOpt* o;
    size_t ground;      /* elements per replica per round */
    int n_rounds;       /* ceil(q / ground) */
    CommReq** greq;     /* (n_rounds) in flight, NULL once complete */
    CommReq* treq;
    int next_round;     /* rounds unpacked into the tensors so far */
    int tail_done;
    int pending;        /* issued and not all unpacked: the grad block is the gather's (zeroed once it is done) */
    char *tail_dev, *tail_host; /* D x tail x es (backend memory; host memory for a host DP group on a device) */
    int n_parts;        /* Stage.param_wait's parts: 0, 1 + j (LM block j), the rest */
    int* need;          /* (n_parts) the last round whose others' pieces a part reads, -1: none */
    unsigned char* need_tail;
} ZeroStage;

struct ZeroOpt {
    StepExec* ex;
    Comm* dp;
    int D, d;
    ZeroStage* z;       /* (n_stages) */
    int inplace;        /* reduce the grad block where it is (CPU backend, or a device DP group) */
    int device;         /* a device DP group: its stream waits for the gradients' event */
    void* ev;
    int bf16;           /* the weights all-gathered are the 2-byte compute values */
    size_t round;       /* elements per replica per all-gather round */
    void* stg;          /* D x round x 4 bytes, backend memory */
    void* stg_host;     /* the same on the host when the DP group takes host memory only and the backend is a device */
    int* done;
    int next, early, last_early;
    double timeout_s;
    int gather_overlap; /* parallel.dp_overlap: the all-gather completes in the next forward (0: at the step end) */
    int failed;         /* a gather failed: nothing more is waited for (zero_free) */
    long g_rounds, g_fwd, g_late, g_flight;  /* the run's gathers: rounds, unpacked inside a forward, of them after
                                              * the stage's first LM block ran, still in flight when needed */
};

static size_t zmin(size_t a, size_t b) { return a < b ? a : b; }

/* The shard [lo, hi) of replica r of stage z. */
static void shard_of(const ZeroOpt* o, const ZeroStage* z, int r, size_t* lo, size_t* hi) {
    *lo = (size_t)r * z->q;
    *hi = r == o->D - 1 ? z->pt->gtotal : (size_t)(r + 1) * z->q;
}

/* Call fn for each trainable tensor's part inside [a, b) of the grad block: tensor i, its elements j0 ..
 * j0 + n, at position p = goff + j0 - a of the range. */
typedef void (*ZeroPieceFn)(void* ctx, const ParamTable* pt, int i, size_t j0, size_t n, size_t p);
static void for_pieces(const ParamTable* pt, size_t a, size_t b, ZeroPieceFn fn, void* ctx) {
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* s = &pt->specs[i];
        if (s->frozen || s->goff + s->numel <= a || s->goff >= b) continue;
        size_t j0 = a > s->goff ? a - s->goff : 0, j1 = b < s->goff + s->numel ? b - s->goff : s->numel;
        fn(ctx, pt, i, j0, j1 - j0, s->goff + j0 - a);
    }
}

/* ---- moving pieces between the backend, the staging buffer and the host ---- */

typedef struct {
    const ZeroOpt* o;
    char* stg;          /* staging (backend memory), the range's first element */
    int to_stg;         /* 1: pack (tensors -> staging), 0: unpack */
    int what;           /* ZW_* */
    float* host;        /* ZW_MASTER_HOST: the host array at the table's offsets */
} PieceCtx;
enum { ZW_NONE = -1, ZW_WEIGHTS = 0, ZW_MASTER_HOST, ZW_MASTER_DEV };

static void piece_move(void* vctx, const ParamTable* pt, int i, size_t j0, size_t n, size_t p) {
    PieceCtx* c = vctx;
    const Backend* be = pt->be;
    const ParamSpec* s = &pt->specs[i];
    if (c->what == ZW_MASTER_HOST) { /* unpack only: f32 staging -> the host array */
        float* dst = c->host + s->offset + j0;
        be->dev->copy_d2h(be, dst, (float*)c->stg + p, n * sizeof(float));
        return;
    }
    if (c->what == ZW_MASTER_DEV || !c->o->bf16) { /* f32 words: pt->data (fp32 weights, or a dump's masters) */
        float* w = params_data(pt, i) + j0;
        float* st = (float*)c->stg + p;
        if (c->to_stg) be->dev->copy_d2d(be, st, w, n * sizeof(float));
        else be->dev->copy_d2d(be, w, st, n * sizeof(float));
        return;
    }
    /* bf16: the compute copy's values as 2-byte words in the staging */
    uint16_t* st = (uint16_t*)c->stg + p;
    Buf cb = buf_at(params_compute_buf(pt, i), j0);
    if (cb.dt == DTYPE_BF16) {
        if (c->to_stg) be->dev->copy_d2d(be, st, cb.p, n * 2);
        else be->dev->copy_d2d(be, cb.p, st, n * 2);
        return;
    }
    float* w = cb.p; /* f32 words holding bf16 values: narrowed and widened exactly */
    if (be->dev->host_addressable) {
        if (c->to_stg)
            for (size_t k = 0; k < n; k++) st[k] = rr_f32_to_bf16(w[k]);
        else
            for (size_t k = 0; k < n; k++) w[k] = rr_bf16_to_f32(st[k]);
    } else if (c->to_stg) {
        be->ops->to_bf16(be, st, w, n);
    } else {
        RR_ASSERT(be->ops->from_bf16);
        be->ops->from_bf16(be, w, st, n);
    }
}

/* One all-gather of `count` elements of es bytes per replica over the staging buffer (this replica's
 * segment filled). */
static int stg_all_gather(ZeroOpt* o, const Backend* be, size_t count, size_t es, char* err, size_t err_len) {
    size_t bytes = count * es;
    char e[512];
    void* buf = o->stg;
    if (o->stg_host) {
        be->dev->copy_d2h(be, (char*)o->stg_host + (size_t)o->d * bytes, (char*)o->stg + (size_t)o->d * bytes, bytes);
        buf = o->stg_host;
    } else if (o->device) {
        be->dev->synchronize(be); /* the packing kernels ran on the compute stream */
    }
    if (comm_all_gather(o->dp, buf, bytes, COMM_BYTE, e, sizeof e) != 0) {
        snprintf(err, err_len, "distributed optimizer: all-gather over the data-parallel group: %s", e);
        return -1;
    }
    if (o->stg_host) be->dev->copy_h2d(be, o->stg, o->stg_host, bytes * (size_t)o->D);
    return 0;
}

/* Every replica's shard of stage z gathered in rounds. src_flat (backend, indexed by shard position)
 * gives this replica's piece, or NULL: packed from the tensors (what). Each replica's piece is unpacked:
 * dst_flat_host (host array indexed by the grad order), dst_flat_dev (backend, grad order: the others'
 * pieces only), or the tensors (what; with skip_own the own piece is left where it is). es: element bytes
 * in the staging (2: the bf16 weights, else 4). */
static int gather_stage(ZeroOpt* o, ZeroStage* z, const float* src_flat, float* dst_flat_host, float* dst_flat_dev,
                        int what, float* host_data, int skip_own, size_t es, char* err, size_t err_len) {
    const ParamTable* pt = z->pt;
    const Backend* be = pt->be;
    size_t most = pt->gtotal - (size_t)(o->D - 1) * z->q; /* the last shard, the longest */
    size_t per_round = o->round * 4 / es;
    for (size_t at = 0; at < most; at += per_round) {
        size_t count = zmin(per_round, most - at);
        /* pack this replica's piece [lo + at, ...) */
        size_t a = z->lo + at, b = zmin(z->lo + at + count, z->hi);
        char* mine = (char*)o->stg + (size_t)o->d * count * es;
        if (a < b) {
            if (src_flat) {
                be->dev->copy_d2d(be, mine, src_flat + at, (b - a) * es);
            } else {
                PieceCtx c = {o, mine, 1, what, NULL};
                for_pieces(pt, a, b, piece_move, &c);
            }
        }
        if (stg_all_gather(o, be, count, es, err, err_len) != 0) return -1;
        for (int r = 0; r < o->D; r++) {
            if (skip_own && r == o->d) continue;
            size_t rlo, rhi;
            shard_of(o, z, r, &rlo, &rhi);
            size_t ra = rlo + at, rb = zmin(rlo + at + count, rhi);
            if (ra >= rb) continue;
            char* piece = (char*)o->stg + (size_t)r * count * es;
            if (dst_flat_host) {
                be->dev->copy_d2h(be, dst_flat_host + ra, piece, (rb - ra) * es);
            } else if (dst_flat_dev) {
                be->dev->copy_d2d(be, dst_flat_dev + ra, piece, (rb - ra) * es);
            } else if (what == ZW_WEIGHTS || what == ZW_MASTER_DEV || (what == ZW_MASTER_HOST && host_data)) {
                PieceCtx c = {o, piece, 0, what, host_data};
                for_pieces(pt, ra, rb, piece_move, &c);
            }
        }
    }
    be->dev->synchronize(be);
    return 0;
}

/* ---- the updated weights' all-gather, overlapped with the next step's forward ---- */

static size_t zero_es(const ZeroOpt* o) { return o->bf16 ? 2 : 4; }
static size_t round_count(const ZeroStage* z, int k) { return zmin(z->ground, z->q - (size_t)k * z->ground); }
static size_t round_base(const ZeroOpt* o, const ZeroStage* z, int k) { /* bytes */
    return (size_t)k * (size_t)o->D * z->ground * zero_es(o);
}
static char* gather_dev(const ZeroStage* z) { return (char*)z->pt->grad; }
static char* gather_comm(const ZeroOpt* o, const ZeroStage* z) {
    return o->inplace ? (char*)z->pt->grad : (char*)z->host;
}
static size_t tail_of(const ZeroOpt* o, const ZeroStage* z) { return z->pt->gtotal - (size_t)o->D * z->q; }

/* Wait for one gather request (polling, as the reduce-scatter's hook); *flight += 1 when it was still in flight at
 * the first look. */
static int zero_wait_req(ZeroOpt* o, int s, CommReq** rq, long* flight, char* err, size_t err_len) {
    double t0 = rr_now();
    for (int first = 1; *rq; first = 0) {
        int fin = 0;
        char e[512];
        if (o->dp->ops->test(o->dp, rq, &fin, NULL, e, sizeof e) != 0) {
            o->failed = 1;
            snprintf(err, err_len, "distributed optimizer: all-gather of stage %d's updated weights: %s", s, e);
            return -1;
        }
        if (fin) break;
        if (first && flight) (*flight)++;
        if (o->timeout_s > 0 && rr_now() - t0 > o->timeout_s) {
            o->failed = 1;
            snprintf(err, err_len,
                     "distributed optimizer: the all-gather of stage %d's updated weights is still incomplete after %.0f "
                     "s (group '%s' of %d replicas, this one %d): a replica probably died or stopped; check the other "
                     "ranks' output", s, rr_now() - t0, o->dp->name, o->dp->size, o->dp->rank);
            return -1;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* After AdamW of stage z: this replica's updated shard packed into its segments of the rounds (and of the
 * remainder), every round started (CommOps.iall_gather, in round order, the same on every replica). */
static int zero_gather_issue(ZeroOpt* o, ZeroStage* z, int s, char* err, size_t err_len) {
    const ParamTable* pt = z->pt;
    const Backend* be = pt->be;
    size_t es = zero_es(o), tail = tail_of(o, z);
    char e[512];
    for (int k = 0; k < z->n_rounds; k++) {
        size_t cnt = round_count(z, k), a = z->lo + (size_t)k * z->ground;
        PieceCtx c = {o, gather_dev(z) + round_base(o, z, k) + (size_t)o->d * cnt * es, 1, ZW_WEIGHTS, NULL};
        for_pieces(pt, a, a + cnt, piece_move, &c);
    }
    if (tail && o->d == o->D - 1) {
        PieceCtx c = {o, z->tail_dev + (size_t)o->d * tail * es, 1, ZW_WEIGHTS, NULL};
        for_pieces(pt, (size_t)o->D * z->q, pt->gtotal, piece_move, &c);
    }
    if (!o->inplace) { /* a host DP group on a device: the own segments to the host copy */
        for (int k = 0; k < z->n_rounds; k++) {
            size_t off = round_base(o, z, k) + (size_t)o->d * round_count(z, k) * es;
            be->dev->copy_d2h(be, gather_comm(o, z) + off, gather_dev(z) + off, round_count(z, k) * es);
        }
        if (tail) be->dev->copy_d2h(be, z->tail_host + (size_t)o->d * tail * es, z->tail_dev + (size_t)o->d * tail * es,
                                    tail * es);
    } else if (o->device) { /* the collective stream after the packing kernels */
        be->dev->event_record(be, o->ev);
        if (o->dp->ops->wait_event(o->dp, -1, o->ev, e, sizeof e) != 0) goto fail;
    }
    for (int k = 0; k < z->n_rounds; k++)
        if (o->dp->ops->iall_gather(o->dp, gather_comm(o, z) + round_base(o, z, k), round_count(z, k) * es, COMM_BYTE,
                                    &z->greq[k], e, sizeof e) != 0)
            goto fail;
    if (tail && o->dp->ops->iall_gather(o->dp, o->inplace ? z->tail_dev : z->tail_host, tail * es, COMM_BYTE, &z->treq,
                                        e, sizeof e) != 0)
        goto fail;
    z->next_round = 0;
    z->tail_done = tail == 0;
    z->pending = 1;
    o->g_rounds += z->n_rounds + (tail > 0);
    return 0;
fail:
    o->failed = 1;
    snprintf(err, err_len, "distributed optimizer: all-gather of stage %d's updated weights: %s", s, e);
    return -1;
}

/* The rounds up to `upto` (and the remainder when tail) complete and unpacked into the tensors (the others'
 * pieces: this replica's are there since AdamW); in_fwd: called from a forward (counted). Once every round is
 * in, the grad block is the stage's gradients again: zeroed (the executor left it, step_exec_zero_pending). */
static int zero_gather_upto(ZeroOpt* o, int s, int upto, int tail, int in_fwd, char* err, size_t err_len) {
    ZeroStage* z = &o->z[s];
    if (!z->pending) return 0;
    const ParamTable* pt = z->pt;
    const Backend* be = pt->be;
    size_t es = zero_es(o), nt = tail_of(o, z);
    if (upto >= z->n_rounds) upto = z->n_rounds - 1;
    while (z->next_round <= upto) {
        int k = z->next_round;
        size_t cnt = round_count(z, k), base = round_base(o, z, k);
        if (zero_wait_req(o, s, &z->greq[k], in_fwd ? &o->g_flight : NULL, err, err_len) != 0) return -1;
        if (!o->inplace) be->dev->copy_h2d(be, gather_dev(z) + base, gather_comm(o, z) + base, (size_t)o->D * cnt * es);
        for (int r = 0; r < o->D; r++) {
            if (r == o->d) continue;
            size_t a = (size_t)r * z->q + (size_t)k * z->ground;
            PieceCtx c = {o, gather_dev(z) + base + (size_t)r * cnt * es, 0, ZW_WEIGHTS, NULL};
            for_pieces(pt, a, a + cnt, piece_move, &c);
        }
        z->next_round++;
        if (in_fwd) o->g_fwd++;
    }
    if (tail && !z->tail_done) {
        if (zero_wait_req(o, s, &z->treq, in_fwd ? &o->g_flight : NULL, err, err_len) != 0) return -1;
        if (!o->inplace) be->dev->copy_h2d(be, z->tail_dev, z->tail_host, (size_t)o->D * nt * es);
        if (o->d != o->D - 1) {
            PieceCtx c = {o, z->tail_dev + (size_t)(o->D - 1) * nt * es, 0, ZW_WEIGHTS, NULL};
            for_pieces(pt, (size_t)o->D * z->q, pt->gtotal, piece_move, &c);
        }
        z->tail_done = 1;
        if (in_fwd) o->g_fwd++;
    }
    if (z->next_round == z->n_rounds && z->tail_done) {
        params_zero_grad(z->pt);
        z->pending = 0;
    }
    return 0;
}

static int zero_complete(ZeroOpt* o, char* err, size_t err_len) {
    for (int s = 0; s < o->ex->n_stages; s++)
        if (zero_gather_upto(o, s, o->z[s].n_rounds - 1, 1, 0, err, err_len) != 0) return -1;
    return 0;
}

/* Stage.param_wait: the part's weights current (the rounds holding the others' pieces of its tensors) */
static int zero_param_wait(void* ctx, int part, char* err, size_t err_len) {
    ZeroStage* z = ctx;
    ZeroOpt* o = z->o;
    if (!z->pending) return 0;
    int s = (int)(z - o->z), before = z->next_round, rc;
    if (part < 0 || part >= z->n_parts - 1) rc = zero_gather_upto(o, s, z->n_rounds - 1, 1, 1, err, err_len);
    else rc = zero_gather_upto(o, s, z->need[part], z->need_tail[part], 1, err, err_len);
    if (part >= 2) o->g_late += z->next_round - before; /* rounds waited for after the stage's first block ran */
    return rc;
}

/* Which part of Stage.param_wait first reads tensor i of stage st */
static int zero_part_of(const Stage* st, const char* name, int n_parts) {
    int l;
    char dot;
    if (sscanf(name, "text.blocks.%d%c", &l, &dot) == 2 && dot == '.' && l >= st->l0 && l < st->l1) return 1 + l - st->l0;
    if (!strncmp(name, "text.norm.", 10) || !strncmp(name, "text.lm_head.", 13) ||
        (!strcmp(name, "text.embed.weight") && st->last && !st->first))
        return n_parts - 1;
    return 0;
}

/* need / need_tail: for each part, the last round (and the remainder) carrying another replica's piece of one of
 * its tensors */
static void zero_parts(ZeroOpt* o, ZeroStage* z, const Stage* st) {
    const ParamTable* pt = z->pt;
    z->n_parts = 2 + (st->l1 - st->l0);
    z->need = mallocCheck((size_t)z->n_parts * sizeof(int));
    z->need_tail = callocCheck((size_t)z->n_parts, 1);
    for (int p = 0; p < z->n_parts; p++) z->need[p] = -1;
    size_t body = (size_t)o->D * z->q;
    for (int i = 0; i < pt->n; i++) {
        const ParamSpec* sp = &pt->specs[i];
        if (sp->frozen || !sp->numel) continue;
        int part = zero_part_of(st, sp->name, z->n_parts);
        size_t a = sp->goff, b = sp->goff + sp->numel;
        for (int r = 0; r < o->D && z->q > 0; r++) {
            size_t ra = (size_t)r * z->q, rb = ra + z->q;
            if (r == o->d || b <= ra || a >= rb) continue;
            int k = (int)((zmin(b, rb) - 1 - ra) / z->ground);
            if (k > z->need[part]) z->need[part] = k;
        }
        if (b > body && o->d != o->D - 1) z->need_tail[part] = 1;
    }
}

/* ---- the reduce-scatter (the step-end hook, started early where the executor reports chunks done) ---- */

static float* rs_buf(const ZeroOpt* o, const ZeroStage* z) { return o->inplace ? z->pt->grad : z->host; }

static int zero_start_stage(ZeroOpt* o, int s, char* err, size_t err_len) {
    ZeroStage* z = &o->z[s];
    const ParamTable* pt = z->pt;
    char e[512];
    if (o->device) {
        pt->be->dev->event_record(pt->be, o->ev);
        if (o->dp->ops->wait_event(o->dp, -1, o->ev, e, sizeof e) != 0) goto fail;
    } else if (!o->inplace) {
        pt->be->dev->copy_d2h(pt->be, z->host, pt->grad, pt->gtotal * sizeof(float));
    }
    float* buf = rs_buf(o, z);
    size_t tail = pt->gtotal - (size_t)o->D * z->q;
    if (z->q > 0 && o->dp->ops->ireduce_scatter(o->dp, buf, z->q, COMM_F32, COMM_SUM, &z->req, e, sizeof e) != 0)
        goto fail;
    if (tail > 0 &&
        o->dp->ops->iallreduce(o->dp, buf + (size_t)o->D * z->q, tail, COMM_F32, COMM_SUM, &z->req_tail, e, sizeof e) != 0)
        goto fail;
    return 0;
fail:
    snprintf(err, err_len, "distributed optimizer: gradient reduce-scatter of stage %d: %s", s, e);
    return -1;
}

static int zero_start_ready(ZeroOpt* o, int force, int more_work, char* err, size_t err_len) {
    while (o->next >= 0 && (force || o->done[o->next])) {
        if (zero_start_stage(o, o->next, err, err_len) != 0) return -1;
        if (more_work) o->early++;
        o->next--;
    }
    return 0;
}

static int zero_grads_done(void* ctx, int chunk, int more_work, char* err, size_t err_len) {
    ZeroOpt* o = ctx;
    RR_ASSERT(chunk >= 0 && chunk < o->ex->n_stages);
    o->done[chunk] = 1;
    return zero_start_ready(o, 0, more_work, err, err_len);
}

static int zero_hook(StepExec* ex, void* ctx, char* err, size_t err_len) {
    ZeroOpt* o = ctx;
    if (zero_start_ready(o, 1, 0, err, err_len) != 0) return -1;
    double t0 = rr_now();
    for (;;) {
        int left = 0;
        for (int s = 0; s < ex->n_stages; s++) {
            CommReq** rq[2] = {&o->z[s].req, &o->z[s].req_tail};
            for (int k = 0; k < 2; k++) {
                if (!*rq[k]) continue;
                int fin = 0;
                char e[512];
                if (o->dp->ops->test(o->dp, rq[k], &fin, NULL, e, sizeof e) != 0) {
                    snprintf(err, err_len, "distributed optimizer: gradient reduce-scatter of stage %d: %s", s, e);
                    return -1;
                }
                left += !fin;
            }
        }
        if (!left) break;
        if (o->timeout_s > 0 && rr_now() - t0 > o->timeout_s) {
            snprintf(err, err_len,
                     "distributed optimizer: the gradient reduce-scatter is still incomplete after %.0f s (group '%s' "
                     "of %d replicas, this one %d): a replica probably died or stopped; check the other ranks' output",
                     rr_now() - t0, o->dp->name, o->dp->size, o->dp->rank);
            return -1;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    for (int s = 0; s < ex->n_stages; s++) {
        ZeroStage* z = &o->z[s];
        if (!o->inplace) /* the reduced shard back into the grad block */
            z->pt->be->dev->copy_h2d(z->pt->be, z->pt->grad + z->lo, z->host + z->lo, (z->hi - z->lo) * sizeof(float));
        o->done[s] = 0;
    }
    o->next = ex->n_stages - 1;
    o->last_early = o->early;
    o->early = 0;
    return 0;
}

/* ---- the optimiser step on the shard ---- */

typedef struct {
    const Recipe* r;
    const ZeroStage* z;
    AdamWConfig cfg, pcfg;
    int t;
    double ss;
    int tp_rank;
    const float** xs; /* the pieces the sum of squares takes (piece_sumsq), for one sum_squares_multi call */
    size_t* ns;
    int n, cap;
} StepCtx;

static void piece_sumsq(void* vctx, const ParamTable* pt, int i, size_t j0, size_t n, size_t p) {
    StepCtx* c = vctx;
    const ParamSpec* s = &pt->specs[i];
    (void)p;
    /* optim_grad_sum_squares' rules: a replicated tensor counts on TP rank 0, a tied copy not at all */
    if (s->shared_copy || (c->tp_rank != 0 && !params_is_slice(s))) return;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->xs = reallocCheck(c->xs, (size_t)c->cap * sizeof *c->xs);
        c->ns = reallocCheck(c->ns, (size_t)c->cap * sizeof *c->ns);
    }
    c->xs[c->n] = pt->grad + s->goff + j0, c->ns[c->n++] = n;
}

static void piece_adamw(void* vctx, const ParamTable* pt, int i, size_t j0, size_t n, size_t p) {
    StepCtx* c = vctx;
    const Backend* be = pt->be;
    const ParamSpec* s = &pt->specs[i];
    const ZeroStage* z = c->z;
    const AdamWConfig* cfg = !strncmp(s->name, "projector.", 10) ? &c->pcfg : &c->cfg;
    const float* g = pt->grad + s->goff + j0;
    if (z->master)
        be->ops->adamw_update_copy(be, z->master + p, g, z->m + p, z->v + p, n, cfg, c->t, s->decay,
                                   buf_at(params_compute_buf(pt, i), j0));
    else
        be->ops->adamw_update(be, params_data(pt, i) + j0, g, z->m + p, z->v + p, n, cfg, c->t, s->decay);
}

int step_exec_zero_grad_norm(ZeroOpt* o, double* norm, char* err, size_t err_len) {
    StepExec* ex = o->ex;
    double ss = 0;
    for (int s = 0; s < ex->n_stages; s++) {
        StepCtx c = {.z = &o->z[s], .tp_rank = ex->stages[s]->tp_rank};
        for_pieces(o->z[s].pt, o->z[s].lo, o->z[s].hi, piece_sumsq, &c);
        const Backend* be = o->z[s].pt->be;
        if (be->ops->sum_squares_multi) { /* one pass (one launch on CUDA), the per-piece loop's bits */
            c.ss = be->ops->sum_squares_multi(be, c.xs, c.ns, c.n);
        } else {
            for (int k = 0; k < c.n; k++) c.ss += be->ops->sum_squares(be, c.xs[k], c.ns[k]);
        }
        free(c.xs);
        free(c.ns);
        ss += c.ss;
    }
    char e[512];
    if ((ex->norm_group && comm_allreduce(ex->norm_group, &ss, 1, COMM_F64, COMM_SUM, e, sizeof e) != 0) ||
        comm_allreduce(o->dp, &ss, 1, COMM_F64, COMM_SUM, e, sizeof e) != 0) {
        snprintf(err, err_len, "distributed optimizer: gradient norm: %s", e);
        return -1;
    }
    *norm = sqrt(ss);
    return 0;
}

int step_exec_zero_step(ZeroOpt* o, const Recipe* r, float lr, int t, float clip, char* err, size_t err_len) {
    StepExec* ex = o->ex;
    if (zero_complete(o, err, err_len) != 0) return -1; /* (done in the forward already) */
    for (int s = 0; s < ex->n_stages; s++) {
        ZeroStage* z = &o->z[s];
        ParamTable* pt = z->pt;
        const Backend* be = pt->be;
        if (z->hi > z->lo && clip < 1.0f) be->ops->scale(be, pt->grad + z->lo, clip, z->hi - z->lo);
        StepCtx c = {.r = r, .z = z, .t = t};
        c.cfg = (AdamWConfig){lr, (float)r->beta1, (float)r->beta2, (float)r->eps, (float)r->weight_decay};
        c.pcfg = c.cfg;
        if (r->projector_lr > 0 && r->lr > 0) c.pcfg.lr = (float)((double)lr * r->projector_lr / r->lr);
        for_pieces(pt, z->lo, z->hi, piece_adamw, &c);
        /* every replica's updated weights: the 2-byte compute values (bf16) or the f32 weights, started now and
         * completed by the next forward, part by part (Stage.param_wait), or here without the overlap */
        if (zero_gather_issue(o, z, s, err, err_len) != 0) return -1;
    }
    return o->gather_overlap ? 0 : zero_complete(o, err, err_len);
}

int step_exec_zero_pending(const ZeroOpt* o, int stage) { return o->z[stage].pending; }

int step_exec_zero_complete(ZeroOpt* o, char* err, size_t err_len) { return zero_complete(o, err, err_len); }

void step_exec_zero_gather_stats(const ZeroOpt* o, long* rounds, long* in_forward, long* late, long* in_flight) {
    *rounds = o->g_rounds;
    *in_forward = o->g_fwd;
    *late = o->g_late;
    *in_flight = o->g_flight;
}

/* ---- set-up, checkpoints, dumps ---- */

typedef struct {
    float* dst;
    const float* src;
    int to_shard; /* 1: tensors -> dst (shard order); 0: src (shard order) -> tensors (dst: the data block) */
} CopyCtx;

static void piece_copy_master(void* vctx, const ParamTable* pt, int i, size_t j0, size_t n, size_t p) {
    CopyCtx* c = vctx;
    const ParamSpec* s = &pt->specs[i];
    if (c->to_shard) pt->be->dev->copy_d2d(pt->be, c->dst + p, c->src + s->moff + j0, n * sizeof(float));
}

static ZeroOpt* zero_create(StepExec* ex, Comm* dp, const Recipe* r, int overlap, const char* resume_dir, char* err,
                     size_t err_len) {
    ZeroOpt* o = callocCheck(1, sizeof *o);
    o->ex = ex;
    o->dp = dp;
    o->D = dp->size;
    o->d = dp->rank;
    o->timeout_s = 600;
    o->gather_overlap = r->dp_overlap != 0;
    const Backend* be = ex->stages[0]->be;
    o->bf16 = ex->stages[0]->params.compute != NULL;
    o->inplace = be->dev->host_addressable;
    if (!o->inplace && dp->device_memory && dp->ops->wait_event) {
        o->inplace = o->device = 1;
        o->ev = be->dev->event_create();
    }
    o->round = (size_t)(r->dp_bucket_mb * 1048576.0 / 4);
    if (o->round < 1) o->round = 1;
    o->stg = be->dev->alloc(o->round * 4 * (size_t)o->D);
    if (!be->dev->host_addressable && !dp->device_memory) o->stg_host = mallocCheck(o->round * 4 * (size_t)o->D);
    int S = ex->n_stages;
    o->z = callocCheck((size_t)S, sizeof(ZeroStage));
    o->done = callocCheck((size_t)S, sizeof(int));
    o->next = S - 1;
    int rc = 0;
    for (int s = 0; s < S && rc == 0; s++) {
        ZeroStage* z = &o->z[s];
        ParamTable* pt = &ex->stages[s]->params;
        RR_ASSERT(pt->be == be && pt->m == NULL);
        z->pt = pt;
        z->q = pt->gtotal / (size_t)o->D;
        shard_of(o, z, o->d, &z->lo, &z->hi);
        size_t n = z->hi - z->lo, bytes = (n ? n : 1) * sizeof(float);
        z->m = be_alloc_as(be, MEM_OPTIM, bytes);
        z->v = be_alloc_as(be, MEM_OPTIM, bytes);
        be->dev->memset0(be, z->m, bytes);
        be->dev->memset0(be, z->v, bytes);
        if (resume_dir) { /* this shard's part of the checkpoint's moments (any layout, zero on or off) */
            float* hm = mallocCheck(bytes);
            float* hv = mallocCheck(bytes);
            rc = checkpoint_load_moments_range(resume_dir, pt, z->lo, z->hi, hm, hv, err, err_len);
            if (rc == 0) {
                be->dev->copy_h2d(be, z->m, hm, n * sizeof(float));
                be->dev->copy_h2d(be, z->v, hv, n * sizeof(float));
            }
            free(hm);
            free(hv);
        }
        if (!o->inplace) z->host = mallocCheck((pt->gtotal ? pt->gtotal : 1) * sizeof(float));
        /* the weights' all-gather: rounds of parallel.dp_bucket_mb MiB per replica, in place in the grad block */
        z->o = o;
        z->ground = o->round * 4 / zero_es(o);
        z->n_rounds = z->q ? (int)((z->q + z->ground - 1) / z->ground) : 0;
        z->greq = callocCheck((size_t)(z->n_rounds ? z->n_rounds : 1), sizeof(CommReq*));
        size_t tb = (size_t)o->D * (tail_of(o, z) ? tail_of(o, z) : 1) * 4;
        z->tail_dev = be->dev->alloc(tb);
        if (!o->inplace) z->tail_host = mallocCheck(tb);
        zero_parts(o, z, ex->stages[s]);
        ex->stages[s]->param_wait = zero_param_wait;
        ex->stages[s]->param_ctx = z;
        if (o->bf16) {
            /* the shard's masters; the rest of pt->data goes (frozen tensors hold only their compute copy) */
            z->master = be_alloc_as(be, MEM_WEIGHTS, bytes);
            CopyCtx c = {z->master, pt->data, 1};
            for_pieces(pt, z->lo, z->hi, piece_copy_master, &c);
            be->dev->synchronize(be);
            be->dev->free(pt->data);
            pt->data = NULL;
        }
    }
    if (rc != 0) {
        step_exec_zero_free(o);
        return NULL;
    }
    if (overlap && ex->set_grads_done) ex->set_grads_done(ex, zero_grads_done, o);
    return o;
}

int step_exec_add_zero(StepExec* ex, Comm* dp, const Recipe* r, int overlap, const char* resume_dir, char* err,
                       size_t err_len) {
    if (dp->size <= 1) return 0;
    if (ex->n_hooks >= STEP_EXEC_MAX_HOOKS) {
        snprintf(err, err_len, "internal: no step hook slot left for the distributed optimizer");
        return -1;
    }
    ZeroOpt* o = zero_create(ex, dp, r, overlap, resume_dir, err, err_len);
    if (!o) return -1;
    ex->zero = o;
    ex->hooks[ex->n_hooks++] = (StepHook){.fn = zero_hook, .ctx = o, .free = step_exec_zero_free};
    return 0;
}

/* pt->data whole again on the backend (bf16): every replica's masters (frozen tensors have none). */
static int zero_full_data(ZeroOpt* o, ZeroStage* z, float* data, char* err, size_t err_len) {
    const ParamTable* pt = z->pt;
    /* the gathered pieces land in the tensors of `data` through a table view */
    ParamTable view = *pt;
    view.data = data;
    ZeroStage zv = *z;
    zv.pt = &view;
    return gather_stage(o, &zv, z->master, NULL, NULL, ZW_MASTER_DEV, NULL, 0, 4, err, err_len);
}

int step_exec_zero_dump_begin(ZeroOpt* o, int grads, char* err, size_t err_len) {
    if (zero_complete(o, err, err_len) != 0) return -1; /* the weights of the last step whole */
    for (int s = 0; s < o->ex->n_stages; s++) {
        ZeroStage* z = &o->z[s];
        const Backend* be = z->pt->be;
        if (grads) { /* every replica's reduced shard: the whole step's gradients */
            if (gather_stage(o, z, z->pt->grad + z->lo, NULL, z->pt->grad, ZW_NONE, NULL, 1, 4, err, err_len) != 0)
                return -1;
            continue;
        }
        if (!o->bf16 || z->pt->data) continue;
        z->full_data = be->dev->alloc((z->pt->mtotal ? z->pt->mtotal : 1) * sizeof(float));
        if (zero_full_data(o, z, z->full_data, err, err_len) != 0) return -1;
        z->pt->data = z->full_data;
    }
    return 0;
}

void step_exec_zero_dump_end(ZeroOpt* o) {
    for (int s = 0; s < o->ex->n_stages; s++) {
        ZeroStage* z = &o->z[s];
        if (!z->full_data) continue;
        z->pt->be->dev->free(z->full_data);
        z->full_data = NULL;
        z->pt->data = NULL;
    }
}

int step_exec_zero_save_begin(ZeroOpt* o, char* err, size_t err_len) {
    int writer = o->d == 0;
    if (zero_complete(o, err, err_len) != 0) return -1; /* fp32: pt->data is written whole */
    for (int s = 0; s < o->ex->n_stages; s++) {
        ZeroStage* z = &o->z[s];
        ParamTable* pt = z->pt;
        const Backend* be = pt->be;
        if (writer) {
            z->save_data = mallocCheck((pt->total ? pt->total : 1) * sizeof(float));
            z->save_m = mallocCheck((pt->gtotal ? pt->gtotal : 1) * sizeof(float));
            z->save_v = mallocCheck((pt->gtotal ? pt->gtotal : 1) * sizeof(float));
        }
        if (gather_stage(o, z, z->m, z->save_m, NULL, ZW_NONE, NULL, 0, 4, err, err_len) != 0 ||
            gather_stage(o, z, z->v, z->save_v, NULL, ZW_NONE, NULL, 0, 4, err, err_len) != 0)
            return -1;
        if (!o->bf16) {
            if (writer) /* every master where the host layout has it; a tensor without one (QLoRA's NF4 base) as read */
                for (int i = 0; i < pt->n; i++) {
                    const ParamSpec* sp = &pt->specs[i];
                    if (params_has_master(pt, i))
                        be->dev->copy_d2h(be, z->save_data + sp->offset, pt->data + sp->moff, sp->numel * sizeof(float));
                    else
                        params_values_to_host(pt, i, z->save_data + sp->offset);
                }
        } else {
            if (writer) /* the frozen tensors' values: their compute copies, widened exactly */
                for (int i = 0; i < pt->n; i++)
                    if (!params_has_master(pt, i)) params_values_to_host(pt, i, z->save_data + pt->specs[i].offset);
            if (gather_stage(o, z, z->master, NULL, NULL, ZW_MASTER_HOST, writer ? z->save_data : NULL, 0, 4, err,
                             err_len) != 0)
                return -1;
        }
        if (writer) { /* the table points at the host copies while replica 0 writes (checkpoint.c reads them as they are) */
            z->keep_data = pt->data, z->keep_m = pt->m, z->keep_v = pt->v, z->keep_be = pt->be;
            pt->data = z->save_data, pt->m = z->save_m, pt->v = z->save_v, pt->be = NULL;
        }
    }
    return 0;
}

void step_exec_zero_save_end(ZeroOpt* o) {
    for (int s = 0; s < o->ex->n_stages; s++) {
        ZeroStage* z = &o->z[s];
        if (!z->save_data) continue;
        ParamTable* pt = z->pt;
        if (pt->be == NULL) pt->data = z->keep_data, pt->m = z->keep_m, pt->v = z->keep_v, pt->be = z->keep_be;
        free(z->save_data);
        free(z->save_m);
        free(z->save_v);
        z->save_data = z->save_m = z->save_v = NULL;
    }
}

void step_exec_zero_sizes(const ZeroOpt* o, int stage, size_t* total, size_t* shard, size_t* masters) {
    const ZeroStage* z = &o->z[stage];
    *total = z->pt->gtotal;
    *shard = z->hi - z->lo;
    *masters = z->master ? z->hi - z->lo : z->pt->mtotal;
}

int step_exec_zero_early(const ZeroOpt* o) { return o->last_early; }

void step_exec_zero_free(void* ctx) {
    ZeroOpt* o = ctx;
    if (!o) return;
    const Backend* be = o->ex->stages[0]->be;
    step_exec_zero_save_end(o);
    if (o->ex->zero == o) o->ex->zero = NULL;
    if (!o->failed) { /* the last step's gathers (every replica issued them), bounded: the run ends */
        char e[512];
        o->timeout_s = 30;
        if (zero_complete(o, e, sizeof e) != 0) rr_warn("%s", e);
    }
    for (int s = 0; s < o->ex->n_stages; s++) {
        ZeroStage* z = &o->z[s];
        if (!z->pt) continue;
        if (o->ex->stages[s]->param_ctx == z) o->ex->stages[s]->param_wait = NULL, o->ex->stages[s]->param_ctx = NULL;
        if (z->tail_dev) be->dev->free(z->tail_dev);
        free(z->tail_host);
        free(z->greq);
        free(z->need);
        free(z->need_tail);
        if (z->req) o->dp->ops->cancel(o->dp, &z->req);
        if (z->req_tail) o->dp->ops->cancel(o->dp, &z->req_tail);
        if (z->full_data) be->dev->free(z->full_data), z->pt->data = NULL;
        if (z->m) be->dev->free(z->m);
        if (z->v) be->dev->free(z->v);
        if (z->master) be->dev->free(z->master);
        free(z->host);
    }
    if (o->stg) be->dev->free(o->stg);
    free(o->stg_host);
    if (o->ev) be->dev->event_destroy(o->ev);
    free(o->z);
    free(o->done);
    free(o);
}
