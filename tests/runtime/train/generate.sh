#!/usr/bin/env bash
# generate.sh — `rrfp-mm generate` (runtime/train/generate.h). A tiny data set (demo-data,
# tokenizer, pack) and a small model trained 3 steps, so that its answers run on for many tokens.
#   kv    every decoding step with the KV cache against a full re-forward of the whole sequence
#         (--verify): the greedy token never differs and the logits agree within 1e-4 (f32 sums in
#         another order: seen ~1e-6), over 6 records x up to 24 new tokens (at least 60 steps, or the
#         test says so); the answers file has one line per record with question_id, prompt, text,
#         model_id; --image/--prompt prints the manifest form's answer for that record; sampling with a
#         seed repeats; bad input (an image outside --images, a PNG) is named, the record skipped, exit 1
#   eval  on a model that has learnt part of its data (8 text-decided questions x 4 images, 140 steps),
#         generate's greedy answers are right on the same records as eval's teacher-forced exact match
#         (at most one record differs), at steps 100 and 140; eval --predictions holds the record id and
#         both answers as text
#   kv_gqa  the same --verify check on a grouped-query model (model.text_heads = 4 over
#         model.text_kv_heads = 2: a KV cache Dkv = 32 wide beside queries 64 wide); the checkpoint's
#         key projection is checked to be (32, 64), so the test fails if the model was not GQA
#   kv_lora  kv's checks on a LoRA checkpoint (lora.r = 4, dropout 0.25 in training): decoding runs the adapters
#         unmerged, without dropout
#   kv_qlora  the same on a QLoRA checkpoint (lora.quant = nf4): the base read back in its NF4 form and dequantised
#   emu   the CUDA backend's own kernels (rrfp-mm-emu, runtime.backend = cuda): the answers equal the
#         CPU backend's and --verify holds there too
#   emu_gqa  the same on kv_gqa's grouped-query model
#   eval_llava  the published-LLaVA settings: a tokenizer without <|endoftext|>, shards packed with --template
#         vicuna_v1 --image-preprocess llava from JPEG and PNG images; generate's greedy answers are right on
#         exactly the records eval scores right (both image formats among them), stop at </s>, and a tokenizer
#         retrained at the same path is refused naming both files
# Usage: generate.sh RRFP_MM SOURCE_DIR WORKDIR MODE [RRFP_MM_EMU]
set -uo pipefail
BIN=$1 SRC=$2 W=$3 MODE=$4 EMU=${5:-}
rm -rf "$W"; mkdir -p "$W"; cd "$W" || exit 1
fail() { echo "FAIL ($MODE): $*"; for f in "$W"/*.txt; do [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done; exit 1; }
. "$SRC/tests/support/util/tiny_data.sh"
tiny_data
S=("${TINY[@]}" --set data.microbatch_tokens=512 --set train.steps=3 --set train.run_dir=run)
case "$MODE" in *_gqa) S+=(--set model.text_heads=4 --set model.text_kv_heads=2) ;; esac
case "$MODE" in *_lora) S+=(--set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25) ;; esac # LoRA, unmerged
case "$MODE" in *_qlora) S+=(--set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set lora.quant=nf4) ;; esac # QLoRA
R="$SRC/recipes/llava.ini"
"$BIN" train "$R" "${S[@]}" >train.txt 2>&1 || fail "train"
G=(--checkpoint latest --max-new-tokens 24)
if [ "$MODE" = kv_lora ] || [ "$MODE" = kv_qlora ]; then # eval on the (Q)LoRA checkpoint, unmerged: the adapters move the held-out loss
  "$BIN" eval "$R" "${S[@]}" --set data.eval_shards=shards --checkpoint latest >eval_lora.txt 2>&1 || fail "eval (LoRA)"
  "$BIN" eval "$R" "${S[@]}" --set lora.r=0 --set lora.quant=none --set data.eval_shards=shards --checkpoint latest >eval_base.txt 2>&1 \
    || fail "eval (the base alone)"
  l1=$(sed -n 's/.*"loss":\([0-9.]*\).*/\1/p' eval_lora.txt) l0=$(sed -n 's/.*"loss":\([0-9.]*\).*/\1/p' eval_base.txt)
  [ -n "$l1" ] && [ -n "$l0" ] && [ "$l1" != "$l0" ] || fail "eval loss with adapters '$l1', without '$l0'"
  echo "eval: held-out loss $l1 with the adapters, $l0 without"
fi
# eval --predictions and generate on RUN's step-STEP checkpoint (ck) with the recipe arguments M, into PREFIXpSTEP.jsonl and
# PREFIXaSTEP.jsonl (logs PREFIXeSTEP.txt, PREFIXgSTEP.txt); both name every record of MANIFEST, and each prediction
# carries the record's reference answer as text (the end of answer, </s>, left out) and a verdict that matches it
eval_generate() { # PREFIX MANIFEST RUN STEP
  local pre=$1 man=$2 step=$4
  ck=$3/checkpoints/step-$(printf %08d "$step")
  "$BIN" eval "$R" "${M[@]}" --checkpoint "$ck" --predictions "${pre}p$step.jsonl" >"${pre}e$step.txt" 2>&1 || fail "eval $step"
  "$BIN" generate "$R" "${M[@]}" --checkpoint "$ck" --manifest "$man" --images d/images --out "${pre}a$step.jsonl" \
    >"${pre}g$step.txt" 2>&1 || fail "generate $step"
  /usr/bin/python3 - "$man" "${pre}p$step.jsonl" "${pre}a$step.jsonl" <<'PY' || fail "eval --predictions and generate's answers at step $step"
import json, sys
ref = {r["id"]: r["conversations"][1]["value"] for r in json.load(open(sys.argv[1]))}
ev = {p["id"]: p for p in map(json.loads, open(sys.argv[2]))}
gen = {a["question_id"]: a["text"] for a in map(json.loads, open(sys.argv[3]))}
assert sorted(ev) == sorted(gen) == sorted(ref), "records"
for i, p in ev.items():
    assert p["reference_text"] == ref[i], (p, ref[i])
    assert p["correct"] == (p["predicted_text"] == ref[i]), p
PY
}
# generate --verify over 6 held-out records into answers.jsonl: every decoding step with the KV cache against a
# full re-forward (the greedy token never differs, logits within 1e-4), over at least 60 steps; toks: the tokens
verify_kv() {
  "$BIN" generate "$R" "${S[@]}" "${G[@]}" --manifest d/heldout.json --images d/images --out answers.jsonl --samples 6 \
    --verify >gen.txt 2>&1 || fail "generate --verify"
  line=$(grep "verify: max" gen.txt) || fail "no verify summary"
  echo "$line"
  grep -q "greedy token differs at 0 steps" <<<"$line" || fail "the KV cache changed a greedy token"
  diff=$(echo "$line" | sed -n 's/.*re-forward)| \([^ ]*\) over.*/\1/p')
  /usr/bin/python3 -c "import sys; sys.exit(0 if float('$diff') <= 1e-4 else 1)" || fail "logits differ by $diff"
  toks=$(sed -n 's/.*answers (\([0-9]*\) tokens generated).*/\1/p' gen.txt)
  [ -n "$toks" ] && [ "$toks" -ge 60 ] || fail "only ${toks:-no} tokens generated: too few decoding steps to judge the cache"
}
case "$MODE" in
kv | kv_lora | kv_qlora)
  verify_kv
  grep -q "generate: 6 / 6 records answered" gen.txt || fail "no progress line"
  /usr/bin/python3 - answers.jsonl d/heldout.json <<'PY' || fail "answers file"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
