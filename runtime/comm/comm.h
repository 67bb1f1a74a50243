/* comm.h — the one room that talks to other ranks (docs/design.md "Layout", docs/parallel.md "The rank grid"). Everything above
 * (pipeline, train, cli) sees groups of ranks (`Comm`), the rank grid, point-to-point requests and
 * collectives through the function table `CommOps`, like `Backend` for compute; only the files of
 * this folder call MPI (and, with the GPU path, NCCL).
 *
 * Errors: every call returns 0, or -1 with a message in err (a peer that died, a size mismatch); no
 * function here exits the process. comm_abort() is for runtime/cli/ alone, when one rank's failure
 * must end every rank of the job.
 *
 * The grid (Megatron's order, TP fastest): world rank = (p * dp + d) * tp + t, for pipeline stage p,
 * data-parallel replica d and tensor-parallel rank t. Groups built once at start:
 *   tp:   the tp ranks of one (p, d)            (collectives of a split layer)
 *   dp:   the dp ranks of one (p, t)            (the gradient all-reduce)
 *   pipe: the pp ranks of one (t, d), by p      (activations and gradients along the pipeline)
 *   mp:   the pp x tp ranks of one d            (the gradient norm: the "model-parallel" group) */
#ifndef RRFP_COMM_H
#define RRFP_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef enum { COMM_BYTE = 0, COMM_I32, COMM_I64, COMM_F32, COMM_F64 } CommType;
typedef enum { COMM_SUM = 0, COMM_MAX, COMM_MIN } CommOp;

typedef struct Comm Comm;
/* A pending non-blocking operation; owned by the implementation, NULL once complete. */
typedef struct CommReq CommReq;

typedef struct CommOps {
    const char* name; /* "mpi" */
    /* ---- point-to-point (non-blocking). A send copies nothing: buf must stay valid until the request
     * completes. sync = 1: completes only once the receiver has posted the matching receive (MPI's
     * Issend; Megatron's paired exchange). tag: 0 .. tag_ub (an implementation without tags, as NCCL,
     * delivers in order per peer and ignores it). */
    int (*isend)(Comm* c, int peer, int tag, const void* buf, size_t bytes, int sync, CommReq** req, char* err,
                 size_t err_len);
    int (*irecv)(Comm* c, int peer, int tag, void* buf, size_t bytes, CommReq** req, char* err, size_t err_len);
    /* *done = 1 when the request completed (it is freed and *req set to NULL; *bytes, when not NULL,
     * gets the bytes received); 0 when still pending. */
    int (*test)(Comm* c, CommReq** req, int* done, size_t* bytes, char* err, size_t err_len);
    /* Optional (NULL: call test on each). Test n requests in one progress pass (MPI_Testsome: one
     * progress of the library, where n calls of test would make n): a NULL request is skipped; a completed
     * one is freed, reqs[i] set to NULL, done[i] = 1 and bytes[i] (bytes may be NULL) the bytes received;
     * done[i] = 0 for the others. */
    int (*testsome)(Comm* c, int n, CommReq** reqs, int* done, size_t* bytes, char* err, size_t err_len);
    /* Cancel a pending request (a receive that will never match) and free it. Can't fail. */
    void (*cancel)(Comm* c, CommReq** req);
    /* ---- collectives over the whole group, in the same order on every member ---- */
    int (*allreduce)(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len);
    /* Non-blocking all-reduce (DP gradient buckets): complete it with test. */
    int (*iallreduce)(Comm* c, void* buf, size_t count, CommType type, CommOp op, CommReq** req, char* err,
                      size_t err_len);
    int (*bcast)(Comm* c, void* buf, size_t bytes, int root, char* err, size_t err_len);
    /* recv (size * bytes) gets every member's `bytes` of send, in rank order. */
    int (*allgather)(Comm* c, const void* send, void* recv, size_t bytes, char* err, size_t err_len);
    int (*barrier)(Comm* c, char* err, size_t err_len);
    /* In place over buf of size x count elements, member r's segment at buf + r x count (the distributed
     * optimizer's gradient shards and weight shards, docs/parallel.md "The distributed optimizer").
     * reduce_scatter: on return this member's segment holds the reduction (op) over the members of their
     * segments of that index; the other segments' contents are undefined. ireduce_scatter: the same,
     * non-blocking (complete it with test; a host implementation may complete it at once, *req NULL).
     * all_gather: this member's segment is sent; on return every segment holds its member's. */
    int (*reduce_scatter)(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len);
    int (*ireduce_scatter)(Comm* c, void* buf, size_t count, CommType type, CommOp op, CommReq** req, char* err,
                           size_t err_len);
    int (*all_gather)(Comm* c, void* buf, size_t count, CommType type, char* err, size_t err_len);
    /* all_gather, non-blocking (the distributed optimizer's overlapped weight gather): complete it with test;
     * buf is not read or written by the caller until then. A host implementation may complete it at once
     * (*req NULL). */
    int (*iall_gather)(Comm* c, void* buf, size_t count, CommType type, CommReq** req, char* err, size_t err_len);
    /* Device implementations (NCCL): order the next isend to `peer` (peer < 0: the next collective)
     * after `event`, a backend event (engine.h event_record) marking the work that produced its buffer:
     * the communication stream waits for it on the device, the host does not. NULL in host
     * implementations, whose buffers are complete when the call is made. */
    int (*wait_event)(Comm* c, int peer, void* event, char* err, size_t err_len);
    /* The members with the same color, ordered by key then rank (MPI_Comm_split). */
    int (*split)(Comm* c, int color, int key, Comm** out, char* err, size_t err_len);
    void (*free)(Comm* c);
} CommOps;

