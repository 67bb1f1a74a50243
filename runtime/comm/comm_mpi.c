/* comm_mpi.c — CommOps over MPI (see comm.h). MPI errors are returned, not fatal: the world
 * communicator gets MPI_ERRORS_RETURN, so a dead peer reaches the caller as a message. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/comm/comm.h"

struct CommReq {
    MPI_Request req;
    /* a reduce-scatter's result: received into tmp, copied to dst (bytes) when the request completes */
    void *tmp, *dst;
    size_t bytes;
};

/* What a completed request leaves to do (a reduce-scatter's copy into its segment), then free it. */
static void req_finish(CommReq* r) {
    if (r->tmp) {
        memcpy(r->dst, r->tmp, r->bytes);
        free(r->tmp);
    }
    free(r);
}

typedef struct {
    MPI_Comm comm;
    int owned; /* MPI_Comm_free at comm free (not for MPI_COMM_WORLD) */
} MpiComm;

static int mpi_initialised_here = 0;
static long n_collectives, n_p2p; /* comm_mpi_counts */

void comm_mpi_counts(long* collectives, long* p2p) {
    *collectives = n_collectives;
    *p2p = n_p2p;
}

#define MPI_TRY(call)                                                      \
    do {                                                                   \
        int rc_ = (call);                                                  \
        if (rc_ != MPI_SUCCESS) return mpi_fail(c, rc_, #call, err, err_len); \
    } while (0)

static int mpi_fail(const Comm* c, int rc, const char* what, char* err, size_t err_len) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    snprintf(err, err_len, "rank %d of group '%s': %s failed: %s", c->rank, c->name, what, msg);
    return -1;
}

static MPI_Comm mc(const Comm* c) { return ((const MpiComm*)c->impl)->comm; }

static MPI_Datatype mpi_type(CommType t) {
    switch (t) {
    case COMM_BYTE: return MPI_BYTE;
    case COMM_I32: return MPI_INT32_T;
    case COMM_I64: return MPI_INT64_T;
    case COMM_F32: return MPI_FLOAT;
    case COMM_F64: return MPI_DOUBLE;
    }
    return MPI_BYTE;
}

static MPI_Op mpi_op(CommOp op) { return op == COMM_MAX ? MPI_MAX : op == COMM_MIN ? MPI_MIN : MPI_SUM; }

static int check_count(const Comm* c, size_t n, char* err, size_t err_len) {
    if (n <= (size_t)INT32_MAX) return 0;
    snprintf(err, err_len, "rank %d of group '%s': message of %zu elements exceeds MPI's int count", c->rank, c->name, n);
    return -1;
}

static int m_isend(Comm* c, int peer, int tag, const void* buf, size_t bytes, int sync, CommReq** req, char* err,
                   size_t err_len) {
    if (check_count(c, bytes, err, err_len)) return -1;
    n_p2p++;
    CommReq* r = callocCheck(1, sizeof *r);
    int rc = sync ? MPI_Issend(buf, (int)bytes, MPI_BYTE, peer, tag, mc(c), &r->req)
                  : MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, mc(c), &r->req);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_fail(c, rc, sync ? "MPI_Issend" : "MPI_Isend", err, err_len);
    }
    *req = r;
    return 0;
}

static int m_irecv(Comm* c, int peer, int tag, void* buf, size_t bytes, CommReq** req, char* err, size_t err_len) {
    if (check_count(c, bytes, err, err_len)) return -1;
    n_p2p++;
    CommReq* r = callocCheck(1, sizeof *r);
    int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, mc(c), &r->req);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_fail(c, rc, "MPI_Irecv", err, err_len);
    }
    *req = r;
    return 0;
}

static int m_test(Comm* c, CommReq** req, int* done, size_t* bytes, char* err, size_t err_len) {
    MPI_Status st;
    int flag = 0;
    *done = 0;
    MPI_TRY(MPI_Test(&(*req)->req, &flag, &st));
    if (!flag) return 0;
    if (bytes) {
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        *bytes = (size_t)(count < 0 ? 0 : count);
    }
    req_finish(*req);
    *req = NULL;
    *done = 1;
    return 0;
}

