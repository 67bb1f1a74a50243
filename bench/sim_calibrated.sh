#!/usr/bin/env bash
# sim_calibrated.sh — modes on the calibrated workloads (`rrfp-mm sim --calibrated`, docs/scheduler.md):
# the 7B recipe (recipes/llava-1.5-7b.ini) at P in PS (default 8 16 32), M = data.microbatches (32),
# text-only and multimodal samples packed by the recipe's packer (balanced, window 256) at 4096 tokens,
# durations from the partitioner's FLOP model at 400 TFLOP/s per rank, jitter 0.03, stragglers
# 1.5x for 8 microbatches with probability 0.01 per (rank, microbatch). For each (P, workload, seed):
# every mode x hint x cap of bench/sim.sh's table on the same step, and the V hints zbv / dualpipev (two
# chunks per rank, each rank's durations split evenly over them: --chunks 2); adaptive and lookahead with
# estimates off by up to ERR (default 0.2). Columns: speedup over fixed-sync 1f1b (geometric mean over
# seeds), efficiency (lower bound / makespan) and bubble (means). Then the packing policies on the same
# recipe: tokens per second of the step (policies pack different numbers of samples into the M
# microbatches, so makespans alone do not compare) for fixed-sync 1f1b, adaptive 1f1b 1x and ready bfw 1.5x.
# Last, adaptive's target (never worse than the better of fixed and ready) on these steps: adaptive / min(fixed, ready) at the same hint and cap, per seed (one
# step each: the plan alone, nothing learned), the worst seed per cell and the count above 1.005; and the
# same check on runs of RUN_STEPS steps (default 10; RUN_STEPS=0 skips them; `rrfp-mm sim --calibrated
# --steps`: step k packed and drawn with seed + 1000 k, its estimates with seed + 1000 k, run totals;
# adaptive learns its choice across the run's steps as the MPI runtime does), balanced packing.
#
# Workloads (WORKLOADS, default "text mm anyres"): text-only and multimodal on RECIPE (LLaVA-1.5-7B), and anyres:
# LLaVA-NeXT's any-resolution images (docs/anyres.md: photographs and document pages tiled on LLaVA-1.6's
# pinpoints, 1,176 to 2,928 positions and 3 to 5 tower passes an image) on RECIPE_ANYRES (recipes/llava-next-7b.ini).
#
# Usage: bench/sim_calibrated.sh [path/to/rrfp-mm] [SEEDS] [PS]   (default build/rrfp-mm, 3 seeds)
set -euo pipefail
BIN=${1:-build/rrfp-mm}
SEEDS=${2:-3}
PS=${3:-8 16 32}
ERR=${ERR:-0.2}
RUN_STEPS=${RUN_STEPS:-10}
RECIPE=${RECIPE:-recipes/llava-1.5-7b.ini}
RECIPE_ANYRES=${RECIPE_ANYRES:-recipes/llava-next-7b.ini}
PART=()  # PARTITION=balance|path: the split's objective (rrfp-mm sim --partition; default the recipe's parallel.partition)
[ -n "${PARTITION:-}" ] && PART=(--partition "$PARTITION")
WORKLOADS=${WORKLOADS:-text mm anyres}
recipe_of() { if [ "$1" = anyres ]; then echo "$RECIPE_ANYRES"; else echo "$RECIPE"; fi; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for P in $PS; do
  for wl in $WORKLOADS; do
    rec=$(recipe_of "$wl")
    for seed in $(seq 1 "$SEEDS"); do
      for pol in balanced ffd fifo; do
        base="$T/$P-$wl-$seed-$pol"
        "$BIN" sim --calibrated "$rec" "${PART[@]}" --stages "$P" --workload "$wl" --policy "$pol" --seed "$seed" \
          --dump "$base-whole.json" --json >/dev/null 2>"$base-whole.info"
        "$BIN" sim --calibrated "$rec" "${PART[@]}" --stages "$P" --workload "$wl" --policy "$pol" --seed "$seed" \
          --split-backward --dump "$base-split.json" --json >/dev/null 2>"$base-split.info"
        tokens=$(sed -n 's/.* samples, \([0-9]*\) tokens.*/\1/p' "$base-whole.info")
        run() {  # run MODE HINT FILE [CAP]
          local capflag=()
          [ -n "${4:-}" ] && capflag=(--cap "$4")
          case "$1" in lookahead|adaptive) capflag+=(--estimate-error "$ERR" --estimate-seed "$seed") ;; esac
          case "$2" in zbv|dualpipev) capflag+=(--chunks 2) ;; esac  # two chunks per rank in a V
          # dualpipev needs M >= 2P (torch's ScheduleDualPipeV): left out (a '-' cell) where M < 2P
          [ "$2" = dualpipev ] && [ "$(sed -n 's/.*"microbatches":\([0-9]*\).*/\1/p' "$3")" -lt $((2 * P)) ] && return 0
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t' "$P" "$wl" "$seed" "$pol" "$tokens" "$1" "$2" "${4:--}"
          "$BIN" sim --durations "$3" --mode "$1" --hint "$2" "${capflag[@]}" --json
        }
        run fixed-sync 1f1b "$base-whole.json"
        run adaptive 1f1b "$base-whole.json" 1x
        run ready bfw "$base-split.json" 1.5x
        [ "$pol" = balanced ] || continue
        run fixed-sync zb-h1 "$base-split.json"
        run fixed 1f1b "$base-whole.json"
        run fixed zb-h1 "$base-split.json"
        for h in zbv dualpipev; do
          run fixed-sync $h "$base-split.json"
          run fixed $h "$base-split.json"
        done
        for cap in 1x 1.5x 2x; do
          for mode in ready lookahead adaptive; do
            run $mode 1f1b "$base-whole.json" "$cap"
            run $mode zb-h1 "$base-split.json" "$cap"
            [ $mode = ready ] && [ $cap = 1.5x ] || run $mode bfw "$base-split.json" "$cap"
            run $mode zbv "$base-split.json" "$cap"
            run $mode dualpipev "$base-split.json" "$cap"
          done
        done
      done
    done
  done
