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
"$BIN" demo-data --out d --samples 80 --heldout 24 >/dev/null || fail "demo-data"
"$BIN" tokenizer train --vocab 300 --manifest d/train.json --out tok.json --quiet || fail "tokenizer"
"$BIN" pack --manifest d/train.json --images d/images --tokenizer tok.json --out shards >/dev/null 2>&1 || fail "pack"
"$BIN" pack --manifest d/heldout.json --images d/images --tokenizer tok.json --out eval-shards >/dev/null 2>&1 || fail "pack eval"
S=(--set data.shards=shards --set data.tokenizer=tok.json --set data.eval_shards=eval-shards --set model.vision_width=32
   --set model.vision_layers=1 --set model.vision_heads=2 --set model.text_width=64 --set model.text_layers=2
   --set model.text_heads=2 --set model.ffn_hidden=172 --set data.microbatches=2 --set optim.warmup=1
   --set train.steps=2 --set train.run_dir=run --set runtime.threads=1)
"$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" --set data.policy=ffd >train.txt 2>&1 || fail "train"
for p in fifo balanced; do
  "$BIN" eval "$SRC/recipes/llava.ini" "${S[@]}" --set data.policy=$p --set data.window=8 \
    --set data.microbatch_tokens=512 --checkpoint run/checkpoints/step-00000002 --samples 24 >eval-$p.txt 2>&1 \
    || fail "eval with data.policy=$p refused"
  grep -q '"eval_step":2,"samples":24' eval-$p.txt || fail "eval with data.policy=$p did not evaluate 24 samples"
done
echo "eval packing: ok"
