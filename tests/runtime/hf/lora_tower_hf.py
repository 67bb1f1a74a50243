#!/usr/bin/env python3
"""lora_tower_hf.py — LoRA on the CLIP tower out to Hugging Face and back (vision/vit_lora.c, runtime/hf/lora_hf.h,
docs/training.md "LoRA adapters and PEFT"), on a tiny CLIP-tower LLaVA of 2 tower layers (feature layer -2: 1 run):

  base:    a full run of 1 step, `export hf`, `import llava` (an imported base)
  LoRA:    3 steps from that base with lora.targets = q,v,vision.q,vision.out,vision.fc1 (the tower's base and the
           projector frozen, its adapters trained), checkpoint at 2
  merged:  `export hf`: the tower's q_proj (rows [0, D) of our stacked attn.qkv), out_proj and fc1 equal
           W + (alpha / r) B A computed here in float64 (within one f32 ulp), k_proj, v_proj, fc2 and the layer the
           tower does not run are the checkpoint's bit for bit; the LM's q as lora_hf.py checks it
  adapter: `export hf --adapter`: target_modules ["q_proj", "v_proj", "out_proj", "fc1"] (q_proj, v_proj: the LM's and
           the tower's, PEFT matching a name's last part), the tower's factors under
           base_model.model.model.vision_tower.vision_model.encoder.layers.N.self_attn.q_proj.lora_A.weight and the like,
           F32, the checkpoint's values bit for bit
  import:  `import lora` of it onto the base: every tensor equals the LoRA checkpoint's bit for bit, the [lora] targets
           come back from the file's tensors, a run from it has the LoRA run's step-3 loss bit for bit; a tower factor of
           a name target_modules does not list, and a missing tower factor, are refused naming it.
Usage: lora_tower_hf.py RRFP_MM RECIPE WORKDIR"""
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_hf import (CLIP, FAILED, expect, expect_factors, imported_base, import_lora_refused,  # noqa: E402
                     import_lora_round_trip, ok_run, read_dir, st_read)

T = "base_model.model.model.vision_tower.vision_model.encoder.layers."


