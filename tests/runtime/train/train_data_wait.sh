#!/usr/bin/env bash
# train_data_wait.sh — a step that waits for the loader says so: with every sample's read slowed
# (RRFP_TEST_READ_SLEEP_MS = 150, one reader thread, about ten samples a step) a tiny model's steps after the
# first wait about a second for data: their log lines carry "data wait N%", one warning names data.workers, and
# metrics.jsonl's data_wait_s agrees; step 1 (the loader's warm-up) is never marked. data.workers = 0 takes the
# cores beside the step's threads (1 to 8), said on the start line.
# Usage: train_data_wait.sh RRFP_MM SOURCE_DIR WORKDIR
set -uo pipefail
BIN=$1 SRC=$2 W=$3
rm -rf "$W"; mkdir -p "$W"; cd "$W" || exit 1
fail() { echo "FAIL: $*"; for f in "$W"/*.txt; do echo "--- $f"; cat "$f"; done; exit 1; }
"$BIN" demo-data --out d --samples 64 --heldout 0 >/dev/null || fail "demo-data"
"$BIN" tokenizer train --vocab 300 --manifest d/train.json --out tok.json --quiet || fail "tokenizer"
"$BIN" pack --manifest d/train.json --images d/images --tokenizer tok.json --out shards >/dev/null 2>&1 || fail "pack"
S=(--set data.shards=shards --set data.tokenizer=tok.json --set model.vision_width=32
   --set model.vision_layers=1 --set model.vision_heads=2 --set model.text_width=64 --set model.text_layers=2
   --set model.text_heads=2 --set model.ffn_hidden=172 --set data.microbatches=2 --set optim.warmup=1
   --set train.steps=3 --set train.log_every=1 --set runtime.threads=1 --set data.workers=1 --set data.window=8 --set checkpoint.keep=0)
RRFP_TEST_READ_SLEEP_MS=150 "$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" --set train.run_dir=slow >slow.txt 2>&1 ||
    fail "train (slow reads)"
n=$(grep -c '^step .*| data wait [0-9]*%' slow.txt)
[ "$n" -ge 2 ] || fail "slow reads: $n step lines with 'data wait' (expected steps 2 and 3)"
grep -q 'data wait' <<<"$(grep '^step  *1/' slow.txt)" && fail "step 1 (the loader's warm-up) marked"
[ "$(grep -c 'for the loader: 1 decode thread (data.workers; ' slow.txt)" -eq 1 ] || fail "slow reads: not one warning naming data.workers"
# every marked step's metrics row agrees: data_wait_s over 2% of step_time_s
awk -F'[:,]' '{ for (i = 1; i < NF; i++) { if ($i == "\"step_time_s\"") t = $(i + 1); if ($i == "\"data_wait_s\"") w = $(i + 1); if ($i == "{\"step\"") s = $(i + 1) }
              if (s > 1 && w > 0.02 * t) n++ } END { exit n >= 2 ? 0 : 1 }' slow/metrics.jsonl || fail "metrics.jsonl: no step over 2% data wait"
# data.workers = 0: the cores this process may use beside its runtime.threads = 1, from 1 to 8
"$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" --set data.workers=0 --set train.steps=1 --set train.run_dir=auto >auto.txt 2>&1 ||
    fail "train (data.workers = 0)"
c=$(nproc); want=$((c - 1)); [ "$want" -lt 1 ] && want=1; [ "$want" -gt 8 ] && want=8
grep -q ", $want decode thread[s]* (data.workers = 0: automatic)," auto.txt ||
    fail "data.workers = 0 on $c cores with runtime.threads = 1: expected $want decode threads: $(grep '^train ' auto.txt)"
echo "data wait: ok ($n steps marked; automatic data.workers $want on $c cores)"
