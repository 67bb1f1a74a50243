#!/usr/bin/env bash
# plan_cap.sh BIN SOURCE_DIR — adaptive's in-flight cap (pp_plan_order_cap, docs/scheduler.md "The in-flight cap"): on
# calibrated steps at as many stages as LM blocks (LLaVA-NeXT-7B anyres and LLaVA-1.5-7B mm at 32 stages) adaptive with
# exact estimates plans ready under the configured cap and the tighter multiples of the hint's peak, so at 2x it is never
# slower than adaptive at 1.5x or 1.25x on the same step (their candidates are a subset of its), and on the anyres step
# it runs a tighter cap and says so. A count cap (no multiples) is planned as given.
set -u
BIN=$1 SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ms() { sed -n 's/.*"makespan":\([0-9.eE+-]*\).*/\1/p' "$1"; }
for c in "llava-next-7b.ini anyres 1" "llava-next-7b.ini anyres 2" "llava-1.5-7b.ini mm 1"; do
    set -- $c
    f="$T/$2-$3.json"
    "$BIN" sim --calibrated "$SRC/recipes/$1" --stages 32 --workload "$2" --partition path --seed "$3" --dump "$f" \
        --json >/dev/null 2>"$T/e" || fail "sim $c: $(cat "$T/e")"
    for cap in 2x 1.5x 1.25x; do
        "$BIN" sim --durations "$f" --mode adaptive --hint 1f1b --cap "$cap" --json >"$T/$cap.json" 2>/dev/null || fail "$c $cap"
    done
    python3 - "$(ms "$T/2x.json")" "$(ms "$T/1.5x.json")" "$(ms "$T/1.25x.json")" <<'PY' || fail "$c: adaptive 2x is slower than at a tighter cap"
import sys
a, b, c = map(float, sys.argv[1:])
print(f"adaptive 1f1b exact: 2x {a:.5f}, 1.5x {b:.5f}, 1.25x {c:.5f}")
sys.exit(0 if a <= b * (1 + 1e-12) and a <= c * (1 + 1e-12) else 1)
PY
done
"$BIN" sim --durations "$T/anyres-1.json" --mode adaptive --hint 1f1b --cap 2x >"$T/o" 2>&1 || fail "adaptive anyres"
grep -q "adaptive: in-flight cap 1.5x, tighter than the configured 2x" "$T/o" || fail "no tighter cap: $(grep adaptive: "$T/o")"
"$BIN" sim --durations "$T/anyres-1.json" --mode adaptive --hint 1f1b --cap 40 >"$T/o" 2>&1 || fail "adaptive cap 40"
grep -q "in-flight cap" "$T/o" && fail "a count cap was tightened: $(grep adaptive: "$T/o")"
echo "plan cap: ok"
