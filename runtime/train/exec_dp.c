/* exec_dp.c — the data-parallel step end (docs/parallel.md "Data parallelism", Megatron's finalize_model_grads): the
 * bucketed gradient all-reduce over the DP group, as a StepExec hook (see exec.h). Replicas hold the
 * same parameters; each ran its own microbatches with the loss scaled by 1 / (supervised targets of the
 * whole global step), so the sum over replicas is the one-process step's gradient. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/util.h"
#include "runtime/train/exec.h"

typedef struct {
    int stage;            /* index into ex->stages */
    size_t off, n;        /* floats of that stage's grad block */
    CommReq* req;
    int started;
} DpBucket;

typedef struct {
    StepExec* ex;
    Comm* dp;
    double timeout_s;
    DpBucket* b;          /* grouped by stage, stages from the last to the first */
    int nb;
    int* first;           /* (n_stages + 1) first bucket of each stage in b, by stage index */
    int* done;            /* (n_stages) grads final this step */
    int next;             /* stage whose buckets start next (n_stages - 1 .. 0, then -1) */
    int on_host;          /* the CPU backend, or a device DP group (NCCL): reduce the grad block in place */
    int device;           /* a device DP group: the all-reduce's stream waits for the gradients' event */
    void* ev;             /* (device) recorded on the compute stream when a stage's gradients are final */
    float** host;         /* device backends: a host copy of each stage's grad block */
    int early, last_early;
} DpReduce;

static float* bucket_buf(DpReduce* d, const DpBucket* k) {
    const ParamTable* pt = &d->ex->stages[k->stage]->params;
    return (d->on_host ? pt->grad : d->host[k->stage]) + k->off;
}

static int dp_start_stage(DpReduce* d, int s, char* err, size_t err_len) {
    if (d->device) {
        /* the gradients are written by work still queued on the compute stream: NCCL's stream waits for
         * it on the device (docs/design.md "Streams and events"), the host goes on */
        const ParamTable* pt = &d->ex->stages[s]->params;
        char e[512];
        pt->be->dev->event_record(pt->be, d->ev);
        if (d->dp->ops->wait_event(d->dp, -1, d->ev, e, sizeof e) != 0) {
            snprintf(err, err_len, "data-parallel gradient all-reduce of stage %d: %s", s, e);
            return -1;
        }
    }
    for (int i = d->first[s]; i < d->first[s + 1]; i++) {
        DpBucket* k = &d->b[i];
        if (!d->on_host) {
            const ParamTable* pt = &d->ex->stages[s]->params;
            pt->be->dev->copy_d2h(pt->be, d->host[s] + k->off, pt->grad + k->off, k->n * sizeof(float));
        }
        char e[512];
        if (d->dp->ops->iallreduce(d->dp, bucket_buf(d, k), k->n, COMM_F32, COMM_SUM, &k->req, e, sizeof e) != 0) {
            snprintf(err, err_len, "data-parallel gradient all-reduce, bucket %d of %d: %s", i, d->nb, e);
            return -1;
        }
        k->started = 1;
    }
    return 0;
}

/* Start the buckets of every stage whose turn has come and whose gradients are final. */
static int dp_start_ready(DpReduce* d, int force, int more_work, char* err, size_t err_len) {
    while (d->next >= 0 && (force || d->done[d->next])) {
        if (dp_start_stage(d, d->next, err, err_len) != 0) return -1;
        if (more_work) d->early += d->first[d->next + 1] - d->first[d->next];
        d->next--;
    }
    return 0;
}

static int dp_grads_done(void* ctx, int chunk, int more_work, char* err, size_t err_len) {
    DpReduce* d = ctx;
    RR_ASSERT(chunk >= 0 && chunk < d->ex->n_stages);
    d->done[chunk] = 1;
    return dp_start_ready(d, 0, more_work, err, err_len);
}

