#!/usr/bin/env bash
# sched_cli.sh — command-line contract of `rrfp-mm sim` and `rrfp-mm trace`:
# the one-object JSON output, a hand-computed makespan through a duration file, clear errors for bad
# duration files (exit 1) and bad usage (exit 2), --dump round trip, and the trace SVG (well-formed,
# one row per rank, one rectangle per task).
# Usage: sched_cli.sh path/to/rrfp-mm
set -u
BIN=${1:?usage: sched_cli.sh rrfp-mm}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect RC PATTERN -- CMD...: exit status RC and stderr matching PATTERN (grep -E).
expect() {
  local rc=$1 pat=$2; shift 3
  "$@" >"$T/out" 2>"$T/err"
  local got=$?
  if [ "$got" != "$rc" ]; then fail "$* -> exit $got, expected $rc; stderr: $(cat "$T/err")"; return; fi
  if [ -n "$pat" ] && ! grep -Eq -e "$pat" "$T/err"; then fail "$* -> stderr does not match '$pat': $(cat "$T/err")"; fi
}

# 1. Hand-computed case (see test_sim.c test_makespans): P=2, M=2, F=1, B=2, latency 0.5.
cat >"$T/d.json" <<'EOF'
{"stages": 2, "microbatches": 2, "latency": 0.5,
 "F": [[1, 1], [1, 1]], "B": [[2, 2], [2, 2]]}
EOF
for spec in "fixed-sync 10.5" "fixed 10" "ready 10"; do
  set -- $spec
  "$BIN" sim --durations "$T/d.json" --mode "$1" --hint 1f1b --json >"$T/j" 2>"$T/err" || fail "sim $1: $(cat "$T/err")"
  python3 - "$T/j" "$1" "$2" <<'EOF' || fail "json for mode $2"
import json, sys
text = open(sys.argv[1]).read()
o = json.loads(text)                      # exactly one JSON object, nothing else on stdout
assert text.strip().count("\n") == 0, text
assert list(o) == ["mode", "hint", "cap", "makespan", "lower_bound", "efficiency", "bubble"], list(o)
assert o["mode"] == sys.argv[2] and o["hint"] == "1f1b", o
assert o["makespan"] == float(sys.argv[3]), o
assert o["lower_bound"] == 10.0, o
assert abs(o["efficiency"] - 10.0 / o["makespan"]) < 1e-12, o
# bubble = 1 - sum of durations / (P * makespan) = 1 - 12 / (2 * makespan)
assert abs(o["bubble"] - (1 - 12 / (2 * o["makespan"]))) < 1e-12, o
assert (o["cap"] is None) == (sys.argv[2] != "ready"), o
EOF
done
"$BIN" sim --durations "$T/d.json" --mode ready --hint 1f1b --cap 1.5x --json | grep -q '"cap":"1.5x"' || fail "cap 1.5x in json"
"$BIN" sim --durations "$T/d.json" --mode ready --hint 1f1b --cap 3 --json | grep -q '"cap":3,' || fail "cap 3 in json"

# 2. Bad duration files: exit 1, message naming the field.
bad() {  # bad NAME JSON PATTERN
  printf '%s' "$2" >"$T/$1.json"
  expect 1 "$3" -- "$BIN" sim --durations "$T/$1.json" --mode ready --hint 1f1b
}
bad short '{"stages": 2, "microbatches": 8, "latency": 0, "F": [[1,1,1,1,1,1,1,1],[1,1,1,1,1,1,1]], "B": [[1,1,1,1,1,1,1,1],[1,1,1,1,1,1,1,1]]}' \
  'F\[1\] has 7 entries, expected M=8'
