#!/usr/bin/env bash
# train_loop.sh — the fine-tuner's loop (issue 23). Modes:
#   world    mpirun -np 2 with no parallel.* key: dp = world size / (pp x tp) = 2, stated on the first log
#            line; both replicas ran (rank-1.json "d": 1), and the losses equal one process training the
#            same global step (data.microbatches x 2) within 1e-6 relative (docs/parallel.md's bound)
#   epochs   train.epochs = 2 on a tiny shard set (80 records): the derived train.steps is printed and
#            used, every metrics row has "epoch" (samples seen / records), rising, and the last is 2 within
#            the estimate's slack (1.8 .. 2.3); the log lines show it; the synthetic source is refused
# Usage: train_loop.sh RRFP_MM SOURCE_DIR WORKDIR MODE
set -uo pipefail
BIN=$1 SRC=$2 W=$3 MODE=$4
rm -rf "$W"; mkdir -p "$W"; cd "$W" || exit 1
fail() { echo "FAIL ($MODE): $*"; for f in "$W"/*.txt; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
SYN="$SRC/recipes/test-synthetic.ini"
MPI=(timeout 300 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
tiny_data() {
  "$BIN" demo-data --out d --samples 80 --heldout 24 >/dev/null || fail "demo-data"
  "$BIN" tokenizer train --vocab 300 --manifest d/train.json --out tok.json --quiet || fail "tokenizer"
  "$BIN" pack --manifest d/train.json --images d/images --tokenizer tok.json --out shards >/dev/null 2>&1 || fail "pack"
  "$BIN" pack --manifest d/heldout.json --images d/images --tokenizer tok.json --out eval-shards >/dev/null 2>&1 || fail "pack eval"
}
SMALL=(--set data.shards=shards --set data.tokenizer=tok.json --set data.eval_shards=eval-shards --set model.vision_width=32
       --set model.vision_layers=1 --set model.vision_heads=2 --set model.text_width=64 --set model.text_layers=2
       --set model.text_heads=2 --set model.ffn_hidden=172 --set data.microbatches=2 --set optim.warmup=1
       --set runtime.threads=1 --set data.microbatch_tokens=512)

case "$MODE" in
world)
  C=(--set train.steps=4 --set optim.warmup=1 --set train.log_every=1)
  "${MPI[@]}" -np 2 "$BIN" train "$SYN" "${C[@]}" --set train.run_dir=run/world >w.txt 2>&1 || fail "mpirun -np 2 without parallel keys"
  head -1 w.txt | grep -q "layout pp 1 x tp 1 x dp 2 = 2 ranks (parallel.dp from the world size 2 / (pp 1 x tp 1))" \
    || fail "the first log line does not state the layout: $(head -1 w.txt)"
  grep -q '"d": 1' run/world/rank-1.json || fail "rank 1 is not replica 1: $(cat run/world/rank-1.json)"
  "$BIN" train "$SYN" "${C[@]}" --set data.microbatches=4 --set train.run_dir=run/one >o.txt 2>&1 || fail "one process"
  /usr/bin/python3 - run/one/metrics.jsonl run/world/metrics.jsonl <<'PY' || fail "losses differ"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 4, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("dp 2 from the world size against one process x 4 microbatches: max rel loss diff %.2e" % worst)
assert worst <= 1e-6, (a, b)
PY
  # a world the layout does not divide is refused, naming the ranks
  "${MPI[@]}" -np 3 "$BIN" train "$SYN" "${C[@]}" --set parallel.pp=2 --set train.run_dir=run/three >t.txt 2>&1
  [ $? -ne 0 ] && grep -q "needs 2 ranks" t.txt || fail "np 3 with pp 2 was not refused: $(grep error t.txt | head -2)"
  ;;
epochs)
  tiny_data
  "$BIN" train "$SRC/recipes/llava.ini" "${SMALL[@]}" --set train.epochs=2 --set train.run_dir=run/e --set train.log_every=1 >e.txt 2>&1 || fail "train.epochs"
  line=$(grep "^train.epochs = 2: 80 records" e.txt) || fail "no line deriving the steps"
  steps=$(echo "$line" | sed -n 's/.*train.steps = \([0-9]*\) .*/\1/p')
  [ -n "$steps" ] && [ "$steps" -gt 1 ] || fail "no derived step count in: $line"
  grep -q "steps 1..$steps of $steps" e.txt || fail "the run did not use the derived $steps steps"
  grep -q "| epoch [0-9.]*$" e.txt || fail "the log lines show no epoch"
  /usr/bin/python3 - run/e/metrics.jsonl "$steps" <<'PY' || fail "epochs in metrics"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == int(sys.argv[2]), len(rows)
ep = [r["epoch"] for r in rows]
assert all(b > a for a, b in zip(ep, ep[1:])), ep
assert 1.8 <= ep[-1] <= 2.3, ep
print("epochs: %d steps, epoch %.3f after step 1 .. %.3f at the end" % (len(rows), ep[0], ep[-1]))
PY
  "$BIN" train "$SYN" --set train.epochs=1 --set train.run_dir=run/syn >s.txt 2>&1
  [ $? -eq 2 ] && grep -q "train.epochs = 1: data.source = synthetic has no data set" s.txt || fail "epochs on the synthetic source: $(cat s.txt)"
  ;;
*) fail "unknown mode" ;;
esac
echo "train loop $MODE: ok"
