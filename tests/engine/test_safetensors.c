/* test_safetensors.c — safetensors writer/reader tests.
 *
 *   test_safetensors selftest DIR       round trip in C, bf16 rounding, every truncation of a file, a tensor
 *                                       made at write time (st_writer_defer)
 *   test_safetensors write PATH         write the shared fixture (tests/engine/safetensors_peer.py reads it)
 *   test_safetensors check PATH         read a fixture written by the independent Python writer
 *   test_safetensors expect-error PATH TEXT   loading must fail with a message containing TEXT
 *
 * The fixture (same in tests/engine/safetensors_peer.py):
 *   "a.f32"    F32  (3, 5)    a[i] = i * 0.25 - 1.5
 *   "b.bf16"   BF16 (4)       1.0, -2.5, 3.140625, 65280
 *   "c.i32"    I32  (2, 3, 2) c[i] = 7 i - 20
 *   "d.scalar" F32  ()        42.5
 *   "e.empty"  F32  (0, 4)
 *   __metadata__ {"format": "pt", "step": "17"} */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/safetensors.h"

#include "tests/support/check.h"

static float fa[15];
static uint16_t fb[4];
static int32_t fc[12];
static float fd = 42.5f;
static const float fb_vals[4] = {1.0f, -2.5f, 3.140625f, 65280.0f}; /* all exact in bf16 */

static void fixture_fill(void) {
    for (int i = 0; i < 15; i++) fa[i] = (float)i * 0.25f - 1.5f;
    for (int i = 0; i < 4; i++) fb[i] = st_f32_to_bf16(fb_vals[i]);
    for (int i = 0; i < 12; i++) fc[i] = 7 * i - 20;
}

static StWriter* fixture_writer(void) {
    fixture_fill();
    StWriter* w = st_writer_new();
    st_writer_add_f32(w, "a.f32", fa, 2, 3, 5, 0, 0);
    int64_t sb[1] = {4};
    st_writer_add(w, "b.bf16", DTYPE_BF16, 1, sb, fb);
    st_writer_add_i32(w, "c.i32", fc, 3, 2, 3, 2, 0);
    st_writer_add(w, "d.scalar", DTYPE_F32, 0, NULL, &fd);
    int64_t se[2] = {0, 4};
    st_writer_add(w, "e.empty", DTYPE_F32, 2, se, NULL);
    st_writer_meta(w, "format", "pt");
    st_writer_meta(w, "step", "17");
    return w;
}

