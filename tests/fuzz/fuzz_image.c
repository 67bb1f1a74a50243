/* fuzz_image.c — libFuzzer target for the image path the loader runs on every JPEG (data/image.c):
 * header, smart_resize grid, DCT-scaled decode, the streamed resize and patchify. libjpeg-turbo is
 * fuzzed upstream; what this holds to account is our code on whatever sizes a JPEG can declare
 * (1 x 65500, 3 x 2, ...): no out-of-bounds access, patches always finite and in [-1, 1]. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/image.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static JpegCodec* jc;
    if (!jc) jc = jpeg_codec_new();
    if (size < 4) return 0;
    /* the first byte picks the patch settings, the rest is the JPEG */
    static const int settings[4][3] = {{8, 16, 64}, {14, 1, 4}, {2, 1, 2048}, {16, 64, 64}};
    const int* st = settings[data[0] & 3];
    int w, h;
    char err[256];
    if (jpeg_read_header(jc, data + 1, size - 1, &w, &h, err, sizeof err) != 0) return 0;
    if ((double)w * h > 4e6) return 0; /* the decode buffer, not our code, would dominate */
    float* pt;
    int gh, gw;
    if (image_load_patches(jc, data + 1, size - 1, st[0], st[1], st[2], &pt, &gh, &gw, err, sizeof err) != 0) return 0;
    if (gh < 1 || gw < 1 || gh * gw > st[2]) abort();
    size_t n = (size_t)gh * gw * 3 * st[0] * st[0];
    for (size_t i = 0; i < n; i++)
        if (!(pt[i] >= -1.0001f && pt[i] <= 1.0001f)) abort(); /* bilinear weights are a convex combination */
    free(pt);
    return 0;
}
