#!/usr/bin/env bash
# run_fuzz.sh — build the libFuzzer targets (clang -fsanitize=fuzzer,address,undefined) for the shard
# reader, the manifest parser and the image path (decode, resize, patchify), seed them with real inputs (shards and manifests made by
# `rrfp-mm demo-data` + `pack`, plus the bad manifests of data_pack_errors) and run each for
# SECONDS_EACH seconds. Regression seeds of damaged inputs: the damaged JPEGs of tests/data/bad_jpegs.py (random
# bytes after a marker, 65535x65535, zero height, 12-bit, 60000x60000 + noise, cut), manifests with a
# UTF-8 byte-order mark and with image paths leading out of the images folder. Exit 77 (skipped) without clang or its libFuzzer runtime.
# usage: run_fuzz.sh SOURCE_DIR RRFP_MM WORK_DIR [SECONDS_EACH=12]
set -u
SRC=$1
BIN=$2
W=$3
T=${4:-7}
case "$W" in /tmp/* | */build*/*) ;; *) echo "refusing work dir '$W'"; exit 2 ;; esac
CC=$(command -v clang || command -v clang-14 || true)
[ -n "$CC" ] || { echo "skipped: clang not found (apt-get install clang libclang-rt-14-dev)"; exit 77; }
rm -rf "$W" && mkdir -p "$W/corpus_shard" "$W/corpus_manifest" "$W/corpus_image" || exit 2

# line tables only: file:line in every sanitizer report and crash backtrace, a fifth less compile time than -g
FLAGS="-gline-tables-only -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$SRC $(pkg-config --cflags libcjson libzstd libpcre2-8)"
LIBS="$(pkg-config --libs libcjson libzstd libpcre2-8) -lm"
TEXT_SRCS=$(ls "$SRC"/text/tokenizer*.c "$SRC"/text/bpe*.c 2>/dev/null)
echo 'int main(void){return 0;}' > "$W/probe.c"
if ! "$CC" -fsanitize=fuzzer -c "$W/probe.c" -o "$W/probe.o" 2>/dev/null; then
    echo "skipped: $CC has no libFuzzer runtime (apt-get install libclang-rt-14-dev)"
    exit 77
fi
"$CC" $FLAGS -o "$W/fuzz_shard" "$SRC/tests/fuzz/fuzz_shard.c" "$SRC/data/shard.c" "$SRC/data/anyres.c" "$SRC/engine/util.c" $LIBS || exit 1
"$CC" $FLAGS -o "$W/fuzz_image" "$SRC/tests/fuzz/fuzz_image.c" "$SRC/data/image.c" "$SRC/data/png.c" "$SRC/data/gif.c" "$SRC/data/anyres.c" "$SRC/data/image_anyres.c" "$SRC/engine/util.c" $LIBS \
    $(pkg-config --libs libturbojpeg libpng16 libgif) || exit 1
"$CC" $FLAGS -o "$W/fuzz_manifest" "$SRC/tests/fuzz/fuzz_manifest.c" "$SRC/data/manifest.c" "$SRC/data/template.c" "$SRC/engine/util.c" \
    $TEXT_SRCS $LIBS || exit 1

# seed corpora: real shards (small ones, so mutations reach the frames) and manifests
"$BIN" demo-data --out "$W/demo" --samples 12 --heldout 2 --seed 5 2>/dev/null || exit 1
"$BIN" tokenizer train --vocab 300 --manifest "$W/demo/train.json" --out "$W/tok.json" >/dev/null 2>&1 || exit 1
"$BIN" pack --manifest "$W/demo/train.json" --images "$W/demo/images" --tokenizer "$W/tok.json" --out "$W/shards" \
    --shard-size 0.004 --quiet 2>/dev/null || exit 1
cp "$W"/shards/*.rrs "$W/corpus_shard/"
# a version 3 shard (--image-preprocess anyres: the grid pinpoints before the record at the index's end)
"$BIN" pack --manifest "$W/demo/train.json" --images "$W/demo/images" --tokenizer "$W/tok.json" --out "$W/shards_ar" \
    --shard-size 0.004 --quiet --patch 14 --image-preprocess anyres --image-size 28 --grid-pinpoints "[[28,56],[56,28],[56,56]]" \
    2>/dev/null || exit 1
for f in "$W"/shards_ar/*.rrs; do cp "$f" "$W/corpus_shard/anyres-$(basename "$f")"; done
cp "$W/demo/train.json" "$W/demo/heldout.json" "$W/demo/eval.jsonl" "$W/corpus_manifest/"
printf '[\n{"id": 1, "image": ["a.jpg", "b.jpg"], "conversations": [{"from": "human", "value": "<image>\\n<image>"}, {"from": "gpt", "value": "x"}]}\n]\n' \
    > "$W/corpus_manifest/two.json"
printf '{"id":"a","conversations":[]}\n{bad\n{"id":"b","conversations":[{"from":"system","value":"x"}]}\n' \
    > "$W/corpus_manifest/bad.jsonl"
# regression seeds: a byte-order mark before an array and before JSONL, image paths leading outside
T1='{"id": "a", "conversations": [{"from": "human", "value": "Say 1."}, {"from": "gpt", "value": "1"}]}'
T2='{"id": "b", "conversations": [{"from": "human", "value": "Say 2."}, {"from": "gpt", "value": "2"}]}'
printf '\xef\xbb\xbf[\n%s,\n%s\n]\n' "$T1" "$T2" > "$W/corpus_manifest/bom.json"
printf '\xef\xbb\xbf%s\n%s\n' "$T1" "$T2" > "$W/corpus_manifest/bom.jsonl"
for p in ../outside.jpg /etc/passwd sub/../../x.jpg ./a/../../../etc/shadow; do
    printf '{"id": "e", "image": "%s", "conversations": [{"from": "human", "value": "<image>\\nWhat?"}, {"from": "gpt", "value": "x"}]}\n' "$p"
done > "$W/corpus_manifest/escape.jsonl"

# image seeds: a few demo JPEGs (small, several sizes, some progressive), each behind one settings byte
i=0
for f in $(ls "$W/demo/images"/*.jpg | head -8); do
    { printf "\\x$(printf %02x $i)"; cat "$f"; } > "$W/corpus_image/seed$i"
    i=$((i + 1))
done

# and JPEGs of extreme shapes (1x1, 1x700, 700x1, 3x2, 17x999), each with every settings byte
/usr/bin/python3 - "$W/corpus_image" "$SRC/tests/data" <<'PYEND' || echo "(no extreme-shape seeds: python3-pil missing)"
import io, sys
from PIL import Image
for w, h in [(1, 1), (1, 700), (700, 1), (3, 2), (17, 999), (640, 9)]:
    b = io.BytesIO()
    Image.new("RGB", (w, h), (200, 30, 90)).save(b, "JPEG", quality=80)
    for s in range(4):
        open("%s/shape_%dx%d_%d" % (sys.argv[1], w, h, s), "wb").write(bytes([s]) + b.getvalue())
# PNGs (data/png.c): RGB, palette with transparency, grey + alpha
for mode, w, h in [("RGB", 5, 7), ("P", 9, 4), ("LA", 3, 300)]:
    b = io.BytesIO()
    Image.new(mode, (w, h)).save(b, "PNG", **({"transparency": 0} if mode == "P" else {}))
    open("%s/png_%s_%dx%d" % (sys.argv[1], mode, w, h), "wb").write(bytes([1]) + b.getvalue())
# CMYK and YCCK-free CMYK JPEGs (data/image.c: inverted, Pillow's cmyk2rgb), plain and progressive
for prog, w, h in [(False, 13, 9), (True, 40, 3)]:
    b = io.BytesIO()
    Image.new("CMYK", (w, h), (20, 90, 200, 60)).save(b, "JPEG", quality=80, progressive=prog)
    open("%s/cmyk_%dx%d" % (sys.argv[1], w, h), "wb").write(bytes([0]) + b.getvalue())
# GIFs (data/gif.c): Pillow's own (real LZW, interlaced, animated) and tests/data/gif_build.py's (a frame off
# the screen, transparency, a local table, no table, a zero-size screen)
sys.path.insert(0, sys.argv[2])
import gif_build
im = Image.new("RGB", (21, 17), (200, 30, 90)).quantize(colors=8)
for name, kw in (("plain", {"interlace": False}), ("interlaced", {"interlace": True}),
                 ("animated", {"save_all": True, "append_images": [im.transpose(Image.FLIP_LEFT_RIGHT)]})):
    b = io.BytesIO()
    im.save(b, "GIF", **kw)
    open("%s/gif_%s" % (sys.argv[1], name), "wb").write(bytes([2]) + b.getvalue())
pal = bytes(range(30))
rows = [[(x * 3 + y) % 12 for x in range(9)] for y in range(7)]
for name, g in (("offset_trns", gif_build.gif(20, 15, [dict(x=4, y=5, w=9, h=7, px=rows, trns=3)], gpal=pal)),
                ("local_grow", gif_build.gif(5, 5, [dict(x=2, y=1, w=9, h=7, px=rows, lpal=pal[:12], interlace=True)], gpal=pal)),
                ("no_table_zero_screen", gif_build.gif(0, 0, [dict(x=0, y=0, w=9, h=7, px=rows, min_bits=4)]))):
    open("%s/gif_%s" % (sys.argv[1], name), "wb").write(bytes([3]) + g)
PYEND

# regression seeds: damaged JPEGs made from a small demo JPEG, each behind every settings byte
mkdir -p "$W/bad_jpegs"
if /usr/bin/python3 "$SRC/tests/data/bad_jpegs.py" "$(ls "$W/demo/images"/*.jpg | head -1)" "$W/bad_jpegs"; then
    for f in "$W"/bad_jpegs/*.jpg; do
        for s in 0 1 2 3; do { printf "\\x0$s"; cat "$f"; } > "$W/corpus_image/$(basename "$f" .jpg)_$s"; done
    done
else
    echo "FAIL: tests/data/bad_jpegs.py could not make the regression seeds"
    exit 1
fi

rc=0
echo "fuzz_image: $(ls "$W/corpus_image" | wc -l) seed images (JPEG, PNG, GIF), ${T}s"
"$W/fuzz_image" -max_total_time="$T" -max_len=65536 -rss_limit_mb=2048 -artifact_prefix="$W/" -print_final_stats=1 \
    "$W/corpus_image" >"$W/fuzz_image.log" 2>&1 || rc=1
tail -n 4 "$W/fuzz_image.log"
echo "fuzz_shard: $(ls "$W/corpus_shard" | wc -l) seed shards, ${T}s"
"$W/fuzz_shard" -max_total_time="$T" -max_len=65536 -rss_limit_mb=2048 -artifact_prefix="$W/" -print_final_stats=1 \
    "$W/corpus_shard" >"$W/fuzz_shard.log" 2>&1 || rc=1
tail -n 4 "$W/fuzz_shard.log"
echo "fuzz_manifest: $(ls "$W/corpus_manifest" | wc -l) seed manifests, ${T}s"
FUZZ_TOKENIZER="$W/tok.json" "$W/fuzz_manifest" -max_total_time="$T" -max_len=16384 -rss_limit_mb=2048 -artifact_prefix="$W/" \
    -print_final_stats=1 "$W/corpus_manifest" >"$W/fuzz_manifest.log" 2>&1 || rc=1
tail -n 4 "$W/fuzz_manifest.log"
if [ $rc != 0 ]; then
    echo "FAIL: a fuzz target found a crash; logs in $W (reproduce with the crash-* file it names, kept there)"
    grep -h -A 20 "ERROR\|SUMMARY" "$W"/fuzz_*.log | head -60
fi
exit $rc