/* Check a loaded file against the fixture, value by value (bitwise for floats). */
static void fixture_check(const StFile* f) {
    char err[512];
    CHECK(f->n == 5, "%d tensors", f->n);
    CHECK(st_meta(f, "format") && !strcmp(st_meta(f, "format"), "pt"), "metadata format");
    CHECK(st_meta(f, "step") && !strcmp(st_meta(f, "step"), "17"), "metadata step");
    CHECK(st_meta(f, "nope") == NULL, "absent metadata");
    float a[15];
    int64_t sa[2] = {3, 5};
    CHECK(st_read_f32(f, "a.f32", a, 2, sa, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 15; i++) CHECK(a[i] == (float)i * 0.25f - 1.5f, "a[%d] = %g", i, a[i]);
    float b[4];
    int64_t sb[1] = {4};
    CHECK(st_read_f32(f, "b.bf16", b, 1, sb, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 4; i++) CHECK(b[i] == fb_vals[i], "b[%d] = %g", i, b[i]);
    int32_t c[12];
    int64_t sc[3] = {2, 3, 2};
    CHECK(st_read_i32(f, "c.i32", c, 3, sc, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 12; i++) CHECK(c[i] == 7 * i - 20, "c[%d] = %d", i, c[i]);
    float d = 0;
    CHECK(st_read_f32(f, "d.scalar", &d, 0, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(d == 42.5f, "d = %g", d);
    int64_t se[2] = {0, 4};
    CHECK(st_read_f32(f, "e.empty", NULL, 2, se, err, sizeof err) == 0, "%s", err);
    /* wrong shape, wrong dtype, missing: each a clear error naming the tensor */
    int64_t bad[2] = {5, 3};
    CHECK(st_read_f32(f, "a.f32", a, 2, bad, err, sizeof err) != 0 && strstr(err, "'a.f32' has shape (3, 5), expected (5, 3)"),
          "%s", err);
    CHECK(st_read_f32(f, "c.i32", a, 3, sc, err, sizeof err) != 0 && strstr(err, "expected F32 or BF16"), "%s", err);
    CHECK(st_read_f32(f, "zzz", a, 2, sa, err, sizeof err) != 0 && strstr(err, "'zzz' is missing"), "%s", err);
}

static void test_bf16(void) {
    /* round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1 (even);
     * 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6 -> 1 + 2^-6 (even). */
    CHECK(st_bf16_to_f32(st_f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f, "tie to even down");
    CHECK(st_bf16_to_f32(st_f32_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 1.0f / 64, "tie to even up");
    CHECK(st_bf16_to_f32(st_f32_to_bf16(1.0f + 1.0f / 256 + 1.0f / 4096)) == 1.0f + 1.0f / 128, "above half rounds up");
    float nan = 0.0f / 0.0f;
    float back = st_bf16_to_f32(st_f32_to_bf16(nan));
    CHECK(back != back, "NaN stays NaN");
}

/* A header of n one-element F32 tensors named "t<k>" (k = i, or name_of[i] when given), data zeros. */
static char* many_names_file(int n, const int* name_of, size_t* size) {
    size_t cap = (size_t)n * 80 + 64, len = 0;
    char* h = mallocCheck(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(h + len, cap - len, "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                                i ? "," : "", name_of ? name_of[i] : i, 4 * i, 4 * i + 4);
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    *size = 8 + len + 4 * (size_t)n;
    char* b = callocCheck(*size, 1);
    for (int k = 0; k < 8; k++) b[k] = (char)((uint64_t)len >> (8 * k));
    memcpy(b + 8, h, len);
    free(h);
    return b;
}

/* Duplicate names among many (the check was once a scan per tensor, O(n^2)): a unique set loads,
 * one repeated name anywhere (first and last, neighbours, middle) is refused naming it. */
static void test_many_names(void) {
    enum { N = 20000 };
    char err[512];
    size_t size;
    int* name_of = mallocCheck(sizeof(int) * N);
    for (int i = 0; i < N; i++) name_of[i] = (int)(((int64_t)i * 7919) % N); /* a permutation: 7919 is prime */
    char* b = many_names_file(N, name_of, &size);
    StFile f;
    CHECK(st_load_buffer(&f, "many.safetensors", b, size, err, sizeof err) == 0, "%d unique names refused: %s", N, err);
    if (!check_failures) {
        CHECK(f.n == N, "%d tensors read, expected %d", f.n, N);
        int found = 0; /* st_find's binary search over the names finds each one, and nothing else */
        for (int i = 0; i < N; i++) {
            char nm[32];
            snprintf(nm, sizeof nm, "t%d", i);
            const StTensor* t = st_find(&f, nm);
            found += t && !strcmp(t->name, nm) && t->begin == 4 * (size_t)((int64_t)i * 17679 % N); /* 17679 = 7919^-1 mod N */
        }
        CHECK(found == N, "st_find found %d of %d names at their offsets", found, N);
        CHECK(!st_find(&f, "t20000") && !st_find(&f, "") && !st_find(&f, "t"), "st_find of absent names");
        st_free(&f);
    }
    free(b);
    const int pairs[4][2] = {{0, N - 1}, {500, 501}, {N / 2, 3}, {N - 2, N - 1}};
    for (int p = 0; p < 4; p++) {
        int keep = name_of[pairs[p][1]];
        name_of[pairs[p][1]] = name_of[pairs[p][0]];
        b = many_names_file(N, name_of, &size);
        char want[64];
        snprintf(want, sizeof want, "tensor 't%d' appears twice", name_of[pairs[p][0]]);
        int rc = st_load_buffer(&f, "dup.safetensors", b, size, err, sizeof err);
        CHECK(rc != 0 && strstr(err, want) && strstr(err, "dup.safetensors"),
              "entries %d and %d share a name: rc %d, '%s' (expected '%s')", pairs[p][0], pairs[p][1], rc,
              rc ? err : "", want);
        if (rc == 0) st_free(&f);
        free(b);
        name_of[pairs[p][1]] = keep;
    }
    free(name_of);
}

/* Many metadata keys (a tensor-parallel shard has a slice description per tensor): st_meta finds each by
 * binary search; a key given twice is refused naming it (which description would count?). */
static void test_many_meta(void) {
    enum { K = 5000 };
    char err[512];
    for (int dup = 0; dup < 2; dup++) {
        size_t cap = (size_t)K * 40 + 256, len = 0;
        char* h = mallocCheck(cap);
        len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{");
        for (int i = 0; i < K; i++)
            len += (size_t)snprintf(h + len, cap - len, "%s\"k%d\":\"v%d\"", i ? "," : "", dup && i == K - 1 ? 17 : i, i);
        len += (size_t)snprintf(h + len, cap - len, "},\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
        while (len % 8) h[len++] = ' ';
        size_t size = 8 + len + 4;
        char* b = callocCheck(size, 1);
        for (int k = 0; k < 8; k++) b[k] = (char)((uint64_t)len >> (8 * k));
        memcpy(b + 8, h, len);
        StFile f;
        int rc = st_load_buffer(&f, "meta.safetensors", b, size, err, sizeof err);
        if (dup) {
            CHECK(rc != 0 && strstr(err, "__metadata__ key 'k17' appears twice"), "a repeated metadata key: rc %d %s", rc,
                  rc ? err : "");
            if (rc == 0) st_free(&f);
        } else {
            CHECK(rc == 0, "%d metadata keys refused: %s", K, err);
            int found = 0;
            for (int i = 0; rc == 0 && i < K; i++) {
                char key[32], val[32];
                snprintf(key, sizeof key, "k%d", i);
                snprintf(val, sizeof val, "v%d", i);
                const char* v = st_meta(&f, key);
                found += v && !strcmp(v, val);
            }
            CHECK(found == K, "st_meta found %d of %d keys", found, K);
            if (rc == 0) {
                CHECK(!st_meta(&f, "k5000") && !st_meta(&f, "") && st_find(&f, "x"), "absent keys, the tensor");
                st_free(&f);
            }
        }
        free(b);
        free(h);
    }
}

/* st_writer_defer: a tensor made at write time is written as the same bytes as one held by the caller; a fill
 * that fails fails the write with its message, and leaves neither the file nor a temporary. */
static int fill_a(void* ctx, void* buf, char* err, size_t err_len) {
    (void)err, (void)err_len;
    (*(int*)ctx)++;
    for (int i = 0; i < 15; i++) ((float*)buf)[i] = (float)i * 0.25f - 1.5f; /* the fixture's a.f32 */
    return 0;
}
static int fill_fail(void* ctx, void* buf, char* err, size_t err_len) {
    (void)buf;
    (*(int*)ctx)++;
    snprintf(err, err_len, "tensor a.f32: the source changed");
    return -1;
}
static void test_deferred(const char* dir) {
    char held[1024], made[1024], err[512];
    snprintf(held, sizeof held, "%s/st_held.safetensors", dir);
    snprintf(made, sizeof made, "%s/st_deferred.safetensors", dir);
    StWriter* w = fixture_writer();
    CHECK(st_writer_write(w, held, err, sizeof err) == 0, "%s", err);
    st_writer_free(w);
    int calls = 0;
    w = fixture_writer();
    st_writer_defer(w, "a.f32", fill_a, &calls);
    memset(fa, 0, sizeof fa); /* the caller's copy is gone: the file must hold the fill's bytes */
    CHECK(st_writer_write(w, made, err, sizeof err) == 0, "%s", err);
    st_writer_free(w);
    CHECK(calls == 1, "the fill ran %d times", calls);
    size_t n1 = 0, n2 = 0;
    char* b1 = rr_read_file(held, &n1, 1 << 20);
    char* b2 = rr_read_file(made, &n2, 1 << 20);
    CHECK(b1 && b2 && n1 == n2 && !memcmp(b1, b2, n1), "a deferred tensor's file differs from the held one's");
    free(b1);
    free(b2);
    char failed[1024];
    snprintf(failed, sizeof failed, "%s/st_failed.safetensors", dir);
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", failed, (int)getpid());
    unlink(failed); /* a run before this one's */
    calls = 0;
    w = fixture_writer();
    st_writer_defer(w, "a.f32", fill_fail, &calls);
    err[0] = 0;
    CHECK(st_writer_write(w, failed, err, sizeof err) != 0 && strstr(err, "the source changed"),
          "a failing fill: '%s'", err);
    st_writer_free(w);
    CHECK(calls == 1, "the failing fill ran %d times", calls);
    FILE* f = fopen(failed, "rb");
    FILE* t = fopen(tmp, "rb");
    CHECK(!f && !t, "a failed write left %s", f ? failed : tmp);
    if (f) fclose(f);
    if (t) fclose(t);
}

static int selftest(const char* dir) {
    test_deferred(dir);
    test_bf16();
    test_many_names();
    test_many_meta();
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/st_selftest.safetensors", dir);
    StWriter* w = fixture_writer();
    CHECK(st_writer_write(w, path, err, sizeof err) == 0, "%s", err);
    st_writer_free(w);
    StFile f;
    CHECK(st_load(&f, path, err, sizeof err) == 0, "%s", err);
    if (check_failures) return 1;
    fixture_check(&f);
    /* header length is a multiple of 8 and the header is padded with spaces */
    size_t size = 0;
    char* bytes = rr_read_file(path, &size, 1 << 20);
    CHECK(bytes && size == f.size, "read back %zu bytes", size);
    if (check_failures) return 1;
    uint64_t hl = 0;
    for (int b = 0; b < 8; b++) hl |= (uint64_t)(unsigned char)bytes[b] << (8 * b);
    CHECK(hl % 8 == 0, "header length %llu", (unsigned long long)hl);
    CHECK(f.size == 8 + hl + 15 * 4 + 4 * 2 + 12 * 4 + 4, "file size %llu", (unsigned long long)f.size);
    CHECK(f.data_off == 8 + hl, "data at %llu", (unsigned long long)f.data_off);
    st_free(&f);

    /* Every truncation of the file must be rejected with a message, never crash or pass. */
    for (size_t cut = 0; cut < size; cut++) {
        StFile g;
        int rc = st_load_buffer(&g, "cut.safetensors", bytes, cut, err, sizeof err);
        CHECK(rc != 0, "truncation to %zu bytes accepted", cut);
        if (rc == 0) st_free(&g);
        else CHECK(strstr(err, "cut.safetensors") != NULL, "message does not name the file: %s", err);
    }
    /* Trailing garbage after the last tensor is rejected too. */
    char* longer = mallocCheck(size + 3);
    memcpy(longer, bytes, size);
    memcpy(longer + size, "xyz", 3);
    StFile g;
    CHECK(st_load_buffer(&g, "long.safetensors", longer, size + 3, err, sizeof err) != 0 && strstr(err, "trailing"),
          "%s", err);
    /* Every single-byte flip of the header either loads consistently or fails with a message. */
    int flips_rejected = 0;
    for (size_t i = 0; i < 8 + hl; i++) {
        bytes[i] ^= 0x5a;
        StFile h;
        if (st_load_buffer(&h, "flip.safetensors", bytes, size, err, sizeof err) == 0) st_free(&h);
        else flips_rejected++;
        bytes[i] ^= 0x5a;
    }
    CHECK(flips_rejected > (int)hl / 2, "only %d of %llu header flips rejected", flips_rejected,
          (unsigned long long)(8 + hl));
    free(longer);
    free(bytes);
    /* missing file */
    CHECK(st_load(&g, "/nonexistent/x.safetensors", err, sizeof err) != 0 && strstr(err, "/nonexistent/x.safetensors"),
          "%s", err);
    if (check_failures) fprintf(stderr, "%d failure(s)\n", check_failures);
    else printf("safetensors selftest: ok\n");
    return check_failures ? 1 : 0;
}

int main(int argc, char** argv) {
    char err[512];
    if (argc == 3 && !strcmp(argv[1], "selftest")) return selftest(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "write")) {
        StWriter* w = fixture_writer();
        int rc = st_writer_write(w, argv[2], err, sizeof err);
        st_writer_free(w);
        if (rc) fprintf(stderr, "%s\n", err);
        return rc ? 1 : 0;
    }
    if (argc == 3 && !strcmp(argv[1], "check")) {
        StFile f;
        if (st_load(&f, argv[2], err, sizeof err) != 0) {
            fprintf(stderr, "FAIL: %s\n", err);
            return 1;
        }
        fixture_check(&f);
        st_free(&f);
        return check_failures ? 1 : 0;
    }
    if (argc == 4 && !strcmp(argv[1], "expect-error")) {
        StFile f;
        if (st_load(&f, argv[2], err, sizeof err) == 0) {
            fprintf(stderr, "FAIL: %s loaded, expected an error containing '%s'\n", argv[2], argv[3]);
            st_free(&f);
            return 1;
        }
        if (!strstr(err, argv[3])) {
            fprintf(stderr, "FAIL: error '%s' does not contain '%s'\n", err, argv[3]);
            return 1;
        }
        printf("%s\n", err);
        return 0;
    }
    fprintf(stderr, "usage: test_safetensors selftest DIR | write PATH | check PATH | expect-error PATH TEXT\n");
    return 2;
}
