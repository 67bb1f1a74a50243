/* test_nccl_emu.c — the NCCL implementation of comm/ (runtime/comm/comm_nccl.c) on the CPU emulation of
 * CUDA and NCCL (tests/support/cuda_emu), under mpirun with 2 or more ranks. Run with RR_EMU_COMM_DELAY set
 * (tests/runtime/comm/comm.cmake: 3), so that every NCCL receive completes some polls after its message came and
 * its destination holds NaN until then.
 *   1. a receive's buffer is not there before its event: a device receive polled once reads NaN (the
 *      control: this is what a reader that skipped the event would get), then the data once test()
 *      reports it done;
 *   1b. (--compute-delay, with RR_EMU_COMPUTE_DELAY) a send must wait for its producer's event: a device send issued
 *      right after a kernel that writes its buffer, without wait_event, transmits the buffer as it was
 *      before the kernel (the control: the emulated compute stream finishes the kernel later, as a GPU
 *      does); with wait_event on the kernel's event, the kernel's result;
 *   2. the FIFO transport over the device group, ring neighbours: rank r sends M device payloads and M
 *      host notices to r + 1 and receives r - 1's, posted in the reverse order; the source buffer is
 *      overwritten right after each send (the send's pooled copy is what travels); every payload is
 *      checked exactly, when the transport reports it, and the pool stops growing;
 *   3. collectives on device memory (all-reduce, non-blocking all-reduce ordered after an event,
 *      broadcast, all-gather) and on host memory (a step's scalars): these go over NCCL too, staged
 *      through the group's device buffer in 64 KiB pieces (an all-reduce of 3 pieces, a broadcast, an
 *      all-gather, a barrier), and comm_mpi_counts must not move while they run (a host collective
 *      that fell back to the MPI group would be counted); the same on a collectives-only group
 *      (links = 0, the gradient norm's), whose point-to-point is refused;
 *   4. (4 ranks and more) a rank that is not a ring neighbour: in a group of <= 8 every two ranks are
 *      linked, so host messages and device payloads reach it over NCCL, in order, with no MPI call; in
 *      a group above the mesh limit (lowered to 2 by RRFP_NCCL_MESH_MAX) host messages go over MPI
 *      with their tags and device memory is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/transport.h"
#include "tests/support/check.h"

const Backend* backend_cuda_emu_get(char* why, size_t why_len);
Comm* rrfp_nccl_emu_comm_create(Comm* host, int links, char* err, size_t err_len);

#define N 300 /* floats per payload */
#define M 6   /* messages per direction */

static const Backend* be;

typedef struct {
    void* buf[16];
    int busy[16];
    int n;
} Pool;
static void* pool_acquire(void* ctx, size_t bytes) {
    Pool* p = ctx;
    for (int i = 0; i < p->n; i++)
        if (!p->busy[i]) return p->busy[i] = 1, p->buf[i];
    if (p->n == 16) {
        fprintf(stderr, "FAIL: send pool exhausted\n");
        exit(1);
    }
    p->buf[p->n] = be->dev->alloc(N * sizeof(float));
    p->busy[p->n] = 1;
    (void)bytes;
    return p->buf[p->n++];
}
static void pool_release(void* ctx, void* b) {
    Pool* p = ctx;
    for (int i = 0; i < p->n; i++)
        if (p->buf[i] == b) p->busy[i] = 0;
}
static void* ev;
static void* pool_copy_mark(void* ctx, void* dst, const void* src, size_t bytes) {
    (void)ctx;
    if (bytes) be->dev->copy_d2d(be, dst, src, bytes);
    be->dev->event_record(be, ev);
    return ev;
}

static float value(int from, int m, int i) { return (float)(1000 * from + 10 * m) + (float)i * 0.25f; }

