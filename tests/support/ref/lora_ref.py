#!/usr/bin/env python3
"""lora_ref.py — an independent PyTorch reference of LoRA (docs/training.md "LoRA") for rrfp-mm's step dumps.

PEFT's LoRA layer written out: each adapted LM linear (q, k, v, o, gate, up, down as config.json's lora_targets
bits say) computes
    y = x W^T + b + (lora_alpha / r) * lora_B(lora_A(dropout(x)))
with lora_A (r, in) and lora_B (out, r) as bias-free nn.Linear modules named as the dump names them
(text.blocks.{i}.attn.q.lora_A.weight, ...). Dropout's mask is drawn from its specification in
engine/cuda/dropout_math.h (Philox4x32-10 in numpy, keyed as text/lm_lora.c documents), not from the C code's
values. With config.json's vision_lora_targets bits the CLIP tower's q_proj, k_proj, v_proj (their columns of
the stacked attn.qkv), out_proj, fc1 and fc2 are adapted alike (vision/vit_lora.c: the mask of an image's token rows
is the microbatch's packed rows', keyed with the tower's tag), and every tower tensor other than its adapters must be
frozen too. The rest of the model is tests/support/ref/llava_ref.py's. Every tensor of the LM other than the adapters
must be frozen (absent from the gradient dump); a step dump (train.dump_step = 1) also checks PEFT's init: B = 0,
A ~ U(-1/sqrt(in), 1/sqrt(in)).

  lora_ref.py --check DIR   check a dump of `rrfp-mm train --set lora.r=N ... --set train.dump_step=S`

Tolerances: llava_ref.py's (the engine in float32 against float64 here)."""
import glob
import math
import os
import re
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llava_ref as R  # noqa: E402

TARGETS = [("attn", "q"), ("attn", "k"), ("attn", "v"), ("attn", "o"), ("mlp", "gate"), ("mlp", "up"), ("mlp", "down")]
VTARGETS = ["q", "k", "v", "out", "fc1", "fc2"]  # the tower's, in their bits' order (vision/vision.h VitLoraTarget)
VTAG = 0x5649540000000000  # the tower's dropout-key tag (vision/vit_lora.c vl_key)
M64 = (1 << 64) - 1


def mix(x):
    """splitmix64's finaliser (text/lm_lora.c lora_mix)"""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def mb_key(seed, step, index):
    k = mix(seed ^ mix(((step << 24) & M64) ^ (index & 0xFFFFFFFF)))
    return k or 1


def keep_mask(key, T, C, p):
    """dropout_math.h: element i = n C + c kept when (w >> 8) / 2^24 >= p, w = word i % 4 of
    Philox4x32-10(counter (lo, hi of i / 4, lo, hi of key), key ("LoRA", "Drop"))"""
    i = np.arange(T * C, dtype=np.uint64)
    b = i // np.uint64(4)
    m32 = np.uint64(0xFFFFFFFF)
    c = [b & m32, b >> np.uint64(32), np.full_like(b, key & 0xFFFFFFFF), np.full_like(b, key >> 32)]
    k0, k1 = 0x4C6F5241, 0x44726F70
    for rnd in range(10):
        if rnd > 0:
            k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & m32, (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & m32]
    w = np.choose((i % np.uint64(4)).astype(np.int64), c)
    u = (w >> np.uint64(8)).astype(np.float64) / 16777216.0
    return torch.from_numpy((u >= p).reshape(T, C))


class LoraLinear(nn.Module):
    """PEFT's lora.Linear: the frozen base (weight, bias) plus lora_B(lora_A(dropout(x))) * scaling."""
    def __init__(self, base, r, alpha, p, layer, target):
        super().__init__()
        self.weight, self.bias = base.weight, base.bias
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.scaling, self.p, self.layer, self.target = alpha / r, p, layer, target
        self.key = 0  # the microbatch's dropout key; 0 = no dropout

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        xd = x
        if self.p > 0 and self.key:
            m = keep_mask(mix(self.key ^ mix(self.layer * 8 + self.target)), x.shape[0], x.shape[1], self.p)
            xd = x * m.to(x.dtype) / (1 - self.p)
        return y + self.lora_B(self.lora_A(xd)) * self.scaling


