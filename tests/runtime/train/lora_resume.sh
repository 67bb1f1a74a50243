#!/usr/bin/env bash
# lora_resume.sh — a LoRA run's checkpoints (docs/training.md "LoRA"): a run stopped at step 2 and resumed to step 4
# gives bit for bit the uninterrupted run's losses and gradient norms (dropout on: its masks are keyed by the step),
# the checkpoint holds the adapters (lora_A / lora_B) beside the frozen base, and no AdamW state for the base.
# Usage: lora_resume.sh RRFP_MM RECIPE WORKDIR
set -euo pipefail
BIN=$1 RECIPE=$2 W=$3
. "$(dirname "$0")/../../support/util/resume_lib.sh"
rm -rf "$W"; mkdir -p "$W"
S=(--set train.steps=4 --set optim.warmup=1 --set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set checkpoint.keep=0)
resume_bitwise "$RECIPE" "${S[@]}"
ck=$(ls -d "$W"/part/checkpoints/step-00000004)
ls=$("$BIN" tensors ls "$ck" 2>&1)
grep -q "text.blocks.1.mlp.down.lora_B.weight" <<<"$ls" || { echo "FAIL: no adapter in $ck"; echo "$ls" | head; exit 1; }
grep -q "text.blocks.1.mlp.down.weight" <<<"$ls" || { echo "FAIL: no base weight in $ck"; exit 1; }
echo "lora resume: ok"
