/* test_transport.c — the pipeline transport under mpirun (2..4 ranks), both wire protocols:
 *   ring:  every rank sends M variable-size messages to the next rank in a scrambled order; the next
 *          rank posted every receive ahead and checks each payload byte-exactly;
 *   sync:  paired synchronous exchange in 1F1B order between neighbours (Megatron's fixed-sync);
 *   lost:  (argument "lost") rank 0 expects a message nobody sends: it must die within the timeout
 *          with a line naming the missing message and the rank it expected it from. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"
#include "runtime/transport.h"

static size_t msg_bytes(int src, int mb) { return (size_t)(4 * (1 + (src * 7919 + mb * 104729) % 5000)); }
static unsigned char msg_byte(int src, int mb, size_t i) { return (unsigned char)(src * 31 + mb * 17 + i * 13); }

static int test_ring(TransportKind kind, int rank, int size, int M) {
    Transport* t = transport_create(kind, MPI_COMM_WORLD);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    unsigned char** in = callocCheck((size_t)M, sizeof *in);
    for (int mb = 0; mb < M; mb++) {
        in[mb] = mallocCheck(msg_bytes(prev, mb));
        memset(in[mb], 0xEE, msg_bytes(prev, mb));
        transport_post_recv(t, prev, (MsgKey){MSG_ACT, 0, mb}, in[mb], msg_bytes(prev, mb));
    }
    /* Send in a scrambled order (tagged) — the FIFO protocol must deliver by key, whatever the order. */
    for (int j = 0; j < M; j++) {
        int mb = (j * 7 + rank) % M;
        size_t n = msg_bytes(rank, mb);
        unsigned char* out = mallocCheck(n);
        for (size_t i = 0; i < n; i++) out[i] = msg_byte(rank, mb, i);
        transport_isend(t, next, (MsgKey){MSG_ACT, 0, mb}, out, n);
        memset(out, 0, n); /* buffered: the caller may reuse its buffer at once */
        free(out);
    }
    int got = 0, errors = 0;
    char* seen = callocCheck((size_t)M, 1);
    MsgKey done[16];
    while (got < M) {
        int n = transport_wait(t, done, 16, 60.0);
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
    transport_flush(t);
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
static int test_sync(TransportKind kind, int rank, int size, int M) {
    if (size < 2) return 0;
    Transport* t = transport_create(kind, MPI_COMM_WORLD);
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
                if (m > 0) transport_post_recv(t, peer, (MsgKey){MSG_GRAD, 0, m - 1}, got, sizeof got);
                transport_send_sync(t, peer, (MsgKey){MSG_ACT, 0, m}, buf, sizeof buf);
            } else {
                transport_post_recv(t, peer, (MsgKey){MSG_GRAD, 0, m - 1}, got, sizeof got);
            }
            if (m > 0) { /* B(m-1): needs the gradient */
                int n = transport_wait(t, done, 4, 60.0);
                if (n != 1 || done[0].mb != m - 1 || done[0].kind != MSG_GRAD || got[5] != (float)(-(m - 1) * 100 - 5))
                    errors++;
            }
        }
    } else { /* stage 1: F(m) then B(m) */
        for (int m = 0; m < M; m++) {
            transport_post_recv(t, peer, (MsgKey){MSG_ACT, 0, m}, got, sizeof got);
            int n = transport_wait(t, done, 4, 60.0);
            if (n != 1 || done[0].mb != m || got[7] != (float)(m * 100 + 7)) errors++;
            for (int i = 0; i < 64; i++) buf[i] = -(float)(m * 100 + i);
            transport_send_sync(t, peer, (MsgKey){MSG_GRAD, 0, m}, buf, sizeof buf);
        }
    }
    transport_free(t);
    return errors;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && !strcmp(argv[1], "lost")) {
        Transport* t = transport_create(TRANSPORT_TAGGED, MPI_COMM_WORLD);
        float x[4];
        MsgKey done[1];
        if (rank == 0) {
            transport_post_recv(t, 1, (MsgKey){MSG_GRAD, 0, 3}, x, sizeof x);
            transport_wait(t, done, 1, 2.0); /* must die: nobody sends */
            fprintf(stderr, "rank 0: transport_wait returned without a message\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        MPI_Barrier(MPI_COMM_WORLD); /* never released: rank 0 dies, mpirun ends the job */
        MPI_Finalize();
        return 0;
    }
    int errors = 0;
    for (int kind = 0; kind < 2; kind++) {
        int e1 = test_ring((TransportKind)kind, rank, size, 37);
        int e2 = test_sync((TransportKind)kind, rank, size, 9);
        if (e1 || e2)
            fprintf(stderr, "rank %d %s: ring errors %d, sync errors %d\n", rank, transport_kind_name(kind), e1, e2);
        errors += e1 + e2;
        MPI_Barrier(MPI_COMM_WORLD);
    }
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("transport: %s (%d ranks, %d errors)\n", total ? "FAIL" : "ok", size, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
