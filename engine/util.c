/* util.c — error reporting, checked allocation, atomic file writes. */
#define _GNU_SOURCE
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* "rrfp-mm: <what>: <message>\n" on stderr. */
static void rr_vreport(const char* what, const char* fmt, va_list ap) {
    fprintf(stderr, "rrfp-mm: %s: ", what);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void rr_die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    rr_vreport("error", fmt, ap);
    va_end(ap);
    exit(1);
}

void rr_die_hint(const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    rr_vreport("error", fmt, ap);
    va_end(ap);
    fprintf(stderr, "---> HINT: %s\n", hint);
    exit(1);
}

void rr_warn(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    rr_vreport("warning", fmt, ap);
    va_end(ap);
}

void rr_assert_fail(const char* expr, const char* file, int line) {
    fprintf(stderr, "rrfp-mm: internal error: assertion `%s` failed at %s:%d\n", expr, file, line);
    abort();
}

void* rr_malloc_check(size_t size, const char* file, int line) {
    void* p = malloc(size ? size : 1);
    if (!p) {
        fprintf(stderr, "rrfp-mm: error: out of memory allocating %zu bytes at %s:%d\n", size, file, line);
        exit(1);
    }
    return p;
}

void* rr_calloc_check(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "rrfp-mm: error: out of memory allocating %zu x %zu bytes at %s:%d\n", n, size, file,
                line);
        exit(1);
    }
    return p;
}

void* rr_realloc_check(void* old, size_t size, const char* file, int line) {
    void* p = realloc(old, size ? size : 1);
    if (!p) {
        fprintf(stderr, "rrfp-mm: error: out of memory reallocating %zu bytes at %s:%d\n", size, file, line);
        exit(1);
    }
    return p;
}

FILE* rr_fopen_check(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (!f) {
        fprintf(stderr, "rrfp-mm: error: cannot open '%s' (mode %s): %s (at %s:%d)\n", path, mode, strerror(errno),
                file, line);
        exit(1);
    }
    return f;
}

double rr_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void rr_test_pause(const char* env) {
    const char* v = getenv(env);
    if (!v || !*v) return;
    char* end;
    errno = 0;
    long ms = strtol(v, &end, 10);
    if (errno || *end || ms < 0 || ms > 600000) {
        static int warned;
        if (!warned++) rr_warn("%s = '%s' ignored: expected milliseconds, an integer in 0..600000", env, v);
        return;
    }
    struct timespec left = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

int rr_fsync_dir(const char* dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd) != 0 && errno != EINVAL ? -1 : 0;
    int e = errno;
    close(fd); /* read-only: nothing of the folder's is written back at its close */
    errno = e;
    return rc;
}

int rr_fsync_parent(const char* path) {
    char* dup = strdup(path);
    if (!dup) return -1;
    int rc = rr_fsync_dir(dirname(dup));
    int e = errno;
    free(dup);
    errno = e;
    return rc;
}

typedef struct {
    const void* data;
    size_t size;
} RrOnePart;

static const void* rr_one_part(void* ctx, int i, size_t* size) {
    (void)i;
    const RrOnePart* o = ctx;
    *size = o->size;
    return o->data;
}

int rr_write_file_atomic(const char* path, const void* data, size_t size) {
    RrOnePart o = {data, size};
    return rr_write_file_atomic_parts(path, 1, rr_one_part, &o);
}

int rr_write_file_atomic_parts(const char* path, int nparts, RrPartFn part, void* ctx) {
    size_t n = strlen(path) + 32;
    char* tmp = mallocCheck(n);
    snprintf(tmp, n, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        free(tmp);
        return -1;
    }
    for (int i = 0; i < nparts; i++) {
        size_t left = 0;
        const char* p = part(ctx, i, &left); /* NULL: the part failed (errno set) */
        while (p && left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) {
                p = NULL;
                break;
            }
            p += w;
            left -= (size_t)w;
        }
        if (!p) {
            int e = errno;
            close(fd);
            unlink(tmp);
            free(tmp);
            errno = e;
            return -1;
        }
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        errno = e;
        return -1;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        errno = e;
        return -1;
    }
    free(tmp);
    return rr_fsync_parent(path); /* so the rename itself is durable */
}

/* The cap of this thread's last rr_read_file that failed with EFBIG, for rr_read_file_why's message. */
static _Thread_local size_t rr_read_cap;

