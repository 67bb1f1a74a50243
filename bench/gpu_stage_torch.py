#!/usr/bin/env python3
"""gpu_stage_torch.py — the PyTorch side of bench/gpu_stage.sh (issue 11): one pipeline stage of the
7B recipe's LM (4 blocks of width 4096, SwiGLU 11008, 32 heads, RMSNorm, NeoX RoPE, causal attention
within each packed sample) or of its ViT (CLIP-L width 1024, 16 heads, GELU MLP 4096, LayerNorm,
bidirectional attention within each 576-patch image), forward + backward in bf16 autocast, with
`scaled_dot_product_attention` where this PyTorch has it (a per-sample loop: no padding, no mask).

  gpu_stage_torch.py --check                  CPU-side checks, tiny shapes: the model-FLOP formula
                                              (stage_flops) equals the FLOPs of the GEMMs and attention
                                              products this module really runs (counted by hooks), and
                                              the packing plan fills the microbatch with varying lengths
  gpu_stage_torch.py --stage lm|vit --reps N  on the GPU: one JSON line {"tokens_per_s", "tflops", "mfu"}

Model FLOPs = 2 x multiply-adds of every GEMM and of the two attention products (causal: only the
j <= i half), x 3 for forward + backward (backward = 2 x forward). MFU = model FLOPs / time / 989e12
(H100 SXM dense bf16)."""
import json
import math
import sys
import time

import torch
import torch.nn.functional as Fn

H100_BF16_DENSE = 989e12


