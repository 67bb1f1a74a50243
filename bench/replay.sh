#!/usr/bin/env bash
# replay.sh — the real pipeline runtime replaying simulated durations (docs/scheduler.md "The simulator's semantics", Replay):
# for P in PS (default 8 16 32) and each kind in KINDS (default text mm), generate the simulator's
# durations (M = 2P microbatches, latency 0.02 units; the same generator as bench/sim.sh), then run
# rrfp-bench-replay under mpirun with P ranks on this machine (every task sleeps its duration times
# SCALE seconds, default 0.05 s per mean forward; messages are real MPI messages of T x 256 floats)
# for the modes x hints x caps of the simulator table, printing the measured makespan next to the
# simulator's for the same file, mode, hint and cap (lookahead and adaptive with 20% estimate error in
# both: the same seeded estimates, so adaptive's plan makes the same choice in both). Each block starts
# with the machine's load (uptime); at the end a summary per (P, kind): configurations within 5% of the
# simulator, the median ratio and busy/work, and how often a pair of configurations is ranked in the same
# order by the measurement as by the simulator (pairs whose simulated makespans differ by > 2%).
# OpenMPI's yield-when-idle is turned off: with it, every MPI_Test of an idle rank calls sched_yield,
# which on an oversubscribed machine costs milliseconds per call.
# The kinds calibrated-mm and calibrated-anyres replay the calibrated workloads instead (bench/sim_calibrated.sh:
# `rrfp-mm sim --calibrated RECIPE --workload mm|anyres`, seed 1, M = the recipe's data.microbatches, durations in
# seconds scaled so that the mean forward takes SCALE): LLaVA-1.5-7B's multimodal step (RECIPE, default
# recipes/llava-1.5-7b.ini) and LLaVA-NeXT-7B's any-resolution one (RECIPE_ANYRES, recipes/llava-next-7b.ini).
# A second summary gives each configuration's speedup over fixed-sync 1f1b, measured and simulated.
#
# Usage: bench/replay.sh [BUILD_DIR] (needs rrfp-mm and rrfp-bench-replay built there)
#   env PS (default "8 16 32"), KINDS (default "text mm"; also calibrated-mm, calibrated-anyres),
#   SCALE (s per mean forward, default 0.05),
#   CAPS (default "1x 1.5x 2x"), MODES (the ready-family modes, default "ready lookahead adaptive"),
#   SAVE (a file to keep the rows in, for bench/replay_explain.py), PARTITION (balance|path: the calibrated kinds'
#   split, rrfp-mm sim --partition; default the recipe's parallel.partition)
set -euo pipefail
B=${1:-build}
PS=${PS:-8 16 32}
KINDS=${KINDS:-text mm}
SCALE=${SCALE:-0.05}
CAPS=${CAPS:-1x 1.5x 2x}
MODES=${MODES:-ready lookahead adaptive}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
RECIPE=${RECIPE:-recipes/llava-1.5-7b.ini}
RECIPE_ANYRES=${RECIPE_ANYRES:-recipes/llava-next-7b.ini}
PART=()
[ -n "${PARTITION:-}" ] && PART=(--partition "$PARTITION")
MPI=(mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 0)
for P in $PS; do
  M=$((2 * P))
  for kind in $KINDS; do
    sc=$SCALE
    case "$kind" in
      calibrated-mm|calibrated-anyres)
        wl=${kind#calibrated-}
        rec=$RECIPE
        [ "$wl" = anyres ] && rec=$RECIPE_ANYRES
        "$B/rrfp-mm" sim --calibrated "$rec" "${PART[@]}" --stages "$P" --workload "$wl" --seed 1 --dump "$T/w.json" --json >/dev/null 2>"$T/w.info"
        "$B/rrfp-mm" sim --calibrated "$rec" "${PART[@]}" --stages "$P" --workload "$wl" --seed 1 --split-backward --dump "$T/s.json" \
          --json >/dev/null 2>/dev/null
        # seconds per second of the file: the mean forward takes SCALE
        sc=$(python3 -c 'import json, sys; F = [x for r in json.load(open(sys.argv[1]))["F"] for x in r]; print("%.6g" % (float(sys.argv[2]) * len(F) / sum(F)))' "$T/w.json" "$SCALE")
        sed 's/^/# /' "$T/w.info" | tee -a "$T/all.txt" ;;
      *)
        "$B/rrfp-mm" sim --stages "$P" --microbatches "$M" --kind "$kind" --seed 1 --dump "$T/w.json" --json >/dev/null
        "$B/rrfp-mm" sim --stages "$P" --microbatches "$M" --kind "$kind" --seed 1 --split-backward --dump "$T/s.json" --json >/dev/null ;;
    esac
    echo "## P=$P kind=$kind load: $(uptime | sed 's/.*load average: //')" | tee -a "$T/all.txt"
    whole=(fixed-sync:1f1b:- fixed:1f1b:-)
    split=(fixed-sync:zb-h1:- fixed:zb-h1:-)
    for cap in $CAPS; do
      for mode in $MODES; do
        whole+=("$mode:1f1b:$cap")
        split+=("$mode:zb-h1:$cap" "$mode:bfw:$cap")
      done
    done
    timeout 1800 "${MPI[@]}" -np "$P" "$B/rrfp-bench-replay" --durations "$T/w.json" --scale "$sc" \
      --estimate-error 0.2 "${whole[@]}" | grep -v "^replay: ok" | tee -a "$T/all.txt"
    timeout 1800 "${MPI[@]}" -np "$P" "$B/rrfp-bench-replay" --durations "$T/s.json" --scale "$sc" \
      --estimate-error 0.2 "${split[@]}" | grep -v "^#\|^mode\|^replay: ok" | tee -a "$T/all.txt"
    echo "## end P=$P kind=$kind load: $(uptime | sed 's/.*load average: //')" | tee -a "$T/all.txt"
  done
