#!/usr/bin/env bash
# resume_loader.sh — a resumed run continues the data where the checkpoint stopped it, through the
# trainer's own path (`rrfp-mm train --resume latest`: the checkpoint's state.json loader position,
# trainer_seek, the source's seek), for both sources, in one process:
#   - shards (demo-data -> tokenizer -> pack, 40 records): a tiny LLaVA, 5 steps of 2 microbatches packed
#     by ffd over a window of 8 samples, stopped after step 2 in the middle of a packing group (the
#     position's "group_done" > 0, checked) and resumed;
#   - synthetic: 5 steps, stopped after step 2 and resumed.
# Each resumed run's steps 3 to 5 must have the uninterrupted run's token and supervised-target counts
# and losses bit for bit (one process, the same kernels on the same data and weights: nothing is
# reordered), and its last checkpoint the same parameters and moments. A resume that starts the data
# over (or at the start of the packing group) trains those steps on other samples: other counts and
# losses.
# Usage: resume_loader.sh RRFP_MM SRC_DIR WORKDIR
set -uo pipefail
BIN=$1 SRC=$2 W=$3
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
"$BIN" demo-data --out "$W/data" --samples 40 --heldout 4 >"$W/demo.log" 2>&1 || { cat "$W/demo.log"; fail "demo-data"; }
"$BIN" tokenizer train --vocab 300 --manifest "$W/data/train.json" --out "$W/tok.json" --quiet || fail "tokenizer"
"$BIN" pack --manifest "$W/data/train.json" --images "$W/data/images" --tokenizer "$W/tok.json" --out "$W/shards" \
  >"$W/pack.log" 2>&1 || { cat "$W/pack.log"; fail "pack"; }
SHARDS=("$SRC/recipes/llava.ini" --set data.shards="$W/shards" --set data.tokenizer="$W/tok.json"
        --set data.microbatch_tokens=512 --set data.microbatches=2 --set data.window=8 --set data.policy=ffd
        --set model.vision_width=32 --set model.vision_heads=2 --set model.vision_layers=1 --set model.text_width=32
        --set model.text_heads=2 --set model.text_layers=2 --set model.ffn_hidden=64 --set runtime.threads=1
        --set train.steps=5 --set optim.warmup=1 --set train.log_every=1 --set checkpoint.keep=0)
SYNTH=("$SRC/recipes/test-synthetic.ini" --set train.steps=5 --set optim.warmup=1 --set checkpoint.keep=0)
# the rows of steps 3 to 5: step, tokens, supervised targets, loss bits
rows() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["step"] >= 3: print(r["step"], r["tokens"], r["supervised"], r["loss_hex"])' "$1/metrics.jsonl"; }
for src in shards synthetic; do
  if [ $src = shards ]; then R=("${SHARDS[@]}"); else R=("${SYNTH[@]}"); fi
  "$BIN" train "${R[@]}" --set train.run_dir="$W/$src-whole" >"$W/$src-whole.log" 2>&1 \
    || { tail -20 "$W/$src-whole.log"; fail "$src: the uninterrupted run"; }
  "$BIN" train "${R[@]}" --set train.stop_at=2 --set train.run_dir="$W/$src-resumed" >"$W/$src-resumed.log" 2>&1 \
    || { tail -20 "$W/$src-resumed.log"; fail "$src: the run stopped after step 2"; }
  state="$W/$src-resumed/checkpoints/step-00000002/state.json"
  [ -f "$state" ] || fail "$src: no checkpoint of step 2"
  if [ $src = shards ]; then
    # stopped inside a packing group: the resume must hand out the group's remaining microbatches first
    grep -Eq '"group_done":[[:space:]]*[1-9]' "$state" || fail "$src: step 2 ended at a packing group's boundary (the test's window must hold more than one step): $(tr -d '\n\t' <"$state")"
  fi
  "$BIN" train "${R[@]}" --set train.run_dir="$W/$src-resumed" --resume latest >>"$W/$src-resumed.log" 2>&1 \
    || { tail -20 "$W/$src-resumed.log"; fail "$src: the resume"; }
  grep -q "resumed from .*step-00000002 at step 2" "$W/$src-resumed.log" || fail "$src: the log does not say it resumed at step 2"
  a=$(rows "$W/$src-whole") b=$(rows "$W/$src-resumed")
  [ "$(wc -l <<<"$a")" = 3 ] || fail "$src: expected the rows of steps 3 to 5, got: $a"
  [ "$a" = "$b" ] || fail "$src: steps 3 to 5 after the resume (step, tokens, supervised targets, loss bits) differ from the uninterrupted run's:
$a
---
$b"
  "$BIN" tensors diff "$W/$src-whole/checkpoints/step-00000005" "$W/$src-resumed/checkpoints/step-00000005" --quiet \
    >"$W/$src.diff" 2>&1 || { tail -5 "$W/$src.diff"; fail "$src: the last checkpoints differ"; }
  echo "$src: resumed at step 2, steps 3 to 5 as the uninterrupted run's (step tokens targets loss: $(tr '\n' ';' <<<"$a"))"
done
echo "resume loader: ok"