class TowerAdapter(nn.Module):
    """One adapter of the tower: lora_B(lora_A(dropout(x))) * scaling; the dropout mask of the image's rows of the
    microbatch's packed tower rows (state: the microbatch's key and the image's first row)"""
    def __init__(self, fin, fout, r, alpha, p, layer, target, state):
        super().__init__()
        self.lora_A = nn.Linear(fin, r, bias=False)
        self.lora_B = nn.Linear(r, fout, bias=False)
        self.scaling, self.p, self.layer, self.target, self.state = alpha / r, p, layer, target, state

    def delta(self, x):
        xd = x
        if self.p > 0 and self.state["key"]:
            k = mix(self.state["key"] ^ mix(VTAG ^ (self.layer * 8 + self.target)))
            row0 = self.state["row0"]
            m = keep_mask(k, row0 + x.shape[0], x.shape[1], self.p)[row0:]
            xd = x * m.to(x.dtype) / (1 - self.p)
        return self.lora_B(self.lora_A(xd)) * self.scaling


class TowerQkv(nn.Module):
    """CLIP's q_proj, k_proj, v_proj stacked as attn.qkv (rows [q | k | v]), each with its own adapter (attn.q, attn.k,
    attn.v, registered on the attention module; None: not adapted)"""
    def __init__(self, base, adapters):
        super().__init__()
        self.weight, self.bias = base.weight, base.bias
        self.adapters = adapters  # a plain list: the modules are registered as attn.q / attn.k / attn.v

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        parts = list(y.split(y.shape[-1] // 3, dim=-1))
        for j, ad in enumerate(self.adapters):
            if ad is not None:
                parts[j] = parts[j] + ad.delta(x)
        return torch.cat(parts, -1)


class TowerLinear(nn.Module):
    """out_proj, fc1, fc2: the frozen base plus its adapter (lora_A, lora_B on this module, as PEFT's lora.Linear)"""
    def __init__(self, base, r, alpha, p, layer, target, state):
        super().__init__()
        self.weight, self.bias = base.weight, base.bias
        self.ad = [TowerAdapter(base.in_features, base.out_features, r, alpha, p, layer, target, state)]
        self.lora_A, self.lora_B = self.ad[0].lora_A, self.ad[0].lora_B

    def forward(self, x):
        return F.linear(x, self.weight, self.bias) + self.ad[0].delta(x)


def tower_lora(m, c, r, alpha, p):
    """the tower's adapters of config.json's vision_lora_targets (blocks the tower runs); the microbatch's packed row of
    each image's first token is counted by a hook on pre_ln, which each image passes once"""
    bits = int(c.get("vision_lora_targets", 0))
    m.tower_state = {"key": 0, "row0": 0, "next": 0}
    if not bits:
        return

    def pre_ln_hook(mod, inp):
        m.tower_state["row0"] = m.tower_state["next"]
        m.tower_state["next"] += inp[0].shape[0]
    m.vision.pre_ln.register_forward_pre_hook(pre_ln_hook)
    for l, blk in enumerate(m.vision.blocks[: m.vision.run]):
        D = blk.attn.out.in_features
        ads = []
        for t, name in enumerate(VTARGETS[:3]):
            ad = TowerAdapter(D, D, r, alpha, p, l, t, m.tower_state) if bits >> t & 1 else None
            if ad is not None:
                setattr(blk.attn, name, ad)
            ads.append(ad)
        blk.attn.qkv = TowerQkv(blk.attn.qkv, ads)
        for t, (parent, name) in enumerate([(blk.attn, "out"), (blk.mlp, "fc1"), (blk.mlp, "fc2")], start=3):
            if bits >> t & 1:
                setattr(parent, name, TowerLinear(getattr(parent, name), r, alpha, p, l, t, m.tower_state))


def lora_model(c):
    m = R.LLaVA(c)
    bits, r, alpha, p = int(c["lora_targets"]), int(c["lora_r"]), float(c["lora_alpha"]), float(c["lora_dropout"])
    m.lora_layers = []
    for l, blk in enumerate(m.text.blocks):
        for t, (part, name) in enumerate(TARGETS):
            if bits >> t & 1:
                parent = blk.attn if part == "attn" else blk.mlp
                lin = LoraLinear(getattr(parent, name), r, alpha, p, l, t)
                setattr(parent, name, lin)
                m.lora_layers.append(lin)
    tower_lora(m, c, r, alpha, p)
    return m


def check_init(c, weights):
    """PEFT's init: B zeros; A kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)): every value inside the
    bound, the std bound/sqrt(3) within 5 standard errors; the other tensors as llava_ref.py checks them."""
    for name, w in weights.items():
        w = w.to(R.DT)
        if name.endswith(".lora_B.weight"):
            R.expect(bool((w == 0).all()), f"init: {name} is all zeros")
        elif name.endswith(".lora_A.weight"):
            bound = 1 / math.sqrt(w.shape[1])
            s = w.std().item()
            z = abs(s / (bound / math.sqrt(3)) - 1) / (0.9 / math.sqrt(w.numel()))  # U's std of the sample std: ~0.9/sqrt(n) rel
            R.expect(bool((w.abs() <= bound).all()) and z <= 5,
                     f"init: {name} in [-{bound:.4f}, {bound:.4f}], std {s:.5f} vs {bound / math.sqrt(3):.5f}")
    R.check_init(c, {k: v for k, v in weights.items() if ".lora_" not in k})


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "--check":
        print(__doc__)
        return 2
    d = sys.argv[2]
    import json
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    if int(c.get("lora_r", 0)) <= 0:
        print(f"error: {d}/config.json has no lora_r: not a LoRA run's dump")
        return 1
    step, seed = int(c.get("step", 1)), int(c["seed"])
    weights = R.st_union(R.weight_files(d, "weights"))
    grads = R.st_union(R.weight_files(d, "grads"))
    R.expect(any(".lora_" in k for k in grads), "the gradient dump holds adapter gradients")
    frozen = [k for k in grads if k.startswith("text.") and ".lora_" not in k]
    R.expect(not frozen, f"no gradient for the LM's own tensors (frozen under LoRA): {frozen[:3]}")
    if int(c.get("vision_lora_targets", 0)):
        frozen = [k for k in grads if k.startswith("vision.") and ".lora_" not in k]
        R.expect(not frozen, f"no gradient for the tower's own tensors (frozen under its LoRA): {frozen[:3]}")
        R.expect(any(k.startswith("vision.") and ".lora_" in k for k in grads), "the gradient dump holds tower adapters'")
    if step == 1:
        check_init(c, weights)
    else:
        nz = [k for k, v in weights.items() if k.endswith(".lora_B.weight") and v.abs().max() > 0]
        R.expect(len(nz) > 0, f"step {step}: trained B factors are nonzero ({len(nz)})")
    indices = sorted({int(m.group(1)) for f in glob.glob(os.path.join(d, "microbatch-*.safetensors"))
                      for m in [re.fullmatch(r"microbatch-(\d+)(\.[^.]+)?\.safetensors", os.path.basename(f))] if m})
    # llava_ref's step check on the LoRA model: its model factory and each microbatch's dropout key
    orig_load = R.load_model

    def load(c_, w_, cls=None, prefix=""):
        m = orig_load(c_, w_, lora_model, prefix)
        orig_logits = m.microbatch_logits
        calls = [0]

        def logits(mb):
            key = mb_key(seed, step, indices[calls[0]]) if float(c["lora_dropout"]) > 0 else 0
            calls[0] += 1
            for lin in m.lora_layers:
                lin.key = key
            m.tower_state.update(key=key, row0=0, next=0)
            return orig_logits(mb)
        m.microbatch_logits = logits
        return m
    R.load_model = load
    c_step = dict(c)
    c_step["step"] = max(step, 2)  # llava_ref's init check knows no adapters: done above
    R.check_step(d, c_step)
    if R.FAILED:
        print(f"{len(R.FAILED)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
