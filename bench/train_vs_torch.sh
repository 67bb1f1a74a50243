#!/usr/bin/env bash
# train_vs_torch.sh — training throughput of rrfp-mm against PyTorch on recipes/llava.ini's model,
# the same batch and the same thread count, in one invocation.
#
#   bench/train_vs_torch.sh [RRFP_MM] [STEPS] [THREADS] [ROUNDS]     (defaults: build/rrfp-mm 4 2 3)
#
# 1. rrfp-mm trains STEPS steps of recipes/llava.ini's model on one fixed synthetic step plan
#    (data.fixed_batch: every step the same microbatches) and dumps step 1 (weights, microbatches, loss);
# 2. bench/train_vs_torch.py builds the same model in PyTorch from that dump, checks its loss equals
#    the engine's, and trains STEPS steps on the same microbatches;
# 3. tokens/s = LM positions per step / step time, leaving out the first (warm-up) step of each run.
#    The machine is shared, so the two alternate for ROUNDS rounds (both see the same load over time);
#    the median and the best step (the one least disturbed by other load) are printed.
set -euo pipefail
EXE=${1:-build/rrfp-mm}
STEPS=${2:-4}
THREADS=${3:-2}
ROUNDS=${4:-3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
RUN=$(mktemp -d /tmp/rrfp-bench-train.XXXXXX)
trap 'rm -rf "$RUN"' EXIT

engine_run() {
  rm -rf "$RUN/e"
  "$EXE" train "$HERE/recipes/llava.ini" \
    --set data.source=synthetic --set model.vocab=2048 --set data.fixed_batch=true \
    --set train.steps="$STEPS" --set optim.warmup=1 --set train.dump_step=1 --set train.log_every=1 \
    --set train.checkpoint_every=0 --set checkpoint.keep=1 --set runtime.threads="$THREADS" \
    --set train.run_dir="$RUN/e" >"$RUN/engine.log" 2>&1
  /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(json.dumps({"tokens": rows[0]["tokens"], "steps": [r["step_time_s"] for r in rows[1:]]}))' \
    "$RUN/e/metrics.jsonl" >>"$RUN/engine.jsonl"
}

: >"$RUN/engine.jsonl"
: >"$RUN/torch.jsonl"
for _ in $(seq "$ROUNDS"); do
  engine_run
  /usr/bin/python3 "$HERE/bench/train_vs_torch.py" "$RUN/e/dump-1" --steps "$STEPS" --threads "$THREADS" \
    >>"$RUN/torch.jsonl"
done

/usr/bin/python3 - "$RUN/engine.jsonl" "$RUN/torch.jsonl" "$THREADS" "$ROUNDS" "$("$EXE" version | grep blas)" <<'PY'
import json, statistics, sys
import torch
eng = [json.loads(l) for l in open(sys.argv[1])]
tor = [json.loads(l) for l in open(sys.argv[2])]
n = eng[0]["tokens"]
assert all(r["tokens"] == n for r in eng + tor), "token counts differ"
es = [t for r in eng for t in r["steps"]]
ts = [t for r in tor for t in r["steps"]]
em, eb, tm, tb = statistics.median(es), min(es), statistics.median(ts), min(ts)
print("train step, recipes/llava.ini model (V 2048), %d LM tokens per step (the same fixed batch), %s threads, %s,"
      " %s rounds x %d timed steps each, load average %s" % (n, sys.argv[3], sys.argv[5], sys.argv[4],
      len(eng[0]["steps"]), open("/proc/loadavg").read().split()[0]))
print("  loss on the dumped step: engine %.6f  torch %.6f" % (tor[0]["loss_engine"], tor[0]["loss_torch"]))
print("                 median step               best step")
print("  rrfp-mm  %9.0f tok/s %8.1f ms  %9.0f tok/s %8.1f ms" % (n / em, 1e3 * em, n / eb, 1e3 * eb))
print("  PyTorch  %9.0f tok/s %8.1f ms  %9.0f tok/s %8.1f ms  (torch %s)" % (n / tm, 1e3 * tm, n / tb, 1e3 * tb,
      torch.__version__))
print("  ratio rrfp-mm / PyTorch: %.2fx median, %.2fx best  (target >= 1.5x)" % (tm / em, tb / eb))
PY
