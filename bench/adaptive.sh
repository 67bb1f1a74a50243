#!/usr/bin/env bash
# adaptive.sh — the target of the default dispatch mode (`adaptive`), never worse than the better of the two: its makespan within 0.5% of the
# better of `fixed` and `ready` at the same hint and cap, in every case and on every seed, with duration
# estimates off by up to 20% (rrfp-bench-adaptive, bench/bench_adaptive.c: the simulator's cost model is
# the true duration times a per-task factor in [1 - E, 1 + E]; the plan sees only those estimates).
#   1. bench/sim.sh's table: its generator (text-like 0.1, multimodal 1.0), P = 4, 8, 32, 128, M = 4P,
#      hints 1f1b / zb-h1, caps 1x / 1.5x / 2x, 5 seeds, E = 0.2;
#   2. the varied set: sim.sh's generator at two more variances and our own second generator (stage
#      imbalance, stragglers, text-only microbatches, M = 2P and 4P), P = 8 and 32, 6 seeds, E = 0.2, 0.1, 0.
# Each set runs twice: one step per case (the plan alone: nothing to learn from), and STEPS steps per case
# (default 10: a run's first steps, fresh durations and estimates per step, adaptive's learner carried
# across them; the ratio is of the run totals).
# Each prints a table per (generator, P, hint, cap): the worst ratio over seeds (** above 1.005), the mean,
# and the range of fixed / ready; then the count of cases above 1.005 and the worst.
#
# Usage: bench/adaptive.sh [path/to/rrfp-bench-adaptive] [MODE]   (default build/rrfp-bench-adaptive, adaptive)
#        (STEPS=K for the run length; ONLY=1 or ONLY=K: only the one-step or only the K-step runs;
#         SEED0=S: seeds S + 1 .. S + 5 (table) and S + 1 .. S + 6 (varied) instead of 1 .. 5 and 1 .. 6, e.g.
#         SEED0=20 for seeds no rule was tuned on; ALL=FILE: every case's TSV line (--all) appended to FILE,
#         for bench/adaptive_pred.py; EXTRA="--keep-order": arguments added to every run, e.g. adaptive without
#         its microbatch-order choice (docs/scheduler.md "The microbatch order"))
set -euo pipefail
BIN=${1:-build/rrfp-bench-adaptive}
MODE=${2:-adaptive}
STEPS=${STEPS:-10}
SEED0=${SEED0:-0}
run() {  # the checker, with --all into $ALL when set (its error messages then land there too)
  # shellcheck disable=SC2086  # EXTRA: words on purpose
  if [ -n "${ALL:-}" ]; then
    "$BIN" "$@" ${EXTRA:-} --all 2>>"$ALL" || { echo "rrfp-bench-adaptive failed; its messages are at the end of $ALL" >&2; exit 1; }
  else
    "$BIN" "$@" ${EXTRA:-}
  fi
}
for k in 1 "$STEPS"; do
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$k" ] && continue
  echo "# $k step(s) per case"
  echo "## 1. bench/sim.sh's table (estimate error 0.2)"
  run --simsh --ps "4 8 32 128" --seeds 5 --seed0 "$SEED0" --error 0.2 --mode "$MODE" --steps "$k"
  for e in 0.2 0.1 0; do
    echo
    echo "## 2. the varied set, estimate error $e"
    run --ps "8 32" --seeds 6 --seed0 "$SEED0" --error "$e" --mode "$MODE" --steps "$k"
  done
  echo
done
