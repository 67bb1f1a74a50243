#!/usr/bin/env python3
"""lora_hf.py — a LoRA run out to Hugging Face and back (runtime/hf/lora_hf.h, docs/training.md "LoRA adapters and
PEFT"), on a tiny CLIP-tower LLaVA:

  base:    a full run of 1 step, `export hf`, `import llava` (an imported base, as a published model comes in)
  LoRA:    3 steps from that base (r 4, alpha 8, the tower and projector frozen, one batch repeated), checkpoint at 2
  merged:  `export hf` of the step-2 checkpoint: every adapted linear equals W + (alpha / r) B A computed here in
           float64 from the checkpoint's own tensors (within one f32 ulp: the export rounds the double sum once), every
           other tensor is the checkpoint's bit for bit; imported back, its logits (tests/runtime/hf/test_llava_logits.c)
           equal the unmerged LoRA checkpoint's to f32 round-off and differ from the base's
  adapter: `export hf --adapter`: adapter_config.json's LoraConfig fields, adapter_model.safetensors read here with
           json + struct + numpy (no safetensors package): PEFT's names for LlavaForConditionalGeneration, F32, the
           shapes (r, in) / (out, r), the checkpoint's values bit for bit
  qlora:   a QLoRA run (lora.quant = nf4) from the same base, exported merged: every adapted linear equals its NF4 form
           (the checkpoint's .nf4.* tensors) dequantised here as bitsandbytes does, plus (alpha / r) B A, within one
           f32 ulp; the checkpoint's values are that dequantisation bit for bit
  import:  `import lora` of that folder onto the base: every tensor of the result equals the LoRA checkpoint's bit for
           bit, a run from it (its [lora] keys taken from the import) has the LoRA run's step-3 loss bit for bit; a
           recipe with another r, an unknown tensor name, a wrong shape, a missing factor and DoRA are refused naming
           the key.
Usage: lora_hf.py RRFP_MM TEST_LLAVA_LOGITS RECIPE WORKDIR"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from import_llama import FAILED, expect  # noqa: E402 (one list of failed checks)
from import_llava import recipe_keys as model_keys  # noqa: E402 (the [model] keys an import printed)


DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "U8": np.uint8}


def st_read(path):
    """{name: (dtype name, numpy array)} of a safetensors file, parsed by hand."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        raw = b[8 + n + s:8 + n + e]
        if v["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, DTYPES[v["dtype"]])
        out[k] = (v["dtype"], a.reshape(v["shape"]))
    return out


def st_write(path, tensors):
    """tensors {name: numpy array (F32)} as a safetensors file."""
    head, off, blobs = {}, 0, []
    for k, a in tensors.items():
        raw = np.ascontiguousarray(a, np.float32).tobytes()
        head[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(head).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            for k, v in st_read(os.path.join(d, f)).items():
                out[k] = v[1]
    return out


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def ok_run(cmd, what):
    r = run(cmd)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        expect(False, what)
        sys.exit(1)
    return r


def metrics(run_dir):
    return {j["step"]: j for j in (json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))) if "loss" in j}


def logits(logits_bin, ck, out, keys):
    r = run([logits_bin, ck, out] + [f"{k}={v}" for k, v in keys.items()])
    expect(r.returncode == 0 and "loaded all" in r.stdout, f"test_llava_logits {ck}: {r.stderr.strip()[-300:]}")
    return st_read(out)["logits"][1].astype(np.float64)


# the tiny CLIP-tower LLaVA of these tests (with recipes/test-synthetic.ini)
CLIP = ["--set", "model.vision_arch=clip", "--set", "model.vision_layers=2", "--set", "model.vision_image_size=16",
        "--set", "model.vision_feature_layer=-2", "--set", "model.projector_act=gelu", "--set", "optim.warmup=1"]


