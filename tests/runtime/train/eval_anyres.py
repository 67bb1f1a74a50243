#!/usr/bin/python3
"""eval_anyres.py — `rrfp-mm eval` on an any-resolution model (model.anyres, docs/anyres.md):
  1. images of landscape, portrait, square, tiny and 1:6 shapes (PNG) in a training and a held-out manifest, a
     tokenizer trained on them, both packed with --image-preprocess anyres (tiles of 28 pixels, patch 14,
     --grid-pinpoints [[28,56],[56,28],[56,56],[84,28]]);
  2. `rrfp-mm train` of a tiny model with model.anyres = 5, 2 steps, train.eval_every = 2 over every held-out
     record: the held-out loss of the training forward (the step executor, docs/anyres.md "The model");
  3. `rrfp-mm eval` on its checkpoint: its held-out loss equals that one (1e-5 relative) on the same records, and the
     images, tower images, feature positions and image_newline positions it counts from the forward's own
     gather indices equal, summed over the held-out images, those of this script's reference (tests/data/anyres_ref.py,
     written from transformers' select_best_resolution / unpad_image / _get_number_of_features).
Usage: eval_anyres.py RRFP_MM SOURCE_DIR WORKDIR. Exit 77 without Pillow / numpy."""
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError:
    print("Pillow or numpy missing: skipped")
    sys.exit(77)
EXE, SRC, W = sys.argv[1:4]
sys.path.insert(0, os.path.join(SRC, "tests", "data"))
from anyres_ref import reference  # noqa: E402 (the independent reference of the layout)

shutil.rmtree(W, ignore_errors=True)
os.makedirs(W + "/images")
TILE, P = 28, 14
PINS = "[[28,56],[56,28],[56,56],[84,28]]"
pins = [tuple(p) for p in json.loads(PINS)]
rng = np.random.default_rng(7)
SHAPES = {"train": ((40, 30), (30, 40), (28, 28), (90, 20), (64, 64), (50, 33)),
          "heldout": ((10, 7), (50, 30), (30, 50), (120, 20), (20, 120), (200, 200), (61, 29))}
for split, shapes in SHAPES.items():
    with open("%s/%s.json" % (W, split), "w") as f:
        for i, (w, h) in enumerate(shapes):
            n = "%s%d.png" % (split, i)
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(W + "/images/" + n)
            ans = ("wide", "tall", "square")[(w > h) - (w < h)]
            f.write(json.dumps({"id": "%s%d" % (split, i), "image": n, "conversations": [
                {"from": "human", "value": "<image>\nWhat shape is the picture?"}, {"from": "gpt", "value": ans}]}) + "\n")


def run(args):
    r = subprocess.run([EXE] + args, capture_output=True, text=True)
    if r.returncode:
        sys.exit("FAIL: rrfp-mm %s: exit %d\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


run(["tokenizer", "train", "--vocab", "300", "--manifest", W + "/train.json", "--out", W + "/tok.json", "--quiet"])
for split in SHAPES:
    run(["pack", "--manifest", "%s/%s.json" % (W, split), "--images", W + "/images", "--tokenizer", W + "/tok.json",
         "--quiet", "--patch", str(P), "--image-preprocess", "anyres", "--image-size", str(TILE), "--grid-pinpoints", PINS,
         "--out", "%s/%s" % (W, split)])
S = ["--set", "data.shards=" + W + "/train", "--set", "data.tokenizer=" + W + "/tok.json",
     "--set", "data.eval_shards=" + W + "/heldout", "--set", "model.patch=%d" % P,
     "--set", "model.vision_image_size=%d" % TILE, "--set", "model.anyres=5", "--set", "model.vision_width=32",
     "--set", "model.vision_heads=2", "--set", "model.text_width=64", "--set", "model.text_heads=2",
     "--set", "model.ffn_hidden=172", "--set", "data.min_patches=4", "--set", "data.max_patches=4",
     "--set", "data.microbatch_tokens=512", "--set", "train.steps=2", "--set", "train.eval_every=2",
     "--set", "optim.warmup=1", "--set", "runtime.threads=1", "--set", "train.run_dir=" + W + "/run"]
run(["train", SRC + "/recipes/demo.ini"] + S)
rows = [json.loads(l) for l in open(W + "/run/metrics.jsonl")]
ev = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
assert [s for s, _ in ev] == [2], ev
r = run(["eval", SRC + "/recipes/demo.ini"] + S + ["--checkpoint", "latest"])
cli = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")][0]
n = len(SHAPES["heldout"])
assert cli["eval_step"] == 2 and cli["samples"] == n, (cli, r.stdout)
assert abs(cli["loss"] - ev[0][1]) <= 1e-5 * abs(ev[0][1]), ("eval's loss is not the training forward's", cli, ev)
print("eval: held-out loss %.6f over the %d records = the training forward's (train.eval_every) %.6f" %
      (cli["loss"], n, ev[0][1]))

want = dict(anyres_images=0, anyres_tower_images=0, anyres_features=0, anyres_newlines=0)
for w, h in SHAPES["heldout"]:
    ref = reference(h, w, pins, TILE, P, "default")
    want["anyres_images"] += 1
    want["anyres_tower_images"] += ref["n_tiles"]
    want["anyres_features"] += ref["n_positions"] - ref["feat_h"]
    want["anyres_newlines"] += ref["feat_h"]
got = {k: cli.get(k) for k in want}
assert got == want, ("the forward's any-resolution layout", got, "reference", want)
assert "any-resolution     %d images" % n in r.stdout, r.stdout
print("eval: the forward laid out %d images, %d tower images, %d feature and %d image_newline positions, as the "
      "reference" % tuple(want[k] for k in ("anyres_images", "anyres_tower_images", "anyres_features", "anyres_newlines")))
print("eval anyres: ok")
