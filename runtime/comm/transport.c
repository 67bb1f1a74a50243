/* transport.c — point-to-point for the pipeline over a Comm: tagged and FIFO (NCCL-model) protocols.
 * See transport.h for the contract. Written against CommOps only, so the same protocol code runs over
 * MPI now and NCCL later. */
#define _GNU_SOURCE
#include "runtime/comm/transport.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/util.h"
#include "runtime/comm/doorbell.h"

/* FIFO protocol tags: one for headers, one for payloads (per peer, each kept in order). */
#define FIFO_TAG_HEADER 1
#define FIFO_TAG_PAYLOAD 2

/* Idle waits (idle_sleep): the longest poll interval (us); while a send of ours may need our progress,
 * for SEND_HOT_S (s) after it is posted, poll within SEND_POLL_US (us). */
#define IDLE_POLL_MAX_US 2000
#define SEND_POLL_US 200
#define SEND_HOT_S 2e-3

typedef struct {
    int32_t kind, chunk, mb, pad;
    int64_t bytes;
} FifoHeader;

typedef struct {
    int active;
    int peer;
    MsgKey key;
    void* buf;
    size_t bytes;
    int matched;   /* FIFO: header seen, payload receive posted */
    CommReq* req;  /* tagged: the receive; FIFO: the payload receive once matched */
} RecvSlot;

typedef struct {
    CommReq* req;
    void* copy;
    int dev; /* copy is a device buffer of the TransportDevice pool */
} SendSlot;

typedef struct {
    CommReq* req; /* a header receive is outstanding when not NULL */
    FifoHeader hdr;
} PeerHeader;

struct Transport {
    TransportKind kind;
    Comm* comm;
    RecvSlot* recvs;
    int n_recvs, cap_recvs;
    SendSlot* sends;
    int n_sends, cap_sends;
    PeerHeader* peers; /* FIFO: per peer */
    TransportDevice dev;  /* device payloads (dev.acquire != NULL) */
    MsgKey* completed; /* receives completed by progress() but not yet returned by poll/wait */
    int n_completed, cap_completed;
    int pending_sends; /* sends not yet complete at the last progress() */
    double send_hot_until; /* rr_now() of the last send + SEND_HOT_S */
    CommReq** sc_req;  /* scratch of progress(): the requests tested in one pass ... */
    int *sc_slot, *sc_done; /* ... their slots, and which completed */
    size_t* sc_bytes;
    int cap_scratch;
    Doorbell* bell;    /* transport_enable_doorbell: NULL = poll only */
    TransportStats stats;
};

const char* transport_kind_name(TransportKind kind) { return kind == TRANSPORT_FIFO ? "fifo" : "tagged"; }

static const char* kind_word(int kind) {
    static const char* w[MSG_KIND_COUNT] = {"activation", "gradient", "activation notice", "gradient notice",
                                            "activation ahead-notice", "gradient ahead-notice"};
    return kind >= 0 && kind < MSG_KIND_COUNT ? w[kind] : "?";
}

Transport* transport_create(TransportKind kind, Comm* comm) {
    Transport* t = callocCheck(1, sizeof *t);
    t->kind = kind;
    t->comm = comm;
    t->peers = callocCheck((size_t)comm->size, sizeof *t->peers);
    return t;
}

static int tagged_tag(const Transport* t, MsgKey k, int* tag, char* err, size_t err_len) {
    /* tags below 16 are reserved for other uses; key -> tag is a bijection below tag_ub. */
    long v = 16 + (long)k.kind + 8L * ((long)k.chunk + 64L * (long)k.mb);
    if (k.chunk < 0 || k.chunk >= 64 || v > t->comm->tag_ub) {
        snprintf(err, err_len,
                 "pipeline message key (kind %d, chunk %d, microbatch %d) does not fit in a message tag (tag_ub %d); "
                 "use fewer microbatches per step or the fifo protocol",
                 k.kind, k.chunk, k.mb, t->comm->tag_ub);
        return -1;
    }
    *tag = (int)v;
    return 0;
}

static RecvSlot* recv_slot_new(Transport* t) {
    for (int i = 0; i < t->n_recvs; i++)
        if (!t->recvs[i].active) return &t->recvs[i];
    if (t->n_recvs == t->cap_recvs) {
        t->cap_recvs = t->cap_recvs ? 2 * t->cap_recvs : 64;
        t->recvs = reallocCheck(t->recvs, (size_t)t->cap_recvs * sizeof *t->recvs);
    }
    return &t->recvs[t->n_recvs++];
}

