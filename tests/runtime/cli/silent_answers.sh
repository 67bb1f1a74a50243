#!/usr/bin/env bash
# silent_answers.sh — arguments and files that used to give a wrong answer with exit 0
# (docs/reliability.md "Answers that are right or refused"), each now refused with a message (or answered right):
#   sim --latency 1e308            was: nan efficiency, rc 0        now: exit 2 naming the latency
#   sim --calibrated --jitter 10   was: every duration 0            now: exit 2, jitter range
#   trace r0.json --durations      was: a P=1 file of a P=2 run     now: exit 1 "give every rank's file";
#                                  both ranks' files give P=2 (and the same file sim reads back)
#   trace t.json --svg t.json      was: the input overwritten       now: exit 2, the input untouched
#   train --dry-run, 4194304 tokens x 512 microbatches   was: tokens per step -2147483648   now: 2147483648
# (tensors diff --atol nan: test_tensors_diff.sh; --set optim.lr=1e-400: recipe_unit.)
# Usage: silent_answers.sh RRFP_MM SOURCE_DIR WORKDIR
set -u
BIN=$1 SRC=$2 T=$3
case "$T" in /tmp/* | */build*/*) ;; *) echo "refusing work dir '$T'"; exit 2 ;; esac
rm -rf "$T" && mkdir -p "$T" || exit 2
. "$SRC/tests/support/util/expect_lib.sh" # fail, expect RC PATTERN -- CMD...

# 1. sim: generated durations get a duration file's checks
expect 2 'generated durations: the latency 1e\+308 times the messages of a step .* is not finite' -- \
  "$BIN" sim --stages 2 --microbatches 4 --latency 1e308
expect 2 'generated durations: the latency 1e\+307 times' -- "$BIN" sim --stages 64 --microbatches 64 --latency 1e307
# a large but finite latency still answers, with finite figures
"$BIN" sim --stages 2 --microbatches 4 --latency 1e200 --json >"$T/out" 2>&1 || fail "sim --latency 1e200: $(cat "$T/out")"
python3 -c "
import json, math, sys
o = json.load(open(sys.argv[1]))
assert all(math.isfinite(o[k]) for k in ('makespan', 'lower_bound', 'efficiency', 'bubble')), o" "$T/out" ||
  fail "sim --latency 1e200 printed a non-finite figure: $(cat "$T/out")"
R7=$SRC/recipes/llava-1.5-7b.ini
expect 2 'jitter 10 is out of range; allowed: 0 <= jitter <= 1' -- "$BIN" sim --calibrated "$R7" --stages 8 --microbatches 8 --jitter 10
expect 2 'jitter 1.5 is out of range' -- "$BIN" sim --calibrated "$R7" --stages 8 --microbatches 8 --jitter 1.5
"$BIN" sim --calibrated "$R7" --stages 8 --microbatches 8 --jitter 1 --dump "$T/j1.json" --json >/dev/null 2>"$T/err" ||
  fail "sim --jitter 1 (the largest allowed): $(cat "$T/err")"
python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert all(x > 0 for k in 'FB' for row in d[k] for x in row), 'a zero duration'" "$T/j1.json" || fail "jitter 1 durations"

# 2. trace --durations of a 2-stage run: rank 0's file alone is refused, both give P=2
"$BIN" sim --stages 2 --microbatches 4 --trace "$T/t.json" >/dev/null || fail "sim --trace"
python3 - "$T" <<'EOF' || fail "split the trace"
import json, sys
T = sys.argv[1]
ev = json.load(open(T + "/t.json"))["traceEvents"]
for r in (0, 1):
    json.dump({"traceEvents": [e for e in ev if e.get("pid") == r]}, open(f"{T}/r{r}.json", "w"))
# a trace written before the "stages" argument: the pipeline's size comes from the peers its messages name
old = []
for e in ev:
    if e.get("pid") == 0:
        e = json.loads(json.dumps(e))
        e.get("args", {}).pop("stages", None)
        old.append(e)
json.dump({"traceEvents": old}, open(T + "/old0.json", "w"))
bad = json.loads(json.dumps(ev))
[e for e in bad if e.get("ph") == "X" and e.get("cat") == "F"][0]["args"]["mb"] = 1e20
json.dump({"traceEvents": bad}, open(T + "/bigmb.json", "w"))
EOF
expect 1 "2-stage pipeline but hold the tasks of ranks 0 .. 0 only; give every rank's file" -- \
  "$BIN" trace "$T/r0.json" --durations "$T/d0.json"
[ -e "$T/d0.json" ] && fail "trace --durations wrote a file from rank 0's trace alone"
expect 1 "2-stage pipeline but hold the tasks of ranks 0 .. 0 only" -- "$BIN" trace "$T/old0.json" --durations "$T/d0.json"
expect 0 'P=2 M=4' -- "$BIN" trace "$T/r0.json" "$T/r1.json" --durations "$T/d2.json"
expect 0 'P=2 M=4' -- "$BIN" trace "$T/old0.json" "$T/r1.json" --durations "$T/d2old.json"   # an older file beside a newer
python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['stages'] == 2 and d['microbatches'] == 4 and len(d['F']) == 2, d" "$T/d2.json" || fail "the P=2 duration file"
expect 0 'makespan' -- "$BIN" sim --durations "$T/d2.json"
# an "mb" beyond 2^20 (its +1 overflowed an int) is refused naming the event
expect 1 'bigmb.json: traceEvents\[[0-9]+\] = .*integer "mb"' -- "$BIN" trace "$T/bigmb.json" --durations "$T/x.json"

# 3. trace: an output that is an input is refused and the input kept
cp "$T/t.json" "$T/keep.json"
expect 2 "--svg '$T/t.json' is the input trace '$T/t.json'; refusing to overwrite an input" -- \
  "$BIN" trace "$T/t.json" --svg "$T/t.json"
ln -s t.json "$T/link.json"
expect 2 "--json '$T/link.json' is the input trace '$T/t.json'" -- "$BIN" trace "$T/t.json" --json "$T/link.json"
expect 2 "--durations '$T/./r1.json' is the input trace '$T/r1.json'" -- \
  "$BIN" trace "$T/r0.json" "$T/r1.json" --durations "$T/./r1.json"
expect 2 "--svg and --json name the same file" -- "$BIN" trace "$T/t.json" --svg "$T/o.svg" --json "$T/o.svg"
cmp -s "$T/t.json" "$T/keep.json" || fail "an input trace was changed"
expect 0 'task spans from 1 file' -- "$BIN" trace "$T/t.json" --svg "$T/t.svg"

# 4. the dry run's tokens per step in 64 bits (the recipe allows 2^22 x 2^16 x 2^20)
expect 0 'tokens per step: 4194304 x 512 microbatches x dp 1 = 2147483648' -- "$BIN" train "$SRC/recipes/test-synthetic.ini" \
  --dry-run --set data.microbatch_tokens=4194304 --set data.microbatches=512 --set data.max_patches=16

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "silent answers: ok"
