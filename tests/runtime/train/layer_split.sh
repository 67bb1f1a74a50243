#!/usr/bin/env bash
# layer_split.sh BIN RECIPE WORK — `train --dry-run` prints the LM layer split the trainer uses. They once
# came from two cost models (text_layers 12, V 8000, pp 3: the dry run said 4,5,3, training used 5,5,2).
set -u
BIN=$1 RECIPE=$2 W=$3
MPI="timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
for layout in "3 12 8000" "2 5 64" "4 9 500"; do
    set -- $layout
    pp=$1 L=$2 V=$3
    S=(--set model.text_layers=$L --set model.vocab=$V --set parallel.pp=$pp --set train.steps=1
       --set train.run_dir="$W/run-$pp-$L" --set optim.warmup=0)
    dry=$("$BIN" train "$RECIPE" "${S[@]}" --dry-run) || fail "dry run pp=$pp L=$L: $dry"
    want=$(sed -n 's/^LM layers per virtual stage: \([0-9,]*\).*/\1/p' <<<"$dry")
    log=$($MPI -np "$pp" "$BIN" train "$RECIPE" "${S[@]}" 2>&1) || fail "train pp=$pp L=$L: $log"
    got=$(sed -n 's/^rrfp-mm: pipeline: .* layers \([0-9,]*\) .*/\1/p' <<<"$log")
    [ -n "$want" ] && [ "$want" = "$got" ] || fail "pp=$pp L=$L V=$V: dry run says '$want', the trainer used '$got'; log: $log"
    echo "pp=$pp text_layers=$L V=$V: dry run and trainer both split $got"
done
echo "layer split: ok"
