#!/usr/bin/env bash
# device/train_check.sh — whole training runs against transformers on a GPU machine, about 9 minutes. Run from the
# checkout (after `source .gpu/setup.sh && cd "$ROOT"` on the GPU machine):
#   OUT=... device/train_check.sh
# 1. ctest -L gpu (70 s limit);
# 2. bench/gpu_train.sh (GPU_TRAIN_SAMPLES records, default 480): (a) LLaVA-1.5-7B stage 1, (b) CLIP-L + Qwen2-1.5B
#    full, (c) LLaVA-1.5-7B stage 2 LoRA, ours then transformers sdpa / flash_attention_2 each, every part within
#    what is left of TRAIN_CHECK_S (default 540 s) less a minute for 3;
# 3. bench/gpu_kprof.sh's tower step kernel by kernel, when a minute is left.
# Everything goes into ONE tarball, $OUT/train_check.tgz (logs, metrics.jsonl, recipes, results.jsonl), beside
# $OUT/summary.txt (ctest's verdicts, each run's figures, the table). Exit status: ctest's.
set -u
OUT=${OUT:-$PWD/train_check_out}
mkdir -p "$OUT"
START=$(date +%s)
BUILD=${BUILD:-build}
TOTAL=${TRAIN_CHECK_S:-540}
W=$(mktemp -d)
. "$(dirname "$0")/common.sh"
gpu_ctest
left=$((TOTAL - 60 - $(elapsed)))
if [ "$left" -gt 90 ]; then
  GPU_TRAIN_BUDGET_S=$left GPU_TRAIN_LOGS="$W/gpu_train" GPU_TRAIN_CPU_CHECKS=0 GPU_TRAIN_SAMPLES=${GPU_TRAIN_SAMPLES:-480} \
    PY=${PY:-python3} timeout -k 5 $((left + 30)) bench/gpu_train.sh "$BUILD" > "$W/gpu_train.log" 2>&1
  echo "gpu_train.sh: rc $? after $(elapsed) s" >> "$OUT/summary.txt"
  grep -E "^data:|^-- |^    |^device:|^\||^\([abc]\) rrfp-mm" "$W/gpu_train.log" >> "$OUT/summary.txt"
else
  echo "gpu_train.sh: not run ($left s left)" >> "$OUT/summary.txt"
fi
left=$((TOTAL - $(elapsed)))
if [ "$left" -gt 60 ] && [ -n "${KPROF:-}" ]; then
  timeout -k 5 "$left" bench/gpu_kprof.sh "$BUILD" vit > "$W/kprof_vit.log" 2>&1
  echo "gpu_kprof.sh vit: rc $? after $(elapsed) s" >> "$OUT/summary.txt"
  head -40 "$W/kprof_vit.log" >> "$OUT/summary.txt"
else
  echo "gpu_kprof.sh vit: not run ($left s left, KPROF '${KPROF:-}')" >> "$OUT/summary.txt"
fi
gpu_finish train_check.tgz