struct Comm {
    const CommOps* ops;
    void* impl;
    int rank, size;
    int tag_ub;     /* largest usable tag */
    char name[16];  /* "world", "tp", "dp", "pipe", "mp": for messages */
    /* 1 (NCCL): point-to-point and collectives take device memory (the CUDA backend's), completions
     * are CUDA events that test() polls; a host buffer of at most COMM_HOST_STAGE_BYTES is staged for
     * point-to-point (the FIFO headers, notices, TP choices), and a host-memory collective (a step's
     * scalars: the loss sum, the gradient norm, the cost model) is staged through device memory and goes
     * over NCCL as well. The
     * point-to-point is tagless and FIFO per peer (TRANSPORT_FIFO) between any two ranks of a group of
     * at most 8 (a TP group) and between ring neighbours (rank +- 1) of a larger one; to any other rank
     * only host memory goes, over MPI with its tag. 0: host memory only (MPI, self). */
    int device_memory;
};
#define COMM_HOST_STAGE_BYTES 64

/* ---- the MPI implementation (comm_mpi.c) ---- */
/* Initialise MPI (once per process; a process started without mpirun is a world of one) and return
 * the world group. Returns NULL with a message when MPI cannot start. */
Comm* comm_mpi_world(char* err, size_t err_len);
/* Finalise MPI after every Comm is freed (no-op when comm_mpi_world was never called). */
void comm_mpi_finalize(void);
/* End every rank of the job now with `code` (runtime/cli/ only: one rank's failure ends the job). */
void comm_abort(Comm* world, int code);
/* Blocking collectives (allreduce, bcast, allgather, barrier) warn on stderr every warn_s seconds
 * (<= 0: never) they wait, naming the rank and the group: a stopped rank is seen (default 30). */
void comm_set_stall_warn(double warn_s);
/* A group of one process with no MPI at all (tests, the one-process trainer). */
Comm* comm_self(void);

/* ---- the NCCL implementation (comm_nccl.c, in librrfp-nccl.so opened on first use) ---- */
/* A device group over the same ranks as `host` (an MPI group; the device group owns it from then on,
 * also on failure), collective over host: an ncclUniqueId broadcast over host makes the group's
 * communicator (collectives), and with links = 1 for each other rank of a group of at most 8 (for each
 * ring neighbour of a larger one) one communicator per direction
 * (this rank sends only on its outgoing links and receives only on its incoming ones, so a receive
 * posted ahead never blocks a send); links = 0: collectives only (point-to-point is refused). Host-memory
 * collectives go over NCCL too (staged through a device buffer made here), so that after creation MPI
 * carries no step's traffic. The CUDA backend must be initialised (its device current) first. Returns
 * NULL with a message where NCCL cannot be had (a build without it, no device, an init failure). */