def pack_lengths(kind, total, seed=1):
    """The sample lengths of one microbatch: LM samples of 64..1024 tokens until `total` is filled (the
    last one cut), or ViT images of 576 patches. Deterministic for a seed (a 64-bit LCG)."""
    if kind == "vit":
        return [576] * (total // 576)
    x, lens = seed, []
    while sum(lens) < total:
        x = (6364136223846793005 * x + 1442695040888963407) % (1 << 64)
        lens.append(64 + (x >> 33) % 961)
    lens[-1] -= sum(lens) - total
    return lens


def stage_flops(kind, lens, D, F, L):
    """Model FLOPs of forward + backward of L blocks over the packed samples `lens`."""
    T = sum(lens)
    if kind == "lm":
        gemm = 2 * T * (4 * D * D + 3 * D * F)  # q, k, v, o; gate, up, down
        attn = sum(4 * D * l * (l + 1) // 2 for l in lens)  # q k^T and p v over j <= i
    else:
        gemm = 2 * T * (4 * D * D + 2 * D * F)  # qkv (3D x D), out; fc1, fc2
        attn = sum(4 * D * l * l for l in lens)
    return 3 * L * (gemm + attn)


class Counter:
    flops = 0


def attention(q, k, v, lens, causal, count):
    """q, k, v: (T, H, d). Per sample: softmax(q k^T / sqrt d) v, causal within the sample for the LM."""
    outs, t = [], 0
    for l in lens:
        qs, ks, vs = (x[t:t + l].transpose(0, 1) for x in (q, k, v))  # (H, l, d)
        if count:
            H, _, d = qs.shape
            Counter.flops += 4 * H * d * (l * (l + 1) // 2 if causal else l * l)
        if hasattr(Fn, "scaled_dot_product_attention"):
            o = Fn.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
        else:  # PyTorch < 2.0
            s = qs @ ks.transpose(1, 2) / math.sqrt(qs.shape[-1])
            if causal:
                s = s.masked_fill(torch.ones(l, l, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
            o = torch.softmax(s.float(), -1).to(vs.dtype) @ vs
        outs.append(o.transpose(0, 1))
        t += l
    return torch.cat(outs, 0)


def rope(x, pos):
    """NeoX rotate-half RoPE over the last dim of x (T, H, d) at positions pos (T)."""
    d = x.shape[-1]
    freq = 10000.0 ** (-torch.arange(0, d // 2, device=x.device, dtype=torch.float32) * 2 / d)
    ang = pos[:, None].float() * freq[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
    a, b = x[..., : d // 2], x[..., d // 2:]
    return (x.float() * cos + torch.cat([-b, a], -1).float() * sin).to(x.dtype)


class RMSNorm(torch.nn.Module):
    def __init__(self, D):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(D))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * self.w


class Block(torch.nn.Module):
    def __init__(self, kind, D, F, H):
        super().__init__()
        self.kind, self.H = kind, H
        lin = lambda i, o: torch.nn.Linear(i, o, bias=kind == "vit")
        if kind == "lm":
            self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
            self.q, self.k, self.v, self.o = lin(D, D), lin(D, D), lin(D, D), lin(D, D)
            self.gate, self.up, self.down = lin(D, F), lin(D, F), lin(F, D)
        else:
            self.n1, self.n2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
            self.qkv, self.o = lin(D, 3 * D), lin(D, D)
            self.fc1, self.fc2 = lin(D, F), lin(F, D)

    def forward(self, x, lens, pos, count):
        T, D = x.shape
        h = self.n1(x)
        if self.kind == "lm":
            q, k, v = (m(h).view(T, self.H, -1) for m in (self.q, self.k, self.v))
            q, k = rope(q, pos), rope(k, pos)
        else:  # 2-D RoPE of the ViT is elementwise: left out of the FLOPs and of this timing alike
            q, k, v = self.qkv(h).view(T, 3, self.H, -1).unbind(1)
        x = x + self.o(attention(q, k, v, lens, self.kind == "lm", count).reshape(T, D))
        h = self.n2(x)
        if self.kind == "lm":
            return x + self.down(Fn.silu(self.gate(h)) * self.up(h))
        return x + self.fc2(Fn.gelu(self.fc1(h), approximate="tanh"))


def build(kind, D, F, H, L, device):
    blocks = torch.nn.ModuleList([Block(kind, D, F, H) for _ in range(L)]).to(device)
    return blocks


def run(blocks, x, lens, pos, count=False):
    for b in blocks:
        x = b(x, lens, pos, count)
    return x


def check():
    ok = True
    for kind, D, F, H, L, total in (("lm", 64, 172, 4, 2, 2000), ("vit", 32, 128, 2, 2, 3 * 576)):
        lens = pack_lengths(kind, total)
        if sum(lens) != total or (kind == "lm" and len(set(lens)) < 2):
            print("check: FAIL: packing of %s: %s" % (kind, lens)); ok = False
        blocks = build(kind, D, F, H, L, "cpu")
        Counter.flops = 0
        hooks = [m.register_forward_hook(lambda m, i, o: setattr(Counter, "flops", Counter.flops + 2 * i[0].shape[0] * m.in_features * m.out_features))
                 for m in blocks.modules() if isinstance(m, torch.nn.Linear)]
        pos = torch.cat([torch.arange(l) for l in lens])
        x = torch.randn(total, D, requires_grad=True)
        y = run(blocks, x, lens, pos, count=True)
        y.float().square().mean().backward()
        for h in hooks:
            h.remove()
        want = stage_flops(kind, lens, D, F, L)
        got = 3 * Counter.flops
        print("check: %s D=%d F=%d L=%d T=%d samples=%d: counted %d model FLOPs, formula %d %s"
              % (kind, D, F, L, total, len(lens), got, want, "ok" if got == want else "FAIL"))
        ok &= got == want and bool(torch.isfinite(x.grad).all())
    lens = pack_lengths("lm", 4096)
    print("check: 7B LM stage microbatch: %d samples, lengths %d..%d, %d tokens; model FLOPs per microbatch %.3e"
          % (len(lens), min(lens), max(lens), sum(lens), stage_flops("lm", lens, 4096, 11008, 4)))
    print("gpu_stage_torch check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def bench(kind, reps):
    if not torch.cuda.is_available():
        print(json.dumps({"stage": kind, "not_measured": "no GPU"}))
        return 0
    D, F, H, L = (4096, 11008, 32, 4) if kind == "lm" else (1024, 4096, 16, 24)
    lens = pack_lengths(kind, 4096)
    T = sum(lens)
    blocks = build(kind, D, F, H, L, "cuda")
    pos = torch.cat([torch.arange(l) for l in lens]).cuda()
    x = torch.randn(T, D, device="cuda", requires_grad=True)
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = run(blocks, x, lens, pos)
        y.float().square().mean().backward()
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / reps
    fl = stage_flops(kind, lens, D, F, L)
    print(json.dumps({"stage": kind, "tokens": T, "step_s": dt, "tokens_per_s": T / dt, "tflops": fl / dt / 1e12,
                      "mfu": fl / dt / H100_BF16_DENSE, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        sys.exit(check())
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    sys.exit(bench(args.get("--stage", "lm"), int(args.get("--reps", "10"))))
