#!/usr/bin/env python3
"""hostile_readers.py — crafted inputs of readers the other hostile tests do not reach, each a case that once hung,
crashed or was misreported (docs/reliability.md "What is checked"):
  - a tokenizer.json of 100,000 added tokens loads in well under the timeout and encodes each to its id (loading
    was quadratic in them: 14 s for 40,000, hours for a million, under the 256 MiB cap), and encodes a text of
    100,000 '<' at once (each '<' tried every token starting with it); `add-special` of 10,000 tokens likewise;
  - `import lora` onto a base too small for the model names the model's base parameter count (it said 0);
  - `report` of a run whose steps or losses are too close for their magnitude (1e17 and 1e17 + 32), or span past the
    largest double, writes its page at once (its tick loop added nothing and drew until memory ran out); an empty
    zero-shot.jsonl beside predictions.jsonl is 0 questions;
  - `generate --resume` refuses an answers line with a NUL byte or a second value after its object (was: read in
    part, the rest ignored).
Each command runs under a timeout; a refusal must exit 1..125 naming the file, with no sanitizer report (the
sanitizer build runs this same script) and no partial output.

Usage: hostile_readers.py RRFP_MM SRC_DIR WORK_DIR [all]   (exit 0 = every case passed)"""
import json
import os
import re
import shutil
import subprocess
import sys

EXE, SRC, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
sys.path.insert(0, os.path.join(SRC, "tests", "support", "util"))
from hostile_lib import COUNT, FAILED, note  # noqa: E402
import hostile_lib  # noqa: E402


def run(args, timeout=60):
    env = hostile_lib.sanitizer_env(SRC)
    if args[1] == "tokenizer":
        # no Open MPI in these: the fast unwinder (tests/asan/asan.cmake gives this test the slow one, a DWARF unwind
        # per malloc, for the commands that start Open MPI; the 100,000 tokens' JSON would take minutes with it)
        env["ASAN_OPTIONS"] = env["ASAN_OPTIONS"].replace("fast_unwind_on_malloc=0", "fast_unwind_on_malloc=1")
    try:
        p = subprocess.run(args, capture_output=True, timeout=timeout, env=env, cwd=WORK)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return -999, "", "timed out after %d s" % timeout


def refused(name, args, must, outs=(), timeout=60):
    return hostile_lib.refused_run(name, WORK, lambda: run(args, timeout), must, outs)


def works(name, args, expect_out=None, timeout=60):
    return hostile_lib.works_run(name, lambda: run(args, timeout), expect_out)


def tokenizer_cases():
    tok = os.path.join(WORK, "tok.json")
    works("tokenizer train (the base of the cases)", [EXE, "tokenizer", "train", "--vocab", "300", "--manifest",
          os.path.join(SRC, "tests", "support", "fixtures", "tokenizer_manifest.json"), "--out", tok, "--quiet"])
    j = json.load(open(tok))
    top = max(max(j["model"]["vocab"].values()), max(a["id"] for a in j["added_tokens"]))
    n = 100000
    j["added_tokens"] += [dict(j["added_tokens"][0], id=top + 1 + i, content="<t%d>" % i) for i in range(n)]
    json.dump(j, open(os.path.join(WORK, "tok_many.json"), "w"))
    # 30 s: about 0.3 s of work (2 s under the sanitizers); the quadratic load took minutes
    works("tokenizer info: %d added tokens" % n, [EXE, "tokenizer", "info", "--tokenizer", "tok_many.json"],
          "added tokens: %d" % len(j["added_tokens"]), timeout=30)
    want = "%d %d %d" % (top + 1 + 5, top + 1 + 99999, top + 1 + 10)
    out = works("tokenizer encode: %d added tokens" % n, [EXE, "tokenizer", "encode", "--tokenizer", "tok_many.json",
                "--text", "<t5><t99999><t10>"], timeout=30)
    note(out.strip() == want, "tokenizer encode of 3 added tokens among %d: got '%s', want '%s'" % (n, out.strip(), want))
    # a text of 100,000 '<': each position tries the added tokens of its first byte (was: every one of the 100,000, 2 ms
    # a '<'; now a lookup per length they have)
    open(os.path.join(WORK, "lt.txt"), "w").write("<x " * 100000)
    works("tokenizer encode: 100000 '<' among %d added tokens" % n, [EXE, "tokenizer", "encode", "--tokenizer",
          "tok_many.json", "--file", "lt.txt", "--count"], "300000", timeout=30)
    add = ",".join("<u%d>" % i for i in range(10000))
    works("tokenizer add-special: 10000 tokens", [EXE, "tokenizer", "add-special", "--tokenizer", "tok.json", "--add", add,
          "--out", "tok_added.json"], timeout=30)


def lora_cases():
    # the fuzz seed's Llama folder (config.json, then model.safetensors), imported as an LM-only base
    parts = open(os.path.join(SRC, "tests", "fuzz", "seeds", "import", "llama_single"), "rb").read().split(b"\n--8<--\n")
    hf, ad = os.path.join(WORK, "hf"), os.path.join(WORK, "adapter")
    os.makedirs(hf)
    open(os.path.join(hf, "config.json"), "wb").write(parts[0])
    open(os.path.join(hf, "model.safetensors"), "wb").write(parts[2])
    works("import llama (the base)", [EXE, "import", "llama", "--hf", "hf", "--out", "base"], "imported 12 tensors")
    os.makedirs(ad)
    json.dump({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "bias": "none"},
              open(os.path.join(ad, "adapter_config.json"), "w"))
    hdr = {}
    at = 0
    for name, shape in [("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", [2, 8]),
                        ("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", [8, 2])]:
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + 64]}
        at += 64
    h = json.dumps(hdr).encode()
    h += b" " * ((-len(h)) % 8)
    open(os.path.join(ad, "adapter_model.safetensors"), "wb").write(len(h).to_bytes(8, "little") + h + bytes(at))
    # the model has a vision tower the LM-only import does not hold: refused, naming how many values it needs
    err = refused("import lora onto a base too small for the model", [EXE, "import", "lora", "--hf", "adapter", "--base",
                  "base", "--out", "lora_out"], ["base", "base parameters", "5472 bytes"], outs=["lora_out"])
    m = re.search(r"the model has (\d+) base parameters", err)
    note(m is not None and int(m.group(1)) > 5472 // 2,
         "import lora: the refusal names a base parameter count above what 5472 bytes hold: %s" % err.strip()[-300:])


