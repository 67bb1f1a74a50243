#!/usr/bin/env bash
# lora.sh — what a LoRA (and a QLoRA nf4) step costs against a full fine-tune step at equal tokens, on the CPU backend
# (docs/training.md "LoRA"): one process per run trains the same batch (data.fixed_batch) as LLaVA's stage 2 does
# (train.freeze = vision: the tower frozen, the projector trained) with the LM trained fully (full), or frozen under
# adapters on every LM linear (lora, lora.r = R), or frozen, NF4-stored and dequantised before each block under the
# same adapters (qlora). A step's time is its CPU time (user + sys, one thread: a shared machine's load stretches the
# wall clock, not the work): (CPU of a STEPS-step run - CPU of a 1-step run) / (STEPS - 1), the runs of every variant
# repeated ROUNDS times interleaved, the least of the rounds. Printed per variant: that time, its ratio to full's
# (the target: lora <= 0.75), the fastest step's wall time (metrics step_time_s) and the process's peak RSS.
# The model is larger than llava.ini's so that the LM's GEMMs dominate a step as they do at 7B: LM 1024 x 4 (16 heads
# of 64, SwiGLU 2752), the llava.ini tower (128 x 2), 2 x 512-token microbatches; R defaults to 32, the ratio r / width
# of LLaVA-1.5-7B's r = 128 on 4096.
# Usage: bench/lora.sh [build-cpu/rrfp-mm] [STEPS] [ROUNDS] [R] [extra --set arguments...]
set -euo pipefail
BIN=${1:-build-cpu/rrfp-mm}
STEPS=${2:-3}
ROUNDS=${3:-2}
R=${4:-32}
shift $(($# < 4 ? $# : 4))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/cpu_step_lib.sh"
sets=(--set data.source=synthetic --set data.fixed_batch=true --set model.vocab=256 --set model.text_width=1024
      --set model.text_heads=16 --set model.ffn_hidden=2752 --set data.microbatch_tokens=512 --set data.microbatches=2
      --set data.min_patches=16 --set data.max_patches=64 --set optim.warmup=1 --set train.freeze=vision
      --set train.checkpoint_every=-1 --set runtime.threads=1 "$@")
variants=(full lora qlora)
vsets() { # variant: its --set arguments
  case $1 in
  full) echo "--set lora.r=0" ;;
  lora) echo "--set lora.r=$R --set lora.alpha=$((2 * R))" ;;
  qlora) echo "--set lora.r=$R --set lora.alpha=$((2 * R)) --set lora.quant=nf4" ;;
  esac
}
cpu_rounds "${variants[@]}"
printf "%-8s %16s %8s %16s %14s\n" variant "CPU s per step" ratio "wall s (fastest)" "peak RSS MiB"
base=
for v in "${variants[@]}"; do
  read -r t w rss < <(cpu_step "$v")
  base=${base:-$t}
  printf "%-8s %16.4f %8.3f %16.4f %14.1f\n" "$v" "$t" "$(awk -v a="$t" -v b="$base" 'BEGIN { print a / b }')" "$w" "$rss"
done
