#!/usr/bin/env bash
# tokenizer_cli.sh — `rrfp-mm tokenizer train|encode|decode|info|add-special` end to end: train from LLaVA
# manifests (JSONL and JSON array) and a text file, load the result, round-trip arbitrary bytes
# through encode + decode, training is deterministic, and user errors are reported by file and line
# with nothing written; add-special appends special tokens after the vocabulary (HF's added_tokens),
# keeps one already there, never writes over its input; a token listed twice with two ids is refused.
# usage: tokenizer_cli.sh RRFP_MM WORKDIR
set -uo pipefail
BIN=$1
W=$2
D=$(cd "$(dirname "$0")/../support/fixtures" && pwd)
rm -rf "$W" && mkdir -p "$W"
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
expect_err() { # expect_err RC PATTERN CMD...
  local want_rc=$1 pat=$2; shift 2
  "$@" >"$W/out.txt" 2>"$W/err.txt"; local rc=$?
  if [ $rc -eq "$want_rc" ] && grep -qF -- "$pat" "$W/err.txt"; then ok "error: $pat"
  else bad "expected exit $want_rc and '$pat', got $rc: $(cat "$W/err.txt")"; fi
}

"$BIN" tokenizer train --vocab 400 --manifest "$D/tokenizer_manifest.jsonl" --manifest "$D/tokenizer_manifest.json" \
  --text-file "$D/tokenizer_corpus.txt" --out "$W/tok.json" 2>"$W/train.log" || bad "train failed: $(cat "$W/train.log")"
grep -q "6 samples, 14 turns" "$W/train.log" && ok "train read 6 samples, 14 turns" || bad "sample count: $(cat "$W/train.log")"
"$BIN" tokenizer info --tokenizer "$W/tok.json" >"$W/info.txt" || bad "info failed"
grep -q "vocab size: 400" "$W/info.txt" && grep -q "<image>: 398" "$W/info.txt" && grep -q "<|endoftext|>: 399" "$W/info.txt" \
  && ok "vocab 400, <image> 398, <|endoftext|> 399" || bad "info: $(cat "$W/info.txt")"
# as its usage says: the merges (400 = 256 bytes + merges + the 2 special tokens) and every added token
grep -qx "merges: 142" "$W/info.txt" && grep -qx "added tokens: 2" "$W/info.txt" \
  && ok "info: 142 merges, 2 added tokens" || bad "info: merges / added tokens: $(cat "$W/info.txt")"
"$BIN" tokenizer train --vocab 400 --manifest "$D/tokenizer_manifest.jsonl" --manifest "$D/tokenizer_manifest.json" \
  --text-file "$D/tokenizer_corpus.txt" --out "$W/tok2.json" --quiet
cmp -s "$W/tok.json" "$W/tok2.json" && ok "training twice writes the same file" || bad "training is not deterministic"

# arbitrary bytes (invalid UTF-8, NULs, the special tokens) through the command line and back
head -c 3000 /dev/urandom >"$W/bytes.bin"
printf 'text <image>\n\0\xff\xfe caf\xc3\xa9 \xf0\x9f\xa4\x97 <|endoftext|>' >>"$W/bytes.bin"
"$BIN" tokenizer encode --tokenizer "$W/tok.json" --file "$W/bytes.bin" >"$W/ids.txt"
"$BIN" tokenizer decode --tokenizer "$W/tok.json" --file "$W/ids.txt" >"$W/back.bin"
cmp -s "$W/bytes.bin" "$W/back.bin" && ok "$(wc -c <"$W/bytes.bin") bytes -> $(wc -w <"$W/ids.txt") ids -> the same bytes" \
  || bad "CLI round trip differs"
[ "$("$BIN" tokenizer encode --tokenizer "$W/tok.json" --text '<image>')" = "398" ] && ok "encode --text '<image>' = 398" \
  || bad "encode --text"
[ "$(printf 'a\nb\n' | "$BIN" tokenizer encode --tokenizer "$W/tok.json" --lines | wc -l)" = 2 ] && ok "--lines" || bad "--lines"

expect_err 1 "tokenizer_manifest_bad.jsonl:3: not valid JSON" \
  "$BIN" tokenizer train --vocab 300 --manifest "$D/tokenizer_manifest_bad.jsonl" --out "$W/bad.json"
expect_err 1 "tokenizer_manifest_noconv.json: sample 1: expected a sample object with a \"conversations\" array" \
  "$BIN" tokenizer train --vocab 300 --manifest "$D/tokenizer_manifest_noconv.json" --out "$W/bad.json"
