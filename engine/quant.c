/* quant.c — bitsandbytes' blockwise NF4 and dynamic 8-bit quantization on the CPU (contracts in quant.h). */
#include "engine/quant.h"
#include "engine/cuda/nf4_math.h"

#include <math.h>
#include <string.h>

const float rr_nf4_code[16] = {-1.0f,
                               -0.6961928009986877f,
                               -0.5250730514526367f,
                               -0.39491748809814453f,
                               -0.28444138169288635f,
                               -0.18477343022823334f,
                               -0.09105003625154495f,
                               0.0f,
                               0.07958029955625534f,
                               0.16093020141124725f,
                               0.24611230194568634f,
                               0.33791524171829224f,
                               0.44070982933044434f,
                               0.5626170039176941f,
                               0.7229568362236023f,
                               1.0f};

/* create_dynamic_map(signed=True) as bitsandbytes builds it: for each of 7 exponents, the midpoints of a float32
 * linspace(0.1, 1) of 2^i + 1 points scaled by 10^(i - 6), with both signs, then 0 and 1, sorted. Written as the
 * exact f32 values (hexadecimal literals) that construction yields. */
const float rr_dynamic_map8[256] = {
    -0x1.fc66660000000p-1f, -0x1.f533320000000p-1f, -0x1.ee00000000000p-1f, -0x1.e6cccc0000000p-1f,
    -0x1.df99980000000p-1f, -0x1.d866660000000p-1f, -0x1.d133340000000p-1f, -0x1.ca00000000000p-1f,
    -0x1.c2cccc0000000p-1f, -0x1.bb99980000000p-1f, -0x1.b466660000000p-1f, -0x1.ad33320000000p-1f,
    -0x1.a600000000000p-1f, -0x1.9ecccc0000000p-1f, -0x1.9799980000000p-1f, -0x1.9066660000000p-1f,
    -0x1.8933340000000p-1f, -0x1.8200000000000p-1f, -0x1.7accce0000000p-1f, -0x1.73999a0000000p-1f,
    -0x1.6c66680000000p-1f, -0x1.6533340000000p-1f, -0x1.5e00000000000p-1f, -0x1.56ccce0000000p-1f,
    -0x1.4f999a0000000p-1f, -0x1.4866660000000p-1f, -0x1.4133340000000p-1f, -0x1.3a00000000000p-1f,
    -0x1.32cccc0000000p-1f, -0x1.2b999a0000000p-1f, -0x1.2466680000000p-1f, -0x1.1d33340000000p-1f,
    -0x1.1600000000000p-1f, -0x1.0ecccc0000000p-1f, -0x1.07999a0000000p-1f, -0x1.0066660000000p-1f,
    -0x1.f266680000000p-2f, -0x1.e400000000000p-2f, -0x1.d599980000000p-2f, -0x1.c733340000000p-2f,
    -0x1.b8cccc0000000p-2f, -0x1.aa66640000000p-2f, -0x1.9c00000000000p-2f, -0x1.8d99980000000p-2f,
    -0x1.7f33340000000p-2f, -0x1.70cccc0000000p-2f, -0x1.6266640000000p-2f, -0x1.5400000000000p-2f,
    -0x1.4599980000000p-2f, -0x1.3733340000000p-2f, -0x1.28cccc0000000p-2f, -0x1.1a66680000000p-2f,
    -0x1.0c00000000000p-2f, -0x1.fb33340000000p-3f, -0x1.de66680000000p-3f, -0x1.c1999a0000000p-3f,
    -0x1.a4cccc0000000p-3f, -0x1.8800000000000p-3f, -0x1.6b33320000000p-3f, -0x1.4e66660000000p-3f,
    -0x1.31999a0000000p-3f, -0x1.14cccc0000000p-3f, -0x1.f000000000000p-4f, -0x1.b666680000000p-4f,
    -0x1.93d70a0000000p-4f, -0x1.8851ea0000000p-4f, -0x1.7cccce0000000p-4f, -0x1.7147ae0000000p-4f,
    -0x1.65c2900000000p-4f, -0x1.5a3d700000000p-4f, -0x1.4eb8500000000p-4f, -0x1.4333340000000p-4f,
    -0x1.37ae140000000p-4f, -0x1.2c28f60000000p-4f, -0x1.20a3d60000000p-4f, -0x1.151eba0000000p-4f,
    -0x1.09999a0000000p-4f, -0x1.fc28f40000000p-5f, -0x1.e51eba0000000p-5f, -0x1.ce147a0000000p-5f,
    -0x1.b70a3e0000000p-5f, -0x1.a000000000000p-5f, -0x1.88f5c20000000p-5f, -0x1.71eb860000000p-5f,
    -0x1.5ae1460000000p-5f, -0x1.43d70a0000000p-5f, -0x1.2cccce0000000p-5f, -0x1.15c28e0000000p-5f,
    -0x1.fd70a40000000p-6f, -0x1.cf5c260000000p-6f, -0x1.a147ae0000000p-6f, -0x1.7333340000000p-6f,
    -0x1.451eb80000000p-6f, -0x1.170a3e0000000p-6f, -0x1.d1eb860000000p-7f, -0x1.75c2900000000p-7f,
    -0x1.3e76c80000000p-7f, -0x1.2c08300000000p-7f, -0x1.19999a0000000p-7f, -0x1.072b020000000p-7f,
    -0x1.e978d40000000p-8f, -0x1.c49ba60000000p-8f, -0x1.9fbe760000000p-8f, -0x1.7ae1480000000p-8f,
    -0x1.56041a0000000p-8f, -0x1.3126e80000000p-8f, -0x1.0c49ba0000000p-8f, -0x1.ced9140000000p-9f,
    -0x1.851eb80000000p-9f, -0x1.3b645a0000000p-9f, -0x1.e353f80000000p-10f, -0x1.4fdf3a0000000p-10f,
    -0x1.eecbfe0000000p-11f, -0x1.b3d07c0000000p-11f, -0x1.78d5000000000p-11f, -0x1.3dd9820000000p-11f,
    -0x1.02de020000000p-11f, -0x1.8fc5060000000p-12f, -0x1.19ce0a0000000p-12f, -0x1.47ae160000000p-13f,
    -0x1.743e960000000p-14f, -0x1.15df660000000p-14f, -0x1.6f00680000000p-15f, -0x1.64840c0000000p-16f,
    -0x1.040bfe0000000p-17f, -0x1.b435280000000p-19f, -0x1.27476e0000000p-21f, 0.0f,
    0x1.27476e0000000p-21f, 0x1.b435280000000p-19f, 0x1.040bfe0000000p-17f, 0x1.64840c0000000p-16f,
    0x1.6f00680000000p-15f, 0x1.15df660000000p-14f, 0x1.743e960000000p-14f, 0x1.47ae160000000p-13f,
    0x1.19ce0a0000000p-12f, 0x1.8fc5060000000p-12f, 0x1.02de020000000p-11f, 0x1.3dd9820000000p-11f,
    0x1.78d5000000000p-11f, 0x1.b3d07c0000000p-11f, 0x1.eecbfe0000000p-11f, 0x1.4fdf3a0000000p-10f,
    0x1.e353f80000000p-10f, 0x1.3b645a0000000p-9f, 0x1.851eb80000000p-9f, 0x1.ced9140000000p-9f,
    0x1.0c49ba0000000p-8f, 0x1.3126e80000000p-8f, 0x1.56041a0000000p-8f, 0x1.7ae1480000000p-8f,
    0x1.9fbe760000000p-8f, 0x1.c49ba60000000p-8f, 0x1.e978d40000000p-8f, 0x1.072b020000000p-7f,
    0x1.19999a0000000p-7f, 0x1.2c08300000000p-7f, 0x1.3e76c80000000p-7f, 0x1.75c2900000000p-7f,
    0x1.d1eb860000000p-7f, 0x1.170a3e0000000p-6f, 0x1.451eb80000000p-6f, 0x1.7333340000000p-6f,
    0x1.a147ae0000000p-6f, 0x1.cf5c260000000p-6f, 0x1.fd70a40000000p-6f, 0x1.15c28e0000000p-5f,
    0x1.2cccce0000000p-5f, 0x1.43d70a0000000p-5f, 0x1.5ae1460000000p-5f, 0x1.71eb860000000p-5f,
    0x1.88f5c20000000p-5f, 0x1.a000000000000p-5f, 0x1.b70a3e0000000p-5f, 0x1.ce147a0000000p-5f,
    0x1.e51eba0000000p-5f, 0x1.fc28f40000000p-5f, 0x1.09999a0000000p-4f, 0x1.151eba0000000p-4f,
    0x1.20a3d60000000p-4f, 0x1.2c28f60000000p-4f, 0x1.37ae140000000p-4f, 0x1.4333340000000p-4f,
    0x1.4eb8500000000p-4f, 0x1.5a3d700000000p-4f, 0x1.65c2900000000p-4f, 0x1.7147ae0000000p-4f,
    0x1.7cccce0000000p-4f, 0x1.8851ea0000000p-4f, 0x1.93d70a0000000p-4f, 0x1.b666680000000p-4f,
    0x1.f000000000000p-4f, 0x1.14cccc0000000p-3f, 0x1.31999a0000000p-3f, 0x1.4e66660000000p-3f,
    0x1.6b33320000000p-3f, 0x1.8800000000000p-3f, 0x1.a4cccc0000000p-3f, 0x1.c1999a0000000p-3f,
    0x1.de66680000000p-3f, 0x1.fb33340000000p-3f, 0x1.0c00000000000p-2f, 0x1.1a66680000000p-2f,
    0x1.28cccc0000000p-2f, 0x1.3733340000000p-2f, 0x1.4599980000000p-2f, 0x1.5400000000000p-2f,
    0x1.6266640000000p-2f, 0x1.70cccc0000000p-2f, 0x1.7f33340000000p-2f, 0x1.8d99980000000p-2f,
    0x1.9c00000000000p-2f, 0x1.aa66640000000p-2f, 0x1.b8cccc0000000p-2f, 0x1.c733340000000p-2f,
    0x1.d599980000000p-2f, 0x1.e400000000000p-2f, 0x1.f266680000000p-2f, 0x1.0066660000000p-1f,
    0x1.07999a0000000p-1f, 0x1.0ecccc0000000p-1f, 0x1.1600000000000p-1f, 0x1.1d33340000000p-1f,
    0x1.2466680000000p-1f, 0x1.2b999a0000000p-1f, 0x1.32cccc0000000p-1f, 0x1.3a00000000000p-1f,
    0x1.4133340000000p-1f, 0x1.4866660000000p-1f, 0x1.4f999a0000000p-1f, 0x1.56ccce0000000p-1f,
    0x1.5e00000000000p-1f, 0x1.6533340000000p-1f, 0x1.6c66680000000p-1f, 0x1.73999a0000000p-1f,
    0x1.7accce0000000p-1f, 0x1.8200000000000p-1f, 0x1.8933340000000p-1f, 0x1.9066660000000p-1f,
    0x1.9799980000000p-1f, 0x1.9ecccc0000000p-1f, 0x1.a600000000000p-1f, 0x1.ad33320000000p-1f,
    0x1.b466660000000p-1f, 0x1.bb99980000000p-1f, 0x1.c2cccc0000000p-1f, 0x1.ca00000000000p-1f,
    0x1.d133340000000p-1f, 0x1.d866660000000p-1f, 0x1.df99980000000p-1f, 0x1.e6cccc0000000p-1f,
    0x1.ee00000000000p-1f, 0x1.f533320000000p-1f, 0x1.fc66660000000p-1f, 0x1.0000000000000p+0f,
};

