#!/usr/bin/env python3
"""gpu_stage_torch.py — the PyTorch side of bench/gpu_stage.sh: one pipeline stage of the
7B recipe on the sample shapes our run trains on (a plan file, `HxW+F` per sample, which ours reads as
data.synthetic_plan), forward + backward in bf16 autocast, with or without an AdamW step, eager or
torch.compile, and the GEMM-only bound of the same shapes:
  lm:     4 LM blocks of width 4096, SwiGLU 11008, 32 heads, RMSNorm, NeoX RoPE, causal attention within
          each packed sample (samples of 64..1024 tokens filling 4096);
  vit:    the ViT at CLIP-L width (1024, 16 heads, GELU MLP 4096, LayerNorm, 24 blocks), bidirectional
          attention within each image (seven 576-patch images);
  stage0: the 7B recipe's pipeline stage 0 (parallel.pp = 8): the ViT above on images of 64..576
          patches, the projector (1024 -> 4096 -> 4096, GELU), the image rows spliced into the samples'
          token rows, and 4 LM blocks over the 4096 packed tokens.
`scaled_dot_product_attention` per sample (no padding, no mask) where this PyTorch has it.

  gpu_stage_torch.py --check                       CPU-side checks, tiny shapes: the model-FLOP formulas
                                                   equal the FLOPs this module really runs (hooks), the
                                                   plans fill the microbatch and parse back
  gpu_stage_torch.py --write-plan STAGE FILE [T]   the stage's plan (one microbatch of T = 4096 LM tokens)
  gpu_stage_torch.py --stage S --plan FILE [--mode eager|compile] [--optim 0|1] [--reps N]
                                                   on the GPU: one JSON line {"tokens_per_s", "mfu", ...}
  gpu_stage_torch.py --stage S --plan FILE --gemm  the GEMMs of the stage alone (cuBLAS through
                                                   torch.matmul, bf16), forward + backward shapes

Model FLOPs = 2 x multiply-adds of every GEMM and of the two attention products (causal: only the
j <= i half), x 3 for forward + backward. MFU = model FLOPs / time / 989e12 (H100 SXM dense bf16).
tokens/s counts LM positions (image rows included) for lm and stage0, patches for vit."""
import json
import math
import sys
import time

import torch
import torch.nn.functional as Fn

H100_BF16_DENSE = 989e12
SHAPES = {"lm": dict(D=4096, F=11008, H=32, L=4),
          "vit": dict(D=1024, F=4096, H=16, L=24)}
PATCH = 14  # the 7B recipe's patch: a patch row has 3 * 14 * 14 values


def lcg(x):
    return (6364136223846793005 * x + 1442695040888963407) % (1 << 64)


