#!/usr/bin/env bash
# train_guard.sh — what a training job refuses or fixes before it starts (docs/reliability.md):
#   lock     a second job on the same run folder is refused naming the first one's pid and host
#   ckptlock a second job with its own run folder but the first one's checkpoint.dir is refused naming the
#            folder and the holder (pid, host, run folder), and the first job's checkpoints stay (was: its
#            pruning deleted the first job's step-N); a job whose checkpoint.dir is its run folder runs
#   memory   a layout that cannot fit the memory available is refused with the dry run's figures;
#            runtime.allow_overcommit = 1 starts it anyway (RRFP_MEM_AVAILABLE_MB=0 stands in for a full host)
#   stale    unfinished checkpoint folders of dead writers are removed at start, a live one's kept
#   threads  runtime.threads above the cores warns with the core count; the default is the cores available
#   demo     a missing demo/ file says the demo data comes from `make demo`, with the commands
# Usage: train_guard.sh RRFP_MM RECIPE WORKDIR MODE
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 MODE=$4
rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL ($MODE): $*"; [ -f "$W/out.txt" ] && { echo "--- output"; cat "$W/out.txt"; }; [ -f "$W/first.txt" ] && { echo "--- the first job"; tail -20 "$W/first.txt"; }; [ -n "${JOB:-}" ] && kill -9 "$JOB" 2>/dev/null; exit 1; }
run() { "$BIN" train "$RECIPE" --set train.run_dir="$W/run" "$@" >"$W/out.txt" 2>&1; }
case "$MODE" in
lock)
  "$BIN" train "$RECIPE" --set train.run_dir="$W/run" --set train.steps=1000000 --set optim.warmup=1 >"$W/first.txt" 2>&1 &
  JOB=$!
  # wait on the job's progress (its first metrics row), not on the clock: under load the start takes longer
  for i in $(seq 1 6000); do [ -s "$W/run/metrics.jsonl" ] && break; kill -0 "$JOB" 2>/dev/null || break; sleep 0.1; done
  [ -s "$W/run/metrics.jsonl" ] || fail "the first job did not start"
  run --set train.steps=2 --set optim.warmup=1; RC=$?
  [ "$RC" -eq 1 ] || fail "second job on the same run folder exited $RC, expected 1"
  grep -Eq "run folder '$W/run' is in use by another job \(pid $JOB host $(hostname)" "$W/out.txt" || fail "refusal does not name pid $JOB host $(hostname)"
  kill -0 "$JOB" 2>/dev/null || fail "the first job died"
  kill -9 "$JOB"; wait "$JOB" 2>/dev/null; JOB=""
  # the lock dies with its holder: the folder is usable again (by the same job line a requeue uses: the
  # killed job wrote metrics rows but no checkpoint, so --resume auto moves them aside and starts fresh)
  run --set train.steps=2 --set optim.warmup=1 --resume auto || fail "the run folder stayed locked after its job ended"
  ;;
ckptlock)
  "$BIN" train "$RECIPE" --set train.run_dir="$W/a" --set checkpoint.dir="$W/ck" --set train.steps=1000000 \
    --set train.checkpoint_every=1 --set checkpoint.keep=1 --set optim.warmup=1 >"$W/first.txt" 2>&1 &
  JOB=$!
  # the first job checkpoints every step and keeps one: its log says when one is written (a listing of ck/ can
  # race a step's write and prune and see none)
  for i in $(seq 1 6000); do grep -q '^rrfp-mm: checkpoint ' "$W/first.txt" 2>/dev/null && break; kill -0 "$JOB" 2>/dev/null || break; sleep 0.1; done
  grep -q '^rrfp-mm: checkpoint ' "$W/first.txt" 2>/dev/null || fail "the first job wrote no checkpoint"
  run --set checkpoint.dir="$W/ck" --set train.steps=3 --set train.checkpoint_every=1 --set checkpoint.keep=1 \
    --set optim.warmup=1; RC=$?
  [ "$RC" -eq 1 ] || fail "second job on the same checkpoint folder exited $RC, expected 1"
  grep -Eq "checkpoint folder '$W/ck' is in use by another job \(pid $JOB host $(hostname) run folder $W/a; lock $W/ck/.lock\)" "$W/out.txt" \
    || fail "refusal does not name the folder and the holder"
  grep -q -- "--set checkpoint.dir=" "$W/out.txt" || fail "no hint"
  [ ! -e "$W/run/metrics.jsonl" ] || fail "the refused job trained"
  kill -0 "$JOB" 2>/dev/null || fail "the first job died"
  kill -9 "$JOB"; wait "$JOB" 2>/dev/null; JOB=""
  # a checkpoint folder that is the run folder itself: one lock
  run --set checkpoint.dir="$W/run" --set train.steps=2 --set optim.warmup=1 || fail "checkpoint.dir = the run folder"
  [ -f "$W/run/step-00000002/state.json" ] || fail "no checkpoint in the run folder"
  ;;
