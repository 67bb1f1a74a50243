/* gif.c — GIF images for pack, the loader and generate (data/image.h), with giflib. LLaVA's mixes hold
 * GIFs, often under .jpg names; a shard keeps the file's own bytes, and every reader decodes them the way
 * Pillow's Image.open(f).convert("RGB") does (docs/data.md "Image formats"):
 *   - the first frame only (an animated GIF is its first frame, as Pillow's open gives it);
 *   - the image is the logical screen, grown to hold the first frame where the frame reaches past it
 *     (a zero-size screen is the frame's own extent);
 *   - outside the frame every pixel is palette index 0, or the transparency index of a graphic control
 *     extension before the frame (Pillow fills the frame's canvas with it);
 *   - index i is the frame's local colour table, else the global one, entry i; an index past the table
 *     (or any index of a GIF with no table) is the grey (i, i, i), Pillow's palette ramp;
 *   - transparency is not composited: a transparent pixel is its palette colour; interlaced rows are put
 *     back in order.
 *
 * Poison-proofing, as for JPEG and PNG: the screen and the first frame's descriptor are read and the
 * resulting size checked against JPEG_MAX_SIDE / JPEG_MAX_PIXELS before anything is allocated for pixels
 * (giflib itself allocates only its colour tables and a fixed LZW state). Damage giflib finds (a cut file,
 * a bad LZW code, a frame whose data ends early, no frame at all) is an error with giflib's reason, never a
 * half-decoded image. The bytes are never quoted in a message. */
#include <gif_lib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "engine/util.h"

int image_is_gif(const uint8_t* buf, size_t n) {
    return n >= 6 && (!memcmp(buf, "GIF87a", 6) || !memcmp(buf, "GIF89a", 6));
}

typedef struct {
    const uint8_t* buf;
    size_t n, at;
} GifSrc;

static int gif_on_read(GifFileType* g, GifByteType* out, int len) {
    GifSrc* s = g->UserData;
    size_t left = s->n - s->at, k = len < 0 ? 0 : (size_t)len;
    if (k > left) k = left; /* a short read: giflib reports the file as cut short */
    memcpy(out, s->buf + s->at, k);
    s->at += k;
    return (int)k;
}

/* The file opened and read up to its first frame's pixel data: the canvas (w x h, Pillow's size) and the
 * index that fills it outside the frame. */
typedef struct {
    GifSrc src;
    GifFileType* g;
    int w, h, fill;
} GifFirst;

static void gif_close(GifFirst* f) {
    int e;
    if (f->g) DGifCloseFile(f->g, &e);
    f->g = NULL;
}

static int gif_fail(GifFirst* f, const char* what, char* err, size_t err_len) {
    int code = f->g ? f->g->Error : 0;
    /* giflib's "Failed to read from given file" is the end of the bytes here */
    const char* why = code == D_GIF_ERR_READ_FAILED && f->src.at == f->src.n ? "the file is cut short"
                      : code                                               ? GifErrorString(code)
                                                                           : NULL;
    snprintf(err, err_len, "corrupt GIF: %s%s%s", what, why ? ": " : "", why ? why : "");
    gif_close(f);
    return -1;
}

