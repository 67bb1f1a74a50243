#!/usr/bin/env bash
# sim.sh — the RRFP simulator table: P in {4, 8, 32, 128}, text-like and multimodal variance, modes
# fixed-sync / fixed / ready, hints 1f1b / zb-h1 / bfw, ready's cap at 1x / 1.5x / 2x the 1F1B peak
# (P - r; the peak of all three hints). M = 4P microbatches, latency 0.02 (units of one mean forward).
#
# Every row is run on the same generated durations (same seed) in this invocation; 1f1b runs the whole
# backward (B = 2F, Megatron), zb-h1 and bfw the split one (B = F, W = F: the same total work). Columns:
#   speedup = makespan(fixed-sync 1f1b) / makespan(row), the geometric mean over SEEDS seeds;
#   eff     = lower_bound / makespan (mean), each against its own duration file's lower bound
#             (the split file's bound is the lower one, so split rows are held to the tighter bound).
# Then: ready vs fixed at the same hint (ratio of makespans, > 1.02 = ready loses by more than 2%),
# the cost per dispatcher decision (heap vs scan of every task) and the simulator's speed at P=128, M=512.
#
# lookahead (ready + start notices + duration estimates) runs with estimates off by up to ERR (default
# 0.2: per-task factors in [0.8, 1.2], estimate seed = duration seed), and its targets are checked:
#   lookahead <= 1.005 x fixed at the same hint and cap, every cell and seed (1f1b, zb-h1: the hints
#   fixed can run), and lookahead's speedup >= 0.98 x ready's wherever ready's beats fixed's (bfw:
#   always; it has no fixed).
# adaptive (the recipes' default mode) is held to its own target as well (never worse than the better of the two): adaptive <= 1.005 x the better
# of fixed and ready at the same hint and cap, on every seed, checked twice: on the table's one step, and
# on runs of RUN_STEPS steps (default 10; `rrfp-mm sim --steps`: step k drawn with seed + 1000 k, fresh
# durations and estimates per step, the run's total makespan; adaptive learns its choice across the
# run's steps as the MPI runtime does; RUN_STEPS=0 skips the runs). A training run is thousands of steps,
# and the MPI runtime leaves one step of a run to the plan alone, as these runs do (its first step runs
# lookahead, the second is planned on the first's measurements, the learner decides from the third on), so
# the runs are the runtime's case; the one-step figure is the plan alone (docs/scheduler.md: why it misses about 1%).
#
# Usage: bench/sim.sh [path/to/rrfp-mm] [SEEDS] [PS]   (default build/rrfp-mm, 3 seeds, PS "4 8 32 128")
# (TABLE_ONLY=1: the tables and targets only, without the latency sensitivity and timing tails)
set -euo pipefail
BIN=${1:-build/rrfp-mm}
SEEDS=${2:-3}
PS=${3:-4 8 32 128}
ERR=${ERR:-0.2}
RUN_STEPS=${RUN_STEPS:-10}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

for P in $PS; do
  M=$((4 * P))
  for kind in text mm; do
    for seed in $(seq 1 "$SEEDS"); do
      base="$T/$P-$kind-$seed"
      "$BIN" sim --stages "$P" --microbatches "$M" --kind "$kind" --seed "$seed" --dump "$base-whole.json" --json >/dev/null
      "$BIN" sim --stages "$P" --microbatches "$M" --kind "$kind" --seed "$seed" --split-backward \
        --dump "$base-split.json" --json >/dev/null
      run() {  # run MODE HINT FILE [CAP]
        local capflag=()
        [ -n "${4:-}" ] && capflag=(--cap "$4")
        case "$1" in lookahead|adaptive) capflag+=(--estimate-error "$ERR" --estimate-seed "$seed") ;; esac
        printf '%s\t%s\t%s\t%s\t%s\t%s\t' "$P" "$kind" "$seed" "$1" "$2" "${4:--}"
        "$BIN" sim --durations "$3" --mode "$1" --hint "$2" "${capflag[@]}" --json
      }
      run fixed-sync 1f1b "$base-whole.json"
      run fixed-sync zb-h1 "$base-split.json"
      run fixed 1f1b "$base-whole.json"
      run fixed zb-h1 "$base-split.json"
      for cap in 1x 1.5x 2x; do
        run ready 1f1b "$base-whole.json" "$cap"
        run ready zb-h1 "$base-split.json" "$cap"
        run ready bfw "$base-split.json" "$cap"
        run lookahead 1f1b "$base-whole.json" "$cap"
        run lookahead zb-h1 "$base-split.json" "$cap"
        run lookahead bfw "$base-split.json" "$cap"
        run adaptive 1f1b "$base-whole.json" "$cap"
        run adaptive zb-h1 "$base-split.json" "$cap"
        run adaptive bfw "$base-split.json" "$cap"
      done
    done
  done
