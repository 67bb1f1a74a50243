#!/usr/bin/env python3
"""gpu_train_flops.py — the model FLOPs of a LLaVA training step, one formula for both sides of
bench/gpu_train.sh (rrfp-mm from its metrics rows, transformers from its batches), the shapes of its runs,
and the device peak MFU is taken against. Standard library only (imported on the CPU-only CI machine).

A step's model FLOPs are its GEMMs, 2 M K N each, and its attention products, counted for the forward and
for what the backward needs: a GEMM's input gradient (2 M K N) where anything below it trains, its weight
gradient (2 M K N) where its weight trains. Attention: q k^T and p v, 2 d per pair and head each (4 D per
pair of a layer of width D; the LM's causal pairs l (l + 1) / 2 per sample, the tower's n^2 per image of n
rows), twice that again in the backward where an input gradient is needed. Elementwise work, norms, the
softmax, the embedding gather and biases are not counted. Only real tokens count (no padding), and only
the tower blocks LLaVA's feature layer needs (23 of CLIP-L's 24): what a side runs beyond that is its own
waste. The step's shape comes as a dict: tokens (LM positions, image rows included), patches, images,
attn_pairs (sum of l (l + 1) / 2 over samples of l positions), vit_attn_pairs (sum of n^2 over images of n
patches): the fields rrfp-mm's metrics.jsonl rows carry, and what sample_shape() sums over samples.

  gpu_train_flops.py --check-emu CONFIG METRICS EMU_LOG   the formula's GEMM FLOPs of each step of a run on the
                                                        CUDA emulation (RR_EMU_STEP_FLOPS=1) against the FLOPs of
                                                        the cuBLAS products it ran, counted by the emulation
  gpu_train_flops.py --peak DEVICE_NAME                   the dense bf16 peak in FLOP/s (exit 1: unknown)
  gpu_train_flops.py --recipe CONFIG SHARDS TOKENIZER RUN_DIR [--tiny]   the config's rrfp-mm recipe
  gpu_train_flops.py --ours METRICS CONFIG WARMUP DEVICE [--tiny]        rrfp-mm's figures (a JSON line) from its
                                                        metrics.jsonl, the first WARMUP steps left out
  gpu_train_flops.py --table RESULTS.jsonl DEVICE         the markdown table of both sides and their ratios
"""
import json
import sys

# The runs' shapes (bench/gpu_train.sh writes the recipes from them; gpu_train_hf.py the transformers configs).
# Tower: CLIP ViT-L/14-336 (a class token per image, pre-LayerNorm, quick GELU, q/k/v/out biases, patch
# embedding without bias); LM: Llama-style (RMSNorm, SwiGLU, RoPE), Qwen2's q/k/v biases where qkv_bias.
TOWERS = {
    "clip-l-336": dict(Dv=1024, Lv=24, Hv=16, Fv=4096, patch=14, image=336, feature_layer=-2),
    "tiny": dict(Dv=32, Lv=3, Hv=2, Fv=128, patch=14, image=28, feature_layer=-2),
}
LMS = {
    "vicuna-7b": dict(Dt=4096, Lt=32, Ht=32, Hkv=32, F=11008, V=32064, qkv_bias=False, tied=False, rope_base=10000.0,
                      rms_eps=1e-5),
    "qwen2-1.5b": dict(Dt=1536, Lt=28, Ht=12, Hkv=2, F=8960, V=151936, qkv_bias=True, tied=True, rope_base=1000000.0,
                       rms_eps=1e-6),
    "tiny-mha": dict(Dt=64, Lt=2, Ht=4, Hkv=4, F=96, V=1024, qkv_bias=False, tied=False, rope_base=10000.0, rms_eps=1e-5),
    "tiny-gqa": dict(Dt=64, Lt=2, Ht=4, Hkv=2, F=96, V=1024, qkv_bias=True, tied=True, rope_base=1000000.0, rms_eps=1e-6),
}
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
# (a) LLaVA-1.5-7B stage 1: tower and LM frozen, the projector trains; (b) the full fine-tune of a LLaVA that
# fits one GPU; (c) LLaVA-1.5-7B stage 2 with LoRA (recipes/llava-1.5-7b-lora.ini: r 128, alpha 256, dropout
# 0.05 on every LM linear; tower frozen; projector trained). lr / betas / eps / weight decay: both sides use them.
CONFIGS = {
    "a": dict(name="LLaVA-1.5-7B stage 1", tower="clip-l-336", lm="vicuna-7b", train="projector", lora_r=0,
              lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0),
    "b": dict(name="CLIP-L-336 + Qwen2-1.5B full", tower="clip-l-336", lm="qwen2-1.5b", train="all", lora_r=0,
              lr=2e-5, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0),
    "c": dict(name="LLaVA-1.5-7B stage 2 LoRA", tower="clip-l-336", lm="vicuna-7b", train="lora", lora_r=128,
              lora_alpha=256, lora_dropout=0.05, lr=2e-4, projector_lr=2e-5, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0),
}
TINY = {"a": dict(tower="tiny", lm="tiny-mha"), "b": dict(tower="tiny", lm="tiny-gqa"),
        "c": dict(tower="tiny", lm="tiny-mha", lora_r=8, lora_alpha=16)}