static int fifo_post_header(Transport* t, int peer, char* err, size_t err_len) {
    PeerHeader* ph = &t->peers[peer];
    if (ph->req) return 0;
    return t->comm->ops->irecv(t->comm, peer, FIFO_TAG_HEADER, &ph->hdr, sizeof ph->hdr, &ph->req, err, err_len);
}

/* FIFO: keep a header receive posted for a peer only while some expected message from it is not yet
 * matched to a header, so that a synchronous send completes only once its receive is really posted. */
static int fifo_unmatched_from(const Transport* t, int peer) {
    for (int i = 0; i < t->n_recvs; i++)
        if (t->recvs[i].active && !t->recvs[i].matched && t->recvs[i].peer == peer) return 1;
    return 0;
}

int transport_post_recv(Transport* t, int peer, MsgKey key, void* buf, size_t bytes, char* err, size_t err_len) {
    RR_ASSERT(peer >= 0 && peer < t->comm->size && peer != t->comm->rank);
    RR_ASSERT(bytes <= (size_t)INT32_MAX);
    RecvSlot* s = recv_slot_new(t);
    memset(s, 0, sizeof *s);
    s->active = 1;
    s->peer = peer;
    s->key = key;
    s->buf = buf;
    s->bytes = bytes;
    if (t->kind == TRANSPORT_TAGGED) {
        int tag;
        s->matched = 1;
        if (tagged_tag(t, key, &tag, err, err_len) != 0 ||
            t->comm->ops->irecv(t->comm, peer, tag, buf, bytes, &s->req, err, err_len) != 0)
            return -1;
        doorbell_ring(t->bell, peer); /* a synchronous send to us waits for this receive */
        return 0;
    }
    return fifo_post_header(t, peer, err, err_len);
}

static SendSlot* send_slot_new(Transport* t) {
    for (int i = 0; i < t->n_sends; i++)
        if (!t->sends[i].req && !t->sends[i].copy) return &t->sends[i];
    if (t->n_sends == t->cap_sends) {
        t->cap_sends = t->cap_sends ? 2 * t->cap_sends : 64;
        t->sends = reallocCheck(t->sends, (size_t)t->cap_sends * sizeof *t->sends);
    }
    SendSlot* s = &t->sends[t->n_sends++];
    s->req = NULL;
    s->copy = NULL;
    s->dev = 0;
    return s;
}

static int isend_copy(Transport* t, int peer, int tag, const void* buf, size_t bytes, char* err, size_t err_len) {
    SendSlot* s = send_slot_new(t);
    s->copy = mallocCheck(bytes ? bytes : 1);
    s->dev = 0;
    memcpy(s->copy, buf, bytes);
    return t->comm->ops->isend(t->comm, peer, tag, s->copy, bytes, 0, &s->req, err, err_len);
}

/* The communication to `peer` waits for `ev` (the producer's), on the device. */
static int wait_producer(Transport* t, int peer, void* ev, char* err, size_t err_len) {
    return ev && t->comm->ops->wait_event ? t->comm->ops->wait_event(t->comm, peer, ev, err, err_len) : 0;
}

static int isend_copy_dev(Transport* t, int peer, int tag, const void* buf, size_t bytes, char* err, size_t err_len) {
    SendSlot* s = send_slot_new(t);
    s->copy = t->dev.acquire(t->dev.ctx, bytes);
    s->dev = 1;
    void* ev = t->dev.copy_mark(t->dev.ctx, s->copy, buf, bytes);
    if (wait_producer(t, peer, ev, err, err_len) != 0) return -1;
    return t->comm->ops->isend(t->comm, peer, tag, s->copy, bytes, 0, &s->req, err, err_len);
}

void transport_set_device(Transport* t, const TransportDevice* dev) {
    if (dev) t->dev = *dev;
    else memset(&t->dev, 0, sizeof t->dev);
}

static void send_slot_release(Transport* t, SendSlot* s) {
    if (s->dev && s->copy) t->dev.release(t->dev.ctx, s->copy);
    else free(s->copy);
    s->copy = NULL;
    s->dev = 0;
}

/* One message: its payload (copied from host memory, or from device memory through the pool when
 * `dev`) after a header in the FIFO protocol, or under its own tag; then the doorbell and the counts. */
