#!/usr/bin/env bash
# pipeline_kill.sh — a rank killed mid-step (SIGKILL) must not hang the job: every other rank ends
# non-zero within 30 s, a line names the lost rank, and the last checkpoint stays intact (it loads and
# training resumes from it in one process).
#   TP = 1 (pipeline_kill_rank): pp 2, the second stage (world rank 1) is killed.
#   TP = 2 (tp_kill_peer): pp 2 x tp 2, world rank 1 is TP rank 1 of the first stage, inside the TP
#   all-reduces of every split layer and waiting on its leader's choices in `ready` mode; the
#   checkpoint is TP shards with their slices, reassembled when one process resumes from it.
# Usage: pipeline_kill.sh RRFP_MM RECIPE WORKDIR [TP]
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 TP=${4:-1}
rm -rf "$W"; mkdir -p "$W"
fail() {
  echo "FAIL: $*"; echo "--- output"; cat "$W/out.txt"
  [ -n "${JOB:-}" ] && kill "$JOB" 2>/dev/null  # do not leave the training job running
  exit 1
}
MPI="mpirun --allow-run-as-root --oversubscribe"
timeout 300 $MPI -np $((2 * TP)) -x OMP_NUM_THREADS=1 "$BIN" train "$RECIPE" --set train.run_dir="$W/run" \
  --set train.steps=100000 --set train.checkpoint_every=2 --set checkpoint.keep=2 --set parallel.pp=2 \
  --set parallel.tp="$TP" --set parallel.mode=ready --set parallel.hint=bfw >"$W/out.txt" 2>&1 &
JOB=$!
# the kill is aimed at the run's progress: a checkpoint at step K or later, K drawn in 4..12 (the run has
# 100000 steps, so it is still running: checked), so the kill lands mid-run with a checkpoint behind it
# (checkpoint.keep = 2 prunes older ones, and a fast machine passes step K between two polls)
K=$((4 + RANDOM % 9))
echo "kill after the checkpoint of step $K or later"
ckpt_after_k() {
  local d n
  for d in "$W"/run/checkpoints/step-*; do
    [ -f "$d/state.json" ] || continue
    n=$((10#${d##*step-}))
    [ "$n" -ge $K ] && return 0
  done
  return 1
}
# no wall-clock bound: only the test's TIMEOUT ends a run that makes no progress
until ckpt_after_k; do
  kill -0 $JOB 2>/dev/null || fail "training ended before the kill"
  sleep 0.05
done
VICTIM=""
# this job's ranks only (their command line holds this test's run folder): other tests running at
# the same time train the same recipe
for p in $(pgrep -f -- "--set train.run_dir=$W/run "); do
  if grep -qx "OMPI_COMM_WORLD_RANK=1" <<<"$(tr '\0' '\n' </proc/$p/environ 2>/dev/null)"; then VICTIM=$p; fi
done
[ -n "$VICTIM" ] || fail "rank 1 not found"
T0=$(date +%s.%N)
kill -9 "$VICTIM"
wait $JOB; RC=$?
T1=$(date +%s.%N)
ELAPSED=$(echo "$T1 - $T0" | bc)
echo "job ended with exit $RC, $ELAPSED s after SIGKILL of rank 1 (pid $VICTIM)"
[ "$RC" -ne 0 ] || fail "job exited 0 after a rank was killed"
[ "$RC" -ne 124 ] || fail "job hung until the timeout"
[ "$(echo "$ELAPSED < 30" | bc)" = 1 ] || fail "took $ELAPSED s (limit 30)"
grep -Eq "rank 1 .*(exited on signal 9|Killed)|process rank 1" "$W/out.txt" || fail "no line names the lost rank 1"
grep -m2 -E "rank 1" "$W/out.txt"
# no half-written checkpoint: every step-* folder is complete and the newest one resumes
for d in "$W"/run/checkpoints/step-*; do
  [ -f "$d/state.json" ] || fail "incomplete checkpoint folder $d"
done
LATEST=$(ls -d "$W"/run/checkpoints/step-* | sort | tail -1)
STEP=$((10#${LATEST##*step-}))
"$BIN" train "$RECIPE" --set train.run_dir="$W/run" --set train.steps=100000 --set train.stop_at=$((STEP + 1)) \
  --set train.checkpoint_every=0 --resume "$LATEST" >>"$W/out.txt" 2>&1 || fail "cannot resume from $LATEST"
echo "resumed from $LATEST (step $STEP) in one process"
echo "kill at tp $TP: ok"
