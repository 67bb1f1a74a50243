/* test_transport.c — the pipeline transport under mpirun (2..4 ranks), both wire protocols:
 *   ring:  every rank sends M variable-size messages to the next rank in a scrambled order; the next
 *          rank posted every receive ahead and checks each payload byte-exactly;
 *   sync:  paired synchronous exchange in 1F1B order between neighbours (Megatron's fixed-sync);
 *          both with and without doorbells (transport_enable_doorbell);
 *   doorbell: each rank rings the next one's doorbell, which must receive the ring (doorbell_wait returns
 *          it rather than its 30 s timeout) and none more;
 *   lost:  (argument "lost") rank 0 expects a message nobody sends: it must die within the timeout
 *          with a line naming the missing message and the rank it expected it from. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/doorbell.h"
#include "runtime/comm/transport.h"

static Comm* world;
static char terr[1024];
/* a transport call that must succeed */
#define OK(call)                                                                                  \
    do {                                                                                          \
        if ((call) < 0) {                                                                         \
            fprintf(stderr, "rank %d: %s failed: %s\n", world->rank, #call, terr);                \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                         \
        }                                                                                         \
    } while (0)

static size_t msg_bytes(int src, int mb) { return (size_t)(4 * (1 + (src * 7919 + mb * 104729) % 5000)); }
static unsigned char msg_byte(int src, int mb, size_t i) { return (unsigned char)(src * 31 + mb * 17 + i * 13); }

static int test_ring(TransportKind kind, int bell, int rank, int size, int M) {
    Transport* t = transport_create(kind, world);
    if (bell) transport_enable_doorbell(t);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    unsigned char** in = callocCheck((size_t)M, sizeof *in);
    for (int mb = 0; mb < M; mb++) {
        in[mb] = mallocCheck(msg_bytes(prev, mb));
        memset(in[mb], 0xEE, msg_bytes(prev, mb));
        OK(transport_post_recv(t, prev, (MsgKey){MSG_ACT, 0, mb}, in[mb], msg_bytes(prev, mb), terr, sizeof terr));
    }
    /* Send in a scrambled order (tagged) — the FIFO protocol must deliver by key, whatever the order. */
    for (int j = 0; j < M; j++) {
        int mb = (j * 7 + rank) % M;
        size_t n = msg_bytes(rank, mb);
        unsigned char* out = mallocCheck(n);
        for (size_t i = 0; i < n; i++) out[i] = msg_byte(rank, mb, i);
        OK(transport_isend(t, next, (MsgKey){MSG_ACT, 0, mb}, out, n, terr, sizeof terr));
        memset(out, 0, n); /* buffered: the caller may reuse its buffer at once */
        free(out);
    }
    int got = 0, errors = 0;
    char* seen = callocCheck((size_t)M, 1);
    MsgKey done[16];
    while (got < M) {
        int n;
        OK(n = transport_wait(t, done, 16, 60.0, 0, terr, sizeof terr));
        for (int i = 0; i < n; i++) {
            int mb = done[i].mb;
            if (done[i].kind != MSG_ACT || mb < 0 || mb >= M || seen[mb]) {
                fprintf(stderr, "rank %d: bad completion key (%d,%d,%d)\n", rank, done[i].kind, done[i].chunk, mb);
                errors++;
                continue;
            }
            seen[mb] = 1;
            for (size_t b = 0; b < msg_bytes(prev, mb); b++)
                if (in[mb][b] != msg_byte(prev, mb, b)) {
                    fprintf(stderr, "rank %d: mb %d byte %zu wrong\n", rank, mb, b);
                    errors++;
                    break;
                }
            got++;
        }
    }
    if (transport_pending_recvs(t) != 0) errors++;
    OK(transport_flush(t, 60.0, terr, sizeof terr));
    TransportStats st = transport_stats(t);
    if (st.msgs_sent != M || st.msgs_recv != M) {
        fprintf(stderr, "rank %d: stats sent %ld recv %ld, expected %d\n", rank, st.msgs_sent, st.msgs_recv, M);
        errors++;
    }
    for (int mb = 0; mb < M; mb++) free(in[mb]);
    free(in);
    free(seen);
    transport_free(t);
    return errors;
}

/* 1F1B between rank r and r+1 with synchronous sends; the receiver posts each receive only after the
 * task before it, as fixed-sync does. Only pairs (0,1), (2,3) take part. */
static int test_sync(TransportKind kind, int bell, int rank, int size, int M) {
    if (size < 2) return 0;
    Transport* t = transport_create(kind, world);
    if (bell) transport_enable_doorbell(t);
    int errors = 0;
    int pair_first = (rank % 2 == 0);
    int peer = pair_first ? rank + 1 : rank - 1;
    if (peer >= size) {
        transport_free(t);
        return 0;
    }
    float buf[64], got[64];
    MsgKey done[4];
    if (pair_first) { /* stage 0: F0, then (F(m+1), B(m)) pairs, then last B */
        for (int m = 0; m <= M; m++) {
            if (m < M) { /* F(m): send activation */
                for (int i = 0; i < 64; i++) buf[i] = (float)(m * 100 + i);
                if (m > 0) OK(transport_post_recv(t, peer, (MsgKey){MSG_GRAD, 0, m - 1}, got, sizeof got, terr, sizeof terr));
                OK(transport_send_sync(t, peer, (MsgKey){MSG_ACT, 0, m}, buf, sizeof buf, 60.0, terr, sizeof terr));
            } else {
                OK(transport_post_recv(t, peer, (MsgKey){MSG_GRAD, 0, m - 1}, got, sizeof got, terr, sizeof terr));
            }
            if (m > 0) { /* B(m-1): needs the gradient */
                int n;
                OK(n = transport_wait(t, done, 4, 60.0, 0, terr, sizeof terr));
                if (n != 1 || done[0].mb != m - 1 || done[0].kind != MSG_GRAD || got[5] != (float)(-(m - 1) * 100 - 5))
                    errors++;
            }
        }
    } else { /* stage 1: F(m) then B(m) */
        for (int m = 0; m < M; m++) {
            OK(transport_post_recv(t, peer, (MsgKey){MSG_ACT, 0, m}, got, sizeof got, terr, sizeof terr));
            int n;
                OK(n = transport_wait(t, done, 4, 60.0, 0, terr, sizeof terr));
            if (n != 1 || done[0].mb != m || got[7] != (float)(m * 100 + 7)) errors++;
            for (int i = 0; i < 64; i++) buf[i] = -(float)(m * 100 + i);
            OK(transport_send_sync(t, peer, (MsgKey){MSG_GRAD, 0, m}, buf, sizeof buf, 60.0, terr, sizeof terr));
        }
    }
    transport_free(t);
    return errors;
}

/* Doorbells over the world: rank r rings r + 1 once; each rank must take exactly that ring. */
static int test_doorbell(int rank, int size) {
    if (size < 2) return 0;
    const char* env = getenv("RRFP_DOORBELL");
    int off = env && !strcmp(env, "0");
    Doorbell* d = doorbell_create(world);
    Transport* t = transport_create(TRANSPORT_TAGGED, world);
    transport_enable_doorbell(t);
    int errors = 0;
    if ((d == NULL) != off || transport_has_doorbell(t) == off) {
        fprintf(stderr, "rank %d: doorbell %s, expected %s\n", rank, d ? "made" : "not made", off ? "none" : "one");
        errors++;
    }
    transport_free(t);
    if (d) {
        MPI_Barrier(MPI_COMM_WORLD); /* every socket is bound before the first ring */
        doorbell_ring(d, (rank + 1) % size);
        int rings = doorbell_wait(d, 30.0);
        MPI_Barrier(MPI_COMM_WORLD); /* every ring was sent: nothing more may come */
        rings += doorbell_wait(d, 1e-3);
        if (rings != 1) {
            fprintf(stderr, "rank %d: took %d rings, expected 1\n", rank, rings);
            errors++;
        }
    }
    doorbell_free(d);
    return errors;
}

/* The rank grid: every layout pp x tp x dp of this world's size; each group has the members docs/parallel.md
 * "The rank grid" says (checked by exchanging world ranks inside the group), and a sum over each group equals
 * the sum of its members' world ranks computed from the coordinates alone. */
static int test_grid(void) {
    int errors = 0, size = world->size;
    for (int pp = 1; pp <= size; pp++)
        for (int tp = 1; tp <= size / pp; tp++) {
            if (size % (pp * tp)) continue;
            int dp = size / (pp * tp);
            CommGrid g;
            if (comm_grid_init(&g, world, pp, tp, dp, terr, sizeof terr) != 0) {
                fprintf(stderr, "rank %d: grid %dx%dx%d: %s\n", world->rank, pp, tp, dp, terr);
                errors++;
                continue;
            }
            Comm* groups[4] = {g.tp_group, g.dp_group, g.pipe, g.mp};
            for (int k = 0; k < 4; k++) {
                Comm* c = groups[k];
                int* ranks = callocCheck((size_t)c->size, sizeof(int));
                OK(c->ops->allgather(c, &g.rank, ranks, sizeof(int), terr, sizeof terr));
                int want_size = k == 0 ? tp : k == 1 ? dp : k == 2 ? pp : pp * tp;
                if (c->size != want_size) errors++;
                for (int i = 0; i < c->size; i++) {
                    int p, t, d;
                    comm_grid_coords(pp, tp, dp, ranks[i], &p, &t, &d);
                    /* the member i of each group is the one whose varying coordinate is i */
                    int ok = k == 0   ? (p == g.p && d == g.d && t == i)
                             : k == 1 ? (p == g.p && t == g.t && d == i)
                             : k == 2 ? (t == g.t && d == g.d && p == i)
                                      : (d == g.d && p * tp + t == i);
                    if (!ok) {
                        fprintf(stderr, "rank %d: grid %dx%dx%d group %s member %d is world rank %d\n", world->rank,
                                pp, tp, dp, c->name, i, ranks[i]);
                        errors++;
                    }
                }
                double v = g.rank, want = 0;
                for (int i = 0; i < c->size; i++) want += ranks[i];
                OK(comm_allreduce(c, &v, 1, COMM_F64, COMM_SUM, terr, sizeof terr));
                if (v != want) errors++;
                free(ranks);
            }
            comm_grid_free(&g);
        }
    /* a layout that does not match the ranks started is refused with both counts named */
    CommGrid bad;
    if (comm_grid_init(&bad, world, size + 1, 1, 1, terr, sizeof terr) == 0 || !strstr(terr, "mpirun -np")) errors++;
    return errors;
}

int main(int argc, char** argv) {
    char e0[256];
    world = comm_mpi_world(e0, sizeof e0);
    if (!world) {
        fprintf(stderr, "%s\n", e0);
        return 1;
    }
    int rank = world->rank, size = world->size;
    if (argc > 1 && !strcmp(argv[1], "crash")) {
        /* comm_mpi_world leaves the fatal signals to their default actions (Open MPI's backtrace handlers can block
         * on malloc's lock after heap corruption): checked on every rank, then rank 1 dies of SIGSEGV and mpirun must
         * end the job naming the signal while rank 0 waits in a barrier that never completes */
        const int sigs[] = {SIGABRT, SIGBUS, SIGFPE, SIGSEGV};
        for (int i = 0; i < 4; i++) {
            struct sigaction old;
            if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) {
                fprintf(stderr, "rank %d: signal %d has a handler after MPI_Init (Open MPI's backtrace handler)\n", rank,
                        sigs[i]);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        }
        printf("rank %d: fatal signals at their default actions\n", rank);
        fflush(stdout);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) raise(SIGSEGV);
        MPI_Barrier(MPI_COMM_WORLD); /* never released: rank 1 died, mpirun ends the job */
        MPI_Finalize();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "lost")) {
        Transport* t = transport_create(TRANSPORT_TAGGED, world);
        float x[4];
        MsgKey done[1];
        if (rank == 0) {
            OK(transport_post_recv(t, 1, (MsgKey){MSG_GRAD, 0, 3}, x, sizeof x, terr, sizeof terr));
            if (transport_wait(t, done, 1, 2.0, 0.5, terr, sizeof terr) >= 0) { /* must fail: nobody sends */
                fprintf(stderr, "rank 0: transport_wait returned without a message\n");
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            fprintf(stderr, "rrfp-mm: error: %s\n", terr); /* what the trainer prints, then ends the job */
            comm_abort(world, 1);
        }
        MPI_Barrier(MPI_COMM_WORLD); /* never released: rank 0 dies, mpirun ends the job */
        MPI_Finalize();
        return 0;
    }
    int errors = test_grid() + test_doorbell(rank, size);
    for (int kind = 0; kind < 2; kind++)
        for (int bell = 0; bell < 2; bell++) {
            int e1 = test_ring((TransportKind)kind, bell, rank, size, 37);
            int e2 = test_sync((TransportKind)kind, bell, rank, size, 9);
            if (e1 || e2)
                fprintf(stderr, "rank %d %s%s: ring errors %d, sync errors %d\n", rank, transport_kind_name(kind),
                        bell ? " with doorbells" : "", e1, e2);
            errors += e1 + e2;
            MPI_Barrier(MPI_COMM_WORLD);
        }
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("transport: %s (%d ranks, %d errors)\n", total ? "FAIL" : "ok", size, total);
    world->ops->free(world);
    comm_mpi_finalize();
    return total ? 1 : 0;
}
