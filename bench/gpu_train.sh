#!/usr/bin/env bash
# gpu_train.sh — whole runs of `rrfp-mm train` on one GPU at real sizes, side by side with Hugging Face
# transformers on the same samples, in one invocation:
#   (a) LLaVA-1.5-7B stage 1: CLIP ViT-L/14-336 + Vicuna-7B shapes, tower and LM frozen, the projector trained;
#   (b) a full fine-tune of CLIP ViT-L/14-336 + a Qwen2-1.5B-shaped LM (GQA 12/2, q/k/v biases, tied embeddings);
#   (c) LLaVA-1.5-7B stage 2 with LoRA (recipes/llava-1.5-7b-lora.ini's r 128, alpha 256, dropout 0.05 on every
#       LM linear; tower frozen, projector trained).
# Random weights (nothing is downloaded). The data: bench/gpu_train_data.py writes a LLaVA-665k-like manifest
# (fixed seed: its turn counts and lengths, 6% text-only records) over generated PNGs; `rrfp-mm tokenizer
# train` makes a tokenizer of it, `rrfp-mm pack --template vicuna_v1 --image-preprocess llava` the shards.
# Ours: one pass over the shards (train.epochs = 1, 8 microbatches of 4096 tokens a step, bf16, pp = tp = dp = 1;
# the recipe written by bench/gpu_train_flops.py --recipe). Theirs (bench/gpu_train_hf.py): transformers'
# LlavaForConditionalGeneration with attn_implementation sdpa, and flash_attention_2 where flash_attn is
# installed, on the token ids and masks of the same shards (rrfp-bench-samples) and the pixels of the same
# files, batches padded as its Trainer forms them, the same AdamW; (c) with PEFT's LoRA, skipped without peft.
# Each side: samples/s, tokens/s (real tokens), MFU (model FLOPs of bench/gpu_train_flops.py / time / the
# device's dense bf16 peak from its table, none for a device not in it), device peak memory (ours: metrics
# device_peak_mb; theirs: torch.cuda.max_memory_allocated) and the share of the time waiting for data, over
# the steps after the first GPU_TRAIN_WARMUP; then a markdown table and the ratios rrfp-mm / transformers.
#
# Always (no GPU needed), the CPU-side checks on tiny shapes (GPU_TRAIN_CPU_CHECKS=0 leaves them out: the device
# script's minutes are the device's): each config's model-FLOP formula against the FLOPs of the cuBLAS products
# rrfp-mm-emu ran (the CUDA emulation's count, RR_EMU_STEP_FLOPS; needs BUILD/rrfp-mm-emu, the CPU build's),
# and rrfp-mm's metrics row of one step holding every sample against the shape gpu_train_hf.py batches from
# the same samples (--shape-only; needs PyTorch).
#
# Usage: bench/gpu_train.sh [build-dir]   (default build)
# Environment: GPU_TRAIN_TINY=1: the runs at tiny shapes (the CI's dry mode: on the CPU backend without a device,
#              the transformers side saying why it did not run); GPU_TRAIN_CONFIGS (default "a b c");
#              GPU_TRAIN_SAMPLES: records of the data set (default 960; tiny 48: the checks' data); GPU_TRAIN_WARMUP: steps left
#              out of each side's figures (default 2; tiny 1); GPU_TRAIN_HF_BATCH / GPU_TRAIN_HF_ACCUM: the
#              transformers side's per-device batch and gradient accumulation per config ("a:8 b:8 c:4",
#              "a:5 b:5 c:10": about our 8 x 4096 tokens an optimiser step); GPU_TRAIN_PART_S: the time limit
#              of each part (default 600); GPU_TRAIN_BUDGET_S: each part limited to what is left of this budget,
#              none started with less than a minute left (default 0: no budget); GPU_TRAIN_LOGS=DIR: keep logs, metrics, recipes
#              and results there (the device script's $OUT); PY: the python3 with PyTorch (default /usr/bin/python3).
set -uo pipefail
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
EXE="$BUILD/rrfp-mm"
PY=${PY:-/usr/bin/python3}
TINY=${GPU_TRAIN_TINY:-0}
CONFIGS=${GPU_TRAIN_CONFIGS:-a b c}
CPU_CHECKS=${GPU_TRAIN_CPU_CHECKS:-1}
BUDGET=${GPU_TRAIN_BUDGET_S:-0}
PART_S=${GPU_TRAIN_PART_S:-600}
START=$(date +%s)
if [ "$TINY" = 1 ]; then
  N=${GPU_TRAIN_SAMPLES:-48} WARMUP=${GPU_TRAIN_WARMUP:-1} TINYF=--tiny
  HF_BATCH=${GPU_TRAIN_HF_BATCH:-a:4 b:4 c:4} HF_ACCUM=${GPU_TRAIN_HF_ACCUM:-a:1 b:1 c:1}