done
[ -n "${SAVE:-}" ] && cp "$T/all.txt" "$SAVE"
python3 - "$T/all.txt" <<'PY'
import statistics, sys
blocks, order, cur = {}, [], None
for line in open(sys.argv[1]):
    f = line.split()
    if line.startswith("## P="):
        if line.startswith("## end"):
            continue
        cur = (int(f[1][2:]), f[2][5:])
        order.append(cur)
        blocks[cur] = []
    elif cur and len(f) >= 8 and f[0] in ("fixed-sync", "fixed", "ready", "lookahead", "adaptive"):
        blocks[cur].append((f[0], f[1], f[2], float(f[3]), float(f[4]), float(f[5]), float(f[7])))
print("\n### summary (per P and kind)\n")
print("| P | kind | configurations | within 5% | median ratio | worst ratio | median busy/work | same order (pairs > 2% apart in the simulator) |")
print("|---|---|---|---|---|---|---|---|")
for key in order:
    rows = blocks[key]
    if not rows:
        continue
    ratios = [r[5] for r in rows]
    agree = pairs = 0
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i], rows[j]
            if abs(a[4] / b[4] - 1) <= 0.02:
                continue
            pairs += 1
            agree += (a[4] < b[4]) == (a[3] < b[3])
    print(f"| {key[0]} | {key[1]} | {len(rows)} | {sum(abs(x - 1) <= 0.05 for x in ratios)} | "
          f"{statistics.median(ratios):.3f} | {max(ratios):.3f} | {statistics.median(r[6] for r in rows):.3f} | "
          f"{agree}/{pairs} |")
# readiness-first against fixed 1F1B: each configuration's speedup over fixed-sync 1f1b of the same block,
# measured (the replay's makespans) and simulated (the simulator's on the same file), kinds side by side
cols = [k for k in order if blocks[k]]
cfgs = []
for k in cols:
    for r in blocks[k]:
        if r[:3] not in cfgs:
            cfgs.append(r[:3])
print("\n### speedup over fixed-sync 1f1b (measured / simulated)\n")
print("| mode | hint | cap | " + " | ".join("P=%d %s" % k for k in cols) + " |")
print("|---|---|---|" + "---|" * len(cols))
for c in cfgs:
    cells = []
    for k in cols:
        base = [r for r in blocks[k] if r[:3] == ("fixed-sync", "1f1b", "-")]
        row = [r for r in blocks[k] if r[:3] == c]
        cells.append("%.3f / %.3f" % (base[0][3] / row[0][3], base[0][4] / row[0][4]) if base and row else "-")
    print("| %s | %s | %s | " % c + " | ".join(cells) + " |")
PY
