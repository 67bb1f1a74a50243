#!/usr/bin/env bash
# gpu_attention.sh — the attention benchmark (device; target: the own kernel within 2x of PyTorch's flash time): ours against PyTorch's flash attention on the
# same packings, bf16, forward and backward time and TFLOP/s (bench/gpu_attn_bench.c and
# bench/gpu_attention_torch.py: the packings, the FLOP count and the timing are described there):
#   the ViT's images (64..1024 patches, 16 heads of 64, bidirectional), the LM's samples (16..4096 tokens,
#   32 heads of 128, causal), the synthetic source's many short samples (256 of 8..24 tokens, 8 heads of 64).
# Ours, run twice (the second run repeats the own kernel's bf16-storage figures: the spread between the two
# is the noise):
#   1. cuDNN on (forward and backward) through the bf16 table, and the own tensor-core kernel on bf16
#      storage (own_tc_bf16);
#   2. cuDNN off (RRFP_CUDNN_ATTENTION=0): the own tensor-core kernel through the bf16 table (f32 buffers of
#      bf16 values, converted on load), and own_tc_bf16 again.
# The backward versions measured against the shipping one (v1 and v2's alternatives) are dev/cuda/run_variants.sh.
# Each run ends with the line naming the backward's kernels.
# The path column says which path ran (cudnn/own_tc: forward/backward, from the backend's counters).
# Without a device every part says "not measured".
#
# Usage: bench/gpu_attention.sh [build-dir] [reps]     (default build, 10)
set -uo pipefail
BUILD=${1:-build}
REPS=${2:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-/usr/bin/python3}
EXE="$BUILD/rrfp-bench-gpu-attn"
[ -x "$EXE" ] || { echo "gpu_attention.sh: $EXE not found; build first" >&2; exit 1; }
echo "== ours, cuDNN on and own_tc_bf16"
"$EXE" "$REPS"
echo "== ours, cuDNN off (RRFP_CUDNN_ATTENTION=0) and own_tc_bf16 again"
RRFP_CUDNN_ATTENTION=0 "$EXE" "$REPS"
echo "== PyTorch ($PY)"
"$PY" "$HERE/gpu_attention_torch.py" "$REPS"
exit 0
