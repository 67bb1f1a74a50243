#!/usr/bin/env python3
"""llava_ref.py — an independent PyTorch implementation of the model in docs/model.md ("The model, exactly"), used
to check rrfp-mm's step dumps (README.md, "Step dumps").

Written from the design text, not from the C code: nn.Linear / nn.LayerNorm / nn.Embedding modules
whose names give the dump's tensor names by construction, RoPE written out with cos/sin tables,
attention as an explicit softmax per image and per sample with a causal mask, sequence assembly by
the -1 ids in order, positions and patch rows/columns recomputed from cu_seqlens and the grids,
loss = F.cross_entropy(sum) / supervised targets of the step. Everything runs in float64, so the
comparison measures the C engine's float32 error alone.

  llava_ref.py --run BIN CASE DIR   run `BIN CASE DIR` (tests/runtime/model/test_model_golden.c), then check DIR
  llava_ref.py --check DIR          check a dump written by `rrfp-mm train --set train.dump_step=N`

Exit status 0 when every comparison is within its tolerance (stated at each check below)."""
import argparse
import glob
import json
import math
import os
import re
import struct
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(2)
DT = torch.float64

# ------------------------------------------------------------------------------------------------
# safetensors reader (own code: 8-byte little-endian header size, JSON header, data buffer)

_DTYPES = {"F32": (torch.float32, 4), "I32": (torch.int32, 4)}


def st_load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        dtype, size = _DTYPES[info["dtype"]]
        shape = info["shape"]
        b, e = info["data_offsets"]
        numel = math.prod(shape) if shape else 1
        assert e - b == numel * size, f"{path}: {name}: {e - b} bytes for shape {shape}"
        if numel == 0:
            out[name] = torch.zeros(shape, dtype=dtype)
        else:
            out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=dtype).reshape(shape).clone()
    return out, meta


def slice_parse(val):
    """'dim=D;shape=G0,G1;ranges=OFF:LEN,...' (a tensor-parallel piece, params_slice_format) ->
    (dim, global shape, [(off, len), ...])."""
    f = dict(kv.split("=", 1) for kv in val.split(";"))
    shape = [int(x) for x in f["shape"].split(",")]
    ranges = [tuple(int(y) for y in r.split(":")) for r in f["ranges"].split(",")]
    return int(f["dim"]), shape, ranges


def st_union(paths):
    """The tensors of several files by name: a pipeline's stages hold distinct tensors; the TP ranks of a
    stage hold slices of one global tensor (metadata slice.<name>), reassembled here, each global
    element exactly once."""
    out, pieces = {}, {}
    for p in paths:
        t, meta = st_load(p)
        for k, v in t.items():
            sl = meta.get("slice." + k)
            if sl is not None:
                pieces.setdefault(k, []).append((slice_parse(sl), v))
                continue
            assert k not in out, f"{k} appears in two of {paths}"
            out[k] = v
    for k, ps in pieces.items():
        assert k not in out, f"{k} appears whole and sliced in {paths}"
        (dim, shape, _), first = ps[0]
        g = torch.zeros(shape, dtype=first.dtype)
        seen = torch.zeros(shape[dim], dtype=torch.int32)
        for (d, sh, ranges), v in ps:
            assert d == dim and sh == shape, f"{k}: pieces of different tensors in {paths}"
            pos = 0
            for off, n in ranges:
                g.narrow(dim, off, n).copy_(v.narrow(dim, pos, n))
                seen[off:off + n] += 1
                pos += n
        assert bool((seen == 1).all()), f"{k}: the pieces in {paths} do not cover it exactly once"
        out[k] = g
    return out


# ------------------------------------------------------------------------------------------------
# The model, from docs/model.md "The model, exactly"


