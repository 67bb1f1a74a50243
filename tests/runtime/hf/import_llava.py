#!/usr/bin/env python3
"""import_llava.py — `rrfp-mm import llava|clip` and `rrfp-mm export hf` against an independent LLaVA forward.

Writes a small LlavaForConditionalGeneration with random weights in Hugging Face's layout (config.json with
vision_config and text_config, two safetensors shards, F32 and BF16, and model.safetensors.index.json)
under each naming a LLaVA checkpoint exists under (the hub's llava-hf names, transformers 5's
save_pretrained names with rope_parameters, the in-memory model.* names), imports each, and checks:
  - the three imports are the same checkpoint, bit for bit, and print the same recipe keys; a config.json
    without vision_feature_layer and projector_hidden_act imports as LlavaConfig's defaults (-2, gelu);
  - the C model started from the import (tests/runtime/hf/test_llava_logits.c: every tensor loaded) gives the logits of
    a float64 PyTorch forward written here from the published architectures, not from this engine's code:
    HF's CLIPVisionModel (Conv2d patch embedding without bias, class token, position embeddings
    bicubic-interpolated as interpolate_pos_encoding does for another grid, pre_layrnorm, pre-LN layers with
    q/k/v/out biases and QuickGELU, hidden_states[vision_feature_layer][:, 1:]), LLaVA's projector
    (linear_1, exact GELU, linear_2) and Llama (RMSNorm, rotate-half RoPE, causal attention, SwiGLU), the
    image features replacing the <image> positions; one image has the checkpoint's 3 x 3 grid, the other
    2 x 4 (interpolated); the same comparison with the tanh GELU in the projector must fail by far;
  - export hf of the import (into several shards) writes back the original tensors bit for bit, and
    importing the export gives the same checkpoint bit for bit;
  - import clip of the same tower (CLIPVisionModel and CLIPModel layouts) gives the same vision.* tensors;
  - what the model cannot represent is refused naming the key or tensor; export refuses the 2-D RoPE ViT.
  - two LLaVAs whose LM is a later family's (VARIANTS: Qwen2-shaped with grouped-query attention, q/k/v
    biases and tied embeddings; Llama-3-shaped with one key/value head, attention_bias and llama3 RoPE
    scaling), each with its own vision_feature_layer (-1; 1, a positive index): the same import, logits (against
    repeat_kv, the biases, Meta's frequency rescaling and the feature layer; the nearest wrong models, the
    default layer -2 among them, must miss), export's vision_feature_layer and text_config, and export then
    import bit for bit.
Mode --transformers (needs the `transformers` package; exit 77 without it): the same model built by
transformers itself, saved with save_pretrained, imported, logits compared; our export opened with
LlavaForConditionalGeneration.from_pretrained, logits compared.

Usage: import_llava.py [--transformers] RRFP_MM TEST_LLAVA_LOGITS WORKDIR   (exit 0 = every check passed)"""
import copy
import json
import math
import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as Fn

torch.set_num_threads(2)
DT = torch.float64


# ---- safetensors by hand: import_llama.py's writer and reader (this folder) ---------------------------

from import_llama import FAILED, expect, st_read, st_write  # noqa: E402  (one list of failed checks)
from hf_tokenizer_json import llama2_tokenizer  # noqa: E402


def read_dir(d):
    """Every tensor of every .safetensors file in folder d."""
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            for k, v in st_read(os.path.join(d, f)).items():
                assert k not in out, k
                out[k] = v
    return out


def same_bits(a, b):
    return set(a) == set(b) and all(a[k].shape == b[k].shape and torch.equal(a[k].view(torch.int32), b[k].view(torch.int32))
                                    for k in a)


# ---- the model ------------------------------------------------------------------------------------

PATCH, IMG, DV, LV, HV = 2, 6, 32, 3, 4          # CLIP: 3 x 3 position grid, 3 layers
DTXT, LT, HT, FT, V = 48, 2, 4, 80, 97           # Llama
FEATURE_LAYER, IMAGE_TOKEN = -2, 96
EPS, THETA = 1e-5, 500000.0
# The LM: Llama-2-shaped (LLaVA-1.5's), or a variant of LLaVA's later LMs (section "LM variants" below):
# type (text_config model_type), hkv (num_key_value_heads), qkv_bias / o_bias, tie (tie_word_embeddings),
# llama3 (rope_scaling llama3: factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)
LM0 = {"type": "llama", "hkv": HT, "qkv_bias": False, "o_bias": False, "tie": False, "llama3": None}
VARIANTS = {
    # Qwen2-shaped: grouped-query attention (2 key/value heads for 4 query heads), q/k/v biases, tied embeddings
    "qwen2_gqa_bias_tied": {"type": "qwen2", "hkv": 2, "qkv_bias": True, "o_bias": False, "tie": True, "llama3": None},
    # Llama-3-shaped: one key/value head, attention_bias (q, k, v and o), Llama-3 RoPE scaling with
    # original_max_position_embeddings 100: at theta 5e5 and head dim 12 the pairs' wavelengths are 6.3
    # (< 100 / 4: kept), 56 (between: blended), 500 ... (> 100: divided by the factor), all three bands
    "llama3_mqa_bias_rope": {"type": "llama", "hkv": 1, "qkv_bias": True, "o_bias": True, "tie": False,
                             "llama3": (8.0, 1.0, 4.0, 100)},
}
# Each variant's vision_feature_layer too (the base model's is LlavaConfig's default, -2): the last hidden state
# (-1) and a positive index (1: the output of block 0, counted as hidden_states counts), so that a feature layer
# read wrongly, or not at all, changes the logits
VARIANTS["qwen2_gqa_bias_tied"]["layer"] = -1
VARIANTS["llama3_mqa_bias_rope"]["layer"] = 1


