/* transport.h — message-driven point-to-point communication between pipeline ranks, over any Comm
 * (comm.h): the protocols are written once against CommOps and run over MPI today, NCCL later.
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
 * so oversubscribed ranks do not starve the one computing. With a doorbell (transport_enable_doorbell,
 * doorbell.h) a sender also rings the receiver, which sleeps in ppoll on it instead of nanosleep and so
 * wakes when a message is posted to it rather than at the end of its back-off; a receiver rings the
 * sender back when the message has completed, so the sender reaps its send without polling for it.
 * Progress tests every pending request in one pass where the comm can (CommOps.testsome).
 *
 * Errors (a protocol mismatch, a lost peer, a communication failure) are returned: -1 with a message
 * naming the ranks and the message; the transport is then unusable and only transport_free is valid. */
#ifndef RRFP_TRANSPORT_H
#define RRFP_TRANSPORT_H

#include <stddef.h>

#include "runtime/comm/comm.h"

/* Notices (lookahead mode), a double each: MSG_NOTICE_*: the producer of that activation / gradient
 * STARTS its task, payload its duration estimate in seconds; MSG_AHEAD_*: sent once per producing
 * task, at the first notice of its own input or at its start, whichever comes first: seconds until
 * the message is expected (0 = unknown), so a prediction travels several ranks ahead of the work. */
typedef enum {
    MSG_ACT = 0,
    MSG_GRAD = 1,
    MSG_NOTICE_ACT = 2,
    MSG_NOTICE_GRAD = 3,
    MSG_AHEAD_ACT = 4,
    MSG_AHEAD_GRAD = 5,
    MSG_KIND_COUNT
} MsgKind;
typedef struct {
    int kind;  /* MsgKind */
    int chunk; /* model chunk (virtual stage) the message is FOR on the receiver */
    int mb;    /* microbatch */
} MsgKey;

typedef enum { TRANSPORT_TAGGED = 0, TRANSPORT_FIFO = 1 } TransportKind;

typedef struct Transport Transport;

/* Create over `comm` (the pipeline group; not owned). Idle until receives are posted. Can't fail. */
Transport* transport_create(TransportKind kind, Comm* comm);
void transport_free(Transport* t);
const char* transport_kind_name(TransportKind kind);

/* Collective over the transport's comm: give every rank a doorbell (doorbell.h; none for a device comm,
 * a group of one, or with RRFP_DOORBELL=0), so that posting a message (or a receive, which a synchronous
 * send waits for) wakes the peer's wait. Can't fail: without one the waits poll as before. */
void transport_enable_doorbell(Transport* t);
int transport_has_doorbell(const Transport* t);

/* Expect a message `key` of exactly `bytes` bytes from `peer`, delivered into `buf`. */
int transport_post_recv(Transport* t, int peer, MsgKey key, void* buf, size_t bytes, char* err, size_t err_len);
/* Asynchronous buffered send: copies the payload, returns at once. */
int transport_isend(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, char* err, size_t err_len);
/* Synchronous send: returns once the receiver has posted the matching receive and the data is out. A
 * receiver silent for `timeout_s` (> 0) is an error naming it. */
int transport_send_sync(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, double timeout_s, char* err,
                        size_t err_len);

/* Device payloads, for a transport over a device Comm (comm->device_memory, NCCL): the payload is
 * backend (device) memory written by work still queued on the producer's stream. A buffered send
 * copies it, on that stream, into a device buffer from the caller's pool, and the communication stream
 * waits for the copy's event (CommOps.wait_event): the host never waits for the producer. Receives
 * need nothing: post them into device buffers; a receive completes (transport_poll) when its CUDA
 * event has, so the consumer may read the buffer from then on. */
typedef struct {
    void* ctx;
    void* (*acquire)(void* ctx, size_t bytes); /* a device buffer of at least `bytes` (pool: no allocation in a step) */
    void (*release)(void* ctx, void* buf);     /* back to the pool: its send completed */
    /* enqueue dst <- src (bytes; 0: nothing to copy) on the producer's stream; return an event recorded
     * after it (NULL: complete) */
    void* (*copy_mark)(void* ctx, void* dst, const void* src, size_t bytes);
} TransportDevice;
void transport_set_device(Transport* t, const TransportDevice* dev);
/* As transport_isend / transport_send_sync for a device payload (transport_set_device first). The
 * synchronous one sends from buf itself (it returns only once the data is out). */
int transport_isend_dev(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, char* err, size_t err_len);
int transport_send_sync_dev(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, double timeout_s,
                            char* err, size_t err_len);

/* Non-blocking: progress all pending operations; store up to `max` keys of receives that completed
 * since the last call into `done`; return how many (>= 0), or -1 with a message. */
int transport_poll(Transport* t, MsgKey* done, int max, char* err, size_t err_len);
/* Non-blocking: progress pending operations (rendezvous hand-shakes of large messages, FIFO headers)
 * and keep completed receives for the next poll / wait. For a caller that waits on something else
 * between polls (replay's sleeping tasks: a device computes while the host progresses messages). */
int transport_progress(Transport* t, char* err, size_t err_len);
/* Sleep until rr_now() >= until (replay: a task's duration), waking to progress the transport whenever the
 * doorbell rings and at least every slice_s (with a doorbell, every 200 us for 2 ms after each of this rank's
 * sends while it is in flight: a large message's rendezvous may need its sender's progress), as a GPU rank's host thread
 * progresses messages while its device computes. Completed receives are kept for the next poll. Each
 * sleep is computed from `until`, so wake-ups' lateness never adds up. Returns 0, or -1 with a message. */
int transport_sleep_until(Transport* t, double until, double slice_s, char* err, size_t err_len);
/* Sleep with back-off (never spinning) until at least one receive completes, then return as
 * transport_poll. After `timeout_s` seconds without any completion: -1 with a message naming the
 * messages still expected and from which rank (a lost peer must not hang the job). Every
 * `warn_s` seconds (> 0) of waiting, a warning on stderr names them too (a stopped rank is visible
 * long before the timeout). */
int transport_wait(Transport* t, MsgKey* done, int max, double timeout_s, double warn_s, char* err, size_t err_len);
/* Wait for all outstanding sends to complete (end of step). */
int transport_flush(Transport* t, double timeout_s, char* err, size_t err_len);
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