memory)
  RRFP_MEM_AVAILABLE_MB=0 run --set train.steps=2 --set optim.warmup=1; RC=$?
  [ "$RC" -eq 1 ] || fail "a job started on a host with 0 MiB available (exit $RC)"
  grep -Eq "not enough memory: this rank needs [0-9.]+ MiB .* but the host \(MemAvailable\) has 0.0 MiB available; pipeline rank 0: weights \+ grads .*activations" "$W/out.txt" || fail "no message with the dry run's figures"
  [ ! -e "$W/run/metrics.jsonl" ] || fail "a refused job wrote metrics"
  RRFP_MEM_AVAILABLE_MB=0 run --set train.steps=2 --set optim.warmup=1 --set runtime.allow_overcommit=true; RC=$?
  [ "$RC" -eq 0 ] || fail "runtime.allow_overcommit = true did not start (exit $RC)"
  grep -q "allow_overcommit = 1: starting anyway" "$W/out.txt" || fail "no warning under allow_overcommit"
  # a real host: a 4-TB-parameter LM head is refused before anything is allocated
  rm -rf "$W/run"
  run --set model.text_width=65536 --set model.vocab=16777216 --set model.text_heads=64 --set model.ffn_hidden=16; RC=$?
  [ "$RC" -eq 1 ] && grep -q "not enough memory" "$W/out.txt" || fail "a model far beyond MemAvailable was not refused (exit $RC)"
  ;;
stale)
  CK="$W/run/checkpoints"; mkdir -p "$CK"
  sh -c 'echo $$' >"$W/deadpid"; DEAD=$(cat "$W/deadpid")   # a process that has ended
  kill -0 "$DEAD" 2>/dev/null && fail "pid $DEAD is alive"
  mkdir -p "$CK/.step-00000003.tmp.$DEAD" "$CK/.step-00000004.tmp.shards.$DEAD" "$CK/.step-00000005.tmp.$$"
  touch "$CK/.step-00000003.tmp.$DEAD/model.safetensors"
  run --set train.steps=2 --set optim.warmup=1 || fail "training failed"
  [ ! -e "$CK/.step-00000003.tmp.$DEAD" ] || fail "dead writer's .tmp folder kept"
  [ ! -e "$CK/.step-00000004.tmp.shards.$DEAD" ] || fail "dead writer's .tmp.shards folder kept"
  [ -d "$CK/.step-00000005.tmp.$$" ] || fail "a live process's .tmp folder was removed"
  grep -q "removed 2 unfinished checkpoint folders of killed runs" "$W/out.txt" || fail "no message naming the removal"
  ;;
threads)
  # one step: 2 threads on one core is the slow case the warning is about
  OMP_WAIT_POLICY=passive taskset -c 0 "$BIN" train "$RECIPE" --set train.run_dir="$W/run" --set train.steps=1 \
    --set optim.warmup=1 --set runtime.threads=2 >"$W/out.txt" 2>&1 || fail "training failed"
  grep -Eq "runtime.threads = 2 but this process may run on 1 core .*sched_getaffinity" "$W/out.txt" || fail "no warning with the core count"
  rm -rf "$W/run"
  taskset -c 0 "$BIN" train "$RECIPE" --set train.run_dir="$W/run" --set train.steps=2 --set optim.warmup=1 \
    --set runtime.threads=0 >"$W/out.txt" 2>&1 || fail "training failed"
  grep -q ", 1 thread per rank," "$W/out.txt" || fail "threads = 0 under one core did not pick 1 thread"
  grep -q "warning: .*runtime.threads" "$W/out.txt" && fail "warned with the default threads"
  ;;
demo)
  # a fresh clone: recipes/llava.ini from a folder with no demo/
  SRC=$(cd "$(dirname "$RECIPE")/.." && pwd)
  (cd "$W" && "$BIN" train "$SRC/recipes/llava.ini" >"$W/out.txt" 2>&1); RC=$?
  [ "$RC" -eq 1 ] || fail "exit $RC, expected 1"
  grep -q "demo/tokenizer.json" "$W/out.txt" || fail "the missing file is not named"
  grep -q "make demo" "$W/out.txt" && grep -q "rrfp-mm demo-data --out demo/data" "$W/out.txt" \
    && grep -q "rrfp-mm pack --manifest demo/data/train.json" "$W/out.txt" || fail "no make demo / demo-data commands"
  ;;
*) fail "unknown mode" ;;
esac
cat "$W/out.txt"
echo "train guard $MODE: ok"