ref = json.load(open(sys.argv[2]))[:6]
assert len(a) == 6, len(a)
for x, r in zip(a, ref):
    assert sorted(x) == ["model_id", "prompt", "question_id", "text"], x
    assert x["question_id"] == r["id"] and x["prompt"] == r["conversations"][0]["value"], (x, r)
    assert x["model_id"] == "run-step3", x
print("answers: 6 lines with question_id, prompt, text, model_id")
PY
  first=$(head -1 answers.jsonl | /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["text"])')
  q=$(head -c 2000 d/heldout.json | /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.stdin.read().split("\n")[1].rstrip(",")); print(r["conversations"][0]["value"].replace("<image>\n",""))')
  img=$(head -c 2000 d/heldout.json | /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.stdin.read().split("\n")[1].rstrip(",")); print(r["image"])')
  one=$("$BIN" generate "$R" "${S[@]}" "${G[@]}" --image "d/images/$img" --prompt "$q" 2>one.txt) || fail "--image --prompt"
  [ "$one" = "$first" ] || fail "--image/--prompt answered '$one', the manifest form '$first'"
  a1=$("$BIN" generate "$R" "${S[@]}" "${G[@]}" --image "d/images/$img" --prompt "$q" --temperature 1 --top-p 0.9 --seed 5 2>/dev/null)
  a2=$("$BIN" generate "$R" "${S[@]}" "${G[@]}" --image "d/images/$img" --prompt "$q" --temperature 1 --top-p 0.9 --seed 5 2>/dev/null)
  [ -n "$a1" ] && [ "$a1" = "$a2" ] || fail "sampling with one seed gave '$a1' then '$a2'"
  # bad input: named, skipped, exit 1, the other answers written
  printf '%s\n' '{"id": "out", "image": "../x.jpg", "conversations": [{"from": "human", "value": "<image>\nq"}]}' \
    '{"id": "png", "image": "p.jpg", "conversations": [{"from": "human", "value": "<image>\nq"}]}' \
    "$(head -c 2000 d/heldout.json | sed -n 2p | sed 's/,$//')" >bad.jsonl
  printf '\x89PNG\r\n\x1a\n0000' >d/images/p.jpg
  "$BIN" generate "$R" "${S[@]}" "${G[@]}" --manifest bad.jsonl --images d/images --out bad-answers.jsonl >bad.txt 2>&1
  [ $? -eq 1 ] || fail "bad records did not exit 1"
  grep -q "bad.jsonl:1: record 'out' not answered: image name '../x.jpg' is absolute or leads outside --images" bad.txt \
    || fail "the image outside --images is not named"
  grep -q "bad.jsonl:2: record 'png' not answered: image 1: .*PNG" bad.txt || fail "the PNG is not named"
  [ "$(wc -l <bad-answers.jsonl)" -eq 1 ] || fail "the good record was not answered"
  echo "kv: $toks tokens over 6 records, KV cache = full re-forward; --image/--prompt = manifest; seeded sampling repeats; bad input named"
  ;;
