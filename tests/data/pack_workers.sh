#!/usr/bin/env bash
# pack_workers.sh — `rrfp-mm pack --workers N` (data/pack.c) gives what one thread gives, for N = 1, 2, 3, 7:
#   - the same shard files byte for byte, on a manifest of real photographs (python3-skimage) with
#     rejected records (a corrupt JPEG, a missing image, a line that is not JSON), text-only and multi-image
#     records, rolled over several shards by a small --shard-size; the same rejection lines in manifest
#     order and the same summary on stderr (the progress lines, which carry times, aside);
#   - --strict: the first rejected record in manifest order is the error, though the record after it (a
#     line that is not JSON) fails at once while the first (a large JPEG cut short, decoded at full size
#     almost to its end before it fails) takes a while on another worker; nothing is written;
#   - --max-reject-fraction: the same stop (the same line) and the same messages, nothing written;
#   - the default is the CPUs this process may use (nproc), shown on the progress line; --workers 0, 257
#     and "two" are refused;
#   - SIGTERM and SIGINT in the middle of a pack (workers 1 and 3) exit 128 + the signal and leave no
#     shard, no *.rrs.tmp and no --out folder.
# usage: pack_workers.sh RRFP_MM WORK_DIR
set -u
BIN=$1
W=$2
case "$W" in /tmp/* | */build*/*) ;; *) echo "refusing work dir '$W'"; exit 2 ;; esac
SK=/usr/lib/python3/dist-packages/skimage/data
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
rm -rf "$W" && mkdir -p "$W/img" || exit 2
cp "$SK/rocket.jpg" "$SK/retina.jpg" "$SK/hubble_deep_field.jpg" "$SK/chelsea.png" "$SK/truncated.jpg" "$W/img/" || exit 77
# slow.jpg: a 3000 x 2000 photograph cut at 90% of its bytes; decoding reaches the cut before it fails
/usr/bin/python3 - "$W/img" <<'PYEND' || { echo "cannot make test images (python3-pil)"; exit 77; }
import sys
from PIL import Image
d = sys.argv[1]
Image.open(d + "/retina.jpg").convert("RGB").resize((3000, 2000)).save(d + "/big.jpg", quality=95)
b = open(d + "/big.jpg", "rb").read()
open(d + "/slow.jpg", "wb").write(b[: len(b) * 9 // 10])
PYEND
H='{"from":"human","value":'
G='{"from":"gpt","value":'
rec() { # id, "image" field (JSON, or empty for a text-only record), number of <image> tokens
    local img="" tags=""
    [ -n "$2" ] && img="\"image\":$2,"
    for ((k = 0; k < $3; k++)); do tags="$tags<image>\\n"; done
    echo "{\"id\":\"$1\",$img\"conversations\":[$H\"${tags}What is shown in record $1?\"},$G\"answer number $1\"}]}"
}
photos=(rocket.jpg retina.jpg hubble_deep_field.jpg chelsea.png)
{
    for ((i = 0; i < 36; i++)); do
        case $((i % 6)) in
        0 | 1 | 3) rec "r$i" "\"${photos[$((i % 4))]}\"" 1 ;;
        2) rec "r$i" "" 0 ;;
        4) rec "r$i" "[\"${photos[$((i % 4))]}\",\"${photos[$(((i + 1) % 4))]}\"]" 2 ;;
        5) rec "r$i" "[\"rocket.jpg\",\"retina.jpg\",\"chelsea.png\"]" 3 ;;
        esac
        case $i in
        7) rec bad_trunc '"truncated.jpg"' 1 ;;
        16) rec bad_missing '"nope.jpg"' 1 ;;
        25) echo '{"id":"bad_json", "conversations": [' ;;
        esac
    done
} >"$W/m.jsonl"
grep -v bad_json "$W/m.jsonl" >"$W/good.jsonl"
"$BIN" tokenizer train --vocab 300 --manifest "$W/good.jsonl" --out "$W/tok.json" >/dev/null 2>&1 || { echo "tokenizer train failed"; exit 1; }

pack() { # out log args...
    local out=$1 log=$2
    shift 2
    "$BIN" pack --images "$W/img" --tokenizer "$W/tok.json" --out "$W/$out" "$@" 2>"$W/$log"
}
# the stderr of a pack without its progress lines (records/s and ETA vary)
messages() { grep -v -E '^pack: [0-9]+/[0-9]+ records, ' "$W/$1"; }
workers_shown() { grep -o -E 'records/s \([0-9]+ workers?\)' "$W/$1" | tail -1 | grep -o -E '[0-9]+ worker'; }

# ---- the same shards and messages for any N ----
for n in 1 2 3 7; do
    pack "s$n" "s$n.log" --manifest "$W/m.jsonl" --shard-size 0.6 --workers "$n"
    rc=$?
    [ $rc = 0 ] || fail "pack --workers $n: exit $rc: $(tail -3 "$W/s$n.log")"
    [ "$(workers_shown "s$n.log")" = "$n worker" ] || fail "pack --workers $n: progress line says '$(workers_shown "s$n.log")'"
done
cat "$W/s1.log"
nshards=$(ls "$W/s1" | grep -c '^shard-.*\.rrs$')
[ "$nshards" -ge 4 ] || fail "--shard-size 0.6 gave $nshards shards, expected at least 4 (several roll-overs)"
M="$W/m.jsonl"
[ "$(messages s1.log | grep -c 'rejected (')" = 3 ] || fail "expected 3 rejection lines: $(messages s1.log)"
messages s1.log | grep -qF "$M:9: record 'bad_trunc' rejected (bad_image)" || fail "bad_trunc not reported"
messages s1.log | grep -qF "$M:19: record 'bad_missing' rejected (missing_image)" || fail "bad_missing not reported"
messages s1.log | grep -qF "$M:29: record '?' rejected (bad_json)" || fail "bad_json not reported"
grep -qF "pack: read 39 records, packed 36 into $nshards shards" "$W/s1.log" || fail "summary: $(tail -1 "$W/s1.log")"
for n in 2 3 7; do
    [ "$(ls "$W/s$n")" = "$(ls "$W/s1")" ] || fail "--workers $n wrote $(ls "$W/s$n" | tr '\n' ' '), --workers 1 $(ls "$W/s1" | tr '\n' ' ')"
    for f in "$W"/s1/*; do
        cmp -s "$f" "$W/s$n/$(basename "$f")" || fail "--workers $n: $(basename "$f") differs from --workers 1's"
    done
    cmp -s <(messages s1.log) <(messages "s$n.log") ||
        fail "--workers $n: stderr differs from --workers 1's: $(diff <(messages s1.log) <(messages "s$n.log") | head -5)"
done
# the default: the CPUs this process may use (at most 32, at most the records)
pack sdef sdef.log --manifest "$W/m.jsonl" --shard-size 0.6 || fail "pack with the default workers: $(tail -2 "$W/sdef.log")"
d=$(nproc)
[ "$d" -gt 32 ] && d=32
[ "$(workers_shown sdef.log)" = "$d worker" ] || fail "default workers: '$(workers_shown sdef.log)', expected $d (nproc)"
cmp -s "$W/sdef/shard-00000.rrs" "$W/s1/shard-00000.rrs" || fail "default workers: shard-00000.rrs differs"

for bad in 0 257 two; do
    pack wbad wbad.log --manifest "$W/m.jsonl" --workers "$bad"
    rc=$?
    [ $rc = 2 ] && grep -qF -- "--workers expects an integer in [1, 256], got '$bad'" "$W/wbad.log" && [ ! -e "$W/wbad" ] ||
        fail "--workers $bad: exit $rc, $(cat "$W/wbad.log")"
done

# ---- --strict: the first rejection in manifest order, not the first to fail ----
{
    for i in 0 1 2; do rec "g$i" '"rocket.jpg"' 1; done
    rec slow '"slow.jpg"' 1
    echo '{"id":"quick", "conversations": ['
    for i in 3 4 5 6 7 8 9 10 11 12; do rec "g$i" '"retina.jpg"' 1; done
} >"$W/strict.jsonl"
for n in 1 2 3 7; do
    pack "strict$n" "strict$n.log" --manifest "$W/strict.jsonl" --strict --workers "$n" --image-preprocess llava
    rc=$?
    [ $rc = 1 ] || fail "--strict --workers $n: exit $rc, expected 1"
    grep -qF "rrfp-mm: error: $W/strict.jsonl:4: record 'slow' rejected (bad_image): image '$W/img/slow.jpg': corrupt JPEG" \
        "$W/strict$n.log" || fail "--strict --workers $n: not the first bad record: $(grep error "$W/strict$n.log")"
    ! grep -q "quick\|:5:" "$W/strict$n.log" || fail "--strict --workers $n names the later record: $(cat "$W/strict$n.log")"
    [ ! -e "$W/strict$n" ] || fail "--strict --workers $n left $(ls -A "$W/strict$n")"
    cmp -s <(messages strict1.log) <(messages "strict$n.log") || fail "--strict --workers $n: stderr differs from --workers 1's"
done

# ---- --max-reject-fraction: the same stop ----
{
    rec f0 '"rocket.jpg"' 1
    rec fb1 '"nope1.jpg"' 1
    rec f1 '"retina.jpg"' 1
    rec fb2 '"truncated.jpg"' 1
    echo 'not json'
    rec f2 '"chelsea.png"' 1
    rec fb3 '"nope2.jpg"' 1
    rec f3 '"hubble_deep_field.jpg"' 1
    rec fb4 '"nope3.jpg"' 1
    rec f4 '"rocket.jpg"' 1
} >"$W/frac.jsonl" # 10 records, 5 rejected: past 0.4 of them at the 5th rejection, line 9
for n in 1 2 3 7; do
    pack "frac$n" "frac$n.log" --manifest "$W/frac.jsonl" --max-reject-fraction 0.4 --shard-size 0.01 --workers "$n"
    rc=$?
    [ $rc = 1 ] || fail "--max-reject-fraction --workers $n: exit $rc, expected 1"
    grep -qF "$W/frac.jsonl: 5 of the 10 records rejected (stopped at line 9), more than --max-reject-fraction 0.4 allows; no shard written" \
        "$W/frac$n.log" || fail "--max-reject-fraction --workers $n: $(grep error "$W/frac$n.log")"
    [ ! -e "$W/frac$n" ] || fail "--max-reject-fraction --workers $n left $(ls -A "$W/frac$n")"
    cmp -s <(messages frac1.log) <(messages "frac$n.log") ||
        fail "--max-reject-fraction --workers $n: stderr differs: $(diff <(messages frac1.log) <(messages "frac$n.log") | head -4)"
done

# ---- an interrupted pack leaves nothing ----
for ((i = 0; i < 3000; i++)); do rec "i$i" '"rocket.jpg"' 1; done >"$W/long.jsonl"
for run in "TERM 1 143" "INT 3 130"; do
    set -- $run
    set -m # job control: a background job that does not ignore SIGINT
    "$BIN" pack --manifest "$W/long.jsonl" --images "$W/img" --tokenizer "$W/tok.json" --out "$W/int$2" --shard-size 0.3 \
        --workers "$2" --quiet 2>"$W/int$2.log" &
    pid=$!
    set +m
    seen=0
    for ((k = 0; k < 3000; k++)); do # the second shard begun: the first closed, the second open
        [ -e "$W/int$2/shard-00001.rrs.tmp" ] && { seen=1; break; }
        kill -0 $pid 2>/dev/null || break
        sleep 0.01
    done
    [ $seen = 1 ] || fail "SIG$1 --workers $2: shard-00001.rrs.tmp never appeared"
    kill -"$1" $pid
    wait $pid
    rc=$?
    [ $rc = "$3" ] || fail "SIG$1 --workers $2: exit $rc, expected $3 ($(tail -1 "$W/int$2.log"))"
    grep -qF "rrfp-mm: error: interrupted by signal" "$W/int$2.log" || fail "SIG$1 --workers $2: $(cat "$W/int$2.log")"
    [ ! -e "$W/int$2" ] || fail "SIG$1 --workers $2 left $(ls -A "$W/int$2" | head -3 | tr '\n' ' ')"
done

if [ $fails = 0 ]; then
    echo "pack workers: ok ($nshards shards the same for --workers 1, 2, 3, 7; --strict, the reject fraction and interrupts)"
else
    echo "pack workers: $fails failure(s)"
    exit 1
fi
