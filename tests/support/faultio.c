/* faultio.c — a test-only I/O fault injector (LD_PRELOAD; never linked into the engine), for the write failures a
 * full disk cannot produce (tests/runtime/cli/io_faults.py, docs/reliability.md "Nothing lost on write errors"):
 * fsync / fdatasync failing with EIO, close / fclose failing (NFS reports write-back errors there), rename failing
 * (EXDEV, EIO, EACCES), mkdir / opendir failing, and a short write (fewer bytes than asked, no error).
 *
 * Armed by the environment:
 *   RRFP_FAULT_CALL   the call to fail: fsync, fdatasync, close (close and fclose of an fd open for writing),
 *                     rename (rename and renameat),
 *                     mkdir, opendir, write or pwrite (a short write: half the bytes, no error)
 *   RRFP_FAULT_PATH   a glob (fnmatch, FNM_PATHNAME: '*' stays within a name) the whole path matches (close/fsync/write: the fd's,
 *                     read from /proc/self/fd; rename: the old or the new name); unset: any path
 *   RRFP_FAULT_NTH    fail the N-th matching call (1 when unset)
 *   RRFP_FAULT_COUNT  and the COUNT-1 matching calls after it (1 when unset: one fault per process)
 *   RRFP_FAULT_ERRNO  the errno, a number or one of EIO EXDEV EACCES EPERM ENOSPC EROFS EDQUOT (EIO when unset)
 *   RRFP_FAULT_LOG    a file each injected fault is appended to: "fault CALL PATH ERRNO PID" (a test checks that
 *                     its fault landed)
 *   RRFP_FAULT_TRACE  a file every fsync, fdatasync, close, rename, mkdir, opendir and the first write and pwrite
 *                     of each fd is appended to: "CALL PATH" (what a command writes: the control run's targets)
 * The real functions are found with dlsym(RTLD_NEXT). The close of a failed close still happens (as on NFS: the fd
 * is gone whatever close returns); a failed fsync, rename, mkdir or opendir does nothing. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_int fi_seen; /* matching calls so far */
static _Thread_local int fi_busy; /* inside the injector's own I/O: pass through */

static void* fi_real(const char* name) {
    void* f = dlsym(RTLD_NEXT, name);
    if (!f) {
        static const char msg[] = "faultio: dlsym(RTLD_NEXT) found no real function\n";
        if (write(2, msg, sizeof msg - 1) < 0) abort();
        abort();
    }
    return f;
}
#define REAL(ret, name, ...) static ret (*real_##name)(__VA_ARGS__); \
    if (!real_##name) real_##name = (ret(*)(__VA_ARGS__))fi_real(#name)

static int fi_errno(void) {
    const char* v = getenv("RRFP_FAULT_ERRNO");
    static const struct { const char* n; int e; } names[] = {{"EIO", EIO}, {"EXDEV", EXDEV}, {"EACCES", EACCES},
        {"EPERM", EPERM}, {"ENOSPC", ENOSPC}, {"EROFS", EROFS}, {"EDQUOT", EDQUOT}};
    if (!v || !*v) return EIO;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(v, names[i].n)) return names[i].e;
    return atoi(v) > 0 ? atoi(v) : EIO;
}

static void fi_append(const char* env, const char* line) {
    const char* f = getenv(env);
    if (!f || !*f) return;
    fi_busy = 1;
    REAL(int, open, const char*, int, ...);
    REAL(ssize_t, write, int, const void*, size_t);
    REAL(int, close, int);
    int fd = real_open(f, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (real_write(fd, line, strlen(line)) < 0) { /* the log is the test's: nothing to do about it here */
        }
        real_close(fd);
    }
    fi_busy = 0;
}

static void fi_fd_path(int fd, char* out, size_t n) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, out, n - 1);
    out[k > 0 ? k : 0] = 0;
}

