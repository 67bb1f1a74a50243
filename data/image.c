/* image.c — JPEG decode/encode (TurboJPEG; CMYK and YCCK as Pillow converts them), smart_resize, Pillow-compatible antialiased bilinear
 * resize in float, normalisation and patchify. See image.h for the exact rules. */
#include "data/image.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "engine/util.h"

struct JpegCodec {
    tjhandle dec, enc;
};

JpegCodec* jpeg_codec_new(void) {
    JpegCodec* c = callocCheck(1, sizeof *c);
    c->dec = tjInitDecompress();
    if (!c->dec) rr_die("TurboJPEG: tjInitDecompress failed: %s", tjGetErrorStr2(NULL));
    return c;
}

/* After any failed call the decompressor gets a fresh handle. libjpeg-turbo 2.1's
 * tjDecompressHeader3 returns from its error handler without aborting the libjpeg object, so the
 * next header read on the same handle fails too ("two SOI markers", or the first image's stale
 * message): one bad JPEG would reject every later one. A new handle costs microseconds, and only
 * on the error path. */
static void codec_reset(JpegCodec* c) {
    tjDestroy(c->dec);
    c->dec = tjInitDecompress();
    if (!c->dec) rr_die("TurboJPEG: tjInitDecompress failed: %s", tjGetErrorStr2(NULL));
}

void jpeg_codec_free(JpegCodec* c) {
    if (!c) return;
    if (c->dec) tjDestroy(c->dec);
    if (c->enc) tjDestroy(c->enc);
    free(c);
}

/* Name what the bytes are when they are not a JPEG: the usual mistake is a PNG or GIF named .jpg.
 * The bytes themselves are never echoed: an image path can name any file (a manifest pointing at
 * /etc/passwd must not get its first bytes printed). */
static void describe_not_jpeg(const uint8_t* b, size_t n, char* err, size_t err_len) {
    const char* what = "";
    if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) what = ": a PNG file";
    else if (n >= 6 && (!memcmp(b, "GIF87a", 6) || !memcmp(b, "GIF89a", 6))) what = ": a GIF file";
    else if (n >= 2 && b[0] == 'B' && b[1] == 'M') what = ": a BMP file";
    else if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) what = ": a WebP file";
    if (n == 0) snprintf(err, err_len, "not a JPEG (empty file)");
    else snprintf(err, err_len, "not a JPEG (does not start with the JPEG marker ff d8%s)", what);
}

int jpeg_read_header(JpegCodec* c, const uint8_t* buf, size_t n, int* w, int* h, char* err, size_t err_len) {
    if (n < 2 || buf[0] != 0xFF || buf[1] != 0xD8) {
        describe_not_jpeg(buf, n, err, err_len);
        return -1;
    }
    if (n > (size_t)JPEG_MAX_BYTES) {
        snprintf(err, err_len, "JPEG of %zu bytes, above the limit of %d MiB", n, JPEG_MAX_BYTES >> 20);
        return -1;
    }
    int sub = 0, cs = 0;
    *w = *h = 0;
    if (tjDecompressHeader3(c->dec, buf, (unsigned long)n, w, h, &sub, &cs) != 0) {
        snprintf(err, err_len, "corrupt JPEG header: %s", tjGetErrorStr2(c->dec));
        codec_reset(c);
        return -1;
    }
    if (*w <= 0 || *h <= 0) {
        snprintf(err, err_len, "JPEG has an empty size %dx%d", *w, *h);
        return -1;
    }
    /* bounded here, before anything is allocated for the pixels */
    if (*w > JPEG_MAX_SIDE || *h > JPEG_MAX_SIDE || (int64_t)*w * *h > JPEG_MAX_PIXELS) {
        snprintf(err, err_len, "JPEG declares %dx%d pixels, above the limit of %d pixels (%d per side)", *w, *h,
                 JPEG_MAX_PIXELS, JPEG_MAX_SIDE);
        return -1;
    }
    return 0;
}