done >"$T/rows.tsv"

: >"$T/runs.tsv"
if [ "$RUN_STEPS" -gt 1 ]; then
  for P in $PS; do
    for wl in $WORKLOADS; do
      for seed in $(seq 1 "$SEEDS"); do
        runrun() {  # runrun MODE HINT [CAP]
          local flags=(--calibrated "$(recipe_of "$wl")" --stages "$P" --workload "$wl" --policy balanced --seed "$seed"
                       --steps "$RUN_STEPS")
          [ "$2" != 1f1b ] && flags+=(--split-backward)
          [ -n "${3:-}" ] && flags+=(--cap "$3")
          [ "$1" = adaptive ] && flags+=(--estimate-error "$ERR" --estimate-seed "$seed")
          case "$2" in zbv|dualpipev) flags+=(--chunks 2) ;; esac
          [ "$2" = dualpipev ] && [ "$M_STEP" -lt $((2 * P)) ] && return 0
          printf '%s\t%s\t%s\tbalanced\t0\t%s\t%s\t%s\t' "$P" "$wl" "$seed" "$1" "$2" "${3:--}"
          "$BIN" sim "${flags[@]}" --mode "$1" --hint "$2" --json 2>/dev/null
        }
        M_STEP=$(sed -n 's/.*"microbatches":\([0-9]*\).*/\1/p' "$T/$P-$wl-$seed-balanced-split.json")
        for h in 1f1b zb-h1 zbv dualpipev; do
          runrun fixed $h
          for cap in 1x 1.5x 2x; do
            runrun ready $h "$cap"
            runrun adaptive $h "$cap"
          done
        done
      done
    done
  done >"$T/runs.tsv"
fi

RUN_STEPS=$RUN_STEPS python3 - "$T/rows.tsv" "$T/runs.tsv" <<'PY'
import json, math, os, sys
from collections import defaultdict
def load(path):
    out = defaultdict(dict)  # (P, wl, pol, mode, hint, cap) -> {seed: (result, tokens)}
    for line in open(path):
        P, wl, seed, pol, tok, mode, hint, cap, js = line.rstrip("\n").split("\t", 8)
        out[(int(P), wl, pol, mode, hint, cap)][int(seed)] = (json.loads(js), float(tok))
    return out
rows = load(sys.argv[1])
runs = load(sys.argv[2])
Ps = sorted({k[0] for k in rows})
WLS = [w for w in ("text", "mm", "anyres") if any(k[1] == w for k in rows)]
TITLE = {"text": "text-only workload (7B recipe", "mm": "multimodal workload (7B recipe",
         "anyres": "any-resolution workload (LLaVA-NeXT-7B recipe, photographs and documents tiled"}
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
order = [("fixed-sync", "1f1b", "-"), ("fixed-sync", "zb-h1", "-"), ("fixed", "1f1b", "-"), ("fixed", "zb-h1", "-")]
order += [(m, h, "-") for h in ("zbv", "dualpipev") for m in ("fixed-sync", "fixed")]
order += [(m, h, c) for c in ("1x", "1.5x", "2x") for m in ("ready", "lookahead", "adaptive")
          for h in ("1f1b", "zb-h1", "bfw", "zbv", "dualpipev")]