char* rr_read_stream(FILE* f, size_t* size, size_t max) {
    struct stat st;
    int known = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
    /* a regular file over the cap is refused before anything is read or allocated; anything else (a
     * pipe, a device such as /dev/zero) is read up to one byte past the cap */
    if (known && (uint64_t)st.st_size > (uint64_t)max) {
        rr_read_cap = max;
        errno = EFBIG;
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    if (known && (uint64_t)st.st_size + 2 > cap) cap = (size_t)st.st_size + 2;
    errno = 0; /* so a failed fread below leaves its own errno */
    char* buf = malloc(cap);
    if (!buf) {
        errno = ENOMEM;
        return NULL;
    }
    for (;;) {
        if (len > max) {
            free(buf);
            rr_read_cap = max;
            errno = EFBIG;
            return NULL;
        }
        if (len + 1 >= cap) {
            size_t ncap = cap > max / 2 ? max + 2 : 2 * cap; /* one byte past the cap tells "too big" */
            char* nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
            cap = ncap;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
    }
    if (ferror(f)) {
        int err = errno ? errno : EIO;
        free(buf);
        errno = err;
        return NULL;
    }
    buf[len] = 0;
    if (size) *size = len;
    return buf;
}

char* rr_read_file(const char* path, size_t* size, size_t max) {
    /* opened without waiting: a named pipe with no writer (a FIFO planted where a file belongs) would
     * block fopen forever; it reads as empty instead. Reads then block as usual (a pipe with a writer). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    FILE* f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    /* fopen opens a directory for reading; its first read then fails with EISDIR, which ferror()
     * alone reported as EIO ("Input/output error") */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        errno = EISDIR;
        return NULL;
    }
    /* a device (/dev/zero, /dev/urandom, a terminal) is never a file to read whole: an endless one would be
     * read up to the cap, 16 GiB for a manifest. Pipes and FIFOs are read (up to one byte past the cap). */
    if (fstat(fileno(f), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
        fclose(f);
        errno = ENODEV;
        return NULL;
    }
    char* buf = rr_read_stream(f, size, max);
    int e = errno;
    fclose(f);
    errno = e;
    return buf;
}

void rr_fmt_bytes(char* buf, size_t n, uint64_t bytes) {
    static const char* unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, n, "%llu bytes", (unsigned long long)bytes);
        return;
    }
    double v = (double)bytes / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) v /= 1024, u++;
    if (v == (double)(uint64_t)v) snprintf(buf, n, "%.0f %s", v, unit[u]);
    else snprintf(buf, n, "%.1f %s", v, unit[u]);
}

const char* rr_read_file_why(int errnum, const char* expected, char* buf, size_t n) {
    if (errnum == EISDIR) {
        snprintf(buf, n, "is a directory, expected %s", expected);
        return buf;
    }
    if (errnum == ENODEV) {
        snprintf(buf, n, "a device, not a regular file or pipe; expected %s", expected);
        return buf;
    }
    if (errnum == EFBIG) {
        char cap[32];
        rr_fmt_bytes(cap, sizeof cap, rr_read_cap);
        snprintf(buf, n, "larger than %s, the limit for %s (refusing to read it whole)", cap, expected);
        return buf;
    }
    return strerror_r(errnum, buf, n); /* GNU's: buf or a constant string; threads call this at once (pack) */
}

char* rr_read_file_err(const char* path, size_t* size, size_t max, const char* expected, char* err, size_t err_len,
                       const char* fmt) {
    char* text = rr_read_file(path, size, max);
    if (!text && err && err_len) {
        char why[160];
        snprintf(err, err_len, fmt, path, rr_read_file_why(errno, expected, why, sizeof why));
    }
    return text;
}

int rr_fail(char* err, size_t err_len, const char* fmt, ...) {
    if (!err || !err_len) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}

const char* rr_path_existing_part(const char* path, char* pre, size_t n, int nofollow) {
    struct stat sb;
    const char* rest = "";
    for (;;) {
        if (pre[0] && (nofollow ? lstat(pre, &sb) : stat(pre, &sb)) == 0) return rest;
        char* slash = strrchr(pre, '/');
        if (!slash) { /* nothing of a relative path exists: it starts at the working folder */
            snprintf(pre, n, ".");
            return path;
        }
        rest = path + (slash - pre) + 1;
        if (slash == pre) slash[1] = 0; /* "/x": the root */
        else *slash = 0;
    }
}

static int rr_remove_one(const char* path, const struct stat* sb, int type, struct FTW* ftw) {
    (void)sb;
    (void)ftw;
    int rc = type == FTW_DP ? rmdir(path) : unlink(path);
    return rc != 0 && errno != ENOENT ? -1 : 0;
}

int rr_remove_tree(const char* path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(path, rr_remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) == 0 ? 0 : -1;
}

int rr_mul_i64(int64_t a, int64_t b, int64_t* out) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
    *out = r;
    return 0;
}

int rr_add_i64(int64_t a, int64_t b, int64_t* out) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return -1;
    *out = r;
    return 0;
}