/* A CMYK or YCCK JPEG (libjpeg gives YCCK as CMYK) as Pillow's Image.open(f).convert("RGB"): Pillow reads
 * every 4-channel JPEG with the raw mode "CMYK;I" (Adobe's inverted polarity, assumed whether or not the
 * file has an Adobe marker: Pillow's JpegImagePlugin, "always use Adobe polarity"), so each sample is
 * inverted, then libImaging/Convert.c's cmyk2rgb: nk = 255 - k, out = nk - nk c / 255 (MULDIV255, rounded),
 * per channel. In place: n pixels of 4 bytes become n pixels of 3 (each write lands at or before its read). */
static void cmyk_to_rgb(uint8_t* px, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const uint8_t* s = px + 4 * i;
        int k = 255 - s[3], nk = 255 - k, ch[3];
        for (int j = 0; j < 3; j++) {
            int t = (255 - s[j]) * nk + 128; /* MULDIV255(c, nk) */
            int v = nk - (((t >> 8) + t) >> 8);
            ch[j] = v < 0 ? 0 : v > 255 ? 255 : v;
        }
        uint8_t* d = px + 3 * i;
        d[0] = (uint8_t)ch[0], d[1] = (uint8_t)ch[1], d[2] = (uint8_t)ch[2];
    }
}

/* Decode a JPEG whose header was read already (w x h). */
static uint8_t* decode_scaled(JpegCodec* c, const uint8_t* buf, size_t n, int w, int h, int scale, int* ow, int* oh,
                              char* err, size_t err_len) {
    RR_ASSERT(scale == 1 || scale == 2 || scale == 4 || scale == 8);
    RR_ASSERT(w > 0 && h > 0 && w <= JPEG_MAX_SIDE && h <= JPEG_MAX_SIDE && (int64_t)w * h <= JPEG_MAX_PIXELS);
    tjscalingfactor sf = {1, scale};
    int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
    /* the header was read by jpeg_read_header already: this second read (a few hundred bytes) gives the
     * colour space, which picks the output format */
    int hw, hh, sub, cs;
    if (tjDecompressHeader3(c->dec, buf, (unsigned long)n, &hw, &hh, &sub, &cs) != 0 || hw != w || hh != h) {
        snprintf(err, err_len, "corrupt JPEG header: %s", tjGetErrorStr2(c->dec));
        codec_reset(c);
        return NULL;
    }
    int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    uint8_t* rgb = mallocCheck((size_t)sw * sh * (cmyk ? 4 : 3));
    /* STOPONWARNING: libjpeg only warns on a truncated file and fills the rest with grey; such an
     * image must be rejected. LIMITSCANS: refuse progressive files with absurd scan counts. */
    int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
    if (tjDecompress2(c->dec, buf, (unsigned long)n, rgb, sw, 0, sh, cmyk ? TJPF_CMYK : TJPF_RGB, flags) != 0) {
        snprintf(err, err_len, "corrupt JPEG: %s", tjGetErrorStr2(c->dec));
        free(rgb);
        codec_reset(c);
        return NULL;
    }
    if (cmyk) cmyk_to_rgb(rgb, (size_t)sw * sh);
    *ow = sw;
    *oh = sh;
    return rgb;
}

uint8_t* jpeg_decode_rgb(JpegCodec* c, const uint8_t* buf, size_t n, int scale, int* ow, int* oh, char* err,
                         size_t err_len) {
    int w, h;
    if (jpeg_read_header(c, buf, n, &w, &h, err, err_len) != 0) return NULL;
    return decode_scaled(c, buf, n, w, h, scale, ow, oh, err, err_len);
}

int image_read_header(JpegCodec* c, const uint8_t* buf, size_t n, int* w, int* h, char* err, size_t err_len) {
    if (image_is_png(buf, n)) return png_read_header(buf, n, w, h, err, err_len);
    if (image_is_gif(buf, n)) return gif_read_header(buf, n, w, h, err, err_len);
    if (jpeg_read_header(c, buf, n, w, h, err, err_len) == 0) return 0;
    if (!strncmp(err, "not a JPEG (", 12)) { /* "not a JPEG, PNG or GIF (...)": all three are read */
        char e[256];
        snprintf(e, sizeof e, "not a JPEG, PNG or GIF (%s", err + 12);
        snprintf(err, err_len, "%s", e);
    }
    return -1;
}

