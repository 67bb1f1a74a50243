#!/usr/bin/env bash
# replay_quick.sh RRFP_MM BENCH_REPLAY WORKDIR MPIRUN... — a replay at P = 8 (text-like durations, M = 16,
# 50 ms per mean forward) under four configurations: every rank finishes every configuration with real
# messages (the measured / simulated makespan ratio is printed, not asserted: timing belongs in bench/replay.sh).
set -euo pipefail
sim=$1 replay=$2 dir=$3
shift 3
mpirun=("$@")
mkdir -p "$dir"
"$sim" sim --stages 8 --microbatches 16 --kind text --seed 1 --dump "$dir/whole.json" --json >/dev/null
"$sim" sim --stages 8 --microbatches 16 --kind text --seed 1 --split-backward --dump "$dir/split.json" --json >/dev/null
timeout 90 "${mpirun[@]}" --mca mpi_yield_when_idle 0 -np 8 "$replay" --durations "$dir/whole.json" --scale 0.05 --estimate-error 0.2 \
  fixed-sync:1f1b:- ready:1f1b:1x lookahead:1f1b:1x adaptive:1f1b:1x
timeout 90 "${mpirun[@]}" --mca mpi_yield_when_idle 0 -np 8 "$replay" --durations "$dir/split.json" --scale 0.05 ready:bfw:1.5x
