#!/usr/bin/env python3
"""quant_ref.py — an independent implementation of bitsandbytes' blockwise NF4 quantization with double
quantization (QLoRA's storage), in numpy, against engine/quant.c (test_quant dump).

Written from the algorithm, not from quant.c: the NF4 code book as QLoRA defines it (its 16 values); a value's
code is the number of midpoints of neighbouring entries it lies above, the midpoints taken in float32 as
bitsandbytes' threshold tree compares them (a value equal to one takes the lower code; NaN, from a block of zeros
scaled by 1 / 0, code 0); blocks of 64 with absmax = max |x| and x scaled by float32(1 / absmax); two codes a byte, the first
in the high nibble. The absmaxes: minus their mean, then 8-bit codes on the signed dynamic map (built here from
its definition: for exponents i = 0..6, midpoints of float32 linspace(0.1, 1, 2^i + 1) times 10^(i - 6), both
signs, plus 0 and 1, sorted), nearest entry, in blocks of 256.

Inputs (seeded): normal weights (the case NF4 is made for), a heavy-tailed block, a block of zeros, a ragged
tail, bf16-representable values, a block whose absmax is negative. Every 4-bit code and every absmax must be
bitwise equal; every 8-bit absmax code equal except where the value lies within 1e-6 (relative) of a midpoint
(the offset is a float32 mean, whose last bit depends on the summation order); dequantized values within one
float32 rounding of code * absmax.
usage: quant_ref.py TEST_QUANT WORKDIR"""
import os
import subprocess
import sys

import numpy as np

NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)


def linspace_f32(a, b, n):
    # torch.linspace in float32: step = (b - a) / (n - 1) in float32; the first half from a, the second from b
    a, b = np.float32(a), np.float32(b)
    step = np.float32((b - a) / np.float32(n - 1))
    out = np.empty(n, np.float32)
    half = n // 2
    for i in range(n):
        out[i] = a + step * np.float32(i) if i < half else b - step * np.float32(n - 1 - i)
    return out


def dynamic_map():
    data = []
    for i in range(7):
        bnd = linspace_f32(0.1, 1.0, 2 ** i + 1)
        means = (bnd[:-1] + bnd[1:]) / np.float32(2.0)
        scale = 10.0 ** (-6 + i)
        data += [scale * float(m) for m in means]
        data += [-scale * float(m) for m in means]
    data += [0.0, 1.0]
    assert len(data) == 256
    return np.array(sorted(data), dtype=np.float32)


def nearest(code, x):
    """index of the nearest entry of ascending `code` for each x (float64 distances; ties to the lower)"""
    x = x.astype(np.float64)
    c = code.astype(np.float64)
    j = np.clip(np.searchsorted(c, x), 1, len(c) - 1)
    lo, hi = c[j - 1], c[j]
    return np.where(x - lo <= hi - x, j - 1, j), np.abs(x - 0.5 * (lo + hi)) / np.maximum(np.abs(x), 1e-30)


def nf4_codes(scaled):
    mids = ((NF4[:-1].astype(np.float64) + NF4[1:].astype(np.float64)) / 2).astype(np.float32)
    c = np.zeros(len(scaled), np.uint8)
    for t in mids:
        c += (scaled > t).astype(np.uint8)  # NaN compares false everywhere: code 0
    return c


def blockwise(x, block):
    n = len(x)
    nb = (n + block - 1) // block
    absmax = np.array([np.max(np.abs(x[b * block:(b + 1) * block])) for b in range(nb)], dtype=np.float32)
    inv = (np.float32(1.0) / absmax).astype(np.float32)
    scaled = (x * np.repeat(inv, block)[:n]).astype(np.float32)
    return absmax, scaled


