#!/usr/bin/env bash
# trace_steps.sh — `rrfp-mm trace FILE... --durations-dir DIR`: every training step of a run's traces as
# its own simulator duration file DIR/step-NNNNNN.json, task spans assigned to steps by the runtime's
# step spans (cat "step", args.step). A two-rank, three-step trace (steps 4, 5, 6) is written here from
# known durations, with its events shuffled, spans outside every step (an evaluation forward between
# steps and after the last one), and task spans at a step span's edge within the %.3f rounding of the
# written ts/dur; the exported files must hold exactly those durations (ms), `--durations` must equal the
# last step's file byte for byte, and `rrfp-mm sim` must replay the files as a run. Then the errors: a
# missing rank, a missing step span, malformed step spans (naming the file and event), no step spans, a
# task twice in a step, a task beyond its step's span, overlapping or doubled step spans, and DIR a file,
# an input, under a missing folder, or holding another export's steps; none of them writes a file.
# Usage: trace_steps.sh path/to/rrfp-mm
set -u
BIN=${1:?usage: trace_steps.sh rrfp-mm}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../../support/util/expect_lib.sh" # fail, expect RC PATTERN -- CMD...

# 1. The trace: P 2, M 3, split backward, steps 4 5 6; durations in us with 3 decimals (written exactly).
python3 - "$T" <<'EOF' || { echo "FAIL: writing the trace"; exit 1; }
import copy, json, random, sys
T = sys.argv[1]
P, M, STEPS = 2, 3, (4, 5, 6)
def dur(step, r, k, m):  # us, exact in %.3f
    return 1000.0 * (k + 1) + 37.125 * step + 11.5 * r + 3.001 * m
