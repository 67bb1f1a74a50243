/* nccl_emu.cpp — NCCL emulated over MPI on emulated device memory (see nccl.h, cuda_emu.h).
 *
 * A communicator is an MPI communicator of its ranks (MPI_Comm_create_group over the world, in NCCL
 * rank order). ncclCommInitRank finds the members' MPI ranks through the rank that made the unique id
 * (which therefore must be a member). Every operation is enqueued on its CUDA stream (emu_stream_enqueue):
 * it starts when it reaches the head of the stream (a send reads the device buffer then, a receive
 * posts its MPI receive into a host buffer), and completes when its MPI request has, a receive then
 * writing the device buffer; what follows on the stream waits behind it. Point-to-point uses one MPI
 * tag, so it is FIFO per (communicator, peer), as NCCL's. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "nccl.h"

struct EmuNccl {
    MPI_Comm comm;
    int rank, size;
    ncclResult_t error; /* an asynchronous error (a message of the wrong size) */
};

struct EmuId {
    char magic[8];
    int creator; /* world rank */
    int counter;
};

static long ops_enqueued;
extern "C" long emu_nccl_ops(void) { return ops_enqueued; }

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (NCCL emulation)";
    case ncclInvalidUsage: return "invalid usage (NCCL emulation)";
    case ncclSystemError: return "system error (NCCL emulation: MPI failed)";
    case ncclRemoteError: return "remote process exited or there was a network error (NCCL emulation)";
    default: return "NCCL emulation error";
    }
}

static int world_rank(void) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    static int counter = 0;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        fprintf(stderr, "nccl-emu: ncclGetUniqueId before MPI_Init (the emulation runs over MPI)\n");
        return ncclInvalidUsage;
    }
    EmuId e;
    memset(&e, 0, sizeof e);
    memcpy(e.magic, "EMUNCCL", 8);
    e.creator = world_rank();
    e.counter = ++counter;
    if (e.counter >= 1000) {
        fprintf(stderr, "nccl-emu: more than 999 unique ids from one rank\n");
        return ncclInternalError;
    }
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &e, sizeof e);
    return ncclSuccess;
}

struct PendingInit {
    ncclComm_t* out;
    int n, rank;
    EmuId id;
};
static std::vector<PendingInit> pending;
static int group_depth;