static int isend_message(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, int dev, char* err,
                         size_t err_len) {
    RR_ASSERT(bytes <= (size_t)INT32_MAX);
    int (*payload)(Transport*, int, int, const void*, size_t, char*, size_t) = dev ? isend_copy_dev : isend_copy;
    if (t->kind == TRANSPORT_TAGGED) {
        int tag;
        if (tagged_tag(t, key, &tag, err, err_len) != 0 || payload(t, peer, tag, buf, bytes, err, err_len) != 0)
            return -1;
    } else {
        FifoHeader h = {key.kind, key.chunk, key.mb, 0, (int64_t)bytes};
        if (isend_copy(t, peer, FIFO_TAG_HEADER, &h, sizeof h, err, err_len) != 0 ||
            payload(t, peer, FIFO_TAG_PAYLOAD, buf, bytes, err, err_len) != 0)
            return -1;
    }
    t->pending_sends++;
    t->send_hot_until = rr_now() + SEND_HOT_S;
    doorbell_ring(t->bell, peer);
    t->stats.msgs_sent++;
    t->stats.bytes_sent += (double)bytes;
    return 0;
}

int transport_isend_dev(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, char* err, size_t err_len) {
    RR_ASSERT(t->dev.acquire);
    return isend_message(t, peer, key, buf, bytes, 1, err, err_len);
}

int transport_isend(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, char* err, size_t err_len) {
    return isend_message(t, peer, key, buf, bytes, 0, err, err_len);
}

/* Test the n requests *reqs[i] (NULL ones skipped) in one pass where the comm can (testsome: one
 * progress of the MPI library for all of them, where a test each made one per request, the bulk of an
 * idle rank's CPU time at P = 32), else one by one. done[i], bytes[i] as CommOps.testsome. */
static int test_all(Transport* t, int n, CommReq** reqs, int* done, size_t* bytes, char* err, size_t err_len) {
    if (t->comm->ops->testsome) return t->comm->ops->testsome(t->comm, n, reqs, done, bytes, err, err_len);
    for (int i = 0; i < n; i++) {
        done[i] = 0;
        if (reqs[i] && t->comm->ops->test(t->comm, &reqs[i], &done[i], bytes ? &bytes[i] : NULL, err, err_len) != 0)
            return -1;
    }
    return 0;
}

/* scratch for test_all: room for n requests */
static void scratch_reserve(Transport* t, int n) {
    if (n <= t->cap_scratch) return;
    t->cap_scratch = n > 2 * t->cap_scratch ? n : 2 * t->cap_scratch;
    t->sc_req = reallocCheck(t->sc_req, sizeof *t->sc_req * (size_t)t->cap_scratch);
    t->sc_slot = reallocCheck(t->sc_slot, sizeof *t->sc_slot * (size_t)t->cap_scratch);
    t->sc_done = reallocCheck(t->sc_done, sizeof *t->sc_done * (size_t)t->cap_scratch);
    t->sc_bytes = reallocCheck(t->sc_bytes, sizeof *t->sc_bytes * (size_t)t->cap_scratch);
}

static int reap_sends(Transport* t, int* pending, char* err, size_t err_len) {
    int n = 0, k = 0;
    scratch_reserve(t, t->n_sends);
    for (int i = 0; i < t->n_sends; i++)
        if (t->sends[i].req) t->sc_slot[k] = i, t->sc_req[k++] = t->sends[i].req;
    int rc = test_all(t, k, t->sc_req, t->sc_done, NULL, err, err_len);
    for (int j = 0; j < k; j++) t->sends[t->sc_slot[j]].req = t->sc_req[j]; /* NULL once complete (freed) */
    if (rc != 0) return -1;
    for (int j = 0; j < k; j++) {
        SendSlot* s = &t->sends[t->sc_slot[j]];
        if (t->sc_done[j]) {
            send_slot_release(t, s);
        } else {
            n++;
        }
    }
    if (pending) *pending = n;
    t->pending_sends = n;
    return 0;
}