uint8_t* image_decode_rgb(JpegCodec* c, const uint8_t* buf, size_t n, int scale, int* ow, int* oh, char* err,
                          size_t err_len) {
    if (image_is_png(buf, n)) return png_decode_rgb(buf, n, ow, oh, err, err_len);
    if (image_is_gif(buf, n)) return gif_decode_rgb(buf, n, ow, oh, err, err_len);
    return jpeg_decode_rgb(c, buf, n, scale, ow, oh, err, err_len);
}

/* image_decode_prep for an image whose header (w x h) was read already. */
static uint8_t* decode_prep(JpegCodec* c, const uint8_t* buf, size_t n, int w, int h, const ImagePrep* prep, int p,
                            int gh, int gw, int* ow, int* oh, char* err, size_t err_len) {
    if (image_is_png(buf, n)) return png_decode_rgb(buf, n, ow, oh, err, err_len); /* always full size */
    if (image_is_gif(buf, n)) return gif_decode_rgb(buf, n, ow, oh, err, err_len); /* always full size */
    int scale = prep && prep->kind != IMAGE_PREP_SMART ? 1 : image_dct_scale(w, h, gw * p, gh * p);
    return decode_scaled(c, buf, n, w, h, scale, ow, oh, err, err_len);
}

uint8_t* image_decode_prep(JpegCodec* c, const uint8_t* buf, size_t n, const ImagePrep* prep, int p, int gh, int gw,
                           int* ow, int* oh, char* err, size_t err_len) {
    int w, h;
    if (image_read_header(c, buf, n, &w, &h, err, err_len) != 0) return NULL;
    return decode_prep(c, buf, n, w, h, prep, p, gh, gw, ow, oh, err, err_len);
}

uint8_t* jpeg_encode_rgb(JpegCodec* c, const uint8_t* rgb, int w, int h, int quality, int progressive,
                         size_t* out_len) {
    if (!c->enc) {
        c->enc = tjInitCompress();
        if (!c->enc) rr_die("TurboJPEG: tjInitCompress failed: %s", tjGetErrorStr2(NULL));
    }
    unsigned char* out = NULL;
    unsigned long len = 0;
    int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
    /* libjpeg-turbo 2.1's TurboJPEG keeps the progressive scan script in the handle: a baseline
     * image compressed after a progressive one by the same handle gets trailing scan data that
     * libjpeg then warns about ("extraneous bytes before marker 0xd9"). A progressive image gets a
     * handle of its own. */
    tjhandle h_enc = progressive ? tjInitCompress() : c->enc;
    if (!h_enc) rr_die("TurboJPEG: tjInitCompress failed: %s", tjGetErrorStr2(NULL));
    if (tjCompress2(h_enc, rgb, w, 0, h, TJPF_RGB, &out, &len, TJSAMP_420, quality, flags) != 0)
        rr_die("TurboJPEG: tjCompress2 of a %dx%d image failed: %s", w, h, tjGetErrorStr2(h_enc));
    if (progressive) tjDestroy(h_enc);
    /* hand back a malloc'd copy so callers free() it like every other buffer here */
    uint8_t* copy = mallocCheck(len);
    memcpy(copy, out, len);
    tjFree(out);
    *out_len = len;
    return copy;
}

/* ---- smart_resize ------------------------------------------------------------------------------ */

void image_smart_resize(int h, int w, int p, int min_patches, int max_patches, int* grid_h, int* grid_w) {
    RR_ASSERT(h > 0 && w > 0 && p > 0 && min_patches >= 1 && max_patches >= min_patches);
    double min_pixels = (double)min_patches * p * p, max_pixels = (double)max_patches * p * p;
    /* rint: round half to even in the default rounding mode, as Python 3's round() */
    long hb = (long)rint((double)h / p) * p, wb = (long)rint((double)w / p) * p;
    if (hb < p) hb = p;
    if (wb < p) wb = p;
    if ((double)hb * wb > max_pixels) {
        double beta = sqrt(((double)h * w) / max_pixels);
        hb = (long)floor(((double)h / beta) / p) * p;
        wb = (long)floor(((double)w / beta) / p) * p;
        if (hb < p) hb = p;
        if (wb < p) wb = p;
    } else if ((double)hb * wb < min_pixels) {
        double beta = sqrt(min_pixels / ((double)h * w));
        hb = (long)ceil(((double)h * beta) / p) * p;
        wb = (long)ceil(((double)w * beta) / p) * p;
    }
    long gh = hb / p, gw = wb / p;
    while (gh * gw > max_patches) {
        if (gh >= gw && gh > 1) gh--;
        else gw--;
    }
    *grid_h = (int)gh;
    *grid_w = (int)gw;
}