def pack_lengths(kind, total, seed=1):
    """LM samples of 64..1024 tokens until `total` is filled (the last one cut), or 576-patch images."""
    if kind == "vit":
        return [576] * (total // 576)
    x, lens = seed, []
    while sum(lens) < total:
        x = lcg(x)
        lens.append(64 + (x >> 33) % 961)
    lens[-1] -= sum(lens) - total
    return lens


def make_plan(stage, total=4096, seed=1):
    """One microbatch as samples (h, w, f): image grid h x w and f >= 4 text tokens (LM length h w + f)."""
    if stage == "lm":  # text samples: a 1x1 image (our tiny ViT's one row) and the rest text
        return [(1, 1, l - 1) for l in pack_lengths("lm", total, seed)]
    if stage == "vit":  # 576-patch images and 4 text tokens each: 7 x 580 = 4060 <= 4096
        return [(24, 24, 4) for _ in range(total // 580)]
    x, plan, used = seed, [], 0
    while True:  # stage0: images of 64..576 patches (square-ish grids) with 16..271 text tokens
        x = lcg(x)
        side = 8 + (x >> 33) % 17              # 8..24
        x = lcg(x)
        w = max(8, side - (x >> 33) % 3)       # side-2 .. side, >= 8: 64 .. 576 patches
        x = lcg(x)
        f = 16 + (x >> 33) % 256
        if used + side * w + f > total:
            break
        plan.append((side, w, f))
        used += side * w + f
    return plan


def write_plan(plan, path):
    with open(path, "w") as fh:
        fh.write(" ".join("%dx%d+%d" % s for s in plan) + "\n")


def read_plan(path):
    """The first line's samples (the benchmark runs one fixed microbatch)."""
    with open(path) as fh:
        line = fh.readline().split()
    plan = []
    for tok in line:
        hw, f = tok.split("+")
        h, w = hw.split("x")
        plan.append((int(h), int(w), int(f)))
    return plan


def lm_flops(lens, D, F, L):
    gemm = 2 * sum(lens) * (4 * D * D + 3 * D * F)  # q, k, v, o; gate, up, down
    attn = sum(4 * D * l * (l + 1) // 2 for l in lens)  # q k^T and p v over j <= i
    return 3 * L * (gemm + attn)


def vit_flops(lens, D, F, L):
    gemm = 2 * sum(lens) * (4 * D * D + 2 * D * F)  # qkv (3D x D), out; fc1, fc2
    attn = sum(4 * D * l * l for l in lens)
    return 3 * L * (gemm + attn)


def stage_flops(stage, plan):
    lm, vit = SHAPES["lm"], SHAPES["vit"]
    if stage == "lm":
        return lm_flops([h * w + f for h, w, f in plan], lm["D"], lm["F"], lm["L"])
    if stage == "vit":
        return vit_flops([h * w for h, w, f in plan], vit["D"], vit["F"], vit["L"])
    np_ = sum(h * w for h, w, f in plan)
    Dv, Dt = vit["D"], lm["D"]
    patch_embed = 3 * 2 * np_ * 3 * PATCH * PATCH * Dv
    proj = 3 * 2 * np_ * (Dv * Dt + Dt * Dt)
    return (vit_flops([h * w for h, w, f in plan], Dv, vit["F"], vit["L"]) + patch_embed + proj +
            lm_flops([h * w + f for h, w, f in plan], Dt, lm["F"], lm["L"]))


def stage_tokens(stage, plan):
    return sum(h * w for h, w, f in plan) if stage == "vit" else sum(h * w + f for h, w, f in plan)


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


class Stage(torch.nn.Module):
    """lm / vit: the blocks over x; stage0: patch embedding, ViT, projector, splice, LM blocks."""

    def __init__(self, stage, small=False):
        super().__init__()
        self.stage = stage
        lm, vit = dict(SHAPES["lm"]), dict(SHAPES["vit"])
        if small:  # --check: tiny widths, same structure
            lm.update(D=64, F=172, H=4, L=2)
            vit.update(D=32, F=128, H=2, L=2)
        self.lm, self.vit = lm, vit
        if stage in ("vit", "stage0"):
            self.vblocks = torch.nn.ModuleList([Block("vit", vit["D"], vit["F"], vit["H"]) for _ in range(vit["L"])])
        if stage in ("lm", "stage0"):
            self.lblocks = torch.nn.ModuleList([Block("lm", lm["D"], lm["F"], lm["H"]) for _ in range(lm["L"])])
        if stage == "stage0":
            self.patch = torch.nn.Linear(3 * PATCH * PATCH, vit["D"])
            self.proj1 = torch.nn.Linear(vit["D"], lm["D"])
            self.proj2 = torch.nn.Linear(lm["D"], lm["D"])

    def inputs(self, plan, device, dtype=torch.float32):
        """The stage's input tensor, the sequences and positions (ours: the same shapes from the plan)."""
        g = torch.Generator().manual_seed(0)
        imgs = [h * w for h, w, f in plan]
        lens = [h * w + f for h, w, f in plan]
        if self.stage == "vit":
            x = torch.randn(sum(imgs), self.vit["D"], generator=g)
        elif self.stage == "lm":
            x = torch.randn(sum(lens), self.lm["D"], generator=g)
        else:
            x = torch.randn(sum(imgs), 3 * PATCH * PATCH, generator=g)
        x = x.to(device=device, dtype=dtype).requires_grad_(self.stage != "stage0")
        pos = torch.cat([torch.arange(l) for l in lens]).to(device)
        text = torch.randn(sum(lens) - sum(imgs), self.lm["D"], generator=g).to(device=device, dtype=dtype)
        return x, imgs, lens, pos, text

    def forward(self, x, imgs, lens, pos, text, count=False):
        if self.stage == "vit":
            for b in self.vblocks:
                x = b(x, imgs, None, count)
            return x
        if self.stage == "stage0":
            v = self.patch(x)
            for b in self.vblocks:
                v = b(v, imgs, None, count)
            v = self.proj2(Fn.gelu(self.proj1(v), approximate="tanh"))
            rows, vi, ti = [], 0, 0  # each sample: its image rows, then its text rows
            for n, l in zip(imgs, lens):
                rows += [v[vi:vi + n], text[ti:ti + l - n].to(v.dtype)]
                vi, ti = vi + n, ti + l - n
            x = torch.cat(rows, 0)
        for b in self.lblocks:
            x = b(x, lens, pos, count)
        return x


def check():
    ok = True
    for stage in ("lm", "vit", "stage0"):
        plan = make_plan(stage)
        tokens = sum(h * w + f for h, w, f in plan)
        fits = tokens <= 4096 and all(f >= 4 and h * w >= 1 for h, w, f in plan)
        if stage == "lm":
            fits &= tokens == 4096 and len(set(h * w + f for h, w, f in plan)) > 2
        if stage == "stage0":
            fits &= all(64 <= h * w <= 576 for h, w, f in plan) and tokens > 3500
        write_plan(plan, "/tmp/gpu_stage_check_plan.txt")
        back = read_plan("/tmp/gpu_stage_check_plan.txt")
        print("check: %s plan: %d samples, %d LM tokens, %d patches%s: %s"
              % (stage, len(plan), tokens, sum(h * w for h, w, f in plan),
                 ", images %d..%d patches" % (min(h * w for h, w, f in plan), max(h * w for h, w, f in plan))
                 if stage == "stage0" else "", "ok" if fits and back == plan else "FAIL"))
        ok &= fits and back == plan
        # the FLOP formula against the module at tiny widths, on a small plan of the same kind
        small = [(h, w, f) for h, w, f in plan][:3]
        if stage == "vit":
            small = [(4, 4, 4), (3, 5, 4)]
        elif stage == "stage0":
            small = [(2, 3, 9), (3, 3, 5)]
        m = Stage(stage, small=True)
        Counter.flops = 0
        hooks = [mod.register_forward_hook(lambda mod, i, o: setattr(Counter, "flops", Counter.flops + 2 * i[0].shape[0] * mod.in_features * mod.out_features))
                 for mod in m.modules() if isinstance(mod, torch.nn.Linear)]
        x, imgs, lens, pos, text = m.inputs(small, "cpu")
        y = m(x, imgs, lens, pos, text, count=True)
        y.float().square().mean().backward()
        for h in hooks:
            h.remove()
        lm, vit = m.lm, m.vit
        if stage == "lm":
            want = lm_flops(lens, lm["D"], lm["F"], lm["L"])
        elif stage == "vit":
            want = vit_flops(imgs, vit["D"], vit["F"], vit["L"])
        else:
            np_ = sum(imgs)
            want = (vit_flops(imgs, vit["D"], vit["F"], vit["L"]) + 3 * 2 * np_ * 3 * PATCH * PATCH * vit["D"] +
                    3 * 2 * np_ * (vit["D"] * lm["D"] + lm["D"] * lm["D"]) + lm_flops(lens, lm["D"], lm["F"], lm["L"]))
        got = 3 * Counter.flops
        grads = [p.grad for p in m.parameters()]
        finite = all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
        print("check: %s tiny module: counted %d model FLOPs, formula %d, gradients %s %s"
              % (stage, got, want, "finite" if finite else "MISSING", "ok" if got == want and finite else "FAIL"))
        ok &= got == want and finite
    print("check: 7B stage model FLOPs per microbatch: lm %.3e, vit %.3e, stage0 %.3e"
          % tuple(stage_flops(s, make_plan(s)) for s in ("lm", "vit", "stage0")))
    print("gpu_stage_torch check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def timed(step, reps):
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def bench(stage, plan, mode, optim, reps):
    if not torch.cuda.is_available():
        print(json.dumps({"stage": stage, "not_measured": "no GPU"}))
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    m = Stage(stage).cuda()
    x, imgs, lens, pos, text = m.inputs(plan, "cuda")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-5, fused=True) if optim else None
    fwd = m
    if mode == "compile":
        if not hasattr(torch, "compile"):
            print(json.dumps({"stage": stage, "not_measured": "no torch.compile in torch %s" % torch.__version__}))
            return 0
        fwd = torch.compile(m)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = fwd(x, imgs, lens, pos, text)
        y.float().square().mean().backward()
        if opt:
            opt.step()
            opt.zero_grad(set_to_none=True)

    dt = timed(step, reps)
    fl, tok = stage_flops(stage, plan), stage_tokens(stage, plan)
    print(json.dumps({"stage": stage, "mode": mode, "optim": optim, "tokens": tok, "step_s": dt,
                      "tokens_per_s": tok / dt, "tflops": fl / dt / 1e12, "mfu": fl / dt / H100_BF16_DENSE,
                      "peak_mb": torch.cuda.max_memory_allocated() / 2**20, "torch": torch.__version__}))
    return 0


def gemm_bound(stage, plan, reps):
    """Every GEMM of the stage (forward, input and weight gradients) as bf16 torch.matmul calls."""
    if not torch.cuda.is_available():
        print(json.dumps({"stage": stage, "not_measured": "no GPU"}))
        return 0
    lm, vit = SHAPES["lm"], SHAPES["vit"]
    shapes = []  # (M, K, N): (M, K) @ (K, N), L times
    np_, T = sum(h * w for h, w, f in plan), sum(h * w + f for h, w, f in plan)
    if stage in ("lm", "stage0"):
        D, F = lm["D"], lm["F"]
        shapes += [(T, D, D)] * 4 * lm["L"] + [(T, D, F)] * 2 * lm["L"] + [(T, F, D)] * lm["L"]
    if stage in ("vit", "stage0"):
        D, F = vit["D"], vit["F"]
        shapes += [(np_, D, 3 * D), (np_, D, D), (np_, D, F), (np_, F, D)] * vit["L"]
    if stage == "stage0":
        shapes += [(np_, 3 * PATCH * PATCH, vit["D"]), (np_, vit["D"], lm["D"]), (np_, lm["D"], lm["D"])]
    mats = {}
    for M, K, N in set(shapes):
        mats[(M, K, N)] = tuple(torch.randn(*s, device="cuda", dtype=torch.bfloat16) for s in ((M, K), (K, N), (M, N)))

    def step():
        for s in shapes:
            a, b, dy = mats[s]
            a @ b            # forward
            dy @ b.t()       # input gradient
            a.t() @ dy       # weight gradient
    dt = timed(step, reps)
    fl = sum(6 * M * K * N for M, K, N in shapes)
    tok = stage_tokens(stage, plan)
    print(json.dumps({"stage": stage, "gemm_s": dt, "gemm_tflops": fl / dt / 1e12, "tokens_per_s_bound": tok / dt}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        sys.exit(check())
    if len(sys.argv) > 3 and sys.argv[1] == "--write-plan":
        write_plan(make_plan(sys.argv[2], int(sys.argv[4]) if len(sys.argv) > 4 else 4096), sys.argv[3])
        sys.exit(0)
    a = sys.argv[1:]
    args = dict(zip(a[::2], a[1::2])) if "--gemm" not in a else dict(zip(*[iter([x for x in a if x != "--gemm"])] * 2))
    stage, plan = args.get("--stage", "lm"), read_plan(args["--plan"])
    if "--gemm" in a:
        sys.exit(gemm_bound(stage, plan, int(args.get("--reps", "5"))))
    sys.exit(bench(stage, plan, args.get("--mode", "eager"), int(args.get("--optim", "0")), int(args.get("--reps", "5"))))
