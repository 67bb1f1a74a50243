#!/usr/bin/env python3
"""export_hf_files.py — the Hugging Face files around a LLaVA's weights: what `rrfp-mm import llava` keeps and what
`rrfp-mm export hf` writes besides the weights, read back by an independent reader (Python's json) against the
field names transformers documents (LlavaConfig, LlavaImageProcessor / CLIPImageProcessor, LlavaProcessor,
PreTrainedTokenizerFast's tokenizer_config.json, GenerationConfig).

A small LLaVA in llava-hf's layout (tests/runtime/hf/import_llava.py's weights) with llava-hf's companion files (a Llama-2-style
tokenizer.json with <image> and <pad> added by `rrfp-mm tokenizer add-special`, tokenizer_config.json,
special_tokens_map.json, preprocessor_config.json, processor_config.json, generation_config.json) and a config.json
holding keys the import does not read (max_position_embeddings 512, pad_token_id, projection_dim, ...):
  - import llava copies each companion file, byte for byte, into CKPT/hf/ and prints data.tokenizer; a folder
    without them is said to have none; a config.json without text_config is refused, naming the key;
  - export hf of the import: config.json equals the imported one key by key (every key, nested; torch_dtype says
    the files' float32); the tokenizer.json is the imported one; tokenizer_config.json has the chat template of
    --template, the special tokens and an added_tokens_decoder in step with tokenizer.json's ids; generation_config
    has the template's stop token first among the eos ids; preprocessor_config.json is the run's preprocessing
    read from its shards (pack --image-preprocess llava: LlavaImageProcessor with do_pad, the side, CLIP mean / std;
    the default preprocessing: CLIPImageProcessor, mean = std = 0.5) over the imported file; processor_config.json
    is LlavaProcessor's;
  - the imported files are found through train.init_from for a checkpoint that has none of its own; without any,
    config.json is the model's own (max_position_embeddings 4096) and the log says so;
  - one <image> id: a tokenizer listing <image> twice with two ids is refused by export (and by every command
    loading it), naming the token; an --image-token-id other than the tokenizer's <image> is refused.
Mode --node (Hugging Face's own libraries through Node, tests/support/node: exit 77 without node or the packages): the
exported tokenizer.json loaded by `tokenizers` gives the engine's ids on the corpus and on every rendered
prompt; each template's exported chat template rendered by @huggingface/jinja (transformers.js's Jinja) gives the
prompt text pack builds (tests/support/fixtures/chat_templates_expected.json, LLaVA's conversation.py), with and without the
generation prompt.

Usage: export_hf_files.py [--node] RRFP_MM WORKDIR   (exit 0 = every check passed)"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import import_llava as il  # noqa: E402
from import_llama import FAILED, expect  # noqa: E402 (one list of failed checks)
from hf_tokenizer_json import llama2_tokenizer, write as write_tok  # noqa: E402

SRC = os.path.dirname(os.path.abspath(__file__))
V = 128  # the LM's rows: the tokenizer's ids and free rows past them (as llava-hf's 32064 for 32002 ids)
TEMPLATE_TOKENS = ["<image>", "<pad>", "<|endoftext|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>", "<|im_start|>", "<|im_end|>"]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def make_hf(rrfp, work, d, companions=True, cfg_edit=None):
    """A small llava-hf-like folder. Returns (config dict, tokenizer.json path, ids of the added tokens)."""
    il.V = V
    cfg = il.make_config("hub")
    cfg.update({"_name_or_path": "llava-hf/tiny", "ignore_index": -100, "pad_token_id": None, "torch_dtype": "float16",
                "transformers_version": "4.44.0"})
    cfg["text_config"].update({"max_position_embeddings": 512, "_name_or_path": "lmsys/tiny-vicuna",
                               "architectures": ["LlamaForCausalLM"], "torch_dtype": "float16"})
    cfg["vision_config"].update({"projection_dim": 768, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5})
    base = os.path.join(work, "tok_base.json")
    write_tok(base, llama2_tokenizer())
    tok = os.path.join(work, "tok_added.json")
    if not os.path.exists(tok):
        r = run([rrfp, "tokenizer", "add-special", "--tokenizer", base, "--add", ",".join(TEMPLATE_TOKENS), "--out", tok])
        expect(r.returncode == 0, f"tokenizer add-special: {r.stdout.strip()} {r.stderr.strip()[-300:]}")
    ids = {a["content"]: a["id"] for a in json.load(open(tok))["added_tokens"]}
    cfg["image_token_index"] = ids["<image>"]
    cfg["pad_token_id"] = ids["<pad>"]
    if cfg_edit:
        cfg_edit(cfg)
    il.write_hf(d, il.make_weights(), "hub", cfg=cfg)
    if companions:
        shutil.copy(tok, os.path.join(d, "tokenizer.json"))
        dec = {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for c, i in ids.items() if c in ("<unk>", "<s>", "</s>", "<image>", "<pad>")}
        json.dump({"add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": dec, "bos_token": "<s>",
                   "clean_up_tokenization_spaces": False, "eos_token": "</s>", "legacy": False, "model_max_length": 1000000,
                   "pad_token": "<pad>", "padding_side": "left", "processor_class": "LlavaProcessor",
                   "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False},
                  open(os.path.join(d, "tokenizer_config.json"), "w"), indent=2)
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"},
                  open(os.path.join(d, "special_tokens_map.json"), "w"), indent=2)
        json.dump({"crop_size": {"height": 336, "width": 336}, "do_center_crop": True, "do_convert_rgb": True,
                   "do_normalize": True, "do_rescale": True, "do_resize": True,
                   "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type": "CLIPImageProcessor",
                   "image_std": [0.26862954, 0.26130258, 0.27577711], "processor_class": "LlavaProcessor", "resample": 3,
                   "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 336}},
                  open(os.path.join(d, "preprocessor_config.json"), "w"), indent=2)
        json.dump({"image_token": "<image>", "num_additional_image_tokens": 1, "patch_size": 14,
                   "processor_class": "LlavaProcessor", "vision_feature_select_strategy": "default"},
                  open(os.path.join(d, "processor_config.json"), "w"), indent=2)
        json.dump({"_from_model_config": True, "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"],
                   "pad_token_id": ids["<pad>"], "transformers_version": "4.44.0"},
                  open(os.path.join(d, "generation_config.json"), "w"), indent=2)
    return cfg, tok, ids


def walk(a, b, path=""):
    """The key paths where b differs from a or lacks a's key (a's keys only)."""
    bad = []
    for k, v in a.items():
        p = f"{path}.{k}" if path else k
        if k not in b:
            bad.append(f"{p} missing")
        elif isinstance(v, dict) and isinstance(b[k], dict):
            bad += walk(v, b[k], p)
        elif v != b[k]:
            bad.append(f"{p}: {v!r} -> {b[k]!r}")
    return bad


def load(d, f):
    """A JSON file of the export ({} when it is not there: the checks on it then fail by name)."""
    p = os.path.join(d, f)
    return json.load(open(p)) if os.path.exists(p) else {}


def pack(rrfp, work, tok, name, prep):
    """Two records with a JPEG each (one wide, one tall), packed with vicuna_v1 under preprocessing prep."""
    from PIL import Image
    imgs = os.path.join(work, "images")
    os.makedirs(imgs, exist_ok=True)
    Image.new("RGB", (20, 10), (200, 30, 40)).save(os.path.join(imgs, "wide.jpg"))
    Image.new("RGB", (8, 24), (20, 130, 240)).save(os.path.join(imgs, "tall.jpg"))
    man = os.path.join(work, "manifest.json")
    json.dump([{"id": "a", "image": "wide.jpg", "conversations": [{"from": "human", "value": "<image>\nColour?"},
                                                                  {"from": "gpt", "value": "red"}]},
               {"id": "b", "image": "tall.jpg", "conversations": [{"from": "human", "value": "What is it? <image>"},
                                                                  {"from": "gpt", "value": "a blue bar"}]}], open(man, "w"))
    out = os.path.join(work, name)
    cmd = [rrfp, "pack", "--manifest", man, "--images", imgs, "--tokenizer", tok, "--template", "vicuna_v1", "--out", out,
           "--patch", str(il.PATCH)]
    if prep == "llava":
        cmd += ["--image-preprocess", "llava", "--image-size", str(il.IMG)]
    else:
        cmd += ["--min-patches", "4", "--max-patches", "16"]
    r = run(cmd)
    expect(r.returncode == 0, f"pack ({prep}): {r.stderr.strip()[-300:]}")
    return out


def recipe(work, name, keys, tok, shards, init_from=None):
    p = os.path.join(work, name)
    with open(p, "w") as f:
        f.write("[model]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()))
        f.write(f"[data]\ntokenizer = {tok}\nshards = {shards}\n")
        if init_from:
            f.write(f"[train]\ninit_from = {init_from}\n")
    return p


def export(rrfp, ck, rec, out, *extra):
    return run([rrfp, "export", "hf", "--checkpoint", ck, "--recipe", rec, "--out", out] + list(extra))


def import_llava(rrfp, hf, ck):
    """`rrfp-mm import llava` of hf into ck, checked to exit 0: (the [model] keys it printed, its stdout), or (None, None)."""
    r = run([rrfp, "import", "llava", "--hf", hf, "--out", ck])
    expect(r.returncode == 0, f"import llava: {r.stderr.strip()[-300:]}")
    return (None, None) if r.returncode else (il.recipe_keys(r.stdout), r.stdout)


def main(rrfp, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hf = os.path.join(work, "hf")
    cfg, tok_src, ids = make_hf(rrfp, work, hf)

    # ---- import llava keeps the files ---------------------------------------------------------------------
    ck = os.path.join(work, "ckpt")
    keys, out = import_llava(rrfp, hf, ck)
    if keys is None:
        return 1
    kept = os.path.join(ck, "hf")
    files = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "preprocessor_config.json", "processor_config.json", "generation_config.json"]
    have = sorted(os.listdir(kept)) if os.path.isdir(kept) else []
    expect(have == sorted(files) and all(open(os.path.join(hf, f), "rb").read() == open(os.path.join(kept, f), "rb").read()
                                         for f in files),
           f"import llava keeps the folder's files byte for byte in CKPT/hf/: {have or 'no folder'}")
    expect(f"tokenizer = {kept}/tokenizer.json" in out and "kept the Hugging Face folder's files" in out,
           "import llava names the kept files and prints data.tokenizer")
    bare = os.path.join(work, "hf_bare")
    make_hf(rrfp, work, bare, companions=False)
    r = run([rrfp, "import", "llava", "--hf", bare, "--out", os.path.join(work, "ckpt_bare")])
    expect(r.returncode == 0 and "has no tokenizer.json" in r.stdout and "has no preprocessor_config.json" in r.stdout and
           not os.path.exists(os.path.join(work, "ckpt_bare", "hf", "tokenizer.json")),
           f"import llava of a folder without a tokenizer says so: {r.stdout.strip()[-300:]}")
    notext = os.path.join(work, "hf_notext")
    make_hf(rrfp, work, notext, companions=False, cfg_edit=lambda c: c.pop("text_config"))
    r = run([rrfp, "import", "llava", "--hf", notext, "--out", os.path.join(work, "ckpt_notext")])
    expect(r.returncode == 1 and "no text_config" in r.stderr and "rms_norm_eps" in r.stderr and
           not os.path.exists(os.path.join(work, "ckpt_notext")),
           f"import llava refuses a config.json without text_config, naming the defaults it would take: {r.stderr.strip()[-300:]}")

    # ---- export hf ----------------------------------------------------------------------------------------
    shards = pack(rrfp, work, os.path.join(kept, "tokenizer.json"), "shards_llava", "llava")
    rec = recipe(work, "r.ini", keys, os.path.join(kept, "tokenizer.json"), shards)
    ex = os.path.join(work, "export")
    r = export(rrfp, ck, rec, ex, "--template", "vicuna_v1")
    expect(r.returncode == 0, f"export hf --template vicuna_v1: {r.stdout.strip()} {r.stderr.strip()[-400:]}")
    if r.returncode:
        return 1
    print(r.stderr.strip())
    ecfg = load(ex, "config.json")
    diff = walk({k: v for k, v in cfg.items() if k != "torch_dtype"}, ecfg)
    expect(not diff, f"config.json: every key of the imported config as it was: {diff}")
    expect(ecfg["text_config"]["max_position_embeddings"] == 512 and ecfg["torch_dtype"] == "float32",
           f"max_position_embeddings 512 kept (not 4096), torch_dtype the files' float32: "
           f"{ecfg['text_config']['max_position_embeddings']}, {ecfg['torch_dtype']}")
    expect(open(os.path.join(ex, "tokenizer.json"), "rb").read() == open(tok_src, "rb").read(),
           "tokenizer.json: the imported one")
    expect(sorted(f for f in os.listdir(ex) if not f.startswith("model")) ==
           ["chat_template.json", "config.json", "generation_config.json", "preprocessor_config.json",
            "processor_config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"],
           f"the export's files besides the weights: {sorted(os.listdir(ex))}")
    tj = json.load(open(tok_src))
    tc = load(ex, "tokenizer_config.json")
    dec = tc.get("added_tokens_decoder", {})
    expect(all(dec.get(str(a["id"]), {}).get("content") == a["content"] for a in tj["added_tokens"]) and
           tc.get("bos_token") == "<s>" and tc.get("eos_token") == "</s>" and tc.get("pad_token") == "<pad>" and
           tc.get("unk_token") == "<unk>" and tc.get("model_max_length") == 1000000 and
           tc.get("tokenizer_class") == "LlamaTokenizer" and isinstance(tc.get("chat_template"), str),
           f"tokenizer_config.json: the imported one with every added token of tokenizer.json, its special tokens and "
           f"the chat template: {sorted(tc)}")
    expect(load(ex, "chat_template.json").get("chat_template") == tc.get("chat_template"),
           "chat_template.json: the same template")
    expect(load(ex, "special_tokens_map.json") == load(hf, "special_tokens_map.json"), "special_tokens_map.json kept")
    gen = load(ex, "generation_config.json")
    expect(gen.get("bos_token_id") == ids["<s>"] and gen.get("eos_token_id") == ids["</s>"] and
           gen.get("pad_token_id") == ids["<pad>"] and gen.get("transformers_version") == "4.44.0",
           f"generation_config.json: bos <s>, eos </s> (vicuna_v1's stop), pad <pad>: {gen}")
    pp = load(ex, "preprocessor_config.json")
    want = {"image_processor_type": "LlavaImageProcessor", "do_pad": True, "do_resize": True,
            "size": {"shortest_edge": il.IMG}, "resample": 3, "do_center_crop": True,
            "crop_size": {"height": il.IMG, "width": il.IMG}, "do_rescale": True, "do_normalize": True,
            "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
            "do_convert_rgb": True, "processor_class": "LlavaProcessor"}
    expect(all(pp.get(k) == v for k, v in want.items()) and abs(pp.get("rescale_factor", 0) - 1 / 255) < 1e-12,
           f"preprocessor_config.json: the shards' LLaVA preprocessing (pad to square, side {il.IMG}, bicubic, CLIP "
           f"mean / std): {pp}")
    pc = load(ex, "processor_config.json")
    expect(pc == {"image_token": "<image>", "num_additional_image_tokens": 1, "patch_size": il.PATCH,
                  "processor_class": "LlavaProcessor", "vision_feature_select_strategy": "default"},
           f"processor_config.json: LlavaProcessor's, with the model's patch: {pc}")

    # the default preprocessing: a CLIPImageProcessor at the tower's size, x / 127.5 - 1
    smart = pack(rrfp, work, os.path.join(kept, "tokenizer.json"), "shards_smart", "smart")
    rec_s = recipe(work, "r_smart.ini", keys, os.path.join(kept, "tokenizer.json"), smart)
    r = export(rrfp, ck, rec_s, os.path.join(work, "export_smart"))
    pp = load(os.path.join(work, "export_smart"), "preprocessor_config.json") if r.returncode == 0 else {}
    expect(r.returncode == 0 and pp.get("image_processor_type") == "CLIPImageProcessor" and not pp.get("do_pad") and
           pp.get("size") == {"height": il.IMG, "width": il.IMG} and pp.get("image_mean") == [0.5] * 3 and
           pp.get("image_std") == [0.5] * 3 and "smart_resize" in r.stderr,
           f"the default preprocessing: CLIPImageProcessor at {il.IMG}, mean = std = 0.5, the difference logged: {pp} "
           f"{r.stderr.strip()[-300:]}")

    # found through train.init_from; without it, the model's own config (and the log says so)
    ck2 = os.path.join(work, "ckpt_plain")
    shutil.copytree(ck, ck2)
    shutil.rmtree(os.path.join(ck2, "hf"))
    r = export(rrfp, ck2, recipe(work, "r_init.ini", keys, tok_src, shards, init_from=ck), os.path.join(work, "export_init"))
    expect(r.returncode == 0 and not walk({k: v for k, v in cfg.items() if k != "torch_dtype"},
                                          load(os.path.join(work, "export_init"), "config.json")),
           f"the imported config found through train.init_from: {r.stderr.strip()[-300:]}")
    r = export(rrfp, ck2, recipe(work, "r_none.ini", keys, tok_src, shards), os.path.join(work, "export_none"))
    expect(r.returncode == 0 and "no imported Hugging Face config.json" in r.stderr and
           load(os.path.join(work, "export_none"), "config.json")["text_config"]["max_position_embeddings"] == 4096,
           f"without imported files: the model's own config.json, said on the log: {r.stderr.strip()[-300:]}")

    # one <image> id
    dup = json.load(open(tok_src))
    dup["added_tokens"].append(dict(next(a for a in dup["added_tokens"] if a["content"] == "<image>"), id=5))
    dupf = os.path.join(work, "tok_dup.json")
    json.dump(dup, open(dupf, "w"))
    r = export(rrfp, ck, rec, os.path.join(work, "export_dup"), "--tokenizer", dupf)
    expect(r.returncode == 1 and '"<image>", with ids' in r.stderr and not os.path.exists(os.path.join(work, "export_dup")),
           f"export refuses a tokenizer listing <image> twice with two ids, naming it: {r.stderr.strip()[-300:]}")
    r = export(rrfp, ck, rec, os.path.join(work, "export_id"), "--image-token-id", str(ids["<image>"] + 1))
    expect(r.returncode == 1 and "one <image>, one id" in r.stderr and not os.path.exists(os.path.join(work, "export_id")),
           f"export refuses an --image-token-id other than the tokenizer's <image>: {r.stderr.strip()[-300:]}")
    # --add-image-token with a tokenizer of fewer ids than the model's rows: Hugging Face would give the <image>
    # written at id V the tokenizer's next id instead, so config.json's image_token_index would not be its id
    r = export(rrfp, ck, rec, os.path.join(work, "export_grow"), "--add-image-token", "--tokenizer",
               os.path.join(work, "tok_base.json"))
    expect(r.returncode == 1 and f'"<image>" written with id {V} loads as id 106' in r.stderr and
           not os.path.exists(os.path.join(work, "export_grow")),
           f"--add-image-token refuses a tokenizer that would give <image> another id: {r.stderr.strip()[-300:]}")
    # a run's checkpoint records the chat template its shards were packed with: export takes it without
    # --template (the same chat template as --template vicuna_v1 gave) and refuses another
    rtrain = recipe(work, "train.ini", keys, os.path.join(kept, "tokenizer.json"), shards, init_from=ck)
    rund = os.path.join(work, "run_tmpl")
    r = run([rrfp, "train", rtrain, "--set", "train.steps=1", "--set", "optim.warmup=0", "--set", "data.microbatches=1",
             "--set", f"train.run_dir={rund}"])
    expect(r.returncode == 0, f"a one-step run from the import: {r.stderr.strip()[-300:]}")
    rck = os.path.join(rund, "checkpoints", "step-00000001")
    ex_auto = os.path.join(work, "export_auto_tmpl")
    r = export(rrfp, rck, rtrain, ex_auto)
    expect(r.returncode == 0 and "chat template vicuna_v1 (from" in r.stderr and
           load(ex_auto, "chat_template.json").get("chat_template") == load(ex, "chat_template.json").get("chat_template"),
           f"export of a run takes the chat template its data was packed with: {r.stderr.strip()[-300:]}")
    r = export(rrfp, rck, rtrain, os.path.join(work, "export_other_tmpl"), "--template", "chatml")
    expect(r.returncode == 1 and "--template chatml, but" in r.stderr and "vicuna_v1" in r.stderr and
           not os.path.exists(os.path.join(work, "export_other_tmpl")),
           f"export refuses a --template other than the data's: {r.stderr.strip()[-300:]}")
    r = export(rrfp, ck, rec, os.path.join(work, "export_badtmpl"), "--template", "vicuna")
    expect(r.returncode == 1 and "unknown chat template" in r.stderr, f"an unknown --template: {r.stderr.strip()[-200:]}")
    return 1 if FAILED else 0


# ---- --node: Hugging Face's tokenizers and Jinja --------------------------------------------------------------

def node_ready(work):
    nd = os.path.join(SRC, "..", "..", "support", "node")
    if not shutil.which("node") or not shutil.which("npm"):
        print("SKIP: node/npm not installed (scripts/deps.sh installs them)")
        return None
    if not all(os.path.isdir(os.path.join(nd, "node_modules", p)) for p in ("tokenizers", "@huggingface/jinja")):
        r = run(["npm", "ci", "--no-audit", "--no-fund"], cwd=nd, timeout=240)
        if r.returncode:
            print("SKIP: npm ci failed (registry unreachable?): " + r.stderr.strip()[-300:])
            return None
    r = run(["node", "-e", "require('tokenizers'); require('@huggingface/jinja')"], cwd=nd)
    if r.returncode:
        print("SKIP: the node packages do not load here: " + r.stderr.strip()[-300:])
        return None
    return nd


def messages_of(conv):
    """LLaVA turns as chat messages: a human turn with one <image> as [image, text] parts (the image first, as
    LLaVA's preprocess_multimodal moves it), others as a string."""
    out = []
    for i, t in enumerate(conv):
        role = "user" if t["from"] in ("human", "user") else "assistant"
        if i == 0 and role == "assistant":
            continue
        v = t["value"]
        if role == "user" and v.count("<image>") == 1 and v.replace("<image>", "").strip():
            out.append({"role": role, "content": [{"type": "image"}, {"type": "text", "text": v.replace("<image>", "").strip()}]})
        else:
            out.append({"role": role, "content": v})
    return out


def main_node(rrfp, work):
    nd = node_ready(work)
    if not nd:
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hf = os.path.join(work, "hf")
    make_hf(rrfp, work, hf)
    ck = os.path.join(work, "ckpt")
    keys, _ = import_llava(rrfp, hf, ck)
    if keys is None:
        return 1
    tok = os.path.join(ck, "hf", "tokenizer.json")
    rec = recipe(work, "r.ini", keys, tok, os.path.join(work, "no-shards"))
    cases = json.load(open(os.path.join(SRC, "..", "..", "support", "fixtures", "chat_templates_expected.json")))
    # the default template's text (data/manifest.h), which LLaVA has no code for
    rrfp_conv = [{"from": "human", "value": "<image>\nWhat colour is the square?"}, {"from": "gpt", "value": "red"},
                 {"from": "human", "value": "How many circles are there?"}, {"from": "gpt", "value": "two"}]
    cases.append({"template": "rrfp", "conversations": rrfp_conv,
                  "text": "USER: <image>\nWhat colour is the square? ASSISTANT: red<|endoftext|>\nUSER: How many circles "
                          "are there? ASSISTANT: two<|endoftext|>", "supervised": [" red<|endoftext|>"]})
    jobs, texts = [], []
    for tmpl in ("rrfp", "vicuna_v1", "llama_3", "chatml", "plain"):
        ex = os.path.join(work, "export_" + tmpl)
        r = export(rrfp, ck, rec, ex, "--template", tmpl)
        expect(r.returncode == 0, f"export hf --template {tmpl}: {r.stderr.strip()[-300:]}")
        if r.returncode:
            continue
        jinja = load(ex, "tokenizer_config.json")["chat_template"]
        bos = "<s>" if tmpl in ("vicuna_v1", "plain") else ""
        for c in (c for c in cases if c["template"] == tmpl):
            msgs = messages_of(c["conversations"])
            full = bos + c["text"]
            prompt = full[:full.index(c["supervised"][0])]
            jobs.append({"template": jinja, "messages": msgs, "add_generation_prompt": False, "want": full, "tmpl": tmpl})
            jobs.append({"template": jinja, "messages": msgs[:1], "add_generation_prompt": True, "want": prompt,
                         "tmpl": tmpl + " (generation prompt)"})
            texts.append(full)
    jf = os.path.join(work, "jobs.json")
    json.dump(jobs, open(jf, "w"))
    r = run(["node", os.path.join(nd, "render_chat.js"), jf], cwd=nd)
    expect(r.returncode == 0, f"@huggingface/jinja renders every exported template: {r.stderr.strip()[-300:]}")
    if r.returncode == 0:
        got = json.loads(r.stdout)
        for j, g in zip(jobs, got):
            expect(g == j["want"], f"{j['tmpl']}: the exported chat template renders pack's prompt" +
                   ("" if g == j["want"] else f": {g!r} vs {j['want']!r}"))
        expect(len(got) == len(jobs) and len({j["tmpl"] for j in jobs}) == 10, f"{len(got)} renderings, every template")
    # the exported tokenizer.json in Hugging Face's tokenizers: the engine's ids on the prompts and the corpus
    extok = os.path.join(work, "export_vicuna_v1", "tokenizer.json")
    lines = [ln for ln in open(os.path.join(SRC, "..", "..", "support", "fixtures", "tokenizer_corpus.txt"), encoding="utf-8").read().split("\n")
             if ln][:200] + ["<image>\nWhat is it?</s><s> a <pad>b<|im_end|>"]
    tf = os.path.join(work, "texts.json")
    json.dump(texts + lines, open(tf, "w"))
    h = run(["node", os.path.join(nd, "encode_texts.js"), extok, tf], cwd=nd)
    expect(h.returncode == 0, f"tokenizers loads the exported tokenizer.json: {h.stderr.strip()[-300:]}")
    if h.returncode == 0:
        hf_ids = json.loads(h.stdout)
        bad = []
        for i, t in enumerate(texts + lines):
            f = os.path.join(work, "text.txt")
            open(f, "w", encoding="utf-8").write(t)
            o = run([rrfp, "tokenizer", "encode", "--tokenizer", extok, "--file", f])
            if o.returncode or [int(x) for x in o.stdout.split()] != hf_ids[i]:
                bad.append(f"{t[:60]!r}: HF {hf_ids[i][:20]} vs ours {o.stdout.split()[:20]} {o.stderr.strip()[-200:]}")
        expect(not bad, f"the exported tokenizer.json: Hugging Face's ids equal the engine's on {len(texts)} prompts and "
                        f"{len(lines)} corpus lines{': ' + bad[0] if bad else ''}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    a = sys.argv[1:]
    rc = main_node(*a[1:3]) if a and a[0] == "--node" else main(*a[:2])
    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
    sys.exit(rc)
