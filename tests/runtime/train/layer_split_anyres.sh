#!/usr/bin/env bash
# layer_split_anyres.sh BIN SOURCE_DIR — an any-resolution model's layer split counts its tiles: `train --dry-run` of
# recipes/llava-next-7b.ini (model.anyres) at pp 8 and 16 splits as the calibrated simulator's anyres workload does
# (`rrfp-mm sim --calibrated ... --workload anyres`: as many tower patches as LM positions), and gives the first
# stage (the tower's) fewer LM layers than the same recipe without model.anyres (half as many patches). The trainer
# once split it as a LLaVA-1.5 model (4,4,4,4,4,4,4,4 at pp 8: the tiles' tower work all on rank 0 on top). At pp 32
# the dry run names the split with the tower's blocks over stages that the simulator runs.
set -u
BIN=$1 SRC=$2
R=$SRC/recipes/llava-next-7b.ini
fail() { echo "FAIL: $*"; exit 1; }
split() { "$BIN" train "$R" --dry-run --set parallel.tp=1 --set parallel.dp=1 "$@" 2>&1 | sed -n 's/^LM layers per virtual stage: \([0-9,]*\).*/\1/p'; }
for pp in 8 16; do
    dry=$(split --set parallel.pp=$pp)
    sim=$("$BIN" sim --calibrated "$R" --stages $pp --workload anyres --seed 1 --json 2>&1 >/dev/null | sed -n 's/.*, layers \([0-9,]*\)$/\1/p')
    plain=$(split --set parallel.pp=$pp --set model.anyres=0)
    [ -n "$dry" ] && [ "$dry" = "$sim" ] || fail "pp $pp: the trainer splits '$dry', the simulator's anyres workload '$sim'"
    [ "${dry%%,*}" -lt "${plain%%,*}" ] || fail "pp $pp: stage 0 holds ${dry%%,*} LM layers with the tiles, ${plain%%,*} without"
    echo "pp $pp: the trainer and the simulator split $dry (without model.anyres: $plain)"
done
# pp 32 (one LM block a stage): the tower costs more than a stage's share; the dry run names the split with the tower's
# blocks over stages (partition_auto_tower), the same as the simulator runs (--tower-split auto, its default); at pp 8
# the tower stays on stage 0 and the dry run says nothing of it
tower() { "$BIN" train "$R" --dry-run --set parallel.tp=1 --set parallel.dp=1 --set parallel.pp=$1 2>&1 |
          sed -n 's/^the tower costs more than a stage.s share: .* splits LM \([0-9,]*\), tower \([0-9,]*\) .*/\1 \2/p'; }
dry=$(tower 32)
sim=$("$BIN" sim --calibrated "$R" --stages 32 --workload anyres --seed 1 --json 2>&1 >/dev/null | sed -n 's/.*, layers \([0-9,]*\), tower \([0-9,]*\)$/\1 \2/p')
[ -n "$dry" ] && [ "$dry" = "$sim" ] || fail "pp 32: the dry run's tower split '$dry', the simulator's '$sim'"
case "${dry#* }" in 24,*) fail "pp 32: the tower all on stage 0 ($dry)" ;; esac
[ -z "$(tower 8)" ] || fail "pp 8: the dry run proposes a tower split: $(tower 8)"
echo "pp 32: the dry run and the simulator split the tower over stages: LM and tower blocks $dry"
echo "layer split anyres: ok"