Comm* comm_nccl_create(Comm* host, int links, char* err, size_t err_len);
/* runtime.profile's `communication` kind: comm_nccl_profile(1) times every NCCL operation of this process
 * from then on (two CUDA events on its stream); comm_nccl_profile_take waits for them and returns the
 * GPU milliseconds and the operations since the last take. No-ops (0, 0) where NCCL was never loaded. */
void comm_nccl_profile(int on);
void comm_nccl_profile_take(double* ms, long* ops);

/* ---- the rank grid ---- */
typedef struct {
    int pp, tp, dp;   /* layout; world size = pp * tp * dp */
    int rank;         /* world rank */
    int p, t, d;      /* this rank's coordinates */
    Comm* world;      /* not owned */
    Comm *tp_group, *dp_group, *pipe, *mp;
} CommGrid;

/* Pure arithmetic of the layout (no communication): coordinates of world rank `rank`, and back. */
void comm_grid_coords(int pp, int tp, int dp, int rank, int* p, int* t, int* d);
int comm_grid_rank(int pp, int tp, int dp, int p, int t, int d);

/* Build the grid's groups over `world`, whose size must be pp * tp * dp (the message says what mpirun
 * started and what the layout needs). Collective over world. Returns 0, or -1 with a message. */
int comm_grid_init(CommGrid* g, Comm* world, int pp, int tp, int dp, char* err, size_t err_len);
void comm_grid_free(CommGrid* g);
/* Replace the grid's pipe, dp and tp groups of more than one rank by device groups over them, and the mp
 * group (the gradient norm's scalar) by a collectives-only one, so that no step uses MPI. Collective
 * over the world. */
int comm_grid_use_nccl(CommGrid* g, char* err, size_t err_len);
/* The grid's transport by runtime.comm's name: "mpi" keeps the groups as built, "nccl" replaces them by
 * device groups (comm_grid_use_nccl). Collective over the world. Returns 0, or -1 with a message (an unknown
 * name, or the device groups' failure), the grid then freed. */
int comm_grid_use_transport(CommGrid* g, const char* transport, char* err, size_t err_len);
/* runtime.profile's `communication` kind over the grid: on = 1 times every operation of its device groups
 * from then on; take waits for them and returns the GPU milliseconds and the operations since the last
 * take ((0, 0) when the grid has no device group: host transports are timed with the host). */
void comm_grid_profile(const CommGrid* g, int on);
void comm_grid_profile_take(const CommGrid* g, double* ms, long* ops);
/* An all-reduce over every rank of the job (the stop flag at a step end): the world group; with device
 * groups (comm_grid_use_nccl) over mp and then dp, which together span the world, so that it travels
 * over NCCL. Collective over the world. Returns 0, or -1 with a message. */
int comm_grid_allreduce_all(CommGrid* g, void* buf, size_t count, CommType type, CommOp op, char* err, size_t err_len);
/* Calls into MPI made through the MPI groups so far (comm_mpi.c): collectives (all-reduce, broadcast,
 * all-gather, barrier) and point-to-point operations (sends and receives posted). Tests read them
 * around a step: with runtime.comm = nccl a step must use none. */
void comm_mpi_counts(long* collectives, long* p2p);

/* Convenience wrappers over c->ops. */
static inline int comm_allreduce(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err,
                                 size_t err_len) {
    return c->size == 1 ? 0 : c->ops->allreduce(c, buf, count, type, op, err, err_len);
}
static inline int comm_bcast(Comm* c, void* buf, size_t bytes, int root, char* err, size_t err_len) {
    return c->size == 1 ? 0 : c->ops->bcast(c, buf, bytes, root, err, err_len);
}
static inline int comm_barrier(Comm* c, char* err, size_t err_len) {
    return c->size == 1 ? 0 : c->ops->barrier(c, err, err_len);
}
static inline int comm_reduce_scatter(Comm* c, void* buf, size_t count, CommType type, CommOp op, char* err,
                                      size_t err_len) {
    return c->size == 1 ? 0 : c->ops->reduce_scatter(c, buf, count, type, op, err, err_len);
}
static inline int comm_all_gather(Comm* c, void* buf, size_t count, CommType type, char* err, size_t err_len) {
    return c->size == 1 ? 0 : c->ops->all_gather(c, buf, count, type, err, err_len);
}
size_t comm_type_size(CommType t);

#endif
