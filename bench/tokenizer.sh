#!/usr/bin/env bash
# tokenizer.sh — our tokenizer against Hugging Face's (the Rust `tokenizers` library through its Node
# bindings, tests/support/node) on the same text in the same invocation: encoding speed with GPT-2's real
# vocabulary and with a Llama-2-format (SentencePiece-style) file (one thread each: RAYON_NUM_THREADS=1 for
# HF), and BPE training time to the same
# vocabulary size. Prints the ratios (HF time / our time). Ids are checked equal by count here and
# in full by the tokenizer_peer_hf test.
# usage: bench/tokenizer.sh [build/rrfp-mm] [TEXT]   TEXT defaults to 5 MB of Python's standard library
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$ROOT/build/rrfp-mm}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
NODE_DIR=$ROOT/tests/support/node
if [ ! -d "$NODE_DIR/node_modules/tokenizers" ]; then (cd "$NODE_DIR" && npm ci --no-audit --no-fund >/dev/null); fi
export NODE_PATH=$NODE_DIR/node_modules
if [ -n "${2:-}" ]; then cp "$2" "$W/text.txt"
else find /usr/lib/python3*/ -maxdepth 1 -name '*.py' | sort | xargs cat | head -c 5000000 >"$W/text.txt"; fi
(cd "$NODE_DIR" && node make_gpt2.js "$W/gpt2.json")
bytes=$(wc -c <"$W/text.txt")
echo "text: $bytes bytes, $(wc -l <"$W/text.txt") lines; $(nproc) cores; one thread each"

num() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }
ours_time() { sed -n 's/.* in \([0-9.]*\) s .*/\1/p'; }

# encode: lines one by one (ours) vs encodeBatch (HF); the whole text as one string, both
ours=$("$BIN" tokenizer encode --tokenizer "$W/gpt2.json" --file "$W/text.txt" --lines --count 2>&1 >"$W/n1")
hf=$(RAYON_NUM_THREADS=1 node "$ROOT/bench/tokenizer_hf.js" encode "$W/gpt2.json" "$W/text.txt")
[ "$(cat "$W/n1")" = "$(echo "$hf" | num ids)" ] || { echo "id counts differ: ours $(cat "$W/n1"), HF $hf"; exit 1; }
to=$(echo "$ours" | ours_time); th=$(echo "$hf" | num seconds)
awk -v o="$to" -v h="$th" -v b="$bytes" -v n="$(cat "$W/n1")" 'BEGIN { printf "encode by line  (GPT-2, %d ids): ours %.3f s (%.1f MB/s), HF %.3f s (%.1f MB/s): %.1fx\n", n, o, b/o/1e6, h, b/h/1e6, h/o }'
ours=$("$BIN" tokenizer encode --tokenizer "$W/gpt2.json" --file "$W/text.txt" --count 2>&1 >"$W/n2")
hf=$(RAYON_NUM_THREADS=1 node "$ROOT/bench/tokenizer_hf.js" whole "$W/gpt2.json" "$W/text.txt")
[ "$(cat "$W/n2")" = "$(echo "$hf" | num ids)" ] || { echo "id counts differ: ours $(cat "$W/n2"), HF $hf"; exit 1; }
to=$(echo "$ours" | ours_time); th=$(echo "$hf" | num seconds)
awk -v o="$to" -v h="$th" -v b="$bytes" -v n="$(cat "$W/n2")" 'BEGIN { printf "encode whole    (GPT-2, %d ids): ours %.3f s (%.1f MB/s), HF %.3f s (%.1f MB/s): %.1fx\n", n, o, b/o/1e6, h, b/h/1e6, h/o }'

# encode by line with a Llama-2-format tokenizer (SentencePiece-style: metaspace normalizer, byte fallback;
# 800 merges learned from tests/support/fixtures/tokenizer_corpus.txt by tests/support/node/make_llama2.js)
(cd "$NODE_DIR" && node make_llama2.js 800 "$W/l2" "$ROOT/tests/support/fixtures/tokenizer_corpus.txt" 2>/dev/null)
ours=$("$BIN" tokenizer encode --tokenizer "$W/l2-llama2.json" --file "$W/text.txt" --lines --count 2>&1 >"$W/n3")
hf=$(RAYON_NUM_THREADS=1 node "$ROOT/bench/tokenizer_hf.js" encode "$W/l2-llama2.json" "$W/text.txt")
[ "$(cat "$W/n3")" = "$(echo "$hf" | num ids)" ] || { echo "id counts differ: ours $(cat "$W/n3"), HF $hf"; exit 1; }
to=$(echo "$ours" | ours_time); th=$(echo "$hf" | num seconds)
awk -v o="$to" -v h="$th" -v b="$bytes" -v n="$(cat "$W/n3")" 'BEGIN { printf "encode by line  (Llama-2 style, %d ids): ours %.3f s (%.1f MB/s), HF %.3f s (%.1f MB/s): %.1fx\n", n, o, b/o/1e6, h, b/h/1e6, h/o }'

# train: HF's Node bindings train with the model's default BpeTrainer (vocab 30000, min_frequency 0);
# ours to the same size with --min-frequency 1
hf=$(RAYON_NUM_THREADS=1 node "$ROOT/bench/tokenizer_hf.js" train "$W/text.txt")
vocab=$(echo "$hf" | num vocab); th=$(echo "$hf" | num seconds)
t0=$(date +%s.%N)
"$BIN" tokenizer train --vocab "$vocab" --min-frequency 1 --text-file "$W/text.txt" --out "$W/ours.json" --quiet
t1=$(date +%s.%N)
awk -v o="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" -v h="$th" -v v="$vocab" 'BEGIN { printf "train to vocab %d: ours %.3f s (whole command), HF %.3f s (train() only): %.1fx\n", v, o, h, h/o }'
