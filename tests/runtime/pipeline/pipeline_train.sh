#!/usr/bin/env bash
# pipeline_train.sh — `mpirun -np P rrfp-mm train --set parallel.pp=P` against the single-process run
# of the same recipe: for each (hint, mode) the per-step losses (metrics JSONL, as hex floats) and the
# final checkpoint (parameters and AdamW moments, `rrfp-mm tensors diff`) must agree. The pipeline
# runs the same kernels on the same microbatches, so the result is usually bitwise equal (reported);
# the contract is fp32 round-off: in ready mode a rank may run the backwards of its microbatches in
# another order than one process (a later gradient message can complete first), which reorders the
# fp32 sums of weight gradients, and the global norm is a sum of per-rank partial sums. Bounds:
# losses 1e-6 relative; parameters and AdamW moments 1e-6 absolute + 1e-5 relative after 6 steps.
# Why 1e-6: a reordered sum changes a gradient element by ~M ulp of the tensor's gradient scale; AdamW
# normalises each element's step, so where a gradient element is near zero that noise moves the weight
# by a fraction of one step (lr = 3e-3); 1e-6 = lr / 3000 allows that and nothing like a wrong step
# (observed so far: at most 1.2e-7, in a bias whose gradient is near zero). Also: a pipeline checkpoint resumes in one process and a
# single-process checkpoint in the pipeline, both continuing the same loss curve; per-rank traces merge
# into an SVG with one row per rank, give the last step's durations (--durations) and every step's
# (--durations-dir, replayed by `rrfp-mm sim` as a run).
# Usage: pipeline_train.sh RRFP_MM RECIPE WORKDIR NP [--set key=value ...]
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 NP=$4
rm -rf "$W"; mkdir -p "$W"
MPI="timeout 120 mpirun --allow-run-as-root --oversubscribe"
COMMON=(--set train.steps=6 --set train.checkpoint_every=3 "${@:5}")
fail() { echo "FAIL: $*"; exit 1; }
losses() { grep -o '"loss_hex":"[^"]*"' "$1/metrics.jsonl"; }
close_losses() { /usr/bin/python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
a = [float.fromhex(json.loads(l)["loss_hex"]) for l in open(sys.argv[1])]
b = [float.fromhex(json.loads(l)["loss_hex"]) for l in open(sys.argv[2])]
sys.exit(0 if len(a) == len(b) and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)) else 1)
PY
}
"$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$W/single" >"$W/single.log" 2>&1 || fail "single-process run"
[ "$(losses "$W/single" | wc -l)" = 6 ] || fail "single-process metrics"
CASES=("fixed-sync 1f1b" "fixed 1f1b" "ready 1f1b" "fixed zb-h1" "ready zb-h1" "ready bf" "ready bfw" "ready gpipe" "lookahead 1f1b" "adaptive zb-h1")
# interleaved-1f1b: 2 chunks per rank (needs microbatches % NP == 0 and 2 NP <= text layers)
[ "$NP" = 2 ] && CASES+=("fixed-sync interleaved-1f1b 2" "ready interleaved-1f1b 2")
# zbv: 2 chunks per rank in a V (the trainer's layer split by pp_vstage; dualpipev needs M >= 2 NP, which
# the recipe's 2 microbatches are not: its pipeline is pipeline_equiv_vshape's)
[ "$NP" = 2 ] && CASES+=("fixed zbv 2" "adaptive zbv 2")
for hm in "${CASES[@]}"; do
  set -- $hm
  D="$W/pp-$1-$2"
  $MPI -np "$NP" "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$D" --set parallel.pp="$NP" \
    --set parallel.mode="$1" --set parallel.hint="$2" --set parallel.chunks="${3:-1}" --set runtime.trace=1 >"$D.log" 2>&1 \
    || { cat "$D.log"; fail "pp=$NP $1 $2 failed"; }
  close_losses "$W/single" "$D" || fail "pp=$NP $1 $2: losses differ from one process"
  "$BIN" tensors diff "$W/single/checkpoints/step-00000006" "$D/checkpoints/step-00000006" --quiet \
    --rtol 1e-5 --atol 1e-6 >"$D.diff" 2>&1 || { cat "$D.diff"; fail "pp=$NP $1 $2: parameters or moments differ"; }
  grep -q "bubble" "$D.log" || fail "no bubble in the step log"
  if diff <(losses "$W/single") <(losses "$D") >/dev/null && \
     "$BIN" tensors diff "$W/single/checkpoints/step-00000006" "$D/checkpoints/step-00000006" --quiet >/dev/null 2>&1; then
    how="bitwise equal"; else how="equal within the bounds ($(tail -1 "$D.diff"))"; fi
  echo "pp=$NP $1 $2: 6 losses, parameters and moments $how to one process"
