/* transport.h — message-driven point-to-point communication between pipeline ranks.
 *
 * Every message carries a key (kind, chunk, microbatch). A receiver posts the receive for each message
 * it expects ahead of time (transport_post_recv); a completed receive is reported by transport_poll /
 * transport_wait and marks the corresponding task ready. Sends are asynchronous and buffered (the
 * payload is copied, so the caller may reuse its buffer at once), or synchronous (transport_send_sync:
 * returns only once the receiver has posted the matching receive, as Megatron's paired exchange does).
 *
 * Two wire protocols:
 *   TRANSPORT_TAGGED: MPI tags carry the key; messages may complete in any order.
 *   TRANSPORT_FIFO:   NCCL's model — tagless, FIFO per peer. Each message is a fixed header
 *                     (kind, chunk, microbatch, bytes) followed by its payload; the receiver always has
 *                     one header receive posted per peer and posts the payload receive into the buffer
 *                     registered for that key when the header arrives. This is the GPU path's protocol
 *                     run over MPI, so it is tested on the CPU.
 *
 * Waiting never spins a core: transport_wait polls with exponential back-off sleeps (20 us .. 2 ms),
 * so oversubscribed ranks do not starve the one computing. */
#ifndef RRFP_TRANSPORT_H
#define RRFP_TRANSPORT_H

#include <mpi.h>
#include <stddef.h>

typedef enum { MSG_ACT = 0, MSG_GRAD = 1 } MsgKind;
typedef struct {
    int kind;  /* MsgKind */
    int chunk; /* model chunk (virtual stage) the message is FOR on the receiver */
    int mb;    /* microbatch */
} MsgKey;

typedef enum { TRANSPORT_TAGGED = 0, TRANSPORT_FIFO = 1 } TransportKind;

typedef struct Transport Transport;

/* Create over `comm` (the pipeline communicator). The transport is idle until receives are posted. */
Transport* transport_create(TransportKind kind, MPI_Comm comm);
void transport_free(Transport* t);
const char* transport_kind_name(TransportKind kind);
/* Parse "tagged" / "fifo"; returns -1 when unknown. */
int transport_kind_parse(const char* s);

/* Expect a message `key` of exactly `bytes` bytes from `peer`, delivered into `buf`. */
void transport_post_recv(Transport* t, int peer, MsgKey key, void* buf, size_t bytes);
/* Asynchronous buffered send: copies the payload, returns at once. */
void transport_isend(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes);
/* Synchronous send: returns once the receiver has posted the matching receive and the data is out. */
void transport_send_sync(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes);

/* Non-blocking: progress all pending operations; store up to `max` keys of receives that completed
 * since the last call into `done`; return how many. */
int transport_poll(Transport* t, MsgKey* done, int max);
/* Block (sleeping with back-off, never spinning) until at least one receive completes, then return as
 * transport_poll. Dies with a clear message after `timeout_s` seconds without any completion, naming
 * the messages still expected and from which rank (a lost peer must not hang the job). */
int transport_wait(Transport* t, MsgKey* done, int max, double timeout_s);
/* Wait for all outstanding sends to complete (end of step). */
void transport_flush(Transport* t);
/* Number of posted receives not yet returned by transport_poll / transport_wait. */
int transport_pending_recvs(const Transport* t);

/* Statistics for the step log. */
typedef struct {
    long msgs_sent, msgs_recv;
    double bytes_sent, bytes_recv;
    double wait_s; /* time spent in transport_wait / send_sync */
} TransportStats;
TransportStats transport_stats(const Transport* t);

#endif
