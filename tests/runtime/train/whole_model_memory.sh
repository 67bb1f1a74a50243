#!/usr/bin/env bash
# whole_model_memory.sh — the commands that read or write a whole model hold no more copies of it than they
# must (docs/engine.md "Peak memory of the whole-model commands"): a checkpoint save holds none (the safetensors
# writer writes each tensor from where it lies, not from a copy of the file), eval and generate hold neither a
# gradient buffer nor AdamW moments (the model built for the forward only, runtime/model/model.h stage_init_forward),
# export hf holds the model once (no gradient buffer, no copy of the file; a LoRA run's merged linears made one at
# a time as they are written, not all held) and import holds a tensor or two,
# not an HF shard's tensors (each is read again, one at a time, as its shard is written). One process trains a 26M-parameter CLIP-tower model (a model file of about 100 MB) with and
# without a checkpoint, evaluates it, exports it and imports the export, each under a Python parent that runs
# only that command (its RUSAGE_CHILDREN maxrss is the command's peak). Bounds, each from the model's bytes
# (F32, the model file), its largest tensor and a fixed 16 MiB:
#   save:   peak(train + checkpoints) - peak(train) <= largest + 16 MiB   (a copy of the file: 2 x model more)
#   eval:   peak(eval) <= peak(train) - 3 x model + 16 MiB                (the gradient and the moments: 3 x model
#           more; was 2, with the gradient buffer held)
#   generate: the same bound, on the same checkpoint (8 demo-data records packed for its tokenizer and template)
#   export: peak(export hf) <= model + largest + 16 MiB                   (was 3 x model)
#   merged: peak(export hf of a LoRA run) <= model + 2 x largest + 16 MiB (was 3 x model, then 2: the merged copies)
#   import: peak(import llava) <= 2 x largest + 16 MiB                    (was 2 x model: the shard converted, then
#           a copy of the file; one model with the shard held whole)
#   device: the save's bound with runtime.backend = cuda on the emulated device (RRFP_MM_EMU), 2 LM layers: the
#           values and both moments are copied to the host a tensor at a time as the files are written (was 3 x model);
#           and eval runs on an emulated device of the model's size + 16 MiB (RR_EMU_DEVICE_MB), where a gradient
#           buffer (a model more) does not fit
# Usage: whole_model_memory.sh RRFP_MM RECIPE WORKDIR [RRFP_MM_EMU]
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 EMU=${4:-}
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
if grep -q 'libasan' <<<"$(ldd "$BIN" 2>/dev/null)"; then
  echo "SKIP: a sanitizer's allocator keeps freed blocks a while: peak memory is not measured under ASan"
  exit 77
fi
MARGIN=16384
M=(--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16
   --set model.vision_feature_layer=-2 --set model.projector_act=gelu
   --set model.text_width=512 --set model.text_layers=8 --set model.text_heads=8 --set model.ffn_hidden=1376
   --set data.microbatch_tokens=64 --set data.microbatches=1 --set data.max_patches=4 --set runtime.threads=1
   --set optim.warmup=1 --set train.steps=1 --set model.vocab=320)
# (model.vocab 320: the 300-id tokenizer generate reads below fits the synthetic run's model)
# peak NAME COMMAND...: runs it alone under a Python parent; prints its maxrss (KiB)
peak() {
  local name=$1; shift
  /usr/bin/python3 -c 'import resource, subprocess, sys
with open(sys.argv[1], "w") as log:
    rc = subprocess.run(sys.argv[2:], stdout=log, stderr=log).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$W/$name.log" "$@" || { cat "$W/$name.log"; fail "$name"; }
}
train=$(peak train "$BIN" train "$RECIPE" "${M[@]}" --set train.checkpoint_every=-1 --set train.run_dir="$W/nosave") || exit 1
save=$(peak save "$BIN" train "$RECIPE" "${M[@]}" --set train.run_dir="$W/run") || exit 1
CK="$W/run/checkpoints/step-00000001"
[ -f "$CK/optimizer.safetensors" ] || fail "no checkpoint written"
ev=$(peak eval "$BIN" eval "$RECIPE" "${M[@]}" --checkpoint "$CK" --samples 1) || exit 1
# generate on the same checkpoint: a tokenizer and shards (their chat template and image preprocessing) from 8 records
( cd "$W" && "$BIN" demo-data --out d --samples 8 --heldout 2 >/dev/null && "$BIN" tokenizer train --vocab 300 \
    --manifest d/train.json --out tok.json --quiet && "$BIN" pack --manifest d/train.json --images d/images \
    --tokenizer tok.json --out shards --image-preprocess llava --image-size 16 >pack.log 2>&1 ) || fail "demo data"
IMG=$(cd "$W"/d/images && printf "%s\n" * | sort | sed -n 1p)
gen=$(peak generate "$BIN" generate "$RECIPE" "${M[@]}" --checkpoint "$CK" --set data.source=shards \
      --set data.shards="$W/shards" --set data.tokenizer="$W/tok.json" --image "$W/d/images/$IMG" \
      --prompt "What colour is it?" --max-new-tokens 4) || exit 1