else
  N=${GPU_TRAIN_SAMPLES:-960} WARMUP=${GPU_TRAIN_WARMUP:-2} TINYF=
  HF_BATCH=${GPU_TRAIN_HF_BATCH:-a:8 b:8 c:4} HF_ACCUM=${GPU_TRAIN_HF_ACCUM:-a:5 b:5 c:10}
fi
[ -x "$EXE" ] || { echo "gpu_train.sh: $EXE not found; build first" >&2; exit 1; }
[ -x "$BUILD/rrfp-bench-samples" ] || { echo "gpu_train.sh: $BUILD/rrfp-bench-samples not found; build first" >&2; exit 1; }
T=$(mktemp -d)
trap '[ -n "${GPU_TRAIN_LOGS:-}" ] && mkdir -p "$GPU_TRAIN_LOGS" && (cd "$T" && find . -name "*.png" -prune -o -name "*.rrs" -prune -o -type f -print | tar -cf - -T - 2>/dev/null) | tar -xf - -C "$GPU_TRAIN_LOGS"; rm -rf "$T"' EXIT
flops() { "$PY" "$HERE/gpu_train_flops.py" "$@"; }
pick() { local k=$1; shift; for kv in $*; do [ "${kv%%:*}" = "$k" ] && echo "${kv#*:}" && return; done; echo 1; }
left() { if [ "$BUDGET" -gt 0 ]; then echo $((BUDGET - ($(date +%s) - START))); else echo 100000; fi; }
# run_part LIMIT_S NAME CMD...: under `timeout` (the limit, or what is left of the budget), or "not run" when
# less than a minute is left (status 2)
run_part() {
  local lim=$1 name=$2 l; shift 2
  l=$(left)
  if [ "$l" -lt 60 ]; then echo "$name: not run: $l s left of GPU_TRAIN_BUDGET_S=$BUDGET" >&2; return 2; fi
  [ "$l" -lt "$lim" ] && lim=$l
  timeout -k 5 "$lim" "$@"
}

# make_data DIR RECORDS IMAGES SCALE VOCAB SIDE: manifest, images, tokenizer, shards and their samples as JSON lines
make_data() {
  local d=$1 g=$(( $6 / 14 ))
  "$PY" "$HERE/gpu_train_data.py" "$d/data" "$2" 1 "$3" "$4" > "$d/data.log" 2>&1 &&
  "$EXE" tokenizer train --vocab "$5" --manifest "$d/data/train.json" --text-file "$d/data/template.txt" --special "<s>" \
    --special "</s>" --out "$d/tok.json" \
    >> "$d/data.log" 2>&1 &&
  "$EXE" pack --manifest "$d/data/train.json" --images "$d/data/images" --tokenizer "$d/tok.json" --template vicuna_v1 \
    --image-preprocess llava --image-size "$6" --patch 14 --min-patches $((g * g)) --max-patches $((g * g)) \
    --out "$d/shards" >> "$d/data.log" 2>&1 &&
  "$BUILD/rrfp-bench-samples" "$d/shards" > "$d/samples.jsonl" 2>> "$d/data.log" ||
  { echo "gpu_train.sh: making the data in $d failed:"; tail -5 "$d/data.log"; return 1; }
  "$PY" - "$d/samples.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
head, s = rows[0], rows[1:]
L = sorted(len(x["ids"]) + sum(g[2] * g[3] - 1 for g in x["images"]) for x in s)
text = sorted(len(x["ids"]) - len(x["images"]) for x in s)
sup = sum(x["mask"].count("1") for x in s) / max(1, sum(len(x["ids"]) for x in s))
q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]
print("data: %d samples (%.1f%% text-only), LM positions per sample mean %.0f, median %d, p90 %d, max %d; text tokens "
      "mean %.0f, median %d, p90 %d; %.0f%% of the text supervised" % (len(s), 100 * sum(not x["images"] for x in s) / len(s),
      sum(L) / len(L), q(L, .5), q(L, .9), L[-1], sum(text) / len(text), q(text, .5), q(text, .9), 100 * sup))
