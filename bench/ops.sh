#!/bin/sh
# ops.sh — CPU op benchmark: GEMM GFLOP/s at the model's shapes for BLIS and OpenBLAS side by side
# (ratio blis/openblas), a linear + GELU loop per library, and attention forward/backward throughput
# through backend_cpu. Everything is measured in one invocation of rrfp-bench-ops (bench/bench_ops.c).
#
# Usage: bench/ops.sh [BUILD/rrfp-mm | BUILD] [rrfp-bench-ops options...]
#   THREADS=N (default 2, this machine's core count) sets the thread count of both libraries and of
#   the engine's OpenMP loops. The figures in README.md's "Benchmarks" section come from this script.
set -eu
target=${1:-build/rrfp-mm}
[ $# -gt 0 ] && shift
if [ -d "$target" ]; then dir=$target; else dir=$(dirname "$target"); fi
bench="$dir/rrfp-bench-ops"
if [ ! -x "$bench" ]; then
    echo "ops.sh: $bench not found: build first (make build, or cmake --build $dir --target rrfp-bench-ops)" >&2
    exit 1
fi
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -m), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$bench" --threads "${THREADS:-2}" "$@"
