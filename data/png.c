/* png.c — PNG images for pack, the loader and generate (data/image.h), with libpng. LLaVA's mixes hold
 * PNGs next to JPEGs; a shard keeps the file's own bytes, and every reader decodes them the way PIL's
 * Image.open(...).convert("RGB") does: palette and low bit depths expanded, 16-bit samples reduced to 8,
 * greyscale copied to R, G and B, the alpha channel dropped (not composited), interlacing undone, no
 * gamma or colour-profile conversion.
 *
 * Poison-proofing, as for JPEG: the size in the IHDR chunk is read and checked against the same
 * limits (JPEG_MAX_SIDE per side, JPEG_MAX_PIXELS in all) before anything is allocated for pixels, and
 * libpng gets the same limits (png_set_user_limits) and a cap on what an ancillary chunk may allocate
 * (a compressed-text bomb); a damaged file (bad signature, CRC, truncated or corrupt image data) is an
 * error with libpng's reason, never a half-decoded image. The bytes are never quoted in a message. */
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"
#include "engine/util.h"

#define PNG_MAX_CHUNK_BYTES (8u << 20) /* what one ancillary chunk may decompress to */

int image_is_png(const uint8_t* buf, size_t n) { return n >= 8 && !memcmp(buf, "\x89PNG\r\n\x1a\n", 8); }

static uint32_t png_be32(const uint8_t* p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

int png_read_header(const uint8_t* buf, size_t n, int* w, int* h, char* err, size_t err_len) {
    *w = *h = 0;
    if (!image_is_png(buf, n)) {
        snprintf(err, err_len, "not a PNG (no PNG signature)");
        return -1;
    }
    if (n > (size_t)JPEG_MAX_BYTES) {
        snprintf(err, err_len, "PNG of %zu bytes, above the limit of %d MiB", n, JPEG_MAX_BYTES >> 20);
        return -1;
    }
    /* the signature, then IHDR first: length 13, "IHDR", width, height (big-endian) */
    if (n < 33 || png_be32(buf + 8) != 13 || memcmp(buf + 12, "IHDR", 4) != 0) {
        snprintf(err, err_len, "corrupt PNG: no IHDR chunk after the signature%s", n < 33 ? " (the file is cut short)" : "");
        return -1;
    }
    uint32_t W = png_be32(buf + 16), H = png_be32(buf + 20);
    if (W == 0 || H == 0) {
        snprintf(err, err_len, "PNG has an empty size %ux%u", W, H);
        return -1;
    }
    /* bounded here, before anything is allocated for the pixels */
    if (W > JPEG_MAX_SIDE || H > JPEG_MAX_SIDE || (uint64_t)W * H > JPEG_MAX_PIXELS) {
        snprintf(err, err_len, "PNG declares %ux%u pixels, above the limit of %d pixels (%d per side)", W, H,
                 JPEG_MAX_PIXELS, JPEG_MAX_SIDE);
        return -1;
    }
    *w = (int)W;
    *h = (int)H;
    return 0;
}

typedef struct {
    const uint8_t* buf;
    size_t n, at;
    char msg[200];
} PngReader;

static void png_on_error(png_structp png, png_const_charp msg) {
    PngReader* r = png_get_error_ptr(png);
    snprintf(r->msg, sizeof r->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png, (void)msg; /* benign (an sRGB profile libpng dislikes, an unknown chunk): PIL decodes these too */
}

static void png_on_read(png_structp png, png_bytep out, png_size_t len) {
    PngReader* r = png_get_io_ptr(png);
    if (len > r->n - r->at) png_error(png, "the file is cut short");
    memcpy(out, r->buf + r->at, len);
    r->at += len;
}

uint8_t* png_decode_rgb(const uint8_t* buf, size_t n, int* ow, int* oh, char* err, size_t err_len) {
    int w, h;
    if (png_read_header(buf, n, &w, &h, err, err_len) != 0) return NULL;
    PngReader r = {.buf = buf, .n = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) rr_die("libpng: cannot create a reader (out of memory)");
    uint8_t* volatile rgb = NULL;
    png_bytep* volatile rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        snprintf(err, err_len, "corrupt PNG: %s", r.msg[0] ? r.msg : "libpng error");
        free(rgb);
        free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        return NULL;
    }
    png_set_user_limits(png, JPEG_MAX_SIDE, JPEG_MAX_SIDE);
    png_set_chunk_malloc_max(png, PNG_MAX_CHUNK_BYTES);
    png_set_chunk_cache_max(png, 1000);
    png_set_read_fn(png, &r, png_on_read);
    png_read_info(png, info);
    png_uint_32 W = png_get_image_width(png, info), H = png_get_image_height(png, info);
    if ((int)W != w || (int)H != h) png_error(png, "IHDR read twice with different sizes");
    int ct = png_get_color_type(png, info), bd = png_get_bit_depth(png, info);
    /* PIL's convert("RGB"): expand palette / low bit depths / tRNS, 16 -> 8 bits, grey -> RGB, drop alpha */
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && bd < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (bd == 16) png_set_strip_16(png);
    if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    /* the alpha of a colour type with alpha, or of a tRNS chunk (palette or key colour) that the
     * expansions above turn into an alpha channel */
    if ((ct & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 3 || png_get_rowbytes(png, info) != (size_t)w * 3)
        png_error(png, "unexpected layout after conversion to 8-bit RGB");
    rgb = mallocCheck((size_t)w * h * 3);
    rows = mallocCheck(sizeof(png_bytep) * (size_t)h);
    for (int y = 0; y < h; y++) rows[y] = rgb + (size_t)y * w * 3;
    png_read_image(png, rows);
    png_read_end(png, NULL); /* the rest of the file is read too: damage after the pixels is found */
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    *ow = w;
    *oh = h;
    return rgb;
}
