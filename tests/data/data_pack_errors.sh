#!/usr/bin/env bash
# data_pack_errors.sh — `rrfp-mm pack` on a manifest mixing good records (real photographs from
# python3-skimage, a greyscale JPEG, a progressive JPEG, two images, text only) with every kind of bad
# record: each bad one is named by manifest line and reason, the summary counts them, nothing good is
# lost (the loader hands back every good sample equal to the manifest and its JPEGs), --strict is
# fatal and leaves no shard, and a JSON-array manifest with bad JSON is an error naming line:column.
# Damaged JPEGs (tests/data/bad_jpegs.py) placed before good records cost only themselves, in pack and in
# the loader (test_data --bad-images).
# usage: data_pack_errors.sh RRFP_MM TEST_DATA WORK_DIR
set -u
BIN=$1
TD=$2
W=$3
case "$W" in /tmp/* | */build*/*) ;; *) echo "refusing work dir '$W'"; exit 2 ;; esac
SK=/usr/lib/python3/dist-packages/skimage/data
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
rm -rf "$W" && mkdir -p "$W/img" || exit 2
cp "$SK/rocket.jpg" "$SK/retina.jpg" "$SK/hubble_deep_field.jpg" "$SK/truncated.jpg" "$W/img/" || exit 77
/usr/bin/python3 - "$W/img" <<'PYEND' || { echo "cannot make test images (python3-pil)"; exit 77; }
import sys
from PIL import Image
d = sys.argv[1]
im = Image.open(d + "/rocket.jpg").convert("RGB")
im.convert("L").save(d + "/grey.jpg", quality=90)
im.resize((320, 214)).save(d + "/prog.jpg", quality=85, progressive=True)
im.resize((64, 43)).save(d + "/bmp.jpg", format="BMP")          # a BMP named .jpg (PNGs, GIFs and CMYK JPEGs are read:
                                                                # tests/data/data_png.py, data_cmyk_gif.py)
im.resize((64, 43)).save(d + "/cut.gif", format="GIF")
gif = open(d + "/cut.gif", "rb").read()
open(d + "/cutgif.jpg", "wb").write(gif[:len(gif) // 2])        # a GIF named .jpg, cut inside its image data
assert Image.open(d + "/prog.jpg").info.get("progressive")
PYEND
/usr/bin/python3 "$(dirname "$0")/bad_jpegs.py" "$W/img/rocket.jpg" "$W/img" || fail "bad_jpegs.py"
H='{"from":"human","value":'
G='{"from":"gpt","value":'
cat > "$W/good.jsonl" <<JSONEND
{"id":"rocket","image":"rocket.jpg","conversations":[$H"<image>\nWhat is this?"},$G"a rocket on its launch pad"}]}
{"id":"retina","image":"retina.jpg","conversations":[$H"<image>\nDescribe it."},$G"a photograph of a retina"},$H"Colour?"},$G"orange"}]}
{"id":"hubble","image":"hubble_deep_field.jpg","conversations":[$H"What is shown?\n<image>"},$G"galaxies"}]}
{"id":"grey","image":"grey.jpg","conversations":[$H"<image>\nIs it in colour?"},$G"no"}]}
{"id":"prog","image":"prog.jpg","conversations":[$H"<image>\nWhat is this?"},$G"a rocket"}]}
{"id":"two","image":["rocket.jpg","grey.jpg"],"conversations":[$H"<image>\n<image>\nWhich one is in colour?"},$G"the first"}]}
{"id":"text","conversations":[$H"Count to three."},$G"one two three"}]}
JSONEND
cp "$W/good.jsonl" "$W/all.jsonl"
cat >> "$W/all.jsonl" <<JSONEND
{"id":"trunc","image":"truncated.jpg","conversations":[$H"<image>\nWhat?"},$G"x"}]}
{"id":"bmp","image":"bmp.jpg","conversations":[$H"<image>\nWhat?"},$G"x"}]}
{"id":"missing","image":"nope.jpg","conversations":[$H"<image>\nWhat?"},$G"x"}]}
{"id":"empty","image":"rocket.jpg","conversations":[]}
{"id":"broken", "conversations": [
{"id":"noanswer","conversations":[$H"hello"}]}
{"id":"mismatch","image":"rocket.jpg","conversations":[$H"What?"},$G"x"}]}
{"id":"cutgif","image":"cutgif.jpg","conversations":[$H"<image>\nWhat?"},$G"x"}]}
{"id":"badturn","conversations":[{"from":"system","value":"be nice"},$G"x"}]}
JSONEND
"$BIN" tokenizer train --vocab 300 --manifest "$W/good.jsonl" --out "$W/tok.json" >/dev/null 2>&1 || fail "tokenizer train"

# 9 of the 16 records are bad: above the default --max-reject-fraction 0.5, an error that writes
# nothing (it stops at the rejection that passes the limit, here the last line)
"$BIN" pack --manifest "$W/all.jsonl" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/toomany" --shard-size 0.3 \
    2>"$W/toomany.log"
rc=$?
[ $rc = 1 ] || fail "pack with 9 of 16 rejected: exit $rc, expected 1"
grep -qF "$W/all.jsonl: 9 of the 16 records rejected (stopped at line 16), more than --max-reject-fraction 0.5 allows; no shard written" \
    "$W/toomany.log" || fail "too many rejections message: $(tail -3 "$W/toomany.log")"
[ ! -e "$W/toomany" ] || fail "pack with too many rejections left $(ls -A "$W/toomany")"
"$BIN" pack --manifest "$W/all.jsonl" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/x" --max-reject-fraction 1.5 \
    2>"$W/frac.log"
rc=$?
[ $rc = 2 ] && grep -qF "expects a number in [0, 1], got '1.5'" "$W/frac.log" || fail "bad fraction: $rc $(cat "$W/frac.log")"

"$BIN" pack --manifest "$W/all.jsonl" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/shards" --shard-size 0.3 \
    --max-reject-fraction 0.6 2>"$W/pack.log"
rc=$?
cat "$W/pack.log"
[ $rc = 0 ] || fail "pack exit $rc"
M="$W/all.jsonl"
expect() { grep -qF -- "$1" "$W/pack.log" || fail "pack log lacks: $1"; }
expect "$M:8: record 'trunc' rejected (bad_image)"
expect "$M:9: record 'bmp' rejected (bad_image): image '$W/img/bmp.jpg': not a JPEG, PNG or GIF (does not start with the JPEG marker ff d8: a BMP file)"
expect "$M:10: record 'missing' rejected (missing_image): image '$W/img/nope.jpg': No such file or directory"
expect "$M:11: record 'empty' rejected (empty_conversation)"
expect "$M:12: record '?' rejected (bad_json): invalid JSON at column"
expect "$M:13: record 'noanswer' rejected (no_answer)"
expect "$M:14: record 'mismatch' rejected (image_tokens): 1 image in \"image\" but 0 <image> tokens"
expect "$M:15: record 'cutgif' rejected (bad_image): image '$W/img/cutgif.jpg': corrupt GIF: in its first frame's image data: the file is cut short"
expect "$M:16: record 'badturn' rejected (bad_turn): turn 0: \"from\" is \"system\""
expect "read 16 records, packed 7 into"
expect "rejected 9: bad_json 1, empty_conversation 1, bad_turn 1, no_answer 1, image_tokens 1, missing_image 1, bad_image 3"
n=$(grep -c "rejected (" "$W/pack.log")
[ "$n" = 9 ] || fail "$n rejection lines, expected 9"
ls "$W/shards"/*.tmp >/dev/null 2>&1 && fail "temporary files left"

# every good record comes back through the loader, equal to the manifest + JPEGs, at the pack's grid
# settings and at others (recomputed from the index's image sizes without decoding)
"$TD" --check-shards "$W/shards" "$W/good.jsonl" "$W/img" "$W/tok.json" 8 16 64 || fail "loader round trip (8, 16..64)"
"$TD" --check-shards "$W/shards" "$W/good.jsonl" "$W/img" "$W/tok.json" 14 64 256 || fail "loader round trip (14, 64..256)"

# --strict: the first rejection is fatal, and no shard (finished or temporary) is left
"$BIN" pack --manifest "$W/all.jsonl" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/strict" --strict 2>"$W/strict.log"
rc=$?
[ $rc = 1 ] || fail "--strict exit $rc, expected 1"
grep -qF "$M:8: record 'trunc' rejected (bad_image)" "$W/strict.log" || fail "--strict message: $(cat "$W/strict.log")"
[ -z "$(ls -A "$W/strict" 2>/dev/null)" ] || fail "--strict left files: $(ls "$W/strict")"

# a JSON-array manifest with bad JSON: an error naming line and column, nothing written
printf '[\n{"id":"a","conversations":[]},\n{"id": "b" "conversations": []}\n]\n' > "$W/bad.json"
"$BIN" pack --manifest "$W/bad.json" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/badjson" 2>"$W/bad.log"
rc=$?
[ $rc = 1 ] || fail "bad JSON exit $rc"
grep -qF "$W/bad.json:3:12: invalid JSON" "$W/bad.log" || fail "bad JSON message: $(cat "$W/bad.log")"
# nothing packable: an error, not an empty data set
printf '[\n]\n' > "$W/emptyarr.json"
"$BIN" pack --manifest "$W/emptyarr.json" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/none" 2>"$W/none.log"
rc=$?
[ $rc = 1 ] && grep -qF "no record could be packed" "$W/none.log" || fail "empty manifest: $(cat "$W/none.log")"

# Image paths leading outside --images (.., absolute, a symbolic link) reject their record naming the
# sample and the path, and no message ever quotes a file's bytes (/etc/passwd's "root"); with
# --allow-outside-images they are read (and /etc/passwd is "not a JPEG, PNG or GIF", still unquoted).
cp "$W/img/rocket.jpg" "$W/outside.jpg"
ln -sf ../outside.jpg "$W/img/link.jpg"
esc() { echo "{\"id\":\"$1\",\"image\":\"$2\",\"conversations\":[$H\"<image>\\nWhat?\"},$G\"a rocket\"}]}"; }
{
    esc up ../outside.jpg
    esc deep sub/../../outside.jpg
    esc abs "$W/outside.jpg"
    esc passwd /etc/passwd
    esc passwd2 ../../../../../../../../../etc/passwd
    esc link link.jpg
    cat "$W/good.jsonl"
} > "$W/escape.jsonl"
E="$W/escape.jsonl"
"$BIN" pack --manifest "$E" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/escape" 2>"$W/escape.log"
rc=$?
[ $rc = 0 ] || fail "pack with escaping paths: exit $rc"
for x in "1: record 'up' rejected (outside_images): image path '../outside.jpg' leads outside the images folder '$W/img'" \
    "2: record 'deep' rejected (outside_images): image path 'sub/../../outside.jpg' leads outside" \
    "3: record 'abs' rejected (outside_images): image path '$W/outside.jpg' is absolute, not relative to the images folder" \
    "4: record 'passwd' rejected (outside_images): image path '/etc/passwd' is absolute" \
    "5: record 'passwd2' rejected (outside_images): image path '../../../../../../../../../etc/passwd' leads outside" \
    "6: record 'link' rejected (outside_images): image '$W/img/link.jpg' resolves to '$W/outside.jpg', outside the images folder" \
    "read 13 records, packed 7 into 1 shard" "rejected 6: outside_images 6"; do
    grep -qF -- "$x" "$W/escape.log" || fail "escape log lacks: $x"
done
"$BIN" pack --manifest "$E" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/escape2" --allow-outside-images \
    2>"$W/escape2.log"
rc=$?
[ $rc = 0 ] || fail "pack --allow-outside-images: exit $rc"
for x in "4: record 'passwd' rejected (bad_image): image '/etc/passwd': not a JPEG, PNG or GIF (does not start with the JPEG marker ff d8)" \
    "read 13 records, packed 10 into 1 shard" "rejected 3: missing_image 1, bad_image 2"; do
    grep -qF -- "$x" "$W/escape2.log" || fail "--allow-outside-images log lacks: $x"
done
grep -n "root\|72 6f 6f 74" "$W/escape.log" "$W/escape2.log" && fail "a message quotes /etc/passwd"
rm -f "$W/img/link.jpg"

# Folders where files are expected: each error says what was expected (it said "Input/output error")
mkdir -p "$W/img/dir.jpg"
{ esc dirimg dir.jpg; esc devzero /dev/zero; cat "$W/good.jsonl"; } > "$W/dirs.jsonl"
# (address space capped: /dev/zero read to the end would take all the memory there is)
# (not under AddressSanitizer, whose shadow memory needs terabytes of address space: tests/asan/asan.cmake)
(case "${ASAN_OPTIONS:-}" in *log_path*) ;; *) ulimit -v 4000000 ;; esac; "$BIN" pack --manifest "$W/dirs.jsonl" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/dirs" \
    --allow-outside-images 2>"$W/dirs.log")
rc=$?
for x in "1: record 'dirimg' rejected (missing_image): image '$W/img/dir.jpg' is a directory, expected a JPEG file" \
    "2: record 'devzero' rejected (missing_image): image '/dev/zero' is not a regular file, expected a JPEG file" \
    "read 9 records, packed 7 into 1 shard"; do
    grep -qF -- "$x" "$W/dirs.log" || fail "image folder: exit $rc, log lacks: $x"
done
"$BIN" pack --manifest "$W/img" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/dirs2" 2>"$W/dirs2.log"
rc=$?
[ $rc = 1 ] && grep -qF "cannot read manifest '$W/img': is a directory, expected a JSON or JSONL manifest file" "$W/dirs2.log" ||
    fail "manifest folder: exit $rc, $(cat "$W/dirs2.log")"
"$BIN" pack --manifest "$W/good.jsonl" --images "$W/img" --tokenizer "$W/img" --out "$W/dirs3" 2>"$W/dirs3.log"
rc=$?
[ $rc = 1 ] && grep -qF "$W/img: cannot read the tokenizer: is a directory, expected a tokenizer.json file" "$W/dirs3.log" ||
    fail "tokenizer folder: exit $rc, $(cat "$W/dirs3.log")"
"$BIN" pack --manifest "$W/good.jsonl" --images "$W/good.jsonl" --tokenizer "$W/tok.json" --out "$W/dirs4" 2>"$W/dirs4.log"
rc=$?
[ $rc = 1 ] && grep -qF -- "--images '$W/good.jsonl': not a folder" "$W/dirs4.log" ||
    fail "--images a file: exit $rc, $(cat "$W/dirs4.log")"
rmdir "$W/img/dir.jpg"

# A manifest starting with a UTF-8 byte-order mark, as a JSON array and as JSONL: all 5 records packed
# (the BOM hid the array's '[', and the array was read as JSONL: 4 of 5 records lost, exit 0)
for form in json jsonl; do
    f="$W/bom.$form"
    printf '\xef\xbb\xbf' > "$f"
    [ $form = json ] && printf '[\n' >> "$f"
    for i in 1 2 3 4 5; do
        sep=","; [ $form = jsonl ] || [ $i = 5 ] && sep=""
        echo "{\"id\":\"bom$i\",\"conversations\":[$H\"Say $i.\"},$G\"$i\"}]}$sep" >> "$f"
    done
    [ $form = json ] && printf ']\n' >> "$f"
    "$BIN" tokenizer train --vocab 300 --manifest "$f" --out "$W/bomtok.$form.json" >"$W/bomtok.$form.log" 2>&1 ||
        fail "tokenizer train on a $form manifest with a BOM: $(tail -2 "$W/bomtok.$form.log")"
    "$BIN" pack --manifest "$f" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/bom-$form" 2>"$W/bom-$form.log"
    rc=$?
    [ $rc = 0 ] && grep -qF "read 5 records, packed 5 into 1 shard" "$W/bom-$form.log" ||
        fail "$form manifest with a BOM: exit $rc, $(tail -2 "$W/bom-$form.log")"
done

# Bad JPEGs (random bytes after a marker, 65535x65535, zero height, 12 bits, 60000x60000 + noise, cut)
# before every good record: each is rejected with its own reason and every good record is packed
# (a decoder left broken by the first failure rejected all of them with a stale message).
: > "$W/poison.jsonl"
for f in "$W"/img/bad-*.jpg; do
    b=$(basename "$f" .jpg)
    echo "{\"id\":\"$b\",\"image\":\"$b.jpg\",\"conversations\":[$H\"<image>\\nWhat?\"},$G\"x\"}]}" >> "$W/poison.jsonl"
done
nbad=$(wc -l < "$W/poison.jsonl")
cat "$W/good.jsonl" >> "$W/poison.jsonl"
"$BIN" pack --manifest "$W/poison.jsonl" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/poison" 2>"$W/poison.log"
rc=$?
[ $rc = 0 ] || fail "pack after bad JPEGs: exit $rc: $(tail -2 "$W/poison.log")"
grep -qF "read $((nbad + 7)) records, packed 7 into" "$W/poison.log" || fail "pack after bad JPEGs: $(tail -3 "$W/poison.log")"
grep -qF "rejected $nbad: bad_image $nbad" "$W/poison.log" || fail "bad JPEG rejections: $(tail -3 "$W/poison.log")"
grep -qF "record 'bad-huge-random' rejected (bad_image): image '$W/img/bad-huge-random.jpg': JPEG declares 60000x60000 pixels, above the limit" \
    "$W/poison.log" || fail "60000x60000 message: $(grep huge "$W/poison.log")"
"$TD" --check-shards "$W/poison" "$W/good.jsonl" "$W/img" "$W/tok.json" 8 16 64 || fail "loader round trip after bad JPEGs"
# the same bad JPEGs in the decoder and in the loader's decode path (one shard, bad between good)
mkdir -p "$W/bad" && cp "$W"/img/bad-*.jpg "$W/bad/"
"$TD" --bad-images "$W" "$W/bad" "$W/img/rocket.jpg" "$W/img/retina.jpg" "$W/img/hubble_deep_field.jpg" \
    "$W/img/grey.jpg" "$W/img/prog.jpg" 2>"$W/bad_images.log" || { tail -20 "$W/bad_images.log"; fail "test_data --bad-images"; }

[ $fails = 0 ] && echo "data_pack_errors: all checks passed"
exit $((fails > 0))
