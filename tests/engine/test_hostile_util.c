/* test_hostile_util.c — the helpers the hostile-input checks rest on, one by one:
 *   rr_read_file's cap: a regular file over it is refused before it is read (EFBIG, the message names the
 *     limit and the kind), exactly the cap is read, a stream (a pipe, a FIFO) stops one byte past it, a
 *     device (/dev/zero, /dev/urandom) is refused unread (ENODEV);
 *   rr_remove_tree: removes a tree, does not follow a symbolic link out of it (the target survives), a
 *     missing path is success, a path with quotes, spaces and $(...) is a path;
 *   rr_mul_i64 / rr_add_i64: overflow and negative operands refused;
 *   params_slice_parse: every malformed or overflowing slice description of a table of cases refused,
 *     the valid ones read back.
 * Usage: test_hostile_util WORK_DIR   (exit 0 = every check passed) */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/params.h"
#include "engine/util.h"

#include "tests/support/check.h"

static void write_file(const char* path, const char* text) {
    FILE* f = fopen(path, "wb");
    RR_ASSERT(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

static void read_cap_test(const char* work) {
    char p[4096], why[256];
    size_t n = 0;
    /* a regular file: exactly the cap is read, one byte more is refused; a sparse 1 GiB file is refused
     * without being read (no 1 GiB allocation: the check is on its size) */
    snprintf(p, sizeof p, "%s/cap.txt", work);
    write_file(p, "0123456789");
    char* s = rr_read_file(p, &n, 10);
    CHECK(s && n == 10 && !strcmp(s, "0123456789"), "a file of exactly the cap: %s", s ? s : strerror(errno));
    free(s);
    errno = 0;
    s = rr_read_file(p, &n, 9);
    CHECK(!s && errno == EFBIG, "a file one byte over the cap: errno %d", errno);
    const char* msg = rr_read_file_why(EFBIG, "a recipe .ini file", why, sizeof why);
    CHECK(strstr(msg, "larger than 9 bytes, the limit for a recipe .ini file") != NULL, "message: %s", msg);
    snprintf(p, sizeof p, "%s/sparse.bin", work);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)RR_GiB) == 0 && close(fd) == 0, "sparse file");
    errno = 0;
    s = rr_read_file(p, &n, RR_MAX_INI);
    CHECK(!s && errno == EFBIG, "a 1 GiB file against the recipe cap: errno %d", errno);
    msg = rr_read_file_why(EFBIG, "a recipe .ini file", why, sizeof why);
    CHECK(strstr(msg, "larger than 4 MiB") != NULL, "message: %s", msg);
    unlink(p);
    /* an empty file, a directory */
    snprintf(p, sizeof p, "%s/empty.txt", work);
    write_file(p, "");
    s = rr_read_file(p, &n, 10);
    CHECK(s && n == 0 && s[0] == 0, "empty file");
    free(s);
    errno = 0;
    CHECK(!rr_read_file(work, &n, 10) && errno == EISDIR, "a directory: errno %d", errno);
    /* a device is refused unread (/dev/zero would be read up to the cap, 16 GiB for a manifest) */
    errno = 0;
    CHECK(!rr_read_file("/dev/zero", &n, 1 << 20) && errno == ENODEV, "/dev/zero: errno %d", errno);
    errno = 0;
    CHECK(!rr_read_file("/dev/urandom", &n, 1 << 20) && errno == ENODEV, "/dev/urandom: errno %d", errno);
    CHECK(strstr(rr_read_file_why(ENODEV, "a manifest", why, sizeof why), "a device") != NULL, "device message");
    /* a stream whose size is unknown stops one byte past the cap: a FIFO fed more than the cap */
    {
        char fifo[4200];
        snprintf(fifo, sizeof fifo, "%s/fifo", work);
        RR_ASSERT(mkfifo(fifo, 0600) == 0);
        pid_t w = fork();
        RR_ASSERT(w >= 0);
        if (w == 0) { /* the writer: 1 MiB + 4096 bytes, then EOF */
            int fd = open(fifo, O_WRONLY);
            static char zeros[4096];
            for (int i = 0; fd >= 0 && i < 257; i++)
                if (write(fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros) break;
            _exit(0);
        }
        /* opened without waiting for the writer: until it opens its end, the FIFO may read as empty */
        int tries = 0;
        do {
            errno = 0;
            s = rr_read_file(fifo, &n, 1 << 20);
            if (s) free(s);
        } while (s && n == 0 && ++tries < 1000 && usleep(1000) == 0);
        CHECK(!s && errno == EFBIG, "a FIFO past the cap: errno %d", errno);
        kill(w, SIGKILL);
        waitpid(w, NULL, 0);
        unlink(fifo);
    }
    /* a pipe: what fits is read whole, more is refused */
    int pfd[2];
    RR_ASSERT(pipe(pfd) == 0);
    RR_ASSERT(write(pfd[1], "abc", 3) == 3);
    close(pfd[1]);
    FILE* f = fdopen(pfd[0], "rb");
    s = rr_read_stream(f, &n, 3);
    CHECK(s && n == 3 && !strcmp(s, "abc"), "pipe of exactly the cap");
    free(s);
    fclose(f);
    RR_ASSERT(pipe(pfd) == 0);
    RR_ASSERT(write(pfd[1], "abcd", 4) == 4);
    close(pfd[1]);
    f = fdopen(pfd[0], "rb");
    errno = 0;
    CHECK(!rr_read_stream(f, &n, 3) && errno == EFBIG, "pipe over the cap: errno %d", errno);
    fclose(f);
}

