#!/usr/bin/env bash
# outputs_guard.sh — outputs never overwrite inputs (runtime/train/outguard.h, docs/reliability.md): every
# command that writes a file refuses, before it does its work (exit 2, no answer made, nothing read past
# its arguments), an output that is one of its inputs, a checkpoint's or a run folder's own file, or a
# folder where a file is wanted; the file named stays byte for byte. On a tiny data set and a model trained
# 4 steps (checkpoints at 2 and 4). Modes:
#   generate  --out onto the manifest, an image, the recipe, the tokenizer, a shard, a checkpoint's
#             model.safetensors, the run's metrics.jsonl, a link to the manifest, a folder, /dev/null
#   resume    --manifest writes each answer as it goes: a run killed (SIGKILL) after 3 answers keeps them,
#             each line whole; --resume answers the rest (the ids answered skipped, a torn last line
#             dropped), and the file equals an uninterrupted run's lines; an existing file needs --resume;
#             a file that is not an answers file, or of another --model-id, is refused
#   images    --image given twice: both images, in order (= the manifest form of a two-image record)
#   eval      --predictions onto the recipe, the tokenizer, an eval shard, model.safetensors, metrics.jsonl,
#             a folder; written by a temporary name and renamed. With a damaged held-out sample, eval
#             counts each sample once and says how many were skipped (was: the count filled with repeats)
#   report    --out onto metrics.jsonl, recipe.ini, the predictions, the tokenizer, a folder
#   export    export hf --out inside another checkpoint (pruning would delete it with that checkpoint),
#             named like a checkpoint beside the run's (step-N), a run folder's own file; import --out
#             named step-N in the run's checkpoints folder (a folder with state.json: `latest` took it), or
#             inside the folder imported; the plain export and import still work
#   pack      --out a checkpoint folder, the tokenizer file, a folder holding the manifest under a shard-*
#             name (pack removes stale shard-*.rrs); a tokenizer without <image> as one token is named
#             with how to add it (was: most records rejected, blamed on --images)
#   tokenizer tokenizer train --out onto its --manifest, or a folder (was: refused after the training)
#   trace     trace --svg onto a run's metrics.jsonl, --json into a checkpoint
# Usage: outputs_guard.sh RRFP_MM SOURCE_DIR WORKDIR MODE
set -uo pipefail
BIN=$1 SRC=$2 W=$3 MODE=$4
rm -rf "$W"; mkdir -p "$W"; cd "$W" || exit 1
fail() { echo "FAIL ($MODE): $*"; for f in "$W"/*.txt; do [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done; exit 1; }
"$BIN" demo-data --out d --samples 40 --heldout 8 >/dev/null || fail "demo-data"
"$BIN" tokenizer train --vocab 300 --manifest d/train.json --out tok.json --quiet || fail "tokenizer"
"$BIN" pack --manifest d/train.json --images d/images --tokenizer tok.json --out shards >/dev/null 2>&1 || fail "pack"
"$BIN" pack --manifest d/heldout.json --images d/images --tokenizer tok.json --out eshards >/dev/null 2>&1 || fail "pack held-out"
cp "$SRC/recipes/llava.ini" llava.ini   # a copy: the cases aim outputs at the recipe
R=llava.ini
S=(--set data.shards=shards --set data.tokenizer=tok.json --set data.eval_shards=eshards --set model.vision_width=32
   --set model.vision_layers=1 --set model.vision_heads=2 --set model.text_width=64 --set model.text_layers=2
   --set model.text_heads=2 --set model.ffn_hidden=172 --set data.microbatches=2 --set data.microbatch_tokens=512
   --set optim.warmup=1 --set train.steps=4 --set train.checkpoint_every=2 --set checkpoint.keep=0
   --set train.run_dir=run --set runtime.threads=1)
CK=run/checkpoints/step-00000004
# every file that any refusal below names, with its bytes now
snapshot() { find d tok.json shards eshards run "$R" -type f ! -name .lock 2>/dev/null | sort | xargs md5sum; }
# expect RC REGEX CMD...: the command exits RC, its stderr matches REGEX, and no input changed
fails=0
expect() {
  local rc=$1 re=$2; shift 2
  local before; before=$(snapshot)
  "$@" >out.txt 2>err.txt; local got=$?
  if [ "$got" -ne "$rc" ] || ! grep -Eq -- "$re" err.txt; then
    echo "FAIL ($MODE): exit $got (expected $rc), stderr: $(head -c 600 err.txt)"; echo "  command: $*"; fails=$((fails + 1))
  fi
  if [ "$(snapshot)" != "$before" ]; then
    echo "FAIL ($MODE): an input changed under: $*"; diff <(echo "$before") <(snapshot) | head -5; fails=$((fails + 1))
  fi
  if grep -q "records answered" err.txt; then echo "FAIL ($MODE): work was done before the refusal: $*"; fails=$((fails + 1)); fi
}
case "$MODE" in generate | resume | images | eval | report | trace)
  "$BIN" train "$R" "${S[@]}" >train.txt 2>&1 || fail "train" ;;
esac
IMG=$(printf "%s\n" d/images/* | sort | sed -n 1p)
G=("$BIN" generate "$R" "${S[@]}" --checkpoint latest --max-new-tokens 4)
GM=("${G[@]}" --manifest d/heldout.json --images d/images)
case "$MODE" in
generate)
  # the heldout manifest's first image is an input too (the record it belongs to names it)
  H1=d/images/$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["image"])' d/heldout.json)
  ln -s heldout.json d/link.json
  expect 2 "--out 'd/heldout.json' is the manifest" "${GM[@]}" --out d/heldout.json
  expect 2 "--out 'd/link.json' is the manifest 'd/heldout.json'" "${GM[@]}" --out d/link.json
  expect 2 "--out '$H1' is an image of record 1" "${GM[@]}" --out "$H1"
  expect 2 "--out '$R' is the recipe" "${GM[@]}" --out "$R"
  expect 2 "--out 'tok.json' is data.tokenizer" "${GM[@]}" --out tok.json
  expect 2 "--out 'shards/shard-00000.rrs' is a shard of data.shards" "${GM[@]}" --out shards/shard-00000.rrs
  expect 2 "--out '$CK/model.safetensors' is inside checkpoint folder '.*$CK'" "${GM[@]}" --out "$CK/model.safetensors"
  expect 2 "--out 'run/metrics.jsonl' is run folder '.*run''s own metrics.jsonl" "${GM[@]}" --out run/metrics.jsonl
  expect 2 "--out 'd' is a folder; a file path is expected" "${GM[@]}" --out d
  expect 2 "--out '/dev/null' is not a regular file" "${GM[@]}" --out /dev/null
  # an explicit checkpoint is read whole: nothing goes inside it
  expect 2 "--out 'run/checkpoints/step-00000002/a.jsonl' is inside" "${G[@]}" --checkpoint run/checkpoints/step-00000002 \
    --manifest d/heldout.json --images d/images --out run/checkpoints/step-00000002/a.jsonl
  # beside the run's files is fine
  "${GM[@]}" --out run/answers.jsonl >/dev/null 2>&1 || fail "--out run/answers.jsonl"
  [ "$(wc -l <run/answers.jsonl)" -eq 8 ] || fail "answers beside the run's files: $(wc -l <run/answers.jsonl) lines"
  ;;
resume)
  "${GM[@]}" --out full.jsonl >full.txt 2>&1 || fail "uninterrupted generate"
  [ "$(wc -l <full.jsonl)" -eq 8 ] || fail "the uninterrupted run wrote $(wc -l <full.jsonl) lines"
  # killed after 3 answers: each answer is on disk as it is made, each line whole
  RRFP_TEST_GEN_SLEEP_MS=400 "${GM[@]}" --out part.jsonl >part.txt 2>&1 &
  JOB=$!
  for i in $(seq 1 6000); do [ "$(cat part.jsonl 2>/dev/null | wc -l)" -ge 3 ] && break; kill -0 "$JOB" 2>/dev/null || break; sleep 0.05; done
  kill -9 "$JOB"; wait "$JOB" 2>/dev/null
  n=$(wc -l <part.jsonl 2>/dev/null || echo 0)
  [ "$n" -ge 3 ] && [ "$n" -lt 8 ] || fail "the killed run kept $n answers (expected 3 .. 7)"
  [ "$(tail -c 1 part.jsonl | od -An -c | tr -d ' ')" = '\n' ] || fail "the killed run's file ends inside a line"
  head -n "$n" full.jsonl | cmp -s - part.jsonl || fail "the answers kept differ from the uninterrupted run's"
  # without --resume an answers file is not replaced
  expect 2 "--out 'part.jsonl' already holds answers .*--resume continues it" "${GM[@]}" --out part.jsonl
  # a torn last line (what a write cut short leaves) is dropped with a warning, then --resume answers the rest
  printf '{"question_id": "heldout_000' >>part.jsonl
  "${GM[@]}" --out part.jsonl --resume >res.txt 2>&1 || fail "--resume"
  grep -q "part.jsonl:$((n + 1)): dropped a torn last line" res.txt || fail "the torn line was not named"
  grep -q "generate: --resume: $n records already answered in part.jsonl skipped" res.txt || fail "no line on the records skipped"
  cmp -s full.jsonl part.jsonl || fail "the resumed file differs from an uninterrupted run's: $(diff full.jsonl part.jsonl | head -4)"
  # a file that is not an answers file, an answers file of another model
  cp d/train.json notanswers.json
  expect 1 "--resume: notanswers.json:1: not an answer .*refusing to append answers to a file that is not an answers file" \
    "${GM[@]}" --out notanswers.json --resume
  cmp -s d/train.json notanswers.json || fail "the file that is not an answers file was changed"
  head -2 full.jsonl >other.jsonl
  expect 1 "--resume: other.jsonl holds answers of model 'run-step4', this run's are 'm2'" "${GM[@]}" --out other.jsonl \
    --resume --model-id m2
  [ "$(wc -l <other.jsonl)" -eq 2 ] || fail "another model's answers file was appended to"
  ;;
images)
  /usr/bin/python3 - d/heldout.json two.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
a, b = r[0]["image"], r[1]["image"]
json.dump([{"id": "two", "image": [a, b], "conversations": [{"from": "human", "value": "<image>\n<image>\nWhich is brighter?"},
                                                            {"from": "gpt", "value": "x"}]}], open(sys.argv[2], "w"))
PY
  read -r A B < <(/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r[0]["image"], r[1]["image"])' d/heldout.json)
  "${G[@]}" --manifest two.json --images d/images --out two.jsonl >two.txt 2>&1 || fail "two images, manifest form"
  want=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])' two.jsonl)
  got=$("${G[@]}" --image "d/images/$A" --image "d/images/$B" --prompt $'<image>\n<image>\nWhich is brighter?' 2>one.txt) \
    || fail "--image twice: $(cat one.txt)"
  [ "$got" = "$want" ] || fail "--image A --image B answered '$got', the two-image record '$want'"
  grep -q "prompt positions" one.txt || fail "no stats line"
  # the other order is another question (the images are not merged into one)
  "${G[@]}" --image "d/images/$B" --image "d/images/$A" --prompt $'<image>\n<image>\nWhich is brighter?' >/dev/null 2>&1 \
    || fail "--image B --image A"
  ARGS=(); for i in $(seq 1 17); do ARGS+=(--image "d/images/$A"); done
  expect 2 "more than 16 --image" "${G[@]}" "${ARGS[@]}" --prompt q
  ;;
eval)
  E=("$BIN" eval "$R" "${S[@]}" --checkpoint latest)
  expect 2 "--predictions '$R' is the recipe" "${E[@]}" --predictions "$R"
  expect 2 "--predictions 'tok.json' is data.tokenizer" "${E[@]}" --predictions tok.json
  expect 2 "--predictions 'eshards/shard-00000.rrs' is a shard of data.eval_shards" "${E[@]}" --predictions eshards/shard-00000.rrs
  expect 2 "--predictions '$CK/model.safetensors' is inside (the )?checkpoint" "${E[@]}" --predictions "$CK/model.safetensors"
  expect 2 "--predictions 'run/metrics.jsonl' is run folder .*own metrics.jsonl" "${E[@]}" --predictions run/metrics.jsonl
  expect 2 "--predictions 'run' is a folder" "${E[@]}" --predictions run
  "${E[@]}" --predictions run/predictions.jsonl >e.txt 2>&1 || fail "eval --predictions"
  [ "$(wc -l <run/predictions.jsonl)" -eq 8 ] || fail "predictions: $(wc -l <run/predictions.jsonl) lines"
  ls run/predictions.jsonl.tmp.* >/dev/null 2>&1 && fail "a temporary predictions file was left"
  # one damaged held-out sample (a flipped byte in its zstd frame): skipped, counted once, named
  cp -r eshards bad
  /usr/bin/python3 - bad/shard-00000.rrs <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
o = struct.unpack_from("<Q", b, 32)[0]  # the index: per sample u64 offset, u32 size, ..., u16 images, u16 id length
for k in range(3):
    off, size, _, _, ni, il = struct.unpack_from("<QIIIHH", b, o)
    o += 24 + il + 8 * ni
b[off + size // 2] ^= 0xFF  # sample 2's frame
open(sys.argv[1], "wb").write(b)
PY
  "${E[@]}" --set data.eval_shards=bad --predictions p.jsonl >e.txt 2>&1 || fail "eval with a damaged sample"
  grep -q "on 7 held-out shards samples; 1 skipped as damaged" e.txt || fail "eval does not count 7 samples and 1 skipped: $(grep '^eval' e.txt)"
  grep -q '"samples":7,"skipped":1,' e.txt || fail "the JSON line: $(tail -1 e.txt)"
  /usr/bin/python3 -c '
import json, sys
p = [json.loads(l) for l in open("p.jsonl")]
idx = [x["sample_index"] for x in p]
assert len(idx) == 7 and len(set(idx)) == 7 and 2 not in idx, idx' || fail "predictions repeat a sample: $(cut -c1-40 p.jsonl)"
  ;;
report)
  "$BIN" eval "$R" "${S[@]}" --checkpoint latest --predictions run/predictions.jsonl >/dev/null 2>&1 || fail "eval"
  expect 2 "--out 'run/metrics.jsonl' is run folder .*own metrics.jsonl" "$BIN" report run --out run/metrics.jsonl
  expect 2 "--out 'run/recipe.ini' is the recipe" "$BIN" report run --out run/recipe.ini
  expect 2 "--out 'run/predictions.jsonl' is the predictions" "$BIN" report run --out run/predictions.jsonl
  expect 2 "--out 'tok.json' is data.tokenizer" "$BIN" report run --out tok.json
  expect 2 "--out 'run' is a folder" "$BIN" report run --out run
  "$BIN" report run --out r.html >/dev/null 2>&1 || fail "report --out r.html"
  "$BIN" report run >/dev/null 2>&1 && [ -s run/report.html ] || fail "report's default RUN/report.html"
  ;;
export)
  # a CLIP-tower model, which has a Hugging Face equivalent
  CL=(--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16
      --set model.vision_feature_layer=-2 --set model.projector_act=gelu --set optim.warmup=1 --set train.steps=4
      --set train.checkpoint_every=2 --set checkpoint.keep=0 --set train.run_dir=crun)
  cp "$SRC/recipes/test-synthetic.ini" syn.ini
  "$BIN" train syn.ini "${CL[@]}" >ctrain.txt 2>&1 || fail "train the CLIP model"
  C2=crun/checkpoints/step-00000002 C4=crun/checkpoints/step-00000004
  X=("$BIN" export hf --checkpoint "$C4" --image-token-id 1)
  snapshot() { find crun -type f ! -name .lock | sort | xargs md5sum; }
  expect 2 "--out '$C2/hf' is inside checkpoint folder '.*$C2'" "${X[@]}" --out "$C2/hf"
  expect 2 "--out 'crun/checkpoints/step-00000009': 'step-00000009' in '.*crun/checkpoints' is named like a checkpoint" \
    "${X[@]}" --out crun/checkpoints/step-00000009
  expect 2 "--out 'crun/previous-1/hf' is inside run folder .*own previous-1" "${X[@]}" --out crun/previous-1/hf
  [ ! -e crun/checkpoints/step-00000009 ] && [ ! -e "$C2/hf" ] || fail "a refused export left a folder"
  "${X[@]}" --out hf >x.txt 2>&1 || fail "export hf --out hf"
  expect 2 "--out 'crun/checkpoints/step-00000100': 'step-00000100' in .* is named like a checkpoint" \
    "$BIN" import llava --hf hf --out crun/checkpoints/step-00000100
  expect 2 "--out 'hf/ck' is inside the Hugging Face folder 'hf'" "$BIN" import llava --hf hf --out hf/ck
  "$BIN" import llava --hf hf --out back >i.txt 2>&1 || fail "import llava --out back"
  [ -f back/state.json ] || fail "the import wrote no checkpoint"
  ;;
pack)
  cp "$SRC/recipes/test-synthetic.ini" syn.ini
  "$BIN" train syn.ini --set train.run_dir=srun --set train.steps=2 --set optim.warmup=1 \
    >strain.txt 2>&1 || fail "train"
  P=("$BIN" pack --manifest d/train.json --images d/images --tokenizer tok.json)
  snapshot() { find d tok.json srun m -type f ! -name .lock 2>/dev/null | sort | xargs md5sum; }
  expect 2 "--out 'srun/checkpoints/step-00000002' is a checkpoint folder" "${P[@]}" --out srun/checkpoints/step-00000002
  expect 2 "--out 'tok.json' is the tokenizer" "${P[@]}" --out tok.json
  expect 2 "--out 'd/train.json' is the manifest" "${P[@]}" --out d/train.json
  # a folder holding the manifest under a shard-* name: pack writes and removes shard-* files there
  mkdir m && cp d/train.json m/shard-00009.rrs
  expect 2 "--out 'm' holds the manifest 'm/shard-00009.rrs', which this command would replace" \
    "$BIN" pack --manifest m/shard-00009.rrs --images d/images --tokenizer tok.json --out m
  # a tokenizer with <image> in its vocabulary but not among its added tokens splits every <image>
  /usr/bin/python3 - tok.json noadd.json nobody.json <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["added_tokens"] = [a for a in t["added_tokens"] if a["content"] != "<image>"]
json.dump(t, open(sys.argv[2], "w"))
t["model"]["vocab"].pop("<image>")
json.dump(t, open(sys.argv[3], "w"))
PY
  expect 1 "noadd.json: the tokenizer has <image> in its vocabulary \(id [0-9]+\) but encodes the text \"<image>\" as [0-9]+ tokens.*To add it: an entry \{\"id\": [0-9]+, \"content\": \"<image>\", \"special\": true\} in \"added_tokens\"" \
    "$BIN" pack --manifest d/train.json --images d/images --tokenizer noadd.json --out s2
  grep -q -- "--images" err.txt && fail "the tokenizer's missing <image> is blamed on --images"
  expect 1 "nobody.json: the tokenizer has no <image> token.*rrfp-mm tokenizer add-special --tokenizer IN --add \"<image>\"" \
    "$BIN" pack --manifest d/train.json --images d/images --tokenizer nobody.json --out s2
  [ ! -e s2 ] || fail "a refused pack made its --out folder"
  ;;
tokenizer)
  snapshot() { md5sum d/train.json d/heldout.json; }
  expect 2 "--out 'd/train.json' is the --manifest 'd/train.json'" "$BIN" tokenizer train --vocab 300 --manifest d/train.json --out d/train.json
  expect 2 "--out 'd' is a folder" "$BIN" tokenizer train --vocab 300 --manifest d/train.json --out d
  grep -q "tokenizer train: read\|words" err.txt && fail "the training ran before the refusal"
  ;;
trace)
  "$BIN" sim --stages 2 --microbatches 4 --trace t.json >/dev/null || fail "sim --trace"
  expect 2 "--svg 'run/metrics.jsonl' is run folder .*own metrics.jsonl" "$BIN" trace t.json --svg run/metrics.jsonl
  expect 2 "--json '$CK/x.json' is inside checkpoint folder" "$BIN" trace t.json --json "$CK/x.json"
  expect 2 "--durations 'd' is a folder" "$BIN" trace t.json --durations d
  ;;
*) fail "unknown mode" ;;
esac
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "outputs guard $MODE: ok"