kv_gqa)
  # the model is grouped-query: block 0's key projection has Hkv d = 2 x 16 = 32 rows over 64 columns
  "$BIN" tensors ls run/checkpoints/step-00000003/model.safetensors >ls.txt 2>&1 || fail "tensors ls"
  grep -Eq "^text\.blocks\.0\.attn\.k\.weight +F32 +\[32, 64\]" ls.txt ||
    fail "block 0's key projection is not (32, 64): not a grouped-query model ($(grep 'attn.k.weight' ls.txt | head -1))"
  verify_kv
  [ "$(wc -l <answers.jsonl)" -eq 6 ] || fail "answers file: $(wc -l <answers.jsonl) lines, expected 6"
  echo "kv_gqa: $toks tokens over 6 records on a grouped-query model (4 query heads over 2 key/value heads), KV cache = full re-forward"
  ;;
emu | emu_gqa)
  [ -x "$EMU" ] || fail "no rrfp-mm-emu"
  "$BIN" generate "$R" "${S[@]}" --checkpoint latest --max-new-tokens 8 --manifest d/heldout.json --images d/images --out cpu.jsonl \
    --samples 1 >cpu.txt 2>&1 || fail "cpu"
  "$EMU" generate "$R" "${S[@]}" --set runtime.backend=cuda --checkpoint latest --max-new-tokens 8 --manifest d/heldout.json \
    --images d/images --out cuda.jsonl --samples 1 --verify >cuda.txt 2>&1 || fail "emulated cuda"
  grep "verify: max" cuda.txt
  grep -q "greedy token differs at 0 steps" cuda.txt || fail "the CUDA KV cache changed a greedy token"
  toks=$(sed -n 's/.*answers (\([0-9]*\) tokens generated).*/\1/p' cuda.txt)
  [ -n "$toks" ] && [ "$toks" -ge 4 ] || fail "only ${toks:-no} tokens generated on CUDA: too few decoding steps"
  cmp -s cpu.jsonl cuda.jsonl || fail "CUDA answers differ from the CPU's: $(diff cpu.jsonl cuda.jsonl | head -4)"
  echo "$MODE: the CUDA backend's answers (attention_decode kernel emulated) equal the CPU's"
  ;;
eval)
  # A model that has learnt part of its data: 8 questions whose answers the text decides, each asked
  # about 4 images (32 records), trained 140 steps (seen: 53% right at step 100, 88% at 140). For each
  # record, generate's greedy answer equals the reference exactly when eval's teacher-forced argmax
  # matches every answer token (the same decision, reached two ways); at most one record may differ
  # (a near tie decided by float order differs between a packed microbatch and a lone sample).
  /usr/bin/python3 - d/images m <<'PY'