# Dense bf16 peak (FLOP/s) by device name (nvidia-smi / torch.cuda.get_device_name): H100 SXM (the HBM3
# name; the PCIe and NVL parts have other peaks and are not listed), H200 and A100. No MFU on another device.
PEAKS = (("H200", 989.4e12), ("H100 80GB HBM3", 989.4e12), ("H100 SXM", 989.4e12), ("A100", 312e12))


def device_peak(name):
    """The dense bf16 peak of the device called `name`, or None where it is not in the table."""
    for key, peak in PEAKS:
        if key.lower() in (name or "").lower():
            return peak
    return None


def config(key, tiny=False):
    """Config `key` ("a", "b", "c") with its tower and LM shapes merged in; tiny: the CI's shapes."""
    c = dict(CONFIGS[key])
    if tiny:
        c.update(TINY[key])
    c.update(TOWERS[c["tower"]])
    c.update(LMS[c["lm"]])
    c["Lrun"] = c["Lv"] + 1 + c["feature_layer"] if c["feature_layer"] < 0 else c["feature_layer"]
    return c


def sample_shape(samples):
    """The step shape of samples given as (lm_positions, [patches of each image]) (image rows included in
    lm_positions): tokens, patches, images, samples and both attention pair counts."""
    s = dict(tokens=0, patches=0, images=0, samples=0, attn_pairs=0, vit_attn_pairs=0)
    for l, imgs in samples:
        s["samples"] += 1
        s["tokens"] += l
        s["attn_pairs"] += l * (l + 1) // 2
        for n in imgs:
            s["images"] += 1
            s["patches"] += n
            s["vit_attn_pairs"] += n * n
    return s


def step_flops(c, sh, attention=True):
    """Model FLOPs of a training step of config c (config()) on step shape sh; attention=False: the GEMMs alone
    (what the emulation's cuBLAS count sees: attention runs in the engine's own kernels)."""
    T, Np, I = sh["tokens"], sh["patches"], sh["images"]
    Dv, Fv, Dt, F, V = c["Dv"], c["Fv"], c["Dt"], c["F"], c["V"]
    d = Dt // c["Ht"]
    kv = c["Hkv"] * d
    train = c["train"]
    tower_tr = train == "all"
    proj_tr = train in ("all", "projector", "lora")
    lm_tr = train == "all"
    lora = c.get("lora_r", 0) if train == "lora" else 0

    def gemm(M, K, N, w_grad, x_grad):
        return 2 * M * K * N * (1 + (1 if w_grad else 0) + (1 if x_grad else 0))

    fl = 0
    # tower: the patch embedding, then L_run blocks over the rows (a class token per image)
    R = Np + I
    vit_pairs = sh["vit_attn_pairs"] + 2 * Np + I  # (n + 1)^2 per image
    fl += gemm(Np, 3 * c["patch"] ** 2, Dv, tower_tr, False)
    per_block = (gemm(R, Dv, 3 * Dv, tower_tr, tower_tr) + gemm(R, Dv, Dv, tower_tr, tower_tr) +
                 gemm(R, Dv, Fv, tower_tr, tower_tr) + gemm(R, Fv, Dv, tower_tr, tower_tr))
    if attention:
        per_block += 4 * Dv * vit_pairs * (3 if tower_tr else 1)
    fl += c["Lrun"] * per_block
    # projector (Linear Dv -> Dt, GELU, Linear Dt -> Dt) over the patch rows
    fl += gemm(Np, Dv, Dt, proj_tr, tower_tr) + gemm(Np, Dt, Dt, proj_tr, proj_tr or tower_tr)
    # LM blocks: input gradients wherever anything below trains (the projector or the tower always does here)
    below = proj_tr or tower_tr or lm_tr
    lin = dict(q=(Dt, Dt), k=(Dt, kv), v=(Dt, kv), o=(Dt, Dt), gate=(Dt, F), up=(Dt, F), down=(F, Dt))
    per_block = sum(gemm(T, K, N, lm_tr, below) for K, N in lin.values())
    if lora:
        for name in LORA_TARGETS:
            K, N = lin[name]
            per_block += gemm(T, K, lora, True, below) + gemm(T, lora, N, True, True)
    if attention:
        per_block += 4 * Dt * sh["attn_pairs"] * (3 if below else 1)
    fl += c["Lt"] * per_block
    # the LM head over every position (tied: its weight is the embedding's, which trains under "all")
    fl += gemm(T, Dt, V, lm_tr, below)
    return fl


