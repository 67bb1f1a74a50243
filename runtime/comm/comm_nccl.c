/* comm_nccl.c — CommOps over NCCL (see comm.h, "the NCCL implementation"). Built into librrfp-nccl.so
 * (opened on first use by comm_nccl_loader.c) and, for the CPU emulation, compiled as C++ against
 * tests/support/cuda_emu's cuda_runtime.h and nccl.h (NCCL emulated over MPI), so the same code runs here.
 *
 * Layout of a device group of n ranks:
 *   - coll: one communicator over the group, on its own stream (collectives: TP / DP all-reduces);
 *   - links: for each other rank q of a group of at most 8 (a TP group), for each ring neighbour q
 *     (rank +- 1 mod n) of a larger one, an outgoing communicator (2 ranks: this rank 0, q rank 1)
 *     and an incoming one (q rank 0, this rank 1), each on its own stream. NCCL
 *     point-to-point is tagless, FIFO per communicator, and a receive enqueued on a stream blocks
 *     what follows it there until its message comes; with one communicator per direction a receive
 *     posted ahead (the FIFO protocol's next header) never holds up a send.
 * Every request is a CUDA event recorded after its operation; test() polls it (cudaEventQuery) and
 * never blocks. Host buffers of p2p messages (headers, notices: at most COMM_HOST_STAGE_BYTES) go
 * through a pinned + device staging ring allocated at creation; a receive's bytes reach the host
 * buffer when test() sees its event complete. Host-memory collectives (a step's scalars: the loss sum,
 * the gradient norm, the plan's totals, the stop flag, the adaptive mode's cost model, the vocabulary-
 * parallel cross-entropy's row statistics) go through a second pinned + device buffer made at creation,
 * in pieces of at most COLL_STAGE_BYTES, over the group's NCCL communicator: after the job start and
 * the unique ids, MPI carries nothing but host messages between two ranks of a group of more than 8
 * that are not ring neighbours (a pipeline stage sends to its ring neighbours only). A group made
 * without links (comm_nccl_create with links = 0: the gradient norm's model-parallel group) has only
 * the collective communicator. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/util.h"
#include "runtime/comm/comm.h"

#define STAGE_SLOTS 256
#define COLL_STAGE_BYTES (64 * 1024) /* a host collective's piece (a multiple of every type's size) */

typedef struct {
    ncclComm_t nc; /* NULL: no link to that rank */
    cudaStream_t stream;
} Link;

typedef struct {
    Comm* host; /* the MPI group of the same ranks (owned) */
    ncclComm_t coll;
    cudaStream_t coll_stream;
    Link* out; /* (size) by peer */
    Link* in;  /* (size) by peer */
    unsigned char* dev_stage; /* STAGE_SLOTS x COMM_HOST_STAGE_BYTES, device */
    unsigned char* pin_stage; /* the same, pinned host */
    unsigned char busy[STAGE_SLOTS];
    unsigned char* coll_dev; /* COLL_STAGE_BYTES, device: host collectives */
    unsigned char* coll_pin; /* the same, pinned host */
    cudaEvent_t* free_ev;
    int n_free_ev, cap_free_ev;
    int broken; /* an operation was cancelled: NCCL cannot take one back, the group is aborted */
    int has_links; /* 0: collectives only (comm_nccl_create with links = 0) */
} NcclComm;

struct CommReq {
    cudaEvent_t ev;  /* NULL: a host request (host_req) */
    CommReq* host_req;
    void* host_dst;  /* a staged receive: its bytes go here on completion */
    int slot;        /* staging slot, -1: none */
    size_t bytes;
};

static NcclComm* nimpl(const Comm* c) { return (NcclComm*)c->impl; }

