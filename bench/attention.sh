#!/usr/bin/env bash
# attention.sh — CPU attention throughput (engine/cpu/attention.c) on ViT-like (bidirectional, images
# of 64..1024 patches) and LM-like (causal, samples of 100..2000 tokens) packings, against the
# materialising baseline in bench/attn_bench.c and PyTorch 1.13 (bench/attention_torch.py), all in
# this invocation on the same packings. Ours and the baseline use OpenMP's default thread count (one
# per core: 2 here; BLIS inside their parallel regions runs single-threaded), PyTorch
# torch.set_num_threads(2).
#
# Usage: bench/attention.sh [build-dir] [REPS]   (default build, 5 repetitions; medians are reported)
set -euo pipefail
BUILD=${1:-build}
REPS=${2:-5}
BIN="$BUILD/rrfp-bench-attn"
[ -x "$BIN" ] || { echo "attention.sh: $BIN not found; build first: cmake --build $BUILD --target rrfp-bench-attn" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# workload by workload, PyTorch right before ours, so that both see about the same machine load
header=""
"$BIN" --list | while read -r line; do
  echo "$line" | /usr/bin/python3 "$(dirname "$0")/attention_torch.py" "$REPS" > "$T/torch.txt"
  "$BIN" --only "${line%% *}" --torch "$T/torch.txt" --reps "$REPS" $header
  header=--no-header
done
