#!/usr/bin/env python3
"""dry_run_qlora.py — the QLoRA recipe's dry run (recipes/llava-1.5-7b-qlora.ini: LLaVA-1.5-7B stage 2, r 128, one
GPU, 4096-token microbatches, train.recompute = full) fits one 24 GB GPU, and its memory row is what the model's
sizes give, derived here from the recipe's dimensions (docs/training.md "QLoRA"):

  NF4 base   the 7 adapted linears of 32 blocks, n values each: n/2 bytes of codes + n/64 absmax codes
             + 4 bytes per 256 absmaxes (+ the 1 KiB dynamic map)
  adapters   r (in + out) per linear: f32 master + bf16 compute copy (6 bytes), gradient 4, AdamW m + v 8
  projector  trained fully: the same 6 + 4 + 8 bytes a value
  frozen     the tower, embedding, head and norms: their bf16 compute copy, 2 bytes a value (the few 1-D
             tensors, norms and biases, are f32 words: 0.3M values of the tower, below the row's 0.01 GiB)
The activations and the workspace are the engine's own tables' sizes (the dry run's figures, printed); the check is
that the whole rank fits 24 GiB and that weights, grads and adam m+v equal the derivation to the row's rounding.
Usage: dry_run_qlora.py RRFP_MM RECIPE"""
import re
import subprocess
import sys

GIB = 2.0 ** 30


def main():
    rrfp, recipe = sys.argv[1:3]
    r = subprocess.run([rrfp, "train", recipe, "--dry-run"], capture_output=True, text=True)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        print(out)
        print("FAIL: the dry run failed")
        return 1
    m = re.search(r"^\s+0\s+32\+ViT\s+([0-9.]+)B\s+([0-9.]+) GiB\s+([0-9.]+) GiB\s+([0-9.]+) GiB\s+([0-9.]+) GiB\s+"
                  r"([0-9.]+) MiB\s+([0-9.]+) GiB$", out, re.M)
    if not m or "layout: pp 1 x tp 1 x dp 1" not in out:
        print(out)
        print("FAIL: no single-GPU memory row in the dry run")
        return 1
    params, weights, grads, adam, acts, ws_mib, total = (float(x) for x in m.groups())
    D, L, F, V, r_, Dv, Lv = 4096, 32, 11008, 32064, 128, 1024, 24
    lin = [(D, D)] * 4 + [(D, F), (D, F), (F, D)]  # (in, out): q, k, v, o, gate, up, down
    n_base = L * sum(i * o for i, o in lin)
    nf4 = 0
    for i, o in lin:
        n = i * o
        nb = (n + 63) // 64
        nf4 += L * ((n + 1) // 2 + nb + 4 * ((nb + 255) // 256))
    nf4 += 256 * 4
    adapters = L * sum(r_ * (i + o) for i, o in lin)
    proj = (1024 * D + D) + (D * D + D)  # mlp2x_gelu: linear_1 (Dt, Dv) + bias, linear_2 (Dt, Dt) + bias
    tower = 303507456  # the dry run's own count of the CLIP tower (printed above the row)
    frozen = tower + 2 * V * D + L * 2 * D + D  # tower, embedding, head, the RMSNorms
    w = nf4 + 6 * (adapters + proj) + 2 * frozen
    g, a = 4 * (adapters + proj), 8 * (adapters + proj)
    print(f"NF4 base: {n_base / 1e9:.3f}B values in {nf4 / GIB:.3f} GiB ({8 * nf4 / n_base:.3f} bits a value); bf16 would "
          f"be {2 * n_base / GIB:.2f} GiB")
    print(f"adapters r {r_}: {adapters / 1e6:.1f}M, projector {proj / 1e6:.2f}M trainable; frozen bf16 {frozen / 1e6:.1f}M")
    print(f"derived: weights {w / GIB:.2f} GiB, grads {g / GIB:.2f} GiB, adam m+v {a / GIB:.2f} GiB")
    print(f"dry run: weights {weights:.2f} GiB, grads {grads:.2f} GiB, adam m+v {adam:.2f} GiB, activations {acts:.2f} "
          f"GiB, workspace {ws_mib:.1f} MiB, total {total:.2f} GiB")
    fails = 0
    for what, got, want in (("weights", weights, w), ("grads", grads, g), ("adam m+v", adam, a)):
        if abs(got - want / GIB) > 0.011:
            print(f"FAIL: {what} {got:.2f} GiB, derived {want / GIB:.3f} GiB")
            fails += 1
    if not total <= 24.0:
        print(f"FAIL: {total:.2f} GiB does not fit one 24 GB GPU")
        fails += 1
    if fails:
        return 1
    print(f"LLaVA-1.5-7B QLoRA (r {r_}, 4096-token microbatches, full recompute) on one GPU: {total:.2f} GiB <= 24 GiB")
    print("dry run qlora: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
