#!/usr/bin/env python3
"""gpu_train_hf.py — the transformers side of bench/gpu_train.sh: Hugging Face transformers'
LlavaForConditionalGeneration at the shapes of bench/gpu_train_flops.py's config, random weights, trained for
one pass over the very samples rrfp-mm trained on (the token ids and supervision masks of its shards, from
rrfp-bench-samples; the pixels from the manifest's image files), batches as transformers' Trainer forms them
(a seeded random order, per_device_train_batch_size samples padded to the longest, right padding, labels
-100 at padding and prompts, gradient accumulation), the same AdamW (lr, betas, eps, weight decay; fused).
Frozen modules hold bf16 weights; trained ones f32 under bf16 autocast (Trainer's bf16 = True), as rrfp-mm
keeps an f32 master and a bf16 compute copy. (c): PEFT's LoRA on the LM's seven linears (r, alpha, dropout
of the recipe), the projector trained fully at its own lr; skipped, saying so, without peft.

  gpu_train_hf.py --config a|b|c --samples S.jsonl --manifest train.json --images DIR --attn sdpa|flash_attention_2
                  [--batch B] [--accum K] [--warmup W] [--workers N] [--tiny]
  gpu_train_hf.py --shape-only --config C --samples S.jsonl --manifest train.json --images DIR [--tiny]
                  the step shape of one pass over the samples as batched here (CPU, no transformers)
prints one JSON line: samples/s, tokens/s (real tokens, no padding), model FLOPs (bench/gpu_train_flops.py, on
the real tokens), MFU against the device's dense bf16 peak (none for a device not in the table), the device
peak (torch.cuda.max_memory_allocated), the share of the time waiting for data, over the optimiser steps
after the first W; or {"not_measured": why}."""
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_train_flops import config, device_peak, sample_shape, step_flops  # noqa: E402

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def say(why, **kw):
    kw["not_measured"] = why
    print(json.dumps(kw))
    return 0


def read_samples(path):
    with open(path) as f:
        head = json.loads(f.readline())
        return head, [json.loads(l) for l in f if l.strip()]


def build(args, c, torch):
    import transformers
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration
    vc = CLIPVisionConfig(hidden_size=c["Dv"], intermediate_size=c["Fv"], num_hidden_layers=c["Lv"],
                          num_attention_heads=c["Hv"], image_size=c["image"], patch_size=c["patch"],
                          hidden_act="quick_gelu", projection_dim=768)
    if c["lm"].startswith("qwen") or c["qkv_bias"]:
        from transformers import Qwen2Config as TC
        extra = dict(use_sliding_window=False)
    else:
        from transformers import LlamaConfig as TC
        extra = dict(attention_bias=False, mlp_bias=False)
    shape = dict(hidden_size=c["Dt"], intermediate_size=c["F"], num_hidden_layers=c["Lt"], num_attention_heads=c["Ht"],
                 num_key_value_heads=c["Hkv"], vocab_size=c["V"], rms_norm_eps=c["rms_eps"], tie_word_embeddings=c["tied"],
                 max_position_embeddings=8192, hidden_act="silu", pad_token_id=0, **extra)
    try:  # transformers 5: RoPE's base in rope_parameters; 4.x: rope_theta
        tc = TC(rope_parameters={"rope_type": "default", "rope_theta": c["rope_base"]}, **shape)
    except TypeError:
        tc = TC(rope_theta=c["rope_base"], **shape)
    cfg = LlavaConfig(vision_config=vc, text_config=tc, image_token_index=args["image_token"], projector_hidden_act="gelu",
                      vision_feature_layer=c["feature_layer"], vision_feature_select_strategy="default",
                      tie_word_embeddings=c["tied"])
    with torch.device("cuda"):  # random initialisation on the device (seconds at 7B)
        try:
            model = LlavaForConditionalGeneration._from_config(cfg, attn_implementation=args["attn"])
        except TypeError:
            cfg._attn_implementation = args["attn"]
            model = LlavaForConditionalGeneration(cfg)
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != args["attn"]:
        raise RuntimeError("asked for attn_implementation %s, the model has %s" % (args["attn"], impl))
    model.float()
    names = {n for n, _ in model.named_parameters()}
    if c["train"] == "lora":
        import peft
        lc = peft.LoraConfig(r=c["lora_r"], lora_alpha=c["lora_alpha"], lora_dropout=c["lora_dropout"], bias="none",
                             target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)")
        model = peft.get_peft_model(model, lc)  # freezes every base weight
    for n, p in model.named_parameters():
        if c["train"] == "projector":
            p.requires_grad_("multi_modal_projector" in n)
        elif c["train"] == "lora":
            p.requires_grad_("lora_" in n or "multi_modal_projector" in n)
    for p in model.parameters():  # frozen: the 2-byte copy only
        if not p.requires_grad:
            p.data = p.data.to(torch.bfloat16)
    proj = [p for n, p in model.named_parameters() if p.requires_grad and "multi_modal_projector" in n]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and "multi_modal_projector" not in n]
    groups = [g for g in ({"params": rest}, {"params": proj, "lr": c.get("projector_lr") or c["lr"]}) if g["params"]]
    opt = torch.optim.AdamW(groups, lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"], weight_decay=c["wd"],
                            fused=True)
    n_train = sum(p.numel() for g in groups for p in g["params"])
    return model, opt, n_train, transformers.__version__, len(names)


