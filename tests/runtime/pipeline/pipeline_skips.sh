#!/usr/bin/env bash
# pipeline_skips.sh — a sample whose frame is intact but whose image does not decode, under every layout:
# only the first pipeline stage decodes pixels, so the skip must travel with the step to the ranks that
# do not (docs/data.md, "Damaged samples"). The shard is written by tests/support/data_shard_tool.c from the shard
# format: a copy of pack's output whose sample in step 2 of the plan has its JPEG cut inside the
# entropy-coded data (header, frame checksum and index entry intact). Then, for one process, pp 2,
# pp 2 x tp 2 and dp 2 (the global step is the same: 2 microbatches):
#   - the run completes (it used to end with "pipeline protocol error ... got N bytes, expected M" at pp 2);
#   - the sample is named once in the job's output (shard, index, id and the decoder's reason), and the
#     metrics count it from step 2 on as every other skip;
#   - every layout trains the same plan: tokens, supervised targets and patches of each step equal one
#     process's; pp 2's losses equal one process's bit for bit (the pipeline is exact);
#   - with data.on_error = fatal, pp 2 ends with exit 1 naming the sample;
#   - pp 2 and pp 2 x tp 2 resumed from the checkpoint before the step (it replays the skip, naming the
#     sample once again) and from the one after it continue with the uninterrupted run's losses, bit for
#     bit;
#   - an evaluation (train.eval_every) over the same shards as held-out data, at one process and pp 2: the
#     same held-out loss, the sample named as often by both.
# Usage: pipeline_skips.sh RRFP_MM SOURCE_DIR DATA_SHARD_TOOL WORKDIR
set -uo pipefail
BIN=$1 SRC=$2 TOOL=$3 W=$4
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
MPI=(timeout -k 10 200 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
"$BIN" demo-data --out "$W/data" --samples 80 --heldout 4 >/dev/null || fail "demo-data"
"$BIN" tokenizer train --vocab 400 --manifest "$W/data/train.json" --out "$W/tok.json" --quiet || fail "tokenizer"
"$BIN" pack --manifest "$W/data/train.json" --images "$W/data/images" --tokenizer "$W/tok.json" --out "$W/packed" \
  --quiet >/dev/null 2>&1 || fail "pack"
TOKENS=512 M=2 PATCH=8 MIN=16 MAX=64 SEED=1 WINDOW=16
read -r FILE LOCAL ID < <("$TOOL" pick "$W/packed" 2 $TOKENS $M $PATCH $MIN $MAX $SEED $WINDOW) || fail "pick"
[ -n "$ID" ] || fail "no sample picked"
mkdir -p "$W/shards"
for f in "$W"/packed/*.rrs; do
  if [ "$f" = "$FILE" ]; then "$TOOL" damage-image "$f" "$W/shards/$(basename "$f")" "$LOCAL" >/dev/null || fail "damage"
  else cp "$f" "$W/shards/"; fi
done
SHARD="$W/shards/$(basename "$FILE")"
echo "damaged: $SHARD sample $LOCAL (id '$ID'), in step 2"
S=(--set data.shards="$W/shards" --set data.tokenizer="$W/tok.json" --set data.eval_shards= --set data.microbatches=$M
   --set data.microbatch_tokens=$TOKENS --set data.window=$WINDOW --set data.seed=$SEED --set model.patch=$PATCH
   --set data.min_patches=$MIN --set data.max_patches=$MAX --set data.on_error=skip
   --set model.text_layers=2 --set model.vision_layers=1 --set model.text_width=64 --set model.ffn_hidden=172
   --set model.vision_width=32 --set train.steps=3 --set optim.warmup=1 --set train.log_every=1
   --set train.checkpoint_every=1 --set checkpoint.keep=0 --set runtime.threads=1)
NAMED="data: $SHARD sample $LOCAL (id '$ID'): image 0: corrupt JPEG"
run() { # NAME NP [--set ...]: a run into $W/NAME, its output in $W/NAME.log
  local name=$1 np=$2
  shift 2
  if [ "$np" = 1 ]; then "$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" "$@" --set train.run_dir="$W/$name" >"$W/$name.log" 2>&1
  else "${MPI[@]}" -np "$np" "$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" "$@" --set train.run_dir="$W/$name" \
         >"$W/$name.log" 2>&1; fi || fail "$name: exit $?: $(grep -m3 -i "error" "$W/$name.log")"
  local n
  n=$(grep -c -F "$NAMED" "$W/$name.log")
  [ "$n" = 1 ] || fail "$name: the sample is named $n times, expected once: $(grep -F "id '$ID'" "$W/$name.log" | head -5)"
}
# COLUMN of metrics.jsonl by step (the last row of each step)
col() { /usr/bin/python3 -c '
import json, sys
last = {}
for l in open(sys.argv[1]):
    r = json.loads(l); last[r["step"]] = r[sys.argv[2]]
print(" ".join(str(last[s]) for s in sorted(last)))' "$W/$1/metrics.jsonl" "$2"; }

run one 1
run pp2 2 --set parallel.pp=2
run pp2tp2 4 --set parallel.pp=2 --set parallel.tp=2
run dp2 2 --set parallel.dp=2 --set data.microbatches=1
[ "$(col one skipped)" = "0 1 1" ] || fail "one process: skipped by step $(col one skipped), expected 0 1 1"
for r in pp2 pp2tp2 dp2; do
  for c in skipped tokens supervised patches; do
    [ "$(col $r $c)" = "$(col one $c)" ] || fail "$r: $c by step $(col $r $c), one process $(col one $c)"
  done
done
[ "$(col pp2 loss_hex)" = "$(col one loss_hex)" ] || fail "pp 2's losses $(col pp2 loss_hex) differ from one process's $(col one loss_hex)"
echo "one process, pp 2, pp 2 x tp 2, dp 2: completed, the sample named once, the same plan (tokens $(col one tokens))"
# data.on_error = fatal at pp 2: the job ends (exit 1) at that step, naming the sample and the way on
"${MPI[@]}" -np 2 "$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" --set data.on_error=fatal --set parallel.pp=2 \
  --set train.run_dir="$W/fatal" >"$W/fatal.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q -F "error: $SHARD sample $LOCAL (id '$ID'): image 0: corrupt JPEG" "$W/fatal.log" \
  && grep -q "HINT: data.on_error = skip" "$W/fatal.log" || fail "fatal at pp 2: exit $rc: $(grep -m3 error "$W/fatal.log")"
echo "data.on_error = fatal at pp 2: exit 1 naming the sample"
for r in pp2 pp2tp2; do
  np=2 par=(--set parallel.pp=2)
  [ $r = pp2tp2 ] && np=4 par=(--set parallel.pp=2 --set parallel.tp=2)
  for k in 1 2; do
    name=$r-from$k
    "${MPI[@]}" -np "$np" "$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" "${par[@]}" --set train.run_dir="$W/$name" \
      --resume "$W/$r/checkpoints/step-0000000$k" >"$W/$name.log" 2>&1 || fail "$name: exit $?: $(grep -m3 -i "error" "$W/$name.log")"
    n=$(grep -c -F "$NAMED" "$W/$name.log")
    [ "$n" = $((k == 1 ? 1 : 0)) ] || fail "$name: the sample is named $n times (resumed before step 2: once; after: never)"
    want=$(col $r loss_hex | cut -d' ' -f$((k + 1))-)
    got=$(col $name loss_hex)
    [ "$got" = "$want" ] || fail "$name: losses $got, the uninterrupted run's $want"
    [ "$(col $name skipped)" = "$(col $r skipped | cut -d' ' -f$((k + 1))-)" ] || fail "$name: skipped $(col $name skipped)"
  done
done
echo "pp 2 and pp 2 x tp 2 resumed before and after the skip: the uninterrupted losses bit for bit"
# the held-out stream (train.eval_every) through the pipeline: the same shards as held-out data, one training
# step (before the sample's) and one evaluation over every held-out sample
E=(--set train.steps=1 --set train.eval_every=1 --set data.eval_shards="$W/shards")
for r in one-eval pp2-eval; do
  np=1 par=()
  [ $r = pp2-eval ] && np=2 par=(--set parallel.pp=2)
  if [ $np = 1 ]; then "$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" "${E[@]}" --set train.run_dir="$W/$r" >"$W/$r.log" 2>&1
  else "${MPI[@]}" -np 2 "$BIN" train "$SRC/recipes/llava.ini" "${S[@]}" "${E[@]}" "${par[@]}" --set train.run_dir="$W/$r" \
         >"$W/$r.log" 2>&1; fi || fail "$r: exit $?: $(grep -m3 -i "error" "$W/$r.log")"
done
n1=$(grep -c -F "$NAMED" "$W/one-eval.log") n2=$(grep -c -F "$NAMED" "$W/pp2-eval.log")
[ "$n1" -ge 1 ] && [ "$n1" = "$n2" ] || fail "evaluation: the sample named $n1 times in one process, $n2 times at pp 2"
[ "$(col one-eval eval_loss)" = "$(col pp2-eval eval_loss)" ] \
  || fail "evaluation: held-out loss $(col pp2-eval eval_loss) at pp 2, $(col one-eval eval_loss) in one process"
echo "evaluation over the same shards: the sample named $n1 time(s) by both, held-out loss equal ($(col one-eval eval_loss))"
echo "pipeline skips: ok"
