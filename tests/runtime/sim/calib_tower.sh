#!/usr/bin/env bash
# calib_tower.sh BIN SOURCE_DIR — the calibrated generator with the tower's blocks over stages (`rrfp-mm sim
# --calibrated`, --tower-split, docs/anyres.md "The tower over stages"): LLaVA-NeXT-7B's any-resolution step at 32
# stages (no jitter, no stragglers) moves the tower's work off stage 0 without creating or losing any (each
# microbatch's work summed over the stages equals --tower-split off's: the same FLOPs on other stages), stage 0 is no
# longer the heaviest stage, and ready bfw's makespan falls; the split the summary prints is the one `train --dry-run`
# names (layer_split_anyres checks that). LLaVA-1.5-7B's mm step at 8 stages is the same file either way (the tower
# costs less than a stage's share). Bad values of --tower-split, and the flag without --calibrated, are refused.
set -u
BIN=$1 SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
gen() { # gen RECIPE P WORKLOAD SPLIT OUT
    "$BIN" sim --calibrated "$SRC/recipes/$1" --stages "$2" --workload "$3" --tower-split "$4" --seed 3 --jitter 0 \
        --straggler 1:1:0 --split-backward --dump "$5.json" --json >"$5.res" 2>"$5.info" || fail "sim $*: $(cat "$5.info")"
}
gen llava-next-7b.ini 32 anyres auto "$T/a"
gen llava-next-7b.ini 32 anyres off "$T/o"
grep -q ", tower [0-9]" "$T/a.info" || fail "auto: no tower split printed: $(cat "$T/a.info")"
grep -q ", tower" "$T/o.info" && fail "off: a tower split printed: $(cat "$T/o.info")"
python3 - "$T/a.json" "$T/o.json" "$T/a.res" "$T/o.res" <<'PY' || exit 1
import json, sys
a, o = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ra, ro = json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
P, M = a["stages"], a["microbatches"]
work = lambda d, s, m: d["F"][s][m] + d["B"][s][m] + d["W"][s][m]
for m in range(M):
    wa, wo = sum(work(a, s, m) for s in range(P)), sum(work(o, s, m) for s in range(P))
    assert abs(wa / wo - 1) < 1e-9, f"microbatch {m}: work {wa} with the tower split, {wo} without"
stage = lambda d: [sum(work(d, s, m) for m in range(M)) for s in range(P)]
sa, so = stage(a), stage(o)
assert so[0] == max(so), f"off: stage 0 ({so[0]}) is not the heaviest ({max(so)})"
assert sa[0] < 0.9 * max(sa), f"auto: stage 0 {sa[0]} against the heaviest {max(sa)}"
assert max(sa) < 0.85 * max(so), f"auto: the heaviest stage {max(sa)}, off {max(so)}"
print(f"stage 0 / heaviest: off {so[0] / max(so):.2f}, auto {sa[0] / max(sa):.2f}; heaviest auto / off {max(sa) / max(so):.3f}")
PY
for x in a o; do "$BIN" sim --durations "$T/$x.json" --mode ready --hint bfw --cap 1.5x --json >"$T/$x.rb" || fail "sim $x"; done
python3 -c 'import json, sys; a, o = (json.load(open(f))["makespan"] for f in sys.argv[1:]); print(f"ready bfw 1.5x makespan: auto {a:.4f} s, off {o:.4f} s"); sys.exit(0 if a < 0.9 * o else 1)' \
    "$T/a.rb" "$T/o.rb" || fail "ready bfw's makespan did not fall with the tower split"
gen llava-1.5-7b.ini 8 mm auto "$T/m"
gen llava-1.5-7b.ini 8 mm off "$T/n"
cmp -s "$T/m.json" "$T/n.json" || fail "LLaVA-1.5 mm at 8 stages: the tower split changed the step"
"$BIN" sim --calibrated "$SRC/recipes/llava-next-7b.ini" --workload anyres --tower-split maybe >/dev/null 2>"$T/e" && fail "--tower-split maybe accepted"
grep -q "expects auto or off" "$T/e" || fail "--tower-split maybe: $(cat "$T/e")"
"$BIN" sim --stages 4 --microbatches 8 --tower-split off >/dev/null 2>"$T/e" && fail "--tower-split without --calibrated accepted"
grep -q "calibrated RECIPE" "$T/e" || fail "--tower-split without --calibrated: $(cat "$T/e")"
echo "calib tower: ok"
