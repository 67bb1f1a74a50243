#!/usr/bin/env python3
"""train_vs_torch.py — the PyTorch side of bench/train_vs_torch.sh.

Reads a step dump of rrfp-mm (RUN/dump-1/: config.json, weights.safetensors, microbatch-K.safetensors,
step.json), builds the same LLaVA model (docs/model.md "The model, exactly") in PyTorch from those weights, checks
that its loss on the dumped step equals the engine's (so both really train the same model on the
same batch), then times STEPS training steps on that batch: forward + backward of every microbatch
(loss scaled by 1 / supervised targets of the step), global-norm clipping and AdamW, as the engine's
step does. Prints one JSON line: {"torch_tokens_per_s", "torch_step_s" (median after the first step),
"torch_best_step_s", "tokens", "loss_torch", "loss_engine"}.

Attention runs per packed sample (per image in the ViT), the cheapest exact form in PyTorch 1.13
(no varlen fused attention there); everything else is batched over the microbatch.
Usage: train_vs_torch.py DUMP_DIR --steps N --threads T
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as Fn


def st_load(path):
    """Minimal safetensors reader (json + struct), returning {name: tensor}."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in hdr.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = {"F32": torch.float32, "I32": torch.int32}[info["dtype"]]
        buf = bytearray(data[base + b:base + e])
        t = torch.frombuffer(buf, dtype=dt) if len(buf) else torch.zeros(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def rope_tables(pos, n):
    """cos, sin of shape (len(pos), n) for 1-D NeoX RoPE of dim n."""
    i = torch.arange(n // 2, dtype=torch.float64)
    freq = 10000.0 ** (-2.0 * i / n)
    ang = pos.to(torch.float64)[:, None] * freq[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], dim=1).float()
    sin = torch.cat([ang.sin(), ang.sin()], dim=1).float()
    return cos, sin


def rot_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def rope(x, cos, sin):  # x (N, H, n), cos/sin (N, n)
    return x * cos[:, None, :] + rot_half(x) * sin[:, None, :]


class Model:
    def __init__(self, cfg, w):
        self.c = cfg
        self.w = {k: v.clone().requires_grad_(True) for k, v in w.items()}

    def params(self):
        return list(self.w.values())

    def vit(self, mb):
        c, w = self.c, self.w
        D, H = c["Dv"], c["Hv"]
        d = D // H
        x = Fn.linear(mb["patches"], w["vision.patch_embed.weight"], w["vision.patch_embed.bias"])
        cr, sr = rope_tables(mb["patch_row"], d // 2)
        cc, sc = rope_tables(mb["patch_col"], d // 2)
        cu = mb["img_cu_patches"].tolist()
        for l in range(c["Lv"]):
            p = "vision.blocks.%d." % l
            h = Fn.layer_norm(x, (D,), w[p + "ln1.weight"], w[p + "ln1.bias"], 1e-5)
            qkv = Fn.linear(h, w[p + "attn.qkv.weight"], w[p + "attn.qkv.bias"])
            q, k, v = qkv.split(D, dim=1)
            q = q.reshape(-1, H, d)
            k = k.reshape(-1, H, d)
            v = v.reshape(-1, H, d)
            q = torch.cat([rope(q[..., :d // 2], cr, sr), rope(q[..., d // 2:], cc, sc)], dim=-1)
            k = torch.cat([rope(k[..., :d // 2], cr, sr), rope(k[..., d // 2:], cc, sc)], dim=-1)
            outs = []
            for i in range(len(cu) - 1):
                a, b = cu[i], cu[i + 1]
                qi, ki, vi = q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1)
                s = torch.softmax(qi @ ki.transpose(1, 2) / math.sqrt(d), dim=-1)
                outs.append((s @ vi).transpose(0, 1).reshape(b - a, D))
            att = torch.cat(outs, dim=0)
            x = x + Fn.linear(att, w[p + "attn.out.weight"], w[p + "attn.out.bias"])
            h = Fn.layer_norm(x, (D,), w[p + "ln2.weight"], w[p + "ln2.bias"], 1e-5)
            h = Fn.gelu(Fn.linear(h, w[p + "mlp.fc1.weight"], w[p + "mlp.fc1.bias"]), approximate="tanh")
            x = x + Fn.linear(h, w[p + "mlp.fc2.weight"], w[p + "mlp.fc2.bias"])
        x = Fn.layer_norm(x, (D,), w["vision.ln_f.weight"], w["vision.ln_f.bias"], 1e-5)
        h = Fn.gelu(Fn.linear(x, w["projector.0.weight"], w["projector.0.bias"]), approximate="tanh")
        return Fn.linear(h, w["projector.2.weight"], w["projector.2.bias"])

    def rms(self, x, wt):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * wt

    def loss_sum(self, mb):
        c, w = self.c, self.w
        D, H = c["Dt"], c["Ht"]
        d = D // H
        ids = mb["ids"].long()
        T = ids.shape[0]
        img = self.vit(mb) if mb["patches"].shape[0] > 0 else None
        text = ids >= 0
        x = torch.zeros(T, D)
        x = x.index_put((text.nonzero()[:, 0],), w["text.embed.weight"][ids[text]])
        if img is not None:
            x = x.index_put((mb["img_pos"],), img)
        cos, sin = rope_tables(mb["pos"], d)
        cu = mb["cu_seqlens"].tolist()
        masks = {}
        for l in range(c["Lt"]):
            p = "text.blocks.%d." % l
            h = self.rms(x, w[p + "norm1.weight"])
            q = rope(Fn.linear(h, w[p + "attn.q.weight"]).reshape(T, H, d), cos, sin)
            k = rope(Fn.linear(h, w[p + "attn.k.weight"]).reshape(T, H, d), cos, sin)
            v = Fn.linear(h, w[p + "attn.v.weight"]).reshape(T, H, d)
            outs = []
            for i in range(len(cu) - 1):
                a, b = cu[i], cu[i + 1]
                n = b - a
                if n not in masks:
                    masks[n] = torch.full((n, n), float("-inf")).triu(1)
                qi, ki, vi = q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1)
                s = torch.softmax(qi @ ki.transpose(1, 2) / math.sqrt(d) + masks[n], dim=-1)
                outs.append((s @ vi).transpose(0, 1).reshape(n, D))
            x = x + Fn.linear(torch.cat(outs, dim=0), w[p + "attn.o.weight"])
            h = self.rms(x, w[p + "norm2.weight"])
            g = Fn.linear(h, w[p + "mlp.gate.weight"])
            u = Fn.linear(h, w[p + "mlp.up.weight"])
            x = x + Fn.linear(Fn.silu(g) * u, w[p + "mlp.down.weight"])
        x = self.rms(x, w["text.norm.weight"])
        logits = Fn.linear(x, w["text.lm_head.weight"])
        return Fn.cross_entropy(logits, mb["targets"].long(), ignore_index=-100, reduction="sum")


def prepare(mb):
    """Image positions in LM order (image i's patches at img_lm_start[i] + j)."""
    cu = mb["img_cu_patches"].tolist()
    st = mb["img_lm_start"].tolist()
    pos = []
    for i in range(len(cu) - 1):
        pos.extend(range(st[i], st[i] + cu[i + 1] - cu[i]))
    mb["img_pos"] = torch.tensor(pos, dtype=torch.long)
    return mb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg_all = json.load(open(os.path.join(a.dump, "config.json")))
    cfg = cfg_all.get("model", cfg_all)
    step = json.load(open(os.path.join(a.dump, "step.json")))
    w = st_load(os.path.join(a.dump, "weights.safetensors"))
    mbs = [prepare(st_load(os.path.join(a.dump, "microbatch-%d.safetensors" % m))) for m in range(step["microbatches"])]
    tokens = sum(int(mb["ids"].shape[0]) for mb in mbs)
    n_sup = step["n_supervised"]
    model = Model(cfg, w)
    decay = [p for n, p in model.w.items() if p.dim() == 2]
    no_decay = [p for n, p in model.w.items() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    times = []
    loss0 = None
    for s in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for mb in mbs:
            l = model.loss_sum(mb)
            (l / n_sup).backward()
            total += l.item()
        torch.nn.utils.clip_grad_norm_(model.params(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        if s == 0:
            loss0 = total / n_sup
    # the first step on the dumped weights must give the engine's loss (f32 sums in another order:
    # agreement to 1e-4 relative is what independent f32 implementations reach; a wrong model or
    # batch differs in the first digit)
    rel = abs(loss0 - step["loss"]) / abs(step["loss"])
    if rel > 1e-4:
        print("train_vs_torch: PyTorch loss %.6f != engine loss %.6f (rel %.2e): not the same model/batch"
              % (loss0, step["loss"], rel), file=sys.stderr)
        return 1
    timed = times[1:] if len(times) > 1 else times
    med, best = statistics.median(timed), min(timed)
    print(json.dumps({"torch_tokens_per_s": tokens / med, "torch_step_s": med, "torch_best_step_s": best,
                      "steps": timed, "tokens": tokens,
                      "loss_torch": loss0, "loss_engine": step["loss"], "threads": a.threads}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
