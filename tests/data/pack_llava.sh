#!/usr/bin/env bash
# pack_llava.sh — `rrfp-mm pack --image-preprocess llava` through the loader into a CLIP model:
#   1. demo data (non-square scenes: the padding matters), a tokenizer, a default pack and an llava pack;
#   2. the default shards are version 1, the llava shards version 2 with the preprocessing record;
#   3. a CLIP model (patch 8, image size 24: 3 x 3 patches) trains 3 steps on the llava shards; its step-1
#      dump's patches are LLaVA's normalisation: every value v of channel c is (k / 255 - mean_c) / std_c for
#      an integer k in 0..255 (x / 127.5 - 1 would put nearly none there), and every image is 3 x 3;
#   4. the loader refuses what cannot hold: another model.patch, patch bounds that exclude the fixed grid,
#      each error naming the key;
#   5. model.vocab above the tokenizer's size (a published checkpoint's padded embedding) trains, below it
#      is refused.
# Usage: pack_llava.sh RRFP_MM SOURCE_DIR WORKDIR
set -euo pipefail
EXE=$1 SRC=$2 W=$3
rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
"$EXE" demo-data --out "$W/data" --samples 60 --heldout 6 --questions 1 >/dev/null
"$EXE" tokenizer train --vocab 400 --manifest "$W/data/train.json" --out "$W/tok.json" --quiet
P=(--manifest "$W/data/train.json" --images "$W/data/images" --tokenizer "$W/tok.json" --quiet --patch 8)
"$EXE" pack "${P[@]}" --out "$W/smart" --min-patches 4 --max-patches 16
"$EXE" pack "${P[@]}" --out "$W/llava" --image-preprocess llava --image-size 24
/usr/bin/python3 - "$W" <<'PY' || fail "shard versions"
import glob, struct, sys
w = sys.argv[1]
for d, want in (("smart", 1), ("llava", 2)):
    for f in glob.glob(f"{w}/{d}/*.rrs"):
        raw = open(f, "rb").read()
        v = struct.unpack("<I", raw[8:12])[0]
        assert v == want, (f, v)
        if want == 2:
            ioff, isz = struct.unpack("<QQ", raw[32:48])
            rec = raw[ioff + isz - 16: ioff + isz]
            assert rec[:4] == b"IPRP" and struct.unpack("<III", rec[4:]) == (1, 24, 0), rec
print("shards: default pack version 1, llava pack version 2 with its record (kind 1, size 24)")
PY
R=(--set data.shards="$W/llava" --set data.tokenizer="$W/tok.json" --set data.eval_shards= --set model.vision_arch=clip
   --set model.patch=8 --set model.vision_image_size=24 --set model.vision_feature_layer=-2 --set model.projector_act=gelu
   --set model.vision_width=32 --set model.vision_heads=2 --set model.text_width=64 --set model.text_heads=2
   --set model.ffn_hidden=172 --set data.min_patches=9 --set data.max_patches=9 --set data.microbatch_tokens=512
   --set train.steps=3 --set train.log_every=1 --set train.checkpoint_every=0 --set optim.warmup=1 --set runtime.threads=1)
"$EXE" train "$SRC/recipes/demo.ini" "${R[@]}" --set train.run_dir="$W/run" --set train.dump_step=1 >"$W/train.log" 2>&1 \
  || { cat "$W/train.log"; fail "training a CLIP model on llava shards"; }
/usr/bin/python3 - "$W/run/dump-1" <<'PY' || fail "the loader's patches are not LLaVA's"
import glob, json, struct, sys
import numpy as np
mean = np.array([0.48145466, 0.4578275, 0.40821073]); std = np.array([0.26862954, 0.26130258, 0.27577711])
n_img = n_val = 0
for f in sorted(glob.glob(sys.argv[1] + "/microbatch-*.safetensors")):
    raw = open(f, "rb").read()
    (hn,) = struct.unpack("<Q", raw[:8]); h = json.loads(raw[8:8 + hn]); base = 8 + hn
    def get(name, dt):
        b, e = h[name]["data_offsets"]
        return np.frombuffer(raw[base + b:base + e], dtype=dt).reshape(h[name]["shape"])
    px = get("patches", np.float32).astype(np.float64)
    gh, gw = get("grid_h", np.int32), get("grid_w", np.int32)
    assert (gh == 3).all() and (gw == 3).all(), (gh, gw)
    n_img += len(gh)
    v = px.reshape(px.shape[0], -1, 3) * std + mean      # (row, col, channel): channel last
    k = v * 255
    assert np.abs(k - np.round(k)).max() < 1e-3 and k.min() > -0.5 and k.max() < 255.5, np.abs(k - np.round(k)).max()
    n_val += px.size
assert n_img > 0
print(f"loader: {n_img} images of 3 x 3 patches, all {n_val} values (k / 255 - mean) / std")
PY
"$EXE" train "$SRC/recipes/demo.ini" "${R[@]}" --set model.patch=12 --set model.vision_image_size=24 --set train.run_dir="$W/bad1" \
  >"$W/bad1.log" 2>&1 && fail "another model.patch was accepted"
grep -q "model.patch" "$W/bad1.log" || { cat "$W/bad1.log"; fail "the patch refusal does not name model.patch"; }
"$EXE" train "$SRC/recipes/demo.ini" "${R[@]}" --set data.min_patches=16 --set data.max_patches=16 --set train.run_dir="$W/bad2" \
  >"$W/bad2.log" 2>&1 && fail "patch bounds excluding the fixed grid were accepted"
grep -q "data.min_patches" "$W/bad2.log" || { cat "$W/bad2.log"; fail "the bounds refusal does not name data.min_patches"; }
# a published checkpoint's padded vocabulary (more embedding rows than tokens) trains; fewer is refused
"$EXE" train "$SRC/recipes/demo.ini" "${R[@]}" --set model.vocab=1000 --set train.steps=1 --set train.run_dir="$W/padded" \
  >"$W/padded.log" 2>&1 || { cat "$W/padded.log"; fail "model.vocab above the tokenizer's size was refused"; }
"$EXE" train "$SRC/recipes/demo.ini" "${R[@]}" --set model.vocab=10 --set train.run_dir="$W/bad3" >"$W/bad3.log" 2>&1 \
  && fail "model.vocab below the tokenizer's size was accepted"
grep -q "allowed: 0 (= [0-9]*) or more" "$W/bad3.log" || { cat "$W/bad3.log"; fail "the vocabulary refusal does not say what is allowed"; }
echo "pack llava: ok"
