#!/usr/bin/env bash
# write_errors.sh — nothing lost on write errors (docs/reliability.md): a failed write of metrics.jsonl, the log
# or the trace stops the run with an error naming the file, after a checkpoint where one can still be
# written; a torn last metrics row is reported where it is dropped (resume) and drawn around (report).
#   metrics  RUN/metrics.jsonl is a link to /dev/full (every write: ENOSPC): exit 1 at step 1 naming the
#            file and the checkpoint it wrote; that checkpoint resumes once the file can be written
#   log      standard output is /dev/full: exit 1 naming the log, with a checkpoint
#   torn     a killed run's torn last row: resume says it drops it (file:line) and the rewritten file
#            has whole rows only; report draws the run with a warning
#   full     (root only, else skipped) a tmpfs run folder with a few KB free: the disk fills during
#            training, the run stops naming metrics.jsonl at the step that failed and every row before
#            it is whole (was: the file stopped mid-line and training went on)
#   metrics_mpi  (mpi) the same under mpirun -np 2, pp 2: both ranks stop at step 1 after one checkpoint
#   trace    (mpi) RUN/trace-rank0.json cannot be written (a folder is in the way): exit 1 naming it
# Usage: write_errors.sh RRFP_MM RECIPE WORKDIR MODE
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 MODE=$4
case "$W" in /tmp/* | */build*/*) ;; *) echo "refusing work dir '$W'"; exit 2 ;; esac
umount "$W/fs" 2>/dev/null   # a tmpfs left by a killed earlier run of `full`
rm -rf "$W"; mkdir -p "$W/run"
fail() { echo "FAIL ($MODE): $*"; for f in "$W"/*.txt; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }
COMMON=(--set train.run_dir="$W/run" --set optim.warmup=1 --set train.log_every=1)
rows() { local n; n=$(grep -c . "$1" 2>/dev/null); echo "${n:-0}"; }
# every line of a metrics file is a whole row
whole_rows() { python3 -c "
import json, sys
text = open(sys.argv[1]).read()
assert text == '' or text.endswith('\n'), 'no newline at the end'
for i, l in enumerate(text.splitlines(), 1):
    o = json.loads(l); assert o['step'] == i, (i, o['step'])" "$1"; }
case "$MODE" in
metrics)
  ln -s /dev/full "$W/run/metrics.jsonl"
  "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.steps=5 >"$W/out.txt" 2>&1; RC=$?
  [ "$RC" -eq 1 ] || fail "exit $RC with an unwritable metrics file, expected 1"
  grep -Eq "error: cannot write metrics file '$W/run/metrics.jsonl' \(row of step 1\): No space left on device; stopped after step 1 with checkpoint $W/run/checkpoints/step-00000001" "$W/out.txt" ||
    fail "the error does not name the file, the step and the checkpoint"
  grep -q "step     2/" "$W/out.txt" && fail "training went on after the metrics write failed"
  [ -f "$W/run/checkpoints/step-00000001/state.json" ] || fail "no checkpoint of step 1"
  # the file can be written again: resuming continues from that checkpoint
  rm "$W/run/metrics.jsonl"
  "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.steps=5 --resume latest >"$W/resume.txt" 2>&1 || fail "resume after the error"
  [ "$(rows "$W/run/metrics.jsonl")" -eq 4 ] || fail "resumed metrics (steps 2..5): $(cat "$W/run/metrics.jsonl")"
  ;;
metrics_mpi)
  # pp 2: the log rank's failure stops both ranks at the same step end, after one checkpoint
  ln -s /dev/full "$W/run/metrics.jsonl"
  timeout 300 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np 2 "$BIN" train "$RECIPE" "${COMMON[@]}" \
    --set train.steps=5 --set parallel.pp=2 >"$W/out.txt" 2>&1; RC=$?
  [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] || fail "exit $RC with an unwritable metrics file under mpirun"
  grep -Eq "error: cannot write metrics file '$W/run/metrics.jsonl' \(row of step 1\): No space left on device; stopped after step 1 with checkpoint $W/run/checkpoints/step-00000001" "$W/out.txt" ||
    fail "the error does not name the file, the step and the checkpoint"
  grep -q "stopped after step 1 with a checkpoint: the log rank could not write" "$W/out.txt" || fail "rank 1 does not say why it stops"
  grep -q "step     2/" "$W/out.txt" && fail "training went on after the metrics write failed"
  [ -f "$W/run/checkpoints/step-00000001/state.json" ] || fail "no checkpoint of step 1"
  ;;
log)
  "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.steps=5 >/dev/full 2>"$W/err.txt"; RC=$?
  [ "$RC" -eq 1 ] || fail "exit $RC with the log on a full disk, expected 1"
  grep -Eq "error: cannot write the log \(standard output\) at step 1: No space left on device; stopped after step 1 with checkpoint" "$W/err.txt" ||
    fail "the error does not name the log"
  [ -f "$W/run/checkpoints/step-00000001/state.json" ] || fail "no checkpoint of step 1"
  [ "$(rows "$W/run/metrics.jsonl")" -eq 1 ] || fail "metrics rows: $(cat "$W/run/metrics.jsonl")"
  ;;
torn)
  "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.steps=5 --set train.stop_at=3 --set train.checkpoint_every=1 >"$W/first.txt" 2>&1 ||
    fail "first run"
  # what a run killed while writing step 4's row leaves
  printf '{"step":4,"loss":3.1,"loss_hex":"0x1.8' >>"$W/run/metrics.jsonl"
  "$BIN" report "$W/run" --out "$W/r.html" >"$W/report.txt" 2>&1 || fail "report refuses a run with a torn last row"
  grep -q "metrics.jsonl:4: a torn last row (.* bytes, no newline: .*) is left out" "$W/report.txt" || fail "report does not warn of the torn row"
  [ "$(grep -o '<path class="curve"' "$W/r.html" | wc -l)" -eq 4 ] || fail "report drew no curves"
  "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.steps=5 --resume latest >"$W/resume.txt" 2>&1 || fail "resume"
  grep -q "warning: $W/run/metrics.jsonl:4: dropped a torn last row without its newline (.* bytes: '{\"step\":4,\"loss\":3.1" "$W/resume.txt" ||
    fail "resume drops the torn row without a word"
  whole_rows "$W/run/metrics.jsonl" || fail "resumed metrics file: $(cat "$W/run/metrics.jsonl")"
  [ "$(rows "$W/run/metrics.jsonl")" -eq 5 ] || fail "resumed metrics rows: $(cat "$W/run/metrics.jsonl")"
  ;;
full)
  [ "$(id -u)" -eq 0 ] || { echo "skipped: mounting a tmpfs needs root"; exit 77; }
  M="$W/fs"; mkdir -p "$M"
  mount -t tmpfs -o size=64k tmpfs "$M" 2>"$W/mount.txt" || { echo "skipped: cannot mount a tmpfs: $(cat "$W/mount.txt")"; exit 77; }
  trap 'umount "$M" 2>/dev/null' EXIT
  # leave 6 pages of 4 KB: the recipe copy (1.3 KB), run.json (the run's identity), the run folder's lock, the
  # checkpoint folder and its lock, and a few dozen metrics rows, then ENOSPC
  avail=$(df --output=avail -B1 "$M" | tail -n 1)
  head -c $((avail - 6 * 4096)) /dev/zero >"$M/filler" 2>/dev/null
  mkdir -p "$M/run"
  "$BIN" train "$RECIPE" --set train.run_dir="$M/run" --set optim.warmup=1 --set train.log_every=1000 --set train.steps=400 \
    >"$W/out.txt" 2>&1; RC=$?
  [ "$RC" -eq 1 ] || fail "exit $RC when the run folder's disk filled, expected 1"
  n=$(wc -l <"$M/run/metrics.jsonl")   # whole rows (a torn last one has no newline)
  [ "$n" -ge 2 ] || fail "only $n metrics rows were written before the disk filled (the test needs the disk to fill during training)"
  grep -Eq "error: cannot write metrics file '$M/run/metrics.jsonl' \(row of step $((n + 1))\): No space left on device" "$W/out.txt" ||
    fail "the error does not name metrics.jsonl and step $((n + 1)) (after $n whole rows)"
  grep -q "the checkpoint of step $((n + 1)) could not be written either" "$W/out.txt" || fail "the checkpoint's failure is not said"
  # whole rows, and at most a torn last one (what the full disk took); nothing after the failed step
  python3 -c "
import json, sys
text = open(sys.argv[1]).read()
lines = text.split('\n')
whole = lines[:-1]
for i, l in enumerate(whole, 1):
    assert json.loads(l)['step'] == i
assert len(whole) == int(sys.argv[2]), (len(whole), sys.argv[2])" "$M/run/metrics.jsonl" "$n" || fail "metrics.jsonl after the disk filled"
  ;;
trace)
  mkdir -p "$W/run/trace-rank0.json"   # a folder where the trace file goes: its rename fails
  timeout 300 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np 2 "$BIN" train "$RECIPE" "${COMMON[@]}" \
    --set train.steps=2 --set parallel.pp=2 --set runtime.trace=true >"$W/out.txt" 2>&1; RC=$?
  [ "$RC" -ne 0 ] || fail "exit 0 with an unwritable trace"
  grep -Eq "error: cannot write trace '$W/run/trace-rank0.json'" "$W/out.txt" || fail "the error does not name the trace"
  [ -f "$W/run/trace-rank1.json" ] || fail "rank 1's trace was not written"
  ;;
*) echo "unknown mode $MODE"; exit 2 ;;
esac
echo "write errors $MODE: ok"
