#!/usr/bin/env bash
# train_vs_torch.sh — training throughput of rrfp-mm against PyTorch on recipes/llava.ini's model,
# the same batch and the same thread count, in one invocation.
#
#   bench/train_vs_torch.sh [RRFP_MM] [STEPS] [THREADS]      (defaults: build/rrfp-mm 6 2)
#
# 1. rrfp-mm trains STEPS steps of recipes/llava.ini's model on one fixed synthetic step plan
#    (data.fixed_batch: every step the same microbatches) and dumps step 1 (weights, microbatches, loss);
# 2. bench/train_vs_torch.py builds the same model in PyTorch from that dump, checks its loss equals
#    the engine's, and trains STEPS steps on the same microbatches;
# 3. both report the median and the best step time after the first (warm-up) step; tokens/s = LM
#    positions per step / step time. The machine is shared, so the best step is the figure least
#    disturbed by other load; both are printed.
set -euo pipefail
EXE=${1:-build/rrfp-mm}
STEPS=${2:-6}
THREADS=${3:-2}
HERE=$(cd "$(dirname "$0")/.." && pwd)
RUN=$(mktemp -d /tmp/rrfp-bench-train.XXXXXX)
trap 'rm -rf "$RUN"' EXIT

"$EXE" train "$HERE/recipes/llava.ini" \
  --set data.source=synthetic --set model.vocab=2048 --set data.fixed_batch=true \
  --set train.steps="$STEPS" --set optim.warmup=1 --set train.dump_step=1 --set train.log_every=1 \
  --set train.checkpoint_every=0 --set checkpoint.keep=1 --set runtime.threads="$THREADS" \
  --set train.run_dir="$RUN" >"$RUN/engine.log"

ENGINE=$(/usr/bin/python3 - "$RUN/metrics.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ts = [r["step_time_s"] for r in rows[1:]] if len(rows) > 1 else [rows[0]["step_time_s"]]
t = statistics.median(ts)
print(json.dumps({"engine_step_s": t, "engine_best_step_s": min(ts), "tokens": rows[0]["tokens"],
                  "engine_tokens_per_s": rows[0]["tokens"] / t}))
EOF
)
TORCH=$(/usr/bin/python3 "$HERE/bench/train_vs_torch.py" "$RUN/dump-1" --steps "$STEPS" --threads "$THREADS")

/usr/bin/python3 - "$ENGINE" "$TORCH" "$THREADS" "$("$EXE" version | grep blas)" <<'EOF'
import json, sys
e, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert e["tokens"] == t["tokens"], (e, t)
print("train step, recipes/llava.ini model, %d LM tokens per step (same fixed batch), %s threads, %s"
      % (e["tokens"], sys.argv[3], sys.argv[4]))
print("  loss on the dumped step: engine %.6f  torch %.6f" % (t["loss_engine"], t["loss_torch"]))
n = e["tokens"]
print("                 median step            best step")
print("  rrfp-mm  %9.0f tok/s %7.1f ms  %9.0f tok/s %7.1f ms" % (n / e["engine_step_s"], 1e3 * e["engine_step_s"],
      n / e["engine_best_step_s"], 1e3 * e["engine_best_step_s"]))
print("  PyTorch  %9.0f tok/s %7.1f ms  %9.0f tok/s %7.1f ms  (torch %s)" % (n / t["torch_step_s"],
      1e3 * t["torch_step_s"], n / t["torch_best_step_s"], 1e3 * t["torch_best_step_s"], __import__("torch").__version__))
print("  ratio rrfp-mm / PyTorch: %.2fx median, %.2fx best  (target >= 1.5x)"
      % (t["torch_step_s"] / e["engine_step_s"], t["torch_best_step_s"] / e["engine_best_step_s"]))
EOF