PY
}

if [ "$CPU_CHECKS" = 1 ]; then
  echo "== CPU-side checks (tiny shapes)"
  mkdir -p "$T/check"
  make_data "$T/check" 48 4 0.1 1000 28 || exit 1
  fail=0
  if [ -x "$BUILD/rrfp-mm-emu" ]; then
    for k in $CONFIGS; do  # the model-FLOP formula against the emulation's count of every cuBLAS product
      flops --recipe $k "$T/check/shards" "$T/check/tok.json" "$T/check/emu-$k" --tiny > "$T/check/emu-$k.ini"
      RR_EMU_STEP_FLOPS=1 "$BUILD/rrfp-mm-emu" train "$T/check/emu-$k.ini" --set runtime.backend=cuda --set runtime.threads=1 \
        --set data.microbatch_tokens=512 --set data.window=8 --set train.epochs=0 --set train.steps=1 \
        --set optim.warmup=0 > "$T/check/emu-$k.log" 2>&1 || { tail -5 "$T/check/emu-$k.log"; fail=1; continue; }
      flops --check-emu $k "$T/check/emu-$k/metrics.jsonl" "$T/check/emu-$k.log" || fail=1
    done
  else
    echo "check: FLOP formulas against counted cuBLAS FLOPs: not run: no $BUILD/rrfp-mm-emu (the CPU build has it)"
  fi
  # one step holding every sample: rrfp-mm's metrics row against the shape the transformers side batches
  flops --recipe a "$T/check/shards" "$T/check/tok.json" "$T/check/one" --tiny > "$T/check/one.ini"
  "$EXE" train "$T/check/one.ini" --set runtime.backend=cpu --set runtime.threads=1 --set data.microbatch_tokens=16384 --set data.window=48 \
    --set train.epochs=0 --set train.steps=1 --set optim.warmup=0 > "$T/check/one.log" 2>&1 ||
    { tail -5 "$T/check/one.log"; exit 1; }
  if hf=$("$PY" "$HERE/gpu_train_hf.py" --shape-only --config a --samples "$T/check/samples.jsonl" \
            --manifest "$T/check/data/train.json" --images "$T/check/data/images" --tiny 2> "$T/check/shape.err"); then
    "$PY" - "$T/check/one/metrics.jsonl" "$hf" <<'PY' || fail=1
