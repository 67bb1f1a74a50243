/* guard.c — start-up refusals of a training job (guard.h). */
#define _GNU_SOURCE
#include "runtime/train/guard.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/memory.h"
#include "engine/util.h"
#include "runtime/train/layout.h"

#define GUARD_HOST 256

/* Take the advisory lock `path` (flock, exclusive, not waiting) and write "pid P host H" + `more` into it.
 * Returns the descriptor, or -1 with a message: `busy` (a format with the folder, the holder and the lock
 * path, in that order) when another job holds it. */
static int guard_lock(const char* path, const char* folder, const char* more, const char* busy, char* err,
                      size_t err_len) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, err_len, "cannot open the lock '%s': %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char who[4400] = "";
        ssize_t n = pread(fd, who, sizeof who - 1, 0);
        close(fd);
        if (e != EWOULDBLOCK) {
            snprintf(err, err_len, "cannot lock '%s': %s", path, strerror(e));
            return -1;
        }
        who[n > 0 ? n : 0] = 0;
        who[strcspn(who, "\n")] = 0;
        snprintf(err, err_len, busy, folder, who[0] ? who : "holder unknown", path);
        return -1;
    }
    char host[GUARD_HOST] = "";
    gethostname(host, sizeof host - 1);
    char line[GUARD_HOST + 4400];
    int n = snprintf(line, sizeof line, "pid %d host %s%s\n", (int)getpid(), host, more);
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    int bad = ftruncate(fd, 0) != 0;
    for (ssize_t w, at = 0; !bad && at < n; at += w) /* a short pwrite (a signal, NFS) writes the rest */
        if ((w = pwrite(fd, line + at, (size_t)(n - at), at)) < 0 && errno != EINTR) bad = 1;
        else if (w < 0) w = 0;
    if (bad) {
        snprintf(err, err_len, "cannot write '%s': %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int guard_run_lock(const char* run_dir, char* err, size_t err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", run_dir);
    return guard_lock(path, run_dir, "",
                      "run folder '%s' is in use by another job (%s; lock %s)\n---> HINT: wait for it to end, or give "
                      "this job its own folder: --set train.run_dir=...",
                      err, err_len);
}