uint64_t rr_fnv1a64_add(uint64_t h, const void* data, size_t n) {
    const unsigned char* p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

uint64_t rr_fnv1a64(const void* data, size_t n) { return rr_fnv1a64_add(RR_FNV1A64_INIT, data, n); }

int rr_mkdirs(const char* path) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char* p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* ---- XXH64 (after Yann Collet's xxHash specification, doc/xxhash_spec.md) ---- */
#define XXH_P1 0x9E3779B185EBCA87ull
#define XXH_P2 0xC2B2AE3D27D4EB4Full
#define XXH_P3 0x165667B19E3779F9ull
#define XXH_P4 0x85EBCA77C2B2AE63ull
#define XXH_P5 0x27D4EB2F165667C5ull

static inline uint64_t xxh_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t xxh_read64(const unsigned char* p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint64_t xxh_round(uint64_t acc, uint64_t in) {
    acc += in * XXH_P2;
    return xxh_rotl(acc, 31) * XXH_P1;
}
static inline uint64_t xxh_merge(uint64_t h, uint64_t v) {
    h ^= xxh_round(0, v);
    return h * XXH_P1 + XXH_P4;
}

void rr_xxh64_init(RrXxh64* s, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->seed = seed;
    s->v[0] = seed + XXH_P1 + XXH_P2, s->v[1] = seed + XXH_P2, s->v[2] = seed, s->v[3] = seed - XXH_P1;
}

static void xxh_stripe(uint64_t* v, const unsigned char* p) {
    for (int k = 0; k < 4; k++) v[k] = xxh_round(v[k], xxh_read64(p + 8 * k));
}

void rr_xxh64_update(RrXxh64* s, const void* data, size_t n) {
    const unsigned char* p = data;
    s->total += n;
    if (s->nbuf) { /* complete the stripe held from the last piece */
        size_t take = 32 - s->nbuf < n ? 32 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += (unsigned)take, p += take, n -= take;
        if (s->nbuf < 32) return;
        xxh_stripe(s->v, s->buf);
        s->nbuf = 0;
    }
    for (; n >= 32; p += 32, n -= 32) xxh_stripe(s->v, p);
    if (n) memcpy(s->buf, p, n), s->nbuf = (unsigned)n;
}

uint64_t rr_xxh64_digest(const RrXxh64* s) {
    const unsigned char* p = s->buf;
    const unsigned char* end = p + s->nbuf;
    uint64_t h;
    if (s->total >= 32) {
        const uint64_t* v = s->v;
        h = xxh_rotl(v[0], 1) + xxh_rotl(v[1], 7) + xxh_rotl(v[2], 12) + xxh_rotl(v[3], 18);
        for (int k = 0; k < 4; k++) h = xxh_merge(h, v[k]);
    } else {
        h = s->seed + XXH_P5;
    }
    h += s->total;
    for (; p + 8 <= end; p += 8) h = xxh_rotl(h ^ xxh_round(0, xxh_read64(p)), 27) * XXH_P1 + XXH_P4;
    if (p + 4 <= end) {
        uint32_t v;
        memcpy(&v, p, 4);
        h = xxh_rotl(h ^ (uint64_t)v * XXH_P1, 23) * XXH_P2 + XXH_P3;
        p += 4;
    }
    for (; p < end; p++) h = xxh_rotl(h ^ *p * XXH_P5, 11) * XXH_P1;
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    return h;
}

uint64_t rr_xxh64(const void* data, size_t n, uint64_t seed) {
    RrXxh64 s;
    rr_xxh64_init(&s, seed);
    rr_xxh64_update(&s, data, n);
    return rr_xxh64_digest(&s);
}

/* ---- shared objects beside the executable ------------------------------------------------------------ */

static void* dlopen_noting(const char* path, char* tried, size_t tried_len) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t used = strlen(tried);
        const char* e = dlerror();
        snprintf(tried + used, tried_len - used, "%s%.300s", used ? "; " : "", e ? e : path);
    }
    return h;
}

void* rr_dlopen_beside_exe(const char* env_var, const char* soname, char* err, size_t err_len) {
    char tried[768] = "";
    void* h = NULL;
    const char* env = getenv(env_var);
    if (env && *env) h = dlopen_noting(env, tried, sizeof tried);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char* slash = n > 0 ? (exe[n] = 0, strrchr(exe, '/')) : NULL;
    if (slash) *slash = 0;
    const char* beside[2] = {"%s/%s", "%s/../lib/%s"};
    for (int k = 0; k < 2 && !h && slash; k++) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, beside[k], exe, soname);
        if (access(path, F_OK) == 0) h = dlopen_noting(path, tried, sizeof tried);
    }
    if (!h) h = dlopen_noting(soname, tried, sizeof tried);
    if (!h) snprintf(err, err_len, "%s", tried);
    return h;
}

int rr_edit_distance(const char* a, const char* b) {
    enum { L = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= L || m >= L) return L;
    int d[L][L];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}