static ncclResult_t run_inits(void) {
    std::vector<PendingInit> list;
    list.swap(pending);
    std::sort(list.begin(), list.end(), [](const PendingInit& a, const PendingInit& b) {
        return a.id.creator != b.id.creator ? a.id.creator < b.id.creator : a.id.counter < b.id.counter;
    });
    int me = world_rank();
    size_t k = list.size();
    std::vector<std::vector<int>> table(k), info_in(k);
    std::vector<int> info_out(2 * k);
    std::vector<MPI_Request> creator_recvs, rest;
    for (size_t i = 0; i < k; i++) {
        const PendingInit& p = list[i];
        int ti = 30000 + 2 * (p.id.counter % 1000), tt = ti + 1;
        table[i].assign((size_t)p.n, -1);
        if (me == p.id.creator) {
            table[i][(size_t)p.rank] = me;
            info_in[i].assign(2 * (size_t)(p.n - 1), -1);
            for (int j = 0; j < p.n - 1; j++) {
                MPI_Request r;
                MPI_Irecv(&info_in[i][2 * (size_t)j], 2, MPI_INT, MPI_ANY_SOURCE, ti, MPI_COMM_WORLD, &r);
                creator_recvs.push_back(r);
            }
        } else {
            info_out[2 * i] = p.rank, info_out[2 * i + 1] = me;
            MPI_Request r;
            MPI_Isend(&info_out[2 * i], 2, MPI_INT, p.id.creator, ti, MPI_COMM_WORLD, &r);
            rest.push_back(r);
            MPI_Irecv(table[i].data(), p.n, MPI_INT, p.id.creator, tt, MPI_COMM_WORLD, &r);
            rest.push_back(r);
        }
    }
    if (!creator_recvs.empty()) MPI_Waitall((int)creator_recvs.size(), creator_recvs.data(), MPI_STATUSES_IGNORE);
    for (size_t i = 0; i < k; i++) {
        const PendingInit& p = list[i];
        if (me != p.id.creator) continue;
        for (int j = 0; j < p.n - 1; j++) {
            int r = info_in[i][2 * (size_t)j], w = info_in[i][2 * (size_t)j + 1];
            if (r < 0 || r >= p.n || table[i][(size_t)r] >= 0) {
                fprintf(stderr, "nccl-emu: ncclCommInitRank: two members claim rank %d of %d\n", r, p.n);
                return ncclInvalidUsage;
            }
            table[i][(size_t)r] = w;
        }
        int tt = 30000 + 2 * (p.id.counter % 1000) + 1;
        for (int r = 0; r < p.n; r++) {
            if (table[i][(size_t)r] == me) continue;
            MPI_Request q;
            MPI_Isend(table[i].data(), p.n, MPI_INT, table[i][(size_t)r], tt, MPI_COMM_WORLD, &q);
            rest.push_back(q);
        }
    }
    if (!rest.empty()) MPI_Waitall((int)rest.size(), rest.data(), MPI_STATUSES_IGNORE);
    MPI_Group world;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    for (size_t i = 0; i < k; i++) {
        const PendingInit& p = list[i];
        MPI_Group g;
        MPI_Group_incl(world, p.n, table[i].data(), &g);
        MPI_Comm c;
        int rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, 30000 + 2 * (p.id.counter % 1000), &c);
        MPI_Group_free(&g);
        if (rc != MPI_SUCCESS) return ncclSystemError;
        EmuNccl* e = new EmuNccl{c, p.rank, p.n, ncclSuccess};
        int r = -1;
        MPI_Comm_rank(c, &r);
        if (r != p.rank) {
            fprintf(stderr, "nccl-emu: internal: MPI rank %d for NCCL rank %d\n", r, p.rank);
            return ncclInternalError;
        }
        *p.out = e;
    }
    MPI_Group_free(&world);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    EmuId e;
    memcpy(&e, id.internal, sizeof e);
    if (memcmp(e.magic, "EMUNCCL", 8) != 0 || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    *comm = NULL;
    pending.push_back(PendingInit{comm, nranks, rank, e});
    return group_depth ? ncclSuccess : run_inits();
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    if (group_depth <= 0) return ncclInvalidUsage;
    if (--group_depth == 0 && !pending.empty()) return run_inits();
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclSuccess;
    MPI_Comm_free(&c->comm);
    delete c;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* err) {
    *err = c ? c->error : ncclInvalidArgument;
    return ncclSuccess;
}

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclInt32: case ncclUint32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    case ncclFloat32: return 4;
    default: return 0;
    }
}
static MPI_Datatype mpi_type(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}

/* RR_EMU_COMM_DELAY (cuda_emu.h): further polls a completed receive stays pending */
static int comm_delay(void) {
    static int d = -1;
    if (d < 0) d = emu_env_count("RR_EMU_COMM_DELAY");
    return d;
}
static int delay_draw(void) {
    static uint64_t x = 0x2545F4914F6CDD1Dull;
    int d = comm_delay();
    if (!d) return 0;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return d + (int)(x % (uint64_t)(d + 1));
}

struct OpState {
    int started = 0;
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<unsigned char> host;
    int delay = 0;
    long arrived = -1; /* emu_poll_epoch() when its message was seen complete */
};