done >"$T/rows.tsv"

# runs of RUN_STEPS steps (the check of adaptive; totals over the run)
: >"$T/runs.tsv"
if [ "$RUN_STEPS" -gt 1 ]; then
  for P in $PS; do
    M=$((4 * P))
    for kind in text mm; do
      for seed in $(seq 1 "$SEEDS"); do
        runrun() {  # runrun MODE HINT SPLIT [CAP]
          local flags=(--stages "$P" --microbatches "$M" --kind "$kind" --seed "$seed" --steps "$RUN_STEPS")
          [ "$3" = 1 ] && flags+=(--split-backward)
          [ -n "${4:-}" ] && flags+=(--cap "$4")
          [ "$1" = adaptive ] && flags+=(--estimate-error "$ERR" --estimate-seed "$seed")
          printf '%s\t%s\t%s\t%s\t%s\t%s\t' "$P" "$kind" "$seed" "$1" "$2" "${4:--}"
          "$BIN" sim "${flags[@]}" --mode "$1" --hint "$2" --json
        }
        runrun fixed 1f1b 0
        runrun fixed zb-h1 1
        for cap in 1x 1.5x 2x; do
          runrun ready 1f1b 0 "$cap"
          runrun ready zb-h1 1 "$cap"
          runrun ready bfw 1 "$cap"
          runrun adaptive 1f1b 0 "$cap"
          runrun adaptive zb-h1 1 "$cap"
          runrun adaptive bfw 1 "$cap"
        done
      done
    done
  done >"$T/runs.tsv"
fi

ERR=$ERR RUN_STEPS=$RUN_STEPS python3 - "$T/rows.tsv" "$T/runs.tsv" <<'EOF'
import json, math, os, sys
from collections import defaultdict
def load(path):
    out = defaultdict(list)   # (P, kind, mode, hint, cap) -> [(seed, result)]
    for line in open(path):
        P, kind, seed, mode, hint, cap, js = line.rstrip("\n").split("\t", 6)
        out[(int(P), kind, mode, hint, cap)].append((int(seed), json.loads(js)))
    return out
rows = load(sys.argv[1])
runs = load(sys.argv[2])
def makespan(P, kind, mode, hint, cap):
    return {s: r["makespan"] for s, r in rows[(P, kind, mode, hint, cap)]}
order = [("fixed-sync", "1f1b", "-"), ("fixed-sync", "zb-h1", "-"), ("fixed", "1f1b", "-"), ("fixed", "zb-h1", "-")]
order += [("ready", h, c) for c in ("1x", "1.5x", "2x") for h in ("1f1b", "zb-h1", "bfw")]
order += [("lookahead", h, c) for c in ("1x", "1.5x", "2x") for h in ("1f1b", "zb-h1", "bfw")]
order += [("adaptive", h, c) for c in ("1x", "1.5x", "2x") for h in ("1f1b", "zb-h1", "bfw")]
Ps = sorted({k[0] for k in rows})
for kind in ("text", "mm"):
    print(f"\n### {'text-like (lognormal sigma 0.1)' if kind == 'text' else 'multimodal (ViT variance on stage 0, V = 1.0)'}\n")
    print("| mode | hint | cap | " + " | ".join(f"P={P} speedup | P={P} eff" for P in Ps) + " |")
    print("|---|---|---|" + "---|---|" * len(Ps))
    for mode, hint, cap in order:
        cells = []
        for P in Ps:
            base = makespan(P, kind, "fixed-sync", "1f1b", "-")
            cur = makespan(P, kind, mode, hint, cap)
            sp = math.exp(sum(math.log(base[s] / cur[s]) for s in cur) / len(cur))
            eff = sum(r["efficiency"] for _, r in rows[(P, kind, mode, hint, cap)]) / len(cur)
            cells.append(f"{sp:.3f} | {eff:.3f}")
        print(f"| {mode} | {hint} | {cap} | " + " | ".join(cells) + " |")
