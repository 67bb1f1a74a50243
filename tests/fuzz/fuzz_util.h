/* fuzz_util.h — helpers of the file-input fuzz targets (run_fuzz_files.sh): an input cut into the files
 * of a folder at a separator line, a private scratch folder, writing and removing files (no shell). */
#ifndef RRFP_FUZZ_UTIL_H
#define RRFP_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, nftw: run_fuzz_files.sh compiles with -D_GNU_SOURCE */
#endif
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Parts of one input are separated by this line (the seeds carry it; the dictionary gives it to
 * mutations that drop it). */
#define FUZZ_SEP "\n--8<--\n"

/* Cut data at FUZZ_SEP into at most max parts (the last takes the rest). Returns the part count. */
static int fuzz_split(const uint8_t* data, size_t size, const uint8_t** part, size_t* len, int max) {
    const size_t sl = sizeof FUZZ_SEP - 1;
    int n = 0;
    const uint8_t* p = data;
    size_t left = size;
    while (n < max - 1) {
        const uint8_t* s = memmem(p, left, FUZZ_SEP, sl);
        if (!s) break;
        part[n] = p, len[n] = (size_t)(s - p), n++;
        left -= (size_t)(s - p) + sl;
        p = s + sl;
    }
    part[n] = p, len[n] = left, n++;
    return n;
}

/* A scratch folder for this process, on tmpfs when there is one (files are written every input). */
static const char* fuzz_scratch(void) {
    static char dir[256];
    if (dir[0]) return dir;
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/rrfp-fuzz-%d", base, (int)getpid());
    mkdir(dir, 0700);
    return dir;
}

static void fuzz_write(const char* path, const void* data, size_t size) {
    FILE* f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

static int fuzz_rm_one(const char* p, const struct stat* sb, int flag, struct FTW* ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p) == 0 ? 0 : -1;
}
/* Remove a folder and what it holds (nftw, depth first); a missing path is fine. */
static void fuzz_rm_rf(const char* path) {
    struct stat sb;
    if (lstat(path, &sb) == 0) nftw(path, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