static void remove_tree_test(const char* work) {
    char top[4096], p[4200], outside[4096];
    /* a folder whose name a shell would take apart */
    snprintf(top, sizeof top, "%s/it's a \"tree\" $(touch PWNED) `x`", work);
    snprintf(outside, sizeof outside, "%s/outside", work);
    RR_ASSERT(rr_mkdirs(outside) == 0);
    snprintf(p, sizeof p, "%s/keep.txt", outside);
    write_file(p, "keep");
    snprintf(p, sizeof p, "%s/a/b/c", top);
    RR_ASSERT(rr_mkdirs(p) == 0);
    snprintf(p, sizeof p, "%s/a/b/c/f.txt", top);
    write_file(p, "x");
    snprintf(p, sizeof p, "%s/a/f2.txt", top);
    write_file(p, "y");
    snprintf(p, sizeof p, "%s/a/link", top); /* a link to a folder outside: removed, not followed */
    RR_ASSERT(symlink(outside, p) == 0);
    snprintf(p, sizeof p, "%s/a/dangling", top);
    RR_ASSERT(symlink("/nonexistent/x", p) == 0);
    CHECK(rr_remove_tree(top) == 0, "remove: %s", strerror(errno));
    CHECK(access(top, F_OK) != 0, "the tree is still there");
    snprintf(p, sizeof p, "%s/keep.txt", outside);
    CHECK(access(p, F_OK) == 0, "a file behind a symbolic link inside the tree was removed");
    snprintf(p, sizeof p, "%s/PWNED", work);
    CHECK(access(p, F_OK) != 0 && access("PWNED", F_OK) != 0, "a command ran");
    CHECK(rr_remove_tree(top) == 0, "a missing path is success");
    /* a symbolic link given as the path: the link goes, its target stays */
    snprintf(p, sizeof p, "%s/link_top", work);
    RR_ASSERT(symlink(outside, p) == 0);
    CHECK(rr_remove_tree(p) == 0 && access(p, F_OK) != 0, "link as the path");
    snprintf(p, sizeof p, "%s/keep.txt", outside);
    CHECK(access(p, F_OK) == 0, "the target of a link given as the path was removed");
    /* a plain file */
    CHECK(rr_remove_tree(p) == 0 && access(p, F_OK) != 0, "a file as the path");
}

static void checked_math_test(void) {
    int64_t r = 0;
    CHECK(rr_mul_i64(3, 4, &r) == 0 && r == 12, "3 x 4");
    CHECK(rr_mul_i64(0, INT64_MAX, &r) == 0 && r == 0, "0 x max");
    CHECK(rr_mul_i64(INT64_MAX / 2 + 1, 2, &r) != 0, "overflow");
    CHECK(rr_mul_i64(4, 4000000000000LL, &r) == 0 && r == 16000000000000LL, "4 x 4e12");
    CHECK(rr_mul_i64(-1, 5, &r) != 0 && rr_mul_i64(5, -1, &r) != 0, "negative");
    CHECK(rr_add_i64(INT64_MAX, 1, &r) != 0 && rr_add_i64(-1, 1, &r) != 0, "add overflow / negative");
    CHECK(rr_add_i64(INT64_MAX - 1, 1, &r) == 0 && r == INT64_MAX, "add to max");
}

static void slice_parse_test(void) {
    ParamSlice sl;
    int nd = 0;
    CHECK(params_slice_parse("dim=1;shape=4,6;ranges=0:2,4:2", &sl, &nd) == 0 && nd == 2 && sl.dim == 1 &&
              sl.n == 2 && sl.gshape[1] == 6 && sl.off[1] == 4 && sl.len[1] == 2,
          "valid slice");
    CHECK(params_slice_parse("dim=0;shape=8,2,3,5;ranges=4:4", &sl, &nd) == 0 && nd == 4, "4 dimensions");
    static const char* bad[] = {
        "dim=1;shape=4,4,4,4,2;ranges=0:2",                /* 5 dimensions: more than a tensor has */
        "dim=0;shape=-4,2;ranges=0:4",                     /* negative */
        "dim=0;shape=0,2;ranges=0:1",                      /* zero */
        "dim=0;shape=99999999999999999999,2;ranges=0:4",  /* past int64 */
        "dim=0;shape=4611686018427387904,4;ranges=0:4",    /* the product overflows */
        "dim=0;shape=4,2;ranges=9223372036854775807:9223372036854775807", /* offset + length overflows */
        "dim=0;shape=4,2;ranges=2:3",                      /* past the dimension */
        "dim=7;shape=4,2;ranges=0:4",                      /* no such dimension */
        "dim=-1;shape=4,2;ranges=0:4",
        "dim=99999999999;shape=4,2;ranges=0:4",
        "dim=0;shape=4,2;ranges=0:1,1:1,2:1,3:1",          /* more ranges than a table holds */
        "dim=0;shape=4,2;ranges=2:-1",
        "dim=0;shape=4,2;ranges=0:0",
        "dim=0;shape=4,2",
        "dim=0;shape=4,2;ranges=0:4;",
        "dim=0;shape=4,,2;ranges=0:4",
        "dim=0;shape= 4,2;ranges=0:4x",
        "",
        NULL,
    };
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++)
        CHECK(params_slice_parse(bad[i], &sl, &nd) != 0, "accepted: %s", bad[i] ? bad[i] : "(null)");
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_hostile_util WORK_DIR\n");
        return 2;
    }
    RR_ASSERT(rr_remove_tree(argv[1]) == 0 && rr_mkdirs(argv[1]) == 0);
    read_cap_test(argv[1]);
    remove_tree_test(argv[1]);
    checked_math_test();
    slice_parse_test();
    printf("test_hostile_util: %d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}
