#!/usr/bin/env bash
# device/attn_check.sh — the attention paths' one prepared device run (at most 4 minutes), on the GPU machine after
#   source .gpu/setup.sh && cd "$ROOT" && device/attn_check.sh
# What comes back from a device run is a few files, so: every log goes into ONE tarball,
# $OUT/attn_logs.tar.gz, beside $OUT/summary.txt, and the summary (the important lines of every part) is
# printed to stdout last. $OUT defaults to ./attn_out.
#   1. the gpu attention tests with RRFP_CUDNN_STRICT=1 (a cuDNN self-check disagreement is an error; the
#      test named for cuDNN fails when cuDNN did not run a case within its support): the own tensor-core
#      kernel (flash_attn_gpu), the fp32 and bf16 op matrices, cuDNN forward + backward, cuDNN forward with
#      the own backward, cuDNN off;
#   2. the cuDNN diagnosis (docs/cuda.md, "Attention"): RRFP_CUDNN_DIAG=1 (outputs filled with 0xFF before
#      each run, rows never written reported per sample), a single-sample case first, then the ragged causal
#      case, then every attention case; CUDNN_LOGLEVEL_DBG=3 with cuDNN's log in its own file;
#   3. the benchmark, bench/gpu_attention.sh (ours: cuDNN and the own kernel, against PyTorch);
#   4. attention in training: 6 bf16 steps on CUDA with cuDNN, with the own kernel, and the CPU's, side by side.
# Each part runs under `timeout` (70 + 20 + 20 + 30 + 120 + 30 s at most: under 5 minutes in all; the benchmark runs the own kernel's backward variants too); a part that times
# out is reported as such and the next one runs.
set -u
OUT=${OUT:-$PWD/attn_out}
BUILD=${BUILD:-build}
PY=${PY:-python3}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/attn_check.XXXXXX) # the logs, packed into $OUT/attn_logs.tar.gz at the end
export W BUILD PY
START=$(date +%s)
. "$(dirname "$0")/common.sh"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; git log --oneline -1 2>/dev/null; } \
    > "$W/device.txt" 2>&1
ls "$BUILD"/test_cuda_ops "$BUILD"/test_flash_attn "$BUILD"/rrfp-bench-gpu-attn >> "$W/device.txt" 2>&1

# 1. the tests (ctest: each with its own environment, strict)
part 1_tests 70 bash -c "cd '$BUILD' && RRFP_CUDNN_STRICT=1 ctest --output-on-failure --timeout 60 -R \
'^(flash_attn_gpu|cuda_ops_gpu|cuda_ops_gpu_bf16|cuda_ops_gpu_bf16_attn_cudnn|cuda_ops_gpu_bf16_attn_cudnn_fwd_only|cuda_ops_gpu_bf16_attn_fallback)$'"

# 2. the diagnosis: the single-sample case, the ragged causal case (cuDNN's own log for each), every case
diag() { # name case-substring
    RRFP_CUDNN_DIAG=1 RRFP_CUDNN_VERBOSE=1 RRFP_CUDNN_STRICT=1 CUDNN_LOGLEVEL_DBG=3 \
        CUDNN_LOGDEST_DBG="$W/$1.cudnn_log" "$BUILD/test_cuda_ops" --bf16 --expect-cudnn "$2"
}
part 2a_diag_single 20 bash -c "$(declare -f diag); diag 2a_diag_single attn_single_d64"
part 2b_diag_ragged 20 bash -c "$(declare -f diag); diag 2b_diag_ragged attn_ragged_causal"
part 2c_diag_all 30 bash -c "RRFP_CUDNN_DIAG=1 RRFP_CUDNN_VERBOSE=1 RRFP_CUDNN_STRICT=1 '$BUILD/test_cuda_ops' --bf16 \
--expect-cudnn attn"
for f in "$W"/*.cudnn_log; do # cuDNN's API log can be large: keep its head and the engine lines
    [ -f "$f" ] || continue
    grep -iE "engine|knob|heur|error|warn" "$f" | head -c 4000000 > "$f.grep"
    head -c 8000000 "$f" > "$f.head" && rm -f "$f"
done

# 3. the benchmark
part 3_bench 120 bench/gpu_attention.sh "$BUILD" 10

# 4. attention in training: 6 bf16 CUDA steps of the tiny synthetic LLaVA (head dims 32 and 64) with cuDNN
# (forward and backward, self-checked on each plan's first run as in training), the same with cuDNN off (the
# own kernel), and the CPU backend's bf16 run: per-step loss and grad norm side by side
train() { # name env...
    local name=$1
    shift
    env "$@" "$BUILD/rrfp-mm" train recipes/test-synthetic.ini --set runtime.precision=bf16 --set train.steps=6 \
        --set optim.warmup=1 --set train.log_every=1 --set checkpoint.keep=0 --set train.checkpoint_every=0 \
        --set model.vision_width=64 --set model.text_width=128 --set train.run_dir="$W/train_$name" \
        $([ "$name" = cpu ] || echo --set runtime.backend=cuda)
}
part 4_train 30 bash -c "$(declare -f train); train cudnn RRFP_CUDNN_VERBOSE=1 && \
train own RRFP_CUDNN_ATTENTION=0 && train cpu X=1 && $PY -c '
import json, sys
rows = {n: [json.loads(l) for l in open(\"$W/train_%s/metrics.jsonl\" % n)] for n in (\"cudnn\", \"own\", \"cpu\")}
print(\"step  loss cudnn / own / cpu            grad norm cudnn / own / cpu\")
for a, b, c in zip(rows[\"cudnn\"], rows[\"own\"], rows[\"cpu\"]):
    print(a[\"step\"], \" %.5f %.5f %.5f   %.4f %.4f %.4f\" % (a[\"loss\"], b[\"loss\"], c[\"loss\"], a[\"grad_norm\"], b[\"grad_norm\"], c[\"grad_norm\"]))
'"
rm -rf "$W"/train_*/checkpoints

{
    cat "$W/parts.txt"
    echo "== total $(( $(date +%s) - START )) s"
    cat "$W/device.txt"
    echo "== tests"; grep -E "Test +#|tests passed|tests failed" "$W/1_tests.log" | tail -12
    grep -hE "FAIL|DIFFERS|error" "$W/1_tests.log" | head -30
    echo "== diagnosis (single, ragged)"
    grep -hE "diag|DIFFERS|matches|refused|failed|FAIL|error" "$W/2a_diag_single.log" "$W/2b_diag_ragged.log" | head -40
    echo "== every case"; grep -E "FAIL|path=|cuda_ops" "$W/2c_diag_all.log" | head -60
    echo "== training (cuDNN, own kernel, CPU)"; grep -E "cuDNN|^step  loss|^[1-6] |rror" "$W/4_train.log" | tail -20
    echo "== benchmark"; cat "$W/3_bench.log"
} > "$OUT/summary.txt" 2>&1
cp "$OUT/summary.txt" "$W/summary.txt"
tar czf "$OUT/attn_logs.tar.gz" -C "$W" .
rm -rf "$W"
cat "$OUT/summary.txt"
