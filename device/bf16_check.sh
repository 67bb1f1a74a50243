#!/usr/bin/env bash
# device/bf16_check.sh — issue 20's checks on a GPU machine, at most ~3 minutes, logs under $OUT.
# Run from the checkout (after `source .gpu/setup.sh && cd "$ROOT"`, ../shared/device/README.md):
#   device/bf16_check.sh
# 1. nvidia-smi and the build's backends                                    ($OUT/env.txt)
# 2. ctest -L gpu: the op matrix in fp32 / bf16 (2-byte bf16 weights, AdamW writing the compute copy,
#    rounding in the producing kernels), the model step CUDA vs CPU, the pipeline on the GPU
#    (70 s limit)                                                           ($OUT/ctest_gpu.log)
# 3. bench/gpu_stage.sh: ours (with runtime.profile: per-kind GPU time and launches, device peak) and
#    PyTorch eager / torch.compile with and without AdamW, GEMM bound, on the same plans; LM stage first,
#    each part under its own limit, stopping when the 3 minutes are spent  ($OUT/gpu_stage.log, and each
#    part's log / metrics.jsonl under $OUT/gpu_stage/)
# Exit status: ctest's (the benchmark reports, it does not gate).
set -u
OUT=${OUT:-$PWD/bf16_check_out}
mkdir -p "$OUT"
START=$(date +%s)
BUILD=${BUILD:-build}
elapsed() { echo $(($(date +%s) - START)); }
{
  date -u
  nvidia-smi 2>&1 | head -20
  "$BUILD/rrfp-mm" version 2>&1
  git log --oneline -1 2>/dev/null
} > "$OUT/env.txt" 2>&1
(cd "$BUILD" && timeout -k 5 70 ctest -L gpu --output-on-failure --timeout 60) > "$OUT/ctest_gpu.log" 2>&1
ctest_rc=$?
echo "ctest -L gpu: rc $ctest_rc after $(elapsed) s" | tee -a "$OUT/summary.txt"
grep -E "tests passed|Passed|Failed|\*\*\*|Not Run|Skipped" "$OUT/ctest_gpu.log" | tail -12 >> "$OUT/summary.txt"
left=$((178 - $(elapsed)))
if [ "$left" -gt 40 ]; then
  GPU_STAGE_BUDGET_S=$((left - 5)) GPU_STAGE_LOGS="$OUT/gpu_stage" GPU_STAGE_CPU_CHECKS=0 PY=${PY:-python3} \
    timeout -k 5 "$left" bench/gpu_stage.sh "$BUILD" 5 > "$OUT/gpu_stage.log" 2>&1
  echo "gpu_stage.sh: rc $? after $(elapsed) s" | tee -a "$OUT/summary.txt"
  grep -A8 "stage summary" "$OUT/gpu_stage.log" >> "$OUT/summary.txt"
else
  echo "gpu_stage.sh: not run ($left s left)" | tee -a "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
exit $ctest_rc
