#!/usr/bin/env bash
# device/bw_check.sh — the bandwidth-bound kernels (docs/cuda.md, "Bandwidth-bound kernels"): one prepared
# device run (about 2 minutes), on the GPU machine after
#   source .gpu/setup.sh && cd "$ROOT" && device/bw_check.sh
#   1. the gpu op tests: the fp32, bf16 and second-stream op matrices (their *_vec / *_misaligned / *_chunks cases
#      fail when a launch took another path; sum_squares must equal the kernels' order bit for bit) and the
#      bf16 table on 2-byte against f32-word activations (within one bf16 ulp on a device);
#   2. bench/gpu_bw.sh: each op's time, useful GB/s and share of the peak (PEAK, default 3350 GB/s: an H100 SXM;
#      4800 on an H200).
# Every log goes into $OUT/bw_logs.tar.gz beside $OUT/summary.txt, which is printed last. $OUT defaults to ./bw_out.
set -u
OUT=${OUT:-$PWD/bw_out}
BUILD=${BUILD:-build}
PEAK=${PEAK:-3350}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/bw_check.XXXXXX)
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; git log --oneline -1 2>/dev/null; } \
    > "$W/device.txt" 2>&1
part 1_tests 90 bash -c "cd '$BUILD' && RRFP_CUDNN_STRICT=1 ctest --output-on-failure --timeout 80 -R \
'^(cuda_ops_gpu|cuda_ops_gpu_bf16|cuda_ops_gpu_stream|cuda_bf16a_gpu)$'"
part 2_bench 60 bench/gpu_bw.sh "$BUILD" 20 "$PEAK"
{
    cat "$W/device.txt" "$W/parts.txt"
    echo "== 1. tests"
    grep -E "Test +#|tests passed|FAIL" "$W/1_tests.log" | head -40
    grep -hE "path=|order|aligned vs misaligned" "$W/1_tests.log" | grep -c "ok$" | sed 's/^/path \/ order \/ bits checks ok: /'
    echo "== 2. bench/gpu_bw.sh (peak $PEAK GB/s)"
    cat "$W/2_bench.log"
} > "$OUT/summary.txt" 2>&1
tar -C "$W" -czf "$OUT/bw_logs.tar.gz" . 2>/dev/null
rm -rf "$W"
cat "$OUT/summary.txt"