def check_emu(key, metrics, emu_log, tiny=True):
    """Each step's GEMM FLOPs by the formula (from the metrics row's shape) against the emulation's count."""
    c = config(key, tiny)
    rows = [json.loads(l) for l in open(metrics) if l.strip()]
    counted = {}
    for line in open(emu_log):
        if " blas flops: " in line and "rank 0 step " in line:
            step = int(line.split("rank 0 step ")[1].split()[0])
            counted[step] = int(line.rsplit(":", 1)[1])
    ok = bool(rows)
    for r in rows:
        want = step_flops(c, r, attention=False)
        got = counted.get(r["step"])
        good = got == want
        ok &= good
        print("check: (%s) %s step %d: %d tokens, %d images of %d patches: formula %d GEMM FLOPs, counted %s: %s"
              % (key, c["name"], r["step"], r["tokens"], r["images"], r["patches"], want, got, "ok" if good else "FAIL"))
    return 0 if ok else 1


def recipe(key, shards, tokenizer, run_dir, tiny=False):
    """The rrfp-mm recipe of config `key` (INI text): its shapes, the data, freezing / LoRA, the optimiser; one
    pass over the data (train.epochs = 1), one process (pp = tp = dp = 1), no checkpoints."""
    c = config(key, tiny)
    g = c["image"] // c["patch"]
    freeze = {"projector": "vision,text", "all": "", "lora": "vision"}[c["train"]]
    lines = ["; written by bench/gpu_train.sh: %s%s" % (c["name"], " (tiny shapes)" if tiny else ""),
             "[model]", "vision_arch = clip", "vision_width = %d" % c["Dv"], "vision_layers = %d" % c["Lv"],
             "vision_heads = %d" % c["Hv"], "patch = %d" % c["patch"], "vision_image_size = %d" % c["image"],
             "vision_feature_layer = %d" % c["feature_layer"], "projector_act = gelu",
             "text_width = %d" % c["Dt"], "text_layers = %d" % c["Lt"], "text_heads = %d" % c["Ht"],
             "text_kv_heads = %d" % c["Hkv"], "ffn_hidden = %d" % c["F"], "vocab = %d" % c["V"],
             "rms_eps = %g" % c["rms_eps"], "rope_base = %g" % c["rope_base"],
             "text_qkv_bias = %s" % ("true" if c["qkv_bias"] else "false"),
             "tie_embeddings = %s" % ("true" if c["tied"] else "false"), "seed = 1234",
             "[data]", "shards = %s" % shards, "tokenizer = %s" % tokenizer, "microbatch_tokens = 4096",
             "microbatches = %d" % (1 if tiny else 8), "policy = balanced", "window = %d" % (8 if tiny else 256), "workers = 0",
             "min_patches = %d" % (g * g), "max_patches = %d" % (g * g),
             "[train]", "epochs = 1", "log_every = 1", "checkpoint_every = -1", "run_dir = %s" % run_dir,
             "freeze = %s" % freeze,
             "[optim]", "lr = %g" % c["lr"], "min_lr = 0", "warmup = 1", "beta1 = %g" % c["beta1"], "beta2 = %g" % c["beta2"],
             "eps = %g" % c["eps"], "weight_decay = %g" % c["wd"], "grad_clip = 1.0"]
    if c.get("projector_lr"):
        lines.append("projector_lr = %g" % c["projector_lr"])
    lines += ["[runtime]", "precision = bf16"]
    if c["train"] == "lora":
        lines += ["[lora]", "r = %d" % c["lora_r"], "alpha = %g" % c["lora_alpha"], "dropout = %g" % c["lora_dropout"],
                  "targets = %s" % ",".join(LORA_TARGETS)]
    return "\n".join(lines) + "\n"


