#!/usr/bin/env bash
# calib_partition.sh BIN SOURCE_DIR — the path-aware split in the calibrated simulator (`rrfp-mm sim --calibrated
# --partition`, parallel.partition, docs/anyres.md "Path-aware split"): the split the summary prints is the one `train
# --dry-run` names under the same parallel.partition (LLaVA-1.5-7B mm at 8 stages, LLaVA-NeXT-7B anyres at 16, the
# tower on stage 0 in both), the two objectives' splits differ, and on the same step (no jitter, no stragglers) the
# path-aware split lowers the step's lower bound and adaptive 1f1b's makespan; at 32 stages it leaves the last stage the
# head alone under a whole backward and an LM block under a split one. Bad values of --partition, and the
# flag without --calibrated, are refused.
set -u
BIN=$1 SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for c in "llava-1.5-7b.ini 8 mm" "llava-next-7b.ini 16 anyres"; do
    set -- $c
    rec=$1 P=$2 wl=$3
    for part in balance path; do
        o="$T/$wl-$part"
        "$BIN" sim --calibrated "$SRC/recipes/$rec" --stages "$P" --workload "$wl" --partition "$part" --tower-split off \
            --seed 1 --jitter 0 --straggler 1:1:0 --dump "$o.json" --json >"$o.res" 2>"$o.info" || fail "sim $c $part: $(cat "$o.info")"
        sim=$(sed -n 's/.*, layers \([0-9,]*\)$/\1/p' "$o.info")
        dry=$("$BIN" train "$SRC/recipes/$rec" --dry-run --set parallel.pp="$P" --set parallel.tp=1 --set parallel.dp=1 \
            --set parallel.partition="$part" 2>&1 | sed -n 's/^LM layers per virtual stage: \([0-9,]*\) .*/\1/p')
        [ -n "$sim" ] && [ "$sim" = "$dry" ] || fail "$rec P=$P $part: the simulator splits '$sim', the dry run '$dry'"
        "$BIN" sim --durations "$o.json" --mode adaptive --hint 1f1b --cap 2x --json >"$o.ad" 2>/dev/null || fail "adaptive $c"
        echo "$rec P=$P $part: $sim"
    done
    [ "$(sed -n 's/.*, layers //p' "$T/$wl-balance.info")" != "$(sed -n 's/.*, layers //p' "$T/$wl-path.info")" ] ||
        fail "$rec P=$P: the path-aware split is the balanced one"
    python3 - "$T/$wl-balance.res" "$T/$wl-path.res" "$T/$wl-balance.ad" "$T/$wl-path.ad" <<'PY' || fail "$rec P=$P: the path-aware split is not faster"
import json, sys
b, p, ab, ap = (json.load(open(f)) for f in sys.argv[1:])
print(f"lower bound path / balance {p['lower_bound'] / b['lower_bound']:.4f}, adaptive 1f1b 2x {ap['makespan'] / ab['makespan']:.4f}")
sys.exit(0 if p["lower_bound"] < 0.97 * b["lower_bound"] and ap["makespan"] < 0.995 * ab["makespan"] else 1)
PY
done
# At as many stages as LM blocks (LLaVA-1.5-7B at 32): the path-aware split leaves the last stage the head alone for a
# whole backward (1f1b) and keeps an LM block there for a split one (zb-h1; the simulator's --split-backward), the
# simulator and the dry run alike
for h in 1f1b zb-h1; do
    sb=() last=0
    [ "$h" = zb-h1 ] && sb=(--split-backward) last=1
    "$BIN" sim --calibrated "$SRC/recipes/llava-1.5-7b.ini" --stages 32 --workload mm --partition path --tower-split off \
        "${sb[@]}" --seed 1 --json >/dev/null 2>"$T/p32.info" || fail "sim P=32 $h: $(cat "$T/p32.info")"
    sim=$(sed -n 's/.*, layers \([0-9,]*\)$/\1/p' "$T/p32.info")
    dry=$("$BIN" train "$SRC/recipes/llava-1.5-7b.ini" --dry-run --set parallel.pp=32 --set parallel.tp=1 --set parallel.dp=1 \
        --set parallel.partition=path --set parallel.hint="$h" 2>&1 | sed -n 's/^LM layers per virtual stage: \([0-9,]*\) .*/\1/p')
    [ -n "$sim" ] && [ "$sim" = "$dry" ] || fail "P=32 $h: the simulator splits '$sim', the dry run '$dry'"
    [ "${sim##*,}" = "$last" ] || fail "P=32 $h: the last stage holds ${sim##*,} LM blocks, expected $last"
    echo "llava-1.5-7b.ini P=32 path, hint $h: $sim"
done
"$BIN" sim --calibrated "$SRC/recipes/llava-1.5-7b.ini" --partition even >/dev/null 2>"$T/e" && fail "--partition even accepted"
grep -q "expects balance or path" "$T/e" || fail "--partition even: $(cat "$T/e")"
"$BIN" sim --stages 4 --microbatches 8 --partition path >/dev/null 2>"$T/e" && fail "--partition without --calibrated accepted"
grep -q "calibrated RECIPE" "$T/e" || fail "--partition without --calibrated: $(cat "$T/e")"
echo "calib partition: ok"