int image_dct_scale(int w, int h, int ow, int oh) {
    int s = w / ow < h / oh ? w / ow : h / oh;
    if (s >= 8) return 8;
    if (s >= 4) return 4;
    if (s >= 2) return 2;
    return 1;
}

/* ---- resize ------------------------------------------------------------------------------------ */

/* Pillow's precompute_coeffs (libImaging/Resample.c) for the bilinear (triangle) filter, support 1:
 * for each output pixel xx, taps [bounds[2xx], bounds[2xx] + bounds[2xx+1]) with normalised weights
 * kk[xx*ksize + i]. Returns ksize. */
static int resize_coeffs(int in_size, int out_size, int** bounds_out, float** kk_out) {
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    int* bounds = mallocCheck(sizeof(int) * 2 * out_size);
    float* kk = callocCheck((size_t)out_size * ksize, sizeof(float));
    double* tmp = mallocCheck(sizeof(double) * ksize);
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            double t = fabs((x + xmin - center + 0.5) * ss);
            double wgt = t < 1.0 ? 1.0 - t : 0.0;
            tmp[x] = wgt;
            ww += wgt;
        }
        for (int x = 0; x < xmax; x++) kk[(size_t)xx * ksize + x] = (float)(ww != 0.0 ? tmp[x] / ww : tmp[x]);
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    free(tmp);
    *bounds_out = bounds;
    *kk_out = kk;
    return ksize;
}

/* 4 floats in one SSE register (GCC / clang vector extension; plain C fallback code is the same
 * arithmetic). Loads and stores go through memcpy, so no alignment is assumed. */
typedef float v4f __attribute__((vector_size(16)));
static inline v4f v4_load(const float* p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v4_store(float* p, v4f v) { memcpy(p, &v, sizeof v); }
typedef unsigned char v4u8 __attribute__((vector_size(4)));

/* bytes -> floats, 4 at a time (pmovzx + cvtdq2ps instead of a scalar conversion per byte) */
static void u8_to_f32(const uint8_t* src, float* dst, size_t n) {
    size_t x = 0;
    for (; x + 4 <= n; x += 4) {
        v4u8 b;
        memcpy(&b, src + x, 4);
        v4_store(dst + x, __builtin_convertvector(b, v4f));
    }
    for (; x < n; x++) dst[x] = (float)src[x];
}

/* The resize, streamed one output row at a time: each source row the vertical pass needs is
 * horizontally resized once into a ring of ksv rows (the vertical filter's widest window; windows
 * only move down), the vertical pass combines them into one output row, and `emit` stores it. The
 * working set is a few rows, not whole intermediate images. Same arithmetic as horizontal pass then
 * vertical pass over whole images (Pillow's order). */
typedef void (*RowEmit)(void* ctx, int yy, const float* row);

static void resize_stream(const uint8_t* rgb, int w, int h, int ow, int oh, RowEmit emit, void* ctx) {
    int *bh, *bv;
    float *kh, *kv;
    int ksh = resize_coeffs(w, ow, &bh, &kh);
    int ksv = resize_coeffs(h, oh, &bv, &kv);
    size_t row = (size_t)ow * 3;
    size_t stride = row + 4; /* +1 pixel of padding: the horizontal pass stores 4 lanes */
    float* ring = mallocCheck(sizeof(float) * stride * (size_t)ksv);
    int* ring_y = mallocCheck(sizeof(int) * (size_t)ksv);
    for (int i = 0; i < ksv; i++) ring_y[i] = -1;
    float* src_f = mallocCheck(sizeof(float) * ((size_t)w * 3 + 4));
    float* out = mallocCheck(sizeof(float) * (row + 16));
    for (int yy = 0; yy < oh; yy++) {
        int ymin = bv[2 * yy], n = bv[2 * yy + 1];
        const float* k = kv + (size_t)yy * ksv;
        for (int i = 0; i < n; i++) {
            int y = ymin + i, slot = y % ksv;
            if (ring_y[slot] == y) continue;
            ring_y[slot] = y;
            const uint8_t* src = rgb + (size_t)y * w * 3;
            u8_to_f32(src, src_f, (size_t)w * 3);
            src_f[w * 3] = 0.f;
            float* dst = ring + (size_t)slot * stride;
            for (int xx = 0; xx < ow; xx++) {
                const float* kx = kh + (size_t)xx * ksh;
                const float* sp = src_f + (size_t)bh[2 * xx] * 3;
                v4f acc = {0.f, 0.f, 0.f, 0.f};
                for (int t = 0; t < bh[2 * xx + 1]; t++) acc += kx[t] * v4_load(sp + 3 * t);
                /* lane 3 is the next pixel's red: the next output overwrites it, the last lands in
                 * the padding */
                v4_store(dst + 3 * xx, acc);
            }
        }
        size_t x = 0;
        for (; x + 16 <= row; x += 16) {
            v4f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int i = 0; i < n; i++) {
                const float* si = ring + (size_t)((ymin + i) % ksv) * stride + x;
                float ki = k[i];
                a0 += ki * v4_load(si), a1 += ki * v4_load(si + 4), a2 += ki * v4_load(si + 8), a3 += ki * v4_load(si + 12);
            }
            v4_store(out + x, a0), v4_store(out + x + 4, a1), v4_store(out + x + 8, a2), v4_store(out + x + 12, a3);
        }
        for (; x < row; x++) {
            float a = 0.f;
            for (int i = 0; i < n; i++) a += k[i] * ring[(size_t)((ymin + i) % ksv) * stride + x];
            out[x] = a;
        }
        emit(ctx, yy, out);
    }
    free(out), free(src_f), free(ring), free(ring_y);
    free(bh), free(bv), free(kh), free(kv);
}

