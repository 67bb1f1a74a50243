#!/usr/bin/env bash
# replay_train.sh RRFP_MM RECIPE WORKDIR — `rrfp-mm train` with runtime.compute = replay:FILE under
# mpirun at P = 8 (docs/scheduler.md "The simulator's semantics", Replay): every task sleeps its duration from a duration file,
# the messages are the real ones. Checked from the per-rank traces, with nothing that depends on how
# fast this machine is:
#   - every rank ran every task of its stage once per step (F and B, or F, B and W), in `fixed` mode in
#     exactly the hint's order (`rrfp-mm sim --grid` of the same file);
#   - every task lasted at least its file duration x runtime.replay_scale (a sleep until a deadline);
#   - every message arrived with the size it was sent with, T x text_width x 4 bytes (sizes vary with
#     the microbatches: real messages of real sizes);
#   - `fixed` is monotone in its durations: with latency 0 in the file and every real task at least as
#     long as the file says, the measured makespan of a step is at least the simulator's (a bound, not
#     a timing comparison);
#   - `adaptive` under zb-h1 (a file with W) runs and reports its choice; bad files are refused by name.
set -euo pipefail
BIN=$1 RECIPE=$2 W=$3
rm -rf "$W"; mkdir -p "$W"
P=8 M=16 SCALE=0.01
fail() { echo "FAIL: $*"; exit 1; }
MPI=(timeout 120 mpirun --allow-run-as-root --oversubscribe -np $P)
COMMON=(--set train.steps=2 --set optim.warmup=1 --set train.log_every=1 --set parallel.pp=$P
        --set model.text_layers=$P --set data.microbatches=$M --set runtime.replay_scale=$SCALE --set runtime.trace=1)
"$BIN" sim --stages $P --microbatches $M --kind text --seed 1 --latency 0 --dump "$W/whole.json" --json >/dev/null
"$BIN" sim --stages $P --microbatches $M --kind mm --seed 2 --latency 0 --split-backward --dump "$W/split.json" --json >/dev/null
"$BIN" sim --durations "$W/whole.json" --mode fixed --hint 1f1b --grid --json 2>"$W/grid.txt" >"$W/sim.json"

"${MPI[@]}" "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$W/fixed" --set parallel.mode=fixed \
  --set parallel.hint=1f1b --set runtime.compute=replay:"$W/whole.json" >"$W/fixed.log" 2>&1 \
  || { cat "$W/fixed.log"; fail "replay fixed 1f1b"; }
grep -q "compute: replay:" "$W/fixed.log" || fail "the start line does not name the replay"
"${MPI[@]}" "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$W/adaptive" --set parallel.mode=adaptive \
  --set parallel.hint=zb-h1 --set runtime.cap=1.5x --set runtime.compute=replay:"$W/split.json" >"$W/adaptive.log" 2>&1 \
  || { cat "$W/adaptive.log"; fail "replay adaptive zb-h1"; }
grep -q "adaptive: step 1 runs" "$W/adaptive.log" || { cat "$W/adaptive.log"; fail "adaptive does not report its choice"; }

/usr/bin/python3 - "$W" $P $M $SCALE <<'PY' || exit 1
import json, re, sys
W, P, M, scale = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
Dt = 64  # the recipe's text_width
def fail(msg):
    print("FAIL:", msg); sys.exit(1)
grid = {}
for line in open(f"{W}/grid.txt"):
    m = re.match(r"\s+r(\d+) (.*)", line)
    if m: grid[int(m.group(1))] = m.group(2).split()  # the last block is the executed order
