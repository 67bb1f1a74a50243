#!/usr/bin/env bash
# train_demo_e2e.sh — the real path end to end: demo-data -> tokenizer train -> pack -> train
# recipes/llava.ini on the shards (loader) -> eval on the held-out shards, with the checks of
# train_e2e.sh: the loss falls by MARGIN (ctest sets RESUME=0: stop + resume through a checkpoint on packed
# shards, the loader's position included, is train_resume_loader's).
# Usage: train_demo_e2e.sh RRFP_MM SOURCE_DIR WORKDIR STEPS MARGIN
set -euo pipefail
EXE=$1 SRC=$2 WORK=$3 STEPS=$4 MARGIN=$5
rm -rf "$WORK"
mkdir -p "$WORK/demo"
"$EXE" demo-data --out "$WORK/demo/data" --samples 600 --heldout 100 >/dev/null
"$EXE" tokenizer train --vocab 448 --manifest "$WORK/demo/data/train.json" --out "$WORK/demo/tokenizer.json" --quiet
"$EXE" pack --manifest "$WORK/demo/data/train.json" --images "$WORK/demo/data/images" \
  --tokenizer "$WORK/demo/tokenizer.json" --out "$WORK/demo/shards" >/dev/null 2>&1
"$EXE" pack --manifest "$WORK/demo/data/heldout.json" --images "$WORK/demo/data/images" \
  --tokenizer "$WORK/demo/tokenizer.json" --out "$WORK/demo/eval-shards" >/dev/null 2>&1
# one thread: this machine's two cores are shared, and a spinning second thread only loses there
exec "$SRC/tests/runtime/train/train_e2e.sh" "$EXE" "$SRC/recipes/llava.ini" "$WORK/runs" "$STEPS" "$MARGIN" - \
  --set data.shards="$WORK/demo/shards" --set data.tokenizer="$WORK/demo/tokenizer.json" \
  --set data.eval_shards="$WORK/demo/eval-shards" --set data.microbatches=2 --set optim.warmup=3 \
  --set runtime.threads=1
