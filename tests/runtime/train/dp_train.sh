#!/usr/bin/env bash
# dp_train.sh — `mpirun -np PP*DP rrfp-mm train --set parallel.dp=DP --set parallel.pp=PP` against ONE
# process training the same global step: the synthetic source gives replica d microbatches d, d + DP,
# ... of the step's DP x M, so one process with DP x M microbatches trains on exactly the union.
# Compared: the per-step losses (metrics JSONL, hex floats) and the final checkpoint (parameters and
# AdamW moments, `rrfp-mm tensors diff`); then checkpoint resume across layouts both ways.
#
# Tolerance (derived, not tuned): the DP step computes the same per-microbatch gradients with the same
# kernels; only the order of the fp32 sums over microbatches changes (one process: ((g0 + g1) + g2) +
# g3; dp 2: (g0 + g2) + (g1 + g3), the bucket all-reduce adding the replicas' partial sums), and the
# loss sum is reordered in double. A reordered sum of M fp32 terms differs by at most ~(M - 1) ulp of
# the largest partial sum, i.e. ~2e-7 relative for M = 4; after the gradient norm and AdamW (which
# normalises each element's step) that moves a weight by a fraction of lr x 2e-7 per step except where
# a gradient element is ~0 (then up to a fraction of one step, lr = 3e-3 -> well under 1e-6 after 6
# steps in practice). Bounds: losses 1e-6 relative; parameters and moments 1e-6 absolute + 1e-5
# relative after 6 steps (the same as tests/runtime/pipeline/pipeline_train.sh, whose reorderings are of the same kind).
# The step dump (train.dump_step = 1, each case against the one process's): replica 0's weights bitwise
# (the same initialisation), every microbatch file m x DP + d bitwise (the same data and the same
# forward), the gradients within 1e-6 + 1e-5 relative (the reordered fp32 sum above: ~3 ulp of the
# largest partial sum, which for this model's gradients, |g| <= ~2, stays below 1e-6 where terms cancel).
# The observed differences are printed.
# Usage: dp_train.sh RRFP_MM RECIPE WORKDIR PP DP M [--set key=value ...]   (M: microbatches per replica)
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 PP=$4 DP=$5 M=$6
NP=$((PP * DP))
rm -rf "$W"; mkdir -p "$W"
MPI="timeout 150 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"
COMMON=(--set train.steps=6 --set train.checkpoint_every=3 "${@:7}")
ONE=(--set data.microbatches=$((DP * M)))
PAR=(--set data.microbatches="$M" --set parallel.dp="$DP" --set parallel.pp="$PP")
fail() { echo "FAIL: $*"; exit 1; }
losses() { grep -o '"loss_hex":"[^"]*"' "$1/metrics.jsonl"; }
STEPS=6 LAYOUT="pp=$PP dp=$DP"
. "$(dirname "$0")/layout_lib.sh"
"$BIN" train "$RECIPE" "${COMMON[@]}" "${ONE[@]}" --set train.dump_step=1 --set train.run_dir="$W/one" >"$W/one.log" 2>&1 \
  || { cat "$W/one.log"; fail "one-process run"; }
CASES=("ready 1f1b 1 4" "ready 1f1b 1 0.01")
[ "$PP" -gt 1 ] && CASES=("fixed-sync 1f1b 1 0.01" "fixed 1f1b 1 4" "ready bfw 1 0.01" "ready zb-h1 1 0.01"
                          "ready interleaved-1f1b 2 0.01")
for c in "${CASES[@]}"; do
  set -- $c
  D="$W/dp-$1-$2-$3-$4"
  $MPI -np "$NP" "$BIN" train "$RECIPE" "${COMMON[@]}" "${PAR[@]}" --set parallel.mode="$1" --set parallel.hint="$2" \
    --set parallel.chunks="$3" --set parallel.dp_bucket_mb="$4" --set train.dump_step=1 --set train.run_dir="$D" \
    >"$D.log" 2>&1 || { cat "$D.log"; fail "pp=$PP dp=$DP $c failed"; }
  dl=$(close_losses "$W/one" "$D") || fail "pp=$PP dp=$DP $c: losses differ from one process (max rel $dl)"
  "$BIN" tensors diff "$W/one/checkpoints/step-00000006" "$D/checkpoints/step-00000006" --quiet \
    --rtol 1e-5 --atol 1e-6 >"$D.diff" 2>&1 || { cat "$D.diff"; fail "pp=$PP dp=$DP $c: parameters or moments differ"; }
  line=$(grep "data parallel:" "$D.log") || fail "pp=$PP dp=$DP $c: no data-parallel line in the log"
  # interleaved: chunk 1's gradients are final while chunk 0 still runs: its buckets start early
  if [ "$3" = 2 ]; then
    early=$(sed -n 's/.*, \([0-9]*\) started while.*/\1/p' <<<"$line")
    [ "${early:-0}" -gt 0 ] || fail "interleaved: no bucket started before the backward ended: $line"
  fi
  # the step dump: the union of the replicas' files is the one-process dump
  "$BIN" tensors diff "$W/one/dump-1" "$D/dump-1" --files weights --quiet >"$D.ddiff" 2>&1 \
    || { cat "$D.ddiff"; fail "pp=$PP dp=$DP $c: the dumped weights differ"; }
  "$BIN" tensors diff "$W/one/dump-1" "$D/dump-1" --files grads --quiet --rtol 1e-5 --atol 1e-6 >"$D.ddiff" 2>&1 \
    || { cat "$D.ddiff"; fail "pp=$PP dp=$DP $c: the dumped gradients differ"; }
  gd=$(tail -1 "$D.ddiff")
  for ((m = 0; m < DP * M; m++)); do
    mkdir -p "$D/mb$m"; cp "$D"/dump-1/microbatch-$m.*safetensors "$D/mb$m/" || fail "pp=$PP dp=$DP $c: no microbatch $m in the dump"
    "$BIN" tensors diff "$W/one/dump-1/microbatch-$m.safetensors" "$D/mb$m" --quiet >"$D.ddiff" 2>&1 \
      || { cat "$D.ddiff"; fail "pp=$PP dp=$DP $c: microbatch $m of the dump differs"; }
  done
  n=$(ls "$D"/dump-1/microbatch-*.safetensors | sed 's/.*microbatch-\([0-9]*\)\..*/\1/' | sort -u | wc -l)
  [ "$n" = $((DP * M)) ] || fail "pp=$PP dp=$DP $c: the dump holds $n microbatches, expected $((DP * M))"
  cmp -s <(grep -o '"n_supervised": [0-9]*, "loss": [^,]*' "$W/one/dump-1/step.json") \
    <(grep -o '"n_supervised": [0-9]*, "loss": [^,]*' "$D/dump-1/step.json") || fail "pp=$PP dp=$DP $c: step.json differs"
  echo "pp=$PP dp=$DP $1 $2 chunks $3 bucket $4 MiB: 6 losses (max rel diff $dl), $(tail -1 "$D.diff"); dump: $gd"
  echo "  $line"
done
# checkpoints across layouts: dp checkpoint -> one process, one-process checkpoint -> dp
resume_across_layouts 3 1
echo "resume across layouts (pp=$PP dp=$DP <-> one process): same loss curve"
# a different global batch is another run: the recipe hash refuses it
out=$($MPI -np "$NP" "$BIN" train "$RECIPE" "${COMMON[@]}" "${PAR[@]}" --set data.microbatches=$((M + 1)) \
  --set train.run_dir="$W/resume-a" --resume latest 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "recipe hash" <<<"$out" || fail "another global batch resumed: rc $rc, $out"
echo "dp train: ok"
