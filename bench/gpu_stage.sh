#!/usr/bin/env bash
# gpu_stage.sh — issue 11's benchmark: one pipeline stage of the 7B recipe, bf16, forward + backward,
# ours against PyTorch in the same invocation:
#   lm:  4 LM blocks of width 4096, SwiGLU 11008, 32 heads, 4096-token packed microbatches of samples
#        of varying length (64..1024 tokens);
#   vit: the ViT at CLIP-L width (1024, 16 heads, MLP 4096, 24 blocks), 576-patch images.
# Figures: tokens/s and MFU = model FLOPs / time / 989 TFLOP/s (H100 dense bf16; FLOP formula and its
# check in bench/gpu_stage_torch.py). Ours is the trainer's step (rrfp-mm train, runtime.backend =
# cuda, runtime.precision = bf16, data.source = synthetic, data.fixed_batch) of a model whose other
# half is one tiny block, so its tokens/s includes that small rest (its FLOPs are not counted: MFU is
# a slight underestimate). Targets (issue 11): LM stage MFU >= 45%, ours >= 1.0x PyTorch.
#
# Always (no GPU needed), the CPU-side checks: the FLOP formula against the FLOPs PyTorch's module
# really runs at tiny shapes, the packing plan, and our bench command line run at tiny width on the
# CPU backend in bf16 (same flags as the device run, metrics parsed the same way). Without a device
# every device figure is printed as "not measured: no GPU".
#
# Usage: bench/gpu_stage.sh [build-dir] [steps]     (default build, 6 steps: the first 2 are warm-up)
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-6}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
EXE="$BUILD/rrfp-mm"
PY=/usr/bin/python3
[ -x "$EXE" ] || { echo "gpu_stage.sh: $EXE not found; build first" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# the stage shapes as recipe overrides (the tiny other half: 1 block of width 64 / 32)
lm_sets=(--set model.text_width=4096 --set model.text_layers=4 --set model.text_heads=32 --set model.ffn_hidden=11008
         --set model.vision_width=32 --set model.vision_layers=1 --set model.vision_heads=2 --set model.patch=14
         --set data.min_patches=4 --set data.max_patches=16)
vit_sets=(--set model.vision_width=1024 --set model.vision_layers=24 --set model.vision_heads=16 --set model.patch=14
          --set model.text_width=64 --set model.text_layers=1 --set model.text_heads=2 --set model.ffn_hidden=172
          --set data.min_patches=576 --set data.max_patches=576)
common=(--set data.source=synthetic --set data.fixed_batch=true --set data.microbatch_tokens=4096
        --set data.microbatches=1 --set model.vocab=64 --set train.log_every=1 --set train.checkpoint_every=0
        --set checkpoint.keep=0 --set runtime.precision=bf16 --set optim.warmup=1)

# mean tokens/s of the steps after the first 2, from metrics.jsonl
tok_s() { "$PY" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
assert rows and all(r["tokens_per_s"] > 0 for r in rows), rows
print("%.1f" % (sum(r["tokens"] for r in rows) / sum(r["step_time_s"] for r in rows)))' "$1"; }

echo "== CPU-side checks"
"$PY" "$HERE/gpu_stage_torch.py" --check
# our command line at tiny width on the CPU backend: the flags parse, bf16 trains, metrics parse
"$EXE" train "$ROOT/recipes/test-synthetic.ini" "${common[@]}" --set data.microbatch_tokens=256 \
  --set train.steps=4 --set train.run_dir="$T/cpu" > "$T/cpu.log" 2>&1 || { cat "$T/cpu.log"; exit 1; }
echo "check: our bench command (tiny, CPU backend, bf16): $(tok_s "$T/cpu/metrics.jsonl") tokens/s parsed from metrics ok"
for stage in lm vit; do
  sets=lm_sets; [ $stage = vit ] && sets=vit_sets
  eval "args=(\"\${${sets}[@]}\")"
  "$EXE" train "$ROOT/recipes/test-synthetic.ini" "${args[@]}" "${common[@]}" --set runtime.backend=cuda \
    --set train.steps="$STEPS" --dry-run > "$T/dry-$stage.log" 2>&1 || { cat "$T/dry-$stage.log"; exit 1; }
  echo "check: $stage stage recipe valid (--dry-run): $(grep -m1 -o 'total [^|]*' "$T/dry-$stage.log" || echo ok)"
done

echo "== device figures"
if ! "$EXE" version 2>&1 | grep -q "^backends: cpu, cuda"; then
  why=$("$EXE" version 2>&1 | grep -i cuda | head -1)
  for stage in lm vit; do
    echo "$stage stage: ours tokens/s, MFU: not measured: no GPU ($why)"
    echo "$stage stage: PyTorch tokens/s, MFU: not measured: no GPU"
    echo "$stage stage: ours / PyTorch: not measured: no GPU"
  done
  exit 0
fi
for stage in lm vit; do
  sets=lm_sets; [ $stage = vit ] && sets=vit_sets
  eval "args=(\"\${${sets}[@]}\")"
  torch_json=$("$PY" "$HERE/gpu_stage_torch.py" --stage $stage --reps 10 | tail -1)
  "$EXE" train "$ROOT/recipes/test-synthetic.ini" "${args[@]}" "${common[@]}" --set runtime.backend=cuda \
    --set train.steps="$STEPS" --set train.run_dir="$T/$stage" > "$T/$stage.log" 2>&1 || { cat "$T/$stage.log"; exit 1; }
  ours=$(tok_s "$T/$stage/metrics.jsonl")
  "$PY" - "$stage" "$ours" "$torch_json" "$HERE" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[4])
from gpu_stage_torch import stage_flops, pack_lengths, H100_BF16_DENSE
stage, ours, t = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
D, F, L = (4096, 11008, 4) if stage == "lm" else (1024, 4096, 24)
lens = pack_lengths(stage, 4096)
fl_per_tok = stage_flops(stage, lens, D, F, L) / sum(lens)
mfu = ours * fl_per_tok / H100_BF16_DENSE
print("%s stage: ours %.0f tokens/s, MFU %.1f%% | PyTorch %s %.0f tokens/s, MFU %.1f%% | ours / PyTorch %.2fx"
      % (stage, ours, 100 * mfu, t["torch"], t["tokens_per_s"], 100 * t["mfu"], ours / t["tokens_per_s"]))
PY
done