typedef struct {
    float* img;
    size_t row;
} ImageEmit;
static void emit_image(void* ctx, int yy, const float* row) {
    ImageEmit* e = ctx;
    memcpy(e->img + (size_t)yy * e->row, row, sizeof(float) * e->row);
}

void image_resize_bilinear(const uint8_t* rgb, int w, int h, float* out, int ow, int oh) {
    ImageEmit e = {out, (size_t)ow * 3};
    resize_stream(rgb, w, h, ow, oh, emit_image, &e);
}

/* Output row yy is row (yy % p) of every patch in patch row yy / p: normalise straight into them. */
typedef struct {
    float* patches;
    int gw, p;
} PatchEmit;
static void emit_patches(void* ctx, int yy, const float* row) {
    PatchEmit* e = ctx;
    int p = e->p, r = yy / p, i = yy % p;
    size_t psz = (size_t)3 * p * p;
    for (int c = 0; c < e->gw; c++) {
        float* o = e->patches + ((size_t)r * e->gw + c) * psz + (size_t)i * 3 * p;
        const float* s = row + (size_t)c * 3 * p;
        int j = 0;
        const v4f scale = {1.0f / 127.5f, 1.0f / 127.5f, 1.0f / 127.5f, 1.0f / 127.5f}, one = {1.f, 1.f, 1.f, 1.f};
        for (; j + 4 <= 3 * p; j += 4) v4_store(o + j, v4_load(s + j) * scale - one);
        for (; j < 3 * p; j++) o[j] = s[j] * (1.0f / 127.5f) - 1.0f;
    }
}

void image_patchify(const float* img, int gh, int gw, int p, float* out) {
    int W = gw * p;
    for (int r = 0; r < gh; r++)
        for (int c = 0; c < gw; c++) {
            float* o = out + ((size_t)r * gw + c) * 3 * p * p;
            for (int i = 0; i < p; i++) {
                const float* src = img + ((size_t)(r * p + i) * W + (size_t)c * p) * 3;
                for (int j = 0; j < 3 * p; j++) *o++ = src[j] * (1.0f / 127.5f) - 1.0f;
            }
        }
}