bad rows '{"stages": 3, "microbatches": 1, "F": [[1],[1]], "B": [[1],[1],[1]]}' 'F has 2 rows, expected stages=3'
bad nostages '{"microbatches": 1, "F": [[1]], "B": [[1]]}' 'missing key "stages"'
bad negative '{"stages": 1, "microbatches": 2, "F": [[1,1]], "B": [[1,-2]]}' 'B\[0\]\[1\] must be a finite non-negative number, got -2'
bad wrow '{"stages": 1, "microbatches": 2, "F": [[1,1]], "B": [[1,1]], "W": [[1]]}' 'W\[0\] has 1 entries, expected M=2'
bad syntax '{"stages": 1,
"microbatches": 2 "F": []}' 'syntax.json:2: not valid JSON'
expect 1 'cannot read duration file' -- "$BIN" sim --durations "$T/missing.json"

# 3. Usage errors: exit 2.
expect 2 "unknown --mode 'eager'" -- "$BIN" sim --durations "$T/d.json" --mode eager
expect 2 "unknown --hint" -- "$BIN" sim --durations "$T/d.json" --hint zb-h9
expect 2 "bad cap" -- "$BIN" sim --durations "$T/d.json" --cap 1.5
expect 2 "--stages expects an integer" -- "$BIN" sim --stages x --microbatches 4
expect 2 "give --durations FILE" -- "$BIN" sim
expect 2 "mode fixed cannot run it; use --mode ready" -- "$BIN" sim --durations "$T/d.json" --mode fixed --hint bfw
expect 2 "divisible by the pipeline size" -- "$BIN" sim --stages 4 --microbatches 6 --hint interleaved-1f1b --chunks 2
expect 2 "unknown option" -- "$BIN" sim --frobnicate

# 3b. --grid prints the hint's rank x step grid (tasks as <stage><kind><mb>) and the executed order.
"$BIN" sim --stages 4 --microbatches 6 --hint 1f1b --mode fixed --grid >"$T/grid" || fail "--grid"
grep -Eq '^ +r0 +0F0 +0F1 +0F2 +0F3 +0B0 +0F4 +0B1 +0F5 +0B2 +0B3 +0B4 +0B5$' "$T/grid" || fail "grid row 0: $(cat "$T/grid")"
grep -Eq '^ +r3 +3F0 +3B0 +3F1 +3B1' "$T/grid" || fail "grid row 3"
[ "$(grep -c '^ *r[0-9]' "$T/grid")" = 8 ] || fail "grid: expected 4 hint rows and 4 executed rows"
expect 0 "cap is ignored" -- "$BIN" sim --durations "$T/d.json" --mode fixed --cap 2

# 4. --dump writes a duration file that reproduces the same result.
"$BIN" sim --stages 4 --microbatches 12 --kind mm --split-backward --seed 5 --hint zb-h1 --mode fixed --dump "$T/g.json" --json >"$T/a" \
  || fail "generate + dump"
"$BIN" sim --durations "$T/g.json" --hint zb-h1 --mode fixed --json >"$T/b" || fail "reload dump"
cmp -s "$T/a" "$T/b" || fail "dumped durations give a different result: $(cat "$T/a") vs $(cat "$T/b")"

# 5. Trace: sim --trace, then trace --svg; well-formed SVG, one row per rank, one rect per task.
"$BIN" sim --stages 4 --microbatches 6 --kind mm --split-backward --hint bfw --mode ready --cap 1.5x --trace "$T/t.json" >/dev/null \
  || fail "sim --trace"
"$BIN" trace "$T/t.json" --svg "$T/t.svg" --json "$T/m.json" 2>"$T/err" || fail "trace: $(cat "$T/err")"
python3 - "$T/t.svg" "$T/m.json" <<'EOF' || fail "svg structure"
import json, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
rects = root.iter(ns + "rect")
rows, tasks = [], {"F": 0, "B": 0, "W": 0}
for r in rects:
    cls = r.get("class", "").split()
    if cls == ["row"]:
        rows.append(int(r.get("data-rank")))
    elif cls and cls[0] == "task":
        tasks[cls[1]] += 1
