/* image_anyres.c — LLaVA-NeXT's any-resolution pixels (data/anyres.h; docs/anyres.md "Resize and pad",
 * "The base image"): the aspect-keeping Pillow-exact bicubic resize into the chosen resolution on a black
 * canvas, the tiles row-major after the base image, CLIP's normalisation. */
#include <stdlib.h>
#include <string.h>

#include "data/anyres.h"
#include "data/image.h"
#include "engine/util.h"

void anyres_tiles_rgb8(const uint8_t* rgb, int w, int h, const AnyresLayout* l, int tile, uint8_t* out) {
    size_t ts = (size_t)tile * tile * 3;
    image_resize_bicubic_u8(rgb, w, h, out, tile, tile); /* the base image */
    uint8_t* res = mallocCheck((size_t)l->resized_w * l->resized_h * 3);
    image_resize_bicubic_u8(rgb, w, h, res, l->resized_w, l->resized_h);
    for (int tr = 0; tr < l->rows; tr++)
        for (int tc = 0; tc < l->cols; tc++) {
            uint8_t* o = out + ts * (size_t)(1 + tr * l->cols + tc);
            for (int y = 0; y < tile; y++) {
                int cy = tr * tile + y - l->pad_top; /* row of the resized image, or outside it (black) */
                uint8_t* row = o + (size_t)y * tile * 3;
                memset(row, 0, (size_t)tile * 3);
                if (cy < 0 || cy >= l->resized_h) continue;
                int x0 = tc * tile - l->pad_left, a = x0 < 0 ? -x0 : 0, b = tile;
                if (x0 + b > l->resized_w) b = l->resized_w - x0;
                if (b > a) memcpy(row + (size_t)a * 3, res + ((size_t)cy * l->resized_w + x0 + a) * 3, (size_t)(b - a) * 3);
            }
        }
    free(res);
}

void anyres_tiles_patches(const uint8_t* tiles, const AnyresLayout* l, int tile, int p, float* out) {
    int g = tile / p;
    float lut[3][256]; /* (k / 255 - mean) / std in double, rounded once to float, as the LLaVA-1.5 path */
    for (int ch = 0; ch < 3; ch++)
        for (int k = 0; k < 256; k++) lut[ch][k] = (float)((k / 255.0 - image_clip_mean[ch]) / image_clip_std[ch]);
    for (int t = 0; t < l->n_tiles; t++) {
        const uint8_t* px = tiles + (size_t)t * tile * tile * 3;
        for (int r = 0; r < g; r++)
            for (int col = 0; col < g; col++) {
                float* o = out + (((size_t)t * g + r) * g + col) * 3 * p * p;
                for (int i = 0; i < p; i++) {
                    const uint8_t* s = px + ((size_t)(r * p + i) * tile + (size_t)col * p) * 3;
                    for (int j = 0; j < 3 * p; j++) *o++ = lut[j % 3][s[j]];
                }
            }
    }
}

int anyres_patches_into(JpegCodec* c, const uint8_t* bytes, size_t n, const AnyresPinpoints* pp, int tile, int p,
                        int orig_w, int orig_h, float* out, char* err, size_t err_len) {
    AnyresLayout l;
    if (anyres_layout(orig_h, orig_w, pp, tile, p, ANYRES_SELECT_DEFAULT, &l, err, err_len) != 0) return -1;
    int w, h;
    uint8_t* rgb = image_decode_rgb(c, bytes, n, 1, &w, &h, err, err_len);
    if (!rgb) return -1;
    if (w != orig_w || h != orig_h) {
        free(rgb);
        return rr_fail(err, err_len, "the image is %d x %d, its index says %d x %d", w, h, orig_w, orig_h);
    }
    uint8_t* tiles = mallocCheck((size_t)l.n_tiles * tile * tile * 3);
    anyres_tiles_rgb8(rgb, w, h, &l, tile, tiles);
    free(rgb);
    anyres_tiles_patches(tiles, &l, tile, p, out);
    free(tiles);
    return 0;
}
