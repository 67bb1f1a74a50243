#!/usr/bin/env bash
# load_memory.sh — peak host memory (maxrss, /usr/bin/time) of each command that reads or writes a whole
# model: a checkpoint save (train, two steps and a checkpoint after each, against the same run without a
# checkpoint), --resume, eval, generate, export hf (of the run, and merged from a LoRA run started from it) and
# import llava, on a synthetic CLIP-tower LLaVA wide enough to see a copy of the model (docs/engine.md "Peak
# memory of the whole-model commands"). Prints each command's peak in MiB and its ratio to the model file's size.
# Usage: bench/load_memory.sh [BUILD_DIR] [WORKDIR]
set -euo pipefail
B=${1:-build-cpu}/rrfp-mm W=${2:-/tmp/rrfp-load-memory}
B_ABS=$(realpath "$B")
R=recipes/test-synthetic.ini
rm -rf "$W"; mkdir -p "$W"
S=(--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16
   --set model.vision_feature_layer=-2 --set model.projector_act=gelu
   --set model.text_width=512 --set model.text_layers=12 --set model.text_heads=8 --set model.ffn_hidden=1376
   --set data.microbatch_tokens=64 --set data.microbatches=1 --set data.max_patches=4 --set runtime.threads=1
   --set optim.warmup=1 --set train.steps=2)
peak() { # NAME COMMAND...: runs it, prints its maxrss in KiB
  local name=$1; shift
  /usr/bin/time -f "%M" -o "$W/$name.rss" "$@" >"$W/$name.log" 2>&1 || { cat "$W/$name.log"; echo "FAIL: $name"; exit 1; }
  cat "$W/$name.rss"
}
declare -A K
K[train_nosave]=$(peak train_nosave "$B" train $R "${S[@]}" --set train.checkpoint_every=-1 --set train.run_dir="$W/nosave")
K[train_save]=$(peak train_save "$B" train $R "${S[@]}" --set train.checkpoint_every=1 --set train.run_dir="$W/run")
CK="$W/run/checkpoints/step-00000001"
K[resume]=$(peak resume "$B" train $R "${S[@]}" --set train.checkpoint_every=-1 --set train.run_dir="$W/run" --resume "$CK")
K[eval]=$(peak eval "$B" eval $R "${S[@]}" --checkpoint "$CK" --samples 1)
K[export_hf]=$(peak export_hf "$B" export hf --checkpoint "$CK" --out "$W/hf" --image-token-id 1)
K[import_llava]=$(peak import_llava "$B" import llava --hf "$W/hf" --out "$W/back")
"$B" train $R "${S[@]}" --set train.steps=1 --set lora.r=4 --set lora.alpha=8 --set train.init_from="$CK" \
  --set train.run_dir="$W/lora" >"$W/lora_train.log" 2>&1 || { cat "$W/lora_train.log"; exit 1; }
K[export_lora]=$(peak export_lora "$B" export hf --checkpoint "$W/lora/checkpoints/step-00000001" --out "$W/merged" --image-token-id 1)
# generate needs a tokenizer: the same model trained one step on demo-data's records, packed
( cd "$W" && "$B_ABS" demo-data --out d --samples 16 --heldout 4 >/dev/null && "$B_ABS" tokenizer train --vocab 300 \
    --manifest d/train.json --out tok.json --quiet && "$B_ABS" pack --manifest d/train.json --images d/images \
    --tokenizer tok.json --out shards >/dev/null 2>&1 ) || { echo "FAIL: demo data"; exit 1; }
G=("${S[@]}" --set data.shards="$W/shards" --set data.tokenizer="$W/tok.json" --set data.microbatch_tokens=512
   --set data.min_patches=4 --set train.steps=1)
"$B" train recipes/llava.ini "${G[@]}" --set train.run_dir="$W/gen" >"$W/gen_train.log" 2>&1 || { cat "$W/gen_train.log"; exit 1; }
IMG=$(cd "$W"/d/images && printf "%s\n" * | sort | sed -n 1p)
K[generate]=$(peak generate "$B" generate recipes/llava.ini "${G[@]}" --set train.run_dir="$W/gen" --checkpoint latest \
  --image "$W/d/images/$IMG" --prompt "What colour is it?" --max-new-tokens 8)
MODEL=$(stat -c %s "$CK/model.safetensors")
OPT=$(stat -c %s "$CK/optimizer.safetensors")
HF=$(du -cb "$W"/hf/*.safetensors | tail -1 | cut -f1)
LARGEST=$(ls -S "$W"/hf/*.safetensors | head -1 | xargs stat -c %s)
echo "model.safetensors $((MODEL >> 20)) MiB, optimizer.safetensors $((OPT >> 20)) MiB, hf shards $((HF >> 20)) MiB (largest $((LARGEST >> 20)) MiB)"
printf "%-14s %10s %8s\n" command "peak MiB" "/ model"
for c in train_nosave train_save resume eval generate export_hf export_lora import_llava; do
  kib=${K[$c]}
  printf "%-14s %10d %8.2f\n" "$c" $((kib >> 10)) "$(echo "scale=4; $kib * 1024 / $MODEL" | bc)"
done