/* FIFO: match arrived headers to expected messages and post their payload receives. */
static int fifo_match_headers(Transport* t, char* err, size_t err_len) {
    for (int p = 0; p < t->comm->size; p++) {
        PeerHeader* ph = &t->peers[p];
        while (ph->req) {
            int done = 0;
            if (t->comm->ops->test(t->comm, &ph->req, &done, NULL, err, err_len) != 0) return -1;
            if (!done) break;
            MsgKey k = {ph->hdr.kind, ph->hdr.chunk, ph->hdr.mb};
            RecvSlot* s = NULL;
            for (int i = 0; i < t->n_recvs; i++) {
                RecvSlot* c = &t->recvs[i];
                if (c->active && !c->matched && c->peer == p && c->key.kind == k.kind && c->key.chunk == k.chunk &&
                    c->key.mb == k.mb) {
                    s = c;
                    break;
                }
            }
            if (!s) {
                snprintf(err, err_len,
                         "pipeline protocol error: rank %d sent a message (%s) for chunk %d microbatch %d, which rank %d does not "
                         "expect",
                         p, kind_word(k.kind), k.chunk, k.mb, t->comm->rank);
                return -1;
            }
            if ((size_t)ph->hdr.bytes != s->bytes) {
                snprintf(err, err_len,
                         "pipeline protocol error: rank %d sent %lld bytes for chunk %d microbatch %d, rank %d expects "
                         "%zu (the ranks disagree on the microbatch plan)",
                         p, (long long)ph->hdr.bytes, k.chunk, k.mb, t->comm->rank, s->bytes);
                return -1;
            }
            s->matched = 1;
            if (t->comm->ops->irecv(t->comm, p, FIFO_TAG_PAYLOAD, s->buf, s->bytes, &s->req, err, err_len) != 0)
                return -1;
            doorbell_ring(t->bell, p); /* a synchronous payload send waits for this receive */
            if (fifo_unmatched_from(t, p) && fifo_post_header(t, p, err, err_len) != 0) return -1;
        }
    }
    return 0;
}

/* Progress everything without blocking: reap completed sends, match FIFO headers, move completed
 * receives to t->completed. Called from every waiting loop (sends included), so a rank blocked in a
 * synchronous send still answers its peers' FIFO headers. */
static int progress(Transport* t, char* err, size_t err_len) {
    if (reap_sends(t, NULL, err, err_len) != 0) return -1;
    if (t->kind == TRANSPORT_FIFO && fifo_match_headers(t, err, err_len) != 0) return -1;
    int k = 0;
    scratch_reserve(t, t->n_recvs);
    for (int i = 0; i < t->n_recvs; i++)
        if (t->recvs[i].active && t->recvs[i].matched) t->sc_slot[k] = i, t->sc_req[k++] = t->recvs[i].req;
    int rc = test_all(t, k, t->sc_req, t->sc_done, t->sc_bytes, err, err_len);
    for (int j = 0; j < k; j++) t->recvs[t->sc_slot[j]].req = t->sc_req[j]; /* NULL once complete (freed) */
    if (rc != 0) return -1;
    for (int j = 0; j < k; j++) {
        RecvSlot* s = &t->recvs[t->sc_slot[j]];
        if (!t->sc_done[j]) continue;
        size_t got = t->sc_bytes[j];
        if (got != s->bytes) {
            snprintf(err, err_len, "pipeline protocol error: from rank %d, chunk %d microbatch %d: got %zu bytes, "
                     "expected %zu", s->peer, s->key.chunk, s->key.mb, got, s->bytes);
            return -1;
        }
        s->active = 0;
        if (t->n_completed == t->cap_completed) {
            t->cap_completed = t->cap_completed ? 2 * t->cap_completed : 64;
            t->completed = reallocCheck(t->completed, (size_t)t->cap_completed * sizeof *t->completed);
        }
        t->completed[t->n_completed++] = s->key;
        doorbell_ring(t->bell, s->peer); /* the sender's request may be complete now: let it reap it */
        t->stats.msgs_recv++;
        t->stats.bytes_recv += (double)s->bytes;
    }
    return 0;
}

int transport_progress(Transport* t, char* err, size_t err_len) { return progress(t, err, err_len); }

static int drain(Transport* t, MsgKey* done, int max) {
    int n = t->n_completed < max ? t->n_completed : max;
    if (n <= 0) return 0; /* done and completed may be NULL then (memcpy's arguments must not be) */
    memcpy(done, t->completed, (size_t)n * sizeof *done);
    memmove(t->completed, t->completed + n, (size_t)(t->n_completed - n) * sizeof *done);
    t->n_completed -= n;
    return n;
}

int transport_poll(Transport* t, MsgKey* done, int max, char* err, size_t err_len) {
    if (progress(t, err, err_len) != 0) return -1;
    return drain(t, done, max);
}

