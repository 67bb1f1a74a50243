#!/usr/bin/env bash
# train_bf16.sh — runtime.precision = bf16 trains like fp32: the same recipe, seed and data
# in fp32 and in bf16 on the CPU backend (backend_cpu_bf16: the GPU's rounding points), and
#   1. bf16 is in effect: the step-1 losses differ in their bits (one forward through rounded
#      operands and activations);
#   2. step 1 (same weights, same batch, only the forward's rounding): |dloss| <= 0.01 loss. Estimate:
#      about 25 rounding points lie on the path to the logits (3 blocks x 7, embedding, norms, head),
#      each at most u = 2^-8 relative, so |dz| <= 25 u max|z| in the first order; with std 0.02
#      initial weights the logits stay below ~0.5 in size, and |dCE| <= 2 max|dz| (the gradient of CE
#      in the logits has l1 norm <= 2): 2 x 25 x 2^-8 x 0.5 = 0.1 nats worst case, 2.3% of ln 64;
#      rounding errors do not align, so 1% is kept (measured: 6.6e-6 relative);
#   3. the curves stay in a band: per step |dloss| <= 0.10 loss_fp32 + 0.005, and the mean relative gap
#      of the last 10 steps <= 0.05. Measured on test-synthetic (60 steps): worst step 4.1% (step 21,
#      where the loss falls fastest, so a small shift in time is a large relative gap), last 10 steps
#      1.2%. For scale, fp32 against fp32 with lr changed by 2^-8 relative (a perturbation of the
#      size of one bf16 rounding) differs by up to 3.0% (step 29): the band is round-off amplified by
#      training, at 2.5x the measured worst step. The absolute 0.005 covers the late steps where the
#      loss is ~0.05 and one sample's answer moves it by that much;
#   4. bf16 learns on its own: the mean of the last 3 losses is below half the first;
#   5. a bf16 run stopped at half way and resumed reproduces every loss bit for bit (the bf16 compute
#      copy is rebuilt from the loaded f32 master, engine/params.h).
# Usage: train_bf16.sh RRFP_MM RECIPE WORKDIR STEPS
set -euo pipefail
EXE=$1 RECIPE=$2 WORK=$3 STEPS=$4
rm -rf "$WORK"
mkdir -p "$WORK"
HALF=$((STEPS / 2))
common=(--set train.steps="$STEPS" --set train.log_every=1 --set checkpoint.keep=0)
"$EXE" train "$RECIPE" "${common[@]}" --set runtime.precision=fp32 --set train.run_dir="$WORK/fp32" --set train.checkpoint_every=0
"$EXE" train "$RECIPE" "${common[@]}" --set runtime.precision=bf16 --set train.run_dir="$WORK/bf16" --set train.checkpoint_every=0
"$EXE" train "$RECIPE" "${common[@]}" --set runtime.precision=bf16 --set train.run_dir="$WORK/split" --set train.stop_at="$HALF"
"$EXE" train "$RECIPE" "${common[@]}" --set runtime.precision=bf16 --set train.run_dir="$WORK/split" --resume latest

/usr/bin/python3 - "$WORK" "$STEPS" <<'PY'
import json, sys
work, steps = sys.argv[1], int(sys.argv[2])
load = lambda d: [json.loads(l) for l in open(work + "/" + d + "/metrics.jsonl")]
f, b, s = load("fp32"), load("bf16"), load("split")
ok = True
for run in (f, b, s):
    assert [r["step"] for r in run] == list(range(1, steps + 1)), [r["step"] for r in run]
if f[0]["loss_hex"] == b[0]["loss_hex"]:
    print("FAIL: step 1 has the same bits in fp32 and bf16: bf16 is not in effect"); ok = False
d1 = abs(b[0]["loss"] - f[0]["loss"]) / f[0]["loss"]
print("step 1: fp32 %.6f bf16 %.6f, relative %.2e (bound 1e-2)" % (f[0]["loss"], b[0]["loss"], d1))
ok &= d1 <= 1e-2
worst, at = 0.0, 0
for x, y in zip(f, b):
    gap = abs(y["loss"] - x["loss"])
    r = gap / (0.10 * x["loss"] + 0.005)
    if r > worst: worst, at = r, x["step"]
rel = [abs(y["loss"] - x["loss"]) / x["loss"] for x, y in zip(f, b)]
last10 = sum(rel[-10:]) / len(rel[-10:])
print("band: worst step %d at %.2f of its bound (|dloss| <= 0.10 loss + 0.005); largest relative gap %.3f; "
      "last 10 steps mean relative gap %.4f (bound 0.05)" % (at, worst, max(rel), last10))
ok &= worst <= 1.0 and last10 <= 0.05
first, last = b[0]["loss"], sum(r["loss"] for r in b[-3:]) / 3
print("bf16 learning: %.4f -> %.4f (last 3 mean)" % (first, last))
ok &= last < 0.5 * first
bad = [x["step"] for x, y in zip(b, s) if x["loss_hex"] != y["loss_hex"]]
print("bf16 resume at step %d: %s" % (steps // 2, "all %d losses identical bit for bit" % steps if not bad else "MISMATCH at steps %s" % bad))
ok &= not bad
print("train bf16: " + ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
