#!/usr/bin/env bash
# tp_train.sh — gradient equivalence of tensor parallelism (docs/parallel.md "Tensor parallelism"): `mpirun -np PP*TP*DP
# rrfp-mm train --set parallel.pp=PP --set parallel.tp=TP --set parallel.dp=DP` against ONE process
# training the same global step (the synthetic source gives replica d microbatches d, d + DP, ... of
# the step's DP x M, so one process with DP x M microbatches trains on exactly the union), for several
# hints x modes. Compared, per case:
#   - the loss of each of S = 3 steps (metrics JSONL, hex floats);
#   - every global gradient of step 1: the step-1 checkpoint's AdamW first moments m = (1 - beta1) g
#     (optim.grad_clip = 0, so m is the unclipped step gradient times 0.1, exactly as one process
#     computes it), assembled from the TP shards by global name (`rrfp-mm tensors diff`);
#   - the step dump (train.dump_step = 1): the per-rank grads files and each microbatch's logits, whose
#     vocabulary slices the reader reassembles into the one-process tensors; under DP replica 0 writes
#     the weights and gradients and replica d its microbatches as m x DP + d, the one-process names.
# With PP > 1 also `adaptive` (the recipes' default) under 1f1b (its plan may pick ready, lookahead or the
# hint's sequence) and zb-h1 (split backward): step 1 has no estimates (lookahead), steps 2 and 3 run the
# plan's choice; the same comparisons hold whatever it chose. Each TP index's pipeline group plans on its
# own cost model and the stage runs its TP leader's choice (broadcast over the TP group): the stage-0
# ranks of every TP index print each change of mode ("adaptive: step N runs MODE"), so each such line
# must appear a multiple of TP times (a peer group that ran its own plan would add a line of its own).
# tp_dispatch_np4 checks the same with plans made to differ.
# Then checkpoint resume across layouts: this layout -> one process, one process -> this layout, and
# this layout -> pp 1 x tp 2 (another split), each continuing the one-process loss curve.
#
# Tolerances (derived; the observed differences are printed):
#   TP reorders fp32 sums: a row-parallel linear adds TP partial dot products of K/TP terms (the
#   all-reduce), column-parallel input gradients likewise, and the vocabulary-parallel cross-entropy
#   works in double. A reordered fp32 sum of n terms moves by at most ~n u sum|terms| (u = 6e-8); with
#   the n ~ 500 positions a weight gradient sums over, that is ~3e-5 of sum|terms|, and the forward's
#   reordered activations propagate errors of the same order. Elementwise bound |a - b| <= atol +
#   rtol |b| with rtol = 1e-4 (3x that, for well-conditioned elements) and atol covering elements
#   whose terms cancel (|b| << sum|terms|): atol = 1e-7 on g (1e-8 on m = 0.1 g), at most 2.5e-4 of
#   every tensor's gradient scale (the tensor-wise max |g| of this model's step 1 runs from 3.5e-4,
#   text attn q, to 2.0, projector.2.bias). The losses are a forward sum reduced in double: 1e-6
#   relative (observed: bitwise equal or ~7e-8).
#   Parameters after several AdamW steps are NOT compared elementwise: AdamW's update
#   m^/(sqrt(v^) + eps) is ~sign(g) and, where |g| is within round-off of 0 (or of eps = 1e-8), a
#   round-off change of g moves the update by up to ~2 lr; the loss curve checks the steps instead.
# Usage: tp_train.sh RRFP_MM RECIPE WORKDIR PP TP DP M [--set key=value ...]   (M: microbatches per replica)
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 PP=$4 TP=$5 DP=$6 M=$7
NP=$((PP * TP * DP))
rm -rf "$W"; mkdir -p "$W"
MPI="timeout 150 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"
COMMON=(--set train.steps=3 --set optim.warmup=1 --set optim.grad_clip=0 --set train.checkpoint_every=1
        --set checkpoint.keep=0 --set train.log_every=1 "${@:8}")
DUMP=(--set train.dump_step=1)
ONE=(--set data.microbatches=$((DP * M)))
PAR=(--set data.microbatches="$M" --set parallel.dp="$DP" --set parallel.pp="$PP" --set parallel.tp="$TP")
fail() { echo "FAIL: $*"; exit 1; }
STEPS=3 LAYOUT="pp=$PP tp=$TP dp=$DP"
. "$(dirname "$0")/layout_lib.sh"
"$BIN" train "$RECIPE" "${COMMON[@]}" "${ONE[@]}" "${DUMP[@]}" --set train.run_dir="$W/one" >"$W/one.log" 2>&1 \
  || { cat "$W/one.log"; fail "one-process run"; }
CASES=("fixed-sync 1f1b 1" "fixed 1f1b 1" "ready bfw 1" "ready zb-h1 1")
[ "$PP" -gt 1 ] && CASES+=("ready 1f1b 1" "ready interleaved-1f1b 2" "fixed interleaved-1f1b 2" "adaptive 1f1b 1"
                          "adaptive zb-h1 1")
