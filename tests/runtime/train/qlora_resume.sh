#!/usr/bin/env bash
# qlora_resume.sh — a QLoRA run's checkpoints (docs/training.md "QLoRA"), started from a full-precision checkpoint
# (train.init_from, so the base is quantised from trained weights, not from the seed's init): a run stopped at step
# 2 and resumed to step 4 gives bit for bit the uninterrupted run's losses and gradient norms (the resume reads the
# NF4 codes it trained on: a re-quantisation of the dequantised values would move the absmaxes); `tensors ls` shows
# the quantised blocks; a checkpoint whose codes were altered is refused by their checksum; the recipe's refusal of
# nf4 without lora.r (tp and zero: qlora_layouts.sh).
# Usage: qlora_resume.sh RRFP_MM RECIPE WORKDIR
set -euo pipefail
BIN=$1 RECIPE=$2 W=$3
. "$(dirname "$0")/../../support/util/resume_lib.sh"
rm -rf "$W"; mkdir -p "$W"
"$BIN" train "$RECIPE" --set train.steps=1 --set optim.warmup=1 --set train.run_dir="$W/base" >"$W/base.txt" 2>&1
S=(--set train.steps=4 --set optim.warmup=1 --set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set lora.quant=nf4
   --set checkpoint.keep=0 --set train.init_from="$W/base/checkpoints/step-00000001")
resume_bitwise "$RECIPE" "${S[@]}"
ck="$W/part/checkpoints/step-00000004"
ls=$("$BIN" tensors ls "$ck" 2>&1)
for t in "text.blocks.1.mlp.down.weight.nf4.codes +U8 +\[5504\]" "text.blocks.1.mlp.down.weight +NF4 +\[64, 172\] +172 blocks of 64, absmax U8 double-quantised \(1 of 256\)" \
         "text.blocks.1.mlp.down.lora_B.weight +F32"; do
  grep -Eq "$t" <<<"$ls" || { echo "FAIL: no '$t' in tensors ls $ck:"; echo "$ls" | grep down; exit 1; }
done
echo "tensors ls: $(grep -E 'mlp.down.weight +NF4' <<<"$ls" | head -1)"
# an altered code byte: refused by its checksum, naming the tensor
cp -r "$W/part/checkpoints/step-00000002" "$W/bad"
/usr/bin/python3 - "$W/bad/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
raw = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
b = h["text.blocks.0.attn.q.weight.nf4.codes"]["data_offsets"][0]
raw[8 + n + b] ^= 0x11
open(p, "wb").write(raw)
PY
if "$BIN" train "$RECIPE" "${S[@]}" --set train.run_dir="$W/part" --set checkpoint.resume="$W/bad" >"$W/bad.txt" 2>&1; then
  echo "FAIL: a checkpoint with altered NF4 codes was resumed"; exit 1
fi
grep -q "text.blocks.0.attn.q.weight.nf4.codes' fails its checksum" "$W/bad.txt" || { echo "FAIL: no checksum error:"; tail -3 "$W/bad.txt"; exit 1; }
echo "altered codes: $(grep -o "tensor 'text.blocks.0.attn.q.weight.nf4.codes' fails its checksum" "$W/bad.txt")"
# the recipe's refusals
"$BIN" train "$RECIPE" --set lora.quant=nf4 --dry-run >"$W/r0.txt" 2>&1 && { echo "FAIL: nf4 without lora.r accepted"; exit 1; }
grep -q "lora.quant" "$W/r0.txt" || { echo "FAIL: lora.r = 0 not named:"; cat "$W/r0.txt"; exit 1; }
echo "qlora resume: ok"