ev = {r: [] for r in range(P)}
for r in range(P):
    ev[r] += [{"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}},
              {"name": "thread_name", "ph": "M", "pid": r, "tid": 2, "args": {"name": "step"}}]
def task(r, k, m, ts, d):
    return {"name": "FBW"[k] + str(m), "cat": "FBW"[k], "ph": "X", "ts": round(ts, 3), "dur": round(d, 3),
            "pid": r, "tid": 0, "args": {"chunk": 0, "mb": m, "stage": r, "stages": P}}
def step_span(r, n, ts, d):
    return {"name": f"step {n}", "cat": "step", "ph": "X", "ts": round(ts, 3), "dur": round(d, 3), "pid": r,
            "tid": 2, "args": {"step": n}}
expected, measured, last_task = {}, {}, {}
for n in STEPS:
    S = 1000.0 + (n - 4) * 50000.0
    t_first, t_last = 1e300, -1e300
    for r in range(P):
        t = S + 5.0 + 7.0 * r
        first = t
        for m in range(M):
            for k in range(3):
                d = dur(n, r, k, m)
                ev[r].append(task(r, k, m, t, d))
                last_task[(n, r)] = len(ev[r]) - 1
                t += d + 1.0
        end = t - 1.0
        t_first, t_last = min(t_first, first), max(t_last, end)
        if (n, r) == (5, 1):  # the step span's edges within the writer's rounding: start 0.001 us after
            ev[r].append(step_span(r, n, first + 0.001, end - 0.002 - (first + 0.001)))  # the task's, end 0.002 before
        else:
            ev[r].append(step_span(r, n, S, 30000.0))
    measured[n] = (t_last - t_first) / 1000.0
    expected[n] = {"FBW"[k]: [[dur(n, r, k, m) / 1000.0 for m in range(M)] for r in range(P)] for k in range(3)}
# outside every step: an evaluation forward between steps 4 and 5, and one after the last step, on rank 0
ev[0].append(task(0, 0, 0, 40000.0, 77.0))
ev[0].append(task(0, 0, 0, 200000.0, 55.0))
ev[1].append(task(1, 0, 1, 200000.0, 66.0))
def dump(name, events, seed=1):
    events = list(events)
    random.Random(seed).shuffle(events)  # the assignment does not depend on the events' order
    json.dump({"displayTimeUnit": "ms", "traceEvents": events}, open(f"{T}/{name}", "w"))
for r in range(P):
    dump(f"r{r}.json", ev[r], seed=r + 1)
json.dump({"expected": {str(n): expected[n] for n in STEPS}, "measured": {str(n): measured[n] for n in STEPS}},
          open(f"{T}/expected.json", "w"))
# variants for the error cases
strip = lambda evs: [e for e in evs if e.get("cat") != "step"]
dump("r0_nostep.json", strip(ev[0]))
dump("r1_nostep.json", strip(ev[1]))
dump("r1_no5.json", [e for e in ev[1] if not (e.get("cat") == "step" and e["args"]["step"] == 5)])
bad = {"neg": ("args", {"step": -1}), "frac": ("args", {"step": 2.5}), "noargs": ("args", None),
       "big": ("args", {"step": 2147483648}), "strts": ("ts", "x"), "negdur": ("dur", -1.0), "pid": ("pid", 70000)}
where = {}
for name, (key, val) in bad.items():
    evs = copy.deepcopy(ev[0])
    i = next(i for i, e in enumerate(evs) if e.get("cat") == "step" and e["args"]["step"] == 5)
    if val is None:
        del evs[i][key]
    else:
        evs[i][key] = val
    json.dump({"traceEvents": evs}, open(f"{T}/bad_{name}.json", "w"))  # not shuffled: the index is i
    where[name] = i
json.dump(where, open(f"{T}/where.json", "w"))
twice = copy.deepcopy(ev[0])  # rank 0's F1 of step 5 twice, both within the step
f1 = next(e for e in twice if e.get("cat") == "F" and e["args"]["mb"] == 1 and 51000 <= e["ts"] < 80000)
extra = dict(f1, ts=1000.0 + 50000.0 + 29000.0, dur=10.0)
twice.append(extra)
dump("r0_twice.json", twice)
cross = copy.deepcopy(ev[1])  # rank 1's last task of step 6 ends 1 us after the step span: in no step
c = cross[last_task[(6, 1)]]
span = next(e for e in cross if e.get("cat") == "step" and e["args"]["step"] == 6)
span["dur"] = round(c["ts"] + c["dur"] - 1.0 - span["ts"], 3)
dump("r1_cross.json", cross)
over = copy.deepcopy(ev[0])  # rank 0's step 5 starts before its step 4 ends
next(e for e in over if e.get("cat") == "step" and e["args"]["step"] == 4)["dur"] = 60000.0
dump("r0_over.json", over)
EOF

# 2. Export every step; the files hold the durations written, in ms; spans outside steps left out.
"$BIN" trace "$T/r0.json" "$T/r1.json" --durations-dir "$T/steps" --latency 0.05 >"$T/log" 2>&1 \
  || fail "trace --durations-dir: $(cat "$T/log")"
ls "$T/steps" >"$T/ls"
[ "$(cat "$T/ls" | tr '\n' ' ')" = "step-000004.json step-000005.json step-000006.json " ] || fail "files: $(cat "$T/ls")"
python3 - "$T" <<'EOF' || fail "the exported durations"
import json, os, re, stat, sys
T = sys.argv[1]
exp = json.load(open(f"{T}/expected.json"))
log = open(f"{T}/log").read()
um = os.umask(0); os.umask(um)
assert stat.S_IMODE(os.stat(f"{T}/steps").st_mode) == 0o755 & ~um, oct(os.stat(f"{T}/steps").st_mode)
for n, e in exp["expected"].items():
    d = json.load(open(f"{T}/steps/step-{int(n):06d}.json"))
    assert d["stages"] == 2 and d["microbatches"] == 3 and d["latency"] == 0.05, d
    for k in "FBW":
        assert d[k] == e[k], (n, k, d[k], e[k])  # bit for bit: dur / 1000 of the written us
    line = re.search(rf"^step {n}: P=2 M=3 split backward -> {T}/steps/step-{int(n):06d}\.json; "
                     rf"measured step \(first task start to last task end\) ([0-9.]+) ms$", log, re.M)
    assert line, (n, log)
    assert line.group(1) == f"{exp['measured'][n]:.3f}", (line.group(1), exp["measured"][n])
assert re.search(r"durations of 3 steps \(steps 4 \.\. 6\) -> .*: measured steps [0-9.]+ ms in all, [0-9.]+ ms on "
                 r"average; 3 task spans outside every step span left out", log), log
EOF
# --durations: the last step (step 6, not the evaluation forward after it), byte for byte the same file
expect 0 'durations of the last step \(step 6\): P=2 M=3 split backward' -- \
  "$BIN" trace "$T/r0.json" "$T/r1.json" --durations "$T/last.json" --latency 0.05
cmp -s "$T/last.json" "$T/steps/step-000006.json" || fail "--durations differs from the last step's file"
# both at once, and an export again into the same folder (the same steps) replaces the files
expect 0 'durations of 3 steps' -- "$BIN" trace "$T/r0.json" "$T/r1.json" --durations-dir "$T/steps" \
  --durations "$T/last2.json" --latency 0.05
cmp -s "$T/last2.json" "$T/last.json" || fail "--durations beside --durations-dir differs"
# the files replay as a run
args=()
for f in "$T"/steps/step-*.json; do args+=(--durations "$f"); done
"$BIN" sim "${args[@]}" --mode adaptive --json >"$T/sim.json" 2>"$T/err" || fail "sim of the steps: $(cat "$T/err")"
python3 -c "
import json, sys
o = json.load(open(sys.argv[1]))
assert o['steps'] == 3 and len(o['step_makespans']) == 3 and len(o['step_modes']) == 3, o" "$T/sim.json" ||
  fail "sim --json of the run: $(cat "$T/sim.json")"
# a simulated step's trace (one step span per rank, step 0) gives the same file both ways
"$BIN" sim --stages 3 --microbatches 4 --split-backward --hint zb-h1 --trace "$T/sim_t.json" >/dev/null || fail "sim --trace"
expect 0 'step 0: P=3 M=4 split backward' -- "$BIN" trace "$T/sim_t.json" --durations-dir "$T/simsteps"
expect 0 'last step \(step 0\): P=3 M=4' -- "$BIN" trace "$T/sim_t.json" --durations "$T/sim_d.json"
cmp -s "$T/sim_d.json" "$T/simsteps/step-000000.json" || fail "sim trace: --durations and --durations-dir differ"

expect 0 "--durations-dir writes every step of the traces as its own duration file DIR/step-NNNNNN.json" -- \
  "$BIN" trace --help

# 3. Errors: a clear message, and nothing written.
nothing() { [ -e "$T/$1" ] && fail "$1 was written by a failed export"; rm -rf "${T:?}/$1"; }
expect 1 "2-stage pipeline but hold the tasks of ranks 0 \.\. 0 only; give every rank's file" -- \
  "$BIN" trace "$T/r0.json" --durations-dir "$T/x"
nothing x
expect 1 "step 5: no step span of rank 1" -- "$BIN" trace "$T/r0.json" "$T/r1_no5.json" --durations-dir "$T/x"
nothing x
while read -r name idx; do
  expect 1 "bad_$name\.json: traceEvents\[$idx\] = .*a step span" -- "$BIN" trace "$T/bad_$name.json" "$T/r1.json" \
    --durations-dir "$T/x"
  nothing x
done < <(python3 -c "import json, sys; [print(k, v) for k, v in json.load(open(sys.argv[1])).items()]" "$T/where.json")
expect 1 "no step spans" -- "$BIN" trace "$T/r0_nostep.json" "$T/r1_nostep.json" --durations-dir "$T/x"
nothing x
# without step spans --durations keeps its old reading (each task's last span: here the trailing forward)
expect 0 'durations of the last step: P=2 M=3' -- "$BIN" trace "$T/r0_nostep.json" "$T/r1_nostep.json" --durations "$T/old.json"
python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['F'][0][0] == 0.055 and d['F'][1][1] == 0.066, d['F']" "$T/old.json" || fail "--durations without step spans"
expect 1 "step 5: the F task of microbatch 1 on rank 0 appears twice" -- \
  "$BIN" trace "$T/r0_twice.json" "$T/r1.json" --durations-dir "$T/x"
nothing x
expect 1 "step 6: no W task of microbatch 2 on rank 1" -- "$BIN" trace "$T/r0.json" "$T/r1_cross.json" --durations-dir "$T/x"
nothing x
expect 1 "step 6: no W task of microbatch 2 on rank 1" -- "$BIN" trace "$T/r0.json" "$T/r1_cross.json" --durations "$T/x"
nothing x
expect 1 "the spans of steps 4 and 5 of rank 0 overlap" -- "$BIN" trace "$T/r0_over.json" "$T/r1.json" --durations-dir "$T/x"
nothing x
expect 1 "step 4: rank 0 has 2 step spans" -- "$BIN" trace "$T/r0.json" "$T/r0.json" "$T/r1.json" --durations-dir "$T/x"
nothing x
echo text >"$T/afile"
expect 2 "--durations-dir '$T/afile' exists and is not a directory" -- "$BIN" trace "$T/r0.json" "$T/r1.json" --durations-dir "$T/afile"
[ "$(cat "$T/afile")" = text ] || fail "the file named by --durations-dir was changed"
expect 2 "--durations-dir '$T/r1.json' is the input trace '$T/r1.json'" -- \
  "$BIN" trace "$T/r0.json" "$T/r1.json" --durations-dir "$T/r1.json"
expect 1 "cannot create directory '$T/nope/deeper'.*one level is created" -- \
  "$BIN" trace "$T/r0.json" "$T/r1.json" --durations-dir "$T/nope/deeper"
nothing nope
mkdir "$T/stale" && echo '{}' >"$T/stale/step-000009.json"
expect 1 "'$T/stale' holds step-000009.json, which is not a step of these traces \(steps 4 \.\. 6\)" -- \
  "$BIN" trace "$T/r0.json" "$T/r1.json" --durations-dir "$T/stale"
[ "$(ls "$T/stale")" = step-000009.json ] || fail "a refused export wrote into the folder: $(ls "$T/stale")"
# --svg beside a failing export writes nothing either (the files are built before anything is written)
expect 1 "step 5: no step span of rank 1" -- "$BIN" trace "$T/r0.json" "$T/r1_no5.json" --durations-dir "$T/x" --svg "$T/x.svg"
nothing x
nothing x.svg

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "trace steps: ok"
