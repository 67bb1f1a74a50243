#!/usr/bin/env bash
# recompute.sh — what activation recompute (train.recompute) costs in time and saves in activation memory, on the CPU
# backend: one process trains the same batch (data.fixed_batch) under recompute none, selective and full, in one
# invocation. A step's time is its CPU time (user + sys, one thread: a shared machine's load stretches the wall clock,
# not the work): (CPU of a STEPS-step run - CPU of a 1-step run) / (STEPS - 1), the runs of every mode repeated ROUNDS
# times interleaved, the least of the rounds. Printed per mode: that time and its ratio to none's, the fastest step's
# wall time (metrics step_time_s), the process's peak RSS and the dry run's activations (rank 0) for the same recipe.
# Usage: bench/recompute.sh [build-cpu/rrfp-mm] [STEPS] [ROUNDS] [extra --set arguments...]
set -euo pipefail
BIN=${1:-build-cpu/rrfp-mm}
STEPS=${2:-5}
ROUNDS=${3:-2}
shift $(($# < 3 ? $# : 3))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/cpu_step_lib.sh"
# the default llava.ini model (ViT 128 x 2, LM 256 x 4, SwiGLU 688) on generated data, 4 x 1024-token microbatches
sets=(--set data.source=synthetic --set data.fixed_batch=true --set model.vocab=64 --set data.microbatch_tokens=1024
      --set data.microbatches=4 --set data.min_patches=16 --set data.max_patches=64 --set optim.warmup=1
      --set train.checkpoint_every=-1 --set runtime.threads=1 "$@")
vsets() { echo "--set train.recompute=$1"; }
cpu_rounds none selective full
printf "%-10s %16s %8s %16s %14s %16s\n" recompute "CPU s per step" ratio "wall s (fastest)" "peak RSS MiB" "activations MiB"
base=
for m in none selective full; do
  read -r t w rss < <(cpu_step "$m")
  acts=$("$BIN" train "$ROOT/recipes/llava.ini" "${sets[@]}" --set train.recompute=$m --dry-run |
    awk '$1 == "0" && NF >= 13 { print ($11 == "GiB") ? $10 * 1024 : $10 }')
  base=${base:-$t}
  printf "%-10s %16.4f %8.3f %16.4f %14.1f %16s\n" $m "$t" "$(awk -v a="$t" -v b="$base" 'BEGIN { print a / b }')" "$w" \
    "$rss" "$acts"
done