int guard_ckpt_lock(const char* ckpt_root, const char* run_dir, int* fd, char* err, size_t err_len) {
    *fd = -1;
    if (rr_mkdirs(ckpt_root) != 0) {
        snprintf(err, err_len, "cannot create checkpoint folder '%s': %s", ckpt_root, strerror(errno));
        return -1;
    }
    struct stat a, b;
    if (stat(ckpt_root, &a) == 0 && stat(run_dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return 0; /* the run folder itself: its lock is this one */
    char path[4200], more[4200];
    snprintf(path, sizeof path, "%s/.lock", ckpt_root);
    snprintf(more, sizeof more, " run folder %s", run_dir);
    *fd = guard_lock(path, ckpt_root, more,
                     "checkpoint folder '%s' is in use by another job (%s; lock %s): two jobs in one checkpoint "
                     "folder would prune each other's checkpoints\n---> HINT: wait for it to end, or give this job its "
                     "own: --set checkpoint.dir=...",
                     err, err_len);
    return *fd < 0 ? -1 : 0;
}

int guard_lock_current(int fd, const char* dir) {
    if (fd < 0) return 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

void guard_run_unlock(int fd) {
    if (fd >= 0) close(fd);
}

/* The ranks of world on this host (same gethostname): *local = how many, *sum = their `v` added up. A
 * failed all-gather counts this rank alone. */
static void guard_host_ranks(Comm* world, double v, int* local, double* sum) {
    *local = 1;
    *sum = v;
    if (world->size == 1) return;
    typedef struct {
        char host[GUARD_HOST];
        double v;
    } Entry;
    Entry me;
    memset(&me, 0, sizeof me);
    gethostname(me.host, sizeof me.host - 1);
    me.v = v;
    Entry* all = callocCheck((size_t)world->size, sizeof(Entry));
    char err[256];
    if (world->ops->allgather(world, &me, all, sizeof(Entry), err, sizeof err) == 0) {
        *local = 0;
        *sum = 0;
        for (int i = 0; i < world->size; i++)
            if (!strcmp(all[i].host, me.host)) {
                (*local)++;
                *sum += all[i].v;
            }
    }
    free(all);
}

int guard_memory(const Backend* be, Comm* world, double need, const char* detail, int allow, char* err,
                 size_t err_len) {
    int host_mem = !be || be->dev->host_addressable;
    int local;
    double host_need;
    guard_host_ranks(world, need, &local, &host_need);
    double want = host_mem ? host_need : need;
    size_t avail = 0;
    char e[256];
    int fail = 0;
    if (mem_backend_available(be, &avail, e, sizeof e) != 0) {
        rr_warn("memory check skipped: %s", e);
    } else if (want > (double)avail) {
        char a[32], b[32];
        train_fmt_bytes(a, sizeof a, want);
        train_fmt_bytes(b, sizeof b, (double)avail);
        char what[128];
        if (host_mem && local > 1) snprintf(what, sizeof what, "the %d ranks on this host need", local);
        else snprintf(what, sizeof what, "this rank needs");
        snprintf(err, err_len,
                 "not enough memory: %s %s (parameters, gradients, AdamW state, activations) but %s has %s "
                 "available%s%s\n---> HINT: a smaller model or microbatch, more pipeline stages, or "
                 "--set runtime.allow_overcommit=1 to start anyway",
                 what, a, host_mem ? "the host (MemAvailable)" : "the device (cudaMemGetInfo)", b,
                 detail && detail[0] ? "; " : "", detail ? detail : "");
        fail = 1;
    }
    if (fail && allow) {
        rr_warn("%s (runtime.allow_overcommit = 1: starting anyway)", err);
        fail = 0;
    }
    /* every rank takes the same decision */
    int any = fail;
    if (comm_allreduce(world, &any, 1, COMM_I32, COMM_MAX, e, sizeof e) != 0) {
        snprintf(err, err_len, "memory check: %s", e);
        return -1;
    }
    if (any && !fail) snprintf(err, err_len, "another rank has not enough memory (see its message)");
    return any ? -1 : 0;
}

int guard_device_memory(Recipe* r, Comm* world, char* note, size_t note_len, char* err, size_t err_len) {
    if (note && note_len) note[0] = 0;
    r->device_memory = 0;
    /* the same recipe on every rank: every rank takes this branch or none */
    if (r->memory_budget > 0 || r->allow_overcommit || backend_name_host_addressable(r->backend) == 1) return 0;
    double gib = 0;
    char why[256];
    const Backend* be = backend_open(r->backend, why, sizeof why);
    if (!be) {
        if (note && note_len) snprintf(note, note_len, "%s", why);
    } else if (be->dev->memory) {
        BackendMemory m;
        be->dev->memory(&m);
        gib = (double)m.device_total / (double)(1ull << 30);
    }
    if (world && world->size > 1) {
        /* a rank without a device counts as none: no default on any rank */
        char e[256];
        if (comm_allreduce(world, &gib, 1, COMM_F64, COMM_MIN, e, sizeof e) != 0) {
            snprintf(err, err_len, "the device memory's minimum over the ranks: %s", e);
            return -1;
        }
    }
    r->device_memory = gib;
    return 0;
}

int guard_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* the ranks on this host, as guard_threads found them (0: not asked yet, taken as 1) */
static int host_ranks;

int guard_threads(const Recipe* r, Comm* world) {
    int cores = guard_cores();
    int local;
    double unused;
    guard_host_ranks(world, 0, &local, &unused);
    host_ranks = local;
    if (r->threads > 0) {
        int share = cores / (local > 0 ? local : 1);
        if (share < 1) share = 1;
        if (r->threads > share && world->rank == 0)
            rr_warn("%s: runtime.threads = %d but this process may run on %d core%s%s (sched_getaffinity): "
                    "threads beyond the cores run much slower; set runtime.threads <= %d, or 0 for the cores available",
                    recipe_origin(r, "runtime", "threads"), r->threads, cores, cores == 1 ? "" : "s",
                    local > 1 ? ", shared by the ranks on this host" : "", share);
        return r->threads;
    }
    int n = cores / (local > 0 ? local : 1);
    return n < 1 ? 1 : n;
}

int guard_data_workers(const Recipe* r) {
    if (r->workers > 0) return r->workers;
    int local = host_ranks > 0 ? host_ranks : 1;
    int share = guard_cores() / local;
    if (share < 1) share = 1;
    /* the cores the step itself keeps busy: on the CPU its threads; on a device one host thread */
    int compute = 1;
    if (backend_name_host_addressable(r->backend) == 1) compute = r->threads > 0 && r->threads < share ? r->threads : share;
    int n = share - compute;
    return n < 1 ? 1 : n > GUARD_DATA_WORKERS_MAX ? GUARD_DATA_WORKERS_MAX : n;
}
