#!/usr/bin/env python3
"""attention_torch.py — PyTorch 1.13 timings of the same packed attention, for bench/attention.sh.

Reads the packings from `rrfp-bench-attn --list` on stdin ("name causal H d T len,len,..."), builds the
same layout (fused (T, 3*H*d) qkv for ViT packings is irrelevant to torch's cost, so q, k, v are
separate (T, H, d) tensors), and per sequence runs what PyTorch 1.13 offers (no
scaled_dot_product_attention there): scores = q k^T * scale, causal mask by masked_fill, softmax,
P v. Backward is autograd from out.backward(R). Prints "name fwd_seconds bwd_seconds" (medians).
torch.set_num_threads(2), like the C bench's two OpenMP threads."""
import math
import sys
import time

import torch

torch.set_num_threads(2)
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def attention(q, k, v, lens, causal):
    outs, t0 = [], 0
    scale = 1.0 / math.sqrt(q.shape[-1])
    for n in lens:
        qs, ks, vs = (x[t0:t0 + n].transpose(0, 1) for x in (q, k, v))  # (H, n, d)
        s = torch.matmul(qs, ks.transpose(1, 2)) * scale
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        p = torch.softmax(s, dim=-1)
        outs.append(torch.matmul(p, vs).transpose(0, 1).reshape(n, -1))
        t0 += n
    return torch.cat(outs, 0)


def median_time(fn):
    fn()  # warm-up
    ts = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


for line in sys.stdin:
    name, causal, H, d, T, lens = line.split()
    causal, H, d, T = int(causal), int(H), int(d), int(T)
    lens = [int(x) for x in lens.split(",")]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.rand(T, H, d, generator=g) * 2 - 1 for _ in range(3))
    R = torch.rand(T, H * d, generator=g) * 2 - 1

    def fwd():
        with torch.no_grad():
            attention(q, k, v, lens, causal)

    def bwd_only():
        for x in (q, k, v):
            x.requires_grad_(True)
            x.grad = None
        out = attention(q, k, v, lens, causal)
        t0 = time.perf_counter()
        out.backward(R)
        return time.perf_counter() - t0

    tf = median_time(fwd)
    bwd_only()  # warm-up
    tb = sorted(bwd_only() for _ in range(REPS))[REPS // 2]
    for x in (q, k, v):
        x.requires_grad_(False)
    print(f"{name} {tf:.6f} {tb:.6f}", flush=True)
