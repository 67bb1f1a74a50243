#!/usr/bin/env bash
# train_llava_stages.sh — LLaVA's two-stage workflow end to end: recipes/llava-stage1.ini (train.freeze =
# vision,text) then recipes/llava-stage2.ini (train.freeze = vision, train.init_from = stage 1's
# checkpoint), a few steps each on the synthetic source, in one process and under the pipeline (pp 2).
# Checks, by exit code:
#  - stage 1: vision.* and text.* bitwise as initialised (the dump of step 1's weights) after training,
#    the projector moved; AdamW state (optimizer*.safetensors) only for projector.*; the pipeline run's
#    losses within 1e-6 of one process and its checkpoint within 1e-5 rel + 1e-6 abs (the bounds of
#    tests/runtime/pipeline/pipeline_train.sh), its frozen tensors bitwise as initialised too;
#  - stage 2: starts at step 1 from stage 1's checkpoint of either layout (its step-1 weights are that
#    checkpoint, bitwise), reports 71 loaded / 0 initialised / 0 unused; afterwards vision.* bitwise
#    unchanged, projector.* and text.* moved, no AdamW state for vision.*; pp 2 agrees with one process;
#  - eval reads a stage-1 checkpoint under a recipe without train.freeze (values only);
#  - init_from into another model (2 LM layers, another SwiGLU width): the report names the tensors
#    initialised for their shape and the checkpoint's blocks 2-3 as not used.
# Usage: train_llava_stages.sh RRFP_MM SOURCE_DIR WORKDIR
set -uo pipefail
BIN=$1 SRC=$2 W=$3
rm -rf "$W"; mkdir -p "$W"
MPI="timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2"
PY=/usr/bin/python3
fail() { echo "FAIL: $*"; exit 1; }
# the synthetic task on a smaller model of the same depth (the recipes' own data is the demo's shards)
SMALL=(--set data.source=synthetic --set model.vocab=64 --set model.vision_width=32 --set model.vision_heads=2
       --set model.patch=4 --set model.text_width=64 --set model.text_heads=2 --set model.ffn_hidden=172 --set data.microbatch_tokens=256 --set data.microbatches=2
       --set data.min_patches=4 --set data.max_patches=16 --set train.steps=4 --set optim.warmup=1
       --set train.log_every=1 --set train.dump_step=1 --set runtime.threads=1)
S1="$SRC/recipes/llava-stage1.ini" S2="$SRC/recipes/llava-stage2.ini"
CK=checkpoints/step-00000004

