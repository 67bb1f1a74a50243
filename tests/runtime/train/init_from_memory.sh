#!/usr/bin/env bash
# init_from_memory.sh — a rank that starts from a checkpoint with train.init_from holds its own stage's
# tensors and one tensor's bytes at a time while it loads, not the checkpoint's files (engine/safetensors.h:
# tensor bytes are read on demand; docs/engine.md "Safetensors files").
# One process writes a checkpoint of a 26M-parameter model (a model file of about 100 MB); a pp 4 run starts
# from it with RRFP_TEST_LOAD_PEAK = 1, and each rank prints the growth of its peak memory (VmHWM, the mark
# reset before the load) over what it held before. Every rank's growth must stay under its stage's tensors
# plus its largest tensor plus a fixed 16 MiB: a reader that held the whole model file (about 4 times a
# stage's share at pp 4) is over it. The model file must be larger than every rank's bound, or the test
# could not tell the two apart.
# Usage: init_from_memory.sh RRFP_MM RECIPE WORKDIR
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
MARGIN_KIB=16384
MODEL=(--set model.text_width=512 --set model.text_layers=8 --set model.text_heads=8 --set model.ffn_hidden=1376
       --set data.microbatch_tokens=64 --set data.microbatches=1 --set data.max_patches=4 --set optim.warmup=1
       --set train.steps=1 --set runtime.threads=1)
"$BIN" train "$RECIPE" "${MODEL[@]}" --set train.run_dir="$W/src" >"$W/src.log" 2>&1 || { cat "$W/src.log"; fail "source run"; }
CK="$W/src/checkpoints/step-00000001"
FILE_KIB=$(( $(stat -c %s "$CK/model.safetensors") / 1024 ))
RRFP_TEST_LOAD_PEAK=1 timeout 150 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x RRFP_TEST_LOAD_PEAK \
  -np 4 "$BIN" train "$RECIPE" "${MODEL[@]}" --set parallel.pp=4 --set train.init_from="$CK" \
  --set train.checkpoint_every=-1 --set train.run_dir="$W/pp4" >"$W/pp4.log" 2>&1 || { cat "$W/pp4.log"; fail "pp 4 init_from run"; }
grep -q "init_from .*initialised 0 from model.seed, 0 in the checkpoint not used" "$W/pp4.log" \
  || { grep -A12 "^init_from" "$W/pp4.log"; fail "not every tensor was loaded from the checkpoint"; }
lines=$(grep "^test: rank [0-9]* init_from peak growth" "$W/pp4.log" | sort)
[ "$(grep -c . <<<"$lines")" = 4 ] || { cat "$W/pp4.log"; fail "expected the load's memory from 4 ranks"; }
if grep -q "reset 0" <<<"$lines"; then
  echo "SKIP: the peak-memory mark cannot be reset here (/proc/self/clear_refs): $lines"
  exit 77
fi
while read -r line; do
  rank=$(sed -E 's/^test: rank ([0-9]+) .*/\1/' <<<"$line")
  grow=$(sed -E 's/.* peak growth (-?[0-9]+) KiB.*/\1/' <<<"$line")
  stage=$(sed -E 's/.* stage tensors ([0-9]+) KiB.*/\1/' <<<"$line")
  big=$(sed -E 's/.* largest tensor ([0-9]+) KiB.*/\1/' <<<"$line")
  bound=$(( stage + big + MARGIN_KIB ))
  [ "$FILE_KIB" -gt "$bound" ] || fail "the model file ($FILE_KIB KiB) is not larger than rank $rank's bound ($bound KiB)"
  [ "$grow" -le "$bound" ] || fail "rank $rank: its memory grew by $grow KiB while it loaded, over its stage's tensors ($stage KiB) + its largest tensor ($big KiB) + $MARGIN_KIB KiB (the model file: $FILE_KIB KiB)"
  echo "rank $rank: grew $grow KiB while loading (bound $bound KiB; the model file $FILE_KIB KiB)"
done <<<"$lines"
echo "init_from memory: ok"
