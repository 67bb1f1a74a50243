#!/usr/bin/env bash
# parallel.sh — tensor and data parallelism under mpirun on this machine, with `rrfp-mm train` itself
# (synthetic data, a small LLaVA sized so compute is not all overhead), every ratio against a baseline
# run in the same invocation:
#   1. TP coordination (leader-decides, docs/parallel.md "Tensor parallelism"): the per-rank lines the trainer prints at
#      the end under tp > 1 (choices per step, time sending / receiving them, peers' wait for the inputs
#      of the leader's choice, their share of the rank's step), pp 2 x tp 2 and pp 1 x tp 4, `ready bfw`
#      against `fixed 1f1b` (no choices sent), same steps;
#   2. pp 2 x tp 2 step time against pp 2 (tp 1) for fixed-sync 1f1b, fixed 1f1b, ready bfw, ready
#      zb-h1, each against `fixed-sync 1f1b` of its own layout too, with the trainer's bubble;
#   3. DP overlap: pp 2 x dp 2, interleaved-1f1b (2 chunks: the later chunk's buckets can start while
#      the first chunk's backward runs), parallel.dp_overlap = 1 against 0 (every bucket after the
#      whole backward), small buckets.
# Step time: the median of metrics.jsonl's step_time_s over the steps after the first (rank 0's clock,
# which waits for the step end's collectives, so it is the slowest rank's step). 2 cores shared by 4
# ranks: the absolute figures are oversubscribed; TP cannot speed anything up here (it adds ranks, not
# cores), so its ratio measures the cost of the split and its collectives, not a gain.
# Usage: bench/parallel.sh [BUILD_DIR] [STEPS]   (default build/, 8 steps)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-8}
BIN="$BUILD/rrfp-mm"
[ -x "$BIN" ] || { echo "no $BIN: build it first"; exit 1; }
W=$(mktemp -d /tmp/rrfp-bench-parallel.XXXXXX)
MPI="timeout 600 mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"
MODEL=(--set model.vision_width=64 --set model.vision_layers=2 --set model.vision_heads=4 --set model.text_width=256
       --set model.text_layers=4 --set model.text_heads=4 --set model.ffn_hidden=688 --set model.vocab=512
       --set data.microbatch_tokens=256 --set data.microbatches=8 --set train.steps="$STEPS" --set optim.warmup=1
       --set train.checkpoint_every=0 --set train.log_every=1000)
median_step() { /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print("%.4f %.3f" % (statistics.median(r["step_time_s"] for r in rows), statistics.median(r.get("bubble", 0) for r in rows)))
PY
}
run() { # NAME NP ARGS...: one run; prints "median_s bubble"
  local name=$1 np=$2; shift 2
  $MPI -np "$np" "$BIN" train recipes/test-synthetic.ini "${MODEL[@]}" "$@" --set train.run_dir="$W/$name" \
    >"$W/$name.log" 2>&1 || { echo "FAILED: $name"; tail -20 "$W/$name.log"; exit 1; }
  median_step "$W/$name"
}
echo "== 1. TP coordination (leader-decides), $STEPS steps, per rank (steps after the first)"
for lay in "2 2" "1 4"; do
  set -- $lay
  for mh in "ready bfw" "fixed 1f1b"; do
    set -- $lay $mh
    n="coord-pp$1tp$2-$3-$4"
    r=$(run "$n" $(($1 * $2)) --set parallel.pp="$1" --set parallel.tp="$2" --set parallel.mode="$3" --set parallel.hint="$4")
    echo "pp $1 x tp $2, $3 $4: step $(cut -d' ' -f1 <<<"$r") s (median)"
    grep "TP coordination" "$W/$n.log" | sed 's/^rrfp-mm: TP coordination: /  /' | sort
  done
done
echo
echo "== 2. pp 2 x tp 2 against pp 2 (tp 1), same recipe; ratio = step(pp2) / step(pp2 x tp2) (> 1: tp faster)"
printf "%-12s %-6s %10s %8s %12s %8s %8s %10s\n" mode hint "pp2 s" bubble "pp2xtp2 s" bubble ratio "vs fs-1f1b"
base_tp=""
for mh in "fixed-sync 1f1b" "fixed 1f1b" "ready bfw" "ready zb-h1"; do
  set -- $mh
  a=$(run "pp2-$1-$2" 2 --set parallel.pp=2 --set parallel.mode="$1" --set parallel.hint="$2")
  b=$(run "pp2tp2-$1-$2" 4 --set parallel.pp=2 --set parallel.tp=2 --set parallel.mode="$1" --set parallel.hint="$2")
  read -r ta ba <<<"$a"; read -r tb bb <<<"$b"
  [ -z "$base_tp" ] && base_tp=$tb
  printf "%-12s %-6s %10s %8s %12s %8s %8.3f %10.3f\n" "$1" "$2" "$ta" "$ba" "$tb" "$bb" \
    "$(echo "$ta / $tb" | bc -l)" "$(echo "$base_tp / $tb" | bc -l)"
done
echo
echo "== 3. DP overlap: pp 2 x dp 2, ready interleaved-1f1b (2 chunks), 0.05 MiB buckets"
for ov in 0 1; do
  r=$(run "dp-overlap$ov" 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.chunks=2 \
        --set parallel.hint=interleaved-1f1b --set parallel.mode=ready --set parallel.dp_bucket_mb=0.05 \
        --set data.microbatches=4 --set parallel.dp_overlap=$ov)
  t=$(cut -d' ' -f1 <<<"$r")
  [ "$ov" = 0 ] && t0=$t
  line=$(grep "data parallel:" "$W/dp-overlap$ov.log" | head -1 | sed 's/^rrfp-mm: //')
  printf "dp_overlap %d: step %s s, ratio %.3f against dp_overlap 0; %s\n" "$ov" "$t" "$(echo "$t0 / $t" | bc -l)" "$line"
done
rm -rf "$W"