/* Whether this call (kind `call`, on path a, or a/b for a rename) is the one to fail; traces it either way. */
static int fi_hit(const char* call, const char* a, const char* b) {
    if (fi_busy) return 0;
    char line[8400];
    if (getenv("RRFP_FAULT_TRACE")) {
        snprintf(line, sizeof line, "%s %s%s%s\n", call, a, b ? " " : "", b ? b : "");
        fi_append("RRFP_FAULT_TRACE", line);
    }
    const char* want = getenv("RRFP_FAULT_CALL");
    if (!want || strcmp(want, call)) return 0;
    const char* sub = getenv("RRFP_FAULT_PATH");
    if (sub && *sub && fnmatch(sub, a, FNM_PATHNAME) != 0 && !(b && fnmatch(sub, b, FNM_PATHNAME) == 0)) return 0;
    const char* nth = getenv("RRFP_FAULT_NTH");
    const char* count = getenv("RRFP_FAULT_COUNT");
    int n = nth && atoi(nth) > 0 ? atoi(nth) : 1, k = count && atoi(count) > 0 ? atoi(count) : 1;
    int seen = atomic_fetch_add(&fi_seen, 1) + 1;
    if (seen < n || seen >= n + k) return 0;
    int e = fi_errno();
    snprintf(line, sizeof line, "fault %s %s%s%s %s %d\n", call, a, b ? " -> " : "", b ? b : "",
             strerror(e), (int)getpid());
    fi_append("RRFP_FAULT_LOG", line);
    return e;
}

static int fi_hit_fd(const char* call, int fd) {
    if (fi_busy || fd < 0) return 0;
    /* a close reports write-back errors of what was written: a read-only fd's (an input, a folder) has none */
    if (!strcmp(call, "close") && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY) return 0;
    char p[4200];
    fi_fd_path(fd, p, sizeof p);
    return fi_hit(call, p, NULL);
}

int fsync(int fd) {
    REAL(int, fsync, int);
    int e = fi_hit_fd("fsync", fd);
    if (e) return errno = e, -1;
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(int, fdatasync, int);
    int e = fi_hit_fd("fdatasync", fd);
    if (e) return errno = e, -1;
    return real_fdatasync(fd);
}

int close(int fd) {
    REAL(int, close, int);
    int e = fi_hit_fd("close", fd);
    int rc = real_close(fd);
    if (e) return errno = e, -1;
    return rc;
}

int fclose(FILE* f) {
    REAL(int, fclose, FILE*);
    int e = f ? fi_hit_fd("close", fileno(f)) : 0;
    int rc = real_fclose(f);
    if (e) return errno = e, EOF;
    return rc;
}

int rename(const char* a, const char* b) {
    REAL(int, rename, const char*, const char*);
    int e = fi_hit("rename", a, b);
    if (e) return errno = e, -1;
    return real_rename(a, b);
}

int renameat(int da, const char* a, int db, const char* b) {
    REAL(int, renameat, int, const char*, int, const char*);
    int e = fi_hit("rename", a, b);
    if (e) return errno = e, -1;
    return real_renameat(da, a, db, b);
}

int mkdir(const char* p, mode_t m) {
    REAL(int, mkdir, const char*, mode_t);
    int e = fi_hit("mkdir", p, NULL);
    if (e) return errno = e, -1;
    return real_mkdir(p, m);
}

DIR* opendir(const char* p) {
    REAL(DIR*, opendir, const char*);
    int e = fi_hit("opendir", p, NULL);
    if (e) return errno = e, (DIR*)NULL;
    return real_opendir(p);
}

/* A write (call "write") or pwrite ("pwrite") traced once per fd (the first of a run of calls on it); a fault
 * halves the count (at least one byte short). */
static size_t fi_short(const char* call, int* last_fd, int fd, size_t n) {
    if (fi_busy || n < 2) return n;
    int trace = getenv("RRFP_FAULT_TRACE") && fd != *last_fd;
    const char* want = getenv("RRFP_FAULT_CALL");
    if (!trace && !(want && !strcmp(want, call))) return n;
    *last_fd = fd;
    return fi_hit_fd(call, fd) ? n / 2 : n;
}

ssize_t write(int fd, const void* p, size_t n) {
    REAL(ssize_t, write, int, const void*, size_t);
    static _Thread_local int last = -1;
    return real_write(fd, p, fi_short("write", &last, fd, n));
}

ssize_t pwrite(int fd, const void* p, size_t n, off_t off) {
    REAL(ssize_t, pwrite, int, const void*, size_t, off_t);
    static _Thread_local int last = -1;
    return real_pwrite(fd, p, fi_short("pwrite", &last, fd, n), off);
}
