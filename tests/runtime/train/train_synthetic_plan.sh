#!/usr/bin/env bash
# train_synthetic_plan.sh — data.synthetic_plan (the fair benchmark against PyTorch: ours trains on the sample
# shapes the PyTorch side runs): 3 steps of 2 microbatches over a 3-line plan, so steps use lines
# (0, 1), (2, 0), (1, 2); every step's tokens and patches must be those lines' sums. A malformed
# sample and one past the token budget are refused with the file and line named.
# Usage: train_synthetic_plan.sh RRFP_MM RECIPE WORKDIR
set -euo pipefail
EXE=$1 RECIPE=$2 WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
printf '2x2+10 1x1+5\n3x3+4\n4x1+6 1x2+7 2x1+4\n' > "$WORK/plan.txt"
common=(--set data.source=synthetic --set data.microbatches=2 --set data.microbatch_tokens=64 --set optim.warmup=1
        --set checkpoint.keep=0 --set train.checkpoint_every=0 --set train.log_every=1)
"$EXE" train "$RECIPE" "${common[@]}" --set train.steps=3 --set data.synthetic_plan="$WORK/plan.txt" \
  --set train.run_dir="$WORK/run" > "$WORK/log" 2>&1 || { cat "$WORK/log"; exit 1; }
/usr/bin/python3 - "$WORK/run/metrics.jsonl" <<'PY'
import json, sys
lines = [(20, 5), (13, 9), (10 + 9 + 6, 4 + 2 + 2)]  # (LM tokens, patches) of each plan line
want = [(0, 1), (2, 0), (1, 2)]
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3, rows
for r, (a, b) in zip(rows, want):
    t, p = lines[a][0] + lines[b][0], lines[a][1] + lines[b][1]
    assert (r["tokens"], r["patches"]) == (t, p), (r["step"], r["tokens"], r["patches"], t, p)
print("plan steps ok:", [(r["tokens"], r["patches"]) for r in rows])
PY
printf '2x2+10 1x1-5\n' > "$WORK/bad.txt"
if "$EXE" train "$RECIPE" "${common[@]}" --set train.steps=1 --set data.synthetic_plan="$WORK/bad.txt" \
   --set train.run_dir="$WORK/bad" > "$WORK/bad.log" 2>&1; then echo "a malformed plan was accepted"; exit 1; fi
grep -q "bad.txt:1: '1x1-5' is not a sample" "$WORK/bad.log" || { cat "$WORK/bad.log"; exit 1; }
printf '2x2+10\n7x7+20\n' > "$WORK/big.txt"
if "$EXE" train "$RECIPE" "${common[@]}" --set train.steps=1 --set data.synthetic_plan="$WORK/big.txt" \
   --set train.run_dir="$WORK/big" > "$WORK/big.log" 2>&1; then echo "a plan past the budget was accepted"; exit 1; fi
grep -q "big.txt:2: sample 1 (7x7+20) does not fit data.microbatch_tokens" "$WORK/big.log" || { cat "$WORK/big.log"; exit 1; }
echo "synthetic plan: ok"
