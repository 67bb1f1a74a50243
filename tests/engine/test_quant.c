/* test_quant.c — engine/quant.c, bitsandbytes' NF4 and dynamic 8-bit blockwise quantization.
 *   test_quant unit            the code books and decision rules: every code value maps to its own code, a value
 *                              on an NF4 threshold takes the lower code and the next float above it the upper,
 *                              NaN code 0; packing (value 2j high nibble); dequantize(quantize) error within half
 *                              the widest code gap times the absmax; double quantization restores absmaxes
 *   test_quant dump IN OUT     IN: n f32 values (raw); writes OUT.q4 (NF4 bytes), OUT.absmax (f32 per 64),
 *                              OUT.q8 / OUT.absmax2 / OUT.offset (the absmaxes double-quantized) and
 *                              OUT.deq (the dequantized values, f32) for tests/engine/quant_ref.py to compare with an
 *                              independent implementation of the algorithm.
 * unit also checks the CPU backend's nf4_dequantize against rr_nf4_dq_dequantize_bf16 bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/kernel_math.h"
#include "engine/engine.h"
#include "engine/quant.h"
#include "engine/util.h"
#include "tests/support/check.h"

static void unit(void) {
    for (int k = 0; k < 16; k++) CHECK(rr_nf4_code_of(rr_nf4_code[k]) == k, "NF4 code %d", k);
    for (int k = 1; k < 16; k++) CHECK(rr_nf4_code[k] > rr_nf4_code[k - 1], "NF4 code book ascending at %d", k);
    CHECK(rr_nf4_code_of(NAN) == 0, "NaN");
    /* the thresholds: the value itself goes down, the next float up */
    static const float thr[15] = {-0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f,
                                  -0.33967943489551544f, -0.23460740596055984f, -0.13791173323988914f,
                                  -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,
                                  0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
                                  0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f};
    for (int k = 0; k < 15; k++) {
        CHECK(rr_nf4_code_of(thr[k]) == k, "threshold %d itself: code %d", k, rr_nf4_code_of(thr[k]));
        CHECK(rr_nf4_code_of(nextafterf(thr[k], 2.0f)) == k + 1, "above threshold %d", k);
        /* each threshold is its neighbours' midpoint (to f32 rounding) */
        double mid = 0.5 * ((double)rr_nf4_code[k] + rr_nf4_code[k + 1]);
        CHECK(fabs(mid - thr[k]) < 1e-7, "threshold %d = %.9g, midpoint %.9g", k, thr[k], mid);
    }
    for (int k = 0; k < 256; k++) CHECK(rr_map8_code_of(rr_dynamic_map8, rr_dynamic_map8[k]) == k, "map8 code %d", k);
    CHECK(rr_dynamic_map8[127] == 0.0f && rr_dynamic_map8[255] == 1.0f, "map8: 0 at 127, 1 at 255");
    for (int k = 1; k < 256; k++) CHECK(rr_dynamic_map8[k] > rr_dynamic_map8[k - 1], "map8 ascending at %d", k);

    /* quantize a ragged length: 3 blocks, the last 5 values; the absmax, the packing, the error */
    size_t n = 2 * RR_NF4_BLOCK + 5;
    float x[2 * RR_NF4_BLOCK + 5], back[2 * RR_NF4_BLOCK + 5], am[3];
    uint8_t q[(2 * RR_NF4_BLOCK + 5 + 1) / 2];
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0) * (i < RR_NF4_BLOCK ? 0.02f : 3.0f);
    }
    x[70] = -7.5f; /* the second block's absmax, negative */
    rr_nf4_quantize(x, n, RR_NF4_BLOCK, q, am);
    CHECK(am[1] == 7.5f, "absmax of block 1: %g", am[1]);
    CHECK(((q[70 / 2] >> 4) & 15) == 0, "x[70] = -absmax: code 0 in the high nibble of byte 35");
    rr_nf4_dequantize(q, am, n, RR_NF4_BLOCK, back);
    CHECK(back[70] == -7.5f, "x[70] back exactly: %g", back[70]);
    double widest = 0;
    for (int k = 1; k < 16; k++) widest = fmax(widest, rr_nf4_code[k] - rr_nf4_code[k - 1]);
    for (size_t i = 0; i < n; i++)
        CHECK(fabs(back[i] - x[i]) <= 0.5 * widest * am[i / RR_NF4_BLOCK] * (1 + 1e-6), "value %zu: %g back %g", i, x[i],
              back[i]);
    float zero[RR_NF4_BLOCK] = {0}, zam;
    uint8_t zq[RR_NF4_BLOCK / 2];
    rr_nf4_quantize(zero, RR_NF4_BLOCK, RR_NF4_BLOCK, zq, &zam);
    rr_nf4_dequantize(zq, &zam, RR_NF4_BLOCK, RR_NF4_BLOCK, back);
    for (int i = 0; i < RR_NF4_BLOCK; i++) CHECK(back[i] == 0.0f, "a zero block comes back zero (%d: %g)", i, back[i]);

    /* double quantization of 300 absmaxes (two second-level blocks) */
    float a[300], ab[300], a2[2], off;
    uint8_t q8[300];
    for (int i = 0; i < 300; i++) a[i] = 0.01f + 0.001f * (float)((i * 37) % 101);
    rr_nf4_absmax_compress(a, 300, q8, a2, &off);
    rr_nf4_absmax_restore(q8, a2, off, 300, ab);
    double mean = 0;
    for (int i = 0; i < 300; i++) mean += a[i];
    CHECK(off == (float)(mean / 300), "offset %g is the mean", off);
    for (int i = 0; i < 300; i++) CHECK(fabs(ab[i] - a[i]) <= 0.02 * a2[i / 256] + 1e-7, "absmax %d: %g back %g", i, a[i], ab[i]);

    /* the CPU backend's dequantisation (engine/cpu/nf4.c: a 16-word table per block) against the reference
     * rr_nf4_dq_dequantize_bf16 bit for bit: a weight of two second-level blocks plus a ragged odd tail */
    size_t nw = (size_t)RR_DQ_BLOCK * RR_NF4_BLOCK * 2 + 37, nbw = rr_quant_blocks(nw, RR_NF4_BLOCK);
    float* w = mallocCheck(nw * sizeof(float));
    float* wam = mallocCheck(nbw * sizeof(float));
    float* got = mallocCheck(nw * sizeof(float));
    uint8_t* wq = mallocCheck((nw + 1) / 2);
    uint8_t* wq8 = mallocCheck(nbw);
    uint16_t* want = mallocCheck(nw * 2);
    float wam2[3], woff;
    for (size_t i = 0; i < nw; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 0.03f * (i % 997 == 3 ? 20.0f : 1.0f);
    }
    rr_nf4_quantize(w, nw, RR_NF4_BLOCK, wq, wam);
    rr_nf4_absmax_compress(wam, nbw, wq8, wam2, &woff);
    rr_nf4_dq_dequantize_bf16(wq, wq8, wam2, woff, nw, want);
    backend_cpu.ops->nf4_dequantize(&backend_cpu, buf_f32(got), wq, wq8, wam2, rr_dynamic_map8, woff, nw);
    size_t bad = 0;
    for (size_t i = 0; i < nw; i++) bad += got[i] != rr_bf16_to_f32(want[i]);
    CHECK(bad == 0, "cpu nf4_dequantize: %zu of %zu values differ from rr_nf4_dq_dequantize_bf16", bad, nw);
    free(w), free(wam), free(got), free(wq), free(wq8), free(want);
}

