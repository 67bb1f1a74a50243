/* doorbell.c — datagram-socket doorbells between the ranks of a group on one machine. See doorbell.h. */
#define _GNU_SOURCE
#include "runtime/comm/doorbell.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "engine/util.h"

struct Doorbell {
    int fd;
    int size;
    struct sockaddr_un* addr; /* (size) every rank's address */
    socklen_t* addr_len;      /* (size) */
};

/* "\0rrfp-doorbell-<pid>-<counter>-<rank>": the abstract namespace (sun_path[0] = 0) */
static socklen_t doorbell_name(struct sockaddr_un* a, const int32_t id[2], int rank) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "rrfp-doorbell-%d-%d-%d", (int)id[0], (int)id[1], rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

Doorbell* doorbell_create(Comm* comm) {
    if (comm->size < 2 || comm->device_memory) return NULL;
    static int32_t counter = 0;
    int32_t id[2] = {(int32_t)getpid(), counter++};
    char err[256];
    /* collective on every rank, whatever the environment says, so that ranks never disagree on it */
    if (comm_bcast(comm, id, sizeof id, 0, err, sizeof err) != 0) return NULL;
    const char* env = getenv("RRFP_DOORBELL");
    if (env && !strcmp(env, "0")) return NULL;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return NULL;
    Doorbell* d = callocCheck(1, sizeof *d);
    d->fd = fd;
    d->size = comm->size;
    d->addr = callocCheck((size_t)comm->size, sizeof *d->addr);
    d->addr_len = callocCheck((size_t)comm->size, sizeof *d->addr_len);
    for (int r = 0; r < comm->size; r++) d->addr_len[r] = doorbell_name(&d->addr[r], id, r);
    if (bind(fd, (struct sockaddr*)&d->addr[comm->rank], d->addr_len[comm->rank]) != 0) {
        doorbell_free(d); /* the name is taken (another machine's job of the same pid): poll as before */
        return NULL;
    }
    return d;
}

void doorbell_ring(Doorbell* d, int peer) {
    if (!d || peer < 0 || peer >= d->size) return;
    char b = 1;
    (void)sendto(d->fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr*)&d->addr[peer], d->addr_len[peer]);
}

static int doorbell_take(Doorbell* d) {
    char b[64];
    int n = 0;
    while (recv(d->fd, b, sizeof b, MSG_DONTWAIT) >= 0) n++;
    return n;
}

int doorbell_wait(Doorbell* d, double timeout_s) {
    if (!(timeout_s > 0)) timeout_s = 0;
    struct timespec ts = {(time_t)timeout_s, (long)((timeout_s - (double)(time_t)timeout_s) * 1e9)};
    if (!d) {
        nanosleep(&ts, NULL);
        return 0;
    }
    struct pollfd pf = {d->fd, POLLIN, 0};
    int rc = ppoll(&pf, 1, &ts, NULL);
    return rc > 0 ? doorbell_take(d) : 0;
}

void doorbell_free(Doorbell* d) {
    if (!d) return;
    close(d->fd);
    free(d->addr);
    free(d->addr_len);
    free(d);
}