# adaptive: the mode lines of the stage-0 ranks (one per TP index and replica) agree by TP group
adaptive_modes() { /usr/bin/python3 - "$1" "$2" <<'PY'
import collections, re, sys
lines = re.findall(r"adaptive: step (\d+) runs (\S+)", open(sys.argv[1]).read())
tp = int(sys.argv[2])
c = collections.Counter(lines)
odd = [k for k, n in c.items() if n % tp]
print(" ".join("step %s %s x%d" % (k[0], k[1], n) for k, n in sorted(c.items())))
sys.exit(0 if lines and ("1", "lookahead") in c and not odd else 1)
PY
}
for c in "${CASES[@]}"; do
  set -- $c
  D="$W/tp-$1-$2-$3"
  $MPI -np "$NP" "$BIN" train "$RECIPE" "${COMMON[@]}" "${PAR[@]}" "${DUMP[@]}" --set parallel.mode="$1" \
    --set parallel.hint="$2" --set parallel.chunks="$3" --set train.run_dir="$D" >"$D.log" 2>&1 \
    || { cat "$D.log"; fail "pp=$PP tp=$TP dp=$DP $c failed"; }
  dl=$(close_losses "$W/one" "$D") || fail "pp=$PP tp=$TP dp=$DP $c: losses differ from one process (max rel $dl)"
  "$BIN" tensors diff "$W/one/checkpoints/step-00000001" "$D/checkpoints/step-00000001" --files optimizer --quiet \
    --rtol 1e-4 --atol 1e-8 >"$D.diff" 2>&1 || { cat "$D.diff"; fail "pp=$PP tp=$TP dp=$DP $c: step-1 gradients (AdamW m) differ"; }
  "$BIN" tensors diff "$W/one/dump-1" "$D/dump-1" --files grads --quiet --rtol 1e-4 --atol 1e-7 >"$D.gdiff" 2>&1 \
    || { cat "$D.gdiff"; fail "pp=$PP tp=$TP $c: the dumped gradients differ"; }
  "$BIN" tensors diff "$W/one/dump-1" "$D/dump-1" --files weights --quiet >"$D.wdiff" 2>&1 \
    || { cat "$D.wdiff"; fail "pp=$PP tp=$TP $c: the dumped initial weights differ (init must not depend on the layout)"; }
  # each microbatch's files (inputs from the first stage, logits by vocabulary slice from the last),
  # every microbatch of the global step (DP x M)
  for ((m = 0; m < DP * M; m++)); do
    mkdir -p "$D/mb$m"; cp "$D"/dump-1/microbatch-$m.*.safetensors "$D/mb$m/"
    "$BIN" tensors diff "$W/one/dump-1/microbatch-$m.safetensors" "$D/mb$m" --quiet --rtol 1e-5 --atol 1e-6 \
      >"$D.mdiff" 2>&1 || { cat "$D.mdiff"; fail "pp=$PP tp=$TP $c: microbatch $m of the dump differs"; }
  done
  n=$(ls "$D"/dump-1/microbatch-*.safetensors | sed 's/.*microbatch-\([0-9]*\)\..*/\1/' | sort -u | wc -l)
  [ "$n" = $((DP * M)) ] || fail "pp=$PP tp=$TP dp=$DP $c: the dump holds $n microbatches, expected $((DP * M))"
  extra=", dump: $(tail -1 "$D.gdiff" | sed 's/tensors diff: //')"
  if [ "$1" = adaptive ]; then
    am=$(adaptive_modes "$D.log" "$TP") || { cat "$D.log"; fail "pp=$PP tp=$TP dp=$DP $c: the TP ranks' adaptive modes differ ($am)"; }
    extra="$extra, modes: $am"
  fi
  echo "pp=$PP tp=$TP dp=$DP $c: 3 losses (max rel diff $dl), step-1 m: $(tail -1 "$D.diff" | sed 's/tensors diff: //')$extra"
done
# checkpoints across layouts: this layout -> one process, one process -> this layout, this -> pp1 x tp2
resume_across_layouts 2
msg="resume across layouts (pp=$PP tp=$TP dp=$DP <-> one process): same loss curve (max rel $dl, $dl2)"
if [ "$DP" = 1 ] && [ "$PP$TP" != 12 ]; then
  D="$W/resume-c"
  $MPI -np "$NP" "$BIN" train "$RECIPE" "${COMMON[@]}" "${PAR[@]}" --set train.stop_at=2 --set train.run_dir="$D" \
    >"$D.log" 2>&1 || { cat "$D.log"; fail "half run under the layout"; }
  $MPI -np 2 "$BIN" train "$RECIPE" "${COMMON[@]}" "${ONE[@]}" --set parallel.tp=2 --set train.run_dir="$D" \
    --resume latest >>"$D.log" 2>&1 || { cat "$D.log"; fail "the layout's checkpoint resumed under pp 1 x tp 2"; }
  dl=$(close_losses "$W/one" "$D") || fail "pp=$PP tp=$TP checkpoint resumed under pp 1 x tp 2: losses differ (max rel $dl)"
  msg="$msg; -> pp 1 x tp 2: same (max rel $dl)"
fi
echo "$msg"
echo "tp train: ok"