static ncclResult_t check_dev(const void* p, size_t bytes, const char* what) {
    if (bytes && !emu_in_alloc(p, bytes)) {
        fprintf(stderr, "nccl-emu: %s of %zu bytes: the buffer is not (all) device memory\n", what, bytes);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

static int test_req(OpState* st) {
    int flag = 0;
    MPI_Test(&st->req, &flag, MPI_STATUS_IGNORE);
    return flag;
}

/* ncclSend / ncclRecv's arguments: a valid peer other than this rank, a size MPI can carry, device memory. */
static ncclResult_t check_p2p(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c,
                              const char* what, size_t* bytes) {
    *bytes = count * type_size(type);
    if (!c || !type_size(type) || peer < 0 || peer >= c->size || peer == c->rank || *bytes > (size_t)INT32_MAX)
        return ncclInvalidArgument;
    return check_dev(buf, *bytes, what);
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c, cudaStream_t s) {
    size_t bytes;
    if (check_p2p(buf, count, type, peer, c, "ncclSend", &bytes) != ncclSuccess) return ncclInvalidArgument;
    auto st = std::make_shared<OpState>();
    MPI_Comm comm = c->comm;
    ops_enqueued++;
    emu_stream_enqueue(s, [=] {
        if (!st->started) {
            st->host.resize(bytes ? bytes : 1);
            emu_device_read(st->host.data(), buf, bytes);
            MPI_Isend(st->host.data(), (int)bytes, MPI_BYTE, peer, 0, comm, &st->req);
            st->started = 1;
        }
        return test_req(st.get());
    });
    return ncclSuccess;
}

ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t c, cudaStream_t s) {
    size_t bytes;
    if (check_p2p(buf, count, type, peer, c, "ncclRecv", &bytes) != ncclSuccess) return ncclInvalidArgument;
    auto st = std::make_shared<OpState>();
    MPI_Comm comm = c->comm;
    ops_enqueued++;
    emu_stream_enqueue(s, [=] {
        if (!st->started) {
            st->host.resize(bytes + 1); /* one spare byte: a longer message shows as truncation */
            if (comm_delay() && bytes) emu_device_fill_nan(buf, bytes);
            MPI_Irecv(st->host.data(), (int)bytes + 1, MPI_BYTE, peer, 0, comm, &st->req);
            st->started = 1;
            st->delay = delay_draw();
        }
        if (st->req != MPI_REQUEST_NULL) {
            int flag = 0;
            MPI_Status status;
            MPI_Test(&st->req, &flag, &status);
            if (!flag) return 0;
            int got = 0;
            MPI_Get_count(&status, MPI_BYTE, &got);
            if ((size_t)got != bytes) {
                fprintf(stderr, "nccl-emu: ncclRecv of %zu bytes from rank %d got a %d-byte send (undefined on NCCL)\n",
                        bytes, peer, got);
                c->error = ncclInvalidUsage;
            }
            st->arrived = emu_poll_epoch();
        }
        if (emu_poll_epoch() - st->arrived < st->delay) return 0;
        emu_device_write(buf, st->host.data(), bytes);
        return 1;
    });
    return ncclSuccess;
}

/* NCCL's reduction as MPI's, MPI_OP_NULL for one it does not have */
static MPI_Op mpi_op(ncclRedOp_t op) {
    return op == ncclSum ? MPI_SUM : op == ncclMax ? MPI_MAX : op == ncclMin ? MPI_MIN : op == ncclProd ? MPI_PROD : MPI_OP_NULL;
}

/* a collective on stream s: at its turn, start(st) reads its input from the device and posts one MPI request
 * (st->req) whose result lands in st->host; when that completes, the first `out` bytes of st->host are written
 * to recv */
template <class Start> static void enqueue_collective(cudaStream_t s, void* recv, size_t out, Start start) {
    auto st = std::make_shared<OpState>();
    ops_enqueued++;
    emu_stream_enqueue(s, [=] {
        if (!st->started) {
            start(st.get());
            st->started = 1;
        }
        if (!test_req(st.get())) return 0;
        emu_device_write(recv, st->host.data(), out);
        return 1;
    });
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t s) {
    size_t bytes = count * type_size(type);
    MPI_Op mop = mpi_op(op);
    if (!c || mpi_type(type) == MPI_DATATYPE_NULL || mop == MPI_OP_NULL || count > (size_t)INT32_MAX)
        return ncclInvalidArgument;
    if (check_dev(send, bytes, "ncclAllReduce") || check_dev(recv, bytes, "ncclAllReduce")) return ncclInvalidArgument;
    MPI_Comm comm = c->comm;
    enqueue_collective(s, recv, bytes, [=](OpState* st) {
        st->host.resize(bytes ? bytes : 1);
        emu_device_read(st->host.data(), send, bytes);
        MPI_Iallreduce(MPI_IN_PLACE, st->host.data(), (int)count, mpi_type(type), mop, comm, &st->req);
    });
    return ncclSuccess;
}

/* recv (count) = the reduction of every member's send segment `rank` (send: size x count); recv may be that
 * segment of send itself (NCCL's in-place form): send is read whole before recv is written. */
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t s) {
    size_t bytes = count * type_size(type);
    MPI_Op mop = mpi_op(op);
    if (!c || mpi_type(type) == MPI_DATATYPE_NULL || mop == MPI_OP_NULL || bytes * (size_t)c->size > (size_t)INT32_MAX)
        return ncclInvalidArgument;
    if (check_dev(send, bytes * (size_t)c->size, "ncclReduceScatter") || check_dev(recv, bytes, "ncclReduceScatter"))
        return ncclInvalidArgument;
    auto all = std::make_shared<std::vector<unsigned char>>();
    MPI_Comm comm = c->comm;
    size_t n = (size_t)c->size;
    enqueue_collective(s, recv, bytes, [=](OpState* st) {
        all->resize(bytes * n + 1);
        emu_device_read(all->data(), send, bytes * n);
        st->host.resize(bytes ? bytes : 1);
        MPI_Ireduce_scatter_block(all->data(), st->host.data(), (int)count, mpi_type(type), mop, comm, &st->req);
    });
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t c,
                           cudaStream_t s) {
    size_t bytes = count * type_size(type);
    if (!c || !type_size(type) || root < 0 || root >= c->size || bytes > (size_t)INT32_MAX) return ncclInvalidArgument;
    if ((c->rank == root && check_dev(send, bytes, "ncclBroadcast")) || check_dev(recv, bytes, "ncclBroadcast"))
        return ncclInvalidArgument;
    MPI_Comm comm = c->comm;
    int me = c->rank;
    enqueue_collective(s, recv, bytes, [=](OpState* st) {
        st->host.resize(bytes ? bytes : 1);
        if (me == root) emu_device_read(st->host.data(), send, bytes);
        MPI_Ibcast(st->host.data(), (int)bytes, MPI_BYTE, root, comm, &st->req);
    });
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t c,
                           cudaStream_t s) {
    size_t bytes = count * type_size(type);
    if (!c || !type_size(type) || bytes * (size_t)c->size > (size_t)INT32_MAX) return ncclInvalidArgument;
    if (check_dev(send, bytes, "ncclAllGather") || check_dev(recv, bytes * (size_t)c->size, "ncclAllGather"))
        return ncclInvalidArgument;
    auto st = std::make_shared<OpState>();
    auto mine = std::make_shared<std::vector<unsigned char>>();
    MPI_Comm comm = c->comm;
    size_t n = (size_t)c->size;
    ops_enqueued++;
    /* non-blocking as NCCL's (the distributed optimizer overlaps it with the forward); send may be recv's own
     * segment (in place): read before recv is written. RR_EMU_COMM_DELAY: recv holds NaN while in flight and
     * the completion is seen 2..4 polls late, so a reader that did not wait for it reads garbage */
    emu_stream_enqueue(s, [=] {
        if (!st->started) {
            mine->resize(bytes ? bytes : 1);
            emu_device_read(mine->data(), send, bytes);
            if (comm_delay() && bytes) emu_device_fill_nan(recv, bytes * n);
            st->host.resize(bytes * n + 1);
            MPI_Iallgather(mine->data(), (int)bytes, MPI_BYTE, st->host.data(), (int)bytes, MPI_BYTE, comm, &st->req);
            st->started = 1;
            st->delay = delay_draw();
        }
        if (st->req != MPI_REQUEST_NULL) {
            if (!test_req(st.get())) return 0;
            st->arrived = emu_poll_epoch();
        }
        if (emu_poll_epoch() - st->arrived < st->delay) return 0;
        emu_device_write(recv, st->host.data(), bytes * n);
        return 1;
    });
    return ncclSuccess;
}
