#!/usr/bin/env python3
"""gpu_attention_torch.py — PyTorch's flash attention on the packings of bench/gpu_attn_bench.c (the same list,
the same FLOP count), for bench/gpu_attention.sh: forward and backward time and TFLOP/s, bf16.

Per packing, the first of these that runs:
  varlen:     torch.ops.aten._flash_attention_forward / _backward on the packed (T, H, d) tensors with
              cu_seqlens (FlashAttention-2's varlen kernels inside PyTorch: what a packed batch costs there);
  per-sample: F.scaled_dot_product_attention per sample under sdpa_kernel(FLASH_ATTENTION) (launches add up).
Also, where every sample has the same length, dense: one batched F.scaled_dot_product_attention call
[S, H, L, d] (the reference figures: 7 x 576 ViT, 8 x 512 LM).
Timing: CUDA events, warm-up, the median of 5 batches of `reps` calls; backward = (forward + backward) -
forward, both measured. Without CUDA it prints "not measured" and exits 77.

Usage: gpu_attention_torch.py [reps] [packing-name-substring]
"""
import statistics
import sys

PACKINGS = [  # bench/gpu_attn_bench.c's packs: keep the two in step
    ("vit_7x576", 16, 64, 0, [576] * 7),
    ("vit_mixed_64_1024", 16, 64, 0, [64, 256, 576, 1024, 144, 400]),
    ("vit_1024x4", 16, 64, 0, [1024] * 4),
    ("lm_8x512", 32, 128, 1, [512] * 8),
    ("lm_mixed_16_4096", 32, 128, 1, [16, 100, 900, 2000, 1080]),
    ("lm_1x4096", 32, 128, 1, [4096]),
    ("small_2x_d64", 2, 64, 1, [100, 30]),
    ("synthetic_short", 8, 64, 1, None),  # 256 samples of 8..24 tokens, as the C side draws them
]


def synthetic_lens():
    z, out = 12345, []
    for _ in range(256):
        z = (z * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(8 + (z >> 33) % 17)
    return out


def flops(lens, H, d, causal):
    f = 4.0 * d * H * sum(n * n for n in lens) * (0.5 if causal else 1.0)
    return f, 2.5 * f


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    only = sys.argv[2] if len(sys.argv) > 2 else None
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"gpu_attention_torch: not measured: {e}")
        return 77
    if not torch.cuda.is_available():
        print("gpu_attention_torch: not measured: no CUDA device")
        return 77
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        flash_only = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:
        flash_only = lambda: torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print(f"{'packing':20s} {'path':14s} {'T':>6s} {'S':>4s} {'H':>3s} {'d':>4s} {'cau':>3s} {'fwd_ms':>9s} "
          f"{'fwd_TF':>8s} {'bwd_ms':>9s} {'bwd_TF':>8s}")

    def timed(fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        res = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            torch.cuda.synchronize()
            res.append(a.elapsed_time(b) / reps)
        return statistics.median(res)

    for name, H, d, causal, lens in PACKINGS:
        if only and only not in name:
            continue
        lens = lens or synthetic_lens()
        S, T = len(lens), sum(lens)
        ff, fb = flops(lens, H, d, causal)
        g = torch.Generator(device=dev).manual_seed(0)
        q, k, v, do = (torch.randn(T, H, d, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(4))
        cu = torch.zeros(S + 1, dtype=torch.int32, device=dev)
        cu[1:] = torch.cumsum(torch.tensor(lens, device=dev, dtype=torch.int32), 0)
        L = max(lens)
        scale = d ** -0.5
        rows = []
        # varlen through aten's flash entry points
        try:
            def fwd():
                return torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, L, L, 0.0, bool(causal), False,
                                                               scale=scale)
            o = fwd()
            out, lse, rng, unused = o[0], o[1], o[2], o[3]

            def fwdbwd():
                o2 = fwd()
                torch.ops.aten._flash_attention_backward(do, q, k, v, o2[0], o2[1], cu, cu, L, L, 0.0, bool(causal),
                                                         o2[2], o2[3], scale=scale)
            tf = timed(fwd)
            tfb = timed(fwdbwd)
            rows.append(("torch_varlen", tf, tfb - tf))
        except Exception as e:  # noqa: BLE001 (any failure: the next method)
            print(f"# {name}: varlen flash not available here ({type(e).__name__}: {str(e)[:120]}); per-sample SDPA")
            qs = [x.detach().transpose(0, 1).contiguous() for x in (q, k, v)]
            segs = [(int(a), int(b)) for a, b in zip([0] + list(torch.cumsum(torch.tensor(lens), 0)[:-1]),
                                                     torch.cumsum(torch.tensor(lens), 0))]
            qq, kk, vv = (x.clone().requires_grad_(True) for x in qs)
            dd = do.transpose(0, 1).contiguous()

            def fwd_ps():
                with flash_only():
                    return [F.scaled_dot_product_attention(qq[None, :, a:b], kk[None, :, a:b], vv[None, :, a:b],
                                                           is_causal=bool(causal)) for a, b in segs]

            def fwdbwd_ps():
                outs = fwd_ps()
                torch.autograd.backward(outs, [dd[None, :, a:b] for a, b in segs])
            tf = timed(fwd_ps)
            tfb = timed(fwdbwd_ps)
            rows.append(("torch_per_sample", tf, tfb - tf))
        if len(set(lens)) == 1:
            qd, kd, vd = (x.detach().view(S, L, H, d).transpose(1, 2).contiguous().requires_grad_(True) for x in (q, k, v))
            dd = do.view(S, L, H, d).transpose(1, 2).contiguous()

            def fwd_d():
                with flash_only():
                    return F.scaled_dot_product_attention(qd, kd, vd, is_causal=bool(causal))

            def fwdbwd_d():
                fwd_d().backward(dd)
            tf = timed(fwd_d)
            tfb = timed(fwdbwd_d)
            rows.append(("torch_dense", tf, tfb - tf))
        for path, tf, tb in rows:
            print(f"{name:20s} {path:14s} {T:6d} {S:4d} {H:3d} {d:4d} {causal:3d} {tf:9.3f} {ff / tf * 1e-9:8.1f} "
                  f"{tb:9.3f} {fb / tb * 1e-9:8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
