#!/usr/bin/env bash
# loader.sh — decode + resize + pack throughput of the C loader (data/loader.c, one decode worker)
# against a Python loader on Pillow doing the same work on the same shards (bench/loader_pil.py), in
# one run, on two data sets:
#   demo    rrfp-mm demo-data (2000 samples, 64x48 .. 320x240 JPEGs), llava.ini's settings
#           (p 8, 16..64 patches, 1024-token microbatches)
#   photos  300 JPEGs of 480..1280 px cut from python3-skimage's photographs, LLaVA-like settings
#           (p 14, 64..1024 patches, 4096-token microbatches): decode-dominated
# Throughput per core = samples / CPU seconds of the process (all its threads: the C loader's worker
# and the consumer thread that assembles microbatches; Python's one thread), so the ratio compares
# work per core. Wall-clock figures are printed too.
# usage: bench/loader.sh [BUILD_DIR=build] [WORK_DIR=/tmp/rrfp-bench-loader]
set -eu
B=${1:-build}
W=${2:-/tmp/rrfp-bench-loader}
BIN=$B/rrfp-mm
BENCH=$B/rrfp-bench-loader
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$BIN" ] && [ -x "$BENCH" ] || { echo "build first: cmake --build $B (needs rrfp-mm and rrfp-bench-loader)"; exit 1; }
mkdir -p "$W"

if [ ! -d "$W/demo/shards" ]; then
    "$BIN" demo-data --out "$W/demo" --samples 2000 --heldout 10 --seed 1 2>/dev/null
    "$BIN" tokenizer train --vocab 512 --manifest "$W/demo/train.json" --out "$W/demo/tok.json" >/dev/null 2>&1
    "$BIN" pack --manifest "$W/demo/train.json" --images "$W/demo/images" --tokenizer "$W/demo/tok.json" \
        --out "$W/demo/shards" --quiet 2>/dev/null
fi
if [ ! -d "$W/photos/shards" ]; then
    mkdir -p "$W/photos/images"
    /usr/bin/python3 - "$W/photos" <<'PYEND'
import json, random, sys
from PIL import Image
d = sys.argv[1]
sk = "/usr/lib/python3/dist-packages/skimage/data/"
srcs = [Image.open(sk + f).convert("RGB") for f in ("rocket.jpg", "retina.jpg", "hubble_deep_field.jpg")]
r = random.Random(1)
recs = []
for i in range(300):
    im = srcs[i % 3]
    w = r.randint(480, 1280)
    h = max(360, min(1280, int(w * r.choice([0.75, 1.0, 0.5625, 1.33]))))
    big = im.resize((max(w, im.size[0]), max(h, im.size[1])))
    x, y = r.randint(0, big.size[0] - w), r.randint(0, big.size[1] - h)
    big.crop((x, y, x + w, y + h)).save("%s/images/p%04d.jpg" % (d, i), quality=90)
    recs.append({"id": "p%04d" % i, "image": "p%04d.jpg" % i, "conversations": [
        {"from": "human", "value": "<image>\nWhat is in this picture?"},
        {"from": "gpt", "value": ["a rocket", "a retina", "galaxies"][i % 3]}]})
json.dump(recs, open(d + "/train.json", "w"))
PYEND
    "$BIN" tokenizer train --vocab 300 --manifest "$W/photos/train.json" --out "$W/photos/tok.json" >/dev/null 2>&1
    "$BIN" pack --manifest "$W/photos/train.json" --images "$W/photos/images" --tokenizer "$W/photos/tok.json" \
        --out "$W/photos/shards" --patch 14 --min-patches 64 --max-patches 1024 --quiet 2>/dev/null
fi

field() { echo "$1" | awk -v k="$2" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}'; }
run() { # name shards p min max budget
    local c py
    c=$("$BENCH" "$2" "$3" "$4" "$5" "$6" 1)
    py=$(/usr/bin/python3 "$HERE/loader_pil.py" "$2" "$3" "$4" "$5" "$6")
    local cs ccpu cwall cmib ps pcpu pwall pmib
    cs=$(field "$c" samples) ccpu=$(field "$c" cpu) cwall=$(field "$c" wall) cmib=$(field "$c" mib)
    ps=$(field "$py" samples) pcpu=$(field "$py" cpu) pwall=$(field "$py" wall) pmib=$(field "$py" mib)
    awk -v n="$1" -v cs="$cs" -v cc="$ccpu" -v cw="$cwall" -v cm="$cmib" -v ps="$ps" -v pc="$pcpu" -v pw="$pwall" \
        -v pm="$pmib" -v ct="$(field "$c" tokens)" -v pt="$(field "$py" tokens)" 'BEGIN {
        printf "%-7s C loader : %6d samples  %8.1f samples/s per core  %7.2f MiB/s per core  (wall %.2f s, %.1f samples/s; %d LM tokens)\n", n, cs, cs/cc, cm/cc, cw, cs/cw, ct
        printf "%-7s Pillow   : %6d samples  %8.1f samples/s per core  %7.2f MiB/s per core  (wall %.2f s, %.1f samples/s; %d LM tokens)\n", n, ps, ps/pc, pm/pc, pw, ps/pw, pt
        printf "%-7s ratio C / Pillow per core: %.2fx   (wall: %.2fx)\n", n, (cs/cc)/(ps/pc), (cs/cw)/(ps/pw) }'
}
echo "loader throughput: one epoch, decode + resize + normalise + patchify + fifo microbatches ($(nproc) cores)"
run demo "$W/demo/shards" 8 16 64 1024
run photos "$W/photos/shards" 14 64 1024 4096

# Data parallelism: replica 0 of dp 2 plans the global step and decodes only its microbatches' images,
# on data.workers threads (the planner and its helpers), straight into the assembled microbatches.
# Wall time to hand out 303 kept samples (4 microbatches per step), 1 worker against 2, 3 runs each.
echo "dp 2, replica 0 (photos, 4 x 4096-token microbatches per replica): wall seconds, 3 runs alternating"
w1=() w2=()
for rep in 1 2 3; do
    w1+=("$(field "$(BENCH_DP=2 "$BENCH" "$W/photos/shards" 14 64 1024 4096 1 0 4)" wall)")
    w2+=("$(field "$(BENCH_DP=2 "$BENCH" "$W/photos/shards" 14 64 1024 4096 2 0 4)" wall)")
done
/usr/bin/python3 - "${w1[*]}" "${w2[*]}" <<'PYEND'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
print("dp2     1 worker : %s s (median %.2f)" % (" ".join("%.2f" % x for x in a), statistics.median(a)))
print("dp2     2 workers: %s s (median %.2f)" % (" ".join("%.2f" % x for x in b), statistics.median(b)))
print("dp2     speed-up of 2 workers over 1 (medians): %.2fx" % (statistics.median(a) / statistics.median(b)))
PYEND
