#!/usr/bin/env bash
# export_hf_layout.sh — `rrfp-mm export hf` of a checkpoint written under pp 2 x tp 2 (its TP slices and
# pipeline shards reassembled): train a CLIP-tower LLaVA 2 steps with 4 ranks, export the last checkpoint
# (the recipe found as RUN_DIR/recipe.ini), import the export, and require every tensor of the import to
# equal the sharded checkpoint's, bit for bit (`rrfp-mm tensors diff`, tolerance 0).
# More `--set model.K=V` after WORKDIR (export_hf_layout_pp2tp2_lm_variants: the LM variants, a tied
# embedding whose last-stage copy is in no checkpoint file) train that model, and the import of the export
# must print each `K = V` back.
# Usage: export_hf_layout.sh RRFP_MM RECIPE WORKDIR [--set model.K=V ...]
set -euo pipefail
EXE=$1 RECIPE=$2 W=$3
shift 3
EXTRA=("$@")
rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
CL=(--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16
    --set model.vision_feature_layer=-2 --set model.projector_act=gelu --set model.text_layers=4 --set optim.warmup=1
    --set train.steps=2 --set train.checkpoint_every=2 --set parallel.pp=2 --set parallel.tp=2 "${EXTRA[@]}")
timeout 200 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np 4 "$EXE" train "$RECIPE" "${CL[@]}" \
  --set train.run_dir="$W/run" >"$W/train.log" 2>&1 || { cat "$W/train.log"; fail "pp 2 x tp 2 training"; }
CK="$W/run/checkpoints/step-00000002"
ls "$CK"/model.pp1tp1*.safetensors >/dev/null 2>&1 || fail "the checkpoint is not sharded by (pp, tp)"
"$EXE" export hf --checkpoint "$CK" --out "$W/hf" --image-token-id 1 >"$W/export.log" 2>&1 \
  || { cat "$W/export.log"; fail "export hf"; }
"$EXE" import llava --hf "$W/hf" --out "$W/back" >"$W/import.log" 2>&1 || { cat "$W/import.log"; fail "import llava"; }
for kv in "${EXTRA[@]}"; do
  [ "$kv" = --set ] && continue
  k=${kv#model.}; k=${k%%=*}; v=${kv#*=}
  grep -qx "$k = $v" "$W/import.log" || { cat "$W/import.log"; fail "the import of the export does not print $k = $v"; }
done
"$EXE" tensors diff "$CK" "$W/back" --files model --quiet --rtol 0 --atol 0 >"$W/diff.log" 2>&1 \
  || { cat "$W/diff.log"; fail "the export of the sharded checkpoint differs from it"; }
echo "$(tail -1 "$W/diff.log")"
echo "export hf layout: ok"
