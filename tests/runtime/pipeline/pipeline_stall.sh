#!/usr/bin/env bash
# pipeline_stall.sh — a stopped rank is seen, not silent: mpirun -np 2, parallel.pp = 2,
# runtime.stall_warn_s = 2; rank 1 is stopped (SIGSTOP) until rank 0's stderr warns, naming what it waits for
# (rank 1 in the pipeline transport, or the group of a collective), at most 120 s, then continued (SIGCONT), and
# the run must finish normally. (A fixed 6 s stop left rank 0 4 s to notice on a loaded machine.) The stop
# is aimed at the run's progress (after its
# second step), and the test-only RRFP_TEST_STEP_SLEEP_MS (docs/reliability.md) makes the 14 steps last
# at least 2.8 s on any machine, so the stop lands while steps are still ahead (checked).
# Usage: pipeline_stall.sh RRFP_MM RECIPE WORKDIR
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3
rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; echo "--- output"; cat "$W/out.txt"; [ -n "${VICTIM:-}" ] && kill -CONT "$VICTIM" 2>/dev/null; [ -n "${JOB:-}" ] && kill "$JOB" 2>/dev/null; exit 1; }
STEPS=14
export RRFP_TEST_STEP_SLEEP_MS=200
timeout 300 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x RRFP_TEST_STEP_SLEEP_MS -np 2 "$BIN" train "$RECIPE" \
  --set train.run_dir="$W/run" --set train.steps=$STEPS --set optim.warmup=1 --set parallel.pp=2 \
  --set runtime.stall_warn_s=2 >"$W/out.txt" 2>&1 &
JOB=$!
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
for i in $(seq 1 600); do [ "$(lines "$W/run/metrics.jsonl")" -ge 2 ] && break; kill -0 $JOB 2>/dev/null || fail "ended early"; sleep 0.1; done
VICTIM=""
for p in $(pgrep -f -- "--set train.run_dir=$W/run "); do
  grep -qx "OMPI_COMM_WORLD_RANK=1" <<<"$(tr '\0' '\n' </proc/$p/environ 2>/dev/null)" && VICTIM=$p
done
[ -n "$VICTIM" ] || fail "rank 1 not found"
kill -STOP "$VICTIM"
AT=$(lines "$W/run/metrics.jsonl")
[ "$AT" -lt $((STEPS - 1)) ] || fail "the stop landed after step $AT of $STEPS: too late to judge"
WARN='warning: (pipeline rank 0 has waited [0-9]+ s without any message; expecting: .*from rank 1|rank 0 has waited [0-9]+ s in .* over group '"'"'[a-z]+'"'"' \(2 ranks\) for its rank 1)'
T0=$SECONDS
for i in $(seq 1 1200); do grep -Eq "$WARN" "$W/out.txt" && break; kill -0 $JOB 2>/dev/null || break; sleep 0.1; done
kill -CONT "$VICTIM"
echo "rank 1 stopped after step $AT of $STEPS, continued $((SECONDS - T0)) s later"
wait "$JOB"; RC=$?
[ "$RC" -eq 0 ] || fail "the run exited $RC after rank 1 was continued"
[ "$(lines "$W/run/metrics.jsonl")" -eq $STEPS ] || fail "the run did not finish its $STEPS steps"
grep -E "$WARN" "$W/out.txt" || fail "no warning on rank 0 naming rank 1 or the group waited for"
echo "pipeline stall: ok"