import json, os, sys
imgs = sorted(os.listdir(sys.argv[1]))
qa = [("What is the word after apple?", "banana split"), ("Name a colour of the sky.", "light blue"),
      ("How many legs has a cat?", "four legs"), ("What does a bee make?", "sweet honey"),
      ("Which animal barks?", "a dog"), ("What is frozen water?", "cold ice"),
      ("What grows on trees?", "green leaves"), ("What do we read?", "a good book")]
os.makedirs(sys.argv[2], exist_ok=True)
recs = [{"id": "m%02d" % i, "image": imgs[i % len(imgs)], "conversations": [
    {"from": "human", "value": "<image>\n" + qa[i % 8][0]}, {"from": "gpt", "value": qa[i % 8][1]}]} for i in range(32)]
json.dump(recs, open(sys.argv[2] + "/data.json", "w"), indent=0)
PY
  "$BIN" tokenizer train --vocab 300 --manifest m/data.json --out m/tok.json --quiet || fail "tokenizer"
  "$BIN" pack --manifest m/data.json --images d/images --tokenizer m/tok.json --out m/shards >/dev/null 2>&1 || fail "pack"
  M=("${S[@]}" --set data.shards=m/shards --set data.tokenizer=m/tok.json --set data.eval_shards=m/shards
     --set data.microbatches=1 --set optim.warmup=5 --set optim.weight_decay=0 --set train.run_dir=mrun
     --set train.steps=140 --set train.checkpoint_every=20 --set checkpoint.keep=0)
  "$BIN" train "$R" "${M[@]}" >mtrain.txt 2>&1 || fail "train"
  best=0
  for c in 100 140; do
    eval_generate "" m/data.json mrun $c
    acc=$(/usr/bin/python3 - m/data.json p$c.jsonl a$c.jsonl $c <<'PY'
import json, sys
ref = {r["id"]: r["conversations"][1]["value"] for r in json.load(open(sys.argv[1]))}
ev = {p["id"]: p for p in map(json.loads, open(sys.argv[2]))}
gen = {a["question_id"]: a["text"] for a in map(json.loads, open(sys.argv[3]))}
differ = [i for i in ref if ev[i]["correct"] != (gen[i] == ref[i])]
e = 100 * sum(p["correct"] for p in ev.values()) / len(ev)
g = 100 * sum(gen[i] == ref[i] for i in ref) / len(ref)
print("step %s: eval %.1f%%, generate %.1f%%, records decided differently: %d %s" % (sys.argv[4], e, g, len(differ),
      [(i, ev[i]["predicted_text"], gen[i], ref[i]) for i in differ]), file=sys.stderr)
assert len(differ) <= 1, differ
print(int(g))
PY
) || fail "generate and eval disagree at step $c"
    [ "$acc" -gt "$best" ] && best=$acc
  done
  [ "$best" -ge 25 ] || fail "the model answers only $best% right: too little learnt to compare generate with eval"
  echo "eval: generate's greedy answers decide each record as eval does (best accuracy $best%)"
  ;;
eval_llava)
  # The published-LLaVA settings: a tokenizer as llava-hf's (<s>, </s>, <image>, no <|endoftext|>), shards packed
  # with --template vicuna_v1 --image-preprocess llava from JPEG and PNG images. generate takes how the model's
  # data was made from the checkpoint (state.json "data"): the vicuna_v1 prompt, stopping at </s>, the loader's
  # pad-to-square + CLIP mean / std pipeline; so for each record its greedy answer equals the reference exactly
  # when eval's teacher-forced argmax matches every answer token (the same decision, reached two ways; the
  # image rows are the loader's to the bit). A tokenizer retrained at the same path is refused naming both files.
  /usr/bin/python3 - d/images v <<'PY' || fail "data"
