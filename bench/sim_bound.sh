#!/usr/bin/env bash
# sim_bound.sh — how far a cell can beat fixed-sync 1f1b on the calibrated steps (docs/anyres.md "Readiness-first at
# 32 stages"): for P in PS, each workload in WORKLOADS (mm on RECIPE, anyres on RECIPE_ANYRES, as bench/sim_calibrated.sh)
# and seeds 1 .. SEEDS, the step's lower bound (docs/scheduler.md "The simulator's semantics": no schedule with a whole
# backward is shorter) and adaptive HINT CAP with the estimates off by up to ERR and exact (--estimate-error 0), each as
# a speedup over fixed-sync 1f1b on the same step (whole backward; geometric mean over seeds, per seed in brackets).
# The ceiling column is fixed-sync 1f1b / lower bound: no 1f1b-family cell's speedup can exceed it.
# The last two columns use a tighter bound, computed here from the step's durations: the simulator's, and for each stage
# s the arrival of its first backward (some microbatch's forward through every stage and backward through the stages
# after s, with the latencies) + its backwards (and weight passes) + the shortest backward back through the stages before
# it; every schedule waits for that too (docs/anyres.md "Readiness-first at 32 stages").
#
# With PLANS=1 it then lists adaptive's plan per step, with the estimates off by ERR and exact: the mode it ran, its
# in-flight cap and whether it reordered the microbatches (`rrfp-mm sim --mode adaptive`'s `adaptive:` lines), and the
# speedup over fixed-sync 1f1b (docs/anyres.md "At 32 stages with estimates 20% off").
# With STATS=1 it then gives, per P and for the estimates off by ERR and exact, the spread over seeds of the 1F1B-order
# comparison: the mean log speedup of adaptive over fixed-sync 1f1b on anyres minus that on mm (the difference of the two
# geometric means, in log), its standard error sqrt(var_a / n_a + var_m / n_m) (sample variances of the per-seed log
# speedups; the two workloads' steps are independent draws) and the difference in SEs; "within 2 SE" where |d| <= 2 SE.
#
# Usage: bench/sim_bound.sh [path/to/rrfp-mm] [SEEDS] [PS]   (default build/rrfp-mm, 3 seeds, "8 16 32")
#   env WORKLOADS (default "mm anyres"), HINT (1f1b), CAP (2x), ERR (0.2), PARTITION (balance|path: the split), PLANS,
#   STATS (needs both workloads)
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
      printf '%s\t%s\t%s\t%s\t' "$P" "$wl" "$seed" "$f"
      "$BIN" sim --durations "$f" --mode fixed-sync --hint 1f1b --json | tr '\n' '\t'
      "$BIN" sim --durations "$f" --mode adaptive --hint "$HINT" --cap "$CAP" --estimate-error "$ERR" \
        --estimate-seed "$seed" --json 2>/dev/null | tr '\n' '\t'
      "$BIN" sim --durations "$f" --mode adaptive --hint "$HINT" --cap "$CAP" --estimate-error 0 --json 2>/dev/null
      if [ -n "${PLANS:-}" ]; then  # the plan's choice, from the text output's adaptive: lines
        for e in "$ERR" 0; do
          "$BIN" sim --durations "$f" --mode adaptive --hint "$HINT" --cap "$CAP" --estimate-error "$e" \
            --estimate-seed "$seed" 2>&1 | sed -n 's/^adaptive: //p' | tr '\n' '|' >"$T/plan-$P-$wl-$seed-$e.txt"
        done
      fi
    done
  done
done >"$T/rows.tsv"
HINT=$HINT CAP=$CAP ERR=$ERR PLANS=${PLANS:-} STATS=${STATS:-} python3 - "$T/rows.tsv" <<'PY'
import json, math, os, sys
from collections import defaultdict
rows = defaultdict(list)
def arrival_bound(path):
    """max over stages of the simulator's bound terms and first backward's arrival + sum B (+ W) (+ the drain)"""
    d = json.load(open(path))
    P, M, L, F, B = d["stages"], d["microbatches"], d["latency"], d["F"], d["B"]
    W = d.get("W") or [[0.0] * M for _ in range(P)]
    best = 0.0
    for s in range(P):
        t = min(sum(B[q][m] for q in range(s)) for m in range(M)) + s * L
        arr = min(sum(F[q][m] for q in range(P)) + sum(B[q][m] for q in range(s + 1, P)) for m in range(M)) + (2 * P - 2 - s) * L
        best = max(best, arr + sum(B[s]) + sum(W[s]), arr + sum(B[s]) + t)
    return best
