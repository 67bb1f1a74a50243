#!/usr/bin/env python3
"""import_llama.py — `rrfp-mm import llama` against an independent Llama forward.

Writes a small Hugging Face Llama-format model with random weights (config.json, HF tensor names, two
safetensors shards written by hand here — F32, and BF16 / F16 in the second — plus
model.safetensors.index.json), imports it, starts the C model from the import (tests/runtime/hf/test_llama_logits.c,
through train.init_from's loader), and compares the logits of two packed text samples with a float64
PyTorch forward written here from the Llama definition (embedding; per layer x += o(attn(RoPE(q), RoPE(k),
v)) on RMSNorm(x), causal; x += down(silu(gate) * up) on RMSNorm(x); final RMSNorm; lm_head; RoPE as
Hugging Face applies it: inv_freq = theta^(-2i/d), cos/sin of cat(freqs, freqs), q cos + rotate_half(q) sin).
rms_norm_eps = 1e-3 with small activations and rope_theta = 500000 make both keys matter: the same
comparison with the defaults (1e-5, 10000) must fail by far. Then configs the model cannot represent
(num_key_value_heads not dividing the heads, a rope_scaling other than llama3, MLP biases, sliding-window
attention, another model_type, a bias tensor the config does not announce) must be refused naming the key
or tensor.
Then the LM variants LLaVA's successors use, each imported and its logits checked against this file's
forward: a Llama-3-style model (grouped-query attention 4 on 2 heads, attention_bias: q/k/v/o biases,
rope_scaling llama3 with transformers 4's keys) and a Qwen2 one (one key/value head, q/k/v biases, tied
embeddings, transformers 5's rope_parameters holding rope_theta); the reference repeats each key/value head
for its query heads (HF's repeat_kv) and rescales the frequencies with Meta's apply_scaling loop; each
variant must matter (the reference without it differs by far). A Llama config without rms_norm_eps and
rope_theta takes LlamaConfig's defaults (1e-6, 10000.0): printed, and the logits against the reference at
them (Vicuna's 1e-5 must miss).

Usage: import_llama.py RRFP_MM TEST_LLAMA_LOGITS WORKDIR   (exit 0 = every check passed)"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import torch

torch.set_num_threads(2)
DT = torch.float64
FAILED = []


def expect(ok, msg):
    print(("ok    " if ok else "FAIL  ") + msg)
    if not ok:
        FAILED.append(msg)


# ---- safetensors by hand (8-byte little-endian header size, JSON header padded to 8, data) ----------

def st_write(path, tensors):
    """tensors: name -> (dtype 'F32' | 'BF16' | 'F16', float32 tensor). Returns the stored values (float64)."""
    header, blobs, stored, at = {}, [], {}, 0
    for name, (dtype, t) in tensors.items():
        t = t.to(torch.float32).contiguous()
        if dtype == "F32":
            raw = t.numpy().tobytes()
            stored[name] = t.to(DT)
        elif dtype == "BF16":
            b = t.to(torch.bfloat16)
            raw = b.view(torch.int16).numpy().tobytes()
            stored[name] = b.to(DT)
        else:
            h = t.to(torch.float16)
            raw = h.numpy().tobytes()
            stored[name] = h.to(DT)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return stored


def st_read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for k, v in header.items():
        b, e = v["data_offsets"]
        dt = {"F32": torch.float32, "I32": torch.int32}[v["dtype"]]
        if e == b:
            out[k] = torch.zeros(v["shape"], dtype=dt)
            continue
        out[k] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=dt).reshape(v["shape"]).clone()
    return out


# ---- the Llama forward, from its definition, in float64 -------------------------------------------

def rms_norm(x, w, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-b, a], -1)


def apply_scaling(freqs, s):
    """Llama-3's frequency scaling, as Meta's llama3 model.py writes it (a loop over the frequencies)."""
    low_freq_wavelen = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_freq_wavelen = s["original_max_position_embeddings"] / s["high_freq_factor"]
    new_freqs = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            new_freqs.append(freq)
        elif wavelen > low_freq_wavelen:
            new_freqs.append(freq / s["factor"])
        else:
            smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"])
            new_freqs.append((1 - smooth) * freq / s["factor"] + smooth * freq)
    return torch.tensor(new_freqs, dtype=DT)


def llama_logits(W, cfg, ids, eps, theta, scaling=None, use_bias=True, kv_tiled=False):
    D, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    Hkv = cfg.get("num_key_value_heads") or H
    d = D // H
    T = len(ids)
    x = W["model.embed_tokens.weight"][ids]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=DT) / d)
    if scaling is not None:
        inv_freq = apply_scaling(inv_freq, scaling)
    freqs = torch.arange(T, dtype=DT)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ W[p + f"self_attn.{n}_proj.weight"].T + (W.get(p + f"self_attn.{n}_proj.bias", 0) if use_bias else 0)
                   for n in "qkv")
        q, k, v = q.reshape(T, H, d), k.reshape(T, Hkv, d), v.reshape(T, Hkv, d)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # grouped-query attention: key/value head j serves query heads j * H / Hkv .. (HF's repeat_kv)
        if kv_tiled:  # the wrong grouping (query head h on key/value head h mod Hkv): the sensitivity check's
            k, v = k.repeat(1, H // Hkv, 1), v.repeat(1, H // Hkv, 1)
        else:
            k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(d)
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), -1)
        o = torch.einsum("hts,shd->thd", a, v).reshape(T, D)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T + (W.get(p + "self_attn.o_proj.bias", 0) if use_bias else 0)
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return rms_norm(x, W["model.norm.weight"], eps) @ head.T


def rel_err(c, r):
    return (c.to(DT) - r).norm().item() / r.norm().item()


def main():
    rrfp, logits_bin, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hf = os.path.join(work, "hf")
    os.makedirs(hf)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 4, "head_dim": 16, "num_hidden_layers": 3, "intermediate_size": 112,
           "vocab_size": 101, "rms_norm_eps": 1e-3, "rope_theta": 500000.0, "rope_scaling": None,
           "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
           "max_position_embeddings": 64, "torch_dtype": "bfloat16"}
    json.dump(cfg, open(os.path.join(hf, "config.json"), "w"), indent=1)
    g = torch.Generator().manual_seed(7)
    D, F, V, L = 64, 112, 101, 3

    def rnd(*shape, std):
        return torch.randn(*shape, generator=g) * std

    shard = [{}, {}]
    # small activations (embedding std 0.05: mean(x^2) ~ 2.5e-3) so that rms_norm_eps = 1e-3 matters
    shard[0]["model.embed_tokens.weight"] = ("F32", rnd(V, D, std=0.05))
    for l in range(L):
        s = shard[0] if l < 2 else shard[1]
        dt = "F32" if l < 2 else "BF16"
        p = f"model.layers.{l}."
        s[p + "input_layernorm.weight"] = (dt, 1 + rnd(D, std=0.2))
        for n in "qkvo":
            s[p + f"self_attn.{n}_proj.weight"] = (dt, rnd(D, D, std=0.4 / math.sqrt(D)))
        s[p + "post_attention_layernorm.weight"] = (dt, 1 + rnd(D, std=0.2))
        s[p + "mlp.gate_proj.weight"] = (dt, rnd(F, D, std=1 / math.sqrt(D)))
        s[p + "mlp.up_proj.weight"] = (dt, rnd(F, D, std=1 / math.sqrt(D)))
        s[p + "mlp.down_proj.weight"] = ("F16" if l == 2 else dt, rnd(D, F, std=0.3 / math.sqrt(F)))
    shard[1]["model.norm.weight"] = ("BF16", 1 + rnd(D, std=0.2))
    shard[1]["lm_head.weight"] = ("BF16", rnd(V, D, std=2 / math.sqrt(D)))
    W, wmap = {}, {}
    for i, s in enumerate(shard):
        fn = f"model-{i + 1:05d}-of-00002.safetensors"
        W.update(st_write(os.path.join(hf, fn), s))
        wmap.update({k: fn for k in s})
    json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, open(os.path.join(hf, "model.safetensors.index.json"), "w"))

    ck = os.path.join(work, "ckpt")
    r = subprocess.run([rrfp, "import", "llama", "--hf", hf, "--out", ck], capture_output=True, text=True)
    print(r.stdout + r.stderr)
    expect(r.returncode == 0, "import llama exits 0")
    keys = dict(l.split(" = ") for l in r.stdout.splitlines() if " = " in l and not l.startswith(";"))
    want = {"text_width": "64", "text_layers": "3", "text_heads": "4", "ffn_hidden": "112", "vocab": "101"}
    expect(all(keys.get(k) == v for k, v in want.items()) and float(keys.get("rms_eps", 0)) == 1e-3
           and float(keys.get("rope_base", 0)) == 500000.0, f"printed recipe keys {keys}")

    out = os.path.join(work, "logits.safetensors")
    r = subprocess.run([logits_bin, ck, "64", "3", "4", "112", "101", keys.get("rms_eps", "0"), keys.get("rope_base", "0"), out],
                       capture_output=True, text=True)
    print(r.stdout[:400] + r.stderr)
    expect(r.returncode == 0, "the model starts from the import and runs")
    expect("loaded 30 tensors" in r.stdout and "initialised 20 from model.seed, 0 in the checkpoint not used" in r.stdout,
           "init_from loads all 30 text tensors, initialises the 20 vision / projector ones, leaves nothing unused")
    mb = st_read(out)
    cu = mb["cu_seqlens"].tolist()
    ids = mb["ids"].long()

    def ref(eps, theta):
        return torch.cat([llama_logits(W, cfg, ids[a:b], eps, theta) for a, b in zip(cu[:-1], cu[1:])])

    # Tolerance: the C engine computes in float32 (u = 6e-8), the reference in float64; 3 layers of GEMMs
    # with inner sizes <= 112 and the softmax / norms give a relative error of order 1e-7..1e-6 in the
    # logits (measured 6.4e-7 here). Bound 1e-5; a wrong theta or eps moves them by > 1e-2 (checked below).
    tol = 1e-5
    e = rel_err(mb["logits"], ref(1e-3, 500000.0))
    expect(e <= tol, f"logits vs the float64 Llama forward: ||c - ref|| / ||ref|| = {e:.2e} <= {tol:.0e} "
                     f"({len(ids)} positions, 2 packed samples)")
    for eps, theta, what in ((1e-5, 500000.0, "rms_eps"), (1e-3, 10000.0, "rope_base")):
        e2 = rel_err(mb["logits"], ref(eps, theta))
        expect(e2 > 100 * tol, f"sensitivity: with the default {what} the reference differs by {e2:.2e} (> {100 * tol:.0e})")

    # ---- LLaVA stage 1 on the imported LM: the text tower starts as imported and stays so (frozen)
    run = os.path.join(work, "stage1")
    recipe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "recipes", "test-synthetic.ini")
    sets = [f"model.{k}={keys[k]}" for k in ("text_width", "text_layers", "text_heads", "ffn_hidden", "vocab", "rms_eps", "rope_base")]
    sets += [f"train.init_from={ck}", "train.freeze=vision,text", "train.steps=2", "optim.warmup=1", f"train.run_dir={run}"]
    r = subprocess.run([rrfp, "train", recipe] + sum((["--set", x] for x in sets), []), capture_output=True, text=True)
    expect(r.returncode == 0 and "loaded 30 tensors" in r.stderr, f"stage 1 trains from the import: exit {r.returncode} "
                                                                  f"{(r.stderr + r.stdout).strip()[-300:]}")
    if r.returncode == 0:
        imported = {}
        for fn in os.listdir(ck):
            if fn.endswith(".safetensors"):
                imported.update(st_read(os.path.join(ck, fn)))
        trained = st_read(os.path.join(run, "checkpoints", "step-00000002", "model.safetensors"))
        same = [k for k in imported if torch.equal(imported[k], trained[k])]
        expect(len(same) == 30 and torch.equal(imported["text.embed.weight"].to(DT), W["model.embed_tokens.weight"]),
               f"after 2 stage-1 steps the 30 text tensors are bitwise the imported (= the HF) values ({len(same)} equal)")

    # ---- what the model cannot represent is refused, naming it
    bad = [({"num_key_value_heads": 3}, "num_key_value_heads = 3"),
           ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
           ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "rope_parameters"),
           ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling.low_freq_factor"),
           ({"mlp_bias": True}, "mlp_bias"), ({"head_dim": 32}, "head_dim = 32"),
           ({"model_type": "mistral", "sliding_window": 4096}, "sliding_window"),
           ({"model_type": "mistral"}, "without sliding_window"),  # MistralConfig's default window, 4096
           ({"model_type": "qwen2", "use_sliding_window": True}, "use_sliding_window"),
           ({"model_type": "gemma"}, "model_type \"gemma\"")]
    for i, (change, needle) in enumerate(bad):
        d = os.path.join(work, f"bad{i}")
        shutil.copytree(hf, d)
        json.dump({**cfg, **change}, open(os.path.join(d, "config.json"), "w"))
        r = subprocess.run([rrfp, "import", "llama", "--hf", d, "--out", d + ".ckpt"], capture_output=True, text=True)
        expect(r.returncode == 1 and needle in r.stderr and not os.path.exists(d + ".ckpt"),
               f"{change} refused: {r.stderr.strip()[:160]}")
    d = os.path.join(work, "bias")
    os.makedirs(d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    one = {k: ("F32", v.to(torch.float32)) for k, v in W.items()}
    one["model.layers.0.self_attn.q_proj.bias"] = ("F32", torch.zeros(D))
    st_write(os.path.join(d, "model.safetensors"), one)
    r = subprocess.run([rrfp, "import", "llama", "--hf", d, "--out", d + ".ckpt"], capture_output=True, text=True)
    expect(r.returncode == 1 and "'model.layers.0.self_attn.q_proj.bias' has no place" in r.stderr,
           f"a bias tensor refused: {r.stderr.strip()[:160]}")
    r = subprocess.run([rrfp, "import", "llama", "--hf", hf, "--out", ck], capture_output=True, text=True)
    expect(r.returncode == 1 and "already exists" in r.stderr, "an existing --out is not overwritten")
    variant_cases(rrfp, logits_bin, work)
    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
        return 1
    print("import llama: all checks passed")
    return 0


# ---- the LM variants of LLaVA's successors -------------------------------------------------------

JSON_NULL = object()  # a config value written as JSON null (None leaves the key out)
VARIANTS = [
    # Llama-3 style: GQA 4 on 2, attention_bias (q, k, v, o biases), rope_scaling llama3 (transformers 4 keys);
    # original_max_position_embeddings 64 puts the 8 frequencies of a 16-dim head in all three bands (wavelength
    # 6.3 kept, 32 blended, the rest scaled) and makes the scaling show at the test's positions (< 20)
    ("llama3_gqa_bias", {"model_type": "llama", "num_key_value_heads": 2, "attention_bias": True, "rope_theta": 500000.0,
                         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
     {"text_kv_heads": "2", "text_qkv_bias": "true", "text_o_bias": "true", "rope_type": "llama3"}, 1 + 13 * 3 + 2),
    # Qwen2 style: one key/value head, q/k/v biases (no o bias), tied embeddings, transformers 5's rope_parameters
    ("qwen2_tied", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "num_key_value_heads": 1,
                    "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": 4096,
                    "rope_theta": None, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}},
     {"text_kv_heads": "1", "text_qkv_bias": "true", "tie_embeddings": "true"}, 1 + 12 * 3 + 1),
    # Mistral as transformers 5 saves it: rope_parameters holding rope_theta and Llama-3's scaling, no biases
    ("mistral_rope_parameters", {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "num_key_value_heads": 2,
                                 "sliding_window": JSON_NULL, "rope_parameters": {
                                     "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
     {"text_kv_heads": "2", "rope_type": "llama3", "rope_original_max_pos": "64"}, 1 + 9 * 3 + 2),
    # Llama without rms_norm_eps and rope_theta: LlamaConfig's defaults, 1e-6 and 10000.0 (not Vicuna's 1e-5)
    ("llama_defaults", {"model_type": "llama", "num_key_value_heads": 4, "rms_norm_eps": None}, {}, 1 + 9 * 3 + 2),
]
LLAMA_CONFIG_EPS, LLAMA_CONFIG_THETA = 1e-6, 10000.0  # LlamaConfig's (and Qwen2Config's, MistralConfig's) defaults


def variant_cases(rrfp, logits_bin, work):
    D, H, F, V, L = 64, 4, 112, 101, 3
    d = D // H
    for name, change, want_keys, n_tensors in VARIANTS:
        cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": D, "num_attention_heads": H, "num_hidden_layers": L,
               "intermediate_size": F, "vocab_size": V, "rms_norm_eps": 1e-3, "hidden_act": "silu",
               "max_position_embeddings": 64, **change}
        # None: the key left out; JSON_NULL: the key written as null (Mistral's "sliding_window": null = full attention)
        cfg = {k: (None if v is JSON_NULL else v) for k, v in cfg.items() if v is not None}
        hf = os.path.join(work, "hf_" + name)
        os.makedirs(hf)
        json.dump(cfg, open(os.path.join(hf, "config.json"), "w"), indent=1)
        g = torch.Generator().manual_seed(11)
        Hkv = cfg["num_key_value_heads"]
        qwen2 = cfg["model_type"] == "qwen2"
        qkv_bias, o_bias = qwen2 or cfg.get("attention_bias", False), not qwen2 and cfg.get("attention_bias", False)

        def rnd(*shape, std):
            return torch.randn(*shape, generator=g) * std

        t = {"model.embed_tokens.weight": ("F32", rnd(V, D, std=0.05)), "model.norm.weight": ("BF16", 1 + rnd(D, std=0.2))}
        for l in range(L):
            p = f"model.layers.{l}."
            t[p + "input_layernorm.weight"] = ("F32", 1 + rnd(D, std=0.2))
            t[p + "post_attention_layernorm.weight"] = ("F32", 1 + rnd(D, std=0.2))
            for n, rows in (("q", D), ("k", Hkv * d), ("v", Hkv * d), ("o", D)):
                t[p + f"self_attn.{n}_proj.weight"] = ("BF16", rnd(rows, D, std=0.4 / math.sqrt(D)))
                if (n != "o" and qkv_bias) or (n == "o" and o_bias):
                    t[p + f"self_attn.{n}_proj.bias"] = ("F32", rnd(rows, std=0.3))
            t[p + "mlp.gate_proj.weight"] = ("F32", rnd(F, D, std=1 / math.sqrt(D)))
            t[p + "mlp.up_proj.weight"] = ("F32", rnd(F, D, std=1 / math.sqrt(D)))
            t[p + "mlp.down_proj.weight"] = ("F16", rnd(D, F, std=0.3 / math.sqrt(F)))
        if not cfg.get("tie_word_embeddings"):
            t["lm_head.weight"] = ("BF16", rnd(V, D, std=2 / math.sqrt(D)))
        else:  # a tied model saved with its head anyway (the embedding's values): skipped by the import
            t["lm_head.weight"] = t["model.embed_tokens.weight"]
        W = st_write(os.path.join(hf, "model.safetensors"), t)
        ck = os.path.join(work, "ckpt_" + name)
        r = subprocess.run([rrfp, "import", "llama", "--hf", hf, "--out", ck], capture_output=True, text=True)
        print(r.stdout + r.stderr)
        expect(r.returncode == 0, f"{name}: import llama exits 0")
        keys = dict(l.split(" = ") for l in r.stdout.splitlines() if " = " in l and not l.startswith(";"))
        expect(all(keys.get(k) == v for k, v in want_keys.items()), f"{name}: printed variant keys {want_keys} (got {keys})")
        theta, eps = float(keys.get("rope_base", 0)), float(keys.get("rms_eps", 0))
        expect(theta == (cfg.get("rope_theta") or cfg.get("rope_parameters", {}).get("rope_theta") or LLAMA_CONFIG_THETA),
               f"{name}: rope_base {theta} from the config's rope_theta / rope_parameters, else LlamaConfig's default")
        expect(eps == cfg.get("rms_norm_eps", LLAMA_CONFIG_EPS),
               f"{name}: rms_eps {eps} from the config's rms_norm_eps, else LlamaConfig's default")
        extra = [f"{k}={v}" for k, v in keys.items()
                 if k.startswith("rope_") and k != "rope_base" or k in ("text_kv_heads", "text_qkv_bias", "text_o_bias",
                                                                         "tie_embeddings")]
        out = os.path.join(work, f"logits_{name}.safetensors")
        r = subprocess.run([logits_bin, ck, str(D), str(L), str(H), str(F), str(V), keys.get("rms_eps", "0"),
                            keys.get("rope_base", "0"), out] + extra, capture_output=True, text=True)
        print(r.stdout[:400] + r.stderr)
        expect(r.returncode == 0 and f"loaded {n_tensors} tensors" in r.stdout and ", 0 in the checkpoint not used" in r.stdout,
               f"{name}: the model starts from the import, all {n_tensors} text tensors loaded, none left over")
        if r.returncode != 0:
            continue
        mb = st_read(out)
        cu = mb["cu_seqlens"].tolist()
        ids = mb["ids"].long()
        scaling = cfg.get("rope_scaling") or (cfg.get("rope_parameters") if cfg.get("rope_parameters", {}).get("rope_type") == "llama3" else None)

        def ref(**kw):
            args = {"eps": cfg.get("rms_norm_eps", LLAMA_CONFIG_EPS), "theta": theta, "scaling": scaling, **kw}
            return torch.cat([llama_logits(W, cfg, ids[a:b], **args) for a, b in zip(cu[:-1], cu[1:])])

        tol = 1e-5  # as the base case: float32 against float64, 3 layers
        e = rel_err(mb["logits"], ref())
        expect(e <= tol, f"{name}: logits vs the float64 forward: {e:.2e} <= {tol:.0e}")
        senses = [("the biases", {"use_bias": False})] if qkv_bias else []
        if scaling:
            senses.append(("the llama3 frequency scaling", {"scaling": None}))
        if "rms_norm_eps" not in cfg:
            senses.append(("LlamaConfig's default eps (Vicuna's 1e-5 instead)", {"eps": 1e-5}))
        if 1 < Hkv < H:
            senses.append(("query head h on key/value head h // (H / Hkv) (with h mod Hkv)", {"kv_tiled": True}))
        for what, kw in senses:
            e2 = rel_err(mb["logits"], ref(**kw))
            expect(e2 > 100 * tol, f"{name}: sensitivity: without {what} the reference differs by {e2:.2e} (> {100 * tol:.0e})")


if __name__ == "__main__":
    sys.exit(main())
