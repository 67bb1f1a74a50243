/* data_image_tool.c — exposes data/image.c to the Pillow comparison (tests/data/data_pillow.py):
 *   smart                         reads "h w p min max" lines on stdin, prints "grid_h grid_w"
 *   decode  IN.jpg SCALE OUT      raw RGB8 of the DCT-scaled decode (a PNG: full size); prints "w h"
 *   resize  IN.jpg P MIN MAX OUT  float32 RGB (0..255) after decode + resize; prints "gh gw scale"
 *   patches IN.jpg P MIN MAX OUT  float32 normalised patches (image_load_patches); prints "gh gw"
 *   llava_px IN.jpg SIZE OUT      RGB8 after expand2square + the Pillow-exact bicubic resize to SIZE x SIZE
 *   llava   IN.jpg P SIZE OUT     float32 patches of --image-preprocess llava (image_patches_into_prep)
 *   anyres  PINPOINTS TILE P SEL  reads "h w" lines on stdin, prints data/anyres.h's layout of each:
 *                                 "best_h best_w rows cols resized_h resized_w pad_top pad_left feat_top feat_h
 *                                 feat_left feat_w n_tiles n_positions map_signature" (SEL: default or full)
 *   anyres_px IN PINPOINTS TILE OUT         RGB8 tiles of data/anyres.h (base first); prints "rows cols n_tiles"
 *   anyres_patches IN PINPOINTS TILE P OUT  their float32 patches (anyres_patches_into); prints "n_tiles"
 * (IN: a JPEG or a PNG) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/anyres.h"
#include "data/image.h"
#include "engine/util.h"

static uint8_t* load(const char* path, size_t* n) {
    uint8_t* b = (uint8_t*)rr_read_file(path, n, RR_MAX_IMAGE);
    if (!b) rr_die("cannot read %s", path);
    return b;
}

static void save(const char* path, const void* d, size_t n) {
    FILE* f = fopenCheck(path, "wb");
    if (fwrite(d, 1, n, f) != n) rr_die("short write %s", path);
    fclose(f);
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    JpegCodec* c = jpeg_codec_new();
    char err[512];
    if (!strcmp(argv[1], "smart")) {
        int h, w, p, mn, mx;
        while (scanf("%d %d %d %d %d", &h, &w, &p, &mn, &mx) == 5) {
            int gh, gw;
            image_smart_resize(h, w, p, mn, mx, &gh, &gw);
            printf("%d %d\n", gh, gw);
        }
    } else if (!strcmp(argv[1], "decode") && argc == 5) {
        size_t n;
        uint8_t* b = load(argv[2], &n);
        int w, h;
        uint8_t* rgb = image_decode_rgb(c, b, n, atoi(argv[3]), &w, &h, err, sizeof err);
        if (!rgb) rr_die("%s: %s", argv[2], err);
        save(argv[4], rgb, (size_t)w * h * 3);
        printf("%d %d\n", w, h);
        free(rgb), free(b);
    } else if (!strcmp(argv[1], "resize") && argc == 7) {
        size_t n;
        uint8_t* b = load(argv[2], &n);
        int p = atoi(argv[3]), w, h, gh, gw, sw, sh;
        if (jpeg_read_header(c, b, n, &w, &h, err, sizeof err)) rr_die("%s: %s", argv[2], err);
        image_smart_resize(h, w, p, atoi(argv[4]), atoi(argv[5]), &gh, &gw);
        int scale = image_dct_scale(w, h, gw * p, gh * p);
        uint8_t* rgb = jpeg_decode_rgb(c, b, n, scale, &sw, &sh, err, sizeof err);
        if (!rgb) rr_die("%s: %s", argv[2], err);
        float* out = mallocCheck(sizeof(float) * (size_t)gh * gw * p * p * 3);
        image_resize_bilinear(rgb, sw, sh, out, gw * p, gh * p);
        save(argv[6], out, sizeof(float) * (size_t)gh * gw * p * p * 3);
        printf("%d %d %d\n", gh, gw, scale);
        free(out), free(rgb), free(b);
    } else if (!strcmp(argv[1], "patches") && argc == 7) {
        size_t n;
        uint8_t* b = load(argv[2], &n);
        int p = atoi(argv[3]), gh, gw;
        float* pt;
        if (image_load_patches(c, b, n, p, atoi(argv[4]), atoi(argv[5]), &pt, &gh, &gw, err, sizeof err))
            rr_die("%s: %s", argv[2], err);
        save(argv[6], pt, sizeof(float) * (size_t)gh * gw * p * p * 3);
        printf("%d %d\n", gh, gw);
        free(pt), free(b);
    } else if (!strcmp(argv[1], "llava_px") && argc == 5) {
        size_t n;
        uint8_t* b = load(argv[2], &n);
        int w, h, S = atoi(argv[3]);
        ImagePrep prep = {.kind = IMAGE_PREP_LLAVA, .size = S};
        uint8_t* rgb = image_decode_prep(c, b, n, &prep, 1, S, S, &w, &h, err, sizeof err); /* the loader's decode */
        if (!rgb) rr_die("%s: %s", argv[2], err);
        int side = w > h ? w : h;
        uint8_t* sq = mallocCheck((size_t)side * side * 3);
        image_expand2square(rgb, w, h, sq);
        uint8_t* px = mallocCheck((size_t)S * S * 3);
        image_resize_bicubic_u8(sq, side, side, px, S, S);
        save(argv[4], px, (size_t)S * S * 3);
        printf("%d %d\n", w, h);
        free(px), free(sq), free(rgb), free(b);
    } else if (!strcmp(argv[1], "llava") && argc == 6) {
        size_t n;
        uint8_t* b = load(argv[2], &n);
        int p = atoi(argv[3]), S = atoi(argv[4]), g = S / p;
        ImagePrep prep = {.kind = IMAGE_PREP_LLAVA, .size = S};
        float* pt = mallocCheck(sizeof(float) * (size_t)g * g * p * p * 3);
        if (image_patches_into_prep(c, b, n, &prep, p, 1, 1, g, g, pt, err, sizeof err)) rr_die("%s: %s", argv[2], err);
        save(argv[5], pt, sizeof(float) * (size_t)g * g * p * p * 3);
        printf("%d %d\n", g, g);
        free(pt), free(b);
    } else if (!strcmp(argv[1], "anyres_px") && argc == 6) {
        size_t n;
        uint8_t* b = load(argv[2], &n);
        int tile = atoi(argv[4]), w, h;
        AnyresPinpoints pp;
        AnyresLayout l;
        if (anyres_pinpoints_parse(argv[3], tile, &pp, err, sizeof err)) rr_die("%s", err);
        uint8_t* rgb = image_decode_rgb(c, b, n, 1, &w, &h, err, sizeof err);
        if (!rgb) rr_die("%s: %s", argv[2], err);
        if (anyres_layout(h, w, &pp, tile, 1, ANYRES_SELECT_DEFAULT, &l, err, sizeof err)) rr_die("%s", err);
        uint8_t* t = mallocCheck((size_t)l.n_tiles * tile * tile * 3);
        anyres_tiles_rgb8(rgb, w, h, &l, tile, t);
        save(argv[5], t, (size_t)l.n_tiles * tile * tile * 3);
        printf("%d %d %d\n", l.rows, l.cols, l.n_tiles);
        free(t), free(rgb), free(b);
    } else if (!strcmp(argv[1], "anyres_patches") && argc == 7) {
        size_t n;
        uint8_t* b = load(argv[2], &n);
        int tile = atoi(argv[4]), p = atoi(argv[5]), w, h;
        AnyresPinpoints pp;
        AnyresLayout l;
        if (anyres_pinpoints_parse(argv[3], tile, &pp, err, sizeof err)) rr_die("%s", err);
        if (image_read_header(c, b, n, &w, &h, err, sizeof err)) rr_die("%s: %s", argv[2], err);
        if (anyres_layout(h, w, &pp, tile, p, ANYRES_SELECT_DEFAULT, &l, err, sizeof err)) rr_die("%s", err);
        size_t nf = (size_t)l.n_tiles * tile * tile * 3;
        float* out = mallocCheck(nf * sizeof(float));
        if (anyres_patches_into(c, b, n, &pp, tile, p, w, h, out, err, sizeof err)) rr_die("%s: %s", argv[2], err);
        save(argv[6], out, nf * sizeof(float));
        printf("%d\n", l.n_tiles);
        free(out), free(b);
    } else if (!strcmp(argv[1], "anyres") && argc == 6) {
        AnyresPinpoints pp;
        int tile = atoi(argv[3]), p = atoi(argv[4]), h, w;
        if (anyres_pinpoints_parse(argv[2], tile, &pp, err, sizeof err)) rr_die("%s", err);
        AnyresSelect sel = !strcmp(argv[5], "full") ? ANYRES_SELECT_FULL : ANYRES_SELECT_DEFAULT;
        while (scanf("%d %d", &h, &w) == 2) {
            AnyresLayout l;
            if (anyres_layout(h, w, &pp, tile, p, sel, &l, err, sizeof err)) rr_die("%d x %d: %s", w, h, err);
            int32_t* src = mallocCheck(sizeof(int32_t) * (size_t)l.n_positions);
            anyres_feature_map(&l, src); /* its length and newlines must agree with the count */
            long long sig = 0; /* sum of (k + 1) (src[k] + 2): the map's order, compared with the reference's */
            for (int k = 0; k < l.n_positions - (sel == ANYRES_SELECT_FULL); k++) sig += (long long)(k + 1) * (src[k] + 2);
            free(src);
            printf("%d %d %d %d %d %d %d %d %d %d %d %d %d %d %lld\n", l.best_h, l.best_w, l.rows, l.cols, l.resized_h,
                   l.resized_w, l.pad_top, l.pad_left, l.feat_top, l.feat_h, l.feat_left, l.feat_w, l.n_tiles, l.n_positions,
                   sig);
        }
    } else {
        return 2;
    }
    jpeg_codec_free(c);
    return 0;
}
