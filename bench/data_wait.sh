#!/usr/bin/env bash
# data_wait.sh — the fraction of step time the trainer spends waiting for data, from a real training
# run: demo data -> tokenizer -> pack -> `rrfp-mm train recipes/llava.ini` on the shards through the
# loader, then sum(data_wait_s) / sum(step_time_s) over metrics.jsonl (data_wait_s is the time spent in
# the batch source's next(), i.e. blocked on the loader's planner; the first step is reported apart,
# it fills the loader's queue).
# Usage: bench/data_wait.sh [RRFP_MM] [STEPS] [WORKDIR]      (defaults: build/rrfp-mm 40 /tmp/rrfp-data-wait)
set -euo pipefail
BIN=${1:-build/rrfp-mm} STEPS=${2:-40} W=${3:-/tmp/rrfp-data-wait}
cd "$(dirname "$0")/.."
if [ ! -f "$W/.complete" ]; then
  rm -rf "$W"; mkdir -p "$W"
  "$BIN" demo-data --out "$W/data" >/dev/null
  "$BIN" tokenizer train --vocab 448 --manifest "$W/data/train.json" --out "$W/tokenizer.json" --quiet
  "$BIN" pack --manifest "$W/data/train.json" --images "$W/data/images" --tokenizer "$W/tokenizer.json" \
    --out "$W/shards" --quiet
  touch "$W/.complete"
fi
rm -rf "$W/run"
"$BIN" train recipes/llava.ini --set data.shards="$W/shards" --set data.tokenizer="$W/tokenizer.json" \
  --set data.eval_shards= --set train.steps="$STEPS" --set optim.warmup=$((STEPS / 10)) \
  --set train.checkpoint_every=0 --set train.run_dir="$W/run" | tail -2
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$W/run/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
w = sum(x["data_wait_s"] for x in r[1:]); t = sum(x["step_time_s"] for x in r[1:])
print("steps 2..%d: data wait %.4f s of %.2f s step time = %.3f%% (longest wait %.1f ms); step 1 waited %.1f ms"
      % (len(r), w, t, 100 * w / t, 1e3 * max(x["data_wait_s"] for x in r[1:]), 1e3 * r[0]["data_wait_s"]))
PY
