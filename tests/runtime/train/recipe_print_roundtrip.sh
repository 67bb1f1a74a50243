#!/usr/bin/env bash
# recipe_print_roundtrip.sh — `rrfp-mm train R --print-recipe` writes a recipe that loads back and prints
# the same, for every shipped recipe, with a run folder path long enough (250 bytes) to need a line
# over inih's old 198-byte limit.
# Usage: recipe_print_roundtrip.sh RRFP_MM SOURCE_DIR WORKDIR
set -uo pipefail
BIN=$1 SRC=$2 W=$3
rm -rf "$W"; mkdir -p "$W"
LONG="run/$(printf 'r%.0s' $(seq 1 250))"
n=0
for R in "$SRC"/recipes/*.ini; do
  b=$(basename "$R")
  "$BIN" train "$R" --set train.run_dir="$LONG" --print-recipe >"$W/$b" 2>"$W/err" || { echo "FAIL: $b: $(cat "$W/err")"; exit 1; }
  "$BIN" train "$W/$b" --print-recipe >"$W/again-$b" 2>"$W/err" || { echo "FAIL: printed $b does not load: $(cat "$W/err")"; exit 1; }
  cmp -s "$W/$b" "$W/again-$b" || { echo "FAIL: printed $b prints differently"; diff "$W/$b" "$W/again-$b"; exit 1; }
  n=$((n + 1))
done
[ "$n" -ge 3 ] || { echo "FAIL: only $n recipes"; exit 1; }
echo "recipe print round trip: ok ($n recipes)"