int image_patches_into(JpegCodec* c, const uint8_t* jpeg, size_t n, int p, int min_patches, int max_patches, int gh,
                       int gw, float* out, char* err, size_t err_len) {
    int w, h, sw, sh, egh, egw;
    if (image_read_header(c, jpeg, n, &w, &h, err, err_len) != 0) return -1;
    image_smart_resize(h, w, p, min_patches, max_patches, &egh, &egw);
    if (egh != gh || egw != gw) {
        snprintf(err, err_len, "a %dx%d %s gives a %dx%d patch grid, not the expected %dx%d", w, h,
                 image_is_png(jpeg, n) ? "PNG" : image_is_gif(jpeg, n) ? "GIF" : "JPEG", egh, egw, gh, gw);
        return -1;
    }
    int oh = gh * p, ow = gw * p;
    uint8_t* rgb = decode_prep(c, jpeg, n, w, h, NULL, p, gh, gw, &sw, &sh, err, err_len);
    if (!rgb) return -1;
    PatchEmit e = {out, gw, p};
    resize_stream(rgb, sw, sh, ow, oh, emit_patches, &e);
    free(rgb);
    return 0;
}

int image_load_patches(JpegCodec* c, const uint8_t* jpeg, size_t n, int p, int min_patches, int max_patches,
                       float** patches, int* grid_h, int* grid_w, char* err, size_t err_len) {
    int w, h;
    if (image_read_header(c, jpeg, n, &w, &h, err, err_len) != 0) return -1;
    int gh, gw;
    image_smart_resize(h, w, p, min_patches, max_patches, &gh, &gw);
    float* out = mallocCheck(sizeof(float) * (size_t)gh * gw * 3 * p * p);
    if (image_patches_into(c, jpeg, n, p, min_patches, max_patches, gh, gw, out, err, err_len) != 0) {
        free(out);
        return -1;
    }
    *patches = out;
    *grid_h = gh;
    *grid_w = gw;
    return 0;
}

/* ---- LLaVA-1.5's preprocessing (image.h) -------------------------------------------------------- */

const double image_clip_mean[3] = {0.48145466, 0.4578275, 0.40821073};
const double image_clip_std[3] = {0.26862954, 0.26130258, 0.27577711};

int image_prep_parse(const char* name, ImagePrepKind* kind) {
    if (!strcmp(name, "smart")) *kind = IMAGE_PREP_SMART;
    else if (!strcmp(name, "llava")) *kind = IMAGE_PREP_LLAVA;
    else if (!strcmp(name, "anyres")) *kind = IMAGE_PREP_ANYRES;
    else return -1;
    return 0;
}

const char* image_prep_name(ImagePrepKind kind) {
    return kind == IMAGE_PREP_LLAVA ? "llava" : kind == IMAGE_PREP_ANYRES ? "anyres" : "smart";
}

void image_expand2square(const uint8_t* rgb, int w, int h, uint8_t* out) {
    int side = w > h ? w : h, x0 = (side - w) / 2, y0 = (side - h) / 2;
    uint8_t bg[3];
    for (int ch = 0; ch < 3; ch++) bg[ch] = (uint8_t)(int)(image_clip_mean[ch] * 255); /* LLaVA: int(x * 255) */
    for (size_t i = 0; i < (size_t)side * side; i++) memcpy(out + 3 * i, bg, 3);
    for (int y = 0; y < h; y++) memcpy(out + ((size_t)(y + y0) * side + x0) * 3, rgb + (size_t)y * w * 3, (size_t)w * 3);
}

/* Pillow's libImaging/Resample.c for 8-bit images: bicubic_filter, precompute_coeffs,
 * normalize_coeffs_8bpc (PRECISION_BITS = 32 - 8 - 2) and the two passes with clip8. */
#define PIL_PRECISION_BITS (32 - 8 - 2)