import json, sys
row, hf = json.loads(open(sys.argv[1]).readline()), json.loads(sys.argv[2])
ok = all(row[k] == hf[k] for k in hf)
print("check: one step of every sample: rrfp-mm's metrics %s, transformers' batches %s: %s"
      % ({k: row[k] for k in hf}, hf, "ok" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
  else
    echo "check: rrfp-mm's step shape against the transformers side's batches: not run ($(tail -1 "$T/check/shape.err"))"
  fi
  [ $fail = 0 ] || { echo "gpu_train.sh: CPU-side checks FAILED"; exit 1; }
fi

echo "== runs"
DEVICE=
if grep -q "^backends: cpu, cuda" <<<"$("$EXE" version 2>&1)" && command -v nvidia-smi > /dev/null; then
  DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
fi
if [ -n "$DEVICE" ]; then
  BACKEND=cuda
elif [ "$TINY" = 1 ]; then
  BACKEND="cpu --set runtime.threads=1" DEVICE=cpu  # one thread: OpenMP's spinning costs a loaded CI machine more
  echo "no GPU ($("$EXE" version 2>&1 | grep -i -m1 cuda)): the runs at tiny shapes on the CPU backend (a dry run of this script)"
else
  for k in $CONFIGS; do echo "($k) $(flops --recipe $k - - - | sed -n 's/^; written by bench\/gpu_train.sh: //p'): rrfp-mm, transformers sdpa / flash_attention_2: not measured: no GPU ($("$EXE" version 2>&1 | grep -i -m1 cuda))"; done
  exit 0
fi
if [ "$TINY" = 1 ] && [ "$CPU_CHECKS" = 1 ] && [ "$N" = 48 ]; then ln -s check "$T/run"  # the checks' data set
elif [ "$TINY" = 1 ]; then mkdir -p "$T/run" && { make_data "$T/run" "$N" 4 0.1 1000 28 || exit 1; }
else mkdir -p "$T/run" && { make_data "$T/run" "$N" 64 1 8000 336 || exit 1; }; fi
"$PY" -c "import torch; print('PyTorch', torch.__version__)" 2>/dev/null
: > "$T/results.jsonl"
for k in $CONFIGS; do
  flops --recipe $k "$T/run/shards" "$T/run/tok.json" "$T/run/ours-$k" $TINYF > "$T/run/$k.ini"
  echo "-- ($k) $(sed -n 's/^; written by bench\/gpu_train.sh: //p' "$T/run/$k.ini")"
  "$EXE" train "$T/run/$k.ini" --set runtime.backend=$BACKEND --dry-run > "$T/run/dry-$k.log" 2>&1 ||
    { echo "($k) dry run failed:"; tail -5 "$T/run/dry-$k.log"; }
  run_part "$PART_S" "($k) rrfp-mm" "$EXE" train "$T/run/$k.ini" --set runtime.backend=$BACKEND > "$T/run/ours-$k.log" 2>&1
  rc=$?
  if [ $rc = 0 ]; then
    flops --ours "$T/run/ours-$k/metrics.jsonl" $k "$WARMUP" "$DEVICE" $TINYF >> "$T/results.jsonl"
    "$PY" - "$T/run/dry-$k.log" "$(tail -1 "$T/results.jsonl")" <<'PY'
import json, re, sys
r = json.loads(sys.argv[2])
m = re.search(r"largest rank: ([0-9.]+) (KiB|MiB|GiB)", open(sys.argv[1]).read())
est = float(m.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)] if m else None
if "not_measured" in r:
    print("    rrfp-mm: not measured: %s" % r["not_measured"])
else:
    print("    rrfp-mm: %d steps after warm-up, %d samples, %.2f samples/s, %.0f tokens/s, %.1f model TFLOP/s, MFU %s, "
          "data wait %.1f%%, loss %.4f" % (r["steps"], r["samples"], r["samples_per_s"], r["tokens_per_s"], r["tflops"],
          "%.1f%%" % (100 * r["mfu"]) if r["mfu"] is not None else "- (%s: not in the peak table)" % r["device"],
          100 * r["data_wait"], r["loss"]))
    print("    memory: dry-run estimate %s, device peak %s%s" % ("%.0f MiB" % est if est else "-",
          "%.0f MiB" % r["peak_mb"] if r["peak_mb"] else "- (no device)",
          ": estimate / peak %.3f" % (est / r["peak_mb"]) if est and r["peak_mb"] else ""))
PY
  else
    why="failed or timed out (status $rc)"; [ $rc = 2 ] && why="not run"
    echo "{\"config\": \"$k\", \"side\": \"rrfp-mm\", \"not_measured\": \"$why: $(tail -1 "$T/run/ours-$k.log" | tr -d '"\\' | head -c 120)\"}" >> "$T/results.jsonl"
    echo "    rrfp-mm: $why:"; tail -5 "$T/run/ours-$k.log"
  fi
  rm -rf "$T/run/ours-$k/checkpoints"
  for attn in sdpa flash_attention_2; do
    if run_part "$PART_S" "($k) transformers $attn" "$PY" "$HERE/gpu_train_hf.py" --config $k --samples "$T/run/samples.jsonl" \
         --manifest "$T/run/data/train.json" --images "$T/run/data/images" --attn $attn --batch "$(pick $k $HF_BATCH)" \
         --accum "$(pick $k $HF_ACCUM)" --warmup "$WARMUP" $TINYF > "$T/run/hf-$k-$attn.json" 2> "$T/run/hf-$k-$attn.err" &&
       [ -s "$T/run/hf-$k-$attn.json" ]; then
      tail -1 "$T/run/hf-$k-$attn.json" >> "$T/results.jsonl"
    else
      echo "{\"config\": \"$k\", \"side\": \"transformers\", \"attn\": \"$attn\", \"not_measured\": \"failed or timed out: $(tail -1 "$T/run/hf-$k-$attn.err" | tr -d '"\\' | head -c 120)\"}" >> "$T/results.jsonl"
    fi
    echo "    transformers $attn: $(tail -1 "$T/results.jsonl")"
  done
done
echo "== summary"
flops --table "$T/results.jsonl" "$DEVICE"
