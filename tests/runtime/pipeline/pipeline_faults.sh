#!/usr/bin/env bash
# pipeline_faults.sh — fault injection on a pipelined run (mpirun -np 2, parallel.pp = 2, a checkpoint
# every step): ROUNDS faults, each either kill -9 of a random rank or SIGTERM to both ranks, each aimed at
# a point of the run's own progress drawn at random over the whole run, never at a wall-clock moment:
#   start-up     as soon as both ranks exist (MPI start-up, the resume's checkpoint load)
#   step K       a random delay after metrics.jsonl holds step K (K drawn over the steps left), so the
#                fault lands in step K's checkpoint or step K + 1's work
#   checkpoint   while a checkpoint is being written (its .step-*.tmp* folder exists)
# The run is made long enough to aim at by the test-only pauses of docs/reliability.md
# (RRFP_TEST_STEP_SLEEP_MS before each step, RRFP_TEST_CKPT_SLEEP_MS inside each checkpoint write); they
# change no number. A fault counts only when it landed: the round's job ended non-zero. Each restart
# is the same line, --resume auto: it resumes from the latest checkpoint (leftovers of the killed writers
# are cleaned at start), or starts fresh when the fault came before the first one. The final
# metrics.jsonl must hold the uninterrupted run's losses bit for bit (loss_hex, the last row of each
# step), and no step-* folder may ever be incomplete. The test fails when it cannot land ROUNDS faults
# within a bounded number of rounds.
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
STEPS=10 STEP_MS=150 CKPT_MS=60
export RRFP_TEST_STEP_SLEEP_MS=$STEP_MS RRFP_TEST_CKPT_SLEEP_MS=$CKPT_MS
# a round past LIMIT seconds is a hang, and fails; -k: a mpirun that ignores the SIGTERM is killed 10 s
# later (one that had lost a rank mid-start once printed "PMIX ERROR: UNREACHABLE" and never exited)
LIMIT=120
MPI=(timeout -k 10 $LIMIT mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1
     -x RRFP_TEST_STEP_SLEEP_MS -x RRFP_TEST_CKPT_SLEEP_MS -np 2)
ARGS=(--set train.steps=$STEPS --set optim.warmup=1 --set train.checkpoint_every=1 --set checkpoint.keep=2
      --set parallel.pp=2 --set train.log_every=1000)