static int m_testsome(Comm* c, int n, CommReq** reqs, int* done, size_t* bytes, char* err, size_t err_len) {
    /* scratch of the largest n so far (the transport calls this from one thread) */
    static MPI_Request* rq = NULL;
    static MPI_Status* st = NULL;
    static int* idx = NULL;
    static int cap = 0;
    if (n > cap) {
        cap = n > 2 * cap ? n : 2 * cap;
        rq = reallocCheck(rq, sizeof *rq * (size_t)cap);
        st = reallocCheck(st, sizeof *st * (size_t)cap);
        idx = reallocCheck(idx, sizeof *idx * (size_t)cap);
    }
    for (int i = 0; i < n; i++) {
        rq[i] = reqs[i] ? reqs[i]->req : MPI_REQUEST_NULL;
        done[i] = 0;
    }
    int out = 0;
    if (n > 0) MPI_TRY(MPI_Testsome(n, rq, &out, idx, st));
    if (out == MPI_UNDEFINED) out = 0; /* every request NULL */
    for (int k = 0; k < out; k++) {
        int i = idx[k];
        if (bytes) {
            int count = 0;
            MPI_Get_count(&st[k], MPI_BYTE, &count);
            bytes[i] = (size_t)(count < 0 ? 0 : count);
        }
        req_finish(reqs[i]);
        reqs[i] = NULL;
        done[i] = 1;
    }
    return 0;
}

static void m_cancel(Comm* c, CommReq** req) {
    (void)c;
    if (!*req) return;
    MPI_Cancel(&(*req)->req);
    MPI_Wait(&(*req)->req, MPI_STATUS_IGNORE);
    free((*req)->tmp);
    free(*req);
    *req = NULL;
}

/* Blocking collectives are started non-blocking and waited for here, with sleeps of 20 us .. 2 ms
 * (never spinning a core an oversubscribed rank needs) and a warning every comm_stall_warn_s seconds:
 * a stopped rank must not stall its group silently (docs/reliability.md "A dead or stopped rank"). */
static double comm_stall_warn_s = 30.0;

void comm_set_stall_warn(double warn_s) { comm_stall_warn_s = warn_s; }

static int m_wait_collective(Comm* c, MPI_Request* rq, const char* what, char* err, size_t err_len) {
    double t0 = rr_now(), next_warn = comm_stall_warn_s;
    long sleep_ns = 20000;
    for (;;) {
        int flag = 0;
        MPI_TRY(MPI_Test(rq, &flag, MPI_STATUS_IGNORE));
        if (flag) return 0;
        double waited = rr_now() - t0;
        if (comm_stall_warn_s > 0 && waited > next_warn) {
            if (c->size == 2)
                rr_warn("rank %d has waited %.0f s in %s over group '%s' (2 ranks) for its rank %d: stopped or slow",
                        c->rank, waited, what, c->name, 1 - c->rank);
            else
                rr_warn("rank %d has waited %.0f s in %s over group '%s' (%d ranks) for the other ranks: one of them "
                        "is stopped or slow",
                        c->rank, waited, what, c->name, c->size);
            next_warn += comm_stall_warn_s;
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 2000000) sleep_ns *= 2;
    }
}

static int m_allreduce(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len) {
    if (check_count(c, count, err, err_len)) return -1;
    n_collectives++;
    MPI_Request rq;
    MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(type), mpi_op(op), mc(c), &rq));
    return m_wait_collective(c, &rq, "an all-reduce", err, err_len);
}

static int m_iallreduce(Comm* c, void* buf, size_t count, CommType type, CommOp op, CommReq** req, char* err,
                        size_t err_len) {
    if (check_count(c, count, err, err_len)) return -1;
    n_collectives++;
    CommReq* r = callocCheck(1, sizeof *r);
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(type), mpi_op(op), mc(c), &r->req);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_fail(c, rc, "MPI_Iallreduce", err, err_len);
    }
    *req = r;
    return 0;
}

static int m_bcast(Comm* c, void* buf, size_t bytes, int root, char* err, size_t err_len) {
    if (check_count(c, bytes, err, err_len)) return -1;
    n_collectives++;
    MPI_Request rq;
    MPI_TRY(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, mc(c), &rq));
    return m_wait_collective(c, &rq, "a broadcast", err, err_len);
}

static int m_allgather(Comm* c, const void* send, void* recv, size_t bytes, char* err, size_t err_len) {
    if (check_count(c, bytes * (size_t)c->size, err, err_len)) return -1;
    n_collectives++;
    MPI_Request rq;
    MPI_TRY(MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, mc(c), &rq));
    return m_wait_collective(c, &rq, "an all-gather", err, err_len);
}

/* In place (comm.h): MPI_Ireduce_scatter_block from buf into a temporary of this member's count, copied
 * into its segment when the request completes. */