/* The idle wait between two polls (transport_wait, a synchronous send, the flush): sleep `us` or until a
 * doorbell rings, whichever comes first, and return the next interval. The interval doubles from 20 us
 * up to IDLE_POLL_MAX_US: a rank never spins, and a message from a rank whose ring cannot reach it (another
 * machine, a lost ring) is found within that. A ring (a message was just posted to us) starts over at
 * 20 us, as its completion may take a few more polls (a large message's rendezvous); for SEND_HOT_S after
 * one of our own sends, while it is in flight, the interval stays within SEND_POLL_US, as a rendezvous may
 * need the sender's progress too; a receiver rings the sender back when the message has completed. */
/* Only with a doorbell: without one the waits poll as they always did (measured: the extra polls cost
 * more CPU than they gave, bench/README.md). */
static int send_hot(const Transport* t) { return t->bell && t->pending_sends > 0 && rr_now() < t->send_hot_until; }

static long idle_sleep(Transport* t, long us) {
    if (send_hot(t) && us > SEND_POLL_US) us = SEND_POLL_US;
    if (doorbell_wait(t->bell, (double)us * 1e-6) > 0) return 20;
    return us < IDLE_POLL_MAX_US ? 2 * us : IDLE_POLL_MAX_US;
}

/* "activation chunk 0 mb 3 from rank 1, ..." (at most 8) */
static void expected_list(const Transport* t, char* list, size_t n) {
    size_t off = 0;
    int shown = 0;
    list[0] = 0;
    for (int i = 0; i < t->n_recvs && shown < 8; i++) {
        const RecvSlot* s = &t->recvs[i];
        if (!s->active) continue;
        off += (size_t)snprintf(list + off, n - off, "%s%s chunk %d mb %d from rank %d", shown ? ", " : "",
                                kind_word(s->key.kind), s->key.chunk, s->key.mb, s->peer);
        if (off >= n) break;
        shown++;
    }
    if (!shown) snprintf(list, n, "nothing");
}

int transport_wait(Transport* t, MsgKey* done, int max, double timeout_s, double warn_s, char* err, size_t err_len) {
    double t0 = rr_now(), next_warn = warn_s;
    long backoff = 20;
    for (;;) {
        if (progress(t, err, err_len) != 0) return -1;
        int n = drain(t, done, max);
        if (n > 0) {
            t->stats.wait_s += rr_now() - t0;
            return n;
        }
        double waited = rr_now() - t0;
        if (warn_s > 0 && waited > next_warn) {
            char list[1024];
            expected_list(t, list, sizeof list);
            rr_warn("pipeline rank %d has waited %.0f s without any message; expecting: %s (a rank stopped or slow?)",
                    t->comm->rank, waited, list);
            next_warn += warn_s;
        }
        if (timeout_s > 0 && waited > timeout_s) {
            char list[1024];
            expected_list(t, list, sizeof list);
            snprintf(err, err_len,
                     "pipeline rank %d waited %.0f s without any message; still expecting: %s\n---> HINT: a rank "
                     "probably died or stopped; check the other ranks' output",
                     t->comm->rank, waited, list);
            return -1;
        }
        backoff = idle_sleep(t, backoff);
    }
}

int transport_sleep_until(Transport* t, double until, double slice_s, char* err, size_t err_len) {
    for (double now = rr_now(); now < until; now = rr_now()) {
        double s = until - now;
        if (s > slice_s) s = slice_s;
        if (send_hot(t) && s > SEND_POLL_US * 1e-6) s = SEND_POLL_US * 1e-6;
        doorbell_wait(t->bell, s);
        if (progress(t, err, err_len) != 0) return -1;
    }
    return 0;
}

/* Wait for request *req while progressing our own receives (so two ranks sending to each other cannot
 * deadlock on receives that we posted). */
static int wait_req(Transport* t, CommReq** req, int peer, double timeout_s, char* err, size_t err_len) {
    double t0 = rr_now();
    long backoff = 20;
    for (;;) {
        int done = 0;
        if (t->comm->ops->test(t->comm, req, &done, NULL, err, err_len) != 0) return -1;
        if (done) return 0;
        if (progress(t, err, err_len) != 0) return -1;
        if (timeout_s > 0 && rr_now() - t0 > timeout_s) {
            snprintf(err, err_len, "pipeline rank %d: rank %d did not take a message for %.0f s\n---> HINT: a rank "
                     "probably died or stopped; check the other ranks' output", t->comm->rank, peer, rr_now() - t0);
            t->comm->ops->cancel(t->comm, req);
            return -1;
        }
        backoff = idle_sleep(t, backoff);
    }
}

