#!/usr/bin/env bash
# pipeline_decode.sh BIN SRC WORK — only the first pipeline stage decodes JPEGs (the ViT is there); the
# others take token ids, labels and sizes from the same loader plan and never touch pixels. Checked from
# every rank's RUN_DIR/rank-R.json of a pp = 2 run on real demo shards, and the run must match one process.
set -euo pipefail
BIN=$1 SRC=$2 W=$3
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
"$BIN" demo-data --out "$W/data" --samples 120 --heldout 10 >/dev/null
"$BIN" tokenizer train --vocab 400 --manifest "$W/data/train.json" --out "$W/tok.json" --quiet
"$BIN" pack --manifest "$W/data/train.json" --images "$W/data/images" --tokenizer "$W/tok.json" --out "$W/shards" \
  >/dev/null 2>&1
S=(--set data.shards="$W/shards" --set data.tokenizer="$W/tok.json" --set data.microbatches=2
   --set data.microbatch_tokens=512 --set train.steps=2 --set optim.warmup=1 --set runtime.threads=1
   --set model.text_layers=2 --set model.vision_layers=1)
timeout 200 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$BIN" train "$SRC/recipes/llava.ini" \
  "${S[@]}" --set parallel.pp=2 --set train.run_dir="$W/pp2" >"$W/pp2.log" 2>&1 || fail "pp=2 run: $(tail -5 "$W/pp2.log")"
"$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" --set train.run_dir="$W/one" >"$W/one.log" 2>&1 \
  || fail "one-process run: $(tail -5 "$W/one.log")"
d0=$(sed -n 's/.*"images_decoded": \([0-9]*\).*/\1/p' "$W/pp2/rank-0.json")
d1=$(sed -n 's/.*"images_decoded": \([0-9]*\).*/\1/p' "$W/pp2/rank-1.json")
one=$(sed -n 's/.*"images_decoded": \([0-9]*\).*/\1/p' "$W/one/rank-0.json")
[ -n "$d0" ] && [ "$d0" -gt 0 ] || fail "rank 0 decoded '$d0' images"
[ "$d1" = 0 ] || fail "rank 1 (no ViT) decoded $d1 images"
[ "$d0" = "$one" ] || fail "rank 0 decoded $d0 images, one process $one"
cmp <(grep -o '"loss_hex": "[^"]*"' "$W/pp2/metrics.jsonl") <(grep -o '"loss_hex": "[^"]*"' "$W/one/metrics.jsonl") \
  || fail "pp=2 losses differ from one process"
echo "images decoded: rank 0 $d0, rank 1 $d1 (one process $one); losses equal"
echo "pipeline decode: ok"