int main(int argc, char** argv) {
    /* --compute-delay: the run with RR_EMU_COMPUTE_DELAY (tests/runtime/comm/comm.cmake): control 1b is required, and
     * control 1's read before the event is left out (that read is a deferred copy itself and may land
     * after the receive completed, as on a GPU) */
    int compute_delay = argc > 1 && !strcmp(argv[1], "--compute-delay");
    char err[1024], why[256];
    Comm* world = comm_mpi_world(err, sizeof err);
    if (!world) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int me = world->rank, n = world->size;
    CHECK(n >= 2, "run under mpirun -np 2 or more");
    be = backend_cuda_emu_get(why, sizeof why);
    CHECK(be != NULL, "%s", why);
    if (!be || n < 2) return 1;
    Comm* host = NULL;
    CHECK(world->ops->split(world, 0, me, &host, err, sizeof err) == 0, "%s", err);
    Comm* c = rrfp_nccl_emu_comm_create(host, 1, err, sizeof err);
    CHECK(c != NULL && c->device_memory == 1 && c->size == n && c->rank == me, "%s", err);
    if (!c) return 1;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    ev = be->dev->event_create();
    float* h = malloc(N * sizeof(float));
    float* dev = be->dev->alloc(N * sizeof(float));

    /* 1. a delayed receive is NaN until its event completes */
    {
        for (int i = 0; i < N; i++) h[i] = value(me, 99, i);
        be->dev->copy_h2d(be, dev, h, N * sizeof(float));
        float* in = be->dev->alloc(N * sizeof(float));
        be->dev->memset0(be, in, N * sizeof(float));
        be->dev->synchronize(be); /* the receive's stream does not wait for the compute stream's memset */
        CommReq *sr = NULL, *rr = NULL;
        CHECK(c->ops->isend(c, next, 0, dev, N * sizeof(float), 0, &sr, err, sizeof err) == 0, "%s", err);
        CHECK(c->ops->irecv(c, prev, 0, in, N * sizeof(float), &rr, err, sizeof err) == 0, "%s", err);
        CHECK(comm_barrier(world, err, sizeof err) == 0, "%s", err); /* every send is out */
        int done = 0;
        size_t got = 0;
        CHECK(c->ops->test(c, &rr, &done, &got, err, sizeof err) == 0, "%s", err);
        CHECK(!done, "a receive under RR_EMU_COMM_DELAY completed at its first poll (is the delay set?)");
        if (!compute_delay) {
            be->dev->copy_d2h(be, h, in, N * sizeof(float));
            int nan = 0;
            for (int i = 0; i < N; i++) nan += isnan(h[i]);
            CHECK(nan == N, "reading a receive's buffer before its event: %d of %d NaN (the control must see NaN)", nan,
                  N);
        }
        while (!done) CHECK(c->ops->test(c, &rr, &done, &got, err, sizeof err) == 0, "%s", err);
        CHECK(got == N * sizeof(float), "got %zu bytes", got);
        be->dev->copy_d2h(be, h, in, N * sizeof(float));
        int bad = 0;
        for (int i = 0; i < N; i++) bad += h[i] != value(prev, 99, i);
        CHECK(bad == 0, "after the event: %d of %d values wrong", bad, N);
        for (done = 0; !done;) CHECK(c->ops->test(c, &sr, &done, NULL, err, sizeof err) == 0, "%s", err);
        be->dev->free(in);
    }

    /* 1b. the compute stream finishes later than the host launches (RR_EMU_COMPUTE_DELAY): a send that
     * skips the wait for its producer's event reads the buffer before the producer ran */
    if (compute_delay) {
        const char* cd = getenv("RR_EMU_COMPUTE_DELAY");
        CHECK(cd && atoi(cd) > 0, "--compute-delay needs RR_EMU_COMPUTE_DELAY > 0: the control below depends on it");
        for (int i = 0; i < N; i++) h[i] = value(me, 50, i);
        be->dev->copy_h2d(be, dev, h, N * sizeof(float)); /* synchronous: dev holds v */
        float* in = be->dev->alloc(N * sizeof(float));
        for (int round = 0; round < 2; round++) {
            be->ops->scale(be, dev, 2.0f, N); /* the producer, on the compute stream */
            if (round == 1) { /* as the pipeline's sends do */
                be->dev->event_record(be, ev);
                CHECK(c->ops->wait_event(c, next, ev, err, sizeof err) == 0, "%s", err);
            }
            CommReq *sr = NULL, *rr = NULL;
            CHECK(c->ops->irecv(c, prev, 0, in, N * sizeof(float), &rr, err, sizeof err) == 0, "%s", err);
            CHECK(c->ops->isend(c, next, 0, dev, N * sizeof(float), 0, &sr, err, sizeof err) == 0, "%s", err);
            for (int done = 0; !done;) CHECK(c->ops->test(c, &rr, &done, NULL, err, sizeof err) == 0, "%s", err);
            for (int done = 0; !done;) CHECK(c->ops->test(c, &sr, &done, NULL, err, sizeof err) == 0, "%s", err);
            be->dev->copy_d2h(be, h, in, N * sizeof(float)); /* also finishes the compute stream: dev scaled */
            /* round 0 sent v (the scale had not run), round 1 waited for the second scale: 4 v */
            float f = round == 0 ? 1.0f : 4.0f;
            int match = 0;
            for (int i = 0; i < N; i++) match += h[i] == f * value(prev, 50, i);
            if (round == 0)
                CHECK(match == N, "a send without a wait for its producer's event: %d of %d values are the buffer "
                      "before the producer (the control: is RR_EMU_COMPUTE_DELAY in effect?)", match, N);
            else
                CHECK(match == N, "a send after wait_event on its producer's event: %d of %d values right", match, N);
        }
        be->dev->free(in);
    }

    /* 2. the FIFO transport with device payloads and host notices */
    {
        Transport* t = transport_create(TRANSPORT_FIFO, c);
        Pool pool = {{0}, {0}, 0};
        TransportDevice d = {&pool, pool_acquire, pool_release, pool_copy_mark};
        transport_set_device(t, &d);
        float* in[M];
        double notice[M];
        for (int m = M - 1; m >= 0; m--) {
            in[m] = be->dev->alloc(N * sizeof(float));
            CHECK(transport_post_recv(t, prev, (MsgKey){MSG_ACT, 0, m}, in[m], N * sizeof(float), err, sizeof err) == 0,
                  "%s", err);
            notice[m] = -1;
            CHECK(transport_post_recv(t, prev, (MsgKey){MSG_NOTICE_ACT, 0, m}, &notice[m], sizeof(double), err,
                                      sizeof err) == 0, "%s", err);
        }
        for (int m = 0; m < M; m++) {
            for (int i = 0; i < N; i++) h[i] = value(me, m, i);
            be->dev->copy_h2d(be, dev, h, N * sizeof(float));
            double est = 0.5 * m + me;
            CHECK(transport_isend(t, next, (MsgKey){MSG_NOTICE_ACT, 0, m}, &est, sizeof est, err, sizeof err) == 0, "%s",
                  err);
            CHECK(transport_isend_dev(t, next, (MsgKey){MSG_ACT, 0, m}, dev, N * sizeof(float), err, sizeof err) == 0,
                  "%s", err);
            be->dev->memset0(be, dev, N * sizeof(float)); /* the copy travels, not the source */
        }
        int payloads = 0, notices = 0;
        while (payloads + notices < 2 * M) {
            MsgKey k[8];
            int got = transport_wait(t, k, 8, 60, 0, err, sizeof err);
            CHECK(got > 0, "%s", err);
            if (got <= 0) break;
            for (int j = 0; j < got; j++) {
                if (k[j].kind == MSG_NOTICE_ACT) {
                    CHECK(notice[k[j].mb] == 0.5 * k[j].mb + prev, "notice %d: %g", k[j].mb, notice[k[j].mb]);
                    notices++;
                    continue;
                }
                be->dev->copy_d2h(be, h, in[k[j].mb], N * sizeof(float));
                int bad = 0;
                for (int i = 0; i < N; i++) bad += h[i] != value(prev, k[j].mb, i);
                CHECK(bad == 0, "payload %d from rank %d: %d of %d values wrong when reported", k[j].mb, prev, bad, N);
                payloads++;
            }
        }
        CHECK(transport_flush(t, 60, err, sizeof err) == 0, "%s", err);
        CHECK(pool.n <= M, "the send pool grew to %d buffers", pool.n);
        int np = pool.n;
        /* a second round reuses the pool */
        for (int m = 0; m < M; m++)
            CHECK(transport_post_recv(t, prev, (MsgKey){MSG_GRAD, 0, m}, in[m], N * sizeof(float), err, sizeof err) == 0,
                  "%s", err);
        for (int m = 0; m < M; m++) {
            for (int i = 0; i < N; i++) h[i] = -value(me, m, i);
            be->dev->copy_h2d(be, dev, h, N * sizeof(float));
            CHECK(transport_isend_dev(t, next, (MsgKey){MSG_GRAD, 0, m}, dev, N * sizeof(float), err, sizeof err) == 0,
                  "%s", err);
        }
        for (int left = M; left > 0;) {
            MsgKey k[8];
            int got = transport_wait(t, k, 8, 60, 0, err, sizeof err);
            CHECK(got > 0, "%s", err);
            if (got <= 0) break;
            for (int j = 0; j < got; j++) {
                be->dev->copy_d2h(be, h, in[k[j].mb], N * sizeof(float));
                int bad = 0;
                for (int i = 0; i < N; i++) bad += h[i] != -value(prev, k[j].mb, i);
                CHECK(bad == 0, "round 2 payload %d: %d wrong", k[j].mb, bad);
                left--;
            }
        }
        CHECK(transport_flush(t, 60, err, sizeof err) == 0, "%s", err);
        CHECK(pool.n == np, "the pool grew in the second round (%d -> %d)", np, pool.n);
        CHECK(transport_pending_recvs(t) == 0, "%d receives left", transport_pending_recvs(t));
        transport_free(t);
        for (int m = 0; m < M; m++) be->dev->free(in[m]);
        for (int i = 0; i < pool.n; i++) be->dev->free(pool.buf[i]);
        printf("rank %d: transport fifo over nccl: %d payloads, %d notices, send pool %d\n", me, payloads, notices, np);
    }

    /* 3. collectives */
    {
        for (int i = 0; i < N; i++) h[i] = (float)(me + 1) * (float)i;
        be->dev->copy_h2d(be, dev, h, N * sizeof(float));
        CHECK(c->ops->allreduce(c, dev, N, COMM_F32, COMM_SUM, err, sizeof err) == 0, "%s", err);
        be->dev->copy_d2h(be, h, dev, N * sizeof(float));
        float tot = (float)(n * (n + 1) / 2);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += h[i] != tot * (float)i;
        CHECK(bad == 0, "device all-reduce: %d wrong", bad);
        /* non-blocking, ordered after the producer's event (the DP gradient buckets' path) */
        for (int i = 0; i < N; i++) h[i] = (float)me;
        be->dev->copy_h2d(be, dev, h, N * sizeof(float));
        be->dev->event_record(be, ev);
        CHECK(c->ops->wait_event(c, -1, ev, err, sizeof err) == 0, "%s", err);
        CommReq* r = NULL;
        CHECK(c->ops->iallreduce(c, dev, N, COMM_F32, COMM_MAX, &r, err, sizeof err) == 0, "%s", err);
        for (int done = 0; !done;) CHECK(c->ops->test(c, &r, &done, NULL, err, sizeof err) == 0, "%s", err);
        be->dev->copy_d2h(be, h, dev, N * sizeof(float));
        bad = 0;
        for (int i = 0; i < N; i++) bad += h[i] != (float)(n - 1);
        CHECK(bad == 0, "device iallreduce max: %d wrong", bad);
        for (int i = 0; i < N; i++) h[i] = me == 1 ? 7.0f + (float)i : -1.0f;
        be->dev->copy_h2d(be, dev, h, N * sizeof(float));
        CHECK(c->ops->bcast(c, dev, N * sizeof(float), 1, err, sizeof err) == 0, "%s", err);
        be->dev->copy_d2h(be, h, dev, N * sizeof(float));
        bad = 0;
        for (int i = 0; i < N; i++) bad += h[i] != 7.0f + (float)i;
        CHECK(bad == 0, "device broadcast: %d wrong", bad);
        float* all = be->dev->alloc((size_t)n * N * sizeof(float));
        float* hall = malloc((size_t)n * N * sizeof(float));
        for (int i = 0; i < N; i++) h[i] = value(me, 1, i);
        be->dev->copy_h2d(be, dev, h, N * sizeof(float));
        CHECK(c->ops->allgather(c, dev, all, N * sizeof(float), err, sizeof err) == 0, "%s", err);
        be->dev->copy_d2h(be, hall, all, (size_t)n * N * sizeof(float));
        bad = 0;
        for (int q = 0; q < n; q++)
            for (int i = 0; i < N; i++) bad += hall[(size_t)q * N + i] != value(q, 1, i);
        CHECK(bad == 0, "device all-gather: %d wrong", bad);
        be->dev->free(all);
        free(hall);
    }
    /* host-memory collectives: over NCCL, no MPI call (comm_mpi_counts), pieces of 64 KiB */
    {
        long coll0, p2p0, coll1, p2p1;
        comm_mpi_counts(&coll0, &p2p0);
        double x = me + 0.5;
        CHECK(comm_allreduce(c, &x, 1, COMM_F64, COMM_SUM, err, sizeof err) == 0 && x == n * n / 2.0, "host all-reduce %g",
              x);
        enum { BIG = 3 * 8192 + 5 }; /* doubles: 3 full pieces of 64 KiB and a short one */
        double* big = malloc(BIG * sizeof(double));
        for (int i = 0; i < BIG; i++) big[i] = (double)(me + 1) * i;
        CHECK(comm_allreduce(c, big, BIG, COMM_F64, COMM_SUM, err, sizeof err) == 0, "%s", err);
        int bad = 0;
        for (int i = 0; i < BIG; i++) bad += big[i] != (double)(n * (n + 1) / 2) * i;
        CHECK(bad == 0, "host all-reduce of %d doubles in pieces: %d wrong", BIG, bad);
        int64_t mx[2] = {me, -me};
        CHECK(comm_allreduce(c, mx, 2, COMM_I64, COMM_MAX, err, sizeof err) == 0 && mx[0] == n - 1 && mx[1] == 0,
              "host all-reduce max %lld %lld", (long long)mx[0], (long long)mx[1]);
        for (int i = 0; i < BIG; i++) big[i] = me == n - 1 ? 3.0 * i : -1.0;
        CHECK(comm_bcast(c, big, BIG * sizeof(double), n - 1, err, sizeof err) == 0, "%s", err);
        bad = 0;
        for (int i = 0; i < BIG; i++) bad += big[i] != 3.0 * i;
        CHECK(bad == 0, "host broadcast in pieces: %d wrong", bad);
        enum { G = 20000 }; /* bytes per rank: more than one piece of 64 KiB / (n + 1) */
        unsigned char* mine = malloc(G);
        unsigned char* gath = malloc((size_t)n * G);
        for (int i = 0; i < G; i++) mine[i] = (unsigned char)(31 * me + i);
        CHECK(c->ops->allgather(c, mine, gath, G, err, sizeof err) == 0, "%s", err);
        bad = 0;
        for (int q = 0; q < n; q++)
            for (int i = 0; i < G; i++) bad += gath[(size_t)q * G + i] != (unsigned char)(31 * q + i);
        CHECK(bad == 0, "host all-gather in pieces: %d wrong", bad);
        CHECK(comm_barrier(c, err, sizeof err) == 0, "%s", err);
        comm_mpi_counts(&coll1, &p2p1);
        CHECK(coll1 == coll0 && p2p1 == p2p0, "host collectives on the device group used MPI: %ld collectives, %ld "
              "point-to-point", coll1 - coll0, p2p1 - p2p0);
        /* a collectives-only group (links = 0) over the same ranks: the same, and no point-to-point */
        Comm* h2 = NULL;
        CHECK(world->ops->split(world, 0, me, &h2, err, sizeof err) == 0, "%s", err);
        Comm* cc = rrfp_nccl_emu_comm_create(h2, 0, err, sizeof err);
        CHECK(cc != NULL && cc->device_memory == 1, "%s", err);
        if (cc) {
            comm_mpi_counts(&coll0, &p2p0);
            x = 1.0;
            CHECK(comm_allreduce(cc, &x, 1, COMM_F64, COMM_SUM, err, sizeof err) == 0 && x == n, "collectives-only %g", x);
            comm_mpi_counts(&coll1, &p2p1);
            CHECK(coll1 == coll0 && p2p1 == p2p0, "a collectives-only group's all-reduce used MPI");
            CommReq* r = NULL;
            CHECK(cc->ops->isend(cc, next, 0, dev, sizeof(float), 0, &r, err, sizeof err) != 0 && strstr(err, "no NCCL link"),
                  "point-to-point on a collectives-only group: %s", err);
            cc->ops->free(cc);
        }
        free(big);
        free(mine);
        free(gath);
        if (me == 0) printf("rank 0: host collectives over nccl, no MPI call\n");
    }
    /* 4 ranks and more: a rank that is not a ring neighbour (+- 2). In a group of <= 8 every two ranks
     * are linked (a TP leader's choices go to every peer): host and device messages to it go over
     * NCCL, in order (tagless FIFO), without an MPI call. */
    if (n > 3) {
        int far_to = (me + 2) % n, far_from = (me + n - 2) % n;
        long coll0, p2p0, coll1, p2p1;
        comm_mpi_counts(&coll0, &p2p0);
        int32_t out[3] = {me, 1, 2}, in[3] = {-1, -1, -1}, out2 = 100 + me, in2 = -1;
        CommReq *s1 = NULL, *s2 = NULL, *r1 = NULL, *r2 = NULL;
        CHECK(c->ops->irecv(c, far_from, 7, in, sizeof in, &r1, err, sizeof err) == 0, "%s", err);
        CHECK(c->ops->irecv(c, far_from, 8, &in2, sizeof in2, &r2, err, sizeof err) == 0, "%s", err);
        CHECK(c->ops->isend(c, far_to, 7, out, sizeof out, 0, &s1, err, sizeof err) == 0, "%s", err);
        CHECK(c->ops->isend(c, far_to, 8, &out2, sizeof out2, 0, &s2, err, sizeof err) == 0, "%s", err);
        CommReq** all[4] = {&s1, &s2, &r1, &r2};
        for (int i = 0; i < 4; i++)
            for (int done = 0; !done && *all[i];) CHECK(c->ops->test(c, all[i], &done, NULL, err, sizeof err) == 0, "%s", err);
        CHECK(in[0] == far_from && in[1] == 1 && in[2] == 2 && in2 == 100 + far_from,
              "host messages from a non-neighbour over NCCL: %d %d %d / %d", in[0], in[1], in[2], in2);
        /* device memory: far_from's values land in din */
        float* din = be->dev->alloc(N * sizeof(float));
        for (int i = 0; i < N; i++) h[i] = (float)(1000 * me + i);
        be->dev->copy_h2d(be, dev, h, N * sizeof(float));
        CommReq *sr = NULL, *rr = NULL;
        CHECK(c->ops->irecv(c, far_from, 0, din, N * sizeof(float), &rr, err, sizeof err) == 0, "%s", err);
        CHECK(c->ops->isend(c, far_to, 0, dev, N * sizeof(float), 0, &sr, err, sizeof err) == 0, "%s", err);
        CommReq** dv[2] = {&sr, &rr};
        for (int i = 0; i < 2; i++)
            for (int done = 0; !done && *dv[i];) CHECK(c->ops->test(c, dv[i], &done, NULL, err, sizeof err) == 0, "%s", err);
        be->dev->copy_d2h(be, h, din, N * sizeof(float));
        int bad = 0;
        for (int i = 0; i < N; i++) bad += h[i] != (float)(1000 * far_from + i);
        CHECK(bad == 0, "device payload from the non-neighbour %d: %d of %d wrong", far_from, bad, N);
        be->dev->free(din);
        comm_mpi_counts(&coll1, &p2p1);
        CHECK(coll1 == coll0 && p2p1 == p2p0, "messages to a non-neighbour in a group of %d used MPI: %ld "
              "point-to-point", n, p2p1 - p2p0);

        /* A group larger than the mesh limit (RRFP_NCCL_MESH_MAX lowers it to 2 here: a ring) links ring
         * neighbours only: host messages to another rank go over MPI with their tags (received in tag
         * order, not send order), and device memory to it is refused. */
        setenv("RRFP_NCCL_MESH_MAX", "2", 1);
        Comm* h3 = NULL;
        CHECK(world->ops->split(world, 0, me, &h3, err, sizeof err) == 0, "%s", err);
        Comm* ring = rrfp_nccl_emu_comm_create(h3, 1, err, sizeof err);
        unsetenv("RRFP_NCCL_MESH_MAX");
        CHECK(ring != NULL, "%s", err);
        if (ring) {
            int32_t rin[3] = {-1, -1, -1}, rin2 = -1;
            s1 = s2 = r1 = r2 = NULL;
            comm_mpi_counts(&coll0, &p2p0);
            CHECK(ring->ops->irecv(ring, far_from, 7, rin, sizeof rin, &r1, err, sizeof err) == 0, "%s", err);
            CHECK(ring->ops->irecv(ring, far_from, 8, &rin2, sizeof rin2, &r2, err, sizeof err) == 0, "%s", err);
            CHECK(ring->ops->isend(ring, far_to, 8, &out2, sizeof out2, 0, &s2, err, sizeof err) == 0, "%s", err);
            CHECK(ring->ops->isend(ring, far_to, 7, out, sizeof out, 0, &s1, err, sizeof err) == 0, "%s", err);
            for (int i = 0; i < 4; i++)
                for (int done = 0; !done && *all[i];)
                    CHECK(ring->ops->test(ring, all[i], &done, NULL, err, sizeof err) == 0, "%s", err);
            CHECK(rin[0] == far_from && rin[1] == 1 && rin[2] == 2 && rin2 == 100 + far_from,
                  "host messages from a non-neighbour over MPI: %d %d %d / %d", rin[0], rin[1], rin[2], rin2);
            comm_mpi_counts(&coll1, &p2p1);
            CHECK(p2p1 > p2p0, "a ring's host messages to a non-neighbour did not go over MPI");
            CommReq* r = NULL;
            CHECK(ring->ops->isend(ring, far_to, 0, dev, sizeof(float), 0, &r, err, sizeof err) != 0 &&
                      strstr(err, "no NCCL link"),
                  "device memory to a non-neighbour of a ring: %s", err);
            ring->ops->free(ring);
        }
    }
    be->dev->event_destroy(ev);
    be->dev->free(dev);
    free(h);
    c->ops->free(c);
    world->ops->free(world);
    comm_mpi_finalize();
    if (me == 0) printf("nccl emu: %s (%d checks, %d ranks)\n", check_failures ? "FAILED" : "ok", check_count, n);
    return check_failures ? 1 : 0;
}
