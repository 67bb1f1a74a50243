#!/usr/bin/env bash
# pipeline_faults.sh — fault injection on a pipelined run (mpirun -np 2, parallel.pp = 2, a checkpoint
# every step): at least ROUNDS times, at a random moment, either kill -9 a random rank or SIGTERM both
# ranks; each restart resumes from the latest checkpoint (leftovers of the killed writers are cleaned at
# start). The final metrics.jsonl must hold the uninterrupted run's losses bit for bit (loss_hex), and
# no step-* folder may ever be incomplete.
# Usage: pipeline_faults.sh RRFP_MM RECIPE WORKDIR [ROUNDS] [SEED]
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 ROUNDS=${4:-10} SEED=${5:-$$}
RANDOM=$SEED
rm -rf "$W"; mkdir -p "$W"
echo "seed $SEED"
fail() {
  echo "FAIL: $*"; for f in "$W"/*.txt; do echo "--- $f"; tail -20 "$f"; done
  [ -n "${JOB:-}" ] && kill -9 "$JOB" 2>/dev/null
  pkill -9 -f -- "--set train.run_dir=$W/" 2>/dev/null  # ranks that a hung mpirun left behind
  exit 1
}
STEPS=10
# a round past LIMIT seconds is a hang, and fails; -k: a mpirun that ignores the SIGTERM is killed 10 s
# later (one that had lost a rank mid-start once printed "PMIX ERROR: UNREACHABLE" and never exited)
LIMIT=120
MPI=(timeout -k 10 $LIMIT mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np 2)
ARGS=(--set train.steps=$STEPS --set optim.warmup=1 --set train.checkpoint_every=1 --set checkpoint.keep=2
      --set parallel.pp=2 --set train.log_every=1000)
hexes() { sed -n 's/.*"loss_hex": *"\([^"]*\)".*/\1/p' "$1" | tr '\n' ' '; }
"${MPI[@]}" "$BIN" train "$RECIPE" --set train.run_dir="$W/ref" "${ARGS[@]}" >"$W/ref.txt" 2>&1 || fail "reference run"
REF=$(hexes "$W/ref/metrics.jsonl")
kills=0 finished=0 rounds=0
while [ $kills -lt "$ROUNDS" ] || [ $finished -eq 0 ]; do
  rounds=$((rounds + 1))
  [ $rounds -le $((ROUNDS * 4)) ] || fail "no progress after $rounds rounds"
  if [ $finished -eq 1 ]; then rm -rf "$W/run"; finished=0; fi  # a finished run starts over for more faults
  RES=()
  ls "$W"/run/checkpoints/step-*/state.json >/dev/null 2>&1 && RES=(--resume latest)
  T0=$SECONDS
  "${MPI[@]}" "$BIN" train "$RECIPE" --set train.run_dir="$W/run" "${ARGS[@]}" "${RES[@]}" >"$W/round.txt" 2>&1 &
  JOB=$!
  if [ $kills -lt "$ROUNDS" ]; then
    sleep "$((RANDOM % 3)).$((RANDOM % 10))"
    RANKS=()
    for p in $(pgrep -f -- "--set train.run_dir=$W/run "); do
      r=$(tr '\0' '\n' 2>/dev/null </proc/$p/environ | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
      [ -n "$r" ] && RANKS[$r]=$p
    done
    if [ ${#RANKS[@]} -eq 2 ]; then
      if [ $((RANDOM % 2)) -eq 0 ]; then
        v=$((RANDOM % 2)); kill -9 "${RANKS[$v]}" 2>/dev/null && what="kill -9 rank $v"
      else
        kill -TERM "${RANKS[0]}" "${RANKS[1]}" 2>/dev/null && what="SIGTERM both ranks"
      fi
      kills=$((kills + 1))
    else
      what="(ranks not up or already done)"
    fi
  else
    what="(no fault: run to the end)"
  fi
  wait "$JOB"; RC=$?
  [ "$RC" -ne 124 ] && [ $((SECONDS - T0)) -lt $LIMIT ] || fail "round $rounds hung ($what; exit $RC after $((SECONDS - T0)) s)"
  N=$(ls -d "$W"/run/checkpoints/step-* 2>/dev/null | wc -l)
  for d in "$W"/run/checkpoints/step-*; do [ -e "$d" ] || continue; [ -f "$d/state.json" ] || fail "incomplete $d"; done
  LAST=$(ls -d "$W"/run/checkpoints/step-* 2>/dev/null | sort | tail -1)
  echo "round $rounds: $what -> exit $RC, latest ${LAST##*/}"
  if [ "$RC" -eq 0 ]; then
    finished=1
    [ "$(hexes "$W/run/metrics.jsonl")" = "$REF" ] || fail "losses after $kills faults differ:
  faulted       $(hexes "$W/run/metrics.jsonl")
  uninterrupted $REF"
  fi
done
echo "$kills faults in $rounds rounds, every finished run equal to the uninterrupted one bit for bit"
echo "pipeline faults: ok"
