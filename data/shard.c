/* shard.c — .rrs shard writer and reader (format in shard.h). The reader never trusts a byte: every
 * count and offset is checked against the file before use, so a damaged or hostile shard gives an
 * error message, never a crash (the libFuzzer target tests/fuzz/fuzz_shard.c holds it to that). */
#include "data/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/util.h"

/* ---- little-endian helpers ---- */
static void put_u16(uint8_t* p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_u32(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t get_u64(const uint8_t* p) { return (uint64_t)get_u32(p) | ((uint64_t)get_u32(p + 4) << 32); }

typedef struct {
    uint8_t* p;
    size_t n, cap;
} Buf;
static void buf_put(Buf* b, const void* d, size_t n) {
    if (b->n + n > b->cap) {
        while (b->n + n > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
        b->p = reallocCheck(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

/* ---- writer ---- */

struct ShardWriter {
    char path[1024];
    int fd;
    ShardInfo info;
    uint64_t offset, count;
    Buf index;
    ZSTD_CCtx* cctx;
    ShardFrame frame; /* shard_writer_add's */
};

static int write_all(int fd, const void* d, size_t n) {
    const uint8_t* p = d;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* pwrite all n bytes at off (a short pwrite, which NFS and a signal can give, writes the rest). */
static int pwrite_all(int fd, const void* d, size_t n, off_t off) {
    const uint8_t* p = d;
    while (n) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w, n -= (size_t)w, off += w;
    }
    return 0;
}

ShardWriter* shard_writer_open(const char* path, const ShardInfo* info, char* err, size_t err_len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, err_len, "cannot create '%s': %s", path, strerror(errno));
        return NULL;
    }
    ShardWriter* w = callocCheck(1, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    w->fd = fd;
    w->info = *info;
    /* the header is written last, once the index offset is known; reserve its bytes */
    uint8_t zero[SHARD_HEADER_SIZE] = {0};
    if (write_all(fd, zero, sizeof zero) != 0) {
        snprintf(err, err_len, "cannot write '%s': %s", path, strerror(errno));
        close(fd);
        unlink(path);
        free(w);
        return NULL;
    }
    w->offset = SHARD_HEADER_SIZE;
    w->cctx = shard_cctx_new();
    return w;
}

ZSTD_CCtx* shard_cctx_new(void) {
    ZSTD_CCtx* c = ZSTD_createCCtx();
    if (!c) rr_die("zstd: cannot create a compression context (out of memory)");
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1);
    return c;
}

int shard_frame_make(ZSTD_CCtx* cctx, const ShardSampleIn* s, ShardFrame* f, char* err, size_t err_len) {
    RR_ASSERT(s->n_images >= 0 && s->n_images <= SHARD_MAX_IMAGES && s->n_tokens >= 0);
    Buf payload = {f->payload, 0, f->payload_cap};
    uint8_t hdr[12];
    memcpy(hdr, "RRSF", 4);
    put_u32(hdr + 4, (uint32_t)s->n_tokens);
    put_u32(hdr + 8, (uint32_t)s->n_images);
    buf_put(&payload, hdr, 12);
    for (int i = 0; i < s->n_tokens; i++) {
        uint8_t b[4];
        put_u32(b, (uint32_t)s->ids[i]);
        buf_put(&payload, b, 4);
    }
    buf_put(&payload, s->mask, (size_t)s->n_tokens);
    for (int i = 0; i < s->n_images; i++) {
        uint8_t b[4];
        put_u32(b, (uint32_t)s->jpeg_len[i]);
        buf_put(&payload, b, 4);
    }
    for (int i = 0; i < s->n_images; i++) buf_put(&payload, s->jpeg[i], s->jpeg_len[i]);
    f->payload = payload.p, f->payload_cap = payload.cap;

    size_t bound = ZSTD_compressBound(payload.n);
    if (f->frame_cap < bound) {
        f->frame_cap = bound;
        f->frame = reallocCheck(f->frame, bound);
    }
    size_t fs = ZSTD_compress2(cctx, f->frame, bound, payload.p, payload.n);
    if (ZSTD_isError(fs)) rr_die("zstd: compressing sample '%s' failed: %s", s->id, ZSTD_getErrorName(fs));
    if (fs > UINT32_MAX) {
        snprintf(err, err_len, "sample '%s' is %zu bytes compressed, more than a shard entry holds", s->id, fs);
        return -1;
    }
    f->frame_n = fs;
    return 0;
}

void shard_frame_free(ShardFrame* f) {
    free(f->frame), free(f->payload);
    memset(f, 0, sizeof *f);
}

int shard_writer_add_frame(ShardWriter* w, const ShardSampleIn* s, const ShardFrame* f, char* err, size_t err_len) {
    size_t fs = f->frame_n;
    if (write_all(w->fd, f->frame, fs) != 0) {
        snprintf(err, err_len, "cannot write '%s': %s", w->path, strerror(errno));
        return -1;
    }
    size_t idl = strlen(s->id);
    if (idl > 65535) idl = 65535;
    uint8_t e[28];
    put_u64(e, w->offset);
    put_u32(e + 8, (uint32_t)fs);
    put_u32(e + 12, (uint32_t)s->n_tokens);
    put_u32(e + 16, (uint32_t)s->n_supervised);
    put_u16(e + 20, (uint16_t)s->n_images);
    put_u16(e + 22, (uint16_t)idl);
    buf_put(&w->index, e, 24);
    buf_put(&w->index, s->id, idl);
    for (int i = 0; i < s->n_images; i++) {
        uint8_t b[8];
        put_u16(b, s->img[i].w);
        put_u16(b + 2, s->img[i].h);
        put_u16(b + 4, s->img[i].grid_h);
        put_u16(b + 6, s->img[i].grid_w);
        buf_put(&w->index, b, 8);
    }
    w->offset += fs;
    w->count++;
    return 0;
}

int shard_writer_add(ShardWriter* w, const ShardSampleIn* s, char* err, size_t err_len) {
    if (shard_frame_make(w->cctx, s, &w->frame, err, err_len) != 0) return -1;
    return shard_writer_add_frame(w, s, &w->frame, err, err_len);
}

uint64_t shard_writer_bytes(const ShardWriter* w) { return w->offset + w->index.n; }
uint64_t shard_writer_count(const ShardWriter* w) { return w->count; }

static void writer_release(ShardWriter* w) {
    ZSTD_freeCCtx(w->cctx);
    free(w->index.p);
    shard_frame_free(&w->frame);
    free(w);
}

void shard_writer_abort(ShardWriter* w) {
    if (!w) return;
    close(w->fd);
    unlink(w->path);
    writer_release(w);
}

int shard_writer_close(ShardWriter* w, char* err, size_t err_len) {
    uint8_t h[SHARD_HEADER_SIZE] = {0};
    int rec = w->info.prep != 0 || w->info.chat_template != 0;
    int anyres = w->info.prep == 2;
    if (anyres) { /* version 3: the grid pinpoints, then their count, before the record */
        for (int i = 0; i < w->info.pins.n; i++) {
            uint8_t q[8];
            put_u32(q, (uint32_t)w->info.pins.hw[i][0]);
            put_u32(q + 4, (uint32_t)w->info.pins.hw[i][1]);
            buf_put(&w->index, q, 8);
        }
        uint8_t q[4];
        put_u32(q, (uint32_t)w->info.pins.n);
        buf_put(&w->index, q, 4);
    }
    if (rec) { /* version 2: the record of the preprocessing and the template ends the index */
        uint8_t t[16] = {'I', 'P', 'R', 'P'};
        put_u32(t + 4, w->info.prep);
        put_u32(t + 8, w->info.prep ? w->info.prep_size : 0);
        put_u32(t + 12, w->info.chat_template);
        buf_put(&w->index, t, 16);
    }
    memcpy(h, SHARD_MAGIC, 8);
    put_u32(h + 8, anyres ? SHARD_VERSION_ANYRES : rec ? SHARD_VERSION_PREP : SHARD_VERSION);
    put_u32(h + 12, SHARD_HEADER_SIZE);
    put_u64(h + 16, w->count);
    put_u64(h + 24, w->info.tokenizer_hash);
    put_u64(h + 32, w->offset);
    put_u64(h + 40, w->index.n);
    put_u32(h + 48, (uint32_t)w->info.image_token);
    put_u32(h + 52, w->info.patch);
    put_u32(h + 56, w->info.min_patches);
    put_u32(h + 60, w->info.max_patches);
    put_u64(h + 64, rr_fnv1a64(w->index.p, w->index.n));
    put_u64(h + 72, rr_fnv1a64(h, 72));
    int ok = write_all(w->fd, w->index.p, w->index.n) == 0 && pwrite_all(w->fd, h, sizeof h, 0) == 0 &&
             fsync(w->fd) == 0;
    int e = errno;
    if (close(w->fd) != 0 && ok) ok = 0, e = errno; /* NFS reports a write-back error here */
    if (!ok) {
        snprintf(err, err_len, "cannot write '%s': %s", w->path, strerror(e));
        unlink(w->path);
        writer_release(w);
        return -1;
    }
    writer_release(w);
    return 0;
}

/* ---- reader ---- */

static int shard_pread(const Shard* s, void* dst, size_t n, uint64_t off) {
    if (off > s->file_size || n > s->file_size - off) return -1;
    if (s->mem) {
        memcpy(dst, s->mem + off, n);
        return 0;
    }
    uint8_t* p = dst;
    while (n) {
        ssize_t r = pread(s->fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

static int shard_parse(Shard* s, char* err, size_t err_len) {
    const char* P = s->path;
    uint8_t h[SHARD_HEADER_SIZE];
    if (s->file_size < SHARD_HEADER_SIZE || shard_pread(s, h, sizeof h, 0) != 0) {
        snprintf(err, err_len, "%s: truncated shard (%llu bytes, shorter than the %d-byte header)", P,
                 (unsigned long long)s->file_size, SHARD_HEADER_SIZE);
        return -1;
    }
    if (memcmp(h, SHARD_MAGIC, 8) != 0) {
        snprintf(err, err_len, "%s: not an rrfp-mm shard (wrong magic; expected \"%s\" at offset 0)", P, SHARD_MAGIC);
        return -1;
    }
    uint32_t version = get_u32(h + 8);
    if (version != SHARD_VERSION && version != SHARD_VERSION_PREP && version != SHARD_VERSION_ANYRES) {
        snprintf(err, err_len, "%s: shard version %u, this build reads versions %d to %d (re-pack with this rrfp-mm)",
                 P, version, SHARD_VERSION, SHARD_VERSION_ANYRES);
        return -1;
    }
    if (get_u64(h + 72) != rr_fnv1a64(h, 72) || get_u32(h + 12) != SHARD_HEADER_SIZE) {
        snprintf(err, err_len, "%s: damaged shard header (header checksum mismatch)", P);
        return -1;
    }
    s->n = get_u64(h + 16);
    s->info.tokenizer_hash = get_u64(h + 24);
    uint64_t ioff = get_u64(h + 32), isz = get_u64(h + 40);
    s->info.image_token = (int32_t)get_u32(h + 48);
    s->info.patch = get_u32(h + 52);
    s->info.min_patches = get_u32(h + 56);
    s->info.max_patches = get_u32(h + 60);
    if (ioff < SHARD_HEADER_SIZE || ioff > s->file_size || isz > s->file_size - ioff) {
        snprintf(err, err_len, "%s: truncated shard (%llu bytes; the index runs to byte %llu)", P,
                 (unsigned long long)s->file_size, (unsigned long long)(ioff + isz));
        return -1;
    }
    if (ioff + isz != s->file_size) {
        snprintf(err, err_len, "%s: %llu unexpected bytes after the index", P,
                 (unsigned long long)(s->file_size - ioff - isz));
        return -1;
    }
    /* every entry takes at least 24 bytes: bounds n before allocating for it */
    if (s->n > isz / 24) {
        snprintf(err, err_len, "%s: damaged header (%llu samples cannot fit a %llu-byte index)", P,
                 (unsigned long long)s->n, (unsigned long long)isz);
        return -1;
    }
    uint8_t* ix = mallocCheck(isz ? isz : 1);
    if (shard_pread(s, ix, isz, ioff) != 0) {
        snprintf(err, err_len, "%s: cannot read the index: %s", P, strerror(errno));
        free(ix);
        return -1;
    }
    if (rr_fnv1a64(ix, isz) != get_u64(h + 64)) {
        snprintf(err, err_len, "%s: damaged index (checksum mismatch); the shard's samples cannot be located", P);
        free(ix);
        return -1;
    }
    s->info.prep = s->info.prep_size = s->info.chat_template = 0;
    memset(&s->info.pins, 0, sizeof s->info.pins);
    if (version == SHARD_VERSION_PREP || version == SHARD_VERSION_ANYRES) { /* the record at the index's end */
        uint32_t kind = isz >= 16 ? get_u32(ix + isz - 12) : 0, side = isz >= 16 ? get_u32(ix + isz - 8) : 0;
        int any = version == SHARD_VERSION_ANYRES;
        if (isz < 16 || memcmp(ix + isz - 16, "IPRP", 4) != 0 || (any ? kind != 2 : kind > 1) ||
            (kind >= 1 ? side < 1 || side > 16384 : side != 0) || get_u32(ix + isz - 4) > SHARD_MAX_TEMPLATE) {
            snprintf(err, err_len, "%s: damaged index (version 2 without a valid record of the image preprocessing "
                     "and chat template)", P);
            free(ix);
            return -1;
        }
        s->info.prep = kind;
        s->info.prep_size = side;
        s->info.chat_template = get_u32(ix + isz - 4);
        isz -= 16;
        if (any) { /* the grid pinpoints: count, then the pairs, each a multiple of the tile side */
            uint32_t np = isz >= 4 ? get_u32(ix + isz - 4) : 0;
            char e[256];
            if (np < 1 || np > ANYRES_MAX_PINPOINTS || isz < 4 + 8 * (size_t)np) goto bad_pins;
            s->info.pins.n = (int)np;
            for (uint32_t i = 0; i < np; i++) {
                uint32_t ph = get_u32(ix + isz - 4 - 8 * np + 8 * i), pw = get_u32(ix + isz - 4 - 8 * np + 8 * i + 4);
                if (ph > ANYRES_MAX_SIDE || pw > ANYRES_MAX_SIDE) goto bad_pins;
                s->info.pins.hw[i][0] = (int)ph, s->info.pins.hw[i][1] = (int)pw;
            }
            if (anyres_pinpoints_check(&s->info.pins, (int)side, e, sizeof e) != 0) {
            bad_pins:
                snprintf(err, err_len, "%s: damaged index (version 3 without valid grid pinpoints for --image-preprocess "
                         "anyres)", P);
                free(ix);
                return -1;
            }
            isz -= 4 + 8 * (size_t)np;
        }
    }
    s->entries = callocCheck(s->n ? s->n : 1, sizeof(ShardEntry));
    size_t n_img = 0, id_bytes = 0, pos = 0;
    /* two passes: sizes, then fill (the index is small next to the frames) */
    for (int pass = 0; pass < 2; pass++) {
        pos = 0;
        size_t ki = 0, kid = 0;
        uint64_t prev_end = SHARD_HEADER_SIZE;
        for (uint64_t i = 0; i < s->n; i++) {
            if (isz - pos < 24) goto bad;
            const uint8_t* e = ix + pos;
            uint32_t ni = get_u16(e + 20), idl = get_u16(e + 22);
            if (ni > SHARD_MAX_IMAGES || isz - pos - 24 < (size_t)idl + 8 * (size_t)ni) goto bad;
            if (pass == 1) {
                ShardEntry* en = &s->entries[i];
                en->offset = get_u64(e);
                en->size = get_u32(e + 8);
                en->n_tokens = get_u32(e + 12);
                en->n_supervised = get_u32(e + 16);
                en->n_images = ni;
                en->image0 = (uint32_t)ki;
                en->id_off = (uint32_t)kid;
                /* frames are contiguous, in order, between the header and the index */
                if (en->offset != prev_end || en->size > ioff - en->offset || en->n_supervised > en->n_tokens ||
                    en->n_tokens > (1u << 28))
                    goto bad;
                prev_end = en->offset + en->size;
                memcpy(s->ids + kid, e + 24, idl);
                s->ids[kid + idl] = 0;
                for (uint32_t k = 0; k < ni; k++) {
                    const uint8_t* m = e + 24 + idl + 8 * k;
                    ShardImage* im = &s->images[ki + k];
                    im->w = get_u16(m), im->h = get_u16(m + 2), im->grid_h = get_u16(m + 4), im->grid_w = get_u16(m + 6);
                    if (!im->w || !im->h || !im->grid_h || !im->grid_w) goto bad;
                }
            }
            ki += ni;
            kid += idl + 1;
            pos += 24 + idl + 8 * (size_t)ni;
        }
        if (pass == 0) {
            if (pos != isz) goto bad;
            n_img = ki, id_bytes = kid;
            s->images = callocCheck(n_img ? n_img : 1, sizeof(ShardImage));
            s->ids = callocCheck(id_bytes ? id_bytes : 1, 1);
        } else if (prev_end != ioff) {
            goto bad;
        }
    }
    free(ix);
    return 0;
bad:
    snprintf(err, err_len, "%s: damaged index (entry layout inconsistent at byte %zu of the index)", P, pos);
    free(ix);
    return -1;
}

int shard_open(const char* path, Shard* s, char* err, size_t err_len) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    /* opened without waiting: a FIFO named like a shard would block open() forever (and a training
     * job catches SIGTERM); only a regular file is a shard */
    s->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (s->fd < 0 || fstat(s->fd, &st) != 0) {
        snprintf(err, err_len, "%s: cannot open the shard: %s", path, strerror(errno));
        if (s->fd >= 0) close(s->fd);
        s->fd = -1;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, err_len, "%s: cannot open the shard: %s, not a regular file", path,
                 S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
        close(s->fd);
        s->fd = -1;
        return -1;
    }
    s->file_size = (uint64_t)st.st_size;
    if (shard_parse(s, err, err_len) != 0) {
        shard_close(s);
        return -1;
    }
    return 0;
}

int shard_open_mem(const uint8_t* buf, size_t n, const char* name, Shard* s, char* err, size_t err_len) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", name);
    s->fd = -1;
    s->mem = buf;
    s->file_size = n;
    if (shard_parse(s, err, err_len) != 0) {
        shard_close(s);
        return -1;
    }
    return 0;
}

void shard_close(Shard* s) {
    if (s->fd >= 0) close(s->fd);
    free(s->entries), free(s->images), free(s->ids);
    s->entries = NULL, s->images = NULL, s->ids = NULL;
    s->fd = -1;
}

/* Largest payload accepted: a sample must fit a microbatch and its JPEGs; 1 GiB is far above any. */
#define SHARD_MAX_PAYLOAD (1ull << 30)

int shard_read_sample(const Shard* s, uint64_t i, ZSTD_DCtx* dctx, ShardSample* out, char* err, size_t err_len) {
    memset(out, 0, sizeof *out);
    RR_ASSERT(i < s->n);
    const ShardEntry* e = &s->entries[i];
    uint8_t* fr = mallocCheck(e->size ? e->size : 1);
    if (shard_pread(s, fr, e->size, e->offset) != 0) {
        snprintf(err, err_len, "cannot read the frame (%u bytes at offset %llu): %s", e->size,
                 (unsigned long long)e->offset, errno ? strerror(errno) : "short read");
        free(fr);
        return -1;
    }
    size_t fcs = ZSTD_findFrameCompressedSize(fr, e->size);
    unsigned long long cs = ZSTD_getFrameContentSize(fr, e->size);
    if (ZSTD_isError(fcs) || fcs != e->size || cs == ZSTD_CONTENTSIZE_ERROR || cs == ZSTD_CONTENTSIZE_UNKNOWN ||
        cs > SHARD_MAX_PAYLOAD || cs < 12) {
        snprintf(err, err_len, "corrupt frame (not one complete zstd frame of the indexed size)");
        free(fr);
        return -1;
    }
    uint8_t* p = mallocCheck((size_t)cs);
    size_t got = ZSTD_decompressDCtx(dctx, p, (size_t)cs, fr, e->size);
    free(fr);
    if (ZSTD_isError(got) || got != cs) {
        snprintf(err, err_len, "corrupt frame (zstd: %s)", ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short content");
        free(p);
        return -1;
    }
    uint32_t nt = get_u32(p + 4), ni = get_u32(p + 8);
    if (memcmp(p, "RRSF", 4) != 0 || nt != e->n_tokens || ni != e->n_images) {
        snprintf(err, err_len, "frame does not match its index entry (tokens %u vs %u, images %u vs %u)", nt,
                 e->n_tokens, ni, e->n_images);
        free(p);
        return -1;
    }
    size_t need = 12 + 5 * (size_t)nt + 4 * (size_t)ni;
    if (need > cs) goto bad_layout;
    size_t jpeg_total = 0;
    for (uint32_t k = 0; k < ni; k++) {
        out->jpeg_len[k] = get_u32(p + 12 + 5 * (size_t)nt + 4 * k);
        jpeg_total += out->jpeg_len[k];
    }
    if (need + jpeg_total != cs) goto bad_layout;
    out->buf = p;
    out->n_tokens = (int)nt;
    out->n_images = (int)ni;
    out->ids = (int32_t*)(p + 12); /* 4-byte aligned: malloc'd buffer + 12; stored little-endian (x86) */
    out->mask = p + 12 + 4 * (size_t)nt;
    size_t off = need;
    for (uint32_t k = 0; k < ni; k++) {
        out->jpeg[k] = p + off;
        off += out->jpeg_len[k];
    }
    int images_seen = 0;
    for (uint32_t k = 0; k < nt; k++) {
        if (out->mask[k] > 1 || out->ids[k] < 0) goto bad_values;
        images_seen += out->ids[k] == s->info.image_token;
    }
    if (images_seen != (int)ni) goto bad_values;
    return 0;
bad_layout:
    snprintf(err, err_len, "corrupt payload (section sizes do not add up to the frame's %llu bytes)", cs);
    free(p);
    memset(out, 0, sizeof *out);
    return -1;
bad_values:
    snprintf(err, err_len, "corrupt payload (token ids, mask or <image> count out of range)");
    free(p);
    memset(out, 0, sizeof *out);
    return -1;
}

void shard_sample_free(ShardSample* s) {
    free(s->buf);
    memset(s, 0, sizeof *s);
}
