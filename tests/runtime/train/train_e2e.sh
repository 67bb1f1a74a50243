#!/usr/bin/env bash
# train_e2e.sh — end-to-end training checks on one recipe:
#   1. learning: train STEPS steps; the mean loss of the last 3 steps must be below the first step's
#      loss by at least MARGIN (relative), and `rrfp-mm eval` must beat chance by EVAL_MARGIN
#      (absolute accuracy; "-" = report the accuracy without asserting it, for runs too short to learn
#      the images);
#   2. resume: run the same recipe with train.stop_at = STEPS/2, resume from its checkpoint to STEPS,
#      and require every step's loss to equal the uninterrupted run's bit for bit (loss_hex). RESUME=0 (environment)
#      leaves this out where another test holds it for the same data path (train_demo_e2e: train_resume_loader).
# Usage: train_e2e.sh RRFP_MM RECIPE WORKDIR STEPS MARGIN EVAL_MARGIN [--set k=v ...]
set -euo pipefail
EXE=$1 RECIPE=$2 WORK=$3 STEPS=$4 MARGIN=$5 EVAL_MARGIN=$6
shift 6
SETS=("$@")
rm -rf "$WORK"
mkdir -p "$WORK"
HALF=$((STEPS / 2))
common=(--set train.steps="$STEPS" --set train.log_every=1 --set checkpoint.keep=0 "${SETS[@]}")

echo "== uninterrupted run: $STEPS steps"
"$EXE" train "$RECIPE" "${common[@]}" --set train.run_dir="$WORK/full" --set train.checkpoint_every=0
if [ "${RESUME:-1}" != 0 ]; then
  echo "== interrupted run: stop at $HALF, then resume"
  "$EXE" train "$RECIPE" "${common[@]}" --set train.run_dir="$WORK/split" --set train.stop_at="$HALF"
  "$EXE" train "$RECIPE" "${common[@]}" --set train.run_dir="$WORK/split" --resume latest
fi

echo "== eval"
"$EXE" eval "$RECIPE" "${common[@]}" --set train.run_dir="$WORK/full" \
  --checkpoint "$WORK/full/checkpoints/step-$(printf %08d "$STEPS")" --samples 400 | tee "$WORK/eval.txt"

/usr/bin/python3 - "$WORK" "$STEPS" "$MARGIN" "$EVAL_MARGIN" "${RESUME:-1}" <<'PY'
import json, sys
work, steps, margin = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
eval_margin = -1.0 if sys.argv[4] == "-" else float(sys.argv[4])
resume = sys.argv[5] != "0"
full = [json.loads(l) for l in open(work + "/full/metrics.jsonl")]
ok = True
assert [r["step"] for r in full] == list(range(1, steps + 1)), [r["step"] for r in full]
if resume:
    split = [json.loads(l) for l in open(work + "/split/metrics.jsonl")]
    assert [r["step"] for r in split] == list(range(1, steps + 1)), [r["step"] for r in split]
    for a, b in zip(full, split):
        if a["loss_hex"] != b["loss_hex"] or a["grad_norm"] != b["grad_norm"]:
            print("RESUME MISMATCH at step %d: %s (%s) vs %s (%s)" % (a["step"], a["loss_hex"], a["loss"], b["loss_hex"], b["loss"]))
            ok = False
    if ok:
        print("resume: all %d losses identical bit for bit (checkpoint at step %d)" % (steps, steps // 2))
first = full[0]["loss"]
last = sum(r["loss"] for r in full[-3:]) / 3
drop = (first - last) / first
print("learning: loss %.4f at step 1 -> %.4f (mean of the last 3 steps), a %.1f%% drop (required >= %.1f%%)"
      % (first, last, 100 * drop, 100 * margin))
if drop < margin:
    ok = False
ev = [json.loads(l) for l in open(work + "/eval.txt") if l.startswith("{")][0]
acc = ev["greedy_accuracy"]
print("eval: greedy accuracy %.1f%% vs chance %.1f%% (%s)" % (100 * acc, 100 * ev["chance"],
      "required >= chance + %.1f points" % (100 * eval_margin) if eval_margin >= 0 else "not asserted"))
if eval_margin >= 0 and acc < ev["chance"] + eval_margin:
    ok = False
sys.exit(0 if ok else 1)
PY
