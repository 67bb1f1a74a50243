/* test_safetensors_read.c — the safetensors reader reads tensor bytes on demand (engine/safetensors.h,
 * docs/engine.md "Safetensors files"): a file opened holds its header and a descriptor, and each st_read_*
 * reads that tensor's bytes from the file.
 *
 *   test_safetensors_read DIR
 *
 * Checks: every dtype path (F32, BF16, F16 widened, I32, U8 raw; a wrong dtype refused), a tensor read
 * twice, element ranges (one chunk and several), the streaming checksum against the one-shot one, the same
 * reads from memory (st_load_buffer); a file truncated, grown or replaced after it was opened refused with
 * a message naming the file and the tensor; a header whose offsets run past the end of the file refused at
 * open; more files than the open-file limit allows, each with its descriptor closed (st_close_fd), all read. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/safetensors.h"

#include "tests/support/check.h"

/* sizes: "big.bf16" spans more than one 4 MiB read (engine/safetensors.c ST_CHUNK), so chunked conversion and
 * hashing cross a chunk boundary */
#define NBIG (2 * 1024 * 1024 + 777)
static float f32v[6 * 7];
static uint16_t bf16v[NBIG];
static uint16_t f16v[9];
static int32_t i32v[5];
static uint8_t u8v[13];

static void fill(void) {
    for (int i = 0; i < 6 * 7; i++) f32v[i] = (float)i * 0.5f - 3.0f;
    for (int i = 0; i < NBIG; i++) bf16v[i] = st_f32_to_bf16((float)(i % 1000) * 0.25f - 100.0f);
    static const uint16_t h[9] = {0x3c00, 0xc000, 0x3555, 0x0001, 0x7bff, 0x8000, 0x3800, 0x4248, 0x0400};
    memcpy(f16v, h, sizeof h);
    for (int i = 0; i < 5; i++) i32v[i] = 1000 * i - 7;
    for (int i = 0; i < 13; i++) u8v[i] = (uint8_t)(i * 19 + 3);
}

static void write_fixture(const char* path) {
    StWriter* w = st_writer_new();
    st_writer_add_f32(w, "a.f32", f32v, 2, 6, 7, 0, 0);
    int64_t sb[1] = {NBIG}, sh[1] = {9}, su[1] = {13};
    st_writer_add(w, "big.bf16", DTYPE_BF16, 1, sb, bf16v);
    st_writer_add(w, "c.f16", DTYPE_F16, 1, sh, f16v);
    st_writer_add_i32(w, "d.i32", i32v, 1, 5, 0, 0, 0);
    st_writer_add(w, "e.u8", DTYPE_U8, 1, su, u8v);
    char err[512];
    CHECK(st_writer_write(w, path, err, sizeof err) == 0, "%s", err);
    st_writer_free(w);
}

