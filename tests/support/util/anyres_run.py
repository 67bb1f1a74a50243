"""anyres_run.py — a tiny any-resolution run for the tests of the commands that read one (eval, report):
images of landscape, portrait, square, tiny and 1:6 shapes (PNG, seeded noise) in a training and a held-out
manifest (answer: the picture's shape), a tokenizer trained on them, both packed with --image-preprocess anyres
(tiles of 28 pixels, patch 14, --grid-pinpoints [[28,56],[56,28],[56,56],[84,28]]), and 2 training steps of a
tiny model with model.anyres = 5 and train.eval_every = 2 over every held-out record (recipes/demo.ini).
make(EXE, SRC, W) returns the `--set` list that names the run (train.run_dir = W/run) for rrfp-mm eval.
Importing it exits 77 (skipped) without Pillow / numpy."""
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError:  # the tests that import this module are skipped (77) without them
    print("Pillow or numpy missing: skipped")
    sys.exit(77)

TILE, P = 28, 14
PINS = "[[28,56],[56,28],[56,56],[84,28]]"
PINPOINTS = [tuple(p) for p in json.loads(PINS)]
# (width, height) of each record's image
SHAPES = {"train": ((40, 30), (30, 40), (28, 28), (90, 20), (64, 64), (50, 33)),
          "heldout": ((10, 7), (50, 30), (30, 50), (120, 20), (20, 120), (200, 200), (61, 29))}


def run(exe, args):
    r = subprocess.run([exe] + args, capture_output=True, text=True)
    if r.returncode:
        sys.exit("FAIL: rrfp-mm %s: exit %d\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def make(exe, src, w):
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w + "/images")
    rng = np.random.default_rng(7)
    for split, shapes in SHAPES.items():
        with open("%s/%s.json" % (w, split), "w") as f:
            for i, (iw, ih) in enumerate(shapes):
                n = "%s%d.png" % (split, i)
                Image.fromarray(rng.integers(0, 256, (ih, iw, 3), dtype=np.uint8)).save(w + "/images/" + n)
                ans = {1: "wide", -1: "tall", 0: "square"}[(iw > ih) - (iw < ih)]
                f.write(json.dumps({"id": "%s%d" % (split, i), "image": n, "conversations": [
                    {"from": "human", "value": "<image>\nWhat shape is the picture?"}, {"from": "gpt", "value": ans}]}) + "\n")
    run(exe, ["tokenizer", "train", "--vocab", "300", "--manifest", w + "/train.json", "--out", w + "/tok.json", "--quiet"])
    for split in SHAPES:
        run(exe, ["pack", "--manifest", "%s/%s.json" % (w, split), "--images", w + "/images", "--tokenizer", w + "/tok.json",
                  "--quiet", "--patch", str(P), "--image-preprocess", "anyres", "--image-size", str(TILE),
                  "--grid-pinpoints", PINS, "--out", "%s/%s" % (w, split)])
    s = ["--set", "data.shards=" + w + "/train", "--set", "data.tokenizer=" + w + "/tok.json",
         "--set", "data.eval_shards=" + w + "/heldout", "--set", "model.patch=%d" % P,
         "--set", "model.vision_image_size=%d" % TILE, "--set", "model.anyres=5", "--set", "model.vision_width=32",
         "--set", "model.vision_heads=2", "--set", "model.text_width=64", "--set", "model.text_heads=2",
         "--set", "model.ffn_hidden=172", "--set", "data.min_patches=4", "--set", "data.max_patches=4",
         "--set", "data.microbatch_tokens=512", "--set", "train.steps=2", "--set", "train.eval_every=2",
         "--set", "optim.warmup=1", "--set", "runtime.threads=1", "--set", "train.run_dir=" + w + "/run"]
    run(exe, ["train", src + "/recipes/demo.ini"] + s)
    return s
