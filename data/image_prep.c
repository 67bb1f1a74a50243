/* image_prep.c — an image's patches under a preprocessing (ImagePrep, data/image.h): the dispatch over
 * smart_resize (image.c), LLaVA-1.5's square (here) and any-resolution tiles (image_anyres.c), above both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/anyres.h"
#include "data/image.h"
#include "engine/util.h"

int image_patches_into_prep(JpegCodec* c, const uint8_t* jpeg, size_t n, const ImagePrep* prep, int p, int min_patches,
                            int max_patches, int gh, int gw, float* out, char* err, size_t err_len) {
    if (!prep || prep->kind == IMAGE_PREP_SMART)
        return image_patches_into(c, jpeg, n, p, min_patches, max_patches, gh, gw, out, err, err_len);
    if (prep->kind == IMAGE_PREP_ANYRES) { /* gh x gw: the tile grid; out: the base image's and the tiles' patches */
        int w, h, rgh, rgw;
        if (image_read_header(c, jpeg, n, &w, &h, err, err_len) != 0) return -1;
        image_prep_grid(prep, h, w, p, min_patches, max_patches, &rgh, &rgw);
        if (rgh != gh || rgw != gw)
            return rr_fail(err, err_len, "the image's %d x %d size gives a %d x %d tile grid, its index says %d x %d", w, h, rgh,
                           rgw, gh, gw);
        return anyres_patches_into(c, jpeg, n, &prep->pins, prep->size, p, w, h, out, err, err_len);
    }
    int S = prep->size;
    if (S % p || gh != S / p || gw != S / p) {
        snprintf(err, err_len, "--image-preprocess llava at size %d gives a %dx%d grid of %d-pixel patches, not the "
                 "expected %dx%d", S, S / p, S / p, p, gh, gw);
        return -1;
    }
    int sw, sh;
    uint8_t* rgb = image_decode_prep(c, jpeg, n, prep, p, gh, gw, &sw, &sh, err, err_len);
    if (!rgb) return -1;
    int side = sw > sh ? sw : sh;
    uint8_t* sq = mallocCheck((size_t)side * side * 3);
    image_expand2square(rgb, sw, sh, sq);
    free(rgb);
    uint8_t* px = mallocCheck((size_t)S * S * 3);
    image_resize_bicubic_u8(sq, side, side, px, S, S);
    free(sq);
    for (int r = 0; r < gh; r++)
        for (int col = 0; col < gw; col++) {
            float* o = out + ((size_t)r * gw + col) * 3 * p * p;
            for (int i = 0; i < p; i++) {
                const uint8_t* s = px + ((size_t)(r * p + i) * S + (size_t)col * p) * 3;
                for (int j = 0; j < 3 * p; j++) *o++ = (float)((s[j] / 255.0 - image_clip_mean[j % 3]) / image_clip_std[j % 3]);
            }
        }
    free(px);
    return 0;
}

int image_load_patches_prep(JpegCodec* c, const uint8_t* bytes, size_t n, const ImagePrep* prep, int p, int min_patches,
                            int max_patches, float** patches, int* grid_h, int* grid_w, char* err, size_t err_len) {
    int w, h, gh, gw;
    if (prep && prep->kind == IMAGE_PREP_ANYRES)
        return rr_fail(err, err_len, "an any-resolution image outside a shard: its tiles and positions come with the "
                       "loader's microbatch (Microbatch.J), not this grid");
    if (image_read_header(c, bytes, n, &w, &h, err, err_len) != 0) return -1;
    image_prep_grid(prep, h, w, p, min_patches, max_patches, &gh, &gw);
    float* out = mallocCheck(sizeof(float) * (size_t)gh * gw * 3 * p * p);
    if (image_patches_into_prep(c, bytes, n, prep, p, min_patches, max_patches, gh, gw, out, err, err_len) != 0) {
        free(out);
        return -1;
    }
    *patches = out;
    *grid_h = gh;
    *grid_w = gw;
    return 0;
}