/* Every read path of f against the values written. */
static void check_reads(const StFile* f, const char* what) {
    char err[512];
    int64_t s2[2] = {6, 7}, sb[1] = {NBIG}, sh[1] = {9}, s5[1] = {5};
    float x[6 * 7], y[6 * 7];
    /* F32, read twice: the same values both times (nothing consumed, nothing cached wrongly) */
    for (int rep = 0; rep < 2; rep++) {
        memset(x, 0xff, sizeof x);
        CHECK(st_read_f32(f, "a.f32", x, 2, s2, err, sizeof err) == 0, "%s: %s", what, err);
        CHECK(!memcmp(x, f32v, sizeof x), "%s: a.f32 read %d differs", what, rep + 1);
    }
    /* a range of rows: elements 14 .. 34 (rows 2..4 of 7) */
    memset(y, 0, sizeof y);
    const StTensor* ta = st_find(f, "a.f32");
    CHECK(ta && st_read_f32_range(f, ta, 14, 21, y, err, sizeof err) == 0, "%s: %s", what, err);
    CHECK(!memcmp(y, f32v + 14, 21 * sizeof(float)), "%s: a.f32 rows 2..4 differ", what);
    /* BF16 widened, whole (two chunks) and a range across the chunk boundary */
    float* big = mallocCheck(sizeof(float) * NBIG);
    CHECK(st_read_f32(f, "big.bf16", big, 1, sb, err, sizeof err) == 0, "%s: %s", what, err);
    int64_t bad = -1;
    for (int64_t i = 0; i < NBIG && bad < 0; i++)
        if (big[i] != st_bf16_to_f32(bf16v[i])) bad = i;
    CHECK(bad < 0, "%s: big.bf16 element %lld differs", what, (long long)bad);
    const StTensor* tb = st_find(f, "big.bf16");
    uint64_t first = 2 * 1024 * 1024 - 5, count = 300;
    memset(big, 0, sizeof(float) * count);
    CHECK(tb && st_read_f32_range(f, tb, first, count, big, err, sizeof err) == 0, "%s: %s", what, err);
    bad = -1;
    for (uint64_t i = 0; i < count && bad < 0; i++)
        if (big[i] != st_bf16_to_f32(bf16v[first + i])) bad = (int64_t)i;
    CHECK(bad < 0, "%s: big.bf16 range element %lld differs", what, (long long)bad);
    free(big);
    /* F16 widened */
    float h[9];
    CHECK(st_read_f32(f, "c.f16", h, 1, sh, err, sizeof err) == 0, "%s: %s", what, err);
    for (int i = 0; i < 9; i++) CHECK(h[i] == st_f16_to_f32(f16v[i]), "%s: c.f16[%d] = %g", what, i, (double)h[i]);
    /* I32; and the wrong reader for each kind refused, naming the file and the tensor */
    int32_t iv[5];
    CHECK(st_read_i32(f, "d.i32", iv, 1, s5, err, sizeof err) == 0 && !memcmp(iv, i32v, sizeof iv), "%s: d.i32 %s", what,
          err);
    CHECK(st_read_f32(f, "d.i32", x, 1, s5, err, sizeof err) != 0 && strstr(err, f->path) && strstr(err, "'d.i32'"),
          "%s: I32 read as f32: %s", what, err);
    CHECK(st_read_i32(f, "a.f32", iv, 2, s2, err, sizeof err) != 0 && strstr(err, "expected I32"),
          "%s: F32 read as I32: %s", what, err);
    /* U8 as stored, whole and a part */
    const StTensor* tu = st_find(f, "e.u8");
    uint8_t u[13];
    CHECK(tu && st_read_raw(f, tu, 0, 13, u, err, sizeof err) == 0 && !memcmp(u, u8v, 13), "%s: e.u8 %s", what, err);
    CHECK(st_read_raw(f, tu, 4, 6, u, err, sizeof err) == 0 && !memcmp(u, u8v + 4, 6), "%s: e.u8 part %s", what, err);
    /* the streaming checksum equals the one-shot one over the stored bytes (BF16: the halves as written) */
    uint64_t hsum = 0;
    CHECK(st_tensor_xxh64(f, tb, &hsum, err, sizeof err) == 0 && hsum == rr_xxh64(bf16v, sizeof bf16v, 0),
          "%s: big.bf16 checksum %s", what, err);
    CHECK(st_tensor_xxh64(f, ta, &hsum, err, sizeof err) == 0 && hsum == rr_xxh64(f32v, sizeof f32v, 0),
          "%s: a.f32 checksum %s", what, err);
}

/* The streaming xxh64 against the one-shot one, for pieces of every awkward size. */
static void test_xxh64_stream(void) {
    unsigned char buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t n = 0; n <= 300; n += (n < 70 ? 1 : 23))
        for (size_t piece = 1; piece <= 70; piece += 3) {
            RrXxh64 s;
            rr_xxh64_init(&s, 5);
            for (size_t at = 0; at < n; at += piece) rr_xxh64_update(&s, buf + at, at + piece < n ? piece : n - at);
            CHECK(rr_xxh64_digest(&s) == rr_xxh64(buf, n, 5), "xxh64 of %zu bytes in pieces of %zu", n, piece);
        }
}