assert rows == [0, 1, 2, 3], rows
assert tasks == {"F": 24, "B": 24, "W": 24}, tasks   # P * M tasks of each kind
m = json.load(open(sys.argv[2]))
spans = [e for e in m["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("F", "B", "W")]
assert len(spans) == 72, len(spans)
flows = [e for e in m["traceEvents"] if e.get("ph") in ("s", "f")]
# Messages: F from ranks 0..2 and B from ranks 1..3, M each, a start and an end per message.
assert len(flows) == 2 * 2 * 3 * 6, len(flows)
EOF
# Per-rank files merge into the same picture: split the simulated trace by pid and merge again.
python3 - "$T/t.json" "$T" <<'EOF' || fail "split trace"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
for r in range(4):
    json.dump({"traceEvents": [e for e in ev if e.get("pid") == r]}, open(f"{sys.argv[2]}/rank{r}.json", "w"))
EOF
"$BIN" trace "$T"/rank0.json "$T"/rank1.json "$T"/rank2.json "$T"/rank3.json --svg "$T/t2.svg" 2>/dev/null || fail "trace of rank files"
python3 -c "
import sys, xml.etree.ElementTree as ET
n = sum(1 for r in ET.parse(sys.argv[1]).getroot().iter('{http://www.w3.org/2000/svg}rect') if r.get('class','').startswith('task'))
assert n == 72, n" "$T/t2.svg" || fail "rank-file svg"
echo '{"traceEvents": [' >"$T/broken.json"
expect 1 'broken.json:.*not valid JSON' -- "$BIN" trace "$T/broken.json" --svg "$T/x.svg"
[ -e "$T/x.svg" ] && fail "an svg was written for a broken trace"
echo '{"traceEvents": []}' >"$T/empty.json"
expect 1 'no task spans' -- "$BIN" trace "$T/empty.json" --svg "$T/x.svg"
expect 2 'give at least one trace file' -- "$BIN" trace --svg "$T/x.svg"

# 6. Limits: durations whose sum is infinite, P x M beyond 2^22, and trace --durations
# writing only what sim reads back.
bad overflow '{"stages": 1, "microbatches": 2, "F": [[1e308, 1e308]], "B": [[1, 1]]}' \
  'add up to infinity at F\[0\]\[1\] = 1e\+308'
bad toolarge '{"stages": 4096, "microbatches": 2048, "F": [], "B": []}' 'stages x microbatches = 4096 x 2048 = 8388608 is too large.*<= 4194304'
expect 2 'stages x microbatches = 16384 x 16384 .* <= 4194304' -- "$BIN" sim --stages 16384 --microbatches 16384
"$BIN" sim --stages 4 --microbatches 6 --kind mm --split-backward --hint bfw --mode ready --trace "$T/rt.json" >/dev/null || fail "sim --trace rt"
"$BIN" trace "$T/rt.json" --durations "$T/rt-d.json" >/dev/null 2>"$T/err" || fail "trace --durations: $(cat "$T/err")"
"$BIN" sim --durations "$T/rt-d.json" --hint bfw --mode ready >/dev/null 2>"$T/err" || fail "sim rejects what trace --durations wrote: $(cat "$T/err")"
python3 - "$T/rt.json" "$T" <<'EOF' || fail "make bad traces"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
neg = json.loads(json.dumps(ev))
[e for e in neg if e.get("ph") == "X" and e.get("cat") == "B"][3]["dur"] = -5
json.dump({"traceEvents": neg}, open(sys.argv[2] + "/neg.json", "w"))
EOF
expect 1 'neg.json: traceEvents\[[0-9]+\] = .*a "dur" in 0 .. 1e15' -- "$BIN" trace "$T/neg.json" --durations "$T/neg-d.json"
[ -e "$T/neg-d.json" ] && fail "trace --durations wrote a file from a negative duration"
expect 1 'durations sim cannot use: .*latency' -- "$BIN" trace "$T/rt.json" --durations "$T/big-d.json" --latency 1e307
[ -e "$T/big-d.json" ] && fail "trace --durations wrote a file sim rejects"
expect 2 'latency needs a number' -- "$BIN" trace "$T/rt.json" --durations "$T/x.json" --latency inf
# a folder where a file is expected: say what was expected (not "Is a directory")
expect 1 'is a directory, expected a duration file' -- "$BIN" sim --durations "$T" --mode ready --hint 1f1b
expect 1 'is a directory, expected a Chrome trace' -- "$BIN" trace "$T" --svg "$T/dir.svg"

# 7. The calibrated generator: the 7B recipe's step at P = 8, every packing policy, deterministic for a
# seed, a valid duration file (seconds) that sim reads back; the adaptive mode reports its choice. The split is the
# recipe's parallel.partition (path: a layer off the last stage, docs/anyres.md "Path-aware split").
R7=$(dirname "$0")/../../../recipes/llava-1.5-7b.ini
for pol in fifo ffd balanced; do
  "$BIN" sim --calibrated "$R7" --stages 8 --microbatches 16 --policy $pol --split-backward --seed 2 \
    --dump "$T/cal-$pol.json" --mode adaptive --hint zb-h1 --estimate-error 0.2 >"$T/cal-$pol.txt" 2>"$T/err" \
    || fail "sim --calibrated --policy $pol: $(cat "$T/err")"
  grep -qE "^calibrated: .*policy $pol: [0-9]+ samples.*layers 4,5,4,4,4,4,4,3$" "$T/cal-$pol.txt" || fail "calibrated $pol summary: $(head -1 "$T/cal-$pol.txt")"
  grep -qE "^adaptive: ran (ready|lookahead|fixed) \(predicted" "$T/cal-$pol.txt" || fail "adaptive does not report its choice"
  "$BIN" sim --durations "$T/cal-$pol.json" --mode ready --hint bfw --json >/dev/null 2>"$T/err" || fail "sim rejects the calibrated file: $(cat "$T/err")"
done
# adaptive's order choice: the two big microbatches at the ends of the step are moved to the middle (the
# plan predicts it faster), alike ones are not; --json stays exactly its keys either way.
cat >"$T/ends.json" <<'EOF'
{"stages": 2, "microbatches": 6, "latency": 0.02,
 "F": [[6, 1, 1, 1, 1, 6], [6, 1, 1, 1, 1, 6]], "B": [[12, 2, 2, 2, 2, 12], [12, 2, 2, 2, 2, 12]]}
EOF
"$BIN" sim --durations "$T/ends.json" --mode adaptive --hint 1f1b >"$T/ends.txt" 2>"$T/err" || fail "sim adaptive ends: $(cat "$T/err")"
grep -qE "^adaptive: reordered the microbatches .*: [0-9 ]+$" "$T/ends.txt" || fail "adaptive does not report its reordering: $(cat "$T/ends.txt")"
grep -qE "^adaptive: reordered .*: [1-4] [0-9 ]+ [1-4]$" "$T/ends.txt" || fail "adaptive's order has a big microbatch at an end: $(grep reordered "$T/ends.txt")"
# a reordered step's executed grid and trace name the data's microbatches: each rank runs them in the order
# adaptive reported (its first forward is microbatch ORDER[0], not slot 0), every microbatch's F and B once
"$BIN" sim --durations "$T/ends.json" --mode adaptive --hint 1f1b --grid --trace "$T/ends-trace.json" >"$T/endsg.txt" 2>"$T/err" \
  || fail "sim adaptive ends --grid --trace: $(cat "$T/err")"
python3 - "$T/endsg.txt" "$T/ends-trace.json" <<'PYORD' || fail "a reordered step's grid or trace does not name the data's microbatches"
import json, re, sys
text = open(sys.argv[1]).read()
order = [int(x) for x in re.search(r"^adaptive: reordered .*: ([0-9 ]+)$", text, re.M).group(1).split()]
assert sorted(order) == list(range(6)) and order != list(range(6)), order
ev = [e for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("F", "B")]
for rank in (0, 1):
    grid = re.search(r"^ +r%d ((?:[0-9]+[FBW][0-9]+ ?)+)$" % rank, text.split("executed order")[1], re.M).group(1).split()
    fw = [int(re.match(r"[0-9]+F([0-9]+)", t).group(1)) for t in grid if "F" in t]
    assert fw == order, ("grid", rank, fw, order)
    mine = sorted((e["ts"], e["cat"], e["args"]["mb"]) for e in ev if e["pid"] == rank)
    assert [m for _, c, m in mine if c == "F"] == order, ("trace", rank, mine)
    assert sorted((c, m) for _, c, m in mine) == sorted((c, m) for c in "FB" for m in range(6)), mine
PYORD
# --keep-order (parallel.reorder = false): the same step in the data's order, as --mode adaptive planned it
# before the order choice; the step it runs is the chosen mode's on the step as it is
"$BIN" sim --durations "$T/ends.json" --mode adaptive --hint 1f1b --keep-order >"$T/keep.txt" 2>"$T/err" || fail "sim --keep-order: $(cat "$T/err")"
grep -qE "^adaptive: microbatches as they are \(--keep-order\)$" "$T/keep.txt" || fail "--keep-order reordered: $(grep adaptive "$T/keep.txt")"
kmode=$(sed -n 's/^adaptive: ran \([a-z-]*\) .*/\1/p' "$T/keep.txt")
kms=$(sed -n 's/^makespan *//p' "$T/keep.txt")
cms=$("$BIN" sim --durations "$T/ends.json" --mode "$kmode" --hint 1f1b | sed -n 's/^makespan *//p')
ems=$(sed -n 's/^makespan *//p' "$T/ends.txt")
[ -n "$kms" ] && [ "$kms" = "$cms" ] || fail "--keep-order ran $kmode in $kms, $kmode alone runs $cms"
python3 -c 'import sys; k, e = map(float, sys.argv[1:]); assert e < k, (e, k)' "$kms" "$ems" || fail "reordered $ems not faster than kept $kms"
"$BIN" sim --durations "$T/ends.json" --mode ready --hint 1f1b --keep-order >/dev/null 2>"$T/err" && grep -q "keep-order applies to --mode adaptive only" "$T/err" \
  || fail "--keep-order under ready: no warning: $(cat "$T/err")"
"$BIN" sim --durations "$T/d.json" --mode adaptive --hint 1f1b >"$T/alike.txt" 2>"$T/err" || fail "sim adaptive alike: $(cat "$T/err")"
grep -qE "^adaptive: microbatches as they are" "$T/alike.txt" || fail "adaptive reordered alike microbatches: $(cat "$T/alike.txt")"
"$BIN" sim --durations "$T/ends.json" --mode adaptive --hint 1f1b --json >"$T/j" 2>"$T/err" || fail "sim adaptive --json: $(cat "$T/err")"
python3 -c 'import json,sys; t=open(sys.argv[1]).read(); o=json.loads(t); assert t.strip().count("\n") == 0 and list(o) == ["mode", "hint", "cap", "makespan", "lower_bound", "efficiency", "bubble"] and o["mode"] == "adaptive", t' "$T/j" || fail "adaptive --json keys"
"$BIN" sim --calibrated "$R7" --stages 8 --microbatches 16 --policy balanced --split-backward --seed 2 --dump "$T/cal-again.json" --json >/dev/null 2>&1
cmp -s "$T/cal-balanced.json" "$T/cal-again.json" || fail "the calibrated generator is not deterministic for a seed"
python3 - "$T" <<'PYCAL' || fail "calibrated files"
import json, sys
T = sys.argv[1]
for pol in ("fifo", "ffd", "balanced"):
    d = json.load(open(f"{T}/cal-{pol}.json"))
    assert d["stages"] == 8 and d["microbatches"] == 16 and "W" in d, pol
    for k in "FBW":
        for row in d[k]:
            assert all(0 < x < 10 for x in row), (pol, k)  # seconds: a 4096-token microbatch through 4 LM layers
    assert 0 < d["latency"] < 0.01, d["latency"]
PYCAL
"$BIN" sim --calibrated "$R7" --stages 8 --workload text --json >"$T/out" 2>"$T/err" || fail "calibrated text workload"
grep -q "(0 patches)" "$T/err" || fail "a text-only workload with patches: $(cat "$T/err")"
# the any-resolution workload (LLaVA-NeXT's tiles, recipes/llava-next-7b.ini): a tower pass per tile, so about as many
# patches as LM positions (a 336 x 336 photograph: 5 x 576 patches for 1,176 positions; documents less)
"$BIN" sim --calibrated "$(dirname "$R7")/llava-next-7b.ini" --stages 8 --workload anyres --json >"$T/out" 2>"$T/err" \
  || fail "calibrated anyres workload: $(cat "$T/err")"
python3 - "$T/err" <<'PYAR' || fail "anyres workload: $(cat "$T/err")"
import re, sys
m = re.search(r"anyres workload, P=8 M=32 policy balanced: (\d+) samples, (\d+) tokens \((\d+) patches\)", open(sys.argv[1]).read())
n, tok, pat = map(int, m.groups())
assert 0.5 * tok < pat < 2.5 * tok and tok / n > 1176 * 0.9, (n, tok, pat)
PYAR
expect 2 'unknown --policy' -- "$BIN" sim --calibrated "$R7" --policy lpt
expect 2 'unknown --workload' -- "$BIN" sim --calibrated "$R7" --workload video
expect 2 'straggler expects FACTOR:LENGTH:PROBABILITY' -- "$BIN" sim --calibrated "$R7" --straggler 2:0:0.5
expect 2 'stages <= LM layers' -- "$BIN" sim --calibrated "$R7" --stages 64
expect 2 'excludes --durations' -- "$BIN" sim --calibrated "$R7" --durations "$T/cal-fifo.json"

# A run of steps (--steps K, or one --durations FILE per step): step k drawn with --seed + 1000 k and its
# estimates with --estimate-seed + 1000 k; the figures are the run's totals; adaptive keeps one learner
# across the steps (its choice on step k > 0 is informed by the steps before, as in the MPI runtime).
G=(--stages 4 --microbatches 16 --kind text --split-backward --hint zb-h1)
for k in 0 1 2; do
  "$BIN" sim "${G[@]}" --seed $((2 + 1000 * k)) --mode fixed --json --dump "$T/run$k.json" >"$T/fx$k.json" 2>"$T/err" || fail "sim step $k: $(cat "$T/err")"
done
"$BIN" sim "${G[@]}" --seed 2 --steps 3 --mode fixed --json >"$T/fxrun.json" 2>"$T/err" || fail "sim --steps 3: $(cat "$T/err")"
python3 - "$T" <<'PYRUN' || fail "a run's totals are not its steps' one-step figures"
import json, sys
T = sys.argv[1]
text = open(f"{T}/fxrun.json").read()
run = json.loads(text)
assert text.strip().count("\n") == 0, text
assert list(run) == ["mode", "hint", "cap", "makespan", "lower_bound", "efficiency", "bubble", "steps", "step_makespans"], list(run)
one = [json.load(open(f"{T}/fx{k}.json")) for k in range(3)]
assert run["steps"] == 3 and run["step_makespans"] == [o["makespan"] for o in one], (run, one)
assert abs(run["makespan"] - sum(o["makespan"] for o in one)) < 1e-9 * run["makespan"], run
assert abs(run["lower_bound"] - sum(o["lower_bound"] for o in one)) < 1e-9 * run["lower_bound"], run
assert abs(run["efficiency"] - run["lower_bound"] / run["makespan"]) < 1e-12, run
work = sum((1 - o["bubble"]) * o["makespan"] for o in one)
assert abs(run["bubble"] - (1 - work / run["makespan"])) < 1e-9, run
PYRUN
# the same run from files, one per step, is the generated run (estimates per step from --estimate-seed)
A=(--mode adaptive --cap 1.5x --estimate-error 0.2 --estimate-seed 2 --json)
"$BIN" sim "${G[@]}" --seed 2 --steps 3 "${A[@]}" >"$T/arun.json" 2>"$T/err" || fail "adaptive --steps: $(cat "$T/err")"
"$BIN" sim --durations "$T/run0.json" --durations "$T/run1.json" --durations "$T/run2.json" --hint zb-h1 "${A[@]}" \
  >"$T/afiles.json" 2>"$T/err" || fail "adaptive over three files: $(cat "$T/err")"
cmp -s "$T/arun.json" "$T/afiles.json" || fail "a run of files differs from the generated run: $(cat "$T/arun.json") vs $(cat "$T/afiles.json")"
# adaptive learns across the run: its first step is the one-step run's; later steps' choices follow the
# learner (on this case it runs fixed on steps where the plan alone runs ready) and the run holds the
# adaptive target (within 0.5% of the better of fixed and ready) against fixed's and ready's totals on the same steps
"$BIN" sim "${G[@]}" --seed 2 --steps 10 "${A[@]}" >"$T/a10.json" 2>"$T/err" || fail "adaptive --steps 10: $(cat "$T/err")"
for m in fixed ready; do "$BIN" sim "${G[@]}" --seed 2 --steps 10 --mode $m --cap 1.5x --json >"$T/${m}10.json" 2>/dev/null || fail "$m --steps 10"; done
for k in $(seq 0 9); do
  s=$((2 + 1000 * k))
  "$BIN" sim "${G[@]}" --seed $s --mode adaptive --cap 1.5x --estimate-error 0.2 --estimate-seed $s | sed -n 's/^adaptive: ran \([a-z-]*\) .*/\1/p'
done >"$T/alone.txt"
python3 - "$T" <<'PYLEARN' || fail "adaptive's run does not learn or misses the target"
import json, sys
T = sys.argv[1]
a = json.load(open(f"{T}/a10.json"))
f = json.load(open(f"{T}/fixed10.json"))["makespan"]
r = json.load(open(f"{T}/ready10.json"))["makespan"]
alone = open(f"{T}/alone.txt").read().split()
assert len(alone) == 10 and len(a["step_modes"]) == 10 and len(a["step_reordered"]) == 10, (alone, a)
assert a["step_modes"][0] == alone[0], (a["step_modes"], alone)          # nothing learned before step 0
assert a["step_modes"] != alone, (a["step_modes"], alone)                # the learner changed later choices
assert a["makespan"] <= 1.005 * min(f, r), (a["makespan"], f, r)
PYLEARN
"$BIN" sim "${G[@]}" --seed 2 --steps 3 --mode adaptive --cap 1.5x --estimate-error 0.2 >"$T/atext.txt" 2>"$T/err" || fail "adaptive --steps text"
grep -qE "^sim: a run of 3 steps, P=4 .*\(adaptive learns across the steps\)$" "$T/atext.txt" && grep -qE "^2 +16 " "$T/atext.txt" \
  && grep -qE "^run +makespan [0-9.]+ .*\(totals over 3 steps\)$" "$T/atext.txt" && grep -qE "^adaptive: ready on [0-9]+, fixed on" "$T/atext.txt" \
  || fail "a run's text output: $(cat "$T/atext.txt")"
expect 2 '--steps expects' -- "$BIN" sim "${G[@]}" --steps 0
expect 2 'show one step' -- "$BIN" sim "${G[@]}" --steps 2 --grid
expect 2 'show one step' -- "$BIN" sim --durations "$T/run0.json" --durations "$T/run1.json" --trace "$T/x.json"
expect 2 'once per step' -- "$BIN" sim --durations "$T/run0.json" --steps 2
"$BIN" sim --stages 3 --microbatches 6 --split-backward --dump "$T/p3.json" >/dev/null 2>&1
"$BIN" sim --stages 4 --microbatches 16 --dump "$T/whole.json" >/dev/null 2>&1
expect 1 'p3.json: a run.s steps must have the same pipeline: 4 stages' -- "$BIN" sim --durations "$T/run0.json" --durations "$T/p3.json" --hint zb-h1
expect 1 'whole.json: a run.s steps must have the same pipeline: .*split backward' -- "$BIN" sim --durations "$T/run0.json" --durations "$T/whole.json" --hint zb-h1
printf '{"stages": 4, "microbatches": 16, "latency": 0.02, "F": [[1]]' >"$T/trunc.json"
expect 1 'trunc.json' -- "$BIN" sim --durations "$T/run0.json" --durations "$T/trunc.json" --hint zb-h1

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "sched_cli: all checks passed"