def make_weights(lm=LM0, seed=11):
    """Hub-named (llava-hf) random weights, float32."""
    g = torch.Generator().manual_seed(seed)
    dkv = lm["hkv"] * (DTXT // HT)

    def rnd(*shape, std=0.2, mean=0.0):
        return torch.randn(*shape, generator=g) * std + mean

    W = {}
    v = "vision_tower.vision_model."
    G = IMG // PATCH
    W[v + "embeddings.patch_embedding.weight"] = rnd(DV, 3, PATCH, PATCH, std=0.3)
    W[v + "embeddings.class_embedding"] = rnd(DV, std=0.5)
    W[v + "embeddings.position_embedding.weight"] = rnd(1 + G * G, DV, std=0.5)
    for n in ("pre_layrnorm", "post_layernorm"):
        W[v + n + ".weight"] = rnd(DV, std=0.2, mean=1.0)
        W[v + n + ".bias"] = rnd(DV, std=0.2)
    for l in range(LV):
        p = f"{v}encoder.layers.{l}."
        for n in ("layer_norm1", "layer_norm2"):
            W[p + n + ".weight"] = rnd(DV, std=0.2, mean=1.0)
            W[p + n + ".bias"] = rnd(DV, std=0.2)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            W[p + f"self_attn.{n}.weight"] = rnd(DV, DV, std=0.25)
            W[p + f"self_attn.{n}.bias"] = rnd(DV, std=0.2)
        W[p + "mlp.fc1.weight"] = rnd(4 * DV, DV, std=0.25)
        W[p + "mlp.fc1.bias"] = rnd(4 * DV, std=0.2)
        W[p + "mlp.fc2.weight"] = rnd(DV, 4 * DV, std=0.12)
        W[p + "mlp.fc2.bias"] = rnd(DV, std=0.2)
    W["multi_modal_projector.linear_1.weight"] = rnd(DTXT, DV, std=0.3)
    W["multi_modal_projector.linear_1.bias"] = rnd(DTXT, std=0.3)
    W["multi_modal_projector.linear_2.weight"] = rnd(DTXT, DTXT, std=0.2)
    W["multi_modal_projector.linear_2.bias"] = rnd(DTXT, std=0.2)
    t = "language_model.model."
    W[t + "embed_tokens.weight"] = rnd(V, DTXT, std=0.5)
    for l in range(LT):
        p = f"{t}layers.{l}."
        W[p + "input_layernorm.weight"] = rnd(DTXT, std=0.2, mean=1.0)
        W[p + "post_attention_layernorm.weight"] = rnd(DTXT, std=0.2, mean=1.0)
        for n in "qkvo":
            W[p + f"self_attn.{n}_proj.weight"] = rnd(dkv if n in "kv" else DTXT, DTXT, std=0.2)
            if (lm["qkv_bias"] and n != "o") or (lm["o_bias"] and n == "o"):
                W[p + f"self_attn.{n}_proj.bias"] = rnd(dkv if n in "kv" else DTXT, std=0.3)
        W[p + "mlp.gate_proj.weight"] = rnd(FT, DTXT, std=0.2)
        W[p + "mlp.up_proj.weight"] = rnd(FT, DTXT, std=0.2)
        W[p + "mlp.down_proj.weight"] = rnd(DTXT, FT, std=0.2)
    W[t + "norm.weight"] = rnd(DTXT, std=0.2, mean=1.0)
    if not lm["tie"]:
        W["language_model.lm_head.weight"] = rnd(V, DTXT, std=0.3)
    return W


def rename(name, naming):
    """A hub name under another naming."""
    if naming == "hub":
        return name
    if naming == "tf5":  # transformers 5 save_pretrained: no vision_model., model.* prefixes
        if name.startswith("vision_tower.vision_model."):
            return "model.vision_tower." + name[len("vision_tower.vision_model."):]
        if name.startswith("multi_modal_projector."):
            return "model." + name
        if name.startswith("language_model.model."):
            return "model.language_model." + name[len("language_model.model."):]
        if name == "language_model.lm_head.weight":
            return "lm_head.weight"
    if naming == "memory":  # the in-memory module: model.vision_tower.vision_model.*, model.language_model.*
        if name.startswith(("vision_tower.", "multi_modal_projector.")):
            return "model." + name
        if name.startswith("language_model.model."):
            return "model.language_model." + name[len("language_model.model."):]
        if name == "language_model.lm_head.weight":
            return "lm_head.weight"
    raise ValueError(name)


def make_config(naming, lm=LM0):
    vc = {"model_type": "clip_vision_model", "hidden_size": DV, "intermediate_size": 4 * DV, "num_hidden_layers": LV,
          "num_attention_heads": HV, "image_size": IMG, "patch_size": PATCH, "projection_dim": 16}
    tc = {"model_type": "llama", "hidden_size": DTXT, "intermediate_size": FT, "num_hidden_layers": LT,
          "num_attention_heads": HT, "vocab_size": V, "rms_norm_eps": EPS, "max_position_embeddings": 64}
    rope = {"rope_type": "default"}
    if lm["llama3"]:
        f, lo, hi, L = lm["llama3"]
        rope = {"rope_type": "llama3", "factor": f, "low_freq_factor": lo, "high_freq_factor": hi,
                "original_max_position_embeddings": L}
    if naming == "tf5":
        tc["rope_parameters"] = dict(rope, rope_theta=THETA)
        vc["hidden_act"] = "quick_gelu"
        vc["layer_norm_eps"] = 1e-5
    else:
        tc["rope_theta"] = THETA
        if lm["llama3"]:
            tc["rope_scaling"] = rope
    if lm is not LM0:
        tc["model_type"] = lm["type"]
        tc["num_key_value_heads"] = lm["hkv"]
        tc["tie_word_embeddings"] = lm["tie"]
        if lm["type"] == "llama":
            tc["attention_bias"] = lm["o_bias"]
        assert lm["type"] != "qwen2" or (lm["qkv_bias"] and not lm["o_bias"])
    return {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "image_token_index": IMAGE_TOKEN,
            "projector_hidden_act": "gelu", "vision_feature_layer": lm.get("layer", FEATURE_LAYER),
            "vision_feature_select_strategy": "default", "vision_config": vc, "text_config": tc}


def write_hf(d, W, naming, cfg=None, extra=None):
    """Two shards (the second BF16) and an index. Returns hub name -> stored value (float64)."""
    os.makedirs(d)
    json.dump(cfg or make_config(naming), open(os.path.join(d, "config.json"), "w"), indent=1)
    names = sorted(W)
    parts = [names[0::2], names[1::2]]
    stored, wm = {}, {}
    for i, part in enumerate(parts):
        fn = f"model-{i + 1:05d}-of-00002.safetensors"
        t = {rename(n, naming): ("F32" if i == 0 else "BF16", W[n]) for n in part}
        if extra and i == 1:
            t.update(extra)
        s = st_write(os.path.join(d, fn), t)
        for n in part:
            stored[n] = s[rename(n, naming)]
        for n in t:
            wm[n] = fn
    json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    return stored


# ---- the reference forward, float64, from the published architectures -----------------------------

def import_namings(rrfp, kind, W, cases, what=""):
    """W written in Hugging Face's layout and imported (`rrfp-mm import KIND`) once per case (naming, hf folder,
    checkpoint folder, config.json or None for make_config's, extra tensors or None), each import checked to exit 0:
    ({naming: checkpoint folder}, {naming: the import's stdout}, the hub naming's stored tensors), or None at the
    first import that failed."""
    ck, out, stored = {}, {}, None
    for naming, hf, ckpt, cfg, extra in cases:
        S = write_hf(hf, W, naming, cfg=cfg, extra=extra)
        if naming == "hub":
            stored = S
        r = run([rrfp, "import", kind, "--hf", hf, "--out", ckpt])
        expect(r.returncode == 0, f"{what}import {kind} ({naming} names) exits 0: {r.stderr.strip()[-400:]}")
        if r.returncode:
            return None
        ck[naming], out[naming] = ckpt, r.stdout
    return ck, out, stored


def layer_norm(x, w, b):
    return Fn.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def clip_features(S, pixels, align_corners=False, layer=FEATURE_LAYER):
    """HF CLIPVisionModel on one image (3, h, w) -> hidden_states[layer] without the class token."""
    v = "vision_tower.vision_model."
    pe = Fn.conv2d(pixels[None], S[v + "embeddings.patch_embedding.weight"], stride=PATCH)  # (1, D, gh, gw)
    gh, gw = pe.shape[2], pe.shape[3]
    x = pe.flatten(2).transpose(1, 2)[0]
    x = torch.cat([S[v + "embeddings.class_embedding"][None], x], 0)
    pos = S[v + "embeddings.position_embedding.weight"]
    G = int(round(math.sqrt(pos.shape[0] - 1)))
    if (gh, gw) != (G, G):  # CLIPVisionEmbeddings.interpolate_pos_encoding
        pp = pos[1:].reshape(1, G, G, -1).permute(0, 3, 1, 2)
        pp = Fn.interpolate(pp, size=(gh, gw), mode="bicubic", align_corners=align_corners)
        pos = torch.cat([pos[:1], pp.permute(0, 2, 3, 1).reshape(gh * gw, -1)], 0)
    x = x + pos
    x = layer_norm(x, S[v + "pre_layrnorm.weight"], S[v + "pre_layrnorm.bias"])
    hidden = [x]
    T, d = x.shape[0], DV // HV
    for l in range(LV):
        p = f"{v}encoder.layers.{l}."
        h = layer_norm(x, S[p + "layer_norm1.weight"], S[p + "layer_norm1.bias"])
        q, k, vv = (h @ S[p + f"self_attn.{n}_proj.weight"].T + S[p + f"self_attn.{n}_proj.bias"] for n in ("q", "k", "v"))
        q, k, vv = (t.reshape(T, HV, d) for t in (q, k, vv))
        a = torch.softmax(torch.einsum("thd,shd->hts", q, k) * d ** -0.5, -1)
        o = torch.einsum("hts,shd->thd", a, vv).reshape(T, DV)
        x = x + o @ S[p + "self_attn.out_proj.weight"].T + S[p + "self_attn.out_proj.bias"]
        h = layer_norm(x, S[p + "layer_norm2.weight"], S[p + "layer_norm2.bias"])
        h = h @ S[p + "mlp.fc1.weight"].T + S[p + "mlp.fc1.bias"]
        h = h * torch.sigmoid(1.702 * h)  # quick_gelu
        x = x + h @ S[p + "mlp.fc2.weight"].T + S[p + "mlp.fc2.bias"]
        hidden.append(x)
    return hidden[layer][1:]


def projector(S, f, tanh=False):
    h = f @ S["multi_modal_projector.linear_1.weight"].T + S["multi_modal_projector.linear_1.bias"]
    h = Fn.gelu(h, approximate="tanh" if tanh else "none")
    return h @ S["multi_modal_projector.linear_2.weight"].T + S["multi_modal_projector.linear_2.bias"]


def rms_norm(x, w):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-b, a], -1)


