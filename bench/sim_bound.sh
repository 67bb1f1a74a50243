#!/usr/bin/env bash
# sim_bound.sh — how far a cell can beat fixed-sync 1f1b on the calibrated steps (docs/anyres.md "Readiness-first at
# 32 stages"): for P in PS, each workload in WORKLOADS (mm on RECIPE, anyres on RECIPE_ANYRES, as bench/sim_calibrated.sh)
# and seeds 1 .. SEEDS, the step's lower bound (docs/scheduler.md "The simulator's semantics": no schedule with a whole
# backward is shorter) and adaptive HINT CAP with the estimates off by up to ERR and exact (--estimate-error 0), each as
# a speedup over fixed-sync 1f1b on the same step (whole backward; geometric mean over seeds, per seed in brackets).
# The ceiling column is fixed-sync 1f1b / lower bound: no 1f1b-family cell's speedup can exceed it.
#
# Usage: bench/sim_bound.sh [path/to/rrfp-mm] [SEEDS] [PS]   (default build/rrfp-mm, 3 seeds, "8 16 32")
#   env WORKLOADS (default "mm anyres"), HINT (1f1b), CAP (2x), ERR (0.2), PARTITION (balance|path: the split)
set -euo pipefail
BIN=${1:-build/rrfp-mm}
SEEDS=${2:-3}
PS=${3:-8 16 32}
WORKLOADS=${WORKLOADS:-mm anyres}
HINT=${HINT:-1f1b}
CAP=${CAP:-2x}
ERR=${ERR:-0.2}
RECIPE=${RECIPE:-recipes/llava-1.5-7b.ini}
RECIPE_ANYRES=${RECIPE_ANYRES:-recipes/llava-next-7b.ini}
PART=()  # PARTITION=balance|path: the split's objective (rrfp-mm sim --partition; default the recipe's parallel.partition)
[ -n "${PARTITION:-}" ] && PART=(--partition "$PARTITION")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for P in $PS; do
  for wl in $WORKLOADS; do
    rec=$RECIPE
    [ "$wl" = anyres ] && rec=$RECIPE_ANYRES
    for seed in $(seq 1 "$SEEDS"); do
      f="$T/$P-$wl-$seed.json"
      "$BIN" sim --calibrated "$rec" "${PART[@]}" --stages "$P" --workload "$wl" --seed "$seed" --dump "$f" --json >/dev/null 2>&1
      printf '%s\t%s\t%s\t' "$P" "$wl" "$seed"
      "$BIN" sim --durations "$f" --mode fixed-sync --hint 1f1b --json | tr '\n' '\t'
      "$BIN" sim --durations "$f" --mode adaptive --hint "$HINT" --cap "$CAP" --estimate-error "$ERR" \
        --estimate-seed "$seed" --json 2>/dev/null | tr '\n' '\t'
      "$BIN" sim --durations "$f" --mode adaptive --hint "$HINT" --cap "$CAP" --estimate-error 0 --json 2>/dev/null
    done
  done
done >"$T/rows.tsv"
HINT=$HINT CAP=$CAP ERR=$ERR python3 - "$T/rows.tsv" <<'PY'
import json, math, os, sys
from collections import defaultdict
rows = defaultdict(list)
for line in open(sys.argv[1]):
    P, wl, seed, fs, ad, ex = line.rstrip("\n").split("\t")
    fs, ad, ex = json.loads(fs), json.loads(ad), json.loads(ex)
    rows[(int(P), wl)].append((fs["makespan"] / fs["lower_bound"], fs["makespan"] / ad["makespan"],
                               fs["makespan"] / ex["makespan"], ad["efficiency"]))
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
cell = lambda xs: f"{gm(xs):.3f} ({', '.join(f'{x:.3f}' for x in xs)})"
h, c, e = os.environ["HINT"], os.environ["CAP"], os.environ["ERR"]
print(f"| P | workload | ceiling: fixed-sync 1f1b / lower bound | adaptive {h} {c}, estimates off by {e} | "
      f"adaptive {h} {c}, exact estimates | adaptive's efficiency (mean) |")
print("|---|---|---|---|---|---|")
for (P, wl), v in sorted(rows.items()):
    print(f"| {P} | {wl} | {cell([x[0] for x in v])} | {cell([x[1] for x in v])} | {cell([x[2] for x in v])} | "
          f"{sum(x[3] for x in v) / len(v):.3f} |")
PY
