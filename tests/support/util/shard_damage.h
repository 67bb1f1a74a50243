/* shard_damage.h — a shard whose frame is intact but whose image does not decode, written from the shard
 * format (data/shard.h) for tests: a copy of a shard whose sample `which` has image 0 cut inside its pixel
 * data. The header (size, so the index's grid) and the frame (zstd checksum, payload layout, index entry)
 * stay intact; only the decode fails: a JPEG ends after a quarter of its entropy-coded data (libjpeg:
 * "premature end of data segment"), a PNG's first IDAT chunk has its CRC broken. Header-only, for tests. */
#ifndef RRFP_TESTS_SHARD_DAMAGE_H
#define RRFP_TESTS_SHARD_DAMAGE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "data/shard.h"
#include "engine/util.h"

/* The damaged bytes (malloc'd), or NULL when the image has no pixel data to cut. */
static inline uint8_t* shard_damage_image(const uint8_t* b, size_t n, size_t* out_n) {
    if (image_is_png(b, n)) {
        for (size_t i = 8; i + 12 <= n;) {
            size_t len = (size_t)b[i] << 24 | (size_t)b[i + 1] << 16 | (size_t)b[i + 2] << 8 | b[i + 3];
            if (i + 12 + len > n) break;
            if (!memcmp(b + i + 4, "IDAT", 4)) {
                uint8_t* o = mallocCheck(n);
                memcpy(o, b, n);
                o[i + 8 + len] ^= 0xFF; /* the CRC's first byte */
                *out_n = n;
                return o;
            }
            i += 12 + len;
        }
        return NULL;
    }
    /* a JPEG: the first start-of-scan segment (ff da, a 2-byte length), then the entropy-coded data */
    for (size_t i = 2; i + 4 < n; i++) {
        if (b[i] != 0xFF || b[i + 1] != 0xDA) continue;
        size_t data = i + 2 + ((size_t)b[i + 2] << 8 | b[i + 3]);
        if (data >= n) return NULL;
        size_t keep = data + (n - data) / 4;
        uint8_t* o = mallocCheck(keep + 2);
        memcpy(o, b, keep);
        o[keep] = 0xFF, o[keep + 1] = 0xD9; /* EOI right after the cut */
        *out_n = keep + 2;
        return o;
    }
    return NULL;
}

/* Copy shard `in` to `out` (a temporary name, renamed) with sample `which`'s image 0 damaged. Returns 0, or
 * -1 with the reason in err. */
static inline int shard_copy_damaged(const char* in, const char* out, uint64_t which, char* err, size_t err_len) {
    Shard s;
    if (shard_open(in, &s, err, err_len) != 0) return -1;
    int rc = 0;
    if (which >= s.n || s.entries[which].n_images < 1) {
        snprintf(err, err_len, "%s: sample %llu does not exist or has no image", in, (unsigned long long)which);
        shard_close(&s);
        return -1;
    }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%.1000s.tmp", out);
    ShardWriter* w = shard_writer_open(tmp, &s.info, err, err_len);
    if (!w) {
        shard_close(&s);
        return -1;
    }
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    for (uint64_t i = 0; i < s.n && rc == 0; i++) {
        const ShardEntry* e = &s.entries[i];
        ShardSample ss;
        if (shard_read_sample(&s, i, dctx, &ss, err, err_len) != 0) {
            rc = -1;
            break;
        }
        ShardSampleIn si = {.id = s.ids + e->id_off, .n_tokens = ss.n_tokens, .ids = ss.ids, .mask = ss.mask,
                            .n_supervised = (int)e->n_supervised, .n_images = ss.n_images};
        for (int k = 0; k < ss.n_images; k++)
            si.jpeg[k] = ss.jpeg[k], si.jpeg_len[k] = ss.jpeg_len[k], si.img[k] = s.images[e->image0 + k];
        uint8_t* bad = NULL;
        if (i == which) {
            bad = shard_damage_image(ss.jpeg[0], ss.jpeg_len[0], &si.jpeg_len[0]);
            if (!bad) {
                snprintf(err, err_len, "%s sample %llu: image 0 has no pixel data to cut", in, (unsigned long long)i);
                rc = -1;
            }
            si.jpeg[0] = bad;
        }
        if (rc == 0) rc = shard_writer_add(w, &si, err, err_len);
        free(bad);
        shard_sample_free(&ss);
    }
    ZSTD_freeDCtx(dctx);
    shard_close(&s);
    if (rc != 0) {
        shard_writer_abort(w);
        return -1;
    }
    if (shard_writer_close(w, err, err_len) != 0) return -1;
    if (rename(tmp, out) != 0) {
        snprintf(err, err_len, "cannot rename %.500s to %.500s", tmp, out);
        return -1;
    }
    return 0;
}

#endif
