/* test_quant_cuda.c — the CUDA dequantization of a QLoRA base weight (engine/cuda/quant.cu) against the CPU's
 * (rr_nf4_dq_dequantize_bf16) bit for bit: LM-like weights, a zero block, a ragged tail, a weight of more than
 * one second-level block (RR_DQ_BLOCK x RR_NF4_BLOCK values); and the form a tensor-parallel slice keeps (q8 NULL:
 * each block's absmax restored on the host, engine/params_quant.c) giving the same words. test_quant_cuda_emu runs the kernel's source on the
 * CPU emulation of the CUDA runtime (tests/support/cuda_emu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/nf4_math.h"
#include "engine/engine.h"
#include "engine/quant.h"
#include "engine/util.h"
#include "tests/support/cuda_emu_entry.h"

static int one(const Backend* be, size_t n, unsigned seed) {
    float* x = mallocCheck(n * sizeof(float));
    srand(seed);
    for (size_t i = 0; i < n; i++) { /* a sum of uniforms: roughly normal, 0.02 wide, with a few large values */
        float u = 0;
        for (int k = 0; k < 4; k++) u += (float)rand() / (float)RAND_MAX - 0.5f;
        x[i] = u * 0.035f * (i % 997 == 3 ? 20.0f : 1.0f);
    }
    for (size_t i = 128; i < 192 && i < n; i++) x[i] = 0.0f; /* a zero block */
    size_t nb = rr_quant_blocks(n, RR_NF4_BLOCK), nb2 = rr_quant_blocks(nb, RR_DQ_BLOCK);
    uint8_t* q = mallocCheck((n + 1) / 2);
    float* am = mallocCheck(nb * sizeof(float));
    uint8_t* q8 = mallocCheck(nb);
    float* am2 = mallocCheck(nb2 * sizeof(float));
    float off;
    rr_nf4_quantize(x, n, RR_NF4_BLOCK, q, am);
    rr_nf4_absmax_compress(am, nb, q8, am2, &off);
    uint16_t* want = mallocCheck(n * 2);
    uint16_t* got = mallocCheck(n * 2);
    rr_nf4_dq_dequantize_bf16(q, q8, am2, off, n, want);
    uint8_t* dq = be->dev->alloc((n + 1) / 2);
    uint8_t* dq8 = be->dev->alloc(nb);
    float* dam2 = be->dev->alloc(nb2 * sizeof(float));
    float* dmap = be->dev->alloc(256 * sizeof(float));
    uint16_t* dout = be->dev->alloc(n * 2);
    be->dev->copy_h2d(be, dq, q, (n + 1) / 2);
    be->dev->copy_h2d(be, dq8, q8, nb);
    be->dev->copy_h2d(be, dam2, am2, nb2 * sizeof(float));
    be->dev->copy_h2d(be, dmap, rr_dynamic_map8, 256 * sizeof(float));
    cuda_nf4_dequantize_bf16(be, dout, dq, dq8, dam2, dmap, off, n);
    be->dev->copy_d2h(be, got, dout, n * 2);
    be->dev->synchronize(be);
    size_t bad = 0, first = 0, nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i] && bad++ == 0) first = i;
        nonzero += (want[i] & 0x7FFF) != 0;
    }
    printf("n %zu (%zu blocks, %zu second-level): %zu of %zu bf16 words differ%s\n", n, nb, nb2, bad, n,
           bad ? "" : " (bit for bit)");
    if (bad) printf("FAIL: first at %zu: cuda 0x%04x, cpu 0x%04x\n", first, got[first], want[first]);
    /* the slice's form: every block's absmax restored (f32) beside the codes, q8 NULL */
    float* ab = mallocCheck(nb * sizeof(float));
    for (size_t b = 0; b < nb; b++) ab[b] = rr_nf4_absmax_at(q8, am2, rr_dynamic_map8, off, b);
    float* dab = be->dev->alloc(nb * sizeof(float));
    be->dev->copy_h2d(be, dab, ab, nb * sizeof(float));
    cuda_nf4_dequantize_bf16(be, dout, dq, NULL, dab, dmap, 0.0f, n);
    be->dev->copy_d2h(be, got, dout, n * 2);
    be->dev->synchronize(be);
    size_t bad2 = 0;
    for (size_t i = 0; i < n; i++) bad2 += got[i] != want[i];
    printf("  restored absmaxes (q8 NULL): %zu of %zu bf16 words differ%s\n", bad2, n, bad2 ? "" : " (bit for bit)");
    if (bad2) printf("FAIL: the restored-absmax form differs\n"), bad++;
    be->dev->free(dab);
    free(ab);
    if (nonzero < n / 2) printf("FAIL: only %zu nonzero values: the weight did not come back\n", nonzero), bad++;
    be->dev->free(dq), be->dev->free(dq8), be->dev->free(dam2), be->dev->free(dmap), be->dev->free(dout);
    free(x), free(q), free(am), free(q8), free(am2), free(want), free(got);
    return bad ? 1 : 0;
}

int main(void) {
    const Backend* be = cuda_emu_backend_or_exit("test_quant_cuda");
    int fails = one(be, 64 * 300 + 37, 1) + one(be, (size_t)RR_DQ_BLOCK * RR_NF4_BLOCK * 2 + 64 * 5, 2);
    if (fails) return 1;
    printf("quant cuda: ok\n");
    return 0;
}
