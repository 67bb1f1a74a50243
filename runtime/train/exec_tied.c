/* exec_tied.c — tied input/output embeddings under a pipeline (model.tie_embeddings), as Megatron's
 * embedding group: the first stage holds text.embed.weight for the lookup, the last stage a copy of it for
 * the LM head (runtime/model/model.h), both initialised from the same (seed, name). At every step end,
 * after the data-parallel reduction and before the gradient norm, the two gradients are summed so that
 * both stages hold the one-process gradient of the one tensor; AdamW then moves both copies alike (same
 * gradient, same moments), so they stay equal bit for bit. The copy is not counted in the gradient norm
 * and not written to checkpoints (ParamSpec.shared_copy). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/train/exec.h"

typedef struct {
    StepExec* ex;
    Comm* group;      /* pp > 1: the first and the last pipeline rank of this (t, d) (NULL on the others) */
    Comm* unused;     /* the split's group of the middle ranks (kept only to free it) */
    Stage *first, *last; /* this rank's stages holding the embedding (first) and the head's copy (last), or NULL */
    float* host;      /* device backend over a host group: the staging copy */
    void* ev;         /* device group: the gradients' completion event */
} TiedEmbed;

static float* tied_grad(Stage* st, size_t* n) {
    int i = params_find(&st->params, "text.embed.weight");
    RR_ASSERT(i >= 0);
    *n = st->params.specs[i].numel;
    return params_grad(&st->params, i);
}

static int tied_hook(StepExec* ex, void* ctx, char* err, size_t err_len) {
    TiedEmbed* t = ctx;
    (void)ex;
    size_t n = 0;
    if (t->first && t->last) { /* both on this rank (one pipeline rank, several chunks): a local sum */
        size_t n2;
        float *g0 = tied_grad(t->first, &n), *g1 = tied_grad(t->last, &n2);
        RR_ASSERT(n == n2);
        if (!g0 || !g1) return 0; /* frozen (train.freeze): both copies keep their loaded values */
        const Backend* be = t->first->be;
        be->ops->add_forward(be, buf_f32(g0), buf_f32(g0), buf_f32(g1), n); /* gradients: f32 words */
        be->dev->copy_d2d(be, g1, g0, n * sizeof(float));
        return 0;
    }
    if (!t->group) return 0; /* a middle stage */
    Stage* st = t->first ? t->first : t->last;
    const Backend* be = st->be;
    float* g = tied_grad(st, &n);
    if (!g) return 0; /* frozen: the same list on both ends, so neither calls the all-reduce */
    char e[512];
    int rc;
    if (be->dev->host_addressable) {
        rc = comm_allreduce(t->group, g, n, COMM_F32, COMM_SUM, e, sizeof e);
    } else if (t->group->device_memory && t->group->ops->wait_event) {
        /* a device group (NCCL): in place on the device, ordered after the gradients' producers */
        if (!t->ev) t->ev = be->dev->event_create();
        be->dev->event_record(be, t->ev);
        rc = t->group->ops->wait_event(t->group, -1, t->ev, e, sizeof e);
        if (rc == 0) rc = comm_allreduce(t->group, g, n, COMM_F32, COMM_SUM, e, sizeof e);
    } else {
        if (!t->host) t->host = mallocCheck(n * sizeof(float) + 1);
        be->dev->copy_d2h(be, t->host, g, n * sizeof(float));
        rc = comm_allreduce(t->group, t->host, n, COMM_F32, COMM_SUM, e, sizeof e);
        if (rc == 0) be->dev->copy_h2d(be, g, t->host, n * sizeof(float));
    }
    if (rc != 0) {
        snprintf(err, err_len, "tied embedding: gradient sum of text.embed.weight between the first and the last "
                 "pipeline stage (group '%s'): %s", t->group->name, e);
        return -1;
    }
    return 0;
}

static void tied_free(void* ctx) {
    TiedEmbed* t = ctx;
    if (!t) return;
    if (t->group) t->group->ops->free(t->group);
    if (t->unused) t->unused->ops->free(t->unused);
    if (t->ev) t->ex->stages[0]->be->dev->event_destroy(t->ev);
    free(t->host);
    free(t);
}

int step_exec_add_tied_embed(StepExec* ex, const ModelConfig* mc, Comm* pipe, int p, int P, char* err,
                             size_t err_len) {
    if (!mc->tie_embeddings) return 0;
    TiedEmbed t = {.ex = ex};
    for (int c = 0; c < ex->n_stages; c++) {
        Stage* st = ex->stages[c];
        if (st->first && st->last) return 0; /* one stage holds embedding and head: nothing to keep equal */
        if (st->first) t.first = st;
        if (st->last) t.last = st;
    }
    if (ex->n_hooks >= STEP_EXEC_MAX_HOOKS) {
        snprintf(err, err_len, "internal: no step hook slot left for the tied embedding's gradient sum");
        return -1;
    }
    if (P > 1) {
        /* collective over the pipeline group: the first and last rank form the embedding group */
        int member = p == 0 || p == P - 1;
        Comm* g = NULL;
        if (!pipe || pipe->ops->split(pipe, member ? 0 : 1, p, &g, err, err_len) != 0) {
            if (!pipe) snprintf(err, err_len, "internal: tied embeddings under a pipeline need its group");
            return -1;
        }
        if (member) t.group = g;
        else t.unused = g;
    }
    TiedEmbed* d = mallocCheck(sizeof *d);
    *d = t;
    ex->hooks[ex->n_hooks++] = (StepHook){.fn = tied_hook, .ctx = d, .free = tied_free};
    return 0;
}
