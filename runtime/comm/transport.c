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

/* FIFO protocol tags: one for headers, one for payloads (per peer, each kept in order). */
#define FIFO_TAG_HEADER 1
#define FIFO_TAG_PAYLOAD 2

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
        if (tagged_tag(t, key, &tag, err, err_len) != 0) return -1;
        return t->comm->ops->irecv(t->comm, peer, tag, buf, bytes, &s->req, err, err_len);
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

int transport_isend_dev(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, char* err, size_t err_len) {
    RR_ASSERT(t->dev.acquire && bytes <= (size_t)INT32_MAX);
    if (t->kind == TRANSPORT_TAGGED) {
        int tag;
        if (tagged_tag(t, key, &tag, err, err_len) != 0 || isend_copy_dev(t, peer, tag, buf, bytes, err, err_len) != 0)
            return -1;
    } else {
        FifoHeader h = {key.kind, key.chunk, key.mb, 0, (int64_t)bytes};
        if (isend_copy(t, peer, FIFO_TAG_HEADER, &h, sizeof h, err, err_len) != 0 ||
            isend_copy_dev(t, peer, FIFO_TAG_PAYLOAD, buf, bytes, err, err_len) != 0)
            return -1;
    }
    t->stats.msgs_sent++;
    t->stats.bytes_sent += (double)bytes;
    return 0;
}

int transport_isend(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes, char* err, size_t err_len) {
    RR_ASSERT(bytes <= (size_t)INT32_MAX);
    if (t->kind == TRANSPORT_TAGGED) {
        int tag;
        if (tagged_tag(t, key, &tag, err, err_len) != 0 || isend_copy(t, peer, tag, buf, bytes, err, err_len) != 0)
            return -1;
    } else {
        FifoHeader h = {key.kind, key.chunk, key.mb, 0, (int64_t)bytes};
        if (isend_copy(t, peer, FIFO_TAG_HEADER, &h, sizeof h, err, err_len) != 0 ||
            isend_copy(t, peer, FIFO_TAG_PAYLOAD, buf, bytes, err, err_len) != 0)
            return -1;
    }
    t->stats.msgs_sent++;
    t->stats.bytes_sent += (double)bytes;
    return 0;
}

static int reap_sends(Transport* t, int* pending, char* err, size_t err_len) {
    int n = 0;
    for (int i = 0; i < t->n_sends; i++) {
        SendSlot* s = &t->sends[i];
        if (!s->req) continue;
        int done = 0;
        if (t->comm->ops->test(t->comm, &s->req, &done, NULL, err, err_len) != 0) return -1;
        if (done) {
            send_slot_release(t, s);
        } else {
            n++;
        }
    }
    if (pending) *pending = n;
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
    for (int i = 0; i < t->n_recvs; i++) {
        RecvSlot* s = &t->recvs[i];
        if (!s->active || !s->matched) continue;
        int done = 0;
        size_t got = 0;
        if (t->comm->ops->test(t->comm, &s->req, &done, &got, err, err_len) != 0) return -1;
        if (!done) continue;
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
        t->stats.msgs_recv++;
        t->stats.bytes_recv += (double)s->bytes;
    }
    return 0;
}

int transport_progress(Transport* t, char* err, size_t err_len) { return progress(t, err, err_len); }

static int drain(Transport* t, MsgKey* done, int max) {
    int n = t->n_completed < max ? t->n_completed : max;
    memcpy(done, t->completed, (size_t)n * sizeof *done);
    memmove(t->completed, t->completed + n, (size_t)(t->n_completed - n) * sizeof *done);
    t->n_completed -= n;
    return n;
}

int transport_poll(Transport* t, MsgKey* done, int max, char* err, size_t err_len) {
    if (progress(t, err, err_len) != 0) return -1;
    return drain(t, done, max);
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
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
        sleep_us(backoff);
        if (backoff < 2000) backoff *= 2;
    }
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
        sleep_us(backoff);
        if (backoff < 2000) backoff *= 2;
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
    } else {
        FifoHeader h = {key.kind, key.chunk, key.mb, 0, (int64_t)bytes};
        CommReq* hreq = NULL;
        if (t->comm->ops->isend(t->comm, peer, FIFO_TAG_HEADER, &h, sizeof h, 1, &hreq, err, err_len) != 0 ||
            wait_req(t, &hreq, peer, timeout_s, err, err_len) != 0 ||
            t->comm->ops->isend(t->comm, peer, FIFO_TAG_PAYLOAD, buf, bytes, 1, &req, err, err_len) != 0)
            return -1;
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
        sleep_us(backoff);
        if (backoff < 2000) backoff *= 2;
    }
}

int transport_pending_recvs(const Transport* t) {
    int n = 0;
    for (int i = 0; i < t->n_recvs; i++) n += t->recvs[i].active;
    return n + t->n_completed;
}

TransportStats transport_stats(const Transport* t) { return t->stats; }

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
    free(t);
}
