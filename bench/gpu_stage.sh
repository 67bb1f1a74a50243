#!/usr/bin/env bash
# gpu_stage.sh — the GPU path's speed: one pipeline stage of the 7B recipe, bf16, ours against PyTorch on the
# same samples (a plan file of sample shapes, `HxW+F`, written by bench/gpu_stage_torch.py: ours reads it
# as data.synthetic_plan, PyTorch builds its tensors from it):
#   lm:     4 LM blocks of width 4096 (SwiGLU 11008, 32 heads), samples of 64..1024 tokens filling 4096;
#   vit:    the ViT at CLIP-L width (1024, 16 heads, MLP 4096, 24 blocks), seven 576-patch images;
#   stage0: the 7B recipe's pipeline stage 0 (parallel.pp = 8): that ViT on images of 64..576 patches,
#           the projector and 4 LM blocks over the 4096-token microbatch.
# Per stage: ours (rrfp-mm train, runtime.backend = cuda, runtime.precision = bf16, one fixed microbatch,
# runtime.profile = true: its table is printed and its optimiser time gives our forward + backward alone);
# PyTorch eager and torch.compile, each without and with a fused AdamW step; the GEMM-only bound (the
# stage's GEMMs, forward and both gradients, through torch.matmul). MFU = model FLOPs / time / 989
# TFLOP/s (H100 dense bf16; formulas checked in gpu_stage_torch.py --check). Ours runs the stage inside a
# model whose other half is tiny (lm: a 1-block ViT of width 32 on 1-patch images; vit: a 1-block LM of
# width 64; all: vocabulary 64), whose FLOPs are not counted: our MFU is a slight underestimate.
#
# Always (no GPU needed), the CPU-side checks: the FLOP formulas and plans (gpu_stage_torch.py --check),
# and each stage's command line with its plan at tiny width on the CPU backend in bf16 (same flags as the
# device run, metrics parsed the same way). Without a device every device figure is printed as "not
# measured: no GPU".
#
# Usage: bench/gpu_stage.sh [build-dir] [steps]   (default build, 5 steps: the first 2 are warm-up)
# Environment: GPU_STAGE_BUDGET_S: stop starting device parts when fewer seconds than a part's limit are
#              left of this budget (default 0: no budget); GPU_STAGE_STAGES (default "lm vit stage0");
#              PY: the python3 with PyTorch (default /usr/bin/python3); GPU_STAGE_TINY=1: the device part
#              at tiny width (a smoke test of this script, e.g. with BUILD holding rrfp-mm-emu as rrfp-mm);
#              GPU_STAGE_TOKENS: the microbatch (default 4096; smaller for a smoke test);
#              GPU_STAGE_LOGS=DIR: keep the parts' logs, metrics and plans there; GPU_STAGE_CPU_CHECKS=0: skip
#              the CPU-side checks (the device script: its minutes are the device's).
set -uo pipefail
BUILD=${1:-build}
STEPS=${2:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
EXE="$BUILD/rrfp-mm"
PY=${PY:-/usr/bin/python3}
STAGES=${GPU_STAGE_STAGES:-lm vit stage0}
BUDGET=${GPU_STAGE_BUDGET_S:-0}
START=$(date +%s)
[ -x "$EXE" ] || { echo "gpu_stage.sh: $EXE not found; build first" >&2; exit 1; }
T=$(mktemp -d)
# GPU_STAGE_LOGS=DIR: keep every part's log, metrics and plan there (the device script's $OUT)
trap '[ -n "${GPU_STAGE_LOGS:-}" ] && mkdir -p "$GPU_STAGE_LOGS" && cp -r "$T"/. "$GPU_STAGE_LOGS"/ 2>/dev/null; rm -rf "$T"' EXIT

# the stage shapes as recipe overrides (the tiny other half) and the options common to every run: shared with
# bench/gpu_kprof.sh
source "$HERE/gpu_stage_sets.sh"

# seconds left of the budget (a large number without one)
left() { if [ "$BUDGET" -gt 0 ]; then echo $((BUDGET - ($(date +%s) - START))); else echo 100000; fi; }
# run LIMIT_S NAME CMD...: under `timeout` when the budget allows, else "not run"
run_part() {
  local lim=$1 name=$2; shift 2
  if [ "$(left)" -lt "$lim" ]; then echo "$name: not run: $(left) s left of GPU_STAGE_BUDGET_S=$BUDGET"; return 2; fi
  timeout -k 5 "$lim" "$@"
}

# mean tokens/s (or patches/s) of the steps after the first 2, and the same without the optimiser's GPU
# time (runtime.profile), from metrics.jsonl; prints "tps tps_fwd_bwd step_s" and the profile table
ours_stats() { "$PY" - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
key = "patches" if sys.argv[2] == "vit" else "tokens"
assert rows and all(r["tokens_per_s"] > 0 for r in rows), rows
n = sum(r[key] for r in rows)
t = sum(r["step_time_s"] for r in rows)
opt = sum(r["profile"]["optimiser"]["ms"] for r in rows) / 1e3 if all("profile" in r for r in rows) else 0.0
print("%.1f %.1f %.6f" % (n / t, n / (t - opt), t / len(rows)))
if all("profile" in r for r in rows):
    kinds = list(rows[0]["profile"])
    ms = {k: sum(r["profile"][k]["ms"] for r in rows) / len(rows) for k in kinds}
    la = {k: sum(r["profile"][k]["launches"] for r in rows) / len(rows) for k in kinds}
    tot = sum(ms.values())
    for k in kinds:
        print("    %-13s %9.2f ms %5.1f%% %7.0f launches" % (k, ms[k], 100 * ms[k] / tot if tot else 0, la[k]), file=sys.stderr)
    print("    %-13s %9.2f ms of GPU time per step (step %.2f ms); device peak %.0f MiB"
          % ("total", tot, 1e3 * t / len(rows), rows[-1].get("device_peak_mb", 0)), file=sys.stderr)
PY
}

CPU_CHECKS=${GPU_STAGE_CPU_CHECKS:-1}
for stage in $STAGES; do
  "$PY" "$HERE/gpu_stage_torch.py" --write-plan $stage "$T/plan-$stage.txt" $TOKENS || exit 1
done
[ "$CPU_CHECKS" = 1 ] && echo "== CPU-side checks"
[ "$CPU_CHECKS" = 1 ] && { "$PY" "$HERE/gpu_stage_torch.py" --check || exit 1; }
for stage in $STAGES; do
  [ "$CPU_CHECKS" = 1 ] || break
  # the plan at tiny width on the CPU backend: the flags parse, bf16 trains on exactly the plan's tokens
  "$EXE" train "$ROOT/recipes/test-synthetic.ini" "${tiny_sets[@]}" "${common[@]}" --set train.steps=3 \
    --set data.synthetic_plan="$T/plan-$stage.txt" --set train.run_dir="$T/cpu-$stage" > "$T/cpu-$stage.log" 2>&1 \
    || { cat "$T/cpu-$stage.log"; exit 1; }
  ours_stats "$T/cpu-$stage/metrics.jsonl" $stage > "$T/cpu-$stage.stats" 2>/dev/null
  read -r tps _ _ < "$T/cpu-$stage.stats"
  want=$("$PY" -c "import sys; sys.path.insert(0, '$HERE'); from gpu_stage_torch import *; p = read_plan('$T/plan-$stage.txt'); print(sum(h*w+f for h,w,f in p), sum(h*w for h,w,f in p))")
  got=$("$PY" -c "import json; r = json.loads(open('$T/cpu-$stage/metrics.jsonl').readline()); print(r['tokens'], r['patches'])")
  [ "$want" = "$got" ] || { echo "check: $stage: ours trained on $got tokens / patches, the plan has $want"; exit 1; }
  sets=${stage}_sets
  eval "args=(\"\${${sets}[@]}\")"
  "$EXE" train "$ROOT/recipes/test-synthetic.ini" "${args[@]}" "${common[@]}" --set runtime.backend=cuda \
    --set data.synthetic_plan="$T/plan-$stage.txt" --set train.steps="$STEPS" --dry-run > "$T/dry-$stage.log" 2>&1 \
    || { cat "$T/dry-$stage.log"; exit 1; }
  echo "check: $stage: plan of $want (tokens, patches) trained as such at tiny width on the CPU ($tps /s parsed); device recipe valid (--dry-run: $(grep -m1 -o 'total [^|]*' "$T/dry-$stage.log" || echo ok))"
done

echo "== device figures"
if ! grep -q "^backends: cpu, cuda" <<<"$("$EXE" version 2>&1)"; then
  why=$("$EXE" version 2>&1 | grep -i cuda | head -1)
  for stage in $STAGES; do
    echo "$stage stage: ours, PyTorch eager / compile (with and without AdamW), GEMM bound: not measured: no GPU ($why)"
  done
  exit 0
fi
"$PY" -c "import torch; print('PyTorch', torch.__version__, torch.cuda.get_device_name(0))"
# The parts, most wanted first (each under a time limit, skipped when the budget cannot hold it):
# phase 1, stage by stage: ours (with its profile table and the dry run against the device peak) and
# PyTorch eager without AdamW; phase 2: torch.compile of the LM stage without AdamW; phase 3, stage by
# stage: the GEMM bound and PyTorch eager with AdamW; phase 4: the other torch.compile runs. Then the
# summaries.
ours_part() {
  local stage=$1 plan="$T/plan-$1.txt" sets=${1}_sets
  [ "${GPU_STAGE_TINY:-0}" = 1 ] && sets=tiny_sets
  eval "args=(\"\${${sets}[@]}\")"
  echo "-- $stage stage ($(wc -w < "$plan") samples, plan: $(head -c 100 "$plan")...)"
  echo "not run" > "$T/ours-$stage"
  if run_part 60 "$stage ours" "$EXE" train "$ROOT/recipes/test-synthetic.ini" "${args[@]}" "${common[@]}" \
       --set runtime.backend=cuda --set runtime.profile=true --set data.synthetic_plan="$plan" \
       --set train.steps="$STEPS" --set train.run_dir="$T/$stage" > "$T/$stage.log" 2>&1; then
    ours_stats "$T/$stage/metrics.jsonl" $stage > "$T/$stage.stats" 2> "$T/$stage.prof"
    read -r tps tps_fb step_s < "$T/$stage.stats"
    echo "$tps $tps_fb" > "$T/ours-$stage"
    echo "$stage ours: $tps /s with AdamW, $tps_fb /s forward + backward (step - optimiser GPU time); profile per step:"
    cat "$T/$stage.prof"
    # the dry run's estimate of this rank's device memory against the backend's measured high-water mark
    "$EXE" train "$ROOT/recipes/test-synthetic.ini" "${args[@]}" "${common[@]}" --set runtime.backend=cuda \
      --set data.synthetic_plan="$plan" --set train.steps="$STEPS" --dry-run > "$T/dry-$stage.log" 2>&1
    "$PY" - "$T/dry-$stage.log" "$T/$stage/metrics.jsonl" <<'PY'
import json, re, sys
m = re.search(r"largest rank: ([0-9.]+) (KiB|MiB|GiB)", open(sys.argv[1]).read())
peak = json.loads(open(sys.argv[2]).readlines()[-1]).get("device_peak_mb")
if m and peak:
    est = float(m.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)]
    print("    memory: dry-run estimate %.0f MiB, device peak %.0f MiB (backend high-water mark): estimate / peak %.3f"
          % (est, peak, est / peak))
else:
    print("    memory: no estimate or no device peak to compare")
PY
  else
    echo "$stage ours: not run, failed or timed out:"; tail -5 "$T/$stage.log" 2>/dev/null
  fi
}
torch_part() { # stage mode optim limit
  run_part "$4" "$1 torch $2 optim=$3" "$PY" "$HERE/gpu_stage_torch.py" --stage "$1" --plan "$T/plan-$1.txt" \
    --mode "$2" --optim "$3" --reps 5 > "$T/torch-$1-$2$3" 2> "$T/torch-$1-$2$3.err"
  tail -1 "$T/torch-$1-$2$3"
}
for stage in $STAGES; do
  ours_part $stage
  torch_part $stage eager 0 30
