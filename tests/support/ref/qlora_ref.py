#!/usr/bin/env python3
"""qlora_ref.py — an independent PyTorch reference of QLoRA (docs/training.md "QLoRA") for rrfp-mm's step dumps.

The base weights of the adapted linears are stored as bitsandbytes stores a QLoRA base (Linear4bit with
quant_type nf4, blocksize 64, compress_statistics): the dump holds each one's NF4 form beside its values
(NAME.nf4.codes, .absmax, .nested_absmax, .offset). Written here from bitsandbytes' published algorithm, in torch:

  dequantize_4bit: absmax = code8[absmax codes] * nested_absmax[block / 256] + offset (float32: a product, then
  a sum), w = NF4[code] * absmax[i / 64] in float32, stored in the weight's dtype (bfloat16, nearest even); the
  codes two a byte, the first value in the high nibble.
  quantize_4bit (--source FILE: the full-precision weights the run started from, train.init_from): the weight
  flattened, blocks of 64, absmax = max |x|, each x times float32(1 / absmax) coded as the number of NF4
  midpoints (float32) it lies above; offset = mean of the absmaxes (torch's float32 mean, as bitsandbytes
  computes it), then absmax - offset in blocks of 256 coded to the nearest entry of the signed dynamic map
  (tests/engine/quant_ref.py builds the map from its definition).

Checks: every dequantised weight equals the engine's (the dump's values) bit for bit; with --source every NF4
code and nested absmax equal, the offset within 1e-6 relative and every 8-bit absmax code equal except within 1e-6
(relative) of a midpoint, as tests/engine/quant_ref.py allows; then the step itself: PEFT's LoRA on the
reference's own dequantised weights (tests/support/ref/lora_ref.py: loss and every adapter gradient).

  qlora_ref.py --check DIR [--source MODEL.safetensors]"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "engine"))
import llava_ref as R  # noqa: E402
import lora_ref  # noqa: E402
import quant_ref  # noqa: E402

R._DTYPES["U8"] = (torch.uint8, 1)
NF4 = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                    0.7229568362236023, 1.0], dtype=torch.float32)
CODE8 = torch.from_numpy(quant_ref.dynamic_map())
PARTS = ("codes", "absmax", "nested_absmax", "offset")
SEEN = {"dequantised": 0, "quantised": 0}


def unpack(codes, n):
    c = torch.stack([codes >> 4, codes & 15], 1).reshape(-1)
    return c[:n].long()


def dequantize_4bit(q, shape):
    n = shape[0] * shape[1]
    nb = (n + 63) // 64
    absmax = CODE8[q["absmax"].long()] * q["nested_absmax"].repeat_interleave(256)[:nb]
    absmax = absmax + q["offset"][0]
    w = NF4[unpack(q["codes"], n)] * absmax.repeat_interleave(64)[:n]
    return w.to(torch.bfloat16).to(torch.float32).reshape(shape)


def blocks_absmax(x, block):
    n = x.numel()
    pad = torch.zeros((-n) % block, dtype=x.dtype)
    return torch.cat([x, pad]).reshape(-1, block).abs().max(1).values


def quantize_4bit_check(name, x, q):
    """bitsandbytes' quantize_4bit(x, 64, nf4, compress_statistics=True) against the dumped form"""
    x = x.to(torch.float32).reshape(-1)
    n = x.numel()
    absmax = blocks_absmax(x, 64)
    inv = (torch.tensor(1.0, dtype=torch.float32) / absmax).repeat_interleave(64)[:n]
    scaled = x * inv
    mids = ((NF4[:-1].double() + NF4[1:].double()) / 2).float()
    codes = (scaled[:, None] > mids[None, :]).sum(1)  # NaN (a zero block) compares false: code 0
    got = unpack(q["codes"], n)
    bad = int((got != codes).sum())
    R.expect(bad == 0, f"{name}: NF4 codes equal bitsandbytes' quantisation ({bad} of {n} differ)")
    offset = absmax.mean()  # torch's float32 mean, as bitsandbytes takes it
    o = q["offset"][0]
    R.expect(abs(float(o) - float(offset)) <= 1e-6 * abs(float(offset)),
             f"{name}: offset {float(o)!r} is the absmaxes' mean {float(offset)!r}")
    centred = absmax - o
    a2 = blocks_absmax(centred, 256)
    R.expect(torch.equal(a2, q["nested_absmax"]), f"{name}: nested absmax equal")
    scaled2 = (centred * (torch.tensor(1.0) / a2).repeat_interleave(256)[:len(centred)]).numpy()
    c8, near = quant_ref.nearest(CODE8.numpy(), scaled2)
    diff = np.flatnonzero(q["absmax"].numpy() != c8.astype(np.uint8))
    hard = [i for i in diff if near[i] > 1e-6]
    R.expect(not hard, f"{name}: 8-bit absmax codes equal the nearest dynamic-map entries ({len(hard)} differ away "
                       f"from a midpoint, {len(diff) - len(hard)} at one)")
    SEEN["quantised"] += 1


def main():
    args = sys.argv[1:]
    if len(args) not in (2, 4) or args[0] != "--check" or (len(args) == 4 and args[2] != "--source"):
        print(__doc__)
        return 2
    d = args[1]
    source = R.st_load(args[3])[0] if len(args) == 4 else None
    orig_union = R.st_union

    def union(paths):
        out = orig_union(paths)
        for k in [k for k in out if k.endswith(".nf4.codes")]:
            base = k[:-len(".nf4.codes")]
            q = {p: out.pop(f"{base}.nf4.{p}") for p in PARTS}
            w = dequantize_4bit(q, list(out[base].shape))
            same = torch.equal(w.view(torch.int32), out[base].to(torch.float32).view(torch.int32))
            R.expect(same, f"{base}: the engine's dequantised weight equals bitsandbytes' dequantize_4bit bit for bit")
            out[base] = w  # the step runs on the reference's own dequantisation
            SEEN["dequantised"] += 1
            if source is not None:
                quantize_4bit_check(base, source[base], q)
        return out
    R.st_union = union
    sys.argv = [sys.argv[0], "--check", d]
    rc = lora_ref.main()
    R.expect(SEEN["dequantised"] > 0, "the dump holds NF4 base weights (lora.quant = nf4)")
    R.expect(source is None or SEEN["quantised"] == SEEN["dequantised"],
             f"every NF4 weight checked against the source's quantisation ({SEEN['quantised']})")
    print(f"NF4 weights dequantised {SEEN['dequantised']}, quantisations checked {SEEN['quantised']}")
    if rc or R.FAILED:
        print(f"{len(R.FAILED)} check(s) failed")
        return 1
    print("qlora ref: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