for line in open(sys.argv[1]):
    P, wl, seed, f, fs, ad, ex = line.rstrip("\n").split("\t")
    fs, ad, ex = json.loads(fs), json.loads(ad), json.loads(ex)
    tight = max(fs["lower_bound"], arrival_bound(f))
    rows[(int(P), wl)].append((fs["makespan"] / fs["lower_bound"], fs["makespan"] / ad["makespan"],
                               fs["makespan"] / ex["makespan"], ad["efficiency"], fs["makespan"] / tight,
                               tight / ad["makespan"]))
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
cell = lambda xs: f"{gm(xs):.3f} ({', '.join(f'{x:.3f}' for x in xs)})"
h, c, e = os.environ["HINT"], os.environ["CAP"], os.environ["ERR"]
print(f"| P | workload | ceiling: fixed-sync 1f1b / lower bound | adaptive {h} {c}, estimates off by {e} | "
      f"adaptive {h} {c}, exact estimates | adaptive's efficiency (mean) | ceiling against the bound with the first "
      f"backward's arrival | adaptive's efficiency against it (mean) |")
print("|---|---|---|---|---|---|---|---|")
for (P, wl), v in sorted(rows.items()):
    print(f"| {P} | {wl} | {cell([x[0] for x in v])} | {cell([x[1] for x in v])} | {cell([x[2] for x in v])} | "
          f"{sum(x[3] for x in v) / len(v):.3f} | {cell([x[4] for x in v])} | {sum(x[5] for x in v) / len(v):.3f} |")
if os.environ["STATS"]:
    def mv(xs):
        ls = [math.log(x) for x in xs]
        mu = sum(ls) / len(ls)
        return mu, (sum((l - mu) ** 2 for l in ls) / (len(ls) - 1) if len(ls) > 1 else float("nan")), len(ls)
    print(f"\n| P | estimates | anyres (geometric mean, seeds) | mm | difference of the mean log speedups, anyres - mm | "
          f"its standard error | difference / SE | within 2 SE |")
    print("|---|---|---|---|---|---|---|---|")
    for P in sorted({k[0] for k in rows}):
        if (P, "anyres") not in rows or (P, "mm") not in rows:
            continue
        for i, name in ((1, f"off by {e}"), (2, "exact")):
            ma, va, na = mv([x[i] for x in rows[(P, "anyres")]])
            mm, vm, nm = mv([x[i] for x in rows[(P, "mm")]])
            d, se = ma - mm, math.sqrt(va / na + vm / nm)
            within = "-" if math.isnan(se) else ("yes" if abs(d) <= 2 * se else "no")
            print(f"| {P} | {name} | {math.exp(ma):.4f} ({na}) | {math.exp(mm):.4f} ({nm}) | {d:+.4f} | {se:.4f} | "
                  f"{d / se if se > 0 else float('nan'):+.2f} | {within} |")
if os.environ["PLANS"]:
    import re
    def plan(P, wl, seed, err):
        t = open(os.path.join(os.path.dirname(sys.argv[1]), f"plan-{P}-{wl}-{seed}-{err}.txt")).read()
        mode = re.search(r"ran (\w+)", t)
        cap = re.search(r"in-flight cap ([0-9.]+x)", t)
        return f"{mode.group(1) if mode else '?'} {cap.group(1) if cap else c}{', ends order' if 'reordered' in t else ''}"
    print(f"\n| P | workload | seed | estimates off by {e}: plan, speedup | exact: plan, speedup |")
    print("|---|---|---|---|---|")
    for line in open(sys.argv[1]):
        P, wl, seed, f, fs, ad, ex = line.rstrip("\n").split("\t")
        fs, ad, ex = json.loads(fs), json.loads(ad), json.loads(ex)
        print(f"| {P} | {wl} | {seed} | {plan(P, wl, seed, e)}, {fs['makespan'] / ad['makespan']:.4f} | "
              f"{plan(P, wl, seed, 0)}, {fs['makespan'] / ex['makespan']:.4f} |")
PY