print("\n### ready / fixed makespan at the same hint (geometric mean over seeds; > 1.020 = ready loses by more than 2%)\n")
print("| kind | hint | cap | " + " | ".join(f"P={P}" for P in Ps) + " |")
print("|---|---|---|" + "---|" * len(Ps))
worst = (0, None)
for kind in ("text", "mm"):
    for hint in ("1f1b", "zb-h1"):
        for cap in ("1x", "1.5x", "2x"):
            cells = []
            for P in Ps:
                f = makespan(P, kind, "fixed", hint, "-")
                r = makespan(P, kind, "ready", hint, cap)
                ratios = [r[s] / f[s] for s in r]
                g = math.exp(sum(map(math.log, ratios)) / len(ratios))
                if max(ratios) > worst[0]:
                    worst = (max(ratios), (kind, hint, cap, P))
                cells.append(f"{g:.3f}")
            print(f"| {kind} | {hint} | {cap} | " + " | ".join(cells) + " |")
print(f"\nworst single-seed ready/fixed ratio: {worst[0]:.4f} at {worst[1]}")

def gm(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))
for NEW in ("lookahead", "adaptive"):
    print(f"\n### {NEW} targets: {NEW} / fixed makespan (worst seed; target <= 1.005) and {NEW} speedup / "
          "ready speedup (geometric mean; target >= 0.98 where ready beats fixed, bfw always)\n")
    print("| kind | hint | cap | " + " | ".join(f"P={P} /fixed | P={P} /ready sp" for P in Ps) + " |")
    print("|---|---|---|" + "---|---|" * len(Ps))
    fails = []
    for kind in ("text", "mm"):
        for hint in ("1f1b", "zb-h1", "bfw"):
            for cap in ("1x", "1.5x", "2x"):
                cells = []
                for P in Ps:
                    la = makespan(P, kind, NEW, hint, cap)
                    r = makespan(P, kind, "ready", hint, cap)
                    sp = gm([r[s] / la[s] for s in la])  # = speedup(new) / speedup(ready)
                    if hint != "bfw":
                        f = makespan(P, kind, "fixed", hint, "-")
                        wf = max(la[s] / f[s] for s in la)
                        ready_wins = gm([r[s] / f[s] for s in r]) < 1
                        if wf > 1.005:
                            fails.append(f"/fixed {wf:.4f} > 1.005 at {kind} {hint} {cap} P={P}")
                        c1 = f"{wf:.4f}"
                    else:
                        ready_wins = True
                        c1 = "-"
                    if ready_wins and sp < 0.98:
                        fails.append(f"/ready speedup {sp:.4f} < 0.98 at {kind} {hint} {cap} P={P}")
                    cells.append(f"{c1} | {sp:.4f}{'' if ready_wins else ' (n/a)'}")
                print(f"| {kind} | {hint} | {cap} | " + " | ".join(cells) + " |")
    print("\n(n/a: ready does not beat fixed there, so only the 1.005 target applies)")
    print(f"\n{NEW} targets (estimate error {os.environ.get('ERR', '0.2')}): " +
          ("HOLD in every cell" if not fails else f"NOT MET in {len(fails)} cell(s):"))
    for f in fails:
        print("  - " + f)

# adaptive's target: adaptive / min(fixed, ready) at the same hint and cap, per seed (bfw: against ready; it has no fixed)
def worst_adaptive(src, P, kind, hint, cap):
    a = {s: r["makespan"] for s, r in src[(P, kind, "adaptive", hint, cap)]}
    r = {s: x["makespan"] for s, x in src[(P, kind, "ready", hint, cap)]}
    f = {s: x["makespan"] for s, x in src[(P, kind, "fixed", hint, "-")]} if hint != "bfw" else r
    return [(a[s] / min(f[s], r[s]), s) for s in a]
