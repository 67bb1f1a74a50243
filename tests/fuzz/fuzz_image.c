/* fuzz_image.c — libFuzzer target for the image path the loader runs on every image (data/image.c,
 * data/png.c, data/gif.c): header, smart_resize grid, decode (DCT-scaled JPEG, CMYK included; PNG; a
 * GIF's first frame on its screen), the streamed resize and patchify. libjpeg-turbo, libpng and giflib
 * are fuzzed upstream; what this holds to account is our code on whatever sizes an image can declare
 * (1 x 65500, 3 x 2, ...): no out-of-bounds access, patches always finite and in [-1, 1]. And a bad
 * JPEG costs only itself: after every input, accepted or not, the same codec must decode a known good
 * JPEG to exactly the patches a fresh codec gives (libjpeg-turbo 2.1 left its handle broken after a
 * failed header read, so one bad image rejected every later one). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/image.h"

static JpegCodec* jc;
static uint8_t* good;
static size_t good_n;
static float* good_ref;
static int good_gh, good_gw;

/* a 45 x 29 colour gradient, encoded by our own encoder, decoded once by a fresh codec */
static void good_init(void) {
    enum { W = 45, H = 29 };
    static uint8_t rgb[W * H * 3];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t* p = rgb + (y * W + x) * 3;
            p[0] = (uint8_t)(x * 5), p[1] = (uint8_t)(y * 8), p[2] = (uint8_t)((x + y) * 3);
        }
    JpegCodec* fresh = jpeg_codec_new();
    good = jpeg_encode_rgb(fresh, rgb, W, H, 90, 0, &good_n);
    char err[256];
    if (image_load_patches(fresh, good, good_n, 8, 16, 64, &good_ref, &good_gh, &good_gw, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_image: the good JPEG does not decode: %s\n", err);
        abort();
    }
    jpeg_codec_free(fresh);
}

static void good_check(void) {
    float* pt;
    int gh, gw;
    char err[256];
    if (image_load_patches(jc, good, good_n, 8, 16, 64, &pt, &gh, &gw, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_image: a good JPEG is rejected after this input: %s\n", err);
        abort();
    }
    if (gh != good_gh || gw != good_gw || memcmp(pt, good_ref, sizeof(float) * (size_t)gh * gw * 3 * 8 * 8) != 0) {
        fprintf(stderr, "fuzz_image: a good JPEG decodes differently after this input\n");
        abort();
    }
    free(pt);
}

static void one_input(const uint8_t* data, size_t size) {
    if (size < 4) return;
    /* the first byte picks the patch settings, the rest is the JPEG */
    static const int settings[4][3] = {{8, 16, 64}, {14, 1, 4}, {2, 1, 2048}, {16, 64, 64}};
    const int* st = settings[data[0] & 3];
    int w, h;
    char err[256];
    /* any format pack accepts (JPEG, PNG, GIF): each reaches its own decoder */
    if (image_read_header(jc, data + 1, size - 1, &w, &h, err, sizeof err) != 0) return;
    if ((double)w * h > 4e6) return; /* the decode buffer, not our code, would dominate */
    float* pt;
    int gh, gw;
    if (image_load_patches(jc, data + 1, size - 1, st[0], st[1], st[2], &pt, &gh, &gw, err, sizeof err) != 0) return;
    if (gh < 1 || gw < 1 || gh * gw > st[2]) abort();
    size_t n = (size_t)gh * gw * 3 * st[0] * st[0];
    for (size_t i = 0; i < n; i++)
        if (!(pt[i] >= -1.0001f && pt[i] <= 1.0001f)) abort(); /* bilinear weights are a convex combination */
    free(pt);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (!jc) {
        jc = jpeg_codec_new();
        good_init();
    }
    one_input(data, size);
    good_check();
    return 0;
}
