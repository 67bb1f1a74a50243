#!/usr/bin/env bash
# pipeline.sh — real pipeline steps under mpirun on this machine: step time of each dispatch mode and
# hint against `fixed-sync 1f1b`, measured in the same invocation (bench/bench_pipeline.c).
#   PP=2: two ranks, one core each, real compute.
#   PP=4: four ranks sharing two cores, with a smaller LM (oversubscribed; waits must not spin).
# Usage: bench/pipeline.sh [BUILD_DIR]    (default build/; builds rrfp-bench-pipeline if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
cmake --build "$BUILD" --target rrfp-bench-pipeline -j 2 >/dev/null
BIN="$BUILD/rrfp-bench-pipeline"
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
export OMP_NUM_THREADS=1
echo "== PP=2, multimodal variance"
timeout 600 $MPI -np 2 "$BIN" --kind mm --microbatches 8 --repeats 5 --dt 128 --layers 8
echo "== PP=2, text-like variance"
timeout 600 $MPI -np 2 "$BIN" --kind text --microbatches 8 --repeats 5 --dt 128 --layers 8
echo "== PP=4 (4 ranks on 2 cores), multimodal variance"
timeout 600 $MPI -np 4 "$BIN" --kind mm --microbatches 16 --repeats 3 --dt 64 --layers 8
