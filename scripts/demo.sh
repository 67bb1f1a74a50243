#!/usr/bin/env bash
# demo.sh — `make demo`: demo data -> tokenizer -> shards -> train recipes/llava.ini -> held-out QA.
#
#   scripts/demo.sh [RRFP_MM]        (default build/rrfp-mm; writes demo/ and run/llava/)
#
# Prints the training log (the loss falls), then the held-out accuracy against chance. Everything
# it makes is under demo/ and run/llava/; a second run reuses demo/ when it is complete.
# When this build lacks the data commands (demo-data, pack) it says so and runs the same pipeline
# on generated data (data.source = synthetic) instead of pretending.
set -euo pipefail
EXE=${1:-build/rrfp-mm}
cd "$(dirname "$0")/.."
STEPS=${DEMO_STEPS:-}
has() { "$EXE" --help 2>/dev/null | grep -qE "^  $1 "; }

if has demo-data && has pack && "$EXE" tokenizer --help >/dev/null 2>&1; then
  if [ ! -f demo/.complete ]; then
    rm -rf demo
    mkdir -p demo
    echo "== demo data"
    "$EXE" demo-data --out demo/data
    echo "== tokenizer (byte-level BPE trained on the demo manifest)"
    # the demo's text has few distinct words: its byte-level BPE runs out of pairs near 450 tokens
    "$EXE" tokenizer train --vocab 448 --manifest demo/data/train.json --out demo/tokenizer.json --quiet
    echo "== pack"
    "$EXE" pack --manifest demo/data/train.json --images demo/data/images --tokenizer demo/tokenizer.json \
      --out demo/shards
    "$EXE" pack --manifest demo/data/heldout.json --images demo/data/images --tokenizer demo/tokenizer.json \
      --out demo/eval-shards
    touch demo/.complete
  fi
  RECIPE=recipes/llava.ini
  SETS=()
else
  echo "rrfp-mm: note: this build has no demo-data / pack / tokenizer commands yet;" >&2
  echo "          training recipes/llava.ini's model on generated data (data.source = synthetic) instead." >&2
  RECIPE=recipes/llava.ini
  SETS=(--set data.source=synthetic --set model.vocab=256 --set train.steps=${STEPS:-120})
  STEPS=
fi
[ -n "$STEPS" ] && SETS+=(--set train.steps="$STEPS")

echo "== train $RECIPE"
rm -rf run/llava
"$EXE" train "$RECIPE" "${SETS[@]}" --set train.run_dir=run/llava
echo "== held-out questions"
"$EXE" eval "$RECIPE" "${SETS[@]}" --set train.run_dir=run/llava --checkpoint latest --samples 1000
/usr/bin/python3 - run/llava/metrics.jsonl demo/data/eval.jsonl <<'EOF'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
if os.path.exists(sys.argv[2]) and os.path.exists("demo/.complete"):
    ev = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    ch = sum(1.0 / len(e["choices"]) for e in ev) / len(ev)
    print("chance from the demo's answer choices per question type: %.1f%% (%d held-out questions)" % (100 * ch, len(ev)))
k = max(1, len(rows) // 10)
a = sum(r["loss"] for r in rows[:k]) / k
b = sum(r["loss"] for r in rows[-k:]) / k
print("loss: %.3f (first %d steps) -> %.3f (last %d steps); median %.0f tokens/s" %
      (a, k, b, k, sorted(r["tokens_per_s"] for r in rows)[len(rows) // 2]))
EOF