def main():
    tq, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(20240521)
    parts = [rng.normal(0, 0.02, 64 * 900).astype(np.float32),                 # LM weights
             (rng.standard_t(2, 64 * 40) * 0.05).astype(np.float32),            # heavy tails
             np.zeros(64, np.float32),                                           # a zero block
             rng.normal(0, 1, 64 * 50).astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)]  # bf16 values
    parts[3] = parts[3].view(np.float32)
    neg = rng.normal(0, 0.1, 64).astype(np.float32)
    neg[17] = -4.0
    parts.append(neg)
    parts.append(rng.normal(0, 0.3, 37).astype(np.float32))                     # ragged tail
    x = np.concatenate(parts).astype(np.float32)
    src = os.path.join(work, "in.f32")
    x.tofile(src)
    base = os.path.join(work, "out")
    r = subprocess.run([tq, "dump", src, base], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: test_quant dump:", r.stdout, r.stderr)
        return 1
    got = {k: np.fromfile(base + "." + k, dtype=np.uint8 if k in ("q4", "q8") else np.float32)
           for k in ("q4", "absmax", "q8", "absmax2", "offset", "deq")}
    fails = 0

    with np.errstate(divide="ignore", invalid="ignore"):
        absmax, scaled = blockwise(x, 64)
    codes = nf4_codes(scaled)
    if len(codes) % 2:
        codes = np.append(codes, 0)
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)
    if not np.array_equal(got["absmax"], absmax):
        print("FAIL: absmax differs at", np.flatnonzero(got["absmax"] != absmax)[:10]); fails += 1
    bad = np.flatnonzero(got["q4"] != packed)
    if len(bad):
        print("FAIL: %d of %d NF4 bytes differ, first at %s" % (len(bad), len(packed), bad[:10])); fails += 1
    deq = (NF4[codes[:len(x)]] * np.repeat(absmax, 64)[:len(x)]).astype(np.float32)
    if not np.array_equal(got["deq"], deq):
        print("FAIL: dequantized values differ at", np.flatnonzero(got["deq"] != deq)[:10]); fails += 1

    offset = np.float32(np.mean(absmax.astype(np.float64)))
    if abs(float(got["offset"][0]) - float(offset)) > 1e-6 * abs(float(offset)):
        print("FAIL: offset %r, mean %r" % (float(got["offset"][0]), float(offset))); fails += 1
    centred = (absmax - got["offset"][0]).astype(np.float32)
    amax2, scaled2 = blockwise(centred, 256)
    if not np.array_equal(got["absmax2"], amax2):
        print("FAIL: second-level absmax differs"); fails += 1
    dm = dynamic_map()
    c8, near_mid = nearest(dm, scaled2)
    diff = np.flatnonzero(got["q8"] != c8.astype(np.uint8))
    hard = [i for i in diff if near_mid[i] > 1e-6]
    if hard:
        print("FAIL: %d 8-bit absmax codes differ away from a midpoint, first at %s" % (len(hard), hard[:10])); fails += 1
    restored = dm[got["q8"]].astype(np.float32) * np.repeat(amax2, 256)[:len(absmax)] + got["offset"][0]
    # the bf16 weight QLoRA computes with: NF4 values at the restored absmaxes (from the file's own codes), to bf16
    w = (NF4[codes[:len(x)]] * np.repeat(restored.astype(np.float32), 64)[:len(x)]).astype(np.float32).view(np.uint32)
    w16 = ((w.astype(np.uint64) + 0x7FFF + ((w >> 16) & 1)) >> 16).astype(np.uint16)
    got16 = np.fromfile(base + ".w16", dtype=np.uint16)
    if not np.array_equal(got16, w16):
        print("FAIL: the bf16 dequantized weight differs at", np.flatnonzero(got16 != w16)[:10]); fails += 1
    live = absmax > 0
    rel = np.max(np.abs(restored - absmax)[live] / absmax[live])
    print("values %d, blocks %d, NF4 bytes equal %d, 8-bit codes equal %d of %d (%d at a midpoint), restored absmax "
          "within %.3g relative" % (len(x), len(absmax), len(packed) - len(bad), len(absmax) - len(diff), len(absmax),
                                    len(diff) - len(hard), rel))
    if fails:
        return 1
    print("quant ref: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