grep -q '^generate: .* new token' "$W/generate.log" || { cat "$W/generate.log"; fail "generate decoded nothing"; }
ex=$(peak export "$BIN" export hf --checkpoint "$CK" --out "$W/hf" --image-token-id 1) || exit 1
im=$(peak import "$BIN" import llava --hf "$W/hf" --out "$W/back") || exit 1
# a LoRA run from the checkpoint (every linear of the LM adapted): its export merges each
"$BIN" train "$RECIPE" "${M[@]}" --set lora.r=4 --set lora.alpha=8 --set train.init_from="$CK" \
  --set train.run_dir="$W/lora" >"$W/lora.log" 2>&1 || { cat "$W/lora.log"; fail "LoRA run"; }
lm=$(peak merged "$BIN" export hf --checkpoint "$W/lora/checkpoints/step-00000001" --out "$W/merged" --image-token-id 1) || exit 1
# the import holds what it read: the export's tensors, bit for bit those of the checkpoint
"$BIN" tensors diff "$CK" "$W/back" --files model --quiet --rtol 0 --atol 0 >"$W/diff.log" 2>&1 \
  || { cat "$W/diff.log"; fail "the import of the export differs from the checkpoint"; }
model=$(( $(stat -c %s "$CK/model.safetensors") / 1024 ))
largest=$(/usr/bin/python3 -c 'import json, struct, sys
b = open(sys.argv[1], "rb"); n = struct.unpack("<Q", b.read(8))[0]; h = json.loads(b.read(n)); h.pop("__metadata__", None)
print(max(v["data_offsets"][1] - v["data_offsets"][0] for v in h.values()) // 1024)' "$CK/model.safetensors")
echo "model file $model KiB, largest tensor $largest KiB; peaks (KiB): train $train, train + checkpoints $save, eval $ev, generate $gen, export hf $ex, import llava $im, export hf of the LoRA run $lm"
if [ -n "$EMU" ]; then # 2 LM layers (a model file of about 27 MB): the emulated device is slow to copy to and from
  D=("${M[@]}" --set model.text_layers=2 --set runtime.backend=cuda)
  dtrain=$(peak device_train "$EMU" train "$RECIPE" "${D[@]}" --set train.checkpoint_every=-1 \
           --set train.run_dir="$W/device_nosave") || exit 1
  dsave=$(peak device_save "$EMU" train "$RECIPE" "${D[@]}" --set train.run_dir="$W/device_run") || exit 1
  DCK="$W/device_run/checkpoints/step-00000001"
  [ -f "$DCK/optimizer.safetensors" ] || fail "no checkpoint written on the device"
  dmodel=$(( $(stat -c %s "$DCK/model.safetensors") / 1024 ))
  # eval on a device of the model's size + 16 MiB (RR_EMU_DEVICE_MB: a cudaMalloc past it fails as on a GPU)
  dmem=$(( (dmodel + MARGIN) / 1024 ))
  RR_EMU_DEVICE_MB=$dmem "$EMU" eval "$RECIPE" "${D[@]}" --checkpoint "$DCK" --samples 1 >"$W/device_eval.log" 2>&1 \
    || { cat "$W/device_eval.log"; fail "eval does not run on a device of $dmem MiB: the model ($dmodel KiB) + $MARGIN KiB (a gradient buffer: a model more)"; }
  grep -q '"eval_step":1,' "$W/device_eval.log" || { cat "$W/device_eval.log"; fail "eval on the device printed no result"; }
  echo "on the emulated device: model file $dmodel KiB; peaks (KiB): train $dtrain, train + checkpoints $dsave; eval ran on a $dmem MiB device"
  [ "$dmodel" -gt $(( largest + MARGIN )) ] || fail "the device's model ($dmodel KiB) is too small to tell a copy of it from the margin"
  [ $(( dsave - dtrain )) -le $(( largest + MARGIN )) ] \
    || fail "a checkpoint save on the device grew the peak by $(( dsave - dtrain )) KiB, over the largest tensor ($largest KiB) + $MARGIN KiB (the model: $dmodel KiB; host copies of the values and moments: 3 x model)"
fi
[ "$model" -gt $(( 2 * (largest + MARGIN) )) ] || fail "the model ($model KiB) is too small to tell a copy of it from the margin"
[ $(( save - train )) -le $(( largest + MARGIN )) ] \
  || fail "a checkpoint save grew the peak by $(( save - train )) KiB, over the largest tensor ($largest KiB) + $MARGIN KiB (the model: $model KiB)"
[ "$ev" -le $(( train - 3 * model + MARGIN )) ] \
  || fail "eval peaked at $ev KiB: not 3 models ($(( 3 * model )) KiB, the gradient and the moments) under training's $train KiB (+ $MARGIN KiB)"
[ "$gen" -le $(( train - 3 * model + MARGIN )) ] \
  || fail "generate peaked at $gen KiB: not 3 models ($(( 3 * model )) KiB, the gradient and the moments) under training's $train KiB (+ $MARGIN KiB)"
[ "$ex" -le $(( model + largest + MARGIN )) ] \
  || fail "export hf peaked at $ex KiB, over the model ($model KiB) + its largest tensor ($largest KiB) + $MARGIN KiB"
[ "$lm" -le $(( model + 2 * largest + MARGIN )) ] \
  || fail "export hf of a LoRA run peaked at $lm KiB, over the model ($model KiB) + 2 x its largest tensor ($largest KiB) + $MARGIN KiB"
[ "$im" -le $(( 2 * largest + MARGIN )) ] \
  || fail "import llava peaked at $im KiB, over 2 x its largest tensor ($largest KiB) + $MARGIN KiB (the model: $model KiB)"
echo "whole model memory: ok"