uint8_t rr_nf4_code_of(float x) {
    /* bitsandbytes' tree: each threshold is the midpoint of two neighbouring codes; `>` sends a value on a
     * threshold to the lower code, and NaN (every comparison false) to code 0 */
    if (x > 0.03979014977812767f) {
        if (x > 0.3893125355243683f) {
            if (x > 0.6427869200706482f) return x > 0.8614784181118011f ? 15 : 14;
            return x > 0.5016634166240692f ? 13 : 12;
        }
        if (x > 0.2035212516784668f) return x > 0.2920137718319893f ? 11 : 10;
        return x > 0.1202552504837513f ? 9 : 8;
    }
    if (x > -0.33967943489551544f) {
        if (x > -0.13791173323988914f) return x > -0.045525018125772476f ? 7 : 6;
        return x > -0.23460740596055984f ? 5 : 4;
    }
    if (x > -0.6106329262256622f) return x > -0.4599952697753906f ? 3 : 2;
    return x > -0.8480964004993439f ? 1 : 0;
}

uint8_t rr_map8_code_of(const float* map, float x) {
    /* bitsandbytes' dQuantize (not stochastic): a binary search from the middle, then the nearer of the last
     * value and its neighbour on x's side by their midpoint */
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f;
    float val = map[pivot];
    for (int i = 64; i > 0; i >>= 1) {
        if (x > val) {
            lower_pivot = pivot;
            lower = val;
            pivot += i;
        } else {
            upper_pivot = pivot;
            upper = val;
            pivot -= i;
        }
        val = map[pivot];
    }
    if (upper_pivot == 255) upper = map[upper_pivot];
    if (lower_pivot == 0) lower = map[lower_pivot];
    if (x > val) {
        float midpoint = (upper + val) * 0.5f;
        return (uint8_t)(x > midpoint ? upper_pivot : pivot);
    }
    float midpoint = (lower + val) * 0.5f;
    return (uint8_t)(x < midpoint ? lower_pivot : pivot);
}