# check.py MODE ARGS: the subset comparisons (plain Python: safetensors read with json + struct)
cat > "$W/check.py" <<'PY'
import glob, json, os, re, struct, sys
def tensors(path):
    files = [path] if os.path.isfile(path) else sorted(
        f for f in glob.glob(os.path.join(path, "*.safetensors")) if re.match(r"(model|weights)[.a-z0-9]*\.safetensors$", os.path.basename(f)))
    out = {}
    for f in files:
        raw = open(f, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
        for k, v in h.items():
            b, e = v["data_offsets"]; out[k] = raw[8 + n + b:8 + n + e]
    return out
def names(path, stem):
    out = set()
    for f in glob.glob(os.path.join(path, stem + "*.safetensors")):
        raw = open(f, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
        out |= {k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"}
    return out
mode, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
same, moved = sys.argv[4].split(","), sys.argv[5].split(",") if len(sys.argv) > 5 and sys.argv[5] else []
A, B = tensors(a), tensors(b)
assert set(A) == set(B), f"names differ: {sorted(set(A) ^ set(B))[:5]}"
bad = []
for k in A:
    top = k.split(".")[0]
    if top in same and A[k] != B[k]: bad.append(f"{k} changed")
    if top in moved and A[k] == B[k]: bad.append(f"{k} did not move")
opt = names(b, "optimizer")
if opt:
    tops = {k.split(".")[1] for k in opt}
    if tops != set(moved): bad.append(f"AdamW state for {sorted(tops)}, expected {sorted(moved)}")
print(f"{a} -> {b}: {len(A)} tensors; bitwise same: {','.join(same)}; moved: {','.join(moved) or '-'}; "
      f"AdamW state: {len(opt)} tensors")
for x in bad[:10]: print("  " + x)
sys.exit(1 if bad else 0)
PY
close_losses() { $PY - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
a = [float.fromhex(json.loads(l)["loss_hex"]) for l in open(sys.argv[1])]
b = [float.fromhex(json.loads(l)["loss_hex"]) for l in open(sys.argv[2])]
print(f"losses {a} vs {b}")
sys.exit(0 if len(a) == len(b) == 4 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)) else 1)
PY
}

# ---- stage 1: projector only
"$BIN" train "$S1" "${SMALL[@]}" --set train.run_dir="$W/s1" >"$W/s1.log" 2>&1 || { cat "$W/s1.log"; fail "stage 1"; }
$PY "$W/check.py" same "$W/s1/dump-1/weights.safetensors" "$W/s1/$CK" vision,text projector || fail "stage 1: frozen / trained tensors"
$MPI "$BIN" train "$S1" "${SMALL[@]}" --set train.run_dir="$W/s1pp" --set parallel.pp=2 >"$W/s1pp.log" 2>&1 \
  || { cat "$W/s1pp.log"; fail "stage 1 under the pipeline"; }
close_losses "$W/s1" "$W/s1pp" || fail "stage 1: pipeline losses differ from one process"
"$BIN" tensors diff "$W/s1/$CK" "$W/s1pp/$CK" --quiet --rtol 1e-5 --atol 1e-6 || fail "stage 1: pipeline checkpoint differs"
$PY "$W/check.py" same "$W/s1/dump-1/weights.safetensors" "$W/s1pp/$CK" vision,text projector || fail "stage 1 (pp 2): frozen / trained tensors"

# ---- stage 2: projector + LM, from stage 1 (one-process and pipeline checkpoints, either way round)
for run in "s2 $W/s1/$CK 1" "s2x $W/s1pp/$CK 1" "s2pp $W/s1/$CK 2"; do
  set -- $run
  if [ "$3" = 1 ]; then
    "$BIN" train "$S2" "${SMALL[@]}" --set train.run_dir="$W/$1" --set train.init_from="$2" >"$W/$1.log" 2>&1 || { cat "$W/$1.log"; fail "stage 2 ($1)"; }
  else
    $MPI "$BIN" train "$S2" "${SMALL[@]}" --set train.run_dir="$W/$1" --set train.init_from="$2" --set parallel.pp=2 >"$W/$1.log" 2>&1 \
      || { cat "$W/$1.log"; fail "stage 2 ($1)"; }
  fi
  grep -q "init_from $2: loaded 71 tensors .*, initialised 0 from model.seed, 0 in the checkpoint not used" "$W/$1.log" \
    || { cat "$W/$1.log"; fail "stage 2 ($1): no or wrong init_from report"; }
  grep -q "^step     1/4" "$W/$1.log" || fail "stage 2 ($1) does not start at step 1"
  # the weights before step 1 are stage 1's checkpoint, bitwise (every tensor)
  $PY "$W/check.py" same "$2" "$W/$1/dump-1" vision,projector,text "" >/dev/null || fail "stage 2 ($1): step-1 weights are not the checkpoint"
  $PY "$W/check.py" same "$2" "$W/$1/$CK" vision projector,text || fail "stage 2 ($1): frozen / trained tensors"
done
close_losses "$W/s2" "$W/s2pp" || fail "stage 2: pipeline losses differ from one process"
"$BIN" tensors diff "$W/s2/$CK" "$W/s2pp/$CK" --quiet --rtol 1e-5 --atol 1e-6 || fail "stage 2: pipeline checkpoint differs"

# ---- a stage-1 checkpoint (AdamW state for the projector only) evaluates under a recipe without freeze
"$BIN" eval "$S2" "${SMALL[@]}" --set train.freeze= --checkpoint "$W/s1/$CK" --samples 8 >"$W/eval.log" 2>&1 \
  || { cat "$W/eval.log"; fail "eval of a stage-1 checkpoint without train.freeze"; }

# ---- init_from into a model of another shape: what is initialised and what is left unused is named
"$BIN" train "$S2" "${SMALL[@]}" --set train.run_dir="$W/other" --set train.init_from="$W/s1/$CK" \
  --set model.text_layers=2 --set model.ffn_hidden=86 --set train.steps=1 --set train.dump_step=-1 >"$W/other.log" 2>&1 \
  || { cat "$W/other.log"; fail "init_from into another model"; }
grep -q "loaded 47 tensors .*, initialised 6 from model.seed, 24 in the checkpoint not used" "$W/other.log" || { cat "$W/other.log"; fail "report counts"; }
grep -q "text.blocks.\*.mlp.gate.weight x2 (shape (172, 64) in the checkpoint, (86, 64) here)" "$W/other.log" || fail "shape note"
grep -q "text.blocks.\*.attn.q.weight x2" "$W/other.log" || fail "unused blocks"
echo "llava stages: ok"