static int m_ireduce_scatter(Comm* c, void* buf, size_t count, CommType type, CommOp op, CommReq** req, char* err,
                             size_t err_len) {
    if (check_count(c, count * (size_t)c->size, err, err_len)) return -1;
    n_collectives++;
    size_t bytes = count * comm_type_size(type);
    CommReq* r = callocCheck(1, sizeof *r);
    r->tmp = mallocCheck(bytes ? bytes : 1);
    r->dst = (char*)buf + (size_t)c->rank * bytes;
    r->bytes = bytes;
    int rc = MPI_Ireduce_scatter_block(buf, r->tmp, (int)count, mpi_type(type), mpi_op(op), mc(c), &r->req);
    if (rc != MPI_SUCCESS) {
        free(r->tmp);
        free(r);
        return mpi_fail(c, rc, "MPI_Ireduce_scatter_block", err, err_len);
    }
    *req = r;
    return 0;
}
static int m_reduce_scatter(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len) {
    CommReq* r = NULL;
    if (m_ireduce_scatter(c, buf, count, type, op, &r, err, err_len) != 0) return -1;
    int rc = m_wait_collective(c, &r->req, "a reduce-scatter", err, err_len);
    if (rc == 0) req_finish(r);
    else {
        free(r->tmp);
        free(r);
    }
    return rc;
}
static int m_all_gather(Comm* c, void* buf, size_t count, CommType type, char* err, size_t err_len) {
    if (check_count(c, count * (size_t)c->size, err, err_len)) return -1;
    n_collectives++;
    MPI_Request rq;
    MPI_TRY(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, mpi_type(type), mc(c), &rq));
    return m_wait_collective(c, &rq, "an all-gather", err, err_len);
}
static int m_iall_gather(Comm* c, void* buf, size_t count, CommType type, CommReq** req, char* err, size_t err_len) {
    if (check_count(c, count * (size_t)c->size, err, err_len)) return -1;
    n_collectives++;
    CommReq* r = callocCheck(1, sizeof *r);
    int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, mpi_type(type), mc(c), &r->req);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_fail(c, rc, "MPI_Iallgather", err, err_len);
    }
    *req = r;
    return 0;
}
static int m_barrier(Comm* c, char* err, size_t err_len) {
    n_collectives++;
    MPI_Request rq;
    MPI_TRY(MPI_Ibarrier(mc(c), &rq));
    return m_wait_collective(c, &rq, "a barrier", err, err_len);
}

static Comm* mpi_wrap(MPI_Comm comm, int owned, const char* name);

static int m_split(Comm* c, int color, int key, Comm** out, char* err, size_t err_len) {
    MPI_Comm nc;
    MPI_TRY(MPI_Comm_split(mc(c), color, key, &nc));
    *out = mpi_wrap(nc, 1, "group");
    return 0;
}

static void m_free(Comm* c) {
    if (!c) return;
    MpiComm* m = c->impl;
    if (m->owned) MPI_Comm_free(&m->comm);
    free(m);
    free(c);
}

static const CommOps comm_mpi_ops = {
    .name = "mpi",
    .isend = m_isend,
    .irecv = m_irecv,
    .test = m_test,
    .testsome = m_testsome,
    .cancel = m_cancel,
    .allreduce = m_allreduce,
    .iallreduce = m_iallreduce,
    .bcast = m_bcast,
    .allgather = m_allgather,
    .barrier = m_barrier,
    .reduce_scatter = m_reduce_scatter,
    .ireduce_scatter = m_ireduce_scatter,
    .all_gather = m_all_gather,
    .iall_gather = m_iall_gather,
    .split = m_split,
    .free = m_free,
};

static Comm* mpi_wrap(MPI_Comm comm, int owned, const char* name) {
    Comm* c = callocCheck(1, sizeof *c);
    MpiComm* m = callocCheck(1, sizeof *m);
    m->comm = comm;
    m->owned = owned;
    c->ops = &comm_mpi_ops;
    c->impl = m;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    int flag = 0;
    int* ub = NULL;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    c->tag_ub = flag && ub ? *ub : 32767;
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

Comm* comm_mpi_world(char* err, size_t err_len) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* Open MPI's handlers for SIGABRT, SIGBUS, SIGFPE and SIGSEGV print a backtrace from inside the handler
         * (dlopen, malloc): after heap corruption that can block on malloc's lock, and the rank sleeps forever
         * instead of dying, so mpirun never ends the job. Without them the signal's default action ends the rank
         * and mpirun names it and the signal (docs/reliability.md "A rank that dies"). A value the user set is kept. */
        setenv("OMPI_MCA_opal_signal", "", 0);
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
            snprintf(err, err_len, "MPI_Init failed: this build needs a working MPI (Open MPI) to run");
            return NULL;
        }
        mpi_initialised_here = 1;
    }
    return mpi_wrap(MPI_COMM_WORLD, 0, "world");
}

void comm_mpi_finalize(void) {
    int fin = 0;
    if (!mpi_initialised_here) return;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    mpi_initialised_here = 0;
}

void comm_abort(Comm* world, int code) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (world && world->ops == &comm_mpi_ops && world->size > 1) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    (void)inited;
    exit(code);
}
