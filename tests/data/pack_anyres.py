#!/usr/bin/python3
"""pack_anyres.py — `rrfp-mm pack --image-preprocess anyres` end to end on real photographs (python3-skimage's):
  1. a manifest of one-image records whose images run from below every pinpoint to above every one, landscape,
     portrait, square and 1:6 shapes (PNG: decoded alike everywhere) plus the JPEG photographs themselves;
  2. pack with a tokenizer trained on it, tiles of 28 pixels (patch 14) and --grid-pinpoints
     [[28,56],[56,28],[56,56],[84,28]]: the shards are version 3 and end with the pinpoints, their count and the
     record (kind 2, tile 28); a second pack gives byte-identical shards;
  3. tests/data/test_anyres_loader reads them through the loader, checks every microbatch with the model's
     stage_check_microbatch and trains it (forward, backward); each image's original size, tile grid,
     `<image>` run length and tower images must equal this script's reference (written from transformers'
     select_best_resolution / _get_number_of_features), and its patches LlavaNextImageProcessor's rules in
     Pillow / numpy within 1e-6;
  4. `rrfp-mm train` with model.anyres on the shards: its step-1 dump equals the PyTorch reference
     (tests/support/ref/llava_ref.py); `rrfp-mm generate` answers about an image on the trained model, its prompt
     the image's reference position count plus the question's; a model without model.anyres refuses the shards;
     `rrfp-mm export hf` of a CLIP-tower run on them writes LlavaNext's config, image processor and processor with
     the shards' pinpoints;
  5. bad settings are refused before anything is written: a pinpoint that is not a multiple of the tile side,
     --grid-pinpoints without anyres.
Usage: pack_anyres.py RRFP_MM TEST_ANYRES_LOADER WORKDIR. Exit 77 without Pillow / numpy."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError:
    print("Pillow or numpy missing: skipped")
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anyres_ref import reference  # noqa: E402 (the independent reference of the layout)
from data_anyres_pillow import processor, patches  # noqa: E402 (the reference processor in Pillow)

EXE, LOADER, W = sys.argv[1:4]
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W + "/images")
SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
TILE, P = 28, 14
PINS = "[[28,56],[56,28],[56,56],[84,28]]"
pins = [tuple(p) for p in json.loads(PINS)]
photos = sorted(f for f in os.listdir(SKIMAGE) if f.endswith(".jpg") and f != "truncated.jpg")[:3]
base = Image.open(os.path.join(SKIMAGE, photos[0])).convert("RGB")
names = []
for f in photos:
    shutil.copy(os.path.join(SKIMAGE, f), W + "/images/" + f)
    names.append(f)
for i, (w, h) in enumerate(((10, 7), (28, 28), (50, 30), (30, 50), (120, 20), (20, 120), (200, 200), (61, 29), (3, 90))):
    n = "shape%d.png" % i
    base.resize((w, h)).save(W + "/images/" + n)
    names.append(n)
with open(W + "/train.json", "w") as f:
    for i, n in enumerate(names):
        rec = {"id": "r%d" % i, "image": n, "conversations": [
            {"from": "human", "value": "<image>\nWhat is in the picture?"}, {"from": "gpt", "value": "a photograph"}]}
        f.write(json.dumps(rec) + "\n")


def run(args, ok=True):
    r = subprocess.run([EXE] + args, capture_output=True, text=True)
    if (r.returncode == 0) != ok:
        sys.exit("FAIL: rrfp-mm %s: exit %d\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


run(["tokenizer", "train", "--vocab", "300", "--manifest", W + "/train.json", "--out", W + "/tok.json", "--quiet"])
PK = ["pack", "--manifest", W + "/train.json", "--images", W + "/images", "--tokenizer", W + "/tok.json", "--quiet",
      "--patch", str(P), "--image-preprocess", "anyres", "--image-size", str(TILE), "--grid-pinpoints", PINS]
run(PK + ["--out", W + "/ar"])
run(PK + ["--out", W + "/ar2"])
shards = sorted(f for f in os.listdir(W + "/ar") if f.endswith(".rrs"))
for f in shards:
    raw = open(W + "/ar/" + f, "rb").read()
    assert raw == open(W + "/ar2/" + f, "rb").read(), "pack is not deterministic: " + f
    assert struct.unpack("<I", raw[8:12])[0] == 3, "not a version 3 shard"
    ioff, isz = struct.unpack("<QQ", raw[32:48])
    end = raw[ioff + isz - 16:ioff + isz]
    assert end[:4] == b"IPRP" and struct.unpack("<III", end[4:]) == (2, TILE, 0), end
    n = struct.unpack("<I", raw[ioff + isz - 20:ioff + isz - 16])[0]
    got = struct.unpack("<%dI" % (2 * n), raw[ioff + isz - 20 - 8 * n:ioff + isz - 20])
    assert [tuple(got[i:i + 2]) for i in range(0, 2 * n, 2)] == pins, got
print("shards: version 3, the pinpoints and the record (kind 2, tile %d) at the index's end; two packs equal" % TILE)

os.makedirs(W + "/dump")
r = subprocess.run([LOADER, W + "/ar", str(TILE), str(P), W + "/dump"], capture_output=True, text=True)
if r.returncode:
    sys.exit("FAIL: test_anyres_loader: %s%s" % (r.stdout, r.stderr))
print(r.stdout.strip())
px = np.fromfile(W + "/dump/patches.f32", dtype=np.float32).astype(np.float64).reshape(-1, 3 * P * P)
checked, worst = set(), 0.0
for line in open(W + "/dump/images.txt"):
    s, h, w, rows, cols, npos, ntiles, row0 = map(int, line.split())
    img = Image.open(W + "/images/" + names[s]).convert("RGB")
    assert (w, h) == img.size, (names[s], (w, h), img.size)
    ref = reference(h, w, pins, TILE, P, "default")
    got = (rows, cols, npos, ntiles)
    exp = (ref["rows"], ref["cols"], ref["n_positions"], ref["n_tiles"])
    assert got == exp, "%s (%d x %d): grid, positions, tiles %s, reference %s" % (names[s], w, h, got, exp)
    refp = patches(processor(img, pins, TILE), P).reshape(-1, 3 * P * P)
    d = np.abs(px[row0:row0 + len(refp)] - refp).max()
    assert d <= 1e-6, "%s: patches differ by %g" % (names[s], d)
    worst = max(worst, d)
    checked.add(s)
assert checked == set(range(len(names))), "samples not seen: %s" % (set(range(len(names))) - checked)
print("loader: %d images: size, tile grid, positions and tower images equal the reference; patches within %.1e"
      % (len(checked), worst))

# the trainer on them (model.anyres): its step-1 dump against the PyTorch reference (tests/support/ref/llava_ref.py)
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TR = ["train", SRC + "/recipes/demo.ini", "--set", "data.shards=" + W + "/ar", "--set", "data.tokenizer=" + W + "/tok.json",
      "--set", "data.eval_shards=", "--set", "model.patch=%d" % P, "--set", "model.vision_image_size=%d" % TILE,
      "--set", "model.vision_width=32", "--set", "model.vision_heads=2", "--set", "model.text_width=64",
      "--set", "model.text_heads=2", "--set", "model.ffn_hidden=172", "--set", "data.min_patches=4",
      "--set", "data.max_patches=4", "--set", "data.microbatch_tokens=512", "--set", "train.steps=2",
      "--set", "train.checkpoint_every=0", "--set", "optim.warmup=1", "--set", "runtime.threads=1"]
run(TR + ["--set", "model.anyres=5", "--set", "train.run_dir=" + W + "/run", "--set", "train.dump_step=1"])
r = subprocess.run([sys.executable, SRC + "/tests/support/ref/llava_ref.py", "--check", W + "/run/dump-1"],
                   capture_output=True, text=True)
if r.returncode:
    sys.exit("FAIL: the trainer's any-resolution step against the reference:\n" + r.stdout[-3000:])
print("train: 2 steps on the shards with model.anyres = 5; step 1 equals the PyTorch reference")
# generate on the trained model: the image through the loader's tiles and layout (data record: anyres, its pinpoints)
r = run(["generate", W + "/run/recipe.ini", "--checkpoint", "latest", "--set", "train.run_dir=" + W + "/run",
         "--image", W + "/images/" + names[-2], "--prompt", "What is in the picture?", "--max-new-tokens", "4"])
gw_, gh_ = Image.open(W + "/images/" + names[-2]).size
npos = reference(gh_, gw_, pins, TILE, P, "default")["n_positions"]
m = re.search(r"generate: (\d+) prompt positions", r.stderr + r.stdout)
assert m and npos < int(m.group(1)) < npos + 64, (npos, r.stderr)
print("generate: %s prompt positions (the image's %d and the question's), answer '%s'"
      % (m.group(1), npos, r.stdout.strip().splitlines()[-1]))
# export hf of a run on these shards (a CLIP tower: Hugging Face's): LlavaNext's config and processor files with the
# shards' pinpoints
CL = ["--set", "model.vision_arch=clip", "--set", "model.vision_layers=2", "--set", "model.vision_feature_layer=-2",
      "--set", "model.projector_act=gelu", "--set", "train.steps=1"]
run(TR + CL + ["--set", "model.anyres=5", "--set", "train.run_dir=" + W + "/runclip"])
run(["export", "hf", "--checkpoint", W + "/runclip/checkpoints/step-00000001", "--recipe", W + "/runclip/recipe.ini",
     "--out", W + "/exp"])
cfg = json.load(open(W + "/exp/config.json"))
pre = json.load(open(W + "/exp/preprocessor_config.json"))
proc = json.load(open(W + "/exp/processor_config.json"))
want = [list(p) for p in pins]
assert cfg["model_type"] == "llava_next" and cfg["architectures"] == ["LlavaNextForConditionalGeneration"], cfg["model_type"]
assert cfg["image_grid_pinpoints"] == want and pre["image_grid_pinpoints"] == want, (cfg["image_grid_pinpoints"], pre)
assert pre["image_processor_type"] == "LlavaNextImageProcessor" and proc["processor_class"] == "LlavaNextProcessor", pre
# the fields of llava-hf's LLaVA-NeXT preprocessor_config.json (LlavaNextImageProcessor's: do_pad pads a batch's
# images to the same number of tiles, the shortest edge and crop at the tile side, bicubic, CLIP's mean / std)
want_pre = {"do_pad": True, "do_resize": True, "size": {"shortest_edge": TILE}, "resample": 3, "do_center_crop": True,
            "crop_size": {"height": TILE, "width": TILE}, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
            "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}
assert all(pre.get(k) == v for k, v in want_pre.items()) and abs(pre["rescale_factor"] - 1 / 255) < 1e-12, pre
print("export hf: llava_next, LlavaNextImageProcessor, the shards' pinpoints in config.json and preprocessor_config.json")
bad = run(TR + ["--set", "train.run_dir=" + W + "/run0"], ok=False)
assert "not any-resolution (model.anyres)" in bad.stdout + bad.stderr, bad.stdout + bad.stderr
print("refused: any-resolution shards on a model without model.anyres")

bad = run(PK[:-2] + ["--grid-pinpoints", "[[28,50]]", "--out", W + "/bad"], ok=False)
assert "multiple of the tile side 28" in bad.stderr and not os.path.exists(W + "/bad"), bad.stderr
bad = run(PK[:10] + ["--grid-pinpoints", PINS, "--out", W + "/bad"], ok=False)
assert "--grid-pinpoints is for --image-preprocess anyres" in bad.stderr and not os.path.exists(W + "/bad"), bad.stderr
print("refusals: a pinpoint off the tile side, --grid-pinpoints without anyres; nothing written")
print("pack anyres: ok")