size_t rr_quant_blocks(size_t n, size_t block) { return (n + block - 1) / block; }

static float block_absmax(const float* x, size_t n) {
    float m = -INFINITY; /* bitsandbytes starts below every |x| and takes fmaxf */
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

void rr_nf4_quantize(const float* x, size_t n, size_t block, uint8_t* out, float* absmax) {
    memset(out, 0, (n + 1) / 2);
    for (size_t b = 0, nb = rr_quant_blocks(n, block); b < nb; b++) {
        size_t i0 = b * block, len = n - i0 < block ? n - i0 : block;
        float m = block_absmax(x + i0, len);
        absmax[b] = m;
        float inv = 1.0f / m; /* as bitsandbytes: one reciprocal, then products */
        for (size_t i = i0; i < i0 + len; i++) {
            uint8_t c = rr_nf4_code_of(x[i] * inv);
            out[i / 2] |= (uint8_t)(i % 2 ? c : c << 4);
        }
    }
}

void rr_nf4_dequantize(const uint8_t* q, const float* absmax, size_t n, size_t block, float* out) {
    for (size_t i = 0; i < n; i++) {
        uint8_t c = i % 2 ? q[i / 2] & 15 : q[i / 2] >> 4;
        out[i] = rr_nf4_code[c] * absmax[i / block];
    }
}

void rr_map8_quantize(const float* x, size_t n, size_t block, uint8_t* out, float* absmax) {
    for (size_t b = 0, nb = rr_quant_blocks(n, block); b < nb; b++) {
        size_t i0 = b * block, len = n - i0 < block ? n - i0 : block;
        float m = block_absmax(x + i0, len);
        absmax[b] = m;
        float inv = 1.0f / m;
        for (size_t i = i0; i < i0 + len; i++) out[i] = rr_map8_code_of(rr_dynamic_map8, x[i] * inv);
    }
}

void rr_map8_dequantize(const uint8_t* q, const float* absmax, size_t n, size_t block, float* out) {
    for (size_t i = 0; i < n; i++) out[i] = rr_dynamic_map8[q[i]] * absmax[i / block];
}

void rr_nf4_absmax_compress(const float* a, size_t nb, uint8_t* q8, float* absmax2, float* offset) {
    double s = 0;
    for (size_t i = 0; i < nb; i++) s += a[i];
    float off = nb ? (float)(s / (double)nb) : 0.0f;
    *offset = off;
    for (size_t b = 0, nb2 = rr_quant_blocks(nb, RR_DQ_BLOCK); b < nb2; b++) { /* a - offset, block by block */
        float t[RR_DQ_BLOCK];
        size_t i0 = b * RR_DQ_BLOCK, len = nb - i0 < RR_DQ_BLOCK ? nb - i0 : RR_DQ_BLOCK;
        for (size_t i = 0; i < len; i++) t[i] = a[i0 + i] - off;
        rr_map8_quantize(t, len, RR_DQ_BLOCK, q8 + i0, absmax2 + b);
    }
}

void rr_nf4_absmax_restore(const uint8_t* q8, const float* absmax2, float offset, size_t nb, float* a) {
    rr_map8_dequantize(q8, absmax2, nb, RR_DQ_BLOCK, a);
    for (size_t i = 0; i < nb; i++) a[i] += offset;
}

void rr_nf4_dq_dequantize_bf16(const uint8_t* q, const uint8_t* q8, const float* absmax2, float offset, size_t n,
                               uint16_t* out) {
    for (size_t b = 0, nb = rr_quant_blocks(n, RR_NF4_BLOCK); b < nb; b++) {
        float a = rr_nf4_absmax_at(q8, absmax2, rr_dynamic_map8, offset, b);
        for (size_t i = b * RR_NF4_BLOCK; i < n && i < (b + 1) * RR_NF4_BLOCK; i++) out[i] = rr_nf4_bf16_at(q, a, i);
    }
}
