#!/usr/bin/env bash
# gpu_bw.sh — the bandwidth-bound ops on a device (bench/gpu_bw_bench.c describes the shapes, the ops,
# the bytes and the timing): RMSNorm / LayerNorm forward and weight gradients (the column sums), SwiGLU / GELU
# forward, the residual add and the gradient norm (sum_squares) at the LM stage's and CLIP-L's shapes, on the
# bf16 table on 2-byte activations: ms, useful GB/s and the share of the peak (default 3350 GB/s, an H100 SXM's; pass
# 4800 on an H200). Expected on an H100 (docs/cuda.md, "Bandwidth-bound kernels"): each op but sum_squares at
# 60-90% of the peak. Without a device it says "not measured".
#
# Usage: bench/gpu_bw.sh [build-dir] [reps] [peak GB/s]     (default build, 20, 3350)
set -uo pipefail
BUILD=${1:-build}
REPS=${2:-20}
PEAK=${3:-3350}
EXE="$BUILD/rrfp-bench-gpu-bw"
[ -x "$EXE" ] || { echo "gpu_bw.sh: $EXE not found; build first" >&2; exit 1; }
"$EXE" "$REPS" "" "$PEAK"
rc=$?
[ "$rc" -eq 77 ] && exit 0
exit "$rc"