steps = int(os.environ.get("RUN_STEPS", "10"))
srcs = [("one step", rows)] + ([(f"runs of {steps} steps", runs)] if runs else [])
print("\n### adaptive against the better of fixed and ready (worst seed of adaptive / min(fixed, ready), "
      f"target <= 1.005; estimates off by up to {os.environ.get('ERR', '0.2')})\n")
print("| kind | hint | cap | " + " | ".join(f"P={P} {name}" for P in Ps for name, _ in srcs) + " |")
print("|---|---|---|" + "---|" * (len(Ps) * len(srcs)))
over = {name: [] for name, _ in srcs}
count = {name: 0 for name, _ in srcs}
for kind in ("text", "mm"):
    for hint in ("1f1b", "zb-h1", "bfw"):
        for cap in ("1x", "1.5x", "2x"):
            cells = []
            for P in Ps:
                for name, src in srcs:
                    qs = worst_adaptive(src, P, kind, hint, cap)
                    count[name] += len(qs)
                    over[name] += [(q, kind, hint, cap, P, s) for q, s in qs if q > 1.005]
                    w = max(q for q, _ in qs)
                    cells.append(f"{w:.4f}{' **' if w > 1.005 else ''}")
            print(f"| {kind} | {hint} | {cap} | " + " | ".join(cells) + " |")
for name, _ in srcs:
    o = sorted(over[name], reverse=True)
    print(f"\nadaptive, {name}: " + ("HOLDS on every seed of every cell" if not o else
          f"above 1.005 in {len(o)} of {count[name]} cases (worst {o[0][0]:.4f}: {o[0][1]} {o[0][2]} {o[0][3]} P={o[0][4]} seed {o[0][5]})"))
EOF

[ -n "${TABLE_ONLY:-}" ] && exit 0
# Sensitivity to the p2p latency (not a tuning knob of the table above): multimodal, P=32, M=128.
echo
echo "### latency sensitivity: ready bfw 1.5x vs fixed-sync 1f1b, multimodal, P=32, M=128 ($SEEDS seeds)"
echo
echo "| latency | speedup | eff (ready bfw 1.5x) | eff (fixed-sync 1f1b) |"
echo "|---|---|---|---|"
for lat in 0.02 0.1 0.5; do
  for seed in $(seq 1 "$SEEDS"); do
    "$BIN" sim --stages 32 --microbatches 128 --kind mm --seed "$seed" --latency "$lat" --dump "$T/lw.json" --json >/dev/null
    "$BIN" sim --stages 32 --microbatches 128 --kind mm --seed "$seed" --latency "$lat" --split-backward \
      --dump "$T/ls.json" --json >/dev/null
    printf '%s\t' "$lat"
    "$BIN" sim --durations "$T/lw.json" --mode fixed-sync --hint 1f1b --json | tr -d '\n'
    printf '\t'
    "$BIN" sim --durations "$T/ls.json" --mode ready --hint bfw --cap 1.5x --json
  done
done | python3 -c '
import json, math, sys
from collections import defaultdict
rows = defaultdict(list)
for line in sys.stdin:
    lat, a, b = line.rstrip("\n").split("\t")
    rows[lat].append((json.loads(a), json.loads(b)))
for lat, rs in rows.items():
    sp = math.exp(sum(math.log(a["makespan"] / b["makespan"]) for a, b in rs) / len(rs))
    eb = sum(b["efficiency"] for a, b in rs) / len(rs)
    ea = sum(a["efficiency"] for a, b in rs) / len(rs)
    print(f"| {lat} | {sp:.3f} | {eb:.3f} | {ea:.3f} |")
'

echo
"$BIN" sim --bench-dispatch --stages 128 --microbatches 512 --hint bfw --split-backward --cap 1.5x
echo
"$BIN" sim --stages 128 --microbatches 512 --kind mm --mode fixed-sync --hint 1f1b | grep -E "^sim:|simulated in"
"$BIN" sim --stages 128 --microbatches 512 --kind mm --split-backward --mode ready --hint bfw --cap 1.5x \
  | grep -E "^sim:|simulated in"