import json, os, random, struct, sys, zlib
imgs = sorted(os.listdir(sys.argv[1]))[:4]
os.makedirs(sys.argv[2], exist_ok=True)
rng = random.Random(5)
def png(path, w, h):  # an RGB PNG of random colour blocks (pure Python: zlib + CRCs)
    px = [[(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(w // 4 + 1)] for _ in range(h // 4 + 1)]
    raw = b"".join(b"\0" + bytes(c for x in range(w) for c in px[y // 4][x // 4]) for y in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                           chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for k in range(4):
    png(os.path.join(sys.argv[1], "p%d.png" % k), 40 + 8 * k, 28 + 4 * k)  # non-square: the padding matters
names = [n for pair in zip(imgs, ["p%d.png" % k for k in range(4)]) for n in pair]  # JPEG, PNG, JPEG, PNG, ...
qa = [("What is the word after apple?", "banana split"), ("Name a colour of the sky.", "light blue"),
      ("How many legs has a cat?", "four legs"), ("What does a bee make?", "sweet honey"),
      ("Which animal barks?", "a dog"), ("What is frozen water?", "cold ice"),
      ("What grows on trees?", "green leaves"), ("What do we read?", "a good book")]
recs = [{"id": "v%02d" % i, "image": names[i % 8], "conversations": [
    {"from": "human", "value": "<image>\n" + qa[i % 8][0]}, {"from": "gpt", "value": qa[i % 8][1]}]} for i in range(32)]
json.dump(recs, open(sys.argv[2] + "/data.json", "w"), indent=0)
# the tokenizer also learns vicuna_v1's system prompt (short samples: many per microbatch)
system = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
          "detailed, and polite answers to the user's questions. USER: ASSISTANT:")
json.dump(recs + [{"id": "s%d" % i, "conversations": [{"from": "human", "value": system}, {"from": "gpt", "value": system}]}
                  for i in range(8)], open(sys.argv[2] + "/tokdata.json", "w"), indent=0)
# a retraining with a little more text: the same vocabulary size, other merges
json.dump(json.load(open(sys.argv[2] + "/tokdata.json")) + [{"id": "z", "conversations": [
    {"from": "human", "value": "zebra quiz"}, {"from": "gpt", "value": "zebra quiz jazz"}]}] * 3,
    open(sys.argv[2] + "/tokdata2.json", "w"), indent=0)
PY
  "$BIN" tokenizer train --vocab 460 --manifest v/tokdata.json --special "<s>" --special "</s>" --out v/tok.json --quiet || fail "tokenizer"
  # as llava-hf's tokenizer: no <|endoftext|> (its id becomes <unk>)
  /usr/bin/python3 - v/tok.json <<'PY' || fail "tokenizer edit"
import json, sys
t = json.load(open(sys.argv[1]))
for a in t["added_tokens"]:
    if a["content"] == "<|endoftext|>":
        a["content"] = "<unk>"
v = t["model"]["vocab"]
v["<unk>"] = v.pop("<|endoftext|>")
json.dump(t, open(sys.argv[1], "w"))
PY
  "$BIN" pack --manifest v/data.json --images d/images --tokenizer v/tok.json --out v/shards --template vicuna_v1 \
    --image-preprocess llava --image-size 16 --patch 8 >pack.txt 2>&1 || fail "pack"
  grep -q "packed 32" pack.txt || fail "not every record packed: $(cat pack.txt)"
  M=("${S[@]}" --set data.shards=v/shards --set data.tokenizer=v/tok.json --set data.eval_shards=v/shards
     --set data.min_patches=4 --set data.max_patches=4 --set data.microbatches=1 --set optim.warmup=5
     --set optim.weight_decay=0 --set train.run_dir=vrun --set train.steps=120 --set train.checkpoint_every=20
     --set checkpoint.keep=0)
  "$BIN" train "$R" "${M[@]}" >vtrain.txt 2>&1 || fail "train"
  grep -q "skipped [1-9]" vtrain.txt && fail "the loader skipped samples: $(grep skipped vtrain.txt | tail -1)"
  mixed=""
  for c in 20 40 60 80 100 120; do
    eval_generate v v/data.json vrun $c
    got=$(/usr/bin/python3 - v/data.json vp$c.jsonl va$c.jsonl $c <<'PY'
import json, sys
ref = {r["id"]: r["conversations"][1]["value"] for r in json.load(open(sys.argv[1]))}
img = {r["id"]: r["image"] for r in json.load(open(sys.argv[1]))}
ev = {p["id"]: p for p in map(json.loads, open(sys.argv[2]))}
gen = {a["question_id"]: a["text"] for a in map(json.loads, open(sys.argv[3]))}
assert not [t for t in gen.values() if "</s>" in t], "an answer runs past </s>"
differ = [(i, img[i], ev[i]["predicted_text"], gen[i], ref[i]) for i in ref if ev[i]["correct"] != (gen[i] == ref[i])]
right = [i for i in ref if gen[i] == ref[i]]
png = [i for i in right if img[i].endswith(".png")]
print("step %s: eval %d / 32, generate %d / 32 (%d on PNG images), records decided differently: %s" % (
    sys.argv[4], sum(p["correct"] for p in ev.values()), len(right), len(png), differ), file=sys.stderr)
assert not differ, differ
# a checkpoint that answers some right and some wrong, on both image formats, decides the comparison
print("mixed" if 4 <= len(right) <= 28 and 0 < len(png) < len(right) else "")
PY
) || fail "generate and eval disagree at step $c"
    mixed=$mixed$got
  done
  [ -n "$mixed" ] || fail "no checkpoint answers some records right and some wrong on both image formats: nothing to compare"
  ck=vrun/checkpoints/step-00000120
  acc=$(/usr/bin/python3 -c "import json; ref={r['id']: r['conversations'][1]['value'] for r in json.load(open('v/data.json'))}; print([a['question_id'] for a in map(json.loads, open('va120.jsonl')) if a['text'] == ref[a['question_id']]][0])") \
    || fail "no record answered right at step 120"
  # one right record alone: the answer stops at </s> (end of turn), the reference exactly
  q=$(/usr/bin/python3 -c "import json,sys; r=[x for x in json.load(open('v/data.json')) if x['id']=='$acc'][0]; print(r['conversations'][0]['value'].replace('<image>\n',''))")
  im=$(/usr/bin/python3 -c "import json,sys; r=[x for x in json.load(open('v/data.json')) if x['id']=='$acc'][0]; print(r['image'])")
  want=$(/usr/bin/python3 -c "import json,sys; r=[x for x in json.load(open('v/data.json')) if x['id']=='$acc'][0]; print(r['conversations'][1]['value'])")
  one=$("$BIN" generate "$R" "${M[@]}" --checkpoint $ck --image "d/images/$im" --prompt "$q" 2>vone.txt) || fail "--image --prompt"
  [ "$one" = "$want" ] && grep -q "(end of turn)" vone.txt || fail "record $acc alone: '$one' ($(cat vone.txt)), expected '$want' ending at </s>"
  # held-out shards packed otherwise than the model's data: eval refuses them, naming both files
  "$BIN" pack --manifest v/data.json --images d/images --tokenizer v/tok.json --out v/plain --template plain \
    --image-preprocess llava --image-size 16 --patch 8 >/dev/null 2>&1 || fail "pack plain"
  "$BIN" eval "$R" "${M[@]}" --set data.eval_shards=v/plain --checkpoint $ck >vplain.txt 2>&1 && fail "eval took plain shards"
  grep -q "data.eval_shards v/plain/shard-00000.rrs was packed with --template plain, but the model was trained on --template vicuna_v1 data ($ck/state.json)" vplain.txt \
    || fail "eval's refusal of another template does not name both files: $(cat vplain.txt)"
  # a tokenizer retrained at the same path: refused by generate, naming the tokenizer and the checkpoint's record
  cp v/tok.json v/tok.orig.json
  "$BIN" tokenizer train --vocab 460 --manifest v/tokdata2.json --special "<s>" --special "</s>" --out v/tok.json --quiet || fail "retrain"
  cmp -s v/tok.json v/tok.orig.json && fail "the retrained tokenizer is the same file"
  [ "$(/usr/bin/python3 -c "import json; print(len(json.load(open('v/tok.json'))['model']['vocab']))")" = \
    "$(/usr/bin/python3 -c "import json; print(len(json.load(open('v/tok.orig.json'))['model']['vocab']))")" ] \
    || fail "the retrained tokenizer has another vocabulary size (the model would not load): not the case to test"
  "$BIN" generate "$R" "${M[@]}" --checkpoint $ck --image "d/images/$im" --prompt "$q" >vbad.txt 2>&1 && fail "a retrained tokenizer was accepted"
  grep -q "data.tokenizer v/tok.json (hash [0-9a-f]*) is not the tokenizer .*$ck/state.json records hash" vbad.txt \
    || fail "the retrained tokenizer's refusal does not name both files: $(cat vbad.txt)"
  "$BIN" eval "$R" "${M[@]}" --checkpoint $ck >vbade.txt 2>&1 && fail "eval accepted a retrained tokenizer"
  cp v/tok.orig.json v/tok.json
  echo "eval_llava: vicuna_v1 + llava preprocessing, JPEG and PNG: generate decides each record as eval does, stops at </s>; a retrained tokenizer is refused"
  ;;
*) fail "unknown mode" ;;
esac
echo "generate $MODE: ok"
