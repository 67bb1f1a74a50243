#!/usr/bin/env bash
# device/attn_check.sh — issue 24's one prepared device run (at most 4 minutes), on the GPU machine after
#   source .gpu/setup.sh && cd "$ROOT" && device/attn_check.sh
# Every log goes under $OUT (default ./attn_out); a short summary is printed last.
#   1. the gpu attention tests with RRFP_CUDNN_STRICT=1 (a cuDNN self-check disagreement is an error; the
#      test named for cuDNN fails when cuDNN did not run a case within its support): the own tensor-core
#      kernel (flash_attn_gpu), the bf16 op matrix, the cuDNN forward and backward tests, the fallback;
#   2. the cuDNN diagnosis (docs/cuda.md, DESIGN.md section 3): RRFP_CUDNN_DIAG=1 (outputs filled with 0xFF
#      before each run, rows never written reported per sample), a single-sample case first, then the
#      ragged causal case, then every attention case; CUDNN_LOGLEVEL_DBG=3 with cuDNN's log in its own file;
#   3. the benchmark, bench/gpu_attention.sh (ours: cuDNN and the own kernel, against PyTorch).
#   4. attention in training: 6 bf16 steps on CUDA with cuDNN, with the own kernel, and the CPU's, side by side.
# Each part runs under `timeout` (70 + 20 + 20 + 30 + 70 + 30 s at most: 4 minutes in all); a part that times
# out is reported as such and the next one runs.
set -u
OUT=${OUT:-$PWD/attn_out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
export OUT BUILD
START=$(date +%s)
part() { # name seconds command...: runs it, rc into $OUT/name.rc, log into $OUT/name.log
    local name=$1 secs=$2
    shift 2
    local t0=$(date +%s)
    timeout -k 5 "$secs" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$rc" > "$OUT/$name.rc"
    echo "$name: rc $rc ($(( $(date +%s) - t0 )) s)$([ $rc = 124 ] && echo ', TIMED OUT')" | tee -a "$OUT/summary.txt"
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; git log --oneline -1 2>/dev/null; } \
    > "$OUT/device.txt" 2>&1
ls "$BUILD"/test_cuda_ops "$BUILD"/test_flash_attn "$BUILD"/rrfp-bench-gpu-attn >> "$OUT/device.txt" 2>&1

# 1. the tests (ctest: each with its own environment, strict)
part 1_tests 70 bash -c "cd '$BUILD' && RRFP_CUDNN_STRICT=1 ctest --output-on-failure --timeout 60 -R \
'^(flash_attn_gpu|cuda_ops_gpu_bf16|cuda_ops_gpu_bf16_attn_cudnn|cuda_ops_gpu_bf16_attn_cudnn_bwd|cuda_ops_gpu_bf16_attn_fallback|cuda_ops_gpu)$'"

# 2. the diagnosis: the single-sample case, the ragged causal case (cuDNN's own log for each), every case
diag() { # name case-substring
    RRFP_CUDNN_DIAG=1 RRFP_CUDNN_VERBOSE=1 RRFP_CUDNN_STRICT=1 RRFP_CUDNN_ATTENTION_BWD=1 CUDNN_LOGLEVEL_DBG=3 \
        CUDNN_LOGDEST_DBG="$OUT/$1.cudnn_log" "$BUILD/test_cuda_ops" --bf16 --expect-cudnn "$2"
}
part 2a_diag_single 20 bash -c "$(declare -f diag); diag 2a_diag_single attn_single_d64"
part 2b_diag_ragged 20 bash -c "$(declare -f diag); diag 2b_diag_ragged attn_ragged_causal"
part 2c_diag_all 30 bash -c "RRFP_CUDNN_DIAG=1 RRFP_CUDNN_VERBOSE=1 RRFP_CUDNN_STRICT=1 RRFP_CUDNN_ATTENTION_BWD=1 \
'$BUILD/test_cuda_ops' --bf16 --expect-cudnn attn"
for f in "$OUT"/*.cudnn_log; do # cuDNN's API log can be large: keep its head and the engine lines
    [ -f "$f" ] || continue
    grep -iE "engine|knob|heur|error|warn" "$f" | head -c 4000000 > "$f.grep"
    head -c 8000000 "$f" > "$f.head" && rm -f "$f"
done

# 3. the benchmark
part 3_bench 70 bench/gpu_attention.sh "$BUILD" 10

# 4. attention in training: 6 bf16 CUDA steps of the tiny synthetic LLaVA (head dims 32 and 64) with cuDNN
# (forward and backward, self-checked on each plan's first run as in training), the same with cuDNN off (the
# own kernel), and the CPU backend's bf16 run: per-step loss and grad norm side by side
train() { # name env...
    local name=$1
    shift
    env "$@" "$BUILD/rrfp-mm" train recipes/test-synthetic.ini --set runtime.precision=bf16 --set train.steps=6 \
        --set optim.warmup=1 --set train.log_every=1 --set checkpoint.keep=0 --set train.checkpoint_every=0 \
        --set model.vision_width=64 --set model.text_width=128 --set train.run_dir="$OUT/train_$name" \
        $([ "$name" = cpu ] || echo --set runtime.backend=cuda)
}
part 4_train 30 bash -c "$(declare -f train); train cudnn RRFP_CUDNN_VERBOSE=1 RRFP_CUDNN_ATTENTION_BWD=1 && \
train own RRFP_CUDNN_ATTENTION=0 && train cpu X=1 && ${PY:-python3} -c '
import json, sys
rows = {n: [json.loads(l) for l in open(\"$OUT/train_%s/metrics.jsonl\" % n)] for n in (\"cudnn\", \"own\", \"cpu\")}
print(\"step  loss cudnn / own / cpu            grad norm cudnn / own / cpu\")
for a, b, c in zip(rows[\"cudnn\"], rows[\"own\"], rows[\"cpu\"]):
    print(a[\"step\"], \" %.5f %.5f %.5f   %.4f %.4f %.4f\" % (a[\"loss\"], b[\"loss\"], c[\"loss\"], a[\"grad_norm\"], b[\"grad_norm\"], c[\"grad_norm\"]))
'"

{
    echo "== total $(( $(date +%s) - START )) s"
    echo "== tests"; grep -E "tests passed|tests failed|Failed|\*\*\*|Passed" "$OUT/1_tests.log" | tail -12
    echo "== diagnosis (single, ragged)"
    grep -hE "diag|DIFFERS|matches|refused|failed|FAIL|error" "$OUT/2a_diag_single.log" "$OUT/2b_diag_ragged.log" | head -30
    echo "== every case"; grep -E "FAIL|path=|cuda_ops" "$OUT/2c_diag_all.log" | head -60
    echo "== training (cuDNN, own kernel, CPU)"; grep -E "cuDNN|^step  loss|^[1-6] " "$OUT/4_train.log" | tail -14
    echo "== benchmark"; cat "$OUT/3_bench.log"
} > "$OUT/summary_tail.txt" 2>&1
cat "$OUT/summary_tail.txt"
