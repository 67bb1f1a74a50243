/* transport.c — MPI point-to-point for the pipeline: tagged and FIFO (NCCL-model) protocols.
 * See transport.h for the contract. */
#define _GNU_SOURCE
#include "runtime/transport.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/util.h"

#define mpiCheck(x) mpi_check((x), #x, __FILE__, __LINE__)
static void mpi_check(int rc, const char* what, const char* file, int line) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    rr_die("MPI call failed at %s:%d: %s: %s", file, line, what, msg);
}

/* FIFO protocol tags: one for headers, one for payloads (per peer, MPI keeps each in order). */
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
    int matched;     /* FIFO: header seen, payload receive posted */
    MPI_Request req; /* tagged: the receive; FIFO: the payload receive once matched */
} RecvSlot;

typedef struct {
    MPI_Request req;
    void* copy;
} SendSlot;

typedef struct {
    int posted; /* a header receive is outstanding */
    MPI_Request req;
    FifoHeader hdr;
} PeerHeader;

struct Transport {
    TransportKind kind;
    MPI_Comm comm;
    int rank, size;
    int tag_ub;
    RecvSlot* recvs;
    int n_recvs, cap_recvs;
    SendSlot* sends;
    int n_sends, cap_sends;
    PeerHeader* peers; /* FIFO: per peer */
    MsgKey* completed; /* receives completed by progress() but not yet returned by poll/wait */
    int n_completed, cap_completed;
    TransportStats stats;
};

const char* transport_kind_name(TransportKind kind) { return kind == TRANSPORT_FIFO ? "fifo" : "tagged"; }

int transport_kind_parse(const char* s) {
    if (!strcmp(s, "tagged") || !strcmp(s, "mpi")) return TRANSPORT_TAGGED;
    if (!strcmp(s, "fifo")) return TRANSPORT_FIFO;
    return -1;
}

Transport* transport_create(TransportKind kind, MPI_Comm comm) {
    Transport* t = callocCheck(1, sizeof *t);
    t->kind = kind;
    t->comm = comm;
    mpiCheck(MPI_Comm_rank(comm, &t->rank));
    mpiCheck(MPI_Comm_size(comm, &t->size));
    int flag = 0;
    int* ub = NULL;
    mpiCheck(MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag));
    t->tag_ub = flag ? *ub : 32767;
    t->peers = callocCheck((size_t)t->size, sizeof *t->peers);
    return t;
}

static int tagged_tag(const Transport* t, MsgKey k) {
    /* 3 tags below are reserved for other uses; key -> tag is a bijection below tag_ub. */
    long tag = 16 + (long)k.kind + 2L * ((long)k.chunk + 64L * (long)k.mb);
    if (k.chunk < 0 || k.chunk >= 64 || tag > t->tag_ub)
        rr_die("pipeline message key (kind %d, chunk %d, microbatch %d) does not fit in an MPI tag (MPI_TAG_UB %d)",
               k.kind, k.chunk, k.mb, t->tag_ub);
    return (int)tag;
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

static void fifo_post_header(Transport* t, int peer) {
    PeerHeader* ph = &t->peers[peer];
    if (ph->posted) return;
    mpiCheck(MPI_Irecv(&ph->hdr, (int)sizeof ph->hdr, MPI_BYTE, peer, FIFO_TAG_HEADER, t->comm, &ph->req));
    ph->posted = 1;
}

/* FIFO: keep a header receive posted for a peer only while some expected message from it is not yet
 * matched to a header, so that a synchronous send completes only once its receive is really posted. */
static int fifo_unmatched_from(const Transport* t, int peer) {
    for (int i = 0; i < t->n_recvs; i++)
        if (t->recvs[i].active && !t->recvs[i].matched && t->recvs[i].peer == peer) return 1;
    return 0;
}

void transport_post_recv(Transport* t, int peer, MsgKey key, void* buf, size_t bytes) {
    RR_ASSERT(peer >= 0 && peer < t->size && peer != t->rank);
    RR_ASSERT(bytes <= (size_t)INT32_MAX);
    RecvSlot* s = recv_slot_new(t);
    memset(s, 0, sizeof *s);
    s->active = 1;
    s->peer = peer;
    s->key = key;
    s->buf = buf;
    s->bytes = bytes;
    s->req = MPI_REQUEST_NULL;
    if (t->kind == TRANSPORT_TAGGED) {
        s->matched = 1;
        mpiCheck(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tagged_tag(t, key), t->comm, &s->req));
    } else {
        fifo_post_header(t, peer);
    }
}