def main():
    rrfp, recipe, w = sys.argv[1:4]
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    p = lambda *a: os.path.join(w, *a)  # noqa: E731
    keys = imported_base(rrfp, recipe, p)
    lora = ["--set", f"train.init_from={p('base')}", "--set", "train.freeze=vision,projector", "--set", "data.fixed_batch=true",
            "--set", "lora.r=4", "--set", "lora.alpha=8", "--set", "lora.targets=q,v,vision.q,vision.out,vision.fc1"]
    ok_run([rrfp, "train", recipe] + CLIP + lora + ["--set", "train.steps=3", "--set", "train.checkpoint_every=2",
                                                    "--set", f"train.run_dir={p('l')}"], "LoRA run on the LM and the tower")
    ck = p("l/checkpoints/step-00000002")
    ours = {k: v[1] for k, v in st_read(os.path.join(ck, "model.safetensors")).items()}
    D, scale = int(keys["vision_width"]), 8 / 4
    tower_ad = sorted(k for k in ours if k.startswith("vision.") and ".lora_" in k)
    expect(tower_ad == sorted(f"vision.blocks.0.{m}.lora_{x}.weight" for m in ("attn.q", "attn.out", "mlp.fc1") for x in "AB"),
           f"the checkpoint holds the run block's tower adapters (q, out, fc1: A and B): {tower_ad}")

    # ---- merged export ----
    ok_run([rrfp, "export", "hf", "--checkpoint", ck, "--out", p("merged"), "--image-token-id", "1"], "export hf (merged)")
    merged = read_dir(p("merged"))
    V = "vision_tower.vision_model.encoder.layers."
    qkv = ours["vision.blocks.0.attn.qkv.weight"]
    cases = [("attn.q", "self_attn.q_proj", qkv[:D]), ("attn.out", "self_attn.out_proj", ours["vision.blocks.0.attn.out.weight"]),
             ("mlp.fc1", "mlp.fc1", ours["vision.blocks.0.mlp.fc1.weight"])]
    worst, moved = 0.0, 0.0
    for mod, hf, W in cases:
        A = ours[f"vision.blocks.0.{mod}.lora_A.weight"].astype(np.float64)
        B = ours[f"vision.blocks.0.{mod}.lora_B.weight"].astype(np.float64)
        ref = W.astype(np.float64) + scale * (B @ A)
        got = merged[f"{V}0.{hf}.weight"]
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        worst = max(worst, float(np.max(np.abs(got - ref) / ulp)))
        moved = max(moved, float(np.max(np.abs(ref - W))))
    expect(moved > 1e-5, f"the tower's adapters moved q_proj, out_proj, fc1 (largest |scale B A| {moved:.3g})")
    expect(worst <= 1.0, f"merged tower linears = W + (alpha/r) B A within one f32 ulp of float64 (largest {worst:.3f} ulp)")
    same = {f"{V}0.self_attn.k_proj.weight": qkv[D:2 * D], f"{V}0.self_attn.v_proj.weight": qkv[2 * D:],
            f"{V}0.mlp.fc2.weight": ours["vision.blocks.0.mlp.fc2.weight"],
            f"{V}1.self_attn.q_proj.weight": ours["vision.blocks.1.attn.qkv.weight"][:D]}
    expect(all(np.array_equal(merged[k].view(np.uint32), np.ascontiguousarray(v).view(np.uint32)) for k, v in same.items()),
           "the tower's linears without adapters (k_proj, v_proj, fc2; the layer not run) are exported bit for bit")

    # ---- PEFT adapter folder ----
    ok_run([rrfp, "export", "hf", "--checkpoint", ck, "--adapter", p("adapter")], "export hf --adapter")
    cfg = json.load(open(p("adapter", "adapter_config.json")))
    expect(cfg.get("target_modules") == ["q_proj", "v_proj", "out_proj", "fc1"],
           f"target_modules: the LM's q_proj, v_proj and the tower's own out_proj, fc1: {cfg.get('target_modules')}")
    ad = st_read(p("adapter", "adapter_model.safetensors"))
    names = {}
    for mod, hf, shape_a, shape_b in (("attn.q", "self_attn.q_proj", (4, D), (D, 4)), ("attn.out", "self_attn.out_proj", (4, D), (D, 4)),
                                      ("mlp.fc1", "mlp.fc1", (4, D), (4 * D, 4))):
        names[f"{T}0.{hf}.lora_A.weight"] = (f"vision.blocks.0.{mod}.lora_A.weight", shape_a)
        names[f"{T}0.{hf}.lora_B.weight"] = (f"vision.blocks.0.{mod}.lora_B.weight", shape_b)
    tower = {k for k in ad if ".vision_tower." in k}
    expect(tower == set(names), f"the tower's factors under PEFT's names for LlavaForConditionalGeneration: "
           f"extra {sorted(tower - set(names))[:3]}, missing {sorted(set(names) - tower)[:3]}")
    expect_factors(ad, names, ours)

    # ---- import lora: the round trip ----
    r = import_lora_round_trip(rrfp, recipe, p, ck, ours)
    expect("targets q,v,vision.q,vision.out,vision.fc1" in r.stdout + r.stderr,
           f"import lora: the targets from the file's tensors: {(r.stdout + r.stderr).strip()[-200:]}")

    refused = lambda *a, **kw: import_lora_refused(rrfp, p, *a, **kw)  # noqa: E731
    refused("unlisted", "fc1, which target_modules", cfg_mut=lambda c: c["target_modules"].remove("fc1"))
    k1 = f"{T}0.self_attn.out_proj.lora_B.weight"
    refused("missing", k1, mutate=lambda t: t.pop(k1))
    if FAILED:
        print(f"lora tower hf: {len(FAILED)} check(s) failed")
        return 1
    print("lora tower hf: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