# the losses by step: metrics.jsonl is appended to (docs/training.md), so a step redone after a fault has
# a row of the lost attempt and a later one of the resumed run; the last row of a step counts
hexes() { /usr/bin/python3 -c '
import json, sys
last = {}
for l in open(sys.argv[1]):
    r = json.loads(l); last[r["step"]] = r["loss_hex"]
print(" ".join(last[s] for s in sorted(last)))' "$1"; }
# the step of metrics.jsonl's last complete row (0 when none)
last_step() {
  local s
  s=$(tail -n 1 "$W/run/metrics.jsonl" 2>/dev/null | sed -n 's/^{"step":\([0-9]*\),.*}$/\1/p')
  echo "${s:-0}"
}
# this round's ranks: their command line holds the run folder, their environment their rank (mpirun's has
# none), and they descend from this round's job (a rank of the round before may still be on its way out)
ours() {
  local p=$1 n
  for n in 1 2 3 4 5 6 7 8; do
    p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null) || return 1
    [ "$p" = "$JOB" ] && return 0
    [ -n "$p" ] && [ "$p" -gt 1 ] || return 1
  done
  return 1
}
find_ranks() {
  RANKS=()
  local p r
  for p in $(pgrep -f -- "--set train.run_dir=$W/run "); do
    r=$(tr '\0' '\n' 2>/dev/null </proc/$p/environ | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && ours "$p" && RANKS[$r]=$p
  done
}
alive() { kill -0 "$JOB" 2>/dev/null; }
# wait (polling every 10 ms) until the condition holds or the job ended; returns 1 when it ended first
wait_for() { while ! "$@"; do alive || return 1; sleep 0.01; done; }
ranks_up() { find_ranks; [ ${#RANKS[@]} -eq 2 ]; }
reached() { [ "$(last_step)" -ge "$TARGET" ]; }
# a checkpoint folder being written by this round's ranks (its name ends with the writer's pid; a killed
# round's leftovers, removed when the next run starts, end with a dead one)
in_checkpoint() {
  local f p
  for f in "$W"/run/checkpoints/.step-*.tmp*; do
    [ -e "$f" ] || continue
    f=${f##*/.step-}
    [ $((10#${f%%.*})) -le $LAST_K ] || continue
    for p in "${RANKS[@]}"; do [ "${f##*.}" = "$p" ] && return 0; done
  done
  return 1
}

# the reference runs at full speed (the pauses change no number)
RRFP_TEST_STEP_SLEEP_MS=0 RRFP_TEST_CKPT_SLEEP_MS=0 "${MPI[@]}" "$BIN" train "$RECIPE" --set train.run_dir="$W/ref" "${ARGS[@]}" \
  >"$W/ref.txt" 2>&1 || fail "reference run"
REF=$(hexes "$W/ref/metrics.jsonl")
[ "$(echo $REF | wc -w)" -eq $STEPS ] || fail "the reference run has $(echo $REF | wc -w) losses, expected $STEPS"
faults=0 finished=0 rounds=0 missed=0 startup=0 midstep=0 inckpt=0
while [ $faults -lt "$ROUNDS" ] || [ $finished -eq 0 ]; do
  rounds=$((rounds + 1))
  [ $rounds -le $((ROUNDS * 4)) ] || fail "no end after $rounds rounds"
  # a missed fault (the run ended before it) is retried; many in a row is a broken aim, and fails
  [ $missed -le $((ROUNDS / 2 + 2)) ] || fail "$missed faults did not land (the run ended first) in $rounds rounds"
  if [ $finished -eq 1 ]; then rm -rf "$W/run"; finished=0; fi  # a finished run starts over for more faults
  # every round is the same job line, as a requeued job's: --resume auto resumes this run's newest
  # checkpoint, or starts fresh when there is none (a fault before the first one; its rows move aside)
  RES=(--resume auto)
  FROM=$(last_step)
  T0=$SECONDS
  "${MPI[@]}" "$BIN" train "$RECIPE" --set train.run_dir="$W/run" "${ARGS[@]}" "${RES[@]}" >"$W/round.txt" 2>&1 &
  JOB=$!
  what="(no fault: run to the end)" aimed=0
  # from a checkpoint of the last step (a fault landed after it) or the one before, no fault: the run
  # ends (and starts over), as start-up would be the only point left
  CK=$(ls -d "$W"/run/checkpoints/step-* 2>/dev/null | sort | tail -1)
  [ -n "$CK" ] && [ $((10#${CK##*step-})) -ge $((STEPS - 1)) ] && what="(no fault: resumed at step ${CK##*step-} of $STEPS)"
  if [ $faults -lt "$ROUNDS" ] && [ "$what" = "(no fault: run to the end)" ]; then
    # the fault: kill -9 of a random rank, or SIGTERM to both, which stops the run at the end of the
    # step after the one it lands in (the last step and its checkpoint are then a normal end): SIGTERM
    # needs two steps after its point, kill -9 one. LAST_K is the last step a point may follow.
    CKSTEP=0; [ -n "$CK" ] && CKSTEP=$((10#${CK##*step-}))
    if [ $((RANDOM % 2)) -eq 0 ] && [ $CKSTEP -le $((STEPS - 2)) ]; then fault=term LAST_K=$((STEPS - 2)); else fault=kill LAST_K=$((STEPS - 1)); fi
    # the point, once both ranks exist: start-up 1 in 5, a checkpoint write (of a step <= LAST_K) 1 in 5,
    # else step K drawn over FROM + 1 .. LAST_K (a row above FROM, the last row before this round, is
    # this round's; with no such step, a checkpoint write is the point, and with no checkpoint of a step
    # <= LAST_K ahead, start-up)
    r=$((RANDOM % 20))
    [ $r -ge 8 ] && [ $((FROM + 1)) -gt $LAST_K ] && r=4
    [ $r -ge 4 ] && [ $((CKSTEP + 1)) -gt $LAST_K ] && r=0
    if ! wait_for ranks_up; then
      point="start-up"
    elif [ $r -lt 4 ]; then
      point="start-up"; aimed=1
    elif [ $r -lt 8 ]; then
      point="checkpoint write"; wait_for in_checkpoint && aimed=1
    else
      TARGET=$((FROM + 1 + RANDOM % (LAST_K - FROM)))
      point="step $TARGET"
      if wait_for reached; then
        # a random moment inside what follows the row: its checkpoint, the next step's pause and work
        # (shorter than a step: STEP_MS + 2 CKPT_MS and the step's own work)
        sleep "0.$(printf %03d $((RANDOM % (STEP_MS + 2 * CKPT_MS))))"
        aimed=1
      fi
    fi
    if [ $aimed -eq 1 ] && alive && ranks_up; then
      if [ $fault = kill ]; then
        v=$((RANDOM % 2)); kill -9 "${RANKS[$v]}" 2>/dev/null && what="kill -9 rank $v at $point"
      else
        kill -TERM "${RANKS[0]}" "${RANKS[1]}" 2>/dev/null && what="SIGTERM both ranks at $point"
      fi
    else
      what="(missed: the run ended before $point)"
    fi
  fi
  wait "$JOB"; RC=$?
  # (a rank's kill -9 makes mpirun exit 137 too; only the elapsed time tells timeout's own kill)
  [ "$RC" -ne 124 ] && [ $((SECONDS - T0)) -lt $LIMIT ] \
    || fail "round $rounds hung ($what; exit $RC after $((SECONDS - T0)) s)"
  for d in "$W"/run/checkpoints/step-*; do [ -e "$d" ] || continue; [ -f "$d/state.json" ] || fail "incomplete $d"; done
  LAST=$(ls -d "$W"/run/checkpoints/step-* 2>/dev/null | sort | tail -1)
  case "$what" in
  "(no fault"*) [ "$RC" -eq 0 ] || fail "round $rounds: the run without a fault exited $RC" ;;
  "(missed"*) missed=$((missed + 1)) ;;
  *)
    if [ "$RC" -ne 0 ]; then
      faults=$((faults + 1))
      case "$point" in start-up) startup=$((startup + 1)) ;; checkpoint*) inckpt=$((inckpt + 1)) ;; *) midstep=$((midstep + 1)) ;; esac
    else
      what="$what (did not land: the run ended normally)"; missed=$((missed + 1))
    fi ;;
  esac
  echo "round $rounds: $what -> exit $RC, latest ${LAST##*/}"
  if [ "$RC" -eq 0 ]; then
    finished=1
    [ "$(hexes "$W/run/metrics.jsonl")" = "$REF" ] || fail "losses after $faults faults differ:
  faulted       $(hexes "$W/run/metrics.jsonl")
  uninterrupted $REF"
  fi
done
echo "$faults faults landed in $rounds rounds ($startup at start-up, $inckpt in a checkpoint write, $midstep after a step; $missed missed and retried), every finished run equal to the uninterrupted one bit for bit"
[ $faults -ge "$ROUNDS" ] || fail "only $faults faults landed"
echo "pipeline faults: ok"
