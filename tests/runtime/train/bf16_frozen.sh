#!/usr/bin/env bash
# bf16_frozen.sh — frozen tensors of a bf16 run hold only their 2-byte compute copy (docs/training.md "Freezing"):
# (1) a run stopped at step 2 and resumed gives step 3 bit for bit; (2) its checkpoint holds every frozen tensor as
# the bf16 rounding of the value it started from (an fp32 run's unchanged frozen tensors); (3) train.init_from of an
# fp32 checkpoint whose LM was trained (values not bf16-exact) rounds each frozen tensor once: the bf16 run's
# checkpoint holds exactly the rounded values; the trainable ones moved.
# Usage: bf16_frozen.sh RRFP_MM RECIPE WORKDIR
set -euo pipefail
BIN=$1 RECIPE=$2 W=$3
rm -rf "$W"; mkdir -p "$W"
C=(--set train.steps=3 --set optim.warmup=1 --set train.log_every=1 --set checkpoint.keep=0)
B=("${C[@]}" --set runtime.precision=bf16 --set train.freeze=vision,text)
"$BIN" train "$RECIPE" "${B[@]}" --set train.run_dir="$W/full" --set train.checkpoint_every=3 >"$W/full.txt" 2>&1
"$BIN" train "$RECIPE" "${B[@]}" --set train.run_dir="$W/part" --set train.checkpoint_every=1 --set train.stop_at=2 >"$W/part1.txt" 2>&1
"$BIN" train "$RECIPE" "${B[@]}" --set train.run_dir="$W/part" --set train.checkpoint_every=1 --set checkpoint.resume=latest >"$W/part2.txt" 2>&1
# an fp32 run: its frozen tensors never move (the starting values); one with the LM trained (init_from's source)
"$BIN" train "$RECIPE" "${C[@]}" --set train.freeze=vision,text --set train.run_dir="$W/f32" --set train.checkpoint_every=3 >"$W/f32.txt" 2>&1
"$BIN" train "$RECIPE" "${C[@]}" --set train.freeze=vision --set train.run_dir="$W/f32lm" --set train.checkpoint_every=3 >"$W/f32lm.txt" 2>&1
"$BIN" train "$RECIPE" "${B[@]}" --set train.init_from="$W/f32lm/checkpoints/step-00000003" --set train.run_dir="$W/init" \
    --set train.checkpoint_every=3 >"$W/init.txt" 2>&1
/usr/bin/python3 - "$W" <<'PY'
import json, struct, sys
import numpy as np
W = sys.argv[1]
def st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32) for k, v in h.items()}
def bf16(x):  # round to nearest even, as rr_f32_to_bf16 (finite values)
    u = x.view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
def pick(p):
    return [(r["step"], r["loss"].hex(), r["grad_norm"].hex()) for r in map(json.loads, open(p)) if "loss" in r and r["step"] == 3]
a, b = pick(W + "/full/metrics.jsonl"), pick(W + "/part/metrics.jsonl")
assert a and a == b, ("resumed step 3 differs", a, b)
print("step 3 equal bit for bit after the resume:", a)
ck = lambda run: st(W + "/" + run + "/checkpoints/step-00000003/model.safetensors")
full, f32, lm, init = ck("full"), ck("f32"), ck("f32lm"), ck("init")
frozen = [k for k in full if k.startswith(("vision.", "text."))]
assert len(frozen) > 10, frozen
for k in frozen:
    assert np.array_equal(full[k].view(np.uint32), bf16(f32[k]).view(np.uint32)), ("checkpoint not the bf16 start values", k)
    assert np.array_equal(init[k].view(np.uint32), bf16(lm[k]).view(np.uint32)), ("init_from not rounded once", k)
inexact = sum(int((lm[k] != bf16(lm[k])).sum()) for k in frozen if k.startswith("text."))
assert inexact > 1000, inexact  # the source really held values bf16 cannot
moved = [k for k in init if k.startswith("projector.") and not np.array_equal(init[k], lm[k])]
assert moved, "the projector did not train"
print(len(frozen), "frozen tensors bf16-exact in checkpoints;", inexact, "LM values of the f32 source rounded once")
PY
echo "bf16 frozen: ok"
