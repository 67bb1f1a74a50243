/* comm.c — the rank grid and its groups, and a group of one without MPI (see comm.h). Nothing here
 * calls MPI: the groups come from the world's own split. */
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/comm/comm.h"

size_t comm_type_size(CommType t) {
    switch (t) {
    case COMM_BYTE: return 1;
    case COMM_I32: return 4;
    case COMM_I64: return 8;
    case COMM_F32: return 4;
    case COMM_F64: return 8;
    }
    return 1;
}

/* ---- a group of one: collectives are identities, point-to-point has no peer ---- */

static int self_no_peer(Comm* c, char* err, size_t err_len) {
    snprintf(err, err_len, "group '%s' has one rank: no peer to exchange messages with", c->name);
    return -1;
}
static int s_isend(Comm* c, int peer, int tag, const void* buf, size_t bytes, int sync, CommReq** req, char* err,
                   size_t err_len) {
    return self_no_peer(c, err, err_len);
}
static int s_irecv(Comm* c, int peer, int tag, void* buf, size_t bytes, CommReq** req, char* err, size_t err_len) {
    return self_no_peer(c, err, err_len);
}
static int s_test(Comm* c, CommReq** req, int* done, size_t* bytes, char* err, size_t err_len) {
    *done = 1;
    *req = NULL;
    return 0;
}
static void s_cancel(Comm* c, CommReq** req) { *req = NULL; }
static int s_allreduce(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len) {
    return 0;
}
static int s_iallreduce(Comm* c, void* buf, size_t count, CommType type, CommOp op, CommReq** req, char* err,
                        size_t err_len) {
    *req = NULL; /* complete at once: test() on NULL is never called (callers check for NULL) */
    return 0;
}
static int s_bcast(Comm* c, void* buf, size_t bytes, int root, char* err, size_t err_len) { return 0; }
static int s_allgather(Comm* c, const void* send, void* recv, size_t bytes, char* err, size_t err_len) {
    if (recv != send) memmove(recv, send, bytes);
    return 0;
}
static int s_barrier(Comm* c, char* err, size_t err_len) { return 0; }
static int s_reduce_scatter(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len) {
    return 0;
}
static int s_ireduce_scatter(Comm* c, void* buf, size_t count, CommType type, CommOp op, CommReq** req, char* err,
                             size_t err_len) {
    *req = NULL;
    return 0;
}
static int s_all_gather(Comm* c, void* buf, size_t count, CommType type, char* err, size_t err_len) { return 0; }
static int s_iall_gather(Comm* c, void* buf, size_t count, CommType type, CommReq** req, char* err, size_t err_len) {
    *req = NULL;
    return 0;
}
static int s_split(Comm* c, int color, int key, Comm** out, char* err, size_t err_len) {
    *out = comm_self();
    return 0;
}
static void s_free(Comm* c) { free(c); }

static const CommOps comm_self_ops = {
    .name = "self",
    .isend = s_isend,
    .irecv = s_irecv,
    .test = s_test,
    .cancel = s_cancel,
    .allreduce = s_allreduce,
    .iallreduce = s_iallreduce,
    .bcast = s_bcast,
    .allgather = s_allgather,
    .barrier = s_barrier,
    .reduce_scatter = s_reduce_scatter,
    .ireduce_scatter = s_ireduce_scatter,
    .all_gather = s_all_gather,
    .iall_gather = s_iall_gather,
    .split = s_split,
    .free = s_free,
};

Comm* comm_self(void) {
    Comm* c = callocCheck(1, sizeof *c);
    c->ops = &comm_self_ops;
    c->rank = 0;
    c->size = 1;
    c->tag_ub = 32767;
    snprintf(c->name, sizeof c->name, "self");
    return c;
}

/* ---- the grid ---- */

void comm_grid_coords(int pp, int tp, int dp, int rank, int* p, int* t, int* d) {
    (void)pp;
    *t = rank % tp;
    *d = (rank / tp) % dp;
    *p = rank / (tp * dp);
}

int comm_grid_rank(int pp, int tp, int dp, int p, int t, int d) {
    (void)pp;
    return (p * dp + d) * tp + t;
}

static int grid_split(Comm* world, int color, int key, const char* name, Comm** out, char* err, size_t err_len) {
    if (world->ops->split(world, color, key, out, err, err_len) != 0) return -1;
    snprintf((*out)->name, sizeof (*out)->name, "%s", name);
    return 0;
}