static int nccl_fail(const Comm* c, const char* what, ncclResult_t r, char* err, size_t err_len) {
    snprintf(err, err_len, "rank %d of group '%s': %s failed: %s", c->rank, c->name, what, ncclGetErrorString(r));
    return -1;
}
static int cuda_fail(const Comm* c, const char* what, cudaError_t e, char* err, size_t err_len) {
    snprintf(err, err_len, "rank %d of group '%s': %s failed: %s", c->rank, c->name, what, cudaGetErrorString(e));
    return -1;
}
#define NCCL_TRY(call)                                                      \
    do {                                                                    \
        ncclResult_t r_ = (call);                                           \
        if (r_ != ncclSuccess) return nccl_fail(c, #call, r_, err, err_len); \
    } while (0)
#define CUDA_TRY(call)                                                      \
    do {                                                                    \
        cudaError_t e_ = (call);                                            \
        if (e_ != cudaSuccess) return cuda_fail(c, #call, e_, err, err_len); \
    } while (0)

/* runtime.profile's `communication` kind: with profiling on, every NCCL operation is bracketed by two
 * timing events on its stream; rrfp_nccl_profile_take (comm_nccl_profile_take) waits for them and adds
 * up the GPU time and the count since the last take. One process-wide record (the trainer's thread). */
static struct {
    int on;
    cudaEvent_t* ev; /* pairs */
    size_t n, cap;
    cudaEvent_t* pool;
    size_t npool, cappool;
    long ops;
} nprof;
static cudaEvent_t nprof_event(void) {
    if (nprof.npool) return nprof.pool[--nprof.npool];
    cudaEvent_t e = NULL;
    if (cudaEventCreate(&e) != cudaSuccess) return NULL;
    return e;
}
static void nprof_begin(cudaStream_t s, cudaEvent_t* a) {
    *a = nprof.on ? nprof_event() : NULL;
    if (*a && cudaEventRecord(*a, s) != cudaSuccess) *a = NULL;
}
static void nprof_end(cudaStream_t s, cudaEvent_t a) {
    if (!a) return;
    cudaEvent_t b = nprof_event();
    if (!b || cudaEventRecord(b, s) != cudaSuccess) return;
    if (nprof.n + 2 > nprof.cap) {
        nprof.cap = nprof.cap ? 2 * nprof.cap : 256;
        nprof.ev = (cudaEvent_t*)reallocCheck(nprof.ev, nprof.cap * sizeof *nprof.ev);
    }
    nprof.ev[nprof.n++] = a;
    nprof.ev[nprof.n++] = b;
    nprof.ops++;
}
/* an NCCL call on stream s, timed when profiling */
#define NCCL_PROF_TRY(s, call)          \
    do {                                \
        cudaEvent_t pa_;                \
        nprof_begin((s), &pa_);         \
        NCCL_TRY(call);                 \
        nprof_end((s), pa_);            \
    } while (0)

#ifdef __cplusplus
extern "C"
#endif
    __attribute__((visibility("default"))) void
    rrfp_nccl_profile(int on) {
    nprof.on = on;
}
#ifdef __cplusplus
extern "C"
#endif
    __attribute__((visibility("default"))) void
    rrfp_nccl_profile_take(double* ms, long* ops) {
    *ms = 0;
    for (size_t i = 0; i + 1 < nprof.n; i += 2) {
        float t = 0;
        if (cudaEventSynchronize(nprof.ev[i + 1]) == cudaSuccess &&
            cudaEventElapsedTime(&t, nprof.ev[i], nprof.ev[i + 1]) == cudaSuccess)
            *ms += t;
        for (int k = 0; k < 2; k++) {
            if (nprof.npool == nprof.cappool) {
                nprof.cappool = nprof.cappool ? 2 * nprof.cappool : 256;
                nprof.pool = (cudaEvent_t*)reallocCheck(nprof.pool, nprof.cappool * sizeof *nprof.pool);
            }
            nprof.pool[nprof.npool++] = nprof.ev[i + k];
        }
    }
    nprof.n = 0;
    *ops = nprof.ops;
    nprof.ops = 0;
}

static int is_device(const void* p) {
    if (!p) return 0;
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static ncclDataType_t nccl_type(CommType t) {
    switch (t) {
    case COMM_BYTE: return ncclUint8;
    case COMM_I32: return ncclInt32;
    case COMM_I64: return ncclInt64;
    case COMM_F32: return ncclFloat32;
    case COMM_F64: return ncclFloat64;
    }
    return ncclUint8;
}
static size_t type_bytes(CommType t) {
    return t == COMM_I64 || t == COMM_F64 ? 8 : t == COMM_I32 || t == COMM_F32 ? 4 : 1;
}
static ncclRedOp_t nccl_op(CommOp op) { return op == COMM_MAX ? ncclMax : op == COMM_MIN ? ncclMin : ncclSum; }

static int check_usable(const Comm* c, char* err, size_t err_len) {
    if (!nimpl(c)->broken) return 0;
    snprintf(err, err_len, "rank %d of group '%s': the NCCL group was aborted (a pending operation was cancelled)",
             c->rank, c->name);
    return -1;
}

static int slot_get(Comm* c, size_t bytes, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (bytes > COMM_HOST_STAGE_BYTES) {
        snprintf(err, err_len, "rank %d of group '%s': a %zu-byte host buffer over NCCL (at most %d bytes are staged: "
                 "larger payloads must be device memory)", c->rank, c->name, bytes, COMM_HOST_STAGE_BYTES);
        return -1;
    }
    for (int i = 0; i < STAGE_SLOTS; i++)
        if (!n->busy[i]) {
            n->busy[i] = 1;
            return i;
        }
    snprintf(err, err_len, "rank %d of group '%s': more than %d staged host messages in flight", c->rank, c->name,
             STAGE_SLOTS);
    return -1;
}

/* A request completing with the work enqueued so far on `stream`. */
static int make_req(Comm* c, cudaStream_t stream, void* host_dst, int slot, size_t bytes, CommReq** req, char* err,
                    size_t err_len) {
    NcclComm* n = nimpl(c);
    cudaEvent_t ev = NULL;
    if (n->n_free_ev > 0) ev = n->free_ev[--n->n_free_ev];
    else CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_TRY(cudaEventRecord(ev, stream));
    CommReq* r = (CommReq*)callocCheck(1, sizeof *r);
    r->ev = ev;
    r->host_dst = host_dst;
    r->slot = slot;
    r->bytes = bytes;
    *req = r;
    return 0;
}

static void req_release(NcclComm* n, CommReq* r) {
    if (r->slot >= 0) n->busy[r->slot] = 0;
    if (r->ev) {
        if (n->n_free_ev == n->cap_free_ev) {
            n->cap_free_ev = n->cap_free_ev ? 2 * n->cap_free_ev : 64;
            n->free_ev = (cudaEvent_t*)reallocCheck(n->free_ev, (size_t)n->cap_free_ev * sizeof *n->free_ev);
        }
        n->free_ev[n->n_free_ev++] = r->ev;
    }
    free(r);
}

static int link_of(Comm* c, Link* links, int peer, const char* dir, Link** out, char* err, size_t err_len) {
    if (peer < 0 || peer >= c->size || !links[peer].nc) {
        snprintf(err, err_len, "rank %d of group '%s' has no NCCL link %s rank %d (links join every two ranks of a group of "
                 "<= 8 and ring neighbours in a larger one; device memory cannot go to another rank, host memory "
                 "goes over MPI)", c->rank, c->name, dir, peer);
        return -1;
    }
    *out = &links[peer];
    return 0;
}

/* A host-memory message to or from a rank without a link (not a ring neighbour in a group of more than 8)
 * goes over the MPI group, with its tag: every message between those two ranks does, so each
 * pair's messages stay in one ordered channel. */
static int host_p2p(Comm* c, int peer, const void* buf, Link* links) {
    return peer >= 0 && peer < c->size && peer != c->rank && !links[peer].nc && !is_device(buf);
}
static CommReq* wrap_host(CommReq* hr) {
    CommReq* r = (CommReq*)callocCheck(1, sizeof *r);
    r->slot = -1;
    r->host_req = hr;
    return r;
}

static int n_isend(Comm* c, int peer, int tag, const void* buf, size_t bytes, int sync, CommReq** req, char* err,
                   size_t err_len) {
    NcclComm* n = nimpl(c);
    Link* l;
    if (host_p2p(c, peer, buf, n->out)) {
        CommReq* hr = NULL;
        if (n->host->ops->isend(n->host, peer, tag, buf, bytes, sync, &hr, err, err_len) != 0) return -1;
        *req = wrap_host(hr);
        return 0;
    }
    (void)tag, (void)sync; /* tagless and FIFO; a send completes when its receiver has the data */
    if (check_usable(c, err, err_len) || link_of(c, n->out, peer, "to", &l, err, err_len)) return -1;
    const void* src = buf;
    int slot = -1;
    if (bytes && !is_device(buf)) {
        if ((slot = slot_get(c, bytes, err, err_len)) < 0) return -1;
        unsigned char* pin = n->pin_stage + (size_t)slot * COMM_HOST_STAGE_BYTES;
        unsigned char* dev = n->dev_stage + (size_t)slot * COMM_HOST_STAGE_BYTES;
        memcpy(pin, buf, bytes);
        CUDA_TRY(cudaMemcpyAsync(dev, pin, bytes, cudaMemcpyHostToDevice, l->stream));
        src = dev;
    }
    NCCL_PROF_TRY(l->stream, ncclSend(src, bytes, ncclUint8, 1, l->nc, l->stream));
    return make_req(c, l->stream, NULL, slot, bytes, req, err, err_len);
}

static int n_irecv(Comm* c, int peer, int tag, void* buf, size_t bytes, CommReq** req, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    Link* l;
    if (host_p2p(c, peer, buf, n->in)) {
        CommReq* hr = NULL;
        if (n->host->ops->irecv(n->host, peer, tag, buf, bytes, &hr, err, err_len) != 0) return -1;
        *req = wrap_host(hr);
        return 0;
    }
    if (check_usable(c, err, err_len) || link_of(c, n->in, peer, "from", &l, err, err_len)) return -1;
    void* dst = buf;
    void* host_dst = NULL;
    int slot = -1;
    if (bytes && !is_device(buf)) {
        if ((slot = slot_get(c, bytes, err, err_len)) < 0) return -1;
        dst = n->dev_stage + (size_t)slot * COMM_HOST_STAGE_BYTES;
        host_dst = buf;
    }
    NCCL_PROF_TRY(l->stream, ncclRecv(dst, bytes, ncclUint8, 0, l->nc, l->stream));
    if (slot >= 0)
        CUDA_TRY(cudaMemcpyAsync(n->pin_stage + (size_t)slot * COMM_HOST_STAGE_BYTES, dst, bytes,
                                 cudaMemcpyDeviceToHost, l->stream));
    return make_req(c, l->stream, host_dst, slot, bytes, req, err, err_len);
}

static int n_test(Comm* c, CommReq** req, int* done, size_t* bytes, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    CommReq* r = *req;
    *done = 0;
    if (!r->ev) { /* a host collective's request */
        if (n->host->ops->test(n->host, &r->host_req, done, bytes, err, err_len) != 0) return -1;
        if (*done) {
            free(r);
            *req = NULL;
        }
        return 0;
    }
    cudaError_t e = cudaEventQuery(r->ev);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        ncclResult_t ae = ncclSuccess;
        /* a failed peer shows as an asynchronous error of a communicator, not as an event */
        if (ncclCommGetAsyncError(n->coll, &ae) == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress)
            return nccl_fail(c, "an NCCL operation", ae, err, err_len);
        return 0;
    }
    if (e != cudaSuccess) return cuda_fail(c, "cudaEventQuery", e, err, err_len);
    if (r->host_dst) memcpy(r->host_dst, n->pin_stage + (size_t)r->slot * COMM_HOST_STAGE_BYTES, r->bytes);
    if (bytes) *bytes = r->bytes; /* NCCL delivers exactly what was posted: the FIFO header checks sizes */
    req_release(n, r);
    *req = NULL;
    *done = 1;
    return 0;
}

static void abort_all(NcclComm* n, int size) {
    for (int p = 0; p < size; p++) {
        if (n->out[p].nc) ncclCommAbort(n->out[p].nc), n->out[p].nc = NULL;
        if (n->in[p].nc) ncclCommAbort(n->in[p].nc), n->in[p].nc = NULL;
    }
    if (n->coll) ncclCommAbort(n->coll), n->coll = NULL;
    n->broken = 1;
}

static void n_cancel(Comm* c, CommReq** req) {
    NcclComm* n = nimpl(c);
    if (!*req) return;
    CommReq* r = *req;
    if (!r->ev) {
        n->host->ops->cancel(n->host, &r->host_req);
        free(r);
    } else if (cudaEventQuery(r->ev) == cudaSuccess) {
        req_release(n, r);
    } else {
        /* NCCL cannot withdraw an enqueued operation: abort the group (its event is never reused) */
        (void)cudaGetLastError();
        abort_all(n, c->size);
        if (r->slot >= 0) n->busy[r->slot] = 0;
        free(r);
    }
    *req = NULL;
}

/* Wait for the collective stream's work so far (sleeping, never spinning). */
static int coll_wait(Comm* c, const char* what, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    CommReq* r = NULL;
    if (make_req(c, n->coll_stream, NULL, -1, 0, &r, err, err_len) != 0) return -1;
    long ns = 20000;
    double t0 = rr_now(), next_warn = 30.0;
    for (;;) {
        int done = 0;
        if (n_test(c, &r, &done, NULL, err, err_len) != 0) return -1;
        if (done) return 0;
        if (rr_now() - t0 > next_warn) {
            rr_warn("rank %d has waited %.0f s in an NCCL %s over group '%s' (%d ranks): one of them is stopped or slow",
                    c->rank, rr_now() - t0, what, c->name, c->size);
            next_warn += 30.0;
        }
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 2000000) ns *= 2;
    }
}

/* ---- host-memory collectives, staged through coll_dev / coll_pin in pieces (see the top) ---- */

static int host_allreduce(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (check_usable(c, err, err_len)) return -1;
    size_t ts = type_bytes(type), per = COLL_STAGE_BYTES / ts;
    for (size_t at = 0; at < count; at += per) {
        size_t k = count - at < per ? count - at : per, bytes = k * ts;
        memcpy(n->coll_pin, (unsigned char*)buf + at * ts, bytes);
        CUDA_TRY(cudaMemcpyAsync(n->coll_dev, n->coll_pin, bytes, cudaMemcpyHostToDevice, n->coll_stream));
        NCCL_PROF_TRY(n->coll_stream, ncclAllReduce(n->coll_dev, n->coll_dev, k, nccl_type(type), nccl_op(op), n->coll, n->coll_stream));
        CUDA_TRY(cudaMemcpyAsync(n->coll_pin, n->coll_dev, bytes, cudaMemcpyDeviceToHost, n->coll_stream));
        if (coll_wait(c, "all-reduce", err, err_len) != 0) return -1;
        memcpy((unsigned char*)buf + at * ts, n->coll_pin, bytes);
    }
    return 0;
}

static int host_bcast(Comm* c, void* buf, size_t bytes, int root, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (check_usable(c, err, err_len)) return -1;
    for (size_t at = 0; at < bytes; at += COLL_STAGE_BYTES) {
        size_t k = bytes - at < COLL_STAGE_BYTES ? bytes - at : COLL_STAGE_BYTES;
        if (c->rank == root) {
            memcpy(n->coll_pin, (unsigned char*)buf + at, k);
            CUDA_TRY(cudaMemcpyAsync(n->coll_dev, n->coll_pin, k, cudaMemcpyHostToDevice, n->coll_stream));
        }
        NCCL_PROF_TRY(n->coll_stream, ncclBroadcast(n->coll_dev, n->coll_dev, k, ncclUint8, root, n->coll, n->coll_stream));
        CUDA_TRY(cudaMemcpyAsync(n->coll_pin, n->coll_dev, k, cudaMemcpyDeviceToHost, n->coll_stream));
        if (coll_wait(c, "broadcast", err, err_len) != 0) return -1;
        memcpy((unsigned char*)buf + at, n->coll_pin, k);
    }
    return 0;
}

/* recv (size x bytes, rank order) from every member's `bytes` of send, in pieces of k bytes per member:
 * the piece of send at coll_dev, the gathered pieces after it */
static int host_allgather(Comm* c, const void* send, void* recv, size_t bytes, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (check_usable(c, err, err_len)) return -1;
    size_t per = COLL_STAGE_BYTES / ((size_t)c->size + 1);
    unsigned char* all_dev = n->coll_dev + per;
    for (size_t at = 0; at < bytes; at += per) {
        size_t k = bytes - at < per ? bytes - at : per;
        memcpy(n->coll_pin, (const unsigned char*)send + at, k);
        CUDA_TRY(cudaMemcpyAsync(n->coll_dev, n->coll_pin, k, cudaMemcpyHostToDevice, n->coll_stream));
        NCCL_PROF_TRY(n->coll_stream, ncclAllGather(n->coll_dev, all_dev, k, ncclUint8, n->coll, n->coll_stream));
        CUDA_TRY(cudaMemcpyAsync(n->coll_pin + per, all_dev, k * (size_t)c->size, cudaMemcpyDeviceToHost,
                                 n->coll_stream));
        if (coll_wait(c, "all-gather", err, err_len) != 0) return -1;
        for (int r = 0; r < c->size; r++)
            memcpy((unsigned char*)recv + (size_t)r * bytes + at, n->coll_pin + per + (size_t)r * k, k);
    }
    return 0;
}

static int n_allreduce(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (!is_device(buf)) return host_allreduce(c, buf, count, type, op, err, err_len);
    if (check_usable(c, err, err_len)) return -1;
    NCCL_PROF_TRY(n->coll_stream, ncclAllReduce(buf, buf, count, nccl_type(type), nccl_op(op), n->coll, n->coll_stream));
    return coll_wait(c, "all-reduce", err, err_len);
}

static int n_iallreduce(Comm* c, void* buf, size_t count, CommType type, CommOp op, CommReq** req, char* err,
                        size_t err_len) {
    NcclComm* n = nimpl(c);
    if (!is_device(buf)) { /* a host buffer: staged, complete on return (*req NULL, as comm.h allows) */
        *req = NULL;
        return host_allreduce(c, buf, count, type, op, err, err_len);
    }
    if (check_usable(c, err, err_len)) return -1;
    NCCL_PROF_TRY(n->coll_stream, ncclAllReduce(buf, buf, count, nccl_type(type), nccl_op(op), n->coll, n->coll_stream));
    return make_req(c, n->coll_stream, NULL, -1, 0, req, err, err_len);
}

static int n_bcast(Comm* c, void* buf, size_t bytes, int root, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (!is_device(buf)) return host_bcast(c, buf, bytes, root, err, err_len);
    if (check_usable(c, err, err_len)) return -1;
    NCCL_PROF_TRY(n->coll_stream, ncclBroadcast(buf, buf, bytes, ncclUint8, root, n->coll, n->coll_stream));
    return coll_wait(c, "broadcast", err, err_len);
}

static int n_allgather(Comm* c, const void* send, void* recv, size_t bytes, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (!is_device(recv)) return host_allgather(c, send, recv, bytes, err, err_len);
    if (check_usable(c, err, err_len)) return -1;
    NCCL_PROF_TRY(n->coll_stream, ncclAllGather(send, recv, bytes, ncclUint8, n->coll, n->coll_stream));
    return coll_wait(c, "all-gather", err, err_len);
}

/* In place (comm.h): this member's segment at buf + rank x count, as NCCL's in-place reduce-scatter and
 * all-gather define it; device memory only (the distributed optimizer's blocks). */
static int dev_only(Comm* c, const void* buf, const char* what, char* err, size_t err_len) {
    if (is_device(buf)) return check_usable(c, err, err_len);
    snprintf(err, err_len, "rank %d of group '%s': a host buffer for an NCCL %s (device memory only)", c->rank, c->name,
             what);
    return -1;
}
static int n_ireduce_scatter(Comm* c, void* buf, size_t count, CommType type, CommOp op, CommReq** req, char* err,
                             size_t err_len) {
    NcclComm* n = nimpl(c);
    if (dev_only(c, buf, "reduce-scatter", err, err_len)) return -1;
    void* mine = (unsigned char*)buf + (size_t)c->rank * count * type_bytes(type);
    NCCL_PROF_TRY(n->coll_stream, ncclReduceScatter(buf, mine, count, nccl_type(type), nccl_op(op), n->coll, n->coll_stream));
    return make_req(c, n->coll_stream, NULL, -1, 0, req, err, err_len);
}
static int n_reduce_scatter(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (dev_only(c, buf, "reduce-scatter", err, err_len)) return -1;
    void* mine = (unsigned char*)buf + (size_t)c->rank * count * type_bytes(type);
    NCCL_PROF_TRY(n->coll_stream, ncclReduceScatter(buf, mine, count, nccl_type(type), nccl_op(op), n->coll, n->coll_stream));
    return coll_wait(c, "reduce-scatter", err, err_len);
}
static int n_all_gather(Comm* c, void* buf, size_t count, CommType type, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (dev_only(c, buf, "all-gather", err, err_len)) return -1;
    const void* mine = (const unsigned char*)buf + (size_t)c->rank * count * type_bytes(type);
    NCCL_PROF_TRY(n->coll_stream, ncclAllGather(mine, buf, count, nccl_type(type), n->coll, n->coll_stream));
    return coll_wait(c, "all-gather", err, err_len);
}

static int n_iall_gather(Comm* c, void* buf, size_t count, CommType type, CommReq** req, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (dev_only(c, buf, "all-gather", err, err_len)) return -1;
    const void* mine = (const unsigned char*)buf + (size_t)c->rank * count * type_bytes(type);
    NCCL_PROF_TRY(n->coll_stream, ncclAllGather(mine, buf, count, nccl_type(type), n->coll, n->coll_stream));
    return make_req(c, n->coll_stream, NULL, -1, 0, req, err, err_len);
}

/* a one-byte all-reduce: every member has reached it */
static int n_barrier(Comm* c, char* err, size_t err_len) {
    unsigned char b = 0;
    return host_allreduce(c, &b, 1, COMM_BYTE, COMM_SUM, err, err_len);
}

static int n_wait_event(Comm* c, int peer, void* event, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    if (!event) return 0;
    cudaStream_t s = n->coll_stream;
    if (peer >= 0) {
        Link* l;
        if (link_of(c, n->out, peer, "to", &l, err, err_len) != 0) return -1;
        s = l->stream;
    }
    CUDA_TRY(cudaStreamWaitEvent(s, (cudaEvent_t)event, 0));
    return 0;
}

static Comm* nccl_create(Comm* host, int links, char* err, size_t err_len);

static int n_split(Comm* c, int color, int key, Comm** out, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    Comm* h = NULL;
    if (n->host->ops->split(n->host, color, key, &h, err, err_len) != 0) return -1;
    *out = nccl_create(h, n->has_links, err, err_len);
    return *out ? 0 : -1;
}

static void n_free(Comm* c) {
    if (!c) return;
    NcclComm* n = nimpl(c);
    if (n->coll_stream) cudaStreamSynchronize(n->coll_stream);
    for (int p = 0; p < c->size && n->out; p++) {
        Link* ls[2] = {&n->out[p], &n->in[p]};
        for (int k = 0; k < 2; k++) {
            if (ls[k]->nc) ncclCommDestroy(ls[k]->nc);
            if (ls[k]->stream) cudaStreamDestroy(ls[k]->stream);
        }
    }
    if (n->coll) ncclCommDestroy(n->coll);
    if (n->coll_stream) cudaStreamDestroy(n->coll_stream);
    for (int i = 0; i < n->n_free_ev; i++) cudaEventDestroy(n->free_ev[i]);
    free(n->free_ev);
    if (n->dev_stage) cudaFree(n->dev_stage);
    if (n->pin_stage) cudaFreeHost(n->pin_stage);
    if (n->coll_dev) cudaFree(n->coll_dev);
    if (n->coll_pin) cudaFreeHost(n->coll_pin);
    free(n->out);
    free(n->in);
    if (n->host) n->host->ops->free(n->host);
    free(n);
    free(c);
}

static const CommOps comm_nccl_ops = {
    .name = "nccl",
    .isend = n_isend,
    .irecv = n_irecv,
    .test = n_test,
    .cancel = n_cancel,
    .allreduce = n_allreduce,
    .iallreduce = n_iallreduce,
    .bcast = n_bcast,
    .allgather = n_allgather,
    .barrier = n_barrier,
    .reduce_scatter = n_reduce_scatter,
    .ireduce_scatter = n_ireduce_scatter,
    .all_gather = n_all_gather,
    .iall_gather = n_iall_gather,
    .wait_event = n_wait_event,
    .split = n_split,
    .free = n_free,
};

/* Which ranks get links: every other rank in a group of at most LINK_MESH_MAX (a TP group: its leader's
 * choices go to every peer), the ring neighbours (rank +- 1 mod n) in a larger one (a pipeline's stages
 * send to their neighbours only). */
#define LINK_MESH_MAX 8
static int link_peers(int size, int me, int* peers) {
    int np = 0, mesh_max = LINK_MESH_MAX;
    const char* e = getenv("RRFP_NCCL_MESH_MAX"); /* tests/runtime/comm/test_nccl_emu.c: a ring at 4 ranks */
    if (e && *e) mesh_max = atoi(e);
    if (size <= mesh_max) {
        for (int q = 0; q < size; q++)
            if (q != me) peers[np++] = q;
        return np;
    }
    int next = (me + 1) % size, prev = (me + size - 1) % size;
    peers[np++] = next;
    if (prev != next) peers[np++] = prev;
    return np;
}

/* The communicators: the group's, then this rank's links, all initialised in one NCCL group (the
 * inits of several communicators must not wait on each other across ranks). The link p -> q is made
 * from p's unique id number q: every rank makes one id per peer, and an allgather gives each rank the
 * ids of its incoming links. */
static int nccl_init(Comm* c, char* err, size_t err_len) {
    NcclComm* n = nimpl(c);
    int size = c->size, me = c->rank;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (me == 0) NCCL_TRY(ncclGetUniqueId(&id));
    if (n->host->ops->bcast(n->host, &id, sizeof id, 0, err, err_len) != 0) return -1;
    if (!n->has_links) { /* collectives only */
        ncclResult_t r = ncclCommInitRank(&n->coll, size, id, me);
        if (r != ncclSuccess) return nccl_fail(c, "ncclCommInitRank (the group's)", r, err, err_len);
        return 0;
    }
    int* peers = (int*)mallocCheck(sizeof(int) * (size_t)size);
    int np = link_peers(size, me, peers);
    ncclUniqueId* mine = (ncclUniqueId*)callocCheck((size_t)size, sizeof(ncclUniqueId));
    ncclUniqueId* all = (ncclUniqueId*)mallocCheck(sizeof(ncclUniqueId) * (size_t)size * (size_t)size);
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < np && r == ncclSuccess; i++) r = ncclGetUniqueId(&mine[peers[i]]);
    if (r != ncclSuccess || n->host->ops->allgather(n->host, mine, all, sizeof(ncclUniqueId) * (size_t)size, err,
                                                    err_len) != 0) {
        free(peers), free(mine), free(all);
        return r != ncclSuccess ? nccl_fail(c, "ncclGetUniqueId", r, err, err_len) : -1;
    }
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < np && e == cudaSuccess; i++) {
        e = cudaStreamCreateWithFlags(&n->out[peers[i]].stream, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&n->in[peers[i]].stream, cudaStreamNonBlocking);
    }
    if (e != cudaSuccess) {
        free(peers), free(mine), free(all);
        return cuda_fail(c, "creating the NCCL links' streams", e, err, err_len);
    }
    r = ncclGroupStart();
    if (r == ncclSuccess) r = ncclCommInitRank(&n->coll, size, id, me);
    for (int i = 0; i < np && r == ncclSuccess; i++) {
        int q = peers[i];
        r = ncclCommInitRank(&n->out[q].nc, 2, mine[q], 0); /* me -> q: my id number q */
        if (r == ncclSuccess) /* q -> me: q's id number me */
            r = ncclCommInitRank(&n->in[q].nc, 2, all[(size_t)q * (size_t)size + (size_t)me], 1);
    }
    ncclResult_t r2 = ncclGroupEnd();
    free(peers), free(mine), free(all);
    if (r == ncclSuccess) r = r2;
    if (r != ncclSuccess) return nccl_fail(c, "ncclCommInitRank (the group's and its links')", r, err, err_len);
    return 0;
}