done
# layouts: pipeline checkpoint -> one process, and one-process checkpoint -> pipeline
D="$W/resume-a"
$MPI -np "$NP" "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$D" --set train.stop_at=3 \
  --set parallel.pp="$NP" >"$D.log" 2>&1 || fail "pipeline half run"
"$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$D" --resume latest >>"$D.log" 2>&1 || fail "resume in one process"
close_losses "$W/single" "$D" || fail "pp=$NP checkpoint resumed in one process: losses differ"
D="$W/resume-b"
"$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$D" --set train.stop_at=3 >"$D.log" 2>&1 || fail "half run"
$MPI -np "$NP" "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$D" --set parallel.pp="$NP" \
  --resume latest >>"$D.log" 2>&1 || fail "resume in the pipeline"
close_losses "$W/single" "$D" || fail "one-process checkpoint resumed with pp=$NP: losses differ"
echo "resume across layouts (pp=$NP <-> 1): same loss curve"
# traces -> SVG
"$BIN" trace "$W"/pp-ready-bfw/trace-rank*.json --svg "$W/timeline.svg" || fail "trace merge"
rows=$(grep -c 'class="row"' "$W/timeline.svg")
[ "$rows" = "$NP" ] || fail "SVG has $rows rows, expected $NP"
# a real run's trace -> simulator duration file -> replay under another mode and hint
"$BIN" trace "$W"/pp-ready-bfw/trace-rank*.json --durations "$W/durations.json" --latency 0.05 >"$W/dur.log" \
  || fail "trace --durations"
grep -q "P=$NP M=" "$W/dur.log" || fail "durations: $(cat "$W/dur.log")"
grep -q '"makespan"' <<<"$("$BIN" sim --durations "$W/durations.json" --mode fixed-sync --hint 1f1b --json)" \
  || fail "sim cannot replay the measured durations"
# every step of the run as its own duration file (assigned by the runtime's step spans), replayed as a run
"$BIN" trace "$W"/pp-ready-bfw/trace-rank*.json --durations-dir "$W/steps" --latency 0.05 >"$W/steps.log" \
  || fail "trace --durations-dir: $(cat "$W/steps.log")"
steps_run=$(losses "$W/pp-ready-bfw" | wc -l)
step_files=("$W"/steps/step-*.json)
[ "${#step_files[@]}" = "$steps_run" ] && [ "$steps_run" = 6 ] \
  || fail "--durations-dir wrote ${#step_files[@]} files for $steps_run steps run: $(cat "$W/steps.log")"
grep -q "^durations of $steps_run steps .*: measured steps" "$W/steps.log" || fail "durations-dir: $(cat "$W/steps.log")"
[ "$(grep -c "^step [0-9]*: P=$NP M=" "$W/steps.log")" = "$steps_run" ] || fail "durations-dir: $(cat "$W/steps.log")"
cmp -s "${step_files[-1]}" "$W/durations.json" || fail "the last step's file differs from trace --durations' output"
run_args=()
for f in "${step_files[@]}"; do run_args+=(--durations "$f"); done
"$BIN" sim "${run_args[@]}" --mode adaptive --hint bfw --json >"$W/run.json" 2>"$W/run.err" \
  || fail "sim of the run's step files: $(cat "$W/run.err")"
/usr/bin/python3 -c "
import json, sys
o = json.load(open(sys.argv[1]))
assert o['steps'] == int(sys.argv[2]) and len(o['step_makespans']) == o['steps'], o" "$W/run.json" "$steps_run" \
  || fail "sim --json of the run: $(cat "$W/run.json")"
echo "trace --durations-dir: $steps_run step files, the last one --durations' file byte for byte, replayed as a run"
# errors: wrong rank count for a layout set in full (with parallel.dp unset, mpirun -np 2 at pp 1 trains
# dp 2: train_loop_world), and pp > 1 without mpirun
out=$($MPI -np 2 "$BIN" train "$RECIPE" "${COMMON[@]}" --set parallel.dp=1 --set train.run_dir="$W/bad" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "parallel.pp = 1" <<<"$out" || fail "mpirun -np 2 with pp=1 dp=1: rc $rc, $out"
out=$("$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$W/bad" --set parallel.pp=2 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "needs 2 ranks, but 1 process was started" <<<"$out" || fail "pp=2 without mpirun: rc $rc, $out"
echo "pipeline train: ok"