done
case " $STAGES " in *" lm "*) torch_part lm compile 0 80 ;; esac
for stage in $STAGES; do
  run_part 20 "$stage gemm bound" "$PY" "$HERE/gpu_stage_torch.py" --stage $stage --plan "$T/plan-$stage.txt" --gemm \
    --reps 5 > "$T/gemm-$stage" 2> "$T/gemm-$stage.err"
  tail -1 "$T/gemm-$stage"
  torch_part $stage eager 1 30
done
for stage in $STAGES; do
  for optim in 0 1; do
    [ $stage = lm ] && [ $optim = 0 ] && continue
    torch_part $stage compile $optim 80
  done
done
for stage in $STAGES; do
  res() { local f=$1; if [ -s "$f" ]; then tail -1 "$f"; else echo "{\"not_measured\": \"$(tail -1 "$f.err" 2>/dev/null | tr -d '"\\' | head -c 100)\"}"; fi; }
  "$PY" - "$stage" "$T/plan-$stage.txt" "$(cat "$T/ours-$stage")" "$(res "$T/torch-$stage-eager0")" "$(res "$T/torch-$stage-eager1")" \
    "$(res "$T/torch-$stage-compile0")" "$(res "$T/torch-$stage-compile1")" "$(res "$T/gemm-$stage")" "$HERE" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[9])
