#!/usr/bin/env bash
# run_variants.sh — the own attention kernel's backward versions against the shipping one, in one invocation on a
# device (dev/cuda/README.md): bench/gpu_attn_bench.c built against the dev backend (build/dev/librrfp-cuda.so,
# -DRRFP_DEV_CUDA=ON), cuDNN off, each run ending with the line naming the backward's kernels:
#   1. the shipping backward (v2); 2. v1 (RRFP_FA_BWD=v1); 3. v2 with 8-warp dk/dv blocks at d 128
#   (RRFP_FA_DKDV_WARPS=8); 4. v2 with the double-buffered dq kernel at d 96 / 128 (RRFP_FA_DQ=double); 5. v2 with
#   a call's blocks longest first over all samples (RRFP_FA_LPT=1).
# Usage: dev/cuda/run_variants.sh [build-dir] [reps]     (default build, 10)
set -uo pipefail
BUILD=${1:-build}
REPS=${2:-10}
EXE="$BUILD/rrfp-bench-gpu-attn-dev"
LIB="$BUILD/dev/librrfp-cuda.so"
[ -x "$EXE" ] && [ -f "$LIB" ] || { echo "run_variants.sh: $EXE or $LIB not found; configure with -DRRFP_DEV_CUDA=ON and build" >&2; exit 1; }
export RRFP_CUDA_LIB="$LIB" RRFP_CUDNN_ATTENTION=0
echo "== own kernel, the shipping backward"
"$EXE" "$REPS"
for v in RRFP_FA_BWD=v1 RRFP_FA_DKDV_WARPS=8 RRFP_FA_DQ=double RRFP_FA_LPT=1; do
  echo "== own kernel, backward with $v"
  env "$v" "$EXE" "$REPS"
done
exit 0