int comm_grid_init(CommGrid* g, Comm* world, int pp, int tp, int dp, char* err, size_t err_len) {
    memset(g, 0, sizeof *g);
    if (pp < 1 || tp < 1 || dp < 1) {
        snprintf(err, err_len, "layout pp %d x tp %d x dp %d: every factor must be at least 1", pp, tp, dp);
        return -1;
    }
    if ((long)pp * tp * dp != world->size) {
        snprintf(err, err_len,
                 "the layout pp %d x tp %d x dp %d needs %d ranks, but %d %s started; run it under mpirun -np %d",
                 pp, tp, dp, pp * tp * dp, world->size, world->size == 1 ? "process was" : "ranks were", pp * tp * dp);
        return -1;
    }
    g->pp = pp, g->tp = tp, g->dp = dp;
    g->world = world;
    g->rank = world->rank;
    comm_grid_coords(pp, tp, dp, g->rank, &g->p, &g->t, &g->d);
    /* colors identify the group; keys order its members by the coordinate that varies inside it */
    if (grid_split(world, g->p * dp + g->d, g->t, "tp", &g->tp_group, err, err_len) != 0 ||
        grid_split(world, g->p * tp + g->t, g->d, "dp", &g->dp_group, err, err_len) != 0 ||
        grid_split(world, g->d * tp + g->t, g->p, "pipe", &g->pipe, err, err_len) != 0 ||
        grid_split(world, g->d, g->p * tp + g->t, "mp", &g->mp, err, err_len) != 0) {
        comm_grid_free(g);
        return -1;
    }
    return 0;
}

void comm_grid_free(CommGrid* g) {
    Comm** groups[] = {&g->tp_group, &g->dp_group, &g->pipe, &g->mp};
    for (int i = 0; i < 4; i++)
        if (*groups[i]) {
            (*groups[i])->ops->free(*groups[i]);
            *groups[i] = NULL;
        }
}

int comm_grid_use_nccl(CommGrid* g, char* err, size_t err_len) {
    /* the same order on every rank: each creation is collective over its group */
    Comm** groups[] = {&g->tp_group, &g->dp_group, &g->pipe, &g->mp};
    for (int i = 0; i < 4; i++) {
        Comm* h = *groups[i];
        if (!h || h->size == 1 || h->device_memory) continue;
        char name[16];
        snprintf(name, sizeof name, "%s", h->name);
        *groups[i] = NULL; /* the device group owns h from here on, also when it fails */
        Comm* d = comm_nccl_create(h, groups[i] != &g->mp, err, err_len); /* mp: collectives only */
        if (!d) {
            comm_grid_free(g);
            return -1;
        }
        snprintf(d->name, sizeof d->name, "%s", name);
        *groups[i] = d;
    }
    return 0;
}

int comm_grid_use_transport(CommGrid* g, const char* transport, char* err, size_t err_len) {
    if (!strcmp(transport, "mpi")) return 0;
    if (!strcmp(transport, "nccl")) return comm_grid_use_nccl(g, err, err_len);
    snprintf(err, err_len, "unknown transport '%s' (known: mpi, nccl)", transport);
    comm_grid_free(g);
    return -1;
}

static int grid_has_device_group(const CommGrid* g) {
    const Comm* groups[] = {g->tp_group, g->dp_group, g->pipe, g->mp};
    for (int i = 0; i < 4; i++)
        if (groups[i] && groups[i]->device_memory) return 1;
    return 0;
}

void comm_grid_profile(const CommGrid* g, int on) {
    if (grid_has_device_group(g)) comm_nccl_profile(on);
}

void comm_grid_profile_take(const CommGrid* g, double* ms, long* ops) {
    *ms = 0, *ops = 0;
    if (grid_has_device_group(g)) comm_nccl_profile_take(ms, ops);
}

int comm_grid_allreduce_all(CommGrid* g, void* buf, size_t count, CommType type, CommOp op, char* err,
                            size_t err_len) {
    int dev = (g->mp && g->mp->device_memory) || (g->dp_group && g->dp_group->device_memory);
    if (!dev) return comm_allreduce(g->world, buf, count, type, op, err, err_len);
    /* mp holds the pp x tp ranks of one replica, dp the replicas of one (p, t): sum (max, min) over the
     * first, then over the second, is the job's */
    if (comm_allreduce(g->mp, buf, count, type, op, err, err_len) != 0) return -1;
    return comm_allreduce(g->dp_group, buf, count, type, op, err, err_len);
}