def report_cases():
    far = {"steps": [{"step": 10 ** 17, "loss": 1}, {"step": 10 ** 17 + 32, "loss": 2}],
           "losses": [{"step": 1, "loss": 10 ** 17}, {"step": 2, "loss": 10 ** 17 + 32}],
           "range": [{"step": -1e308, "loss": -1e308}, {"step": 1e308, "loss": 1e308}]}
    for what, rows in far.items():
        rd = os.path.join(WORK, "run_far_" + what)
        os.makedirs(rd)
        open(os.path.join(rd, "metrics.jsonl"), "w").write("".join(json.dumps(r) + "\n" for r in rows))
        works("report: %s too close for their magnitude or too far apart" % what,
              [EXE, "report", rd, "--out", "far_%s.html" % what], timeout=30)
        page = open(os.path.join(WORK, "far_%s.html" % what)).read() if os.path.exists(os.path.join(WORK, "far_%s.html" % what)) else ""
        note(page.endswith("</html>\n") and page.count('class="xt"') <= 4 * 25,
             "report (%s): a whole page with a bounded number of ticks (%d x ticks)" % (what, page.count('class="xt"')))
    rd = os.path.join(WORK, "run_zero_shot_empty")
    os.makedirs(rd)
    open(os.path.join(rd, "metrics.jsonl"), "w").write('{"step":1,"loss":4.0}\n')
    open(os.path.join(rd, "recipe.ini"), "w").write("[data]\nsource = synthetic\n")
    open(os.path.join(rd, "predictions.jsonl"), "w").write('{"sample_index":0,"correct":true,"predicted":[1]}\n')
    open(os.path.join(rd, "zero-shot.jsonl"), "w").write("")
    works("report: an empty zero-shot.jsonl", [EXE, "report", rd, "--out", "zs.html"], timeout=30)
    page = open(os.path.join(WORK, "zs.html")).read() if os.path.exists(os.path.join(WORK, "zs.html")) else ""
    note("Of 0 questions in both" in page, "report: an empty zero-shot.jsonl is 0 questions in both")


def generate_cases():
    # a checkpoint of two steps on the demo data (generate needs its tokenizer), as hostile_shapes trains one
    for args in [["demo-data", "--out", "demo", "--samples", "8", "--heldout", "2", "--seed", "3"],
                 ["tokenizer", "train", "--vocab", "300", "--manifest", "demo/train.json", "--out", "gtok.json", "--quiet"],
                 ["pack", "--manifest", "demo/train.json", "--images", "demo/images", "--tokenizer", "gtok.json", "--out",
                  "gshards", "--quiet"]]:
        works(args[0] + " (for generate)", [EXE] + args)
    recipe = [os.path.join(SRC, "recipes", "test-synthetic.ini"), "--set", "model.vision_arch=clip", "--set",
              "model.vision_feature_layer=-1", "--set", "data.source=shards", "--set", "data.shards=" +
              os.path.join(WORK, "gshards"), "--set", "data.tokenizer=" + os.path.join(WORK, "gtok.json"), "--set",
              "model.vocab=0"]
    works("train (for generate)", [EXE, "train", *recipe, "--set", "train.steps=2", "--set", "optim.warmup=1", "--set",
          "train.checkpoint_every=2", "--set", "checkpoint.keep=0", "--set", "train.run_dir=" + os.path.join(WORK, "grun")])
    ck = os.path.join(WORK, "grun", "checkpoints", "step-00000002")
    img = sorted(n for n in os.listdir(os.path.join(WORK, "demo", "images")))[0]
    open(os.path.join(WORK, "q.jsonl"), "w").write(json.dumps(
        {"id": "q1", "image": img, "conversations": [{"from": "human", "value": "<image>\nq?"}]}) + "\n")
    answer = json.dumps({"question_id": "q0", "prompt": "p", "text": "t", "model_id": "m"}).encode()
    # --resume reads each line as one answer: a NUL byte or a second value after it is damage (was: the first object
    # taken, the rest of the line ignored)
    for what, line in [("a NUL byte and text", answer + b"\0garbage"), ("a second value", answer + b' {"question_id": 1}')]:
        open(os.path.join(WORK, "answers.jsonl"), "wb").write(answer + b"\n" + line + b"\n")
        refused("generate --resume: an answers line with %s after its object" % what,
                [EXE, "generate", *recipe, "--checkpoint", ck, "--manifest", "q.jsonl", "--images", "demo/images",
                 "--out", "answers.jsonl", "--resume", "--max-new-tokens", "2"], ["answers.jsonl:2", "not an answer"])


def main():
    if os.path.exists(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    for part in [tokenizer_cases, lora_cases, report_cases, generate_cases]:
        part()
    print("hostile readers: %d checks, %d failed" % (COUNT[0], len(FAILED)))
    sys.exit(1 if FAILED else 0)


main()