for wl in WLS:
    print(f"\n### calibrated {TITLE[wl]}, balanced packing)\n")
    print("| mode | hint | cap | " + " | ".join(f"P={P} speedup | eff | bubble" for P in Ps) + " |")
    print("|---|---|---|" + "---|---|---|" * len(Ps))
    for mode, hint, cap in order:
        cells = []
        for P in Ps:
            base = rows[(P, wl, "balanced", "fixed-sync", "1f1b", "-")]
            cur = rows.get((P, wl, "balanced", mode, hint, cap))
            if not cur: cells.append("- | - | -"); continue
            sp = gm([base[s][0]["makespan"] / cur[s][0]["makespan"] for s in cur])
            eff = sum(r["efficiency"] for r, _ in cur.values()) / len(cur)
            bub = sum(r["bubble"] for r, _ in cur.values()) / len(cur)
            cells.append(f"{sp:.3f} | {eff:.3f} | {bub:.3f}")
        print(f"| {mode} | {hint} | {cap} | " + " | ".join(cells) + " |")
print("\n### packing policy: tokens per second of the step relative to balanced (geometric mean over seeds), and fill\n")
print("| workload | mode | hint | cap | " + " | ".join(f"P={P} fifo | P={P} ffd" for P in Ps) + " |")
print("|---|---|---|---|" + "---|---|" * len(Ps))
for wl in WLS:
    for mode, hint, cap in (("fixed-sync", "1f1b", "-"), ("adaptive", "1f1b", "1x"), ("ready", "bfw", "1.5x")):
        cells = []
        for P in Ps:
            b = rows[(P, wl, "balanced", mode, hint, cap)]
            for pol in ("fifo", "ffd"):
                c = rows[(P, wl, pol, mode, hint, cap)]
                cells.append(f"{gm([(c[s][1] / c[s][0]['makespan']) / (b[s][1] / b[s][0]['makespan']) for s in c]):.3f}")
        print(f"| {wl} | {mode} | {hint} | {cap} | " + " | ".join(cells) + " |")
def check_adaptive(src, what):
    print(f"\n### adaptive's check: adaptive / min(fixed, ready) at the same hint and cap, {what} (worst seed; "
          "** above 1.005), balanced packing\n")
    print("| workload | hint | cap | " + " | ".join(f"P={P}" for P in Ps) + " |")
    print("|---|---|---|" + "---|" * len(Ps))
    n_cases = n_over = 0
    worst = (0.0, "")
    for wl in WLS:
        for hint in ("1f1b", "zb-h1", "zbv", "dualpipev"):
            for cap in ("1x", "1.5x", "2x"):
                cells = []
                for P in Ps:
                    f = src.get((P, wl, "balanced", "fixed", hint, "-"))
                    r = src.get((P, wl, "balanced", "ready", hint, cap))
                    a = src.get((P, wl, "balanced", "adaptive", hint, cap))
                    if not (f and r and a): cells.append("-"); continue
                    ratios = {s: a[s][0]["makespan"] / min(f[s][0]["makespan"], r[s][0]["makespan"]) for s in a}
                    n_cases += len(ratios)
                    n_over += sum(v > 1.005 for v in ratios.values())
                    s_w = max(ratios, key=ratios.get)
                    if ratios[s_w] > worst[0]: worst = (ratios[s_w], f"{wl} {hint} {cap} P={P} seed {s_w}")
                    cells.append(f"{ratios[s_w]:.4f}{' **' if ratios[s_w] > 1.005 else ''}")
                print(f"| {wl} | {hint} | {cap} | " + " | ".join(cells) + " |")
    print(f"\n{n_cases} cases, {n_over} above 1.005; worst {worst[0]:.4f} ({worst[1]})")
check_adaptive(rows, "one step per seed (the plan alone, nothing learned)")
if runs:
    check_adaptive(runs, f"runs of {os.environ.get('RUN_STEPS', '10')} steps per seed (run totals; adaptive learns across the steps)")
PY