expect_err 1 "/nonexistent.jsonl: cannot read the manifest" \
  "$BIN" tokenizer train --vocab 300 --manifest /nonexistent.jsonl --out "$W/bad.json"
expect_err 2 "--vocab 100 is too small" \
  "$BIN" tokenizer train --vocab 100 --manifest "$D/tokenizer_manifest.jsonl" --out "$W/bad.json"
expect_err 2 "required" "$BIN" tokenizer train --vocab 300 --out "$W/bad.json"
[ ! -e "$W/bad.json" ] && ok "no output file after a failed train" || bad "a failed train left $W/bad.json"
expect_err 1 "'99999' (id #2) is not a token id" "$BIN" tokenizer decode --tokenizer "$W/tok.json" --ids "5 99999"
expect_err 1 "cannot write the tokenizer" \
  "$BIN" tokenizer train --vocab 300 --manifest "$D/tokenizer_manifest.jsonl" --out /nonexistent/dir/tok.json --quiet
# add-special: </s> and <s> new (ids 400, 401, special, after the vocabulary), <image> kept (398)
"$BIN" tokenizer add-special --tokenizer "$W/tok.json" --add "</s>,<image>" --add "<s>" --out "$W/tok-sp.json" \
  >"$W/sp.txt" 2>"$W/err.txt" || bad "add-special failed: $(cat "$W/err.txt")"
"$BIN" tokenizer info --tokenizer "$W/tok-sp.json" >"$W/info-sp.txt" || bad "info of the add-special output"
grep -q "vocab size: 402" "$W/info-sp.txt" && grep -q "<image>: 398" "$W/info-sp.txt" && grep -q "</s>: id 400 (added, special)" "$W/sp.txt" \
  && grep -q "<image>: id 398 (already an added token: kept)" "$W/sp.txt" && grep -q "<s>: id 401 (added, special)" "$W/sp.txt" \
  && ok "add-special: </s> 400, <s> 401, <image> kept at 398, vocab 402" || bad "add-special: $(cat "$W/sp.txt" "$W/info-sp.txt")"
python3 - "$W/tok-sp.json" <<'PY' && ok "add-special: HF's added_tokens entries (special, not normalized)" || bad "add-special's entries"
import json, sys
t = json.load(open(sys.argv[1]))["added_tokens"]
e = {a["content"]: a for a in t}
assert e["</s>"] == {"id": 400, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False,
                     "normalized": False, "special": True}, e["</s>"]
assert e["<s>"]["id"] == 401 and [a["content"] for a in t].count("<image>") == 1
PY
[ "$("$BIN" tokenizer encode --tokenizer "$W/tok-sp.json" --text '<s>hi</s>' | awk '{print $1, $NF}')" = "401 400" ] \
  && ok "encode: <s> and </s> are single ids" || bad "encode with the added tokens"
cp "$W/tok.json" "$W/tok-before.json"
expect_err 2 "is the input tokenizer" "$BIN" tokenizer add-special --tokenizer "$W/tok.json" --add "</s>" --out "$W/tok.json"
ln -sf "$W/tok.json" "$W/tok-link.json"
expect_err 2 "is the input tokenizer" "$BIN" tokenizer add-special --tokenizer "$W/tok-link.json" --add "</s>" --out "$W/tok.json"
cmp -s "$W/tok.json" "$W/tok-before.json" && ok "the input is never written over" || bad "add-special changed its input"
expect_err 2 "empty token" "$BIN" tokenizer add-special --tokenizer "$W/tok.json" --add "a,,b" --out "$W/x.json"
expect_err 1 "\"</s>\" is given twice" "$BIN" tokenizer add-special --tokenizer "$W/tok.json" --add "</s>,</s>" --out "$W/x.json"
[ ! -e "$W/x.json" ] && ok "no output after a refused add-special" || bad "a refused add-special wrote $W/x.json"
# one token, one id: <image> listed a second time with another id is refused by every command loading the file
python3 -c "import json,sys; t=json.load(open(sys.argv[1])); t['added_tokens'].append(dict(t['added_tokens'][0], id=5)); json.dump(t, open(sys.argv[2], 'w'))" \
  "$W/tok.json" "$W/tok-dup.json"
expect_err 1 'both list "<image>", with ids 398 and 5' "$BIN" tokenizer info --tokenizer "$W/tok-dup.json"
exit $fail