def ours(metrics, key, warmup, device, tiny=False):
    """rrfp-mm's figures from its metrics.jsonl: the rows after the first `warmup` steps, as one JSON-able dict
    of the fields gpu_train_hf.py prints."""
    c = config(key, tiny)
    rows = [json.loads(l) for l in open(metrics) if l.strip()]
    last = {}
    for r in rows:  # the last row of each step counts (a resumed run appends)
        last[r["step"]] = r
    rows = [last[k] for k in sorted(last)][warmup:]
    if not rows:
        return dict(config=key, side="rrfp-mm", not_measured="%d steps: not more than the %d warm-up steps" % (len(last), warmup))
    t = sum(r["step_time_s"] for r in rows)
    n = {k: sum(r[k] for r in rows) for k in ("samples", "tokens", "patches", "images", "attn_pairs", "vit_attn_pairs")}
    fl = sum(step_flops(c, r) for r in rows)
    peak = device_peak(device)
    dev = [r["device_peak_mb"] for r in rows if "device_peak_mb" in r]
    return dict(config=key, side="rrfp-mm", device=device, steps=len(rows), samples=n["samples"], tokens=n["tokens"],
                time_s=t, samples_per_s=n["samples"] / t, tokens_per_s=n["tokens"] / t, model_flops=fl,
                tflops=fl / t / 1e12, mfu=fl / t / peak if peak else None, peak_mb=max(dev) if dev else None,
                data_wait=sum(r["data_wait_s"] for r in rows) / t, loss=rows[-1]["loss"])


def table(results, device):
    """The markdown table of every side's figures and the ratios rrfp-mm / transformers (the better of its
    attention implementations) per config."""
    peak = device_peak(device)
    out = ["device: %s (%s)" % (device, "dense bf16 peak %.1f TFLOP/s" % (peak / 1e12) if peak else
                                "not in the peak table: no MFU"),
           "", "| run | side | samples/s | tokens/s | model TFLOP/s | MFU | device peak MiB | data wait |",
           "|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in results:
        by.setdefault(r["config"], []).append(r)
        side = r["side"] + (" " + r["attn"] if "attn" in r else "")
        name = CONFIGS[r["config"]]["name"]
        if "not_measured" in r:
            out.append("| (%s) %s | %s | not measured: %s | | | | | |" % (r["config"], name, side, r["not_measured"]))
            continue
        out.append("| (%s) %s | %s | %.2f | %.0f | %.1f | %s | %s | %.1f%% |" % (
            r["config"], name, side, r["samples_per_s"], r["tokens_per_s"], r["tflops"],
            "%.1f%%" % (100 * r["mfu"]) if r.get("mfu") is not None else "-",
            "%.0f" % r["peak_mb"] if r.get("peak_mb") is not None else "-", 100 * r["data_wait"]))
    out.append("")
    for k, rs in by.items():
        o = [r for r in rs if r["side"] == "rrfp-mm" and "not_measured" not in r]
        h = [r for r in rs if r["side"] != "rrfp-mm" and "not_measured" not in r]
        if o and h:
            best = max(h, key=lambda r: r["samples_per_s"])
            out.append("(%s) rrfp-mm / transformers %s: samples/s %.2fx, tokens/s %.2fx, device peak %s" % (
                k, best.get("attn", ""), o[0]["samples_per_s"] / best["samples_per_s"],
                o[0]["tokens_per_s"] / best["tokens_per_s"],
                "%.2fx" % (o[0]["peak_mb"] / best["peak_mb"]) if o[0].get("peak_mb") and best.get("peak_mb") else "-"))
        else:
            out.append("(%s) rrfp-mm / transformers: no ratio (%s)" % (k, "no rrfp-mm figure" if not o else "no transformers figure"))
    return "\n".join(out)


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "--check-emu":
        sys.exit(check_emu(a[1], a[2], a[3]))
    if len(a) in (5, 6) and a[0] == "--recipe":
        sys.stdout.write(recipe(a[1], a[2], a[3], a[4], tiny=len(a) == 6 and a[5] == "--tiny"))
        sys.exit(0)
    if len(a) in (5, 6) and a[0] == "--ours":
        print(json.dumps(ours(a[1], a[2], int(a[3]), a[4], tiny=len(a) == 6 and a[5] == "--tiny")))
        sys.exit(0)
    if len(a) == 3 and a[0] == "--table":
        print(table([json.loads(l) for l in open(a[1]) if l.strip()], a[2]))
        sys.exit(0)
    if len(a) == 2 and a[0] == "--peak":
        p = device_peak(a[1])
        if p is None:
            print("unknown device '%s': no dense bf16 peak in bench/gpu_train_flops.py's table, no MFU" % a[1])
            sys.exit(1)
        print("%.4g" % p)
        sys.exit(0)
    print(__doc__)
    sys.exit(2)
