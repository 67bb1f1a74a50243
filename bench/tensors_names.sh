#!/usr/bin/env bash
# tensors_names.sh — `rrfp-mm tensors ls` and `tensors diff` of safetensors files with many tensor names
# (a hostile file's many names: the reader's duplicate-name check once scanned every earlier name, O(n^2): 78 s for 200k names).
# Writes files of N/10 and N one-element tensors (plain Python, no torch) and times the commands on
# each; the ratio of the two times is ~10 for a linear reader and ~100 for a quadratic one. Give a
# second binary (an older build) to time it on the same files in the same run.
# usage: bench/tensors_names.sh RRFP_MM [OTHER_RRFP_MM] [N=200000] [WORK_DIR=/tmp/rrfp-bench-names]
set -eu
BIN=$1
OTHER=${2:-}
N=${3:-200000}
W=${4:-/tmp/rrfp-bench-names}
mkdir -p "$W"
for n in $((N / 10)) "$N"; do
    [ -f "$W/names$n.safetensors" ] && continue
    python3 - "$W/names$n.safetensors" "$n" <<'PY'
import json, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
parts = ['"w%07d":{"dtype":"F32","shape":[1],"data_offsets":[%d,%d]}' % (i, 4 * i, 4 * i + 4) for i in range(n)]
h = ("{" + ",".join(parts) + "}").encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(4 * n))
PY
done
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }
for b in "$BIN" $OTHER; do
    small=$(t "$b" tensors ls "$W/names$((N / 10)).safetensors")
    big=$(t "$b" tensors ls "$W/names$N.safetensors")
    printf '%s: tensors ls %7d names %8.3f s, %7d names %8.3f s (ratio %.1f; linear 10, quadratic 100)\n' \
        "$b" $((N / 10)) "$small" "$N" "$big" "$(echo "$big / $small" | bc -l)"
done
