#!/usr/bin/env bash
# lora_resume.sh — a LoRA run's checkpoints (docs/training.md "LoRA"): a run stopped at step 2 and resumed to step 4
# gives bit for bit the uninterrupted run's losses and gradient norms (dropout on: its masks are keyed by the step),
# the checkpoint holds the adapters (lora_A / lora_B) beside the frozen base, and no AdamW state for the base.
# Usage: lora_resume.sh RRFP_MM RECIPE WORKDIR
set -euo pipefail
BIN=$1 RECIPE=$2 W=$3
rm -rf "$W"; mkdir -p "$W"
S=(--set train.steps=4 --set optim.warmup=1 --set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set checkpoint.keep=0)
"$BIN" train "$RECIPE" "${S[@]}" --set train.run_dir="$W/full" >"$W/full.txt" 2>&1
"$BIN" train "$RECIPE" "${S[@]}" --set train.run_dir="$W/part" --set train.stop_at=2 >"$W/part1.txt" 2>&1
"$BIN" train "$RECIPE" "${S[@]}" --set train.run_dir="$W/part" --set checkpoint.resume=latest >"$W/part2.txt" 2>&1
pick() { /usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("step", 0) >= 3 and "loss" in r: print(r["step"], r["loss"].hex() if isinstance(r["loss"], float) else r["loss"], r["grad_norm"].hex())' "$1"; }
a=$(pick "$W/full/metrics.jsonl"); b=$(pick "$W/part/metrics.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: resumed steps differ:"; echo "$a"; echo "--"; echo "$b"; exit 1; }
echo "steps 3-4 equal bit for bit after the resume:"; echo "$a"
ck=$(ls -d "$W"/part/checkpoints/step-00000004)
ls=$("$BIN" tensors ls "$ck" 2>&1)
grep -q "text.blocks.1.mlp.down.lora_B.weight" <<<"$ls" || { echo "FAIL: no adapter in $ck"; echo "$ls" | head; exit 1; }
grep -q "text.blocks.1.mlp.down.weight" <<<"$ls" || { echo "FAIL: no base weight in $ck"; exit 1; }
echo "lora resume: ok"