static double pil_bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* Coefficients of out_n outputs from in_n inputs: bounds (xmin, count) and ksize fixed-point weights each. */
static int pil_coeffs(int in_n, int out_n, int** bounds, int32_t** kk) {
    double scale = (double)in_n / out_n, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double* pre = mallocCheck(sizeof(double) * (size_t)out_n * ksize);
    *bounds = mallocCheck(sizeof(int) * 2 * (size_t)out_n);
    *kk = mallocCheck(sizeof(int32_t) * (size_t)out_n * ksize);
    for (int xx = 0; xx < out_n; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_n) xmax = in_n;
        xmax -= xmin;
        double* k = pre + (size_t)xx * ksize;
        int x;
        for (x = 0; x < xmax; x++) {
            double wv = pil_bicubic((x + xmin - center + 0.5) * ss);
            k[x] = wv;
            ww += wv;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0) k[x] /= ww;
        for (; x < ksize; x++) k[x] = 0;
        (*bounds)[xx * 2] = xmin;
        (*bounds)[xx * 2 + 1] = xmax;
    }
    for (size_t i = 0; i < (size_t)out_n * ksize; i++)
        (*kk)[i] = pre[i] < 0 ? (int32_t)(-0.5 + pre[i] * (1 << PIL_PRECISION_BITS))
                              : (int32_t)(0.5 + pre[i] * (1 << PIL_PRECISION_BITS));
    free(pre);
    return ksize;
}

static uint8_t pil_clip8(int64_t in) {
    if (in >= ((int64_t)255 << PIL_PRECISION_BITS)) return 255;
    if (in <= 0) return 0;
    return (uint8_t)(in >> PIL_PRECISION_BITS);
}

void image_resize_bicubic_u8(const uint8_t* rgb, int w, int h, uint8_t* out, int ow, int oh) {
    /* horizontal pass (Pillow skips a pass whose size does not change) */
    const uint8_t* src = rgb;
    uint8_t* mid = NULL;
    if (ow != w) {
        int *b;
        int32_t* kk;
        int ks = pil_coeffs(w, ow, &b, &kk);
        mid = mallocCheck((size_t)ow * h * 3);
        for (int y = 0; y < h; y++)
            for (int xx = 0; xx < ow; xx++) {
                const int32_t* k = kk + (size_t)xx * ks;
                int xmin = b[xx * 2], xmax = b[xx * 2 + 1];
                for (int ch = 0; ch < 3; ch++) {
                    int64_t ss = (int64_t)1 << (PIL_PRECISION_BITS - 1);
                    for (int x = 0; x < xmax; x++) ss += (int64_t)rgb[((size_t)y * w + x + xmin) * 3 + ch] * k[x];
                    mid[((size_t)y * ow + xx) * 3 + ch] = pil_clip8(ss);
                }
            }
        free(b), free(kk);
        src = mid;
    }
    if (oh != h) {
        int *b;
        int32_t* kk;
        int ks = pil_coeffs(h, oh, &b, &kk);
        for (int yy = 0; yy < oh; yy++) {
            const int32_t* k = kk + (size_t)yy * ks;
            int ymin = b[yy * 2], ymax = b[yy * 2 + 1];
            for (int x = 0; x < ow; x++)
                for (int ch = 0; ch < 3; ch++) {
                    int64_t ss = (int64_t)1 << (PIL_PRECISION_BITS - 1);
                    for (int y = 0; y < ymax; y++) ss += (int64_t)src[((size_t)(y + ymin) * ow + x) * 3 + ch] * k[y];
                    out[((size_t)yy * ow + x) * 3 + ch] = pil_clip8(ss);
                }
        }
        free(b), free(kk);
    } else {
        memcpy(out, src, (size_t)ow * oh * 3);
    }
    free(mid);
}

void image_prep_grid(const ImagePrep* prep, int h, int w, int p, int min_patches, int max_patches, int* grid_h,
                     int* grid_w) {
    if (prep && prep->kind == IMAGE_PREP_LLAVA) {
        *grid_h = *grid_w = prep->size / p;
        return;
    }
    if (prep && prep->kind == IMAGE_PREP_ANYRES) { /* the tile grid (anyres_layout; bad settings give 0 x 0) */
        AnyresLayout l;
        char e[256];
        if (anyres_layout(h, w, &prep->pins, prep->size, p, ANYRES_SELECT_DEFAULT, &l, e, sizeof e) != 0) l.rows = l.cols = 0;
        *grid_h = l.rows, *grid_w = l.cols;
        return;
    }
    image_smart_resize(h, w, p, min_patches, max_patches, grid_h, grid_w);
}