static Comm* nccl_create(Comm* host, int links, char* err, size_t err_len) {
    Comm* c = (Comm*)callocCheck(1, sizeof *c);
    NcclComm* n = (NcclComm*)callocCheck(1, sizeof *n);
    c->ops = &comm_nccl_ops;
    c->impl = n;
    c->rank = host->rank;
    c->size = host->size;
    c->tag_ub = host->tag_ub;
    c->device_memory = 1;
    snprintf(c->name, sizeof c->name, "%s", host->name);
    n->host = host;
    n->has_links = links;
    n->out = (Link*)callocCheck((size_t)c->size, sizeof(Link));
    n->in = (Link*)callocCheck((size_t)c->size, sizeof(Link));
    cudaError_t e = cudaMalloc((void**)&n->dev_stage, (size_t)STAGE_SLOTS * COMM_HOST_STAGE_BYTES);
    if (e == cudaSuccess) e = cudaMallocHost((void**)&n->pin_stage, (size_t)STAGE_SLOTS * COMM_HOST_STAGE_BYTES);
    if (e == cudaSuccess) e = cudaMalloc((void**)&n->coll_dev, COLL_STAGE_BYTES);
    if (e == cudaSuccess) e = cudaMallocHost((void**)&n->coll_pin, COLL_STAGE_BYTES);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&n->coll_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cuda_fail(c, "allocating the NCCL group's staging and stream", e, err, err_len);
        n_free(c);
        return NULL;
    }
    if (nccl_init(c, err, err_len) != 0) {
        n_free(c);
        return NULL;
    }
    return c;
}

#ifdef __cplusplus
extern "C"
#endif
    __attribute__((visibility("default"))) Comm*
    rrfp_nccl_comm_create(Comm* host, int links, char* err, size_t err_len) {
    return nccl_create(host, links, err, err_len);
}