static void write_all(const char* base, const char* ext, const void* p, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s.%s", base, ext);
    FILE* f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, bytes, f) == bytes && fclose(f) == 0, "cannot write %s", path);
}

static int dump(const char* in, const char* out) {
    size_t bytes = 0;
    char* raw = rr_read_file(in, &bytes, (size_t)1 << 30);
    if (!raw || bytes % 4) {
        fprintf(stderr, "test_quant: cannot read '%s' as f32 values\n", in);
        return 1;
    }
    size_t n = bytes / 4, nb = rr_quant_blocks(n, RR_NF4_BLOCK), nb2 = rr_quant_blocks(nb, RR_DQ_BLOCK);
    float* x = mallocCheck(bytes);
    memcpy(x, raw, bytes);
    uint8_t* q = mallocCheck((n + 1) / 2);
    float* am = mallocCheck(nb * sizeof(float));
    uint8_t* q8 = mallocCheck(nb);
    float* am2 = mallocCheck(nb2 * sizeof(float));
    float* deq = mallocCheck(bytes);
    float off;
    rr_nf4_quantize(x, n, RR_NF4_BLOCK, q, am);
    rr_nf4_absmax_compress(am, nb, q8, am2, &off);
    rr_nf4_dequantize(q, am, n, RR_NF4_BLOCK, deq);
    write_all(out, "q4", q, (n + 1) / 2);
    write_all(out, "absmax", am, nb * sizeof(float));
    write_all(out, "q8", q8, nb);
    write_all(out, "absmax2", am2, nb2 * sizeof(float));
    write_all(out, "offset", &off, sizeof off);
    write_all(out, "deq", deq, bytes);
    uint16_t* w = mallocCheck(n * 2 + 2); /* the bf16 weight QLoRA computes with (double-quantized absmaxes) */
    rr_nf4_dq_dequantize_bf16(q, q8, am2, off, n, w);
    write_all(out, "w16", w, n * 2);
    free(w);
    free(raw), free(x), free(q), free(am), free(q8), free(am2), free(deq);
    return check_failures ? 1 : 0;
}

int main(int argc, char** argv) {
    if (argc == 4 && !strcmp(argv[1], "dump")) return dump(argv[2], argv[3]);
    if (argc != 2 || strcmp(argv[1], "unit") != 0) {
        fprintf(stderr, "usage: test_quant unit | dump IN.f32 OUT_BASE\n");
        return 2;
    }
    unit();
    printf("quant: %d checks, %d failed\n", check_count, check_failures);
    if (!check_failures) printf("quant: ok\n");
    return check_failures ? 1 : 0;
}