def imported_base(rrfp, recipe, p):
    """The base, as a published model comes in: a full run of 1 step (p('a')), `export hf` (p('a_hf')), `import llava`
    (p('base')); the [model] keys the import printed."""
    ok_run([rrfp, "train", recipe] + CLIP + ["--set", "train.steps=1", "--set", "train.checkpoint_every=1",
                                             "--set", f"train.run_dir={p('a')}"], "base run")
    ok_run([rrfp, "export", "hf", "--checkpoint", p("a/checkpoints/step-00000001"), "--out", p("a_hf"),
            "--image-token-id", "1"], "export of the base")
    return model_keys(ok_run([rrfp, "import", "llava", "--hf", p("a_hf"), "--out", p("base")], "import llava").stdout)


def expect_factors(ad, names, ours):
    """The adapter file's tensors ad named in names {PEFT name: (the checkpoint's name, shape)}: F32, of that shape,
    the checkpoint's (ours) values bit for bit."""
    good = [k for k in names if k in ad and ad[k][0] == "F32" and ad[k][1].shape == names[k][1] and
            np.array_equal(ad[k][1].view(np.uint32), ours[names[k][0]].view(np.uint32))]
    expect(len(good) == len(names), f"F32, (r, in) / (out, r), the checkpoint's values bit for bit: {len(good)} of {len(names)}")


def import_lora_round_trip(rrfp, recipe, p, ck, ours):
    """`import lora` of p('adapter') onto p('base') into p('back'): every tensor as the LoRA checkpoint ck's (ours) bit
    for bit, and a run from it (p('n')) has the LoRA run's (p('l')) step-3 loss and gradient norm bit for bit.
    Returns import lora's result."""
    imported = ok_run([rrfp, "import", "lora", "--hf", p("adapter"), "--base", p("base"), "--out", p("back")], "import lora")
    r = run([rrfp, "tensors", "diff", ck, p("back"), "--files", "model", "--quiet", "--rtol", "0", "--atol", "0"])
    nt = len(ours)
    expect(r.returncode == 0 and f"{nt} tensors compared, 0 differ" in r.stdout + r.stderr,
           f"import lora: every tensor ({nt}) as the LoRA checkpoint's, bit for bit: {(r.stdout + r.stderr).strip()[-200:]}")
    ok_run([rrfp, "train", recipe] + CLIP + ["--set", f"train.init_from={p('back')}", "--set", "train.freeze=vision,projector",
                                             "--set", "data.fixed_batch=true", "--set", "train.steps=1",
                                             "--set", f"train.run_dir={p('n')}"], "a run from the imported adapters")
    a3, n1 = metrics(p("l"))[3], metrics(p("n"))[1]
    expect(a3["loss_hex"] == n1["loss_hex"] and a3["grad_norm"] == n1["grad_norm"],
           f"the next step's loss and gradient norm bit for bit ({a3['loss_hex']} {n1['loss_hex']})")
    return imported


def import_lora_refused(rrfp, p, tag, want_msg, mutate=None, cfg_mut=None, extra=()):
    """`import lora` of a copy of p('adapter') (p('bad-TAG')) onto p('base'), its tensors changed by mutate and its
    config by cfg_mut: refused with want_msg in its error, nothing written."""
    d = p("bad-" + tag)
    shutil.copytree(p("adapter"), d)
    if mutate:
        t = {k: v[1] for k, v in st_read(os.path.join(d, "adapter_model.safetensors")).items()}
        mutate(t)
        st_write(os.path.join(d, "adapter_model.safetensors"), t)
    if cfg_mut:
        c = json.load(open(os.path.join(d, "adapter_config.json")))
        cfg_mut(c)
        json.dump(c, open(os.path.join(d, "adapter_config.json"), "w"))
    r = run([rrfp, "import", "lora", "--hf", d, "--base", p("base"), "--out", p("out-" + tag)] + list(extra))
    expect(r.returncode != 0 and want_msg in r.stderr and not os.path.exists(p("out-" + tag)),
           f"refused: {tag}: {r.stderr.strip()[-300:]}")


