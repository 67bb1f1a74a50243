#!/usr/bin/env bash
# dp_grads.sh — the data-parallel gradients themselves against ONE process training the same global step,
# with gradient clipping off (optim.grad_clip = 0): clipping to a norm of 1 rescales every gradient of a
# norm above 1 to the same vector, and AdamW's first update is the gradient's sign, so a DP step whose
# gradients came out 2x (averaged by the wrong count) trains exactly like the right one and every loss
# matches. Checked instead, `mpirun -np 2 rrfp-mm train --set parallel.dp=2` against one process with
# 2 x the microbatches, 3 steps:
#   - every step's gradient norm (metrics.jsonl "grad_norm", after the DP all-reduce);
#   - step 2's gradient dump (train.dump_step = 2: replica 0's gradients after the all-reduce);
#   - the final checkpoint's parameters and AdamW moments (m is a sum of gradients, v of their squares).
# Tolerances (derived as in tests/runtime/train/dp_train.sh, whose bounds these are): the DP step sums the same
# per-microbatch fp32 gradients in another order, ~3 ulp of the largest partial sum (~2e-7 relative);
# the norms are double sums of those: 1e-6 relative. After an update the weights differ by a fraction
# of lr x 2e-7, so step 2's gradients and the moments after 3 steps stay within 1e-6 + 1e-5 relative.
# A factor of 2 is 1e6 times these bounds. The observed differences are printed.
# Usage: dp_grads.sh RRFP_MM RECIPE WORKDIR
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
MPI="timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"
COMMON=(--set train.steps=3 --set optim.warmup=1 --set optim.grad_clip=0 --set train.dump_step=2
        --set train.checkpoint_every=0 --set runtime.threads=1)
"$BIN" train "$RECIPE" "${COMMON[@]}" --set data.microbatches=4 --set train.run_dir="$W/one" >"$W/one.log" 2>&1 \
  || { cat "$W/one.log"; fail "one-process run"; }
$MPI -np 2 "$BIN" train "$RECIPE" "${COMMON[@]}" --set data.microbatches=2 --set parallel.dp=2 \
  --set train.run_dir="$W/dp" >"$W/dp.log" 2>&1 || { cat "$W/dp.log"; fail "dp 2 run"; }
# the gradient norms, step by step
norms=$(/usr/bin/python3 - "$W/one/metrics.jsonl" "$W/dp/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
if len(a) != 3 or len(b) != 3:
    print("%d and %d metrics rows, expected 3" % (len(a), len(b)))
    sys.exit(1)
out, ok = [], True
for x, y in zip(a, b):
    d = abs(x["grad_norm"] - y["grad_norm"]) / x["grad_norm"]
    out.append("step %d: %.9g vs %.9g (rel %.2g)" % (x["step"], x["grad_norm"], y["grad_norm"], d))
    ok &= d <= 1e-6
print("; ".join(out))
sys.exit(0 if ok else 1)
PY
) || fail "gradient norms differ from one process: $norms"
echo "grad norms: $norms"
# step 2's gradients (replica 0's, after the all-reduce) and the final moments
"$BIN" tensors diff "$W/one/dump-2" "$W/dp/dump-2" --files grads --rtol 1e-5 --atol 1e-6 --quiet >"$W/grads.diff" 2>&1 \
  || { tail -20 "$W/grads.diff"; fail "step 2's gradients differ from one process"; }
echo "step 2 gradients: $(tail -1 "$W/grads.diff")"
"$BIN" tensors diff "$W/one/checkpoints/step-00000003" "$W/dp/checkpoints/step-00000003" --rtol 1e-5 --atol 1e-6 \
  --quiet >"$W/ckpt.diff" 2>&1 || { tail -20 "$W/ckpt.diff"; fail "parameters or AdamW moments differ from one process"; }
echo "parameters and moments after 3 steps: $(tail -1 "$W/ckpt.diff")"
echo "dp grads: ok"