from gpu_stage_torch import read_plan, stage_flops, stage_tokens, H100_BF16_DENSE
stage, plan = sys.argv[1], read_plan(sys.argv[2])
fl_tok = stage_flops(stage, plan) / stage_tokens(stage, plan)
unit = "patches/s" if stage == "vit" else "tokens/s"
ours = [float(x) for x in sys.argv[3].split()] if sys.argv[3] != "not run" else None
def js(s):
    try:
        return json.loads(s)
    except Exception:
        return {"not_measured": s[:80]}
t = {k: js(v) for k, v in zip(["eager", "eager+AdamW", "compile", "compile+AdamW"], sys.argv[4:8])}
g = js(sys.argv[8])
def fig(tps):
    return "%8.0f %s, MFU %5.1f%%" % (tps, unit, 100 * tps * fl_tok / H100_BF16_DENSE)
print("%s stage summary (model FLOPs %.3e per microbatch):" % (stage, stage_flops(stage, plan)))
if ours:
    print("  ours fwd+bwd          %s" % fig(ours[1]))
    print("  ours fwd+bwd+AdamW    %s" % fig(ours[0]))
else:
    print("  ours                  not measured")
for k, v in t.items():
    if "tokens_per_s" in v:
        line = "  torch %-15s %s" % (k, fig(v["tokens_per_s"]))
        if ours:
            line += " | ours / torch %.2fx" % ((ours[0] if "AdamW" in k else ours[1]) / v["tokens_per_s"])
        print(line)
    else:
        print("  torch %-15s not measured: %s" % (k, v.get("not_measured", v)))
if "tokens_per_s_bound" in g:
    print("  GEMMs alone           %s (GEMMs at %.0f TFLOP/s)" % (fig(g["tokens_per_s_bound"]), g["gemm_tflops"]))
else:
    print("  GEMMs alone           not measured")
PY
done
