#!/usr/bin/env python3
"""import_serve.py — a published LLaVA asked as it is: import -> generate -> eval -> pack -> train -> export with
no model key written by hand and no id given by hand (runtime/train/trained.h).

The tiny LlavaForConditionalGeneration of tests/runtime/hf/import_llava.py (random weights, the same writer), its
vocabulary padded past a tokenizer trained here (with <s> and </s>, for vicuna_v1) and its
image_token_index that tokenizer's <image> id, under both namings of a saved LLaVA (llava-hf's hub names and
transformers 5's save_pretrained names). For each:
  - `rrfp-mm import llava` records what it learned in state.json: the model keys (the [model] keys it
    prints, at the values it prints), data.min_patches / max_patches, the <image> id and the source config;
  - `rrfp-mm generate` and `rrfp-mm eval` run on the import with a recipe of [data] keys only (shards packed
    with --template vicuna_v1 --image-preprocess llava): both were refused before ("an imported model ...
    does not resume one"); eval's right / wrong per record is generate's (answer == reference);
  - `rrfp-mm tensors ls` lists the import;
  - a recipe that sets a model key otherwise (model.text_width) is refused naming the key, by generate, eval,
    train.init_from and export;
  - train.init_from = the import trains 2 steps with that recipe (every tensor loaded), and generate on the
    run's checkpoint with the same recipe answers;
  - `rrfp-mm export hf --checkpoint IMPORT` with no --recipe and no --image-token-id (refused before: "needs
    --recipe") writes config.json with the import's image_token_index and vocabulary, and the source's
    tensors bit for bit.

Usage: import_serve.py RRFP_MM WORKDIR   (exit 0 = every check passed)"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import import_llava as il  # noqa: E402
from import_llama import FAILED, expect  # noqa: E402 (one list of failed checks)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def main():
    rrfp, work = sys.argv[1:3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    W = lambda *p: os.path.join(work, *p)  # noqa: E731
    r = run([rrfp, "demo-data", "--out", W("d"), "--samples", "24", "--heldout", "6", "--questions", "1"])
    assert r.returncode == 0, r.stderr
    r = run([rrfp, "tokenizer", "train", "--vocab", "280", "--manifest", W("d", "train.json"), "--special", "<s>",
             "--special", "</s>", "--out", W("tok.json"), "--quiet"])
    assert r.returncode == 0, r.stderr
    tok = json.load(open(W("tok.json")))
    image_id = [t["id"] for t in tok["added_tokens"] if t["content"] == "<image>"][0]
    info = run([rrfp, "tokenizer", "info", "--tokenizer", W("tok.json")]).stdout
    n_tok = int([l for l in info.splitlines() if l.startswith("vocab size:")][0].split(":")[1])
    # the model: its vocabulary padded past the tokenizer's (as llava-hf's 32064 for 32001 ids), <image> the
    # tokenizer's
    il.V, il.IMAGE_TOKEN = n_tok + 3, image_id
    weights = il.make_weights()
    P = ["--images", W("d", "images"), "--tokenizer", W("tok.json"), "--template", "vicuna_v1", "--image-preprocess",
         "llava", "--image-size", str(il.IMG), "--patch", str(il.PATCH), "--quiet"]
    for name, manifest in (("shards", "train.json"), ("eval-shards", "heldout.json")):
        r = run([rrfp, "pack", "--manifest", W("d", manifest), "--out", W(name)] + P)
        assert r.returncode == 0, r.stderr
    rec = W("data.ini")  # data keys only: every model key comes from the checkpoint
    with open(rec, "w") as f:
        f.write(f"[data]\nshards = {W('shards')}\ntokenizer = {W('tok.json')}\neval_shards = {W('eval-shards')}\n"
                f"microbatch_tokens = 512\nmicrobatches = 1\n[train]\nsteps = 2\nrun_dir = {W('run')}\n"
                f"checkpoint_every = 0\n[optim]\nwarmup = 1\n[runtime]\nthreads = 1\n")
    heldout = json.load(open(W("d", "heldout.json")))
    first = heldout[0]
    question = first["conversations"][0]["value"].replace("<image>", "").strip()
    for naming in ("hub", "tf5"):
        hf, ck = W("hf_" + naming), W("ck_" + naming)
        stored = il.write_hf(hf, weights, naming, cfg=il.make_config(naming))
        r = run([rrfp, "import", "llava", "--hf", hf, "--out", ck])
        expect(r.returncode == 0, f"{naming}: import llava: {r.stderr.strip()[-300:]}")
        if r.returncode:
            continue
        state = json.load(open(os.path.join(ck, "state.json")))
        printed = {}
        for line in r.stdout.splitlines():
            if " = " in line and not line.startswith(";"):
                k, v = line.split(" = ", 1)
                printed[k.strip()] = v.strip()
        keys = state.get("recipe", {})
        # every key import printed (but train.init_from) is recorded, at the value printed
        missing = [k for k in printed if k != "init_from" and not any(
            rk.endswith("." + k) and keys[rk] == printed[k] for rk in keys)]
        expect(keys and not missing and keys.get("model.vocab") == str(il.V) and keys.get("data.min_patches") == "9",
               f"{naming}: state.json records the printed keys at their values (missing or other: {missing})")
        expect(state.get("image_token_id") == image_id and state.get("hf_config", {}).get("model_type") == "llava",
               f"{naming}: state.json records image_token_id {state.get('image_token_id')} and the source config")

        # ---- zero-shot: generate one answer, score the held-out set ------------------------------------------
        G = ["--checkpoint", ck, "--max-new-tokens", "6"]
        r = run([rrfp, "generate", rec] + G + ["--image", W("d", "images", first["image"]), "--prompt", question])
        expect(r.returncode == 0 and r.stdout.strip() != "" and "prompt positions" in r.stderr,
               f"{naming}: generate on the import with a data-only recipe answers: {r.stderr.strip()[-300:]}")
        r = run([rrfp, "eval", rec, "--checkpoint", ck, "--predictions", W(f"zs_{naming}.jsonl")])
        expect(r.returncode == 0 and "greedy exact match" in r.stdout,
               f"{naming}: eval on the import with a data-only recipe scores it: {r.stderr.strip()[-300:]}")
        # runtime.precision = bf16 evaluates the import's weights (its compute copies rebuilt from what was read):
        # the held-out loss within 1% of fp32's (bf16 round-off; a random model's differs by > 20%)
        losses = {}
        for prec in ("fp32", "bf16"):
            rp = run([rrfp, "eval", rec, "--checkpoint", ck, "--set", "runtime.precision=" + prec])
            rows = [json.loads(l) for l in rp.stdout.splitlines() if l.startswith("{")]
            losses[prec] = rows[-1]["loss"] if rp.returncode == 0 and rows else None
        expect(None not in losses.values() and abs(losses["bf16"] - losses["fp32"]) <= 0.01 * abs(losses["fp32"]),
               f"{naming}: eval of the import in bf16 computes with its weights: held-out loss {losses}")
        r2 = run([rrfp, "generate", rec] + G + ["--manifest", W("d", "heldout.json"), "--images", W("d", "images"),
                                                "--out", W(f"ans_{naming}.jsonl")])
        expect(r2.returncode == 0, f"{naming}: generate --manifest on the import: {r2.stderr.strip()[-300:]}")
        if r.returncode == 0 and r2.returncode == 0:
            ev = {p["id"]: p for p in map(json.loads, open(W(f"zs_{naming}.jsonl")))}
            gen = {a["question_id"]: a["text"] for a in map(json.loads, open(W(f"ans_{naming}.jsonl")))}
            ref = {x["id"]: x["conversations"][1]["value"] for x in heldout}
            differ = [i for i in ref if ev[i]["correct"] != (gen[i] == ref[i])]
            expect(sorted(ev) == sorted(gen) == sorted(ref) and not differ,
                   f"{naming}: eval's right / wrong per record is generate's (answer == reference): differ {differ}")
        r = run([rrfp, "tensors", "ls", ck])
        expect(r.returncode == 0 and "text.embed.weight" in r.stdout, f"{naming}: tensors ls of the import")

        # ---- a recipe that disagrees on a model key ------------------------------------------------------------
        bad = ["--set", "model.text_width=64"]
        for what, cmd in (("generate", [rrfp, "generate", rec] + bad + G + ["--image", W("d", "images", first["image"]),
                                                                            "--prompt", "q"]),
                          ("eval", [rrfp, "eval", rec] + bad + ["--checkpoint", ck]),
                          ("train.init_from", [rrfp, "train", rec] + bad + ["--set", "train.init_from=" + ck,
                                                                           "--set", "train.run_dir=" + W("bad_run")])):
            r = run(cmd)
            expect(r.returncode != 0 and "model.text_width = 64, but" in r.stderr and "text_width = 48" in r.stderr,
                   f"{naming}: {what} refuses a recipe with another model.text_width, naming it: {r.stderr.strip()[-200:]}")
        with open(W("bad.ini"), "w") as f:
            f.write("[model]\ntext_layers = 3\n")
        r = run([rrfp, "export", "hf", "--checkpoint", ck, "--recipe", W("bad.ini"), "--out", W("bad_export")])
        expect(r.returncode == 1 and "model.text_layers = 3, but" in r.stderr and not os.path.exists(W("bad_export")),
               f"{naming}: export hf refuses a recipe with another model.text_layers, naming it: {r.stderr.strip()[-200:]}")

        # ---- fine-tune from the import with the same recipe, then ask the run's checkpoint ------------------------
        run_dir = W("run_" + naming)
        r = run([rrfp, "train", rec, "--set", "train.init_from=" + ck, "--set", "train.run_dir=" + run_dir])
        expect(r.returncode == 0 and "initialised 0 from model.seed" in r.stderr,
               f"{naming}: train.init_from = the import, data-only recipe, every tensor loaded: {r.stderr.strip()[-300:]}")
        r = run([rrfp, "generate", rec, "--set", "train.init_from=" + ck, "--set", "train.run_dir=" + run_dir,
                 "--checkpoint", "latest", "--max-new-tokens", "4", "--image", W("d", "images", first["image"]),
                 "--prompt", question])
        expect(r.returncode == 0 and "prompt positions" in r.stderr,
               f"{naming}: generate on the fine-tuned run's checkpoint with the same recipe: {r.stderr.strip()[-300:]}")
        run_state = os.path.join(run_dir, "checkpoints", "step-00000002", "state.json")
        d = json.load(open(run_state)).get("data", {}) if os.path.exists(run_state) else {}
        expect(d.get("template") == "vicuna_v1" and d.get("image_preprocess") == "llava" and d.get("image_size") == il.IMG
               and d.get("image_token_id") == image_id and len(d.get("tokenizer_hash", "")) == 16,
               f"{naming}: the run's checkpoint records its data: {d}")

        # the report: the zero-shot eval beside the fine-tuned one, both written into the run folder
        shutil.copy(W(f"zs_{naming}.jsonl"), os.path.join(run_dir, "zero-shot.jsonl"))
        r = run([rrfp, "eval", rec, "--set", "train.init_from=" + ck, "--set", "train.run_dir=" + run_dir,
                 "--checkpoint", "latest", "--predictions", os.path.join(run_dir, "predictions.jsonl")])
        expect(r.returncode == 0, f"{naming}: eval of the fine-tuned run: {r.stderr.strip()[-300:]}")
        r = run([rrfp, "report", run_dir])
        page = open(os.path.join(run_dir, "report.html")).read() if r.returncode == 0 else ""
        n_zs = sum(1 for _ in open(os.path.join(run_dir, "zero-shot.jsonl")))
        expect(r.returncode == 0 and f"Zero-shot (before fine-tuning, zero-shot.jsonl): greedy exact match on <b>{n_zs}</b>" in page
               and "right only after fine-tuning" in page and page.count('<p class="zs">zero-shot: ') == n_zs
               and "template vicuna_v1, image preprocessing llava (6 px)" in page,
               f"{naming}: report shows the zero-shot eval beside the fine-tuned one, and the training data's record: "
               f"{r.stderr.strip()[-300:]}")

        # ---- export with no recipe and no id -----------------------------------------------------------------
        ex = W("export_" + naming)
        r = run([rrfp, "export", "hf", "--checkpoint", ck, "--out", ex])
        expect(r.returncode == 0, f"{naming}: export hf --checkpoint IMPORT, no --recipe, no --image-token-id: "
               f"{r.stderr.strip()[-300:]}")
        if r.returncode == 0:
            cfg = json.load(open(os.path.join(ex, "config.json")))
            expect(cfg.get("image_token_index") == image_id and cfg["text_config"]["vocab_size"] == il.V,
                   f"{naming}: the export's config.json: image_token_index {cfg.get('image_token_index')}, vocab "
                   f"{cfg['text_config']['vocab_size']}")
            back = il.read_dir(ex)
            same = set(back) == set(stored) and all(torch.equal(back[k].to(torch.float64), stored[k].to(torch.float64))
                                                    for k in stored)
            expect(same, f"{naming}: the export holds the source's tensors bit for bit")
    # ---- an import whose source lacks never-used tensors (post_layernorm): eval and generate read it ----------
    lean = {k: v for k, v in weights.items() if "post_layernorm" not in k}
    il.write_hf(W("hf_lean"), lean, "hub", cfg=il.make_config("hub"))
    r = run([rrfp, "import", "llava", "--hf", W("hf_lean"), "--out", W("ck_lean")])
    state = json.load(open(W("ck_lean", "state.json"))) if r.returncode == 0 else {}
    expect(sorted(state.get("absent", [])) == ["vision.post_ln.bias", "vision.post_ln.weight"],
           f"an import without post_layernorm records it absent: {state.get('absent')} {r.stderr.strip()[-200:]}")
    r = run([rrfp, "generate", rec, "--checkpoint", W("ck_lean"), "--max-new-tokens", "2", "--image",
             W("d", "images", first["image"]), "--prompt", question])
    expect(r.returncode == 0, f"generate reads an import with absent never-used tensors: {r.stderr.strip()[-300:]}")
    # ---- state.json records are hostile input: checked field by field, naming the file and the field ----------
    for what, edit, want in (
            ("an unknown recipe key", lambda st: st["recipe"].update({"model.no_such_key": "1"}), "\"model.no_such_key\""),
            ("a recipe value the key refuses", lambda st: st["recipe"].update({"model.text_layers": "0"}), "model.text_layers"),
            ("a train key in the recipe", lambda st: st["recipe"].update({"train.steps": "5"}), "\"train.steps\""),
            ("an image_token_id that is not an id", lambda st: st.update(image_token_id=-3), "\"image_token_id\""),
            ("a data record's unknown template", lambda st: st.update(data={"template": "vicuna"}), "\"template\""),
            ("absent that is not a list", lambda st: st.update(absent="x"), "\"absent\"")):
        bad = W("ck_bad")
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(W("ck_hub"), bad)
        st = json.load(open(os.path.join(bad, "state.json")))
        edit(st)
        json.dump(st, open(os.path.join(bad, "state.json"), "w"))
        r = run([rrfp, "generate", rec, "--checkpoint", bad, "--max-new-tokens", "2", "--image",
                 W("d", "images", first["image"]), "--prompt", question])
        expect(r.returncode == 1 and os.path.join(bad, "state.json") in r.stderr and want in r.stderr,
               f"state.json with {what}: refused naming the file and {want}: {r.stderr.strip()[-200:]}")
    if FAILED:
        print(f"import serve: {len(FAILED)} check(s) failed")
        return 1
    print("import serve: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