static int dp_hook(StepExec* ex, void* ctx, char* err, size_t err_len) {
    DpReduce* d = ctx;
    (void)ex;
    if (dp_start_ready(d, 1, 0, err, err_len) != 0) return -1;
    double t0 = rr_now();
    int left = d->nb;
    while (left > 0) {
        int progressed = 0;
        for (int i = 0; i < d->nb; i++) {
            DpBucket* k = &d->b[i];
            if (!k->req) continue;
            int fin = 0;
            char e[512];
            if (d->dp->ops->test(d->dp, &k->req, &fin, NULL, e, sizeof e) != 0) {
                snprintf(err, err_len, "data-parallel gradient all-reduce, bucket %d of %d: %s", i, d->nb, e);
                return -1;
            }
            if (!fin) continue;
            progressed = 1;
            if (!d->on_host) {
                const ParamTable* pt = &d->ex->stages[k->stage]->params;
                pt->be->dev->copy_h2d(pt->be, pt->grad + k->off, d->host[k->stage] + k->off, k->n * sizeof(float));
            }
        }
        left = 0;
        for (int i = 0; i < d->nb; i++) left += d->b[i].req != NULL;
        if (left > 0 && !progressed) {
            if (d->timeout_s > 0 && rr_now() - t0 > d->timeout_s) {
                snprintf(err, err_len,
                         "data-parallel gradient all-reduce: %d of %d buckets still incomplete after %.0f s (group "
                         "'%s' of %d replicas, this one %d): a replica probably died or stopped; check the other "
                         "ranks' output", left, d->nb, rr_now() - t0, d->dp->name, d->dp->size, d->dp->rank);
                return -1;
            }
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    /* the next step starts from scratch */
    for (int i = 0; i < d->nb; i++) d->b[i].started = 0;
    for (int s = 0; s < ex->n_stages; s++) d->done[s] = 0;
    d->next = ex->n_stages - 1;
    d->last_early = d->early;
    d->early = 0;
    return 0;
}

static void dp_free(void* ctx) {
    DpReduce* d = ctx;
    if (!d) return;
    for (int i = 0; i < d->nb; i++)
        if (d->b[i].req) d->dp->ops->cancel(d->dp, &d->b[i].req);
    if (d->host)
        for (int s = 0; s < d->ex->n_stages; s++) free(d->host[s]);
    free(d->host);
    if (d->ev) d->ex->stages[0]->be->dev->event_destroy(d->ev);
    free(d->b);
    free(d->first);
    free(d->done);
    free(d);
}

int step_exec_add_dp_reduce(StepExec* ex, Comm* dp, double bucket_mb, int overlap, double timeout_s, char* err,
                            size_t err_len) {
    if (dp->size <= 1) return 0;
    if (ex->n_hooks >= STEP_EXEC_MAX_HOOKS) {
        snprintf(err, err_len, "internal: no step hook slot left for the data-parallel all-reduce");
        return -1;
    }
    size_t per = (size_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (per < 1) per = 1;
    DpReduce* d = callocCheck(1, sizeof *d);
    d->ex = ex;
    d->dp = dp;
    d->timeout_s = timeout_s;
    d->on_host = ex->stages[0]->be->dev->host_addressable;
    if (!d->on_host && dp->device_memory && dp->ops->wait_event) {
        d->on_host = d->device = 1;
        d->ev = ex->stages[0]->be->dev->event_create();
    }
    int S = ex->n_stages;
    d->first = callocCheck((size_t)S + 1, sizeof(int));
    d->done = callocCheck((size_t)S, sizeof(int));
    if (!d->on_host) d->host = callocCheck((size_t)S, sizeof(float*));
    /* bucket k of stage s: [k per, min((k+1) per, total)) — the same cut on every replica (same layout) */
    for (int s = 0; s < S; s++) {
        const ParamTable* pt = &ex->stages[s]->params;
        d->first[s] = d->nb;
        for (size_t off = 0; off < pt->gtotal; off += per) {
            d->b = reallocCheck(d->b, sizeof(DpBucket) * (size_t)(d->nb + 1));
            d->b[d->nb++] = (DpBucket){.stage = s, .off = off, .n = pt->gtotal - off < per ? pt->gtotal - off : per};
        }
        if (!d->on_host) d->host[s] = mallocCheck(pt->gtotal * sizeof(float) + 1);
    }
    d->first[S] = d->nb;
    d->next = S - 1;
    ex->hooks[ex->n_hooks++] = (StepHook){.fn = dp_hook, .ctx = d, .free = dp_free};
    if (overlap && ex->set_grads_done) ex->set_grads_done(ex, dp_grads_done, d);
    (void)err_len;
    return 0;
}

void step_exec_dp_stats(const StepExec* ex, int* buckets, int* early) {
    *buckets = 0, *early = 0;
    for (int i = 0; i < ex->n_hooks; i++)
        if (ex->hooks[i].fn == dp_hook) {
            const DpReduce* d = ex->hooks[i].ctx;
            *buckets = d->nb;
            *early = d->last_early;
        }
}