static int copy_file(const char* from, const char* to) {
    size_t n = 0;
    char* b = rr_read_file(from, &n, 64u << 20);
    if (!b) return -1;
    FILE* f = fopen(to, "wb");
    int rc = f && fwrite(b, 1, n, f) == n ? 0 : -1;
    if (f && fclose(f) != 0) rc = -1;
    free(b);
    return rc;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_safetensors_read DIR\n");
        return 2;
    }
    const char* dir = argv[1];
    char path[1024], other[1024], err[512];
    fill();
    test_xxh64_stream();
    snprintf(path, sizeof path, "%s/st_read.safetensors", dir);
    write_fixture(path);
    if (check_failures) return 1;

    /* from the file, and from memory */
    StFile f;
    CHECK(st_load(&f, path, err, sizeof err) == 0, "%s", err);
    if (check_failures) return 1;
    CHECK(f.fd >= 0 && f.mem == NULL, "a file opened holds a descriptor, not its bytes");
    check_reads(&f, "file");
    size_t size = 0;
    char* bytes = rr_read_file(path, &size, 64u << 20);
    CHECK(bytes && size == f.size, "read back");
    StFile m;
    CHECK(st_load_buffer(&m, "mem.safetensors", bytes, size, err, sizeof err) == 0, "%s", err);
    check_reads(&m, "memory");
    st_free(&m);

    /* descriptor closed: a read reopens the path */
    st_close_fd(&f);
    CHECK(f.fd < 0, "st_close_fd");
    check_reads(&f, "reopened");

    /* grown after open: refused, naming the file and the tensor; then truncated (to inside a tensor) */
    int64_t s2[2] = {6, 7};
    float x[6 * 7];
    StFile g;
    CHECK(st_load(&g, path, err, sizeof err) == 0, "%s", err);
    FILE* a = fopen(path, "ab");
    CHECK(a && fwrite("0123456789", 1, 10, a) == 10 && fclose(a) == 0, "append");
    CHECK(st_read_f32(&g, "a.f32", x, 2, s2, err, sizeof err) != 0 && strstr(err, path) && strstr(err, "'a.f32'") &&
              strstr(err, "changed size since it was opened"),
          "grown: %s", err);
    CHECK(truncate(path, (off_t)(size - 20)) == 0, "truncate: %s", strerror(errno));
    int64_t s5[1] = {5};
    int32_t iv[5];
    CHECK(st_read_i32(&g, "d.i32", iv, 1, s5, err, sizeof err) != 0 && strstr(err, path) && strstr(err, "'d.i32'") &&
              strstr(err, "changed size since it was opened"),
          "truncated: %s", err);
    /* same through a reopen (descriptor closed), and a file replaced by another of the same size */
    st_close_fd(&g);
    const StTensor* tu = st_find(&g, "e.u8");
    uint8_t u[13];
    CHECK(st_read_raw(&g, tu, 0, 13, u, err, sizeof err) != 0 && strstr(err, "'e.u8'") && strstr(err, "changed size"),
          "truncated, reopened: %s", err);
    st_free(&g);
    write_fixture(path);
    CHECK(st_load(&g, path, err, sizeof err) == 0, "%s", err);
    st_close_fd(&g);
    snprintf(other, sizeof other, "%s/st_read.other.safetensors", dir);
    CHECK(copy_file(path, other) == 0 && rename(other, path) == 0, "replace: %s", strerror(errno));
    CHECK(st_read_f32(&g, "a.f32", x, 2, s2, err, sizeof err) != 0 && strstr(err, "'a.f32'") &&
              strstr(err, "replaced since it was opened"),
          "replaced: %s", err);
    st_free(&g);
    st_free(&f);

    /* a header whose data_offsets run past the end of the file: refused at open, naming file and tensor */
    const char* hdr = "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    snprintf(other, sizeof other, "%s/st_read.past.safetensors", dir);
    FILE* p = fopen(other, "wb");
    uint64_t hl = strlen(hdr);
    unsigned char len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (unsigned char)(hl >> (8 * b));
    CHECK(p && fwrite(len8, 1, 8, p) == 8 && fwrite(hdr, 1, hl, p) == hl && fwrite("12345678", 1, 8, p) == 8 &&
              fclose(p) == 0,
          "write %s", other);
    CHECK(st_load(&g, other, err, sizeof err) != 0 && strstr(err, other) && strstr(err, "'t'") &&
              strstr(err, "run past the end"),
          "past the end: %s", err);
    CHECK(g.fd == -1 && g.path == NULL, "a refused file leaves nothing open");

    /* more files than the open-file limit: each loaded, its descriptor closed, all read afterwards */
    write_fixture(path);
    struct rlimit old, lim;
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit");
    lim = old;
    lim.rlim_cur = 32;
    CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit: %s", strerror(errno));
    enum { NF = 80 };
    StFile* many = callocCheck(NF, sizeof(StFile));
    int loaded = 0, read_ok = 0;
    for (int i = 0; i < NF; i++)
        if (st_load(&many[i], path, err, sizeof err) == 0) {
            st_close_fd(&many[i]);
            loaded++;
        }
    for (int i = 0; i < loaded; i++) read_ok += st_read_f32(&many[i], "a.f32", x, 2, s2, err, sizeof err) == 0;
    CHECK(loaded == NF && read_ok == NF, "%d of %d files loaded, %d read, under a limit of 32 descriptors: %s", loaded,
          NF, read_ok, err);
    for (int i = 0; i < loaded; i++) st_free(&many[i]);
    free(many);
    setrlimit(RLIMIT_NOFILE, &old);
    free(bytes);

    if (check_failures) fprintf(stderr, "%d of %d checks failed\n", check_failures, check_count);
    else printf("safetensors read: ok (%d checks)\n", check_count);
    return check_failures ? 1 : 0;
}
