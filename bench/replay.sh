#!/usr/bin/env bash
# replay.sh — the real pipeline runtime replaying simulated durations (DESIGN.md section 6, "Replay"):
# for P in PS (default 8 16 32) and each kind in KINDS (default text mm), generate the simulator's
# durations (M = 2P microbatches, latency 0.02 units; the same generator as bench/sim.sh), then run
# rrfp-bench-replay under mpirun with P ranks on this machine (every task sleeps its duration times
# SCALE seconds, default 0.05 s per mean forward; messages are real MPI messages of T x 256 floats)
# for the modes x hints x caps of the simulator table, printing the measured makespan next to the
# simulator's for the same file, mode, hint and cap (lookahead with 20% estimate error in both).
# OpenMPI's yield-when-idle is turned off: with it, every MPI_Test of an idle rank calls sched_yield,
# which on an oversubscribed machine costs milliseconds per call.
#
# Usage: bench/replay.sh [BUILD_DIR] (needs rrfp-mm and rrfp-bench-replay built there)
set -euo pipefail
B=${1:-build}
PS=${PS:-8 16 32}
KINDS=${KINDS:-text mm}
SCALE=${SCALE:-0.05}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
MPI=(mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 0)
for P in $PS; do
  M=$((2 * P))
  for kind in $KINDS; do
    "$B/rrfp-mm" sim --stages "$P" --microbatches "$M" --kind "$kind" --seed 1 --dump "$T/w.json" --json >/dev/null
    "$B/rrfp-mm" sim --stages "$P" --microbatches "$M" --kind "$kind" --seed 1 --split-backward --dump "$T/s.json" --json >/dev/null
    echo "## P=$P kind=$kind"
    whole=(fixed-sync:1f1b:- fixed:1f1b:-)
    split=(fixed-sync:zb-h1:- fixed:zb-h1:-)
    for cap in 1x 1.5x 2x; do
      whole+=(ready:1f1b:$cap lookahead:1f1b:$cap)
      split+=(ready:zb-h1:$cap lookahead:zb-h1:$cap ready:bfw:$cap lookahead:bfw:$cap)
    done
    timeout 900 "${MPI[@]}" -np "$P" "$B/rrfp-bench-replay" --durations "$T/w.json" --scale "$SCALE" \
      --estimate-error 0.2 "${whole[@]}" | grep -v "^replay: ok"
    timeout 900 "${MPI[@]}" -np "$P" "$B/rrfp-bench-replay" --durations "$T/s.json" --scale "$SCALE" \
      --estimate-error 0.2 "${split[@]}" | grep -v "^#\|^mode\|^replay: ok"
  done
done