sim = json.load(open(f"{W}/sim.json"))
for run, fname, hint_order in (("fixed", "whole", True), ("adaptive", "split", False)):
    d = json.load(open(f"{W}/{fname}.json"))
    kinds = "FBW" if "W" in d else "FB"
    sends, recvs = {}, {}
    spans = {}  # step -> [min start, max end]
    for r in range(P):
        ev = json.load(open(f"{W}/{run}/trace-rank{r}.json"))
        ev = ev["traceEvents"] if isinstance(ev, dict) else ev
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and e.get("cat") == "step")
        if len(steps) != 2: fail(f"{run}: rank {r} traced {len(steps)} steps, expected 2")
        tasks = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("F", "B", "W")]
        for k, (s0, s1) in enumerate(steps):
            mine = sorted((e for e in tasks if s0 - 1 <= e["ts"] <= s1 + 1), key=lambda e: e["ts"])
            names = [e["cat"] + str(e["args"]["mb"]) for e in mine]
            want = sorted(c + str(m) for c in kinds for m in range(M))
            if sorted(names) != want: fail(f"{run}: rank {r} step {k + 1} ran {len(names)} tasks, not each of {len(want)} once")
            if hint_order and [str(r) + n for n in names] != grid[r]:
                fail(f"{run}: rank {r} step {k + 1} ran {names[:8]}..., not the hint's order {grid[r][:8]}...")
            for e in mine:
                want_s = d[e["cat"]][r][e["args"]["mb"]] * scale
                if e["dur"] * 1e-6 < want_s - 2e-6:
                    fail(f"{run}: rank {r} {e['cat']}{e['args']['mb']} lasted {e['dur']} us, the file says {want_s * 1e6:.0f} us")
            sp = spans.setdefault(k, [float("inf"), 0])
            sp[0] = min(sp[0], mine[0]["ts"]); sp[1] = max(sp[1], mine[-1]["ts"] + mine[-1]["dur"])
        for e in ev:
            if e.get("cat") != "p2p": continue
            m = re.match(r"(send|recv) ([FB])(\d+) (->|<-) r(\d+)", e["name"])
            if not m: continue
            peer = int(m.group(5))
            key = (m.group(2), e["args"]["mb"], r, peer) if m.group(1) == "send" else (m.group(2), e["args"]["mb"], peer, r)
            (sends if m.group(1) == "send" else recvs).setdefault(key, []).append(e["args"]["bytes"])
    if sorted(sends) != sorted(recvs): fail(f"{run}: sends and receives do not pair up")
    want_msgs = 2 * (P - 1) * M
    if len(sends) != want_msgs: fail(f"{run}: {len(sends)} distinct messages per step, expected {want_msgs}")
    sizes = set()
    for k, v in sends.items():
        if v != recvs[k] or len(v) != 2: fail(f"{run}: message {k}: sent {v} bytes, received {recvs[k]}")
        if v[0] <= 0 or v[0] % (4 * Dt): fail(f"{run}: message {k} of {v[0]} bytes is not T x {Dt} floats")
        sizes.add(v[0])
    if len(sizes) < 2: fail(f"{run}: every message has the same size {sizes}: not the microbatches' own")
    if run == "fixed":
        for k, (a, b) in spans.items():
            measured = (b - a) * 1e-6
            if measured < sim["makespan"] * scale - 1e-5:
                fail(f"fixed: step {k + 1} measured {measured:.4f} s < the simulator's {sim['makespan'] * scale:.4f} s")
            print(f"fixed 1f1b step {k + 1}: measured {measured:.3f} s, simulated {sim['makespan'] * scale:.3f} s "
                  f"(ratio {measured / (sim['makespan'] * scale):.3f}, printed, not asserted)")
    print(f"{run}: {P} ranks x 2 steps: every task once, durations >= the file's, {len(sends)} messages of {len(sizes)} sizes")
PY
grep "adaptive: step" "$W/adaptive.log"
# refused by name: a file of the wrong shape, and W missing for a hint that splits
out=$("${MPI[@]}" "$BIN" train "$RECIPE" "${COMMON[@]}" --set train.run_dir="$W/bad" --set parallel.hint=zb-h1 \
  --set runtime.compute=replay:"$W/whole.json" 2>&1) && fail "a file without W accepted for zb-h1"
grep -q "has no W durations" <<<"$out" || { echo "$out"; fail "no message naming the missing W"; }
out=$("$BIN" train "$RECIPE" --set runtime.compute=replay:"$W/whole.json" 2>&1) && fail "replay accepted with pp = 1"
grep -q "parallel.pp > 1" <<<"$out" || { echo "$out"; fail "no message naming parallel.pp"; }
echo "replay train: ok"
