#!/usr/bin/env bash
# pack_templates.sh — `rrfp-mm pack --template NAME` end to end: a manifest of photographs (python3-skimage)
# packed under every chat template with a tokenizer trained here that has the templates' special tokens,
# each pack counting its records (plain takes only the one-exchange records with an image and rejects the
# others, naming the reason), an unknown template and a tokenizer without the template's tokens refused
# before anything is written, and two training steps on the vicuna_v1 shards; a padded model.vocab (more
# rows than the tokenizer's ids, as Hugging Face checkpoints have) trains and a smaller one is refused.
# usage: pack_templates.sh RRFP_MM RECIPE WORK_DIR
set -u
BIN=$1 RECIPE=$2 W=$3
case "$W" in /tmp/* | */build*/*) ;; *) echo "refusing work dir '$W'"; exit 2 ;; esac
SK=/usr/lib/python3/dist-packages/skimage/data
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
rm -rf "$W" && mkdir -p "$W/img" || exit 2
cp "$SK/rocket.jpg" "$SK/retina.jpg" "$W/img/" || { echo "SKIP: no python3-skimage photographs"; exit 77; }
H='{"from":"human","value":'
G='{"from":"gpt","value":'
cat > "$W/m.jsonl" <<JSONEND
{"id":"a","image":"rocket.jpg","conversations":[$H"What is this?\n<image>"},$G"a rocket on its launch pad"}]}
{"id":"b","image":"retina.jpg","conversations":[$H"<image>\nDescribe it."},$G"a photograph of a retina"},$H"Colour?"},$G"orange"}]}
{"id":"c","conversations":[$H"What colour is the sky?"},$G"blue"}]}
JSONEND
SPECIAL=()
for s in "<s>" "</s>" "<|begin_of_text|>" "<|start_header_id|>" "<|end_header_id|>" "<|eot_id|>" "<|im_start|>" "<|im_end|>"; do
  SPECIAL+=(--special "$s")
done
"$BIN" tokenizer train --vocab 400 --manifest "$W/m.jsonl" "${SPECIAL[@]}" --out "$W/tok.json" --quiet \
  || { echo "FAIL: tokenizer train"; exit 1; }
"$BIN" tokenizer train --vocab 300 --manifest "$W/m.jsonl" --out "$W/tok-plain.json" --quiet || exit 1
for t in rrfp vicuna_v1 llama_3 chatml plain; do
  out=$("$BIN" pack --manifest "$W/m.jsonl" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/shards-$t" \
        --template "$t" --max-reject-fraction 1 2>&1) || { fail "pack --template $t: $out"; continue; }
  want=3; [ "$t" = plain ] && want=1
  got=$(sed -n 's/.*packed \([0-9]*\).*/\1/p' <<<"$out" | head -1)
  [ "$got" = "$want" ] || fail "pack --template $t: packed '$got', expected $want: $out"
  if [ "$t" = plain ]; then
    grep -q "plain template takes one human turn" <<<"$out" || fail "plain: the two-exchange record's rejection is not named: $out"
    grep -q "plain template needs <image>" <<<"$out" || fail "plain: the text-only record's rejection is not named: $out"
  fi
  echo "pack --template $t: $got records packed"