static SendSlot* send_slot_new(Transport* t) {
    for (int i = 0; i < t->n_sends; i++)
        if (t->sends[i].req == MPI_REQUEST_NULL && !t->sends[i].copy) return &t->sends[i];
    if (t->n_sends == t->cap_sends) {
        t->cap_sends = t->cap_sends ? 2 * t->cap_sends : 64;
        t->sends = reallocCheck(t->sends, (size_t)t->cap_sends * sizeof *t->sends);
    }
    SendSlot* s = &t->sends[t->n_sends++];
    s->req = MPI_REQUEST_NULL;
    s->copy = NULL;
    return s;
}

static void isend_copy(Transport* t, int peer, int tag, const void* buf, size_t bytes) {
    SendSlot* s = send_slot_new(t);
    s->copy = mallocCheck(bytes);
    memcpy(s->copy, buf, bytes);
    mpiCheck(MPI_Isend(s->copy, (int)bytes, MPI_BYTE, peer, tag, t->comm, &s->req));
}

void transport_isend(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes) {
    RR_ASSERT(bytes <= (size_t)INT32_MAX);
    if (t->kind == TRANSPORT_TAGGED) {
        isend_copy(t, peer, tagged_tag(t, key), buf, bytes);
    } else {
        FifoHeader h = {key.kind, key.chunk, key.mb, 0, (int64_t)bytes};
        isend_copy(t, peer, FIFO_TAG_HEADER, &h, sizeof h);
        isend_copy(t, peer, FIFO_TAG_PAYLOAD, buf, bytes);
    }
    t->stats.msgs_sent++;
    t->stats.bytes_sent += (double)bytes;
}

/* Progress everything without blocking: reap completed sends, match FIFO headers, move completed
 * receives to t->completed. Called from every waiting loop (sends included), so a rank blocked in a
 * synchronous send still answers its peers' FIFO headers. */
static void progress(Transport* t) {
    int flag = 0;
    for (int i = 0; i < t->n_sends; i++) {
        SendSlot* s = &t->sends[i];
        if (s->req == MPI_REQUEST_NULL) continue;
        mpiCheck(MPI_Test(&s->req, &flag, MPI_STATUS_IGNORE));
        if (flag) {
            free(s->copy);
            s->copy = NULL;
        }
    }
    if (t->kind == TRANSPORT_FIFO) {
        for (int p = 0; p < t->size; p++) {
            PeerHeader* ph = &t->peers[p];
            while (ph->posted) {
                mpiCheck(MPI_Test(&ph->req, &flag, MPI_STATUS_IGNORE));
                if (!flag) break;
                ph->posted = 0;
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
                if (!s)
                    rr_die("pipeline protocol error: rank %d sent %s for chunk %d microbatch %d, which rank %d does "
                           "not expect",
                           p, k.kind == MSG_ACT ? "an activation" : "a gradient", k.chunk, k.mb, t->rank);
                if ((size_t)ph->hdr.bytes != s->bytes)
                    rr_die("pipeline protocol error: rank %d sent %lld bytes for chunk %d microbatch %d, rank %d "
                           "expects %zu (the ranks disagree on the microbatch plan)",
                           p, (long long)ph->hdr.bytes, k.chunk, k.mb, t->rank, s->bytes);
                s->matched = 1;
                mpiCheck(MPI_Irecv(s->buf, (int)s->bytes, MPI_BYTE, p, FIFO_TAG_PAYLOAD, t->comm, &s->req));
                if (fifo_unmatched_from(t, p)) fifo_post_header(t, p);
            }
        }
    }
    for (int i = 0; i < t->n_recvs; i++) {
        RecvSlot* s = &t->recvs[i];
        if (!s->active || !s->matched) continue;
        MPI_Status st;
        mpiCheck(MPI_Test(&s->req, &flag, &st));
        if (!flag) continue;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if ((size_t)count != s->bytes)
            rr_die("pipeline protocol error: from rank %d, chunk %d microbatch %d: got %d bytes, expected %zu",
                   s->peer, s->key.chunk, s->key.mb, count, s->bytes);
        s->active = 0;
        if (t->n_completed == t->cap_completed) {
            t->cap_completed = t->cap_completed ? 2 * t->cap_completed : 64;
            t->completed = reallocCheck(t->completed, (size_t)t->cap_completed * sizeof *t->completed);
        }
        t->completed[t->n_completed++] = s->key;
        t->stats.msgs_recv++;
        t->stats.bytes_recv += (double)s->bytes;
    }
}