TARGETS = [("attn.q", "self_attn.q_proj"), ("attn.k", "self_attn.k_proj"), ("attn.v", "self_attn.v_proj"),
           ("attn.o", "self_attn.o_proj"), ("mlp.gate", "mlp.gate_proj"), ("mlp.up", "mlp.up_proj"),
           ("mlp.down", "mlp.down_proj")]


def main():
    rrfp, logits_bin, recipe, w = sys.argv[1:5]
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    p = lambda *a: os.path.join(w, *a)  # noqa: E731
    keys = imported_base(rrfp, recipe, p)
    lora = ["--set", f"train.init_from={p('base')}", "--set", "train.freeze=vision,projector", "--set", "data.fixed_batch=true"]
    ok_run([rrfp, "train", recipe] + CLIP + lora + ["--set", "lora.r=4", "--set", "lora.alpha=8", "--set", "train.steps=3",
                                                    "--set", "train.checkpoint_every=2", "--set", f"train.run_dir={p('l')}"],
           "LoRA run")
    ck = p("l/checkpoints/step-00000002")
    ours = {k: v[1] for k, v in st_read(os.path.join(ck, "model.safetensors")).items()}
    L, scale = int(keys["text_layers"]), 8 / 4

    # ---- merged export ----
    ok_run([rrfp, "export", "hf", "--checkpoint", ck, "--out", p("merged"), "--image-token-id", "1"], "export hf (merged)")
    merged = read_dir(p("merged"))
    worst, moved, n = 0.0, 0.0, 0
    for l in range(L):
        for mod, hf in TARGETS:
            W = ours[f"text.blocks.{l}.{mod}.weight"].astype(np.float64)
            A = ours[f"text.blocks.{l}.{mod}.lora_A.weight"].astype(np.float64)
            B = ours[f"text.blocks.{l}.{mod}.lora_B.weight"].astype(np.float64)
            ref = W + scale * (B @ A)
            got = merged[f"language_model.model.layers.{l}.{hf}.weight"]
            ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
            worst = max(worst, float(np.max(np.abs(got - ref) / ulp)))
            moved = max(moved, float(np.max(np.abs(ref - W))))
            n += 1
    expect(n == 7 * L and moved > 1e-4, f"the adapters moved the {n} adapted linears (largest |scale B A| {moved:.3g})")
    expect(worst <= 1.0, f"merged = W + (alpha/r) B A within one f32 ulp of float64 (largest {worst:.3f} ulp)")
    same = [k for k in ("language_model.model.embed_tokens.weight", "language_model.model.norm.weight",
                        "language_model.model.layers.0.input_layernorm.weight", "multi_modal_projector.linear_1.weight")
            if k in merged]
    pairs = {"language_model.model.embed_tokens.weight": "text.embed.weight", "language_model.model.norm.weight":
             "text.norm.weight", "language_model.model.layers.0.input_layernorm.weight": "text.blocks.0.norm1.weight",
             "multi_modal_projector.linear_1.weight": "projector.0.weight"}
    expect(len(same) == 4 and all(np.array_equal(merged[k].view(np.uint32), ours[pairs[k]].view(np.uint32)) for k in same),
           "tensors without adapters are exported as they are, bit for bit")
    ok_run([rrfp, "import", "llava", "--hf", p("merged"), "--out", p("mback")], "import llava of the merged export")
    lk = dict(keys, lora_r="4", lora_alpha="8")
    got = logits(logits_bin, p("mback"), p("merged.logits.safetensors"), keys)
    unmerged = logits(logits_bin, ck, p("lora.logits.safetensors"), lk)
    base = logits(logits_bin, p("base"), p("base.logits.safetensors"), keys)
    big = float(np.max(np.abs(unmerged)))
    d, d0 = float(np.max(np.abs(got - unmerged))), float(np.max(np.abs(base - unmerged)))
    # f32 forwards of the same function, summed in another order: round-off of a few ulp of the largest logit
    expect(d <= 1e-5 * big and d0 > 100 * 1e-5 * big,
           f"merged model's logits = unmerged LoRA's (max diff {d:.3g}, largest logit {big:.3g}; base differs by {d0:.3g})")

    # ---- PEFT adapter folder ----
    ok_run([rrfp, "export", "hf", "--checkpoint", ck, "--adapter", p("adapter")], "export hf --adapter")
    expect(sorted(os.listdir(p("adapter"))) == ["adapter_config.json", "adapter_model.safetensors"],
           f"the adapter folder holds adapter_config.json and adapter_model.safetensors: {os.listdir(p('adapter'))}")
    cfg = json.load(open(p("adapter", "adapter_config.json")))
    want = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "lora_dropout": 0, "bias": "none", "task_type": "CAUSAL_LM",
            "fan_in_fan_out": False, "init_lora_weights": True, "base_model_name_or_path": p("a_hf"),
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    expect(all(cfg.get(k) == v for k, v in want.items()),
           f"adapter_config.json: {[(k, cfg.get(k), v) for k, v in want.items() if cfg.get(k) != v] or 'as LoraConfig'}")
    ad = st_read(p("adapter", "adapter_model.safetensors"))
    names = {}
    D, F = int(keys["text_width"]), int(keys["ffn_hidden"])
    for l in range(L):
        for mod, hf in TARGETS:
            i, o = (F, D) if mod == "mlp.down" else (D, F) if mod in ("mlp.gate", "mlp.up") else (D, D)
            names[f"base_model.model.model.language_model.layers.{l}.{hf}.lora_A.weight"] = (f"text.blocks.{l}.{mod}.lora_A.weight", (4, i))
            names[f"base_model.model.model.language_model.layers.{l}.{hf}.lora_B.weight"] = (f"text.blocks.{l}.{mod}.lora_B.weight", (o, 4))
    expect(set(ad) == set(names), f"PEFT's names for LlavaForConditionalGeneration ({len(ad)} tensors; "
           f"extra {sorted(set(ad) - set(names))[:3]}, missing {sorted(set(names) - set(ad))[:3]})")
    expect_factors(ad, names, ours)

    # ---- import lora: the round trip ----
    import_lora_round_trip(rrfp, recipe, p, ck, ours)

    # ---- refusals, each naming what is wrong ----
    refused = lambda *a, **kw: import_lora_refused(rrfp, p, *a, **kw)  # noqa: E731

    k0 = "base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight"
    refused("unknown-name", "base_model.model.model.language_model.layers.0.self_attn.qq_proj.lora_A.weight",
            mutate=lambda t: t.__setitem__(k0.replace("q_proj", "qq_proj"), t.pop(k0)))
    refused("shape", k0, mutate=lambda t: t.__setitem__(k0, np.zeros((5, D), np.float32)))
    k1 = "base_model.model.model.language_model.layers.1.mlp.down_proj.lora_B.weight"
    refused("missing", k1, mutate=lambda t: t.pop(k1))
    refused("dora", "use_dora", cfg_mut=lambda c: c.__setitem__("use_dora", True))
    refused("huge-r", "implies", cfg_mut=lambda c: c.__setitem__("r", 65536))
    with open(p("r8.ini"), "w") as f:
        f.write("[lora]\nr = 8\n")
    refused("recipe-r", "lora.r = 8", extra=("--recipe", p("r8.ini")))

    # ---- a run from `import llama` (its import's model_type): LlamaForCausalLM's names ----
    shutil.copytree(p("base"), p("base_llama"))
    st = json.load(open(p("base_llama", "state.json")))
    st["hf_config"]["model_type"] = "llama"
    json.dump(st, open(p("base_llama", "state.json"), "w"))
    rec = open(p("l", "recipe.ini")).read().replace(f"init_from = {p('base')}\n", f"init_from = {p('base_llama')}\n")
    expect(p("base_llama") in rec, "the run's recipe names its init_from")
    open(p("llama.ini"), "w").write(rec)
    ok_run([rrfp, "export", "hf", "--checkpoint", ck, "--recipe", p("llama.ini"), "--adapter", p("adapter_llama")],
           "export hf --adapter (LlamaForCausalLM)")
    al = st_read(p("adapter_llama", "adapter_model.safetensors"))
    lnames = {k.replace("base_model.model.model.language_model.", "base_model.model.model."): v for k, v in names.items()}
    expect(set(al) == set(lnames) and all(np.array_equal(al[k][1], ours[lnames[k][0]]) for k in lnames),
           f"LlamaForCausalLM's names (base_model.model.model.layers.N...): {sorted(al)[:1]}")
    ok_run([rrfp, "import", "lora", "--hf", p("adapter_llama"), "--base", p("base_llama"), "--out", p("back_llama")],
           "import lora onto a Llama import")
    r = run([rrfp, "import", "lora", "--hf", p("adapter_llama"), "--base", p("base"), "--out", p("back_mixed")])
    expect(r.returncode != 0 and "keyed for LlamaForCausalLM" in r.stderr, f"refused: a Llama adapter onto a LLaVA import: "
           f"{r.stderr.strip()[-200:]}")
    r = run([rrfp, "export", "hf", "--checkpoint", ck, "--adapter", os.path.join(ck, "adapter")])
    expect(r.returncode != 0 and not os.path.exists(os.path.join(ck, "adapter")),
           f"refused: --adapter inside the checkpoint: {r.stderr.strip()[-200:]}")

    # ---- QLoRA (lora.quant = nf4): the merged export dequantises the NF4 base, then merges ----
    ok_run([rrfp, "train", recipe] + CLIP + lora + ["--set", "lora.r=4", "--set", "lora.alpha=8", "--set", "lora.quant=nf4",
                                                    "--set", "train.steps=2", "--set", f"train.run_dir={p('q')}"], "QLoRA run")
    qck = p("q/checkpoints/step-00000002")
    ok_run([rrfp, "export", "hf", "--checkpoint", qck, "--out", p("qmerged"), "--image-token-id", "1"],
           "export hf (merged) of a QLoRA checkpoint")
    qs, qm = {k: v[1] for k, v in st_read(os.path.join(qck, "model.safetensors")).items()}, read_dir(p("qmerged"))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "engine"))
    import quant_ref  # bitsandbytes' NF4 code book and dynamic map, from their definitions
    code8 = quant_ref.dynamic_map()
    worst, n = 0.0, 0
    for l in range(L):
        for mod, hf in TARGETS:
            name = f"text.blocks.{l}.{mod}.weight"
            shape = qs[name].shape
            c = qs[name + ".nf4.codes"]
            codes = np.stack([c >> 4, c & 15], 1).reshape(-1)[:qs[name].size]
            nb = len(qs[name + ".nf4.absmax"])
            absmax = (code8[qs[name + ".nf4.absmax"]] * np.repeat(qs[name + ".nf4.nested_absmax"], 256)[:nb]).astype(np.float32)
            absmax = (absmax + qs[name + ".nf4.offset"][0]).astype(np.float32)
            w = (quant_ref.NF4[codes] * np.repeat(absmax, 64)[:len(codes)]).astype(np.float32).view(np.uint32)
            w = (((w.astype(np.uint64) + 0x7FFF + ((w >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
            if not np.array_equal(w.reshape(shape).view(np.uint32), qs[name].view(np.uint32)):
                worst = float("inf")  # the checkpoint's values are not its NF4 form dequantised
            A = qs[f"text.blocks.{l}.{mod}.lora_A.weight"].astype(np.float64)
            B = qs[f"text.blocks.{l}.{mod}.lora_B.weight"].astype(np.float64)
            ref = w.reshape(shape).astype(np.float64) + scale * (B @ A)
            got = qm[f"language_model.model.layers.{l}.{hf}.weight"]
            ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
            worst = max(worst, float(np.max(np.abs(got - ref) / ulp)))
            n += 1
    expect(n == 7 * L and worst <= 1.0, f"QLoRA merged = dequantize_4bit(NF4 form) + (alpha/r) B A within one f32 ulp "
                                        f"(largest {worst:.3f} ulp over {n} linears)")
    print("lora hf: " + ("FAILED: " + "; ".join(FAILED) if FAILED else "ok"))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