static int send_sync(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, int dev, double timeout_s,
                     char* err, size_t err_len) {
    double t0 = rr_now();
    RR_ASSERT(bytes <= (size_t)INT32_MAX);
    CommReq* req = NULL;
    if (dev && wait_producer(t, peer, t->dev.copy_mark(t->dev.ctx, NULL, NULL, 0), err, err_len) != 0) return -1;
    /* a synchronous send completes only when the matching receive has been posted */
    if (t->kind == TRANSPORT_TAGGED) {
        int tag;
        if (tagged_tag(t, key, &tag, err, err_len) != 0 ||
            t->comm->ops->isend(t->comm, peer, tag, buf, bytes, 1, &req, err, err_len) != 0)
            return -1;
        doorbell_ring(t->bell, peer);
    } else {
        FifoHeader h = {key.kind, key.chunk, key.mb, 0, (int64_t)bytes};
        CommReq* hreq = NULL;
        if (t->comm->ops->isend(t->comm, peer, FIFO_TAG_HEADER, &h, sizeof h, 1, &hreq, err, err_len) != 0)
            return -1;
        doorbell_ring(t->bell, peer);
        if (wait_req(t, &hreq, peer, timeout_s, err, err_len) != 0 ||
            t->comm->ops->isend(t->comm, peer, FIFO_TAG_PAYLOAD, buf, bytes, 1, &req, err, err_len) != 0)
            return -1;
        doorbell_ring(t->bell, peer);
    }
    if (wait_req(t, &req, peer, timeout_s, err, err_len) != 0) return -1;
    t->stats.msgs_sent++;
    t->stats.bytes_sent += (double)bytes;
    t->stats.wait_s += rr_now() - t0;
    return 0;
}

int transport_send_sync(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, double timeout_s, char* err,
                        size_t err_len) {
    return send_sync(t, peer, key, buf, bytes, 0, timeout_s, err, err_len);
}

int transport_send_sync_dev(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, double timeout_s,
                            char* err, size_t err_len) {
    RR_ASSERT(t->dev.acquire);
    return send_sync(t, peer, key, buf, bytes, 1, timeout_s, err, err_len);
}

int transport_flush(Transport* t, double timeout_s, char* err, size_t err_len) {
    double t0 = rr_now();
    long backoff = 20;
    for (;;) {
        int pending = 0;
        if (reap_sends(t, &pending, err, err_len) != 0) return -1;
        if (!pending) return 0;
        if (progress(t, err, err_len) != 0) return -1;
        if (timeout_s > 0 && rr_now() - t0 > timeout_s) {
            snprintf(err, err_len, "pipeline rank %d: %d sends not taken for %.0f s\n---> HINT: a rank probably died "
                     "or stopped; check the other ranks' output", t->comm->rank, pending, rr_now() - t0);
            return -1;
        }
        backoff = idle_sleep(t, backoff);
    }
}

int transport_pending_recvs(const Transport* t) {
    int n = 0;
    for (int i = 0; i < t->n_recvs; i++) n += t->recvs[i].active;
    return n + t->n_completed;
}

TransportStats transport_stats(const Transport* t) { return t->stats; }

void transport_enable_doorbell(Transport* t) {
    if (!t->bell) t->bell = doorbell_create(t->comm);
}

int transport_has_doorbell(const Transport* t) { return t->bell != NULL; }

void transport_free(Transport* t) {
    if (!t) return;
    for (int p = 0; p < t->comm->size; p++)
        if (t->peers[p].req) t->comm->ops->cancel(t->comm, &t->peers[p].req);
    for (int i = 0; i < t->n_recvs; i++)
        if (t->recvs[i].active && t->recvs[i].req) t->comm->ops->cancel(t->comm, &t->recvs[i].req);
    /* sends: give them a bounded time to drain (a dead peer must not hang the free), then cancel */
    char err[256];
    if (transport_flush(t, 5.0, err, sizeof err) != 0)
        for (int i = 0; i < t->n_sends; i++)
            if (t->sends[i].req) t->comm->ops->cancel(t->comm, &t->sends[i].req);
    for (int i = 0; i < t->n_sends; i++) send_slot_release(t, &t->sends[i]);
    free(t->recvs);
    free(t->sends);
    free(t->peers);
    free(t->completed);
    free(t->sc_req);
    free(t->sc_slot);
    free(t->sc_done);
    free(t->sc_bytes);
    doorbell_free(t->bell);
    free(t);
}
