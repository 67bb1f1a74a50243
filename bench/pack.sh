#!/usr/bin/env bash
# pack.sh — `rrfp-mm pack` throughput (data/pack.c) with --workers N against --workers 1 in the same run, on
# real photographs: python3-skimage's JPEG photographs and its colour PNG photographs re-saved as JPEG
# (quality 90), 427x640 .. 1411x1411, repeated to RECORDS one-image records, under --image-preprocess smart
# and llava. Each setting runs REPS times alternating with the baseline; records/s = records / wall seconds
# of the best run, CPU = user + system seconds of that run (all threads), cores busy = CPU / wall (below N
# when other processes hold the CPUs, or when the one writing thread waits). The shards of every N are
# compared byte for byte with --workers 1's.
# usage: bench/pack.sh [BUILD_DIR=build] [WORK_DIR=/tmp/rrfp-bench-pack] [RECORDS=400] [WORKERS="2"] [REPS=3]
set -eu
B=${1:-build}
W=${2:-/tmp/rrfp-bench-pack}
RECORDS=${3:-400}
WORKERS=${4:-2}
REPS=${5:-3}
BIN=$B/rrfp-mm
[ -x "$BIN" ] || { echo "build first: cmake --build $B --target rrfp-mm"; exit 1; }
SK=/usr/lib/python3/dist-packages/skimage/data
[ -d "$SK" ] || { echo "needs python3-skimage's data folder ($SK)"; exit 1; }
mkdir -p "$W/img"
/usr/bin/python3 - "$SK" "$W" "$RECORDS" <<'PYEND'
import json, sys
from PIL import Image
sk, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
names = []
for f in ("rocket.jpg", "retina.jpg", "hubble_deep_field.jpg"):
    open("%s/img/%s" % (d, f), "wb").write(open("%s/%s" % (sk, f), "rb").read())
    names.append(f)
for f in ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png"):
    j = f.replace(".png", ".jpg")
    Image.open("%s/%s" % (sk, f)).convert("RGB").save("%s/img/%s" % (d, j), quality=90)
    names.append(j)
with open(d + "/m.jsonl", "w") as out:
    for i in range(n):
        out.write(json.dumps({"id": "p%05d" % i, "image": names[i % len(names)], "conversations": [
            {"from": "human", "value": "<image>\nWhat is in this picture, number %d?" % i},
            {"from": "gpt", "value": "a photograph from the scikit-image data folder"}]}) + "\n")
PYEND
"$BIN" tokenizer train --vocab 300 --manifest "$W/m.jsonl" --out "$W/tok.json" >/dev/null 2>&1

run() { # prep workers -> "wall cpu"
    rm -rf "$W/out$2"
    /usr/bin/time -f "%e %U %S" -o "$W/time" "$BIN" pack --manifest "$W/m.jsonl" --images "$W/img" \
        --tokenizer "$W/tok.json" --out "$W/out$2" --image-preprocess "$1" --workers "$2" --quiet 2>/dev/null
    awk '{printf "%s %.3f\n", $1, $2 + $3}' "$W/time"
}
echo "pack: $RECORDS records of 7 photographs, $(nproc) CPUs, best of $REPS runs (wall), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for prep in smart llava; do
    declare -A best=() cpu=()
    for ((r = 0; r < REPS; r++)); do
        for n in 1 $WORKERS; do
            read -r wall c < <(run "$prep" "$n")
            if [ -z "${best[$n]:-}" ] || awk -v a="$wall" -v b="${best[$n]}" 'BEGIN { exit !(a < b) }'; then
                best[$n]=$wall cpu[$n]=$c
            fi
            if [ "$n" != 1 ]; then
                for f in "$W/out1"/*; do
                    cmp -s "$f" "$W/out$n/$(basename "$f")" || { echo "FAIL: --workers $n $(basename "$f") differs"; exit 1; }
                done
            fi
        done
    done
    for n in 1 $WORKERS; do
        awk -v p="$prep" -v n="$n" -v k="$RECORDS" -v w="${best[$n]}" -v c="${cpu[$n]}" -v w1="${best[1]}" 'BEGIN {
            printf "%-6s --workers %-3d %7.1f records/s  (wall %.2f s, CPU %.2f s: %.2f cores busy)  speed-up %.2fx\n", p, n, k / w, w, c, c / w, w1 / w }'
    done
    unset best cpu
done
