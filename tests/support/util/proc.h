/* proc.h — what the C tests used a shell for, without one (no shell anywhere in the C sources:
 * tests/lint/lint_no_shell.sh): run a program from an argument vector with its output redirected, copy,
 * compare and remove files and folders. Header-only, for tests. */
#ifndef RRFP_TESTS_PROC_H
#define RRFP_TESTS_PROC_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/util.h"

extern char** environ;

/* Run argv[0] (a path) with argv (NULL-terminated); stdout to out_path and stderr to err_path when
 * not NULL ("/dev/null" discards). Returns its exit status, or -1 when it could not run or was killed. */
static inline int proc_run(const char* const* argv, const char* out_path, const char* err_path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out_path) posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err_path) posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char* const*)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The parent's half of a forked child whose stderr went to a pipe: reads what the child wrote through fd (the pipe's
 * read end, closed here) into buf (at most n - 1 bytes, NUL-terminated; *len its length where len is not NULL), then
 * waits for the child. Returns its wait status (WIFEXITED, WIFSIGNALED, ...). */
static inline int proc_child_output(pid_t pid, int fd, char* buf, size_t n, size_t* len) {
    size_t k = 0;
    ssize_t r;
    while (k < n - 1 && (r = read(fd, buf + k, n - 1 - k)) > 0) k += (size_t)r;
    buf[k] = 0;
    close(fd);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) break;
    if (len) *len = k;
    return status;
}

/* Copy file a to b (created or truncated). Returns 0, or -1. */
static inline int proc_copy_file(const char* a, const char* b) {
    size_t n;
    char* buf = rr_read_file(a, &n, RR_MAX_SAFETENSORS);
    if (!buf) return -1;
    FILE* f = fopen(b, "wb");
    int rc = f && fwrite(buf, 1, n, f) == n ? 0 : -1;
    if (f && fclose(f) != 0) rc = -1;
    free(buf);
    return rc;
}

/* Copy the regular files of folder a into folder b (made; a flat folder such as a shard set). */
static inline int proc_copy_dir(const char* a, const char* b) {
    if (rr_mkdirs(b) != 0) return -1;
    DIR* d = opendir(a);
    if (!d) return -1;
    struct dirent* e;
    int rc = 0;
    char pa[4096], pb[4096];
    while ((e = readdir(d)) && rc == 0) {
        if (e->d_name[0] == '.') continue;
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        rc = proc_copy_file(pa, pb);
    }
    closedir(d);
    return rc;
}

/* 1 when files a and b hold the same bytes. */
static inline int proc_same_file(const char* a, const char* b) {
    size_t na, nb;
    char* x = rr_read_file(a, &na, RR_MAX_SAFETENSORS);
    char* y = rr_read_file(b, &nb, RR_MAX_SAFETENSORS);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* 1 when flat folders a and b hold the same file names with the same bytes. */
static inline int proc_same_dir(const char* a, const char* b) {
    int same = 1, na = 0, nb = 0;
    char pa[4096], pb[4096];
    DIR* d = opendir(a);
    if (!d) return 0;
    struct dirent* e;
    while ((e = readdir(d)) && same) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        same = proc_same_file(pa, pb);
        na++;
    }
    closedir(d);
    if (!(d = opendir(b))) return 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) nb++;
    closedir(d);
    return same && na == nb;
}

/* How many entries of folder dir have `part` in their name. */
static inline int proc_count_names(const char* dir, const char* part) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d))) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}

/* 1 when file path contains the text needle. */
static inline int proc_file_has(const char* path, const char* needle) {
    size_t n;
    char* s = rr_read_file(path, &n, RR_MAX_JSONL);
    int has = s && strstr(s, needle) != NULL;
    free(s);
    return has;
}

/* rm -rf dir, then mkdir -p dir. Returns 0, or -1. */
static inline int proc_fresh_dir(const char* dir) { return rr_remove_tree(dir) == 0 && rr_mkdirs(dir) == 0 ? 0 : -1; }

#endif
