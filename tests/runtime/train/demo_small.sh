#!/usr/bin/env bash
# demo_small.sh — make demo's pipeline (scripts/demo.sh) end to end at a small size, in seconds: demo data
# (the demo's flags), tokenizer, pack, train recipes/demo.ini for a few steps, eval, the per-type table and
# the report page. Checks the pipeline, not the accuracy (`make demo` measures that at full size).
# Usage: demo_small.sh RRFP_MM SOURCE_DIR WORKDIR
set -euo pipefail
EXE=$1 SRC=$2 WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
out=$(DEMO_DATA="$WORK/demo" DEMO_RUN="$WORK/run" DEMO_SAMPLES=300 DEMO_HELDOUT=30 DEMO_STEPS=6 DEMO_WARMUP=1 \
  "$SRC/scripts/demo.sh" "$EXE" 2>&1) || { echo "$out"; echo "demo_small: scripts/demo.sh failed"; exit 1; }
fail() { echo "$out"; echo "demo_small: $*"; exit 1; }
for t in count_all lone_colour colour all; do
  grep -qE "^  $t +[0-9]+ questions  accuracy +[0-9.]+%  chance +[0-9.]+%  majority +[0-9.]+%" <<<"$out" ||
    fail "no held-out accuracy line for question type '$t'"
done
# rrfp-mm generate's greedy answers score what eval's teacher-forced exact match scores (within 5 points:
# the two differ only where the generated tokens spell the reference another way)
line=$(echo "$out" | grep "^generated answers equal to the reference") || fail "no generated answers"
/usr/bin/python3 -c "
import re, sys
g, e = map(float, re.findall(r'([0-9.]+)% of', sys.argv[1]))
print('demo_small: generate %.1f%%, eval %.1f%%' % (g, e))
sys.exit(0 if abs(g - e) <= 5 else 1)" "$line" || fail "generate and eval disagree: $line"
page=$(echo "$out" | tail -n 1 | grep -oE '[^ ]+\.html' || true)
[ -n "$page" ] || fail "the last line does not name the report page"
case "$page" in /*) ;; *) page="$SRC/$page" ;; esac
[ -s "$page" ] || fail "report page '$page' is missing or empty"
grep -q "<svg" "$page" || fail "report page '$page' has no curves"
# a second run reuses the complete demo data (no "== demo data" step)
out2=$(DEMO_DATA="$WORK/demo" DEMO_RUN="$WORK/run" DEMO_SAMPLES=300 DEMO_HELDOUT=30 DEMO_STEPS=2 DEMO_WARMUP=1 \
  "$SRC/scripts/demo.sh" "$EXE" 2>&1) || { echo "$out2"; echo "demo_small: second run failed"; exit 1; }
grep -q "^== demo data" <<<"$out2" && { echo "$out2"; echo "demo_small: complete demo data was made again"; exit 1; }
echo "demo_small: ok"