static int gif_open_first(const uint8_t* buf, size_t n, GifFirst* f, char* err, size_t err_len) {
    memset(f, 0, sizeof *f);
    if (!image_is_gif(buf, n)) {
        snprintf(err, err_len, "not a GIF (no GIF87a / GIF89a signature)");
        return -1;
    }
    if (n > (size_t)JPEG_MAX_BYTES) {
        snprintf(err, err_len, "GIF of %zu bytes, above the limit of %d MiB", n, JPEG_MAX_BYTES >> 20);
        return -1;
    }
    f->src = (GifSrc){buf, n, 0};
    int e = 0;
    f->g = DGifOpen(&f->src, gif_on_read, &e);
    if (!f->g) {
        const char* why = GifErrorString(e);
        snprintf(err, err_len, "corrupt GIF: cannot read its screen descriptor%s%s", why ? ": " : "", why ? why : "");
        return -1;
    }
    f->fill = 0;
    for (;;) {
        GifRecordType t;
        if (DGifGetRecordType(f->g, &t) == GIF_ERROR) return gif_fail(f, "before its first frame", err, err_len);
        if (t == TERMINATE_RECORD_TYPE) {
            snprintf(err, err_len, "corrupt GIF: no frame before its trailer");
            gif_close(f);
            return -1;
        }
        if (t == EXTENSION_RECORD_TYPE) {
            int code;
            GifByteType* ext;
            if (DGifGetExtension(f->g, &code, &ext) == GIF_ERROR) return gif_fail(f, "in an extension", err, err_len);
            /* a graphic control extension with its transparency flag: ext[0] is the block's length */
            if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4 && (ext[1] & 1)) f->fill = ext[4];
            while (ext)
                if (DGifGetExtensionNext(f->g, &ext) == GIF_ERROR) return gif_fail(f, "in an extension", err, err_len);
            continue;
        }
        if (t != IMAGE_DESC_RECORD_TYPE) return gif_fail(f, "an unknown record", err, err_len);
        if (DGifGetImageDesc(f->g) == GIF_ERROR) return gif_fail(f, "in its first frame's descriptor", err, err_len);
        break;
    }
    const GifImageDesc* d = &f->g->Image;
    if (d->Width <= 0 || d->Height <= 0) {
        snprintf(err, err_len, "corrupt GIF: its first frame is empty (%dx%d)", d->Width, d->Height);
        gif_close(f);
        return -1;
    }
    /* all 16-bit fields: the sums are at most 131070, no overflow */
    long w = f->g->SWidth, h = f->g->SHeight;
    if ((long)d->Left + d->Width > w) w = (long)d->Left + d->Width;
    if ((long)d->Top + d->Height > h) h = (long)d->Top + d->Height;
    /* bounded here, before anything is allocated for the pixels */
    if (w > JPEG_MAX_SIDE || h > JPEG_MAX_SIDE || (int64_t)w * h > JPEG_MAX_PIXELS) {
        snprintf(err, err_len, "GIF declares %ldx%ld pixels, above the limit of %d pixels (%d per side)", w, h,
                 JPEG_MAX_PIXELS, JPEG_MAX_SIDE);
        gif_close(f);
        return -1;
    }
    f->w = (int)w, f->h = (int)h;
    return 0;
}

int gif_read_header(const uint8_t* buf, size_t n, int* w, int* h, char* err, size_t err_len) {
    GifFirst f;
    *w = *h = 0;
    if (gif_open_first(buf, n, &f, err, err_len) != 0) return -1;
    *w = f.w, *h = f.h;
    gif_close(&f);
    return 0;
}

uint8_t* gif_decode_rgb(const uint8_t* buf, size_t n, int* ow, int* oh, char* err, size_t err_len) {
    GifFirst f;
    if (gif_open_first(buf, n, &f, err, err_len) != 0) return NULL;
    const GifImageDesc* d = &f.g->Image;
    int W = f.w, H = f.h, fw = d->Width, fh = d->Height, fx = d->Left, fy = d->Top;
    /* the colours: Pillow's ramp, then the frame's table (its own, else the global one) over it */
    uint8_t pal[256][3];
    for (int i = 0; i < 256; i++) pal[i][0] = pal[i][1] = pal[i][2] = (uint8_t)i;
    const ColorMapObject* cm = d->ColorMap ? d->ColorMap : f.g->SColorMap;
    if (cm)
        for (int i = 0; i < cm->ColorCount && i < 256; i++)
            pal[i][0] = cm->Colors[i].Red, pal[i][1] = cm->Colors[i].Green, pal[i][2] = cm->Colors[i].Blue;
    uint8_t* idx = mallocCheck((size_t)W * H);
    memset(idx, f.fill, (size_t)W * H);
    /* interlaced: the rows come in four passes (0, 8, 16, ...), (4, 12, ...), (2, 6, ...), (1, 3, ...) */
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    int passes = d->Interlace ? 4 : 1;
    for (int pass = 0; pass < passes; pass++)
        for (int y = d->Interlace ? start[pass] : 0; y < fh; y += d->Interlace ? step[pass] : 1)
            if (DGifGetLine(f.g, idx + (size_t)(fy + y) * W + fx, fw) == GIF_ERROR) {
                free(idx);
                gif_fail(&f, "in its first frame's image data", err, err_len);
                return NULL;
            }
    gif_close(&f);
    uint8_t* rgb = mallocCheck((size_t)W * H * 3);
    for (size_t i = 0; i < (size_t)W * H; i++) memcpy(rgb + 3 * i, pal[idx[i]], 3);
    free(idx);
    *ow = W, *oh = H;
    return rgb;
}