def inv_freq(d, llama3):
    """RoPE frequencies; llama3: Meta's apply_scaling (transformers' _compute_llama3_parameters)."""
    inv = 1.0 / THETA ** (torch.arange(0, d, 2, dtype=DT) / d)
    if llama3:
        factor, low, high, L = llama3
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > L / low, inv / factor, inv)
        smooth = (L / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < L / high) & ~(wavelen > L / low)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def llama(S, x, lm=LM0, kv_map="repeat_kv", llama3="lm"):
    """kv_map: repeat_kv (transformers: query head h reads key/value head h // (HT / hkv)) or the wrong
    "modulo" (h % hkv); llama3: the LM's rope_scaling, or None (a sensitivity check)."""
    t = "language_model.model."
    T, d, hkv = x.shape[0], DTXT // HT, lm["hkv"]
    inv = inv_freq(d, lm["llama3"] if llama3 == "lm" else llama3)
    fr = torch.arange(T, dtype=DT)[:, None] * inv[None]
    emb = torch.cat([fr, fr], -1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(LT):
        p = f"{t}layers.{l}."
        h = rms_norm(x, S[p + "input_layernorm.weight"])
        q, k, v = (h @ S[p + f"self_attn.{n}_proj.weight"].T + (S[p + f"self_attn.{n}_proj.bias"] if lm["qkv_bias"] else 0)
                   for n in "qkv")
        q, k, v = q.reshape(T, HT, d), k.reshape(T, hkv, d), v.reshape(T, hkv, d)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if kv_map == "repeat_kv":
            k, v = k.repeat_interleave(HT // hkv, 1), v.repeat_interleave(HT // hkv, 1)
        else:
            k, v = k.repeat(1, HT // hkv, 1), v.repeat(1, HT // hkv, 1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(d)
        o = torch.einsum("hts,shd->thd", torch.softmax(s.masked_fill(~causal, float("-inf")), -1), v).reshape(T, DTXT)
        x = x + o @ S[p + "self_attn.o_proj.weight"].T + (S[p + "self_attn.o_proj.bias"] if lm["o_bias"] else 0)
        h = rms_norm(x, S[p + "post_attention_layernorm.weight"])
        x = x + (Fn.silu(h @ S[p + "mlp.gate_proj.weight"].T) * (h @ S[p + "mlp.up_proj.weight"].T)) @ S[p + "mlp.down_proj.weight"].T
    head = S[t + "embed_tokens.weight"] if lm["tie"] else S["language_model.lm_head.weight"]
    return rms_norm(x, S[t + "norm.weight"]) @ head.T


def reference_logits(S, mb, tanh=False, align_corners=False, lm=LM0, layer=FEATURE_LAYER, **lm_kw):
    """Each packed sample on its own, its image positions holding the projected CLIP features."""
    p = PATCH
    patches = mb["patches"].to(DT)
    ids, cu = mb["ids"].tolist(), mb["cu_seqlens"].tolist()
    icu, gh, gw, start = mb["img_cu_patches"].tolist(), mb["grid_h"].tolist(), mb["grid_w"].tolist(), mb["img_lm_start"].tolist()
    feats = {}
    for i in range(len(gh)):
        # the model's patch rows are (row, col, channel) flattened: rebuild the image (3, gh p, gw p)
        img = torch.zeros(3, gh[i] * p, gw[i] * p, dtype=DT)
        for k in range(icu[i], icu[i + 1]):
            r, c = divmod(k - icu[i], gw[i])
            img[:, r * p:(r + 1) * p, c * p:(c + 1) * p] = patches[k].reshape(p, p, 3).permute(2, 0, 1)
        f = projector(S, clip_features(S, img, align_corners, layer), tanh)
        for j in range(f.shape[0]):
            feats[start[i] + j] = f[j]
    out = []
    for s in range(len(cu) - 1):
        x = torch.stack([feats[t] if ids[t] < 0 else S["language_model.model.embed_tokens.weight"][ids[t]]
                         for t in range(cu[s], cu[s + 1])])
        out.append(llama(S, x, lm, **lm_kw))
    return torch.cat(out, 0)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def recipe_keys(stdout):
    """The [model] key = value lines import printed."""
    keys, sec = {}, None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("["):
            sec = line
        elif "=" in line and not line.startswith(";") and sec == "[model]":
            k, v = (s.strip() for s in line.split("=", 1))
            keys[k] = v
    return keys


def main_transformers(rrfp, logits_bin, work):
    try:
        import transformers  # noqa: F401
        from transformers import LlavaConfig, LlavaForConditionalGeneration  # noqa: F401
    except Exception as e:  # not installed here: skipped
        print(f"transformers is not importable ({e.__class__.__name__}): skipped")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # LLaVA-1.5's Llama-2-shaped LM, then the LM variants (their attention biases drawn away from the zero init)
    for name, lm in [("llama2", LM0)] + list(VARIANTS.items()):
        check_transformers(rrfp, logits_bin, os.path.join(work, name), name, lm)
    return 1 if FAILED else 0


def check_transformers(rrfp, logits_bin, work, name, lm):
    from transformers import LlavaConfig, LlavaForConditionalGeneration
    os.makedirs(work)
    cfg = make_config("hub", lm)
    config = LlavaConfig(vision_config=cfg["vision_config"], text_config=cfg["text_config"],
                         image_token_index=IMAGE_TOKEN, projector_hidden_act="gelu",
                         vision_feature_layer=lm.get("layer", FEATURE_LAYER), vision_feature_select_strategy="default",
                         tie_word_embeddings=lm["tie"])
    torch.manual_seed(3)
    model = LlavaForConditionalGeneration(config).to(torch.float32).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "language_model" in n and "self_attn" in n and n.endswith(".bias"):
                p.normal_(0.0, 0.3)
    sp = os.path.join(work, "saved")
    model.save_pretrained(sp)
    ck = os.path.join(work, "ckpt")
    r = run([rrfp, "import", "llava", "--hf", sp, "--out", ck])
    expect(r.returncode == 0, f"{name}: import llava of transformers' own save_pretrained output: " + r.stderr.strip()[-300:])
    if r.returncode:
        return
    keys = recipe_keys(r.stdout)
    expect(keys.get("text_kv_heads", str(HT)) == str(lm["hkv"]) and (keys.get("tie_embeddings") == "true") == lm["tie"] and
           (keys.get("text_qkv_bias") == "true") == lm["qkv_bias"] and (keys.get("rope_type") == "llama3") == bool(lm["llama3"]),
           f"{name}: the recipe keys of transformers' save_pretrained output: {keys}")
    dump = os.path.join(work, "mb.safetensors")
    r = run([logits_bin, ck, dump] + [f"{k}={v}" for k, v in keys.items()])
    expect(r.returncode == 0, f"{name}: logits of the import: " + r.stderr.strip()[-300:])
    if r.returncode:
        return
    mb = st_read(dump)
    # transformers' forward on the same inputs: input ids with IMAGE_TOKEN at the image positions, pixel
    # values per sample (one image per sample here); only the samples whose image has the checkpoint's
    # grid (interpolate_pos_encoding is not an argument of every version's LLaVA forward)
    sd = {k: v.to(DT) for k, v in model.state_dict().items()}
    with torch.no_grad():
        ids, cu = mb["ids"].tolist(), mb["cu_seqlens"].tolist()
        icu, gh, gw = mb["img_cu_patches"].tolist(), mb["grid_h"].tolist(), mb["grid_w"].tolist()
        G = IMG // PATCH
        errs = []
        for s in range(len(cu) - 1):
            i = s
            if (gh[i], gw[i]) != (G, G):
                continue
            seq = [IMAGE_TOKEN if ids[t] < 0 else ids[t] for t in range(cu[s], cu[s + 1])]
            img = torch.zeros(3, gh[i] * PATCH, gw[i] * PATCH)
            for k in range(icu[i], icu[i + 1]):
                rr, c = divmod(k - icu[i], gw[i])
                img[:, rr * PATCH:(rr + 1) * PATCH, c * PATCH:(c + 1) * PATCH] = mb["patches"][k].reshape(PATCH, PATCH, 3).permute(2, 0, 1)
            ref = model(input_ids=torch.tensor([seq]), pixel_values=img[None]).logits[0].to(DT)
            got = mb["logits"][cu[s]:cu[s + 1]].to(DT)
            errs.append((got - ref).abs().max().item() / ref.abs().max().item())
    # fp32 on both sides, different summation orders: 1e-5 (the float64 comparison above sees 1e-6)
    expect(len(errs) == 1 and max(errs) < 1e-5,
           f"{name}: logits of transformers' model imported vs transformers itself: rel {max(errs or [1]):.2e} (fp32)")
    del sd
    rec = os.path.join(work, "r.ini")
    with open(rec, "w") as f:
        f.write("[model]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()) + "[data]\nsource = synthetic\n")
    ex = os.path.join(work, "export")
    r = run([rrfp, "export", "hf", "--checkpoint", ck, "--recipe", rec, "--out", ex, "--image-token-id", str(IMAGE_TOKEN)])
    expect(r.returncode == 0, f"{name}: export hf: " + r.stderr.strip()[-300:])
    if r.returncode:
        return
    back = LlavaForConditionalGeneration.from_pretrained(ex).eval()
    with torch.no_grad():
        seq = [IMAGE_TOKEN] * 9 + [5, 6, 7]
        px = torch.randn(1, 3, IMG, IMG)
        a = model(input_ids=torch.tensor([seq]), pixel_values=px).logits
        b = back(input_ids=torch.tensor([seq]), pixel_values=px).logits
    err = (a - b).abs().max().item() / a.abs().max().item()
    expect(err < 1e-5, f"{name}: our export opened by LlavaForConditionalGeneration.from_pretrained: logits differ by {err:.2e}")
    # --add-image-token: <image> becomes id V, the vocabulary V + 1 rounded up to 64; transformers opens it and
    # its logits over the first V tokens are the model's (the image rows replace <image> as before)
    grown = os.path.join(work, "export_grown")
    r = run([rrfp, "export", "hf", "--checkpoint", ck, "--recipe", rec, "--out", grown, "--add-image-token"])
    expect(r.returncode == 0, f"{name}: export hf --add-image-token: " + r.stderr.strip()[-300:])
    if r.returncode:
        return
    g = LlavaForConditionalGeneration.from_pretrained(grown).eval()
    with torch.no_grad():
        c = g(input_ids=torch.tensor([[V] * 9 + [5, 6, 7]]), pixel_values=px).logits
    err = (a - c[..., :V]).abs().max().item() / a.abs().max().item()
    expect(c.shape[-1] == (V + 64) // 64 * 64 and err < 1e-5,
           f"{name}: the --add-image-token export opened by from_pretrained: vocab {c.shape[-1]}, logits over the first "
           f"{V} tokens differ by {err:.2e}")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--transformers":
        return main_transformers(*args[1:4])
    rrfp, logits_bin, work = args[:3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    W = make_weights()

    # ---- the three namings -------------------------------------------------------------------------
    got = import_namings(rrfp, "llava", W, [(n, os.path.join(work, "hf_" + n), os.path.join(work, "ckpt_" + n), None, None)
                                            for n in ("hub", "tf5", "memory")])
    if got is None:
        return 1
    ck, out, stored = got
    keys = recipe_keys(out["hub"])
    print(out["hub"])
    want = {"vision_arch": "clip", "vision_width": str(DV), "vision_layers": str(LV), "vision_heads": str(HV),
            "patch": str(PATCH), "vision_image_size": str(IMG), "vision_feature_layer": str(FEATURE_LAYER),
            "projector_act": "gelu", "text_width": str(DTXT), "text_layers": str(LT), "text_heads": str(HT),
            "ffn_hidden": str(FT), "vocab": str(V)}
    expect(all(keys.get(k) == v for k, v in want.items()), f"printed recipe keys {keys}")
    expect(float(keys.get("rope_base", 0)) == THETA and float(keys.get("rms_eps", 0)) == EPS, "rope_base / rms_eps printed")
    for naming in ("tf5", "memory"):
        expect(recipe_keys(out[naming]) == keys, f"{naming} names imply the same recipe keys as the hub's")
        expect(same_bits(read_dir(ck[naming]), read_dir(ck["hub"])),
               f"{naming} names import to the same checkpoint as the hub's, bit for bit")
    # a config.json without vision_feature_layer and projector_hidden_act takes LlavaConfig's defaults, -2 and
    # "gelu" (this model's FEATURE_LAYER and act): the same recipe keys and checkpoint
    cfg = make_config("hub")
    del cfg["vision_feature_layer"], cfg["projector_hidden_act"]
    nd = import_namings(rrfp, "llava", W, [("hub", os.path.join(work, "hf_defaults"), os.path.join(work, "ckpt_defaults"),
                                            cfg, None)], "LlavaConfig's defaults: ")
    dk = recipe_keys(nd[1]["hub"]) if nd else {}
    expect(nd is not None and dk == keys and same_bits(read_dir(nd[0]["hub"]), read_dir(ck["hub"])),
           "no vision_feature_layer, no projector_hidden_act: LlavaConfig's defaults (-2, gelu), the same recipe keys and "
           f"checkpoint (keys that differ: {sorted(k for k in set(dk) | set(keys) if dk.get(k) != keys.get(k))})")

    # ---- logits against the reference --------------------------------------------------------------
    dump = os.path.join(work, "mb.safetensors")
    r = run([logits_bin, ck["hub"], dump] + [f"{k}={v}" for k, v in keys.items()])
    expect(r.returncode == 0 and "loaded all" in r.stdout, f"test_llava_logits loads every tensor: {r.stdout.strip()} {r.stderr.strip()[-400:]}")
    if r.returncode:
        return 1
    mb = st_read(dump)
    expect(sorted(zip(mb["grid_h"].tolist(), mb["grid_w"].tolist())) == [(2, 4), (3, 3)],
           "one image on the checkpoint's 3 x 3 grid, one 2 x 4 (interpolated position embeddings)")
    got = mb["logits"].to(DT)
    ref = reference_logits(stored, mb)
    err = (got - ref).abs().max().item() / ref.abs().max().item()
    # fp32 against float64 through 3 + 2 layers: 1.1e-6 seen; 1e-5 leaves ~10x for other BLAS kernels and
    # thread counts, while the nearest wrong models miss it: the projector's tanh GELU instead of the exact
    # one (~1e-4), the position embeddings interpolated with align_corners=True (checked below)
    expect(err < 1e-5, f"LLaVA logits vs the float64 reference: max rel err {err:.2e} (tol 1e-5)")
    for what, kw in (("the projector's tanh GELU", {"tanh": True}), ("bicubic with align_corners=True", {"align_corners": True})):
        e = (got - reference_logits(stored, mb, **kw)).abs().max().item() / ref.abs().max().item()
        expect(e > 1e-5 * 3, f"the same comparison with {what} fails the tolerance: {e:.2e}")

    # ---- export hf and back ---------------------------------------------------------------------------
    rec = os.path.join(work, "r.ini")
    with open(rec, "w") as f:
        f.write("[model]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()) + "[data]\nsource = synthetic\n")
    ex = os.path.join(work, "export")
    r = run([rrfp, "export", "hf", "--checkpoint", ck["hub"], "--recipe", rec, "--out", ex,
             "--image-token-id", str(IMAGE_TOKEN), "--shard-bytes", "60000"])
    expect(r.returncode == 0, f"export hf exits 0: {r.stdout.strip()} {r.stderr.strip()[-400:]}")
    if r.returncode:
        return 1
    shards = [f for f in os.listdir(ex) if f.endswith(".safetensors")]
    idx = json.load(open(os.path.join(ex, "model.safetensors.index.json")))
    expect(len(shards) > 1 and sorted(set(idx["weight_map"].values())) == sorted(shards),
           f"export writes {len(shards)} shards and an index naming them")
    E = read_dir(ex)
    orig = {n: stored[n].to(torch.float32) for n in stored}
    expect(same_bits(E, orig), "the export holds the original Hugging Face tensors under their hub names, bit for bit")
    ecfg = json.load(open(os.path.join(ex, "config.json")))
    expect(ecfg["model_type"] == "llava" and ecfg["vision_feature_layer"] == FEATURE_LAYER and
           ecfg["image_token_index"] == IMAGE_TOKEN and ecfg["projector_hidden_act"] == "gelu" and
           ecfg["text_config"]["rope_theta"] == THETA, "export's config.json")
    back = os.path.join(work, "ckpt_back")
    r = run([rrfp, "import", "llava", "--hf", ex, "--out", back])
    expect(r.returncode == 0 and recipe_keys(r.stdout) == keys, f"import of the export: {r.stderr.strip()[-300:]}")
    expect(same_bits(read_dir(back), read_dir(ck["hub"])), "export then import equals the import, bit for bit")

    # ---- export hf --add-image-token: a model whose vocabulary has no <image> (Vicuna + CLIP) ------------
    tokd = os.path.join(work, "tok")
    os.makedirs(tokd)
    # a Llama-2-style tokenizer of exactly V ids (Vicuna's 32000 for its 32000 rows): <image> becomes id V in the
    # file and in Hugging Face's reading of it (the next id after the vocabulary)
    tokj = llama2_tokenizer(V)
    json.dump(tokj, open(os.path.join(tokd, "tokenizer.json"), "w"))
    json.dump({"added_tokens_decoder": {"0": {"content": "<unk>", "special": True}}, "model_max_length": 4096},
              open(os.path.join(tokd, "tokenizer_config.json"), "w"))
    grown = os.path.join(work, "export_grown")
    r = run([rrfp, "export", "hf", "--checkpoint", ck["hub"], "--recipe", rec, "--out", grown, "--add-image-token",
             "--tokenizer", os.path.join(tokd, "tokenizer.json")])
    expect(r.returncode == 0, f"export hf --add-image-token exits 0: {r.stdout.strip()} {r.stderr.strip()[-400:]}")
    if r.returncode:
        return 1
    Vout = (V + 64) // 64 * 64
    gcfg = json.load(open(os.path.join(grown, "config.json")))
    expect(gcfg["image_token_index"] == V and gcfg["text_config"]["vocab_size"] == Vout,
           f"--add-image-token: <image> is id V = {V}, the vocabulary {Vout} (V + 1 rounded up to 64): "
           f"{gcfg['image_token_index']}, {gcfg['text_config']['vocab_size']}")
    G = read_dir(grown)
    for n in ("language_model.model.embed_tokens.weight", "language_model.lm_head.weight"):
        t, o = G[n], orig[n]
        mean = o.double().mean(0).float()
        expect(tuple(t.shape) == (Vout, o.shape[1]) and torch.equal(t[:V], o) and
               (t[V:] - mean).abs().max().item() <= 1e-6 * mean.abs().max().item(),
               f"{n}: {tuple(t.shape)}, the trained rows bit for bit, the {Vout - V} new ones their mean")
    expect(same_bits({k: v for k, v in G.items() if "embed_tokens" not in k and "lm_head" not in k},
                     {k: v for k, v in orig.items() if "embed_tokens" not in k and "lm_head" not in k}),
           "--add-image-token: every other tensor as the plain export's, bit for bit")
    gt = json.load(open(os.path.join(grown, "tokenizer.json")))
    img = [a for a in gt["added_tokens"] if a["content"] == "<image>"]
    expect(len(img) == 1 and img[0]["id"] == V and img[0]["special"] and gt["model"] == tokj["model"],
           f"the tokenizer.json written holds <image> = {V} (special), the rest as given: {img}")
    gc = json.load(open(os.path.join(grown, "tokenizer_config.json")))
    expect(gc["added_tokens_decoder"].get(str(V), {}).get("content") == "<image>" and gc["model_max_length"] == 4096,
           "tokenizer_config.json's added_tokens_decoder holds <image> too")
    r = run([rrfp, "import", "llava", "--hf", grown, "--out", os.path.join(work, "ckpt_grown")])
    expect(r.returncode == 0 and recipe_keys(r.stdout).get("vocab") == str(Vout),
           f"import llava of the grown export: vocab {recipe_keys(r.stdout).get('vocab')} {r.stderr.strip()[-300:]}")
    # refused: with an id, or a tokenizer that has <image> already (nothing written)
    r = run([rrfp, "export", "hf", "--checkpoint", ck["hub"], "--recipe", rec, "--out", grown + "2", "--add-image-token",
             "--image-token-id", "3"])
    expect(r.returncode == 2 and "--image-token-id" in r.stderr and not os.path.exists(grown + "2"),
           f"--add-image-token with --image-token-id refused: {r.stderr.strip()[-200:]}")
    r = run([rrfp, "export", "hf", "--checkpoint", ck["hub"], "--recipe", rec, "--out", grown + "3", "--add-image-token",
             "--tokenizer", os.path.join(grown, "tokenizer.json")])
    expect(r.returncode == 1 and f"already holds <image> (id {V})" in r.stderr and not os.path.exists(grown + "3"),
           f"--add-image-token with a tokenizer holding <image> refused: {r.stderr.strip()[-200:]}")
    # (read as the engine reads a tokenizer: its loader names what is wrong)
    for i, (text, needle) in enumerate((("[1, 2]", "expected a Hugging Face tokenizer.json"),
                                        ('{"added_tokens": 5}', 'no "model" object'))):
        bad = os.path.join(work, f"badtok{i}")
        os.makedirs(bad)
        open(os.path.join(bad, "tokenizer.json"), "w").write(text)
        r = run([rrfp, "export", "hf", "--checkpoint", ck["hub"], "--recipe", rec, "--out", grown + f"b{i}",
                 "--add-image-token", "--tokenizer", os.path.join(bad, "tokenizer.json")])
        expect(r.returncode == 1 and needle in r.stderr and "badtok" in r.stderr and not os.path.exists(grown + f"b{i}"),
               f"--add-image-token with a tokenizer.json it cannot extend ({text}) refused, naming it, nothing written: "
               f"{r.stderr.strip()[-200:]}")

    # ---- import clip --------------------------------------------------------------------------------
    vis = {n: w for n, w in W.items() if n.startswith("vision_tower.vision_model.")}
    mine = {k: v for k, v in read_dir(ck["hub"]).items() if k.startswith("vision.")}
    for layout in ("clip_vision_model", "clip"):
        d = os.path.join(work, "hf_" + layout)
        os.makedirs(d)
        vc = make_config("hub")["vision_config"]
        cfg = vc if layout == "clip_vision_model" else {"model_type": "clip", "vision_config": vc, "text_config": {}}
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        t = {"vision_model." + n[len("vision_tower.vision_model."):]: ("F32", stored[n]) for n in vis}
        t["vision_model.embeddings.position_ids"] = ("F32", torch.arange(10, dtype=torch.float32)[None])
        if layout == "clip":
            t["text_model.embeddings.token_embedding.weight"] = ("F32", torch.zeros(5, 4))
            t["logit_scale"] = ("F32", torch.zeros(()))
        st_write(os.path.join(d, "model.safetensors"), t)
        o = os.path.join(work, "ckpt_" + layout)
        r = run([rrfp, "import", "clip", "--hf", d, "--out", o])
        expect(r.returncode == 0, f"import clip ({layout}): {r.stderr.strip()[-300:]}")
        expect(r.returncode == 0 and same_bits(read_dir(o), mine), f"import clip ({layout}) = the LLaVA import's vision.*")

    # ---- refusals -----------------------------------------------------------------------------------
    def refused(tag, mutate=None, extra=None, want=""):
        d = os.path.join(work, "bad_" + tag)
        cfg = make_config("hub")
        if mutate:
            mutate(cfg)
        write_hf(d, W, "hub", cfg=cfg, extra=extra)
        r = run([rrfp, "import", "llava", "--hf", d, "--out", os.path.join(work, "bad_out_" + tag)])
        expect(r.returncode == 1 and want in r.stderr and not os.path.exists(os.path.join(work, "bad_out_" + tag)),
               f"refused, naming {want}: {r.stderr.strip()[-250:]}")

    refused("act", lambda c: c["vision_config"].update(hidden_act="gelu"), want="hidden_act")
    refused("inter", lambda c: c["vision_config"].update(intermediate_size=100), want="intermediate_size")
    refused("layers", lambda c: c.update(vision_feature_layer=[-2, -3]), want="vision_feature_layer")
    refused("full", lambda c: c.update(vision_feature_select_strategy="full"), want="vision_feature_select_strategy")
    refused("pbias", lambda c: c.update(multimodal_projector_bias=False), want="multimodal_projector_bias")
    refused("pact", lambda c: c.update(projector_hidden_act="relu"), want="projector_hidden_act")
    refused("lm_act", lambda c: c["text_config"].update(hidden_act="gelu"), want="hidden_act")
    refused("next", lambda c: c.update(model_type="llava_next"), want="model_type")
    # MistralConfig's sliding_window default (4096) applies when text_config leaves it out
    refused("mistral_window", lambda c: c["text_config"].update(model_type="mistral", num_key_value_heads=HT),
            want="sliding_window")
    refused("mlp_bias", lambda c: c["text_config"].update(mlp_bias=True), want="mlp_bias")
    refused("shape", lambda c: c["vision_config"].update(image_size=8), want="config.json implies (17, 32)")
    refused("newline", extra={"model.image_newline": ("F32", torch.zeros(DTXT))}, want="image_newline")
    # the import says its model keys: a recipe that sets one otherwise is refused naming it; a checkpoint
    # without them (an import of an earlier build) takes the recipe's, and the 2-D RoPE ViT is refused
    rope = os.path.join(work, "rope.ini")
    with open(rope, "w") as f:
        f.write("[model]\nvocab = 97\nvision_arch = rope2d\n[data]\nsource = synthetic\n")
    r = run([rrfp, "export", "hf", "--checkpoint", ck["hub"], "--recipe", rope, "--out", os.path.join(work, "ex_rope"),
             "--image-token-id", "1"])
    expect(r.returncode == 1 and "model.vision_arch = rope2d, but" in r.stderr and "vision_arch = clip" in r.stderr,
           f"export: a recipe that disagrees with the import on model.vision_arch is refused naming it: {r.stderr.strip()[-300:]}")
    old = os.path.join(work, "ck_keyless")
    shutil.copytree(ck["hub"], old)
    st = json.load(open(os.path.join(old, "state.json")))
    del st["recipe"]
    json.dump(st, open(os.path.join(old, "state.json"), "w"))
    with open(rope, "w") as f:
        f.write("[model]\nvocab = 97\n[data]\nsource = synthetic\n")
    r = run([rrfp, "export", "hf", "--checkpoint", old, "--recipe", rope, "--out", os.path.join(work, "ex_rope"),
             "--image-token-id", "1"])
    expect(r.returncode == 1 and "no Hugging Face equivalent" in r.stderr, f"export refuses the 2-D RoPE ViT: {r.stderr.strip()[-200:]}")
    obias = os.path.join(work, "obias.ini")
    with open(obias, "w") as f:
        f.write("[model]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()) + "text_o_bias = true\n"
                "[data]\nsource = synthetic\n")
    r = run([rrfp, "export", "hf", "--checkpoint", ck["hub"], "--recipe", obias, "--out", os.path.join(work, "ex_obias"),
             "--image-token-id", "1"])
    expect(r.returncode == 1 and "model.text_o_bias" in r.stderr and not os.path.exists(os.path.join(work, "ex_obias")),
           f"export refuses a bias on o alone: {r.stderr.strip()[-200:]}")

    for name, lm in VARIANTS.items():
        check_variant(rrfp, logits_bin, work, name, lm)

    print(f"{len(FAILED)} check(s) failed" if FAILED else "all checks passed")
    return 1 if FAILED else 0


def check_variant(rrfp, logits_bin, work, name, lm):
    """An LM of LLaVA's later families under the CLIP tower: imported under the hub's names and transformers
    5's (rope_parameters; tied: with an lm_head.weight in the files, which is skipped), logits against the
    float64 reference (and the nearest wrong models failing), export's text_config, export then import bit
    for bit."""
    W = make_weights(lm, seed=29)
    # tied: under transformers 5's names a checkpoint saved with its head (the same values)
    head = {"lm_head.weight": ("F32", W["language_model.model.embed_tokens.weight"])} if lm["tie"] else None
    cases = [(n, os.path.join(work, f"hf_{name}_{n}"), os.path.join(work, f"ckpt_{name}_{n}"), make_config(n, lm),
              head if n == "tf5" else None) for n in ("hub", "tf5")]
    got = import_namings(rrfp, "llava", W, cases, f"{name}: ")
    if got is None:
        return
    ck, out, stored = got
    keys = recipe_keys(out["hub"])
    layer = lm.get("layer", FEATURE_LAYER)
    want = {"text_width": str(DTXT), "text_heads": str(HT), "vocab": str(V), "text_kv_heads": str(lm["hkv"]),
            "vision_feature_layer": str(layer)}
    if lm["qkv_bias"]:
        want["text_qkv_bias"] = "true"
    if lm["o_bias"]:
        want["text_o_bias"] = "true"
    if lm["tie"]:
        want["tie_embeddings"] = "true"
    if lm["llama3"]:
        want.update(rope_type="llama3", rope_original_max_pos=str(lm["llama3"][3]))
    absent = {"text_qkv_bias", "text_o_bias", "tie_embeddings", "rope_type"} - set(want)
    expect(all(keys.get(k) == v for k, v in want.items()) and not absent & set(keys),
           f"{name}: printed recipe keys {keys}")
    if lm["llama3"]:
        f, lo, hi, _ = lm["llama3"]
        expect((float(keys["rope_factor"]), float(keys["rope_low_freq_factor"]), float(keys["rope_high_freq_factor"])) ==
               (f, lo, hi), f"{name}: the llama3 factors printed")
    expect(recipe_keys(out["tf5"]) == keys, f"{name}: transformers 5 names imply the same recipe keys as the hub's")
    expect(same_bits(read_dir(ck["tf5"]), read_dir(ck["hub"])),
           f"{name}: transformers 5 names import to the same checkpoint as the hub's, bit for bit")
    mine = read_dir(ck["hub"])
    expect(("text.lm_head.weight" in mine) == (not lm["tie"]), f"{name}: text.lm_head.weight only when untied")
    expect(tuple(mine["text.blocks.0.attn.k.weight"].shape) == (lm["hkv"] * (DTXT // HT), DTXT),
           f"{name}: k holds the key/value heads' rows")

    dump = os.path.join(work, f"mb_{name}.safetensors")
    r = run([logits_bin, ck["hub"], dump] + [f"{k}={v}" for k, v in keys.items()])
    expect(r.returncode == 0 and "loaded all" in r.stdout, f"{name}: test_llava_logits loads every tensor: "
           f"{r.stdout.strip()} {r.stderr.strip()[-400:]}")
    if r.returncode:
        return
    mb = st_read(dump)
    got = mb["logits"].to(DT)
    ref = reference_logits(stored, mb, lm=lm, layer=layer)
    err = (got - ref).abs().max().item() / ref.abs().max().item()
    expect(err < 1e-5, f"{name}: LLaVA logits vs the float64 reference: max rel err {err:.2e} (tol 1e-5)")
    wrong = [("query head h on key/value head h % hkv", {"kv_map": "modulo"})] if 1 < lm["hkv"] < HT else []
    if layer != FEATURE_LAYER:
        wrong.append((f"LlavaConfig's default feature layer {FEATURE_LAYER}", {"layer": FEATURE_LAYER}))
    if lm["llama3"]:
        wrong.append(("the unscaled RoPE", {"llama3": None}))
    if lm["qkv_bias"]:
        wrong.append(("no q/k/v biases", {"lm": dict(lm, qkv_bias=False, o_bias=False)}))
    for what, kw in wrong:
        kw = dict(kw)
        e = (got - reference_logits(stored, mb, **dict({"lm": lm, "layer": layer}, **kw))).abs().max().item() / ref.abs().max().item()
        expect(e > 1e-5 * 3, f"{name}: the same comparison with {what} fails the tolerance: {e:.2e}")

    rec = os.path.join(work, f"r_{name}.ini")
    with open(rec, "w") as f:
        f.write("[model]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()) + "[data]\nsource = synthetic\n")
    ex = os.path.join(work, f"export_{name}")
    r = run([rrfp, "export", "hf", "--checkpoint", ck["hub"], "--recipe", rec, "--out", ex,
             "--image-token-id", str(IMAGE_TOKEN), "--shard-bytes", "60000"])
    expect(r.returncode == 0, f"{name}: export hf exits 0: {r.stdout.strip()} {r.stderr.strip()[-400:]}")
    if r.returncode:
        return
    E = read_dir(ex)
    orig = {n: stored[n].to(torch.float32) for n in stored}
    expect(same_bits(E, orig), f"{name}: the export holds the original tensors under their hub names, bit for bit "
           f"(tied: no lm_head): {sorted(set(E) ^ set(orig))}")
    ecfg = json.load(open(os.path.join(ex, "config.json")))
    expect(ecfg["vision_feature_layer"] == layer, f"{name}: export's vision_feature_layer {ecfg['vision_feature_layer']}")
    tc = ecfg["text_config"]
    ok = (tc["model_type"] == lm["type"] and tc["num_key_value_heads"] == lm["hkv"] and
          tc["tie_word_embeddings"] == lm["tie"] and tc["rope_theta"] == THETA and
          (lm["type"] == "qwen2" or tc["attention_bias"] == lm["o_bias"]))
    if lm["llama3"]:
        f, lo, hi, L = lm["llama3"]
        rs = tc.get("rope_scaling") or {}
        ok = ok and rs.get("rope_type") == "llama3" and (rs.get("factor"), rs.get("low_freq_factor"),
                                                         rs.get("high_freq_factor"),
                                                         rs.get("original_max_position_embeddings")) == (f, lo, hi, L)
    else:
        ok = ok and "rope_scaling" not in tc
    expect(ok, f"{name}: export's text_config {tc}")
    back = os.path.join(work, f"ckpt_{name}_back")
    r = run([rrfp, "import", "llava", "--hf", ex, "--out", back])
    expect(r.returncode == 0 and recipe_keys(r.stdout) == keys, f"{name}: import of the export: {r.stderr.strip()[-300:]}")
    expect(r.returncode == 0 and same_bits(read_dir(back), mine), f"{name}: export then import equals the import, bit for bit")


if __name__ == "__main__":
    sys.exit(main())
