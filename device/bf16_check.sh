#!/usr/bin/env bash
# device/bf16_check.sh — the bf16 storage checks on a GPU machine, at most ~3 minutes. Run from the checkout
# (after `source .gpu/setup.sh && cd "$ROOT"` on the GPU machine):
#   OUT=... device/bf16_check.sh
# 1. ctest -L gpu: the op matrix in fp32 / bf16 (2-byte bf16 weights, AdamW writing the compute copy,
#    rounding in the producing kernels), the model step CUDA vs CPU, the pipeline on the GPU (70 s limit);
# 2. bench/gpu_stage.sh (the rest of the 3 minutes): per stage (lm, vit, the 7B stage 0) ours with
#    runtime.profile (per-kind GPU time and launches, device peak against the dry run's estimate) and
#    PyTorch eager, then torch.compile of the LM stage, the GEMM bounds and eager with AdamW, then the other
#    compiles, each part under its own limit, skipped when the minutes are spent.
# Only a few files come back from a device run, so everything goes into ONE tarball, $OUT/bf16_check.tgz
# (ctest's log, gpu_stage's log, each part's log, our runs' metrics.jsonl, the plans), beside
# $OUT/summary.txt; stdout carries the key lines: ctest's verdicts, our profile tables, the memory
# comparison and the per-stage summaries. Exit status: ctest's (the benchmark reports, it does not gate).
set -u
OUT=${OUT:-$PWD/bf16_check_out}
mkdir -p "$OUT"
START=$(date +%s)
BUILD=${BUILD:-build}
W=$(mktemp -d)
. "$(dirname "$0")/common.sh"
gpu_ctest
left=$((178 - $(elapsed)))
if [ "$left" -gt 40 ]; then
  GPU_STAGE_BUDGET_S=$((left - 5)) GPU_STAGE_LOGS="$W/gpu_stage" GPU_STAGE_CPU_CHECKS=0 PY=${PY:-python3} \
    timeout -k 5 "$left" bench/gpu_stage.sh "$BUILD" 5 > "$W/gpu_stage.log" 2>&1
  rc=$?
  {
    echo "gpu_stage.sh: rc $rc after $(elapsed) s"
    # our runs (profile per kind, memory) and the per-stage summaries; the torch JSON lines are in the tarball
    grep -E "^-- |ours: |^    [a-z]|stage summary|^  (ours|torch|GEMMs)|not run" "$W/gpu_stage.log"
  } >> "$OUT/summary.txt"
else
  echo "gpu_stage.sh: not run ($left s left)" >> "$OUT/summary.txt"
fi
gpu_finish bf16_check.tgz