class Data:
    """The Trainer's dataset: sample i's ids with each <image> expanded to its grid, labels, and its image's
    pixels (LLaVA-1.5's 'pad' preprocessing: pad to a square in the CLIP mean colour, bicubic resize, CLIP
    normalisation), decoded in the DataLoader's workers."""

    def __init__(self, samples, records, images, image_token, side, pil):
        self.s, self.rec, self.dir, self.tok, self.side, self.pil = samples, records, images, image_token, side, pil

    def __len__(self):
        return len(self.s)

    def __getitem__(self, i):
        import torch
        s = self.s[i]
        ids, labels, k = [], [], 0
        for t, m in zip(s["ids"], s["mask"]):
            if t == self.tok and k < len(s["images"]):
                n = s["images"][k][2] * s["images"][k][3]
                ids += [t] * n
                labels += [-100] * n
                k += 1
            else:
                ids.append(t)
                labels.append(t if m == "1" else -100)
        pix = []
        path = self.rec[s["id"]].get("image")
        if s["images"]:
            if self.pil:
                from PIL import Image
                im = Image.open(os.path.join(self.dir, path)).convert("RGB")
                w, h = im.size
                sq = Image.new("RGB", (max(w, h),) * 2, tuple(int(255 * m) for m in CLIP_MEAN))
                sq.paste(im, ((max(w, h) - w) // 2, (max(w, h) - h) // 2))
                sq = sq.resize((self.side, self.side), Image.BICUBIC)
                x = torch.frombuffer(bytearray(sq.tobytes()), dtype=torch.uint8).view(self.side, self.side, 3)
                x = x.permute(2, 0, 1).float() / 255
                x = (x - torch.tensor(CLIP_MEAN)[:, None, None]) / torch.tensor(CLIP_STD)[:, None, None]
            else:
                x = torch.randn(3, self.side, self.side, generator=torch.Generator().manual_seed(i))
            pix.append(x)
        return torch.tensor(ids), torch.tensor(labels), pix


def collate(batch):
    import torch
    L = max(len(x[0]) for x in batch)
    ids = torch.zeros(len(batch), L, dtype=torch.long)
    lab = torch.full((len(batch), L), -100, dtype=torch.long)
    mask = torch.zeros(len(batch), L, dtype=torch.long)
    for i, (a, b, _) in enumerate(batch):
        ids[i, :len(a)], lab[i, :len(b)], mask[i, :len(a)] = a, b, 1
    pix = [p for x in batch for p in x[2]]
    out = dict(input_ids=ids, labels=lab, attention_mask=mask)
    if pix:
        out["pixel_values"] = torch.stack(pix)
    return out


def batch_shape(b, c, image_token):
    """The step shape (gpu_train_flops.sample_shape) of a collated batch: its real tokens, not the padding."""
    g2 = (c["image"] // c["patch"]) ** 2
    lens = b["attention_mask"].sum(1).tolist()
    imgs = (b["input_ids"] == image_token).sum(1).tolist()
    return sample_shape([(l, [g2] * (k // g2)) for l, k in zip(lens, imgs)])


def shape_only(args, c):
    """--shape-only: the shape of one pass over the samples as this side batches them (CPU; no transformers):
    bench/gpu_train.sh checks it against rrfp-mm's metrics row of a step that holds every sample."""
    import torch
    head, samples = read_samples(args["samples"])
    records = {r["id"]: r for r in json.load(open(args["manifest"]))}
    data = Data(samples, records, args["images"], head["image_token"], head["prep_size"] or c["image"], False)
    B = int(args["batch"])
    loader = torch.utils.data.DataLoader(data, batch_size=B, collate_fn=collate)
    tot = dict(tokens=0, patches=0, images=0, samples=0, attn_pairs=0, vit_attn_pairs=0)
    for b in loader:
        sh = batch_shape(b, c, head["image_token"])
        for k in tot:
            tot[k] += sh[k]
    print(json.dumps(tot))
    return 0


def main():
    a = sys.argv[1:]
    args = {"batch": "4", "accum": "1", "warmup": "2", "workers": "4", "attn": "sdpa"}
    i = 0
    while i < len(a):
        if a[i] in ("--tiny", "--shape-only"):
            args[a[i][2:]] = True
            i += 1
        else:
            args[a[i].lstrip("-")] = a[i + 1]
            i += 2
    c = config(args["config"], args.get("tiny", False))
    if args.get("shape-only"):
        return shape_only(args, c)
    tag = dict(config=args["config"], side="transformers", attn=args["attn"])
    import importlib.util
    if importlib.util.find_spec("transformers") is None:  # before PyTorch's import (seconds of a CI's CPU)
        return say("transformers is not installed", **tag)
    try:
        import torch
    except ImportError:
        return say("no PyTorch", **tag)
    if not torch.cuda.is_available():
        return say("no GPU", **tag)
    if c["train"] == "lora":
        try:
            import peft  # noqa: F401
        except ImportError:
            return say("skipped: peft is not installed (LoRA)", **tag)
    if args["attn"] == "flash_attention_2":
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            return say("skipped: flash_attn is not installed", **tag)
    try:
        import PIL  # noqa: F401
        pil = True
    except ImportError:
        pil = False
    torch.backends.cuda.matmul.allow_tf32 = False
    head, samples = read_samples(args["samples"])
    args["image_token"] = head["image_token"]
    records = {r["id"]: r for r in json.load(open(args["manifest"]))}
    name = torch.cuda.get_device_name(0)
    peak = device_peak(name)
    model, opt, n_train, tv, _ = build(args, c, torch)
    model.train()
    B, K, W = int(args["batch"]), int(args["accum"]), int(args["warmup"])
    order = list(range(len(samples)))
    random.Random(42).shuffle(order)  # the Trainer's RandomSampler, seeded
    batches = [order[j:j + B] for j in range(0, len(order), B)]
    data = Data(samples, records, args["images"], head["image_token"], head["prep_size"] or c["image"], pil)
    loader = torch.utils.data.DataLoader(data, batch_sampler=batches, collate_fn=collate, num_workers=int(args["workers"]),
                                         pin_memory=True, persistent_workers=int(args["workers"]) > 0)
    steps = len(batches) // K
    if steps <= W:
        return say("%d samples make %d optimiser steps of %d x %d: not more than the %d warm-up steps"
                   % (len(samples), steps, B, K, W), **tag)
    it = iter(loader)
    shape_t = dict(tokens=0, patches=0, images=0, samples=0, attn_pairs=0, vit_attn_pairs=0)
    wait = fl = padded = 0.0
    t0 = None
    for step in range(steps):
        if step == W:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            wait = 0.0
        for _ in range(K):
            tw = time.perf_counter()
            b = next(it)
            b = {k: v.to("cuda", non_blocking=True) for k, v in b.items()}
            if "pixel_values" in b:
                b["pixel_values"] = b["pixel_values"].to(torch.bfloat16)
            wait += time.perf_counter() - tw
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**b).loss / K
            loss.backward()
            if t0 is not None:
                sh = batch_shape(b, c, head["image_token"])
                for k2 in shape_t:
                    shape_t[k2] += sh[k2]
                padded += b["input_ids"].numel()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    fl = step_flops(c, shape_t)
    print(json.dumps(dict(tag, side="transformers %s" % tv, torch=torch.__version__, device=name, batch=B, accum=K,
                          steps=steps - W, samples=shape_t["samples"], tokens=shape_t["tokens"], padded_tokens=int(padded),
                          time_s=dt, samples_per_s=shape_t["samples"] / dt, tokens_per_s=shape_t["tokens"] / dt,
                          model_flops=fl, tflops=fl / dt / 1e12, mfu=fl / dt / peak if peak else None,
                          peak_mb=torch.cuda.max_memory_allocated() / 2**20, data_wait=wait / dt,
                          trained_params=n_train, pixels="PIL" if pil else "random (no PIL)", loss=float(loss) * K)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
