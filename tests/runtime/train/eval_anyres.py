#!/usr/bin/python3
"""eval_anyres.py — `rrfp-mm eval` on an any-resolution model (model.anyres, docs/anyres.md):
  1. tests/support/util/anyres_run.py: any-resolution training and held-out shards of images of many shapes, 2
     steps of a tiny model with model.anyres = 5 and train.eval_every = 2 over every held-out record: the held-out
     loss of the training forward (the step executor, docs/anyres.md "The model");
  2. `rrfp-mm eval` on its checkpoint: its held-out loss equals that one (1e-5 relative) on the same records, and the
     images, tower images, feature positions and image_newline positions it counts from the forward's own
     gather indices equal, summed over the held-out images, those of the reference (tests/data/anyres_ref.py,
     written from transformers' select_best_resolution / unpad_image / _get_number_of_features).
Usage: eval_anyres.py RRFP_MM SOURCE_DIR WORKDIR. Exit 77 without Pillow / numpy."""
import json
import os
import sys

EXE, SRC, W = sys.argv[1:4]
sys.path[:0] = [os.path.join(SRC, "tests", "support", "util"), os.path.join(SRC, "tests", "data")]
import anyres_run as ar  # noqa: E402 (exits 77 without Pillow / numpy)
from anyres_ref import reference  # noqa: E402 (the independent reference of the layout)

S = ar.make(EXE, SRC, W)
rows = [json.loads(l) for l in open(W + "/run/metrics.jsonl")]
ev = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
assert [s for s, _ in ev] == [2], ev
r = ar.run(EXE, ["eval", SRC + "/recipes/demo.ini"] + S + ["--checkpoint", "latest"])
cli = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")][0]
n = len(ar.SHAPES["heldout"])
assert cli["eval_step"] == 2 and cli["samples"] == n, (cli, r.stdout)
assert abs(cli["loss"] - ev[0][1]) <= 1e-5 * abs(ev[0][1]), ("eval's loss is not the training forward's", cli, ev)
print("eval: held-out loss %.6f over the %d records = the training forward's (train.eval_every) %.6f" %
      (cli["loss"], n, ev[0][1]))

want = dict(anyres_images=0, anyres_tower_images=0, anyres_features=0, anyres_newlines=0)
for w, h in ar.SHAPES["heldout"]:
    ref = reference(h, w, ar.PINPOINTS, ar.TILE, ar.P, "default")
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
