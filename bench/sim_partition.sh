#!/usr/bin/env bash
# sim_partition.sh — the split's objective (parallel.partition, docs/anyres.md "Path-aware split") on the calibrated
# steps: for P in PS, each workload in WORKLOADS (mm on RECIPE, anyres on RECIPE_ANYRES, as bench/sim_calibrated.sh)
# and seeds 1 .. SEEDS, the step generated with `rrfp-mm sim --calibrated --partition balance` and `--partition path`
# (the same samples and packing, only the split differs; whole backward, and --split-backward for the zb-h1 / bfw cells),
# then each cell's makespan under both splits. Columns per (P, workload): the two splits, then for each cell path /
# balance (geometric mean over seeds; < 1: the path-aware split's step is shorter), and adaptive 1f1b 2x's speedup over
# fixed-sync 1f1b and over fixed 1f1b on the same split, balance then path (the any-resolution against LLaVA-1.5
# comparison of docs/anyres.md).
#
# Usage: bench/sim_partition.sh [path/to/rrfp-mm] [SEEDS] [PS]   (default build/rrfp-mm, 3 seeds, "8 16 32")
#   env WORKLOADS (default "mm anyres"), ERR (adaptive's estimate error, default 0.2)
set -euo pipefail
BIN=${1:-build/rrfp-mm}
SEEDS=${2:-3}
PS=${3:-8 16 32}
WORKLOADS=${WORKLOADS:-mm anyres}
ERR=${ERR:-0.2}
RECIPE=${RECIPE:-recipes/llava-1.5-7b.ini}
RECIPE_ANYRES=${RECIPE_ANYRES:-recipes/llava-next-7b.ini}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CELLS="fixed-sync:1f1b:- fixed:1f1b:- adaptive:1f1b:1x adaptive:1f1b:2x ready:bfw:1.5x adaptive:zb-h1:2x"
for P in $PS; do
  for wl in $WORKLOADS; do
    rec=$RECIPE
    [ "$wl" = anyres ] && rec=$RECIPE_ANYRES
    for seed in $(seq 1 "$SEEDS"); do
      for part in balance path; do
        b="$T/$P-$wl-$seed-$part"
        "$BIN" sim --calibrated "$rec" --partition "$part" --stages "$P" --workload "$wl" --seed "$seed" \
          --dump "$b-whole.json" --json >/dev/null 2>"$b.info"
        "$BIN" sim --calibrated "$rec" --partition "$part" --stages "$P" --workload "$wl" --seed "$seed" \
          --split-backward --dump "$b-split.json" --json >/dev/null 2>&1
        split=$(sed -n 's/.*, layers \(.*\)$/\1/p' "$b.info" | tr ' ' '_')
        for c in $CELLS; do
          IFS=: read -r mode hint cap <<<"$c"
          f="$b-whole.json"
          case "$hint" in zb-h1|bfw) f="$b-split.json" ;; esac
          args=(--durations "$f" --mode "$mode" --hint "$hint" --json)
          [ "$cap" != - ] && args+=(--cap "$cap")
          case "$mode" in adaptive|lookahead) args+=(--estimate-error "$ERR" --estimate-seed "$seed") ;; esac
          ms=$("$BIN" sim "${args[@]}" 2>/dev/null | sed -n 's/.*"makespan":\([0-9.eE+-]*\).*/\1/p')
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$P" "$wl" "$seed" "$part" "$split" "$c" "$ms"
        done
      done
    done
  done
done >"$T/rows.tsv"
CELLS="$CELLS" python3 - "$T/rows.tsv" <<'PY'
import math, os, sys
from collections import defaultdict
ms, split = defaultdict(dict), {}
for line in open(sys.argv[1]):
    P, wl, seed, part, sp, cell, m = line.rstrip("\n").split("\t")
    ms[(int(P), wl, part, cell)][int(seed)] = float(m)
    split[(int(P), wl, part, int(seed))] = sp.replace("_", " ")
cells = os.environ["CELLS"].split()
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
name = lambda c: " ".join(x for x in c.split(":") if x != "-")
print("| P | workload | split: balance | split: path | " + " | ".join(f"{name(c)}: path / balance" for c in cells) +
      " | adaptive 1f1b 2x over fixed-sync 1f1b: balance, path | over fixed 1f1b: balance, path |")
print("|---|---|---|---|" + "---|" * len(cells) + "---|---|")
for P, wl in sorted({(k[0], k[1]) for k in ms}):
    seeds = sorted(ms[(P, wl, "balance", cells[0])])
    ratio = lambda c: gm([ms[(P, wl, "path", c)][s] / ms[(P, wl, "balance", c)][s] for s in seeds])
    speed = lambda part, base="fixed:1f1b:-": gm([ms[(P, wl, part, base)][s] / ms[(P, wl, part, "adaptive:1f1b:2x")][s]
                                                  for s in seeds])
    sb, sp = split[(P, wl, "balance", seeds[0])], split[(P, wl, "path", seeds[0])]
    print(f"| {P} | {wl} | {sb} | {sp} | " + " | ".join(f"{ratio(c):.3f}" for c in cells) +
          f" | {speed('balance', 'fixed-sync:1f1b:-'):.3f}, {speed('path', 'fixed-sync:1f1b:-'):.3f}"
          f" | {speed('balance'):.3f}, {speed('path'):.3f} |")
PY