static int drain(Transport* t, MsgKey* done, int max) {
    int n = t->n_completed < max ? t->n_completed : max;
    memcpy(done, t->completed, (size_t)n * sizeof *done);
    memmove(t->completed, t->completed + n, (size_t)(t->n_completed - n) * sizeof *done);
    t->n_completed -= n;
    return n;
}

int transport_poll(Transport* t, MsgKey* done, int max) {
    progress(t);
    return drain(t, done, max);
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void die_waiting(const Transport* t, double waited) {
    char list[1024] = "";
    size_t off = 0;
    int shown = 0;
    for (int i = 0; i < t->n_recvs && shown < 8; i++) {
        const RecvSlot* s = &t->recvs[i];
        if (!s->active) continue;
        off += (size_t)snprintf(list + off, sizeof list - off, "%s%s chunk %d mb %d from rank %d", shown ? ", " : "",
                                s->key.kind == MSG_ACT ? "activation" : "gradient", s->key.chunk, s->key.mb, s->peer);
        if (off >= sizeof list) break;
        shown++;
    }
    rr_die_hint("a rank probably died or stopped; check the other ranks' output",
                "pipeline rank %d waited %.0f s without any message; still expecting: %s", t->rank, waited, list);
}

int transport_wait(Transport* t, MsgKey* done, int max, double timeout_s) {
    double t0 = rr_now();
    long backoff = 20;
    for (;;) {
        progress(t);
        int n = drain(t, done, max);
        if (n > 0) {
            t->stats.wait_s += rr_now() - t0;
            return n;
        }
        double waited = rr_now() - t0;
        if (timeout_s > 0 && waited > timeout_s) die_waiting(t, waited);
        sleep_us(backoff);
        if (backoff < 2000) backoff *= 2;
    }
}

void transport_send_sync(Transport* t, int peer, MsgKey key, const void* buf, size_t bytes) {
    double t0 = rr_now();
    RR_ASSERT(bytes <= (size_t)INT32_MAX);
    MPI_Request req;
    int flag = 0;
    long backoff = 20;
    /* MPI_Issend completes only when the matching receive has been posted (Megatron's paired exchange);
     * wait for it while still progressing our own receives so two ranks sending to each other cannot
     * deadlock on receives that we posted. */
    if (t->kind == TRANSPORT_TAGGED) {
        mpiCheck(MPI_Issend(buf, (int)bytes, MPI_BYTE, peer, tagged_tag(t, key), t->comm, &req));
    } else {
        FifoHeader h = {key.kind, key.chunk, key.mb, 0, (int64_t)bytes};
        MPI_Request hreq;
        mpiCheck(MPI_Issend(&h, (int)sizeof h, MPI_BYTE, peer, FIFO_TAG_HEADER, t->comm, &hreq));
        for (;;) {
            mpiCheck(MPI_Test(&hreq, &flag, MPI_STATUS_IGNORE));
            if (flag) break;
            progress(t);
            sleep_us(backoff);
            if (backoff < 2000) backoff *= 2;
        }
        mpiCheck(MPI_Issend(buf, (int)bytes, MPI_BYTE, peer, FIFO_TAG_PAYLOAD, t->comm, &req));
    }
    backoff = 20;
    for (;;) {
        mpiCheck(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
        if (flag) break;
        progress(t);
        sleep_us(backoff);
        if (backoff < 2000) backoff *= 2;
    }
    t->stats.msgs_sent++;
    t->stats.bytes_sent += (double)bytes;
    t->stats.wait_s += rr_now() - t0;
}

void transport_flush(Transport* t) {
    long backoff = 20;
    for (;;) {
        int pending = 0, flag = 0;
        for (int i = 0; i < t->n_sends; i++) {
            SendSlot* s = &t->sends[i];
            if (s->req == MPI_REQUEST_NULL) continue;
            mpiCheck(MPI_Test(&s->req, &flag, MPI_STATUS_IGNORE));
            if (flag) {
                free(s->copy);
                s->copy = NULL;
            } else {
                pending++;
            }
        }
        if (!pending) return;
        progress(t);
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
    for (int p = 0; p < t->size; p++)
        if (t->peers[p].posted) {
            MPI_Cancel(&t->peers[p].req);
            MPI_Wait(&t->peers[p].req, MPI_STATUS_IGNORE);
        }
    for (int i = 0; i < t->n_recvs; i++)
        if (t->recvs[i].active && t->recvs[i].req != MPI_REQUEST_NULL) {
            MPI_Cancel(&t->recvs[i].req);
            MPI_Wait(&t->recvs[i].req, MPI_STATUS_IGNORE);
        }
    transport_flush(t);
    free(t->recvs);
    free(t->sends);
    free(t->peers);
    free(t->completed);
    free(t);
}