def llama3_freq(freq, s):
    """Llama-3's rescaled frequencies, as published (Meta's apply_scaling in llama3's model.py / transformers'
    _compute_llama3_parameters): wavelengths above L / low_freq_factor slowed by factor, below
    L / high_freq_factor kept, a linear blend of the two between. s: dict factor, low, high, L."""
    wavelen = 2 * math.pi / freq
    smooth = (s["L"] / wavelen - s["low"]) / (s["high"] - s["low"])
    blended = (1 - smooth) * freq / s["factor"] + smooth * freq
    return torch.where(wavelen < s["L"] / s["high"], freq,
                       torch.where(wavelen > s["L"] / s["low"], freq / s["factor"], blended))


def rope_tables(pos, n, base=10000.0, scaling=None):
    """cos, sin of shape (N, n) for 1-D RoPE of dim n at integer positions pos (N)."""
    i = torch.arange(n // 2, dtype=DT)
    freq = base ** (-2.0 * i / n)
    if scaling is not None:
        freq = llama3_freq(freq, scaling)
    ang = pos.to(DT)[:, None] * freq[None, :]
    return torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def rope_1d(x, pos, base=10000.0, scaling=None):
    """x (N, H, n): NeoX rotate-half RoPE by pos (N)."""
    cos, sin = rope_tables(pos, x.shape[-1], base, scaling)
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


def rope_2d(x, rows, cols):
    """x (N, H, d): first d/2 dims by the patch row, last d/2 by the column, each 1-D of dim d/2."""
    h = x.shape[-1] // 2
    return torch.cat([rope_1d(x[..., :h], rows), rope_1d(x[..., h:], cols)], dim=-1)


def attend(q, k, v, mask=None):
    """q, k, v (n, H, d) -> (n, H*d); softmax(q k^T / sqrt(d)) v per head."""
    n, H, d = q.shape
    q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (H, n, d)
    s = q @ k.transpose(1, 2) / math.sqrt(d)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return o.transpose(0, 1).reshape(n, H * d)


class VitAttention(nn.Module):
    def __init__(self, D, H):
        super().__init__()
        self.H = H
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)

    def forward(self, x, rows, cols, images):
        N, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (t.reshape(N, self.H, D // self.H) for t in (q, k, v))
        q, k = rope_2d(q, rows, cols), rope_2d(k, rows, cols)
        o = torch.cat([attend(q[a:b], k[a:b], v[a:b]) for a, b in images], 0)
        return self.out(o)


class VitBlock(nn.Module):
    def __init__(self, D, H):
        super().__init__()
        self.ln1 = nn.LayerNorm(D, eps=1e-5)
        self.attn = VitAttention(D, H)
        self.ln2 = nn.LayerNorm(D, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(D, 4 * D)
        self.mlp.fc2 = nn.Linear(4 * D, D)

    def forward(self, x, rows, cols, images):
        x = x + self.attn(self.ln1(x), rows, cols, images)
        return x + self.mlp.fc2(F.gelu(self.mlp.fc1(self.ln2(x)), approximate="tanh"))


class ViT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.patch_embed = nn.Linear(3 * c["patch"] ** 2, c["Dv"])
        self.blocks = nn.ModuleList([VitBlock(c["Dv"], c["Hv"]) for _ in range(c["Lv"])])
        self.ln_f = nn.LayerNorm(c["Dv"], eps=1e-5)

    def forward(self, patches, rows, cols, images):
        x = self.patch_embed(patches)
        for b in self.blocks:
            x = b(x, rows, cols, images)
        return self.ln_f(x)


class ClipBlock(nn.Module):
    """OpenAI CLIP's encoder layer (Hugging Face CLIPEncoderLayer): pre-LN, q/k/v/out with biases (stored
    stacked as attn.qkv, rows [q | k | v]), no RoPE, MLP with QuickGELU x sigmoid(1.702 x)."""

    def __init__(self, D, H):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(D, eps=1e-5)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(D, 3 * D)
        self.attn.out = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(D, 4 * D)
        self.mlp.fc2 = nn.Linear(4 * D, D)

    def forward(self, x):
        N, D = x.shape
        q, k, v = self.attn.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.reshape(N, self.H, D // self.H) for t in (q, k, v))
        x = x + self.attn.out(attend(q, k, v))
        h = self.mlp.fc1(self.ln2(x))
        return x + self.mlp.fc2(h * torch.sigmoid(1.702 * h))


class ClipViT(nn.Module):
    """model.vision_arch = clip, as Hugging Face's CLIPVisionModel computes it and LLaVA reads it: per image
    [class embedding | patch_embed(patches)] + position embeddings (a G x G grid; another image grid gets
    them through F.interpolate(bicubic, align_corners=False), CLIPVisionEmbeddings.interpolate_pos_encoding),
    pre_layrnorm, the encoder layers; the features are hidden_states[vision_feature_layer] without the class
    token (no post_layernorm). Each image is its own sequence."""

    def __init__(self, c):
        super().__init__()
        D, p = c["Dv"], c["patch"]
        self.G = c["vision_image_size"] // p
        L = c["Lv"]
        f = c["vision_feature_layer"]
        self.run = L + 1 + f if f < 0 else f
        self.patch_embed = nn.Linear(3 * p * p, D, bias=False)
        self.class_embedding = nn.Parameter(torch.zeros(D))
        self.pos_embed = nn.Embedding(1 + self.G * self.G, D)
        self.pre_ln = nn.LayerNorm(D, eps=1e-5)
        self.blocks = nn.ModuleList([ClipBlock(D, c["Hv"]) for _ in range(L)])
        self.post_ln = nn.LayerNorm(D, eps=1e-5)  # registered, never used

    def forward(self, patches, rows, cols, images, grids):
        out = []
        pos = self.pos_embed.weight
        for (a, b), (gh, gw) in zip(images, grids):
            # the dump's patch rows are (row, col, channel); CLIP's patch embedding reads (channel, row, col)
            n, p = b - a, int(round(math.sqrt(patches.shape[1] // 3)))
            cm = patches[a:b].reshape(n, p, p, 3).permute(0, 3, 1, 2).reshape(n, -1)
            x = torch.cat([self.class_embedding[None], self.patch_embed(cm)], 0)
            pp = pos[1:]
            if (gh, gw) != (self.G, self.G):
                g = pp.reshape(1, self.G, self.G, -1).permute(0, 3, 1, 2)
                g = F.interpolate(g, size=(gh, gw), mode="bicubic", align_corners=False)
                pp = g.permute(0, 2, 3, 1).reshape(gh * gw, -1)
            x = self.pre_ln(x + torch.cat([pos[:1], pp], 0))
            for blk in self.blocks[: self.run]:
                x = blk(x)
            out.append(x[1:])
        return torch.cat(out, 0)


class RMSNorm(nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(D))

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class TextAttention(nn.Module):
    """Hkv key/value heads (grouped-query attention: each serves H / Hkv consecutive query heads, as HF's
    repeat_kv), optional q/k/v biases (Qwen2) and o bias (Llama attention_bias), optional Llama-3 RoPE."""
    def __init__(self, D, H, base=10000.0, Hkv=None, qkv_bias=False, o_bias=False, scaling=None):
        super().__init__()
        self.H, self.Hkv = H, Hkv or H
        self.base, self.scaling = base, scaling
        d = D // H
        self.q = nn.Linear(D, D, bias=qkv_bias)
        self.k = nn.Linear(D, self.Hkv * d, bias=qkv_bias)
        self.v = nn.Linear(D, self.Hkv * d, bias=qkv_bias)
        self.o = nn.Linear(D, D, bias=o_bias)

    def forward(self, x, pos, samples):
        T, D = x.shape
        d = D // self.H
        q = self.q(x).reshape(T, self.H, d)
        k, v = (m(x).reshape(T, self.Hkv, d) for m in (self.k, self.v))
        q, k = rope_1d(q, pos, self.base, self.scaling), rope_1d(k, pos, self.base, self.scaling)
        k, v = (t.repeat_interleave(self.H // self.Hkv, dim=1) for t in (k, v))
        outs = []
        for a, b in samples:
            n = b - a
            causal = torch.ones(n, n, dtype=torch.bool).tril()
            outs.append(attend(q[a:b], k[a:b], v[a:b], causal))
        return self.o(torch.cat(outs, 0))


class TextBlock(nn.Module):
    def __init__(self, D, H, Fh, eps=1e-5, base=10000.0, **variant):
        super().__init__()
        self.norm1 = RMSNorm(D, eps)
        self.attn = TextAttention(D, H, base, **variant)
        self.norm2 = RMSNorm(D, eps)
        self.mlp = nn.Module()
        self.mlp.gate = nn.Linear(D, Fh, bias=False)
        self.mlp.up = nn.Linear(D, Fh, bias=False)
        self.mlp.down = nn.Linear(Fh, D, bias=False)

    def forward(self, x, pos, samples):
        x = x + self.attn(self.norm1(x), pos, samples)
        m = self.norm2(x)
        return x + self.mlp.down(F.silu(self.mlp.gate(m)) * self.mlp.up(m))


class TextLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed = nn.Embedding(c["V"], c["Dt"])
        eps, base = c.get("rms_eps", 1e-5), c.get("rope_base", 10000.0)  # model.rms_eps, model.rope_base
        # the LM variants (model.text_kv_heads, text_qkv_bias, text_o_bias, rope_type = llama3, tie_embeddings)
        scaling = None
        if c.get("rope_type") == "llama3":
            scaling = {"factor": c["rope_factor"], "low": c["rope_low_freq_factor"],
                       "high": c["rope_high_freq_factor"], "L": c["rope_original_max_pos"]}
        variant = {"Hkv": c.get("Hkv") or c["Ht"], "qkv_bias": bool(c.get("qkv_bias", 0)),
                   "o_bias": bool(c.get("o_bias", 0)), "scaling": scaling}
        self.blocks = nn.ModuleList([TextBlock(c["Dt"], c["Ht"], c["F"], eps, base, **variant)
                                     for _ in range(c["Lt"])])
        self.norm = RMSNorm(c["Dt"], eps)
        self.tied = bool(c.get("tie_embeddings", 0))
        if not self.tied:
            self.lm_head = nn.Linear(c["Dt"], c["V"], bias=False)

    def head(self, x):
        """logits of the final hidden states: the LM head, or the token embedding when tied"""
        return x @ self.embed.weight.t() if self.tied else self.lm_head(x)


class LLaVA(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.clip = c.get("vision_arch") == "clip"
        self.vision = ClipViT(c) if self.clip else ViT(c)
        act = "none" if c.get("projector_act") == "gelu" else "tanh"  # LLaVA's nn.GELU() / the default model's tanh
        self.projector = nn.Sequential(nn.Linear(c["Dv"], c["Dt"]), nn.GELU(approximate=act),
                                       nn.Linear(c["Dt"], c["Dt"]))
        self.text = TextLM(c)
        self.anyres = bool(c.get("anyres"))
        if self.anyres:  # LLaVA-NeXT's image_newline (docs/anyres.md)
            self.image_newline = nn.Parameter(torch.zeros(c["Dt"]))
            self.g = c["vision_image_size"] // c["patch"]

    def pack_anyres(self, proj, mb, j, images):
        """LlavaNextModel.pack_image_features for any-resolution image j: its tower images' projected features
        (base first, then the tiles row-major), laid on the grid, unpad_image, an image_newline after each row,
        the base image's features first"""
        g = self.g
        t0, t1 = int(mb["ar_tile0"][j]), int(mb["ar_tile0"][j + 1])
        feats = torch.stack([proj[images[i][0]:images[i][1]] for i in range(t0, t1)])  # (1 + n, g*g, D)
        base, tiles = feats[0], feats[1:]
        nph, npw = (int(v) for v in mb["ar_grid"][j])
        h, w = (int(v) for v in mb["ar_size"][j])
        f = tiles.view(nph, npw, g, g, -1).permute(4, 0, 2, 1, 3).contiguous().flatten(1, 2).flatten(2, 3)
        cur_h, cur_w = f.shape[1:]
        if w / h > cur_w / cur_h:
            new_h = int(round(h * (cur_w / w), 7))
            pad = (cur_h - new_h) // 2
            f = f[:, pad:cur_h - pad, :]
        else:
            new_w = int(round(w * (cur_h / h), 7))
            pad = (cur_w - new_w) // 2
            f = f[:, :, pad:cur_w - pad]
        f = torch.cat((f, self.image_newline[:, None, None].expand(*f.shape[:-1], 1)), dim=-1)
        f = f.flatten(1, 2).transpose(0, 1)
        return torch.cat((base, f), dim=0)

    def microbatch_logits(self, mb):
        """Logits (T, V) of one packed microbatch."""
        ids = mb["ids"].long()
        cu = mb["cu_seqlens"].tolist()
        samples = list(zip(cu[:-1], cu[1:]))
        pos = torch.cat([torch.arange(b - a) for a, b in samples])
        x = self.text.embed(ids.clamp(min=0))
        image_pos = (ids == -1).nonzero().flatten()
        if len(image_pos):
            rows, cols, images = image_geometry(mb)
            if self.clip:
                grids = list(zip(mb["grid_h"].tolist(), mb["grid_w"].tolist()))
                vout = self.vision(mb["patches"].to(DT), rows, cols, images, grids)
            else:
                vout = self.vision(mb["patches"].to(DT), rows, cols, images)
            proj = self.projector(vout)
            if "ar_tile0" in mb:  # any-resolution images: each fills its run of positions from ar_lm_start
                J = mb["ar_lm_start"].numel()
                parts = [self.pack_anyres(proj, mb, j, images) for j in range(J)]
                idx = torch.cat([torch.arange(int(mb["ar_lm_start"][j]), int(mb["ar_lm_start"][j]) + len(parts[j]))
                                 for j in range(J)])
                assert idx.tolist() == image_pos.tolist(), "any-resolution images do not cover the image positions"
                x = x.index_put((image_pos,), torch.cat(parts))
                image_pos = image_pos[:0]
                proj = proj[:0]
                images = []
            assert len(image_pos) == proj.shape[0], "image positions and patches disagree"
            # each image's patches fill the next -1 positions, in patch order
            x = x.index_put((image_pos,), proj)
            for i, (a, b) in enumerate(images):
                s = int(mb["img_lm_start"][i])
                assert image_pos[a:b].tolist() == list(range(s, s + b - a)), f"image {i} not at img_lm_start {s}"
        for blk in self.text.blocks:
            x = blk(x, pos, samples)
        return self.text.head(self.text.norm(x))


def image_geometry(mb):
    """Patch rows, columns (row-major over each grid) and image row ranges, from the grids alone."""
    rows, cols, images, a = [], [], [], 0
    for gh, gw in zip(mb["grid_h"].tolist(), mb["grid_w"].tolist()):
        k = torch.arange(gh * gw)
        rows.append(k // gw)
        cols.append(k % gw)
        images.append((a, a + gh * gw))
        a += gh * gw
    rows, cols = torch.cat(rows), torch.cat(cols)
    assert torch.equal(rows, mb["patch_row"].long()) and torch.equal(cols, mb["patch_col"].long()), \
        "dumped patch_row/patch_col are not row-major over the grids"
    assert mb["img_cu_patches"].tolist() == [0] + [b for _, b in images], "img_cu_patches disagrees with the grids"
    return rows, cols, images


# ------------------------------------------------------------------------------------------------
# Comparison helpers

FAILED = []


def rel_err(c, r):
    """||c - r|| / ||r|| (both float64), with ||r|| = 0 giving ||c - r||."""
    d = (c.to(DT) - r.to(DT)).norm().item()
    n = r.to(DT).norm().item()
    return d / n if n > 0 else d


def expect(ok, msg):
    print(("ok    " if ok else "FAIL  ") + msg)
    if not ok:
        FAILED.append(msg)


def load_model(c, weights, cls=LLaVA, prefix=""):
    m = cls(c).to(DT)
    sd = {k[len(prefix):]: v.to(DT) for k, v in weights.items() if k.startswith(prefix)}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    # every tensor of the dump must land in the reference and vice versa
    expect(not missing and not unexpected,
           f"dumped names match the reference modules (missing {missing}, unexpected {unexpected})")
    return m


def check_init(c, weights):
    """The init of docs/model.md "Initialisation and the optimiser": weights N(0, std) (attn out/o and MLP fc2/down by 1/sqrt(2L) of their tower,
    the projector unscaled), norms 1, biases 0. Statistical bounds: 5 standard errors of the sample
    std (std/sqrt(2n)) and of the mean (std/sqrt(n))."""
    worst = 0.0
    for name, w in weights.items():
        w = w.to(DT)
        if name.endswith(".bias"):
            expect(bool((w == 0).all()), f"init: {name} is all zeros")
            continue
        if name == "image_newline":  # LLaVA-NeXT's: N(0, 1 / sqrt(Dt)) as LlavaNextModel
            n, std = w.numel(), 1 / math.sqrt(c["Dt"])
            z = max(abs(w.std().item() / std - 1) / (1 / math.sqrt(2 * n)), abs(w.mean().item()) / (std / math.sqrt(n)))
            expect(z <= 5, f"init: image_newline N(0, 1/sqrt(Dt)) within 5 standard errors ({z:.2f})")
            continue
        if w.dim() == 1 and name != "vision.class_embedding":  # CLIP's class embedding: N(0, std) as a weight
            expect(bool((w == 1).all()), f"init: {name} is all ones")
            continue
        std = c["init_std"]
        if re.search(r"vision\.blocks\.\d+\.(attn\.out|mlp\.fc2)\.weight", name):
            std /= math.sqrt(2 * c["Lv"])
        if re.search(r"text\.blocks\.\d+\.(attn\.o|mlp\.down)\.weight", name):
            std /= math.sqrt(2 * c["Lt"])
        n = w.numel()
        s, mu = w.std().item(), w.mean().item()
        z = max(abs(s / std - 1) / (1 / math.sqrt(2 * n)), abs(mu) / (std / math.sqrt(n)))
        worst = max(worst, z)
        if z > 5:
            expect(False, f"init: {name} std {s:.5f} mean {mu:.5f}, expected std {std:.5f} mean 0")
    expect(worst <= 5, f"init: every weight matrix N(0, its std) within 5 standard errors (worst {worst:.2f})")


def compare_grads(model, grads, tol):
    worst, worst_name = 0.0, ""
    names = set()
    for name, p in model.named_parameters():
        full = name if name in grads else None
        if full is None:
            continue
        names.add(full)
        r = p.grad if p.grad is not None else torch.zeros_like(p)
        e = rel_err(grads[full], r)
        if r.norm().item() == 0:
            expect(bool((grads[full] == 0).all()), f"grad {full}: exactly zero as in the reference")
            continue
        if e > worst:
            worst, worst_name = e, full
        if e > tol:
            expect(False, f"grad {full}: relative error {e:.2e} > {tol:.0e}")
    expect(names == set(grads), f"every dumped gradient has a reference parameter ({len(names)} of {len(grads)})")
    expect(worst <= tol, f"gradients: worst ||c - ref|| / ||ref|| = {worst:.2e} ({worst_name}) <= {tol:.0e}")


# Tolerances. The C engine computes in float32 (unit roundoff u = 6e-8), the reference in float64,
# so a difference is the engine's float32 error. A GEMM of inner length K (<= 384 here) has a
# relative error of order sqrt(K) u ~ 1e-6 at worst, and a gradient passes ~30 such ops (2+2
# blocks, forward and backward); what we measure is 3e-7..8e-7 per gradient tensor (||c - ref|| /
# ||ref||) and 1e-7..3e-7 for outputs, logits and losses. Bounds: 1e-5 for gradients and 2e-6 for
# the forward, about 10x above what fp32 gives here and still 10^3..10^4 below the effect of a
# wrong formula (swapping RoPE rows and columns in one ViT block moves the logits by 3e-2).
TOL_GRAD = 1e-5
TOL_FWD = 2e-6


def microbatches(d):
    """microbatch-{m}.safetensors, plus microbatch-{m}.<stage>.safetensors written by other pipeline
    stages, unioned per microbatch."""
    groups = {}
    for f in sorted(glob.glob(os.path.join(d, "microbatch-*.safetensors"))):
        m = re.fullmatch(r"microbatch-(\d+)(\.[^.]+)?\.safetensors", os.path.basename(f))
        if m:
            groups.setdefault(int(m.group(1)), []).append(f)
    return [st_union(groups[m]) for m in sorted(groups)]


def weight_files(d, stem):
    return [f for f in sorted(glob.glob(os.path.join(d, f"{stem}*.safetensors")))
            if re.fullmatch(rf"{stem}(\.[^.]+)?\.safetensors", os.path.basename(f))]


def check_vit(d, c):
    weights = st_union(weight_files(d, "weights"))
    grads = st_union(weight_files(d, "grads"))
    check_init(c, weights)
    mb = microbatches(d)[0]
    vit = load_model(c, weights, ViT, "vision.")
    rows, cols, images = image_geometry(mb)
    out = vit(mb["patches"].to(DT), rows, cols, images)
    e = rel_err(mb["vout"], out)
    expect(e <= TOL_FWD, f"vit output: relative error {e:.2e} <= {TOL_FWD:.0e}")
    (out * mb["dvout"].to(DT)).sum().backward()
    compare_grads(vit, {k[len("vision."):]: v for k, v in grads.items()}, TOL_GRAD)


def check_step(d, c):
    weights = st_union(weight_files(d, "weights"))
    grads = st_union(weight_files(d, "grads"))
    if c.get("step", 1) == 1:  # a trainer's dump of step N > 1 holds trained weights
        check_init(c, weights)
    model = load_model(c, weights)
    mbs = microbatches(d)
    n_sup = sum(int((mb["targets"] != -100).sum()) for mb in mbs)
    expect(n_sup == c["n_supervised"], f"supervised targets: {n_sup} (config.json says {c['n_supervised']})")
    total = 0.0
    for m, mb in enumerate(mbs):
        logits = model.microbatch_logits(mb)
        ls = F.cross_entropy(logits, mb["targets"].long(), ignore_index=-100, reduction="sum")
        if "logits" in mb:
            e = rel_err(mb["logits"], logits.detach())
            expect(e <= TOL_FWD, f"microbatch {m}: logits relative error {e:.2e} <= {TOL_FWD:.0e}")
            e = abs(mb["loss_sum"].item() - ls.item()) / abs(ls.item())
            expect(e <= TOL_FWD, f"microbatch {m}: loss sum {mb['loss_sum'].item():.6f} vs {ls.item():.6f}")
        (ls / n_sup).backward()
        total += ls.item()
    loss = total / n_sup
    e = abs(c["loss"] - loss) / loss
    expect(e <= TOL_FWD, f"step loss {c['loss']:.7f} vs reference {loss:.7f} (rel {e:.1e})")
    compare_grads(model, grads, TOL_GRAD)


def lr_at(step, warmup, total, max_lr, min_lr):
    """docs/model.md: linear warm-up to max_lr ((step+1)/warmup), then cosine decay to min_lr."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    p = min(max((step - warmup) / (total - warmup), 0.0), 1.0) if total > warmup else 1.0
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * p))


def check_traj(d, c):
    weights = st_union(weight_files(d, "weights"))
    final = st_load(os.path.join(d, "weights_final.safetensors"))[0]
    check_init(c, weights)
    model = load_model(c, weights)
    mbs = microbatches(d)
    n_sup = c["n_supervised"]
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["max_lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])
    losses, norms = [], []
    for step in range(c["steps"]):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for mb in mbs:
            ls = F.cross_entropy(model.microbatch_logits(mb), mb["targets"].long(), ignore_index=-100,
                                 reduction="sum")
            (ls / n_sup).backward()
            total += ls.item()
        losses.append(total / n_sup)
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip"]).item())
        lr = lr_at(step, c["warmup"], c["steps"], c["max_lr"], c["min_lr"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        print(f"      step {step}: loss C {c['losses'][step]:.7f} ref {losses[-1]:.7f}   "
              f"grad norm C {c['grad_norms'][step]:.6f} ref {norms[-1]:.6f}   lr {lr:.6f}")
    # Losses carry the forward error plus what 10 AdamW steps made of the gradient error: Adam
    # divides by sqrt(v), so an element's update is O(lr) whatever its size, and fp32 noise on
    # near-zero gradient elements moves those weights by up to ~lr per step; the loss is
    # insensitive to them to first order (their gradient is ~0). Measured 2e-7; bound 1e-5.
    worst = max(abs(a - b) / b for a, b in zip(c["losses"], losses))
    expect(worst <= 1e-5, f"10-step loss trajectory: worst relative difference {worst:.2e} <= 1e-5")
    worst = max(abs(a - b) / b for a, b in zip(c["grad_norms"], norms))
    expect(worst <= TOL_GRAD, f"10-step grad norms: worst relative difference {worst:.2e} <= {TOL_GRAD:.0e}")
    expect(losses[-1] < 0.8 * losses[0], f"loss falls over 10 steps on a repeated batch ({losses[0]:.4f} -> "
                                         f"{losses[-1]:.4f})")
    # Final weights: per tensor ||c - ref|| / ||ref||; the O(lr) moves of near-zero-gradient
    # elements above are a small fraction of a tensor's norm. Measured 5e-5 (a bias vector whose
    # norm is itself O(lr)); bound 5e-4.
    worst, wn = 0.0, ""
    for name, p in model.named_parameters():
        e = rel_err(final[name], p.detach())
        if e > worst:
            worst, wn = e, name
    expect(worst <= 5e-4, f"weights after 10 steps: worst relative error {worst:.2e} ({wn}) <= 5e-4")


def check_dir(d):
    path = os.path.join(d, "config.json")
    if not os.path.isfile(path):
        print(f"error: {path} does not exist: not a step dump (README.md, \"Step dumps\")")
        return 1
    with open(path) as f:
        c = json.load(f)
    for key in ("patch", "Dv", "Lv", "Hv", "Dt", "Lt", "Ht", "F", "V", "init_std"):
        if key not in c:
            print(f"error: {path}: no \"{key}\" (the model config that model_dump_config writes)")
            return 1
    case = c.get("case", "step")
    print(f"checking {d} (case {case})")
    {"vit": check_vit, "traj": check_traj}.get(case, check_step)(d, c)
    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", nargs=3, metavar=("BIN", "CASE", "DIR"))
    ap.add_argument("--check", metavar="DIR")
    a = ap.parse_args()
    if a.run:
        b, case, d = a.run
        r = subprocess.run([b, case, d])
        if r.returncode != 0:
            print(f"{b} {case} {d} failed with exit {r.returncode}")
            return 1
        return check_dir(d)
    if a.check:
        return check_dir(a.check)
    ap.print_usage()
    return 2


if __name__ == "__main__":
    sys.exit(main())
