#!/usr/bin/env bash
# train_eval_packing.sh — `rrfp-mm eval` reads the checkpoint's parameters only: packing settings other
# than the training run's (data.policy, data.window, microbatch sizes) are accepted, and the training
# loader's saved position is never sought (it once refused with a "saved loader position" message).
# A tiny data set: demo-data, tokenizer, pack; 2 training steps of a small model.
# Usage: train_eval_packing.sh RRFP_MM SOURCE_DIR WORKDIR
set -uo pipefail
BIN=$1 SRC=$2 W=$3
rm -rf "$W"; mkdir -p "$W"; cd "$W" || exit 1
fail() { echo "FAIL: $*"; cat "$W"/*.txt 2>/dev/null; exit 1; }
. "$SRC/tests/support/util/tiny_data.sh"
tiny_data
S=("${TINY[@]}" --set data.eval_shards=eval-shards --set train.steps=2 --set train.run_dir=run)
"$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" --set data.policy=ffd >train.txt 2>&1 || fail "train"
for p in fifo balanced; do
  "$BIN" eval "$SRC/recipes/llava.ini" "${S[@]}" --set data.policy=$p --set data.window=8 \
    --set data.microbatch_tokens=512 --checkpoint run/checkpoints/step-00000002 --samples 24 >eval-$p.txt 2>&1 \
    || fail "eval with data.policy=$p refused"
  grep -q '"eval_step":2,"samples":24' eval-$p.txt || fail "eval with data.policy=$p did not evaluate 24 samples"
done
echo "eval packing: ok"