done
out=$("$BIN" pack --manifest "$W/m.jsonl" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/shards-x" --template vicuna 2>&1) \
  && fail "an unknown template was accepted"
grep -q "unknown chat template" <<<"$out" && [ ! -e "$W/shards-x" ] || fail "unknown template: '$out'"
out=$("$BIN" pack --manifest "$W/m.jsonl" --images "$W/img" --tokenizer "$W/tok-plain.json" --out "$W/shards-y" --template chatml 2>&1) \
  && fail "a tokenizer without <|im_start|> was accepted for chatml"
grep -q "no <|im_start|> token, which the chatml template needs" <<<"$out" && [ ! -e "$W/shards-y" ] || fail "missing token: '$out'"
# the refusal names the command that adds them, with every missing one; the tokenizer it writes packs
grep -qF 'rrfp-mm tokenizer add-special --tokenizer IN --add "<|im_start|>,<|im_end|>" --out OUT' <<<"$out" \
  || fail "the refusal does not name tokenizer add-special with the missing tokens: '$out'"
"$BIN" tokenizer add-special --tokenizer "$W/tok-plain.json" --add "<|im_start|>,<|im_end|>" --out "$W/tok-chatml.json" \
  >/dev/null || fail "tokenizer add-special"
"$BIN" pack --manifest "$W/m.jsonl" --images "$W/img" --tokenizer "$W/tok-chatml.json" --out "$W/shards-z" --template chatml \
  >/dev/null 2>&1 && echo "pack --template chatml after tokenizer add-special" || fail "pack after tokenizer add-special"
log=$("$BIN" train "$RECIPE" --set data.source=shards --set data.shards="$W/shards-vicuna_v1" --set data.tokenizer="$W/tok.json" \
      --set model.vocab=0 --set train.steps=2 --set optim.warmup=1 --set data.microbatches=1 --set train.run_dir="$W/run" 2>&1) \
  || fail "training on the vicuna_v1 shards: $log"
grep -q "step     2/2" <<<"$log" && echo "trained 2 steps on the vicuna_v1 shards" || fail "no step 2 in: $log"
# a padded vocabulary (an imported checkpoint's: more rows than token ids) trains; a smaller one is refused
tv=$("$BIN" tokenizer info --tokenizer "$W/tok.json" | sed -n 's/^vocab size: //p')
log=$("$BIN" train "$RECIPE" --set data.source=shards --set data.shards="$W/shards-vicuna_v1" --set data.tokenizer="$W/tok.json" \
      --set model.vocab=$((tv + 7)) --set train.steps=1 --set optim.warmup=1 --set data.microbatches=1 \
      --set train.run_dir="$W/run-padded" 2>&1) || fail "training with model.vocab = $((tv + 7)) (padded): $log"
log=$("$BIN" train "$RECIPE" --set data.source=shards --set data.shards="$W/shards-vicuna_v1" --set data.tokenizer="$W/tok.json" \
      --set model.vocab=$((tv - 1)) --set train.steps=1 --set optim.warmup=1 --set train.run_dir="$W/run-small" 2>&1) \
  && fail "model.vocab below the tokenizer's size was accepted"
grep -q "allowed: 0 (= $tv) or more" <<<"$log" || fail "model.vocab too small: '$log'"
echo "model.vocab $((tv + 7)) (the tokenizer's $tv padded) trains, $((tv - 1)) is refused"
# every shard records its template (data/shard.h): rrfp stays version 1, the others write version 2 with the
# record (IPRP, preprocessing 0, side 0, the template's number)
/usr/bin/python3 - "$W" <<'PY' || fail "the shards' template record"
import glob, struct, sys
for num, t in enumerate(("rrfp", "vicuna_v1", "llama_3", "chatml", "plain")):
    for f in glob.glob(f"{sys.argv[1]}/shards-{t}/*.rrs"):
        raw = open(f, "rb").read()
        v = struct.unpack("<I", raw[8:12])[0]
        ioff, isz = struct.unpack("<QQ", raw[32:48])
        rec = raw[ioff + isz - 16: ioff + isz]
        if t == "rrfp":
            assert v == 1, (f, v)
        else:
            assert v == 2 and rec[:4] == b"IPRP" and struct.unpack("<III", rec[4:]) == (0, 0, num), (f, v, rec)
print("shards: rrfp version 1, the other templates version 2 with their record")
PY
# one folder of shards has one template: the loader refuses a mix, naming both files
mkdir -p "$W/mixed" && cp "$W/shards-vicuna_v1/shard-00000.rrs" "$W/mixed/shard-00000.rrs" \
  && cp "$W/shards-chatml/shard-00000.rrs" "$W/mixed/shard-00001.rrs"
log=$("$BIN" train "$RECIPE" --set data.source=shards --set data.shards="$W/mixed" --set data.tokenizer="$W/tok.json" \
      --set model.vocab=0 --set train.steps=1 --set optim.warmup=1 --set train.run_dir="$W/run-mixed" 2>&1) \
  && fail "a folder of vicuna_v1 and chatml shards was accepted"
grep -q "mixed/shard-00001.rrs: packed with --template chatml, .*mixed/shard-00000.rrs with vicuna_v1: one folder of shards has one chat template" <<<"$log" \
  && echo "a folder mixing two templates is refused naming both shards" || fail "mixed templates: '$log'"
[ $fails = 0 ] && echo "pack templates: ok"
exit $((fails > 0))
