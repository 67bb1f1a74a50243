#!/usr/bin/env bash
# train_profile_emu.sh — runtime.profile and the device memory figures end to end on the
# emulated CUDA backend: 3 bf16 steps of one fixed batch with runtime.profile = true, then
#   1. every metrics.jsonl row has "profile" with every op kind, launches > 0 for gemm, attention, norm,
#      elementwise, optimiser and copies and 0 for communication (one process), times >= 0, and the same
#      launch counts in every step but the first's AdamW table copy (the same batch runs the same ops: the counts are exact, as
#      tests/engine/cuda/test_traffic.c checks against the emulation's own log);
#   2. every row has "device_peak_mb" > 0 (the backend's high-water mark) and "device_used_mb" >= it, and
#      the step log shows "device peak";
#   3. the log ends with the profile summary (one line per kind), and `rrfp-mm report` shows the Device
#      section with the per-kind table;
#   4. runtime.profile on the CPU backend is refused with a message naming the key;
#   5. the dry run's memory estimate for the rank equals the device peak within 10%;
#   6. the peak's split by kind (device_peak_split_mb) sums to it and its weights, gradients and moments equal the
#      dry run's columns within 10%.
# Usage: train_profile_emu.sh RRFP_MM_EMU RRFP_MM RECIPE WORKDIR
set -euo pipefail
EMU=$1 EXE=$2 RECIPE=$3 WORK=$4
rm -rf "$WORK"
mkdir -p "$WORK"
common=(--set train.steps=3 --set optim.warmup=1 --set train.log_every=1 --set checkpoint.keep=0
        --set train.checkpoint_every=0 --set data.fixed_batch=true --set data.source=synthetic)
"$EMU" train "$RECIPE" "${common[@]}" --set runtime.backend=cuda --set runtime.precision=bf16 \
  --set runtime.profile=true --set train.run_dir="$WORK/run" > "$WORK/log" 2>&1 || { cat "$WORK/log"; exit 1; }
cat "$WORK/log"
/usr/bin/python3 - "$WORK/run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3, len(rows)
kinds = ["gemm", "attention", "norm", "elementwise", "optimiser", "copies", "communication"]
counts = []
for r in rows:
    p = r["profile"]
    assert sorted(p) == sorted(kinds), p
    for k in kinds:
        assert p[k]["ms"] >= 0, (r["step"], k, p[k])
        assert (p[k]["launches"] > 0) == (k != "communication"), (r["step"], k, p[k])
    counts.append([p[k]["launches"] for k in kinds])
    assert r["device_peak_mb"] > 0 and r["device_used_mb"] >= r["device_peak_mb"], r
# the first step also copies the multi-tensor AdamW's chunk table to the device (optimiser: one more)
opt = kinds.index("optimiser")
first = list(counts[0])
first[opt] -= 1
assert first == counts[1] == counts[2], counts
print("profile rows ok:", dict(zip(kinds, counts[0])), "device peak", rows[-1]["device_peak_mb"], "MiB")
PY
grep -q "| device peak [0-9.]* MiB" "$WORK/log" || { echo "no device peak in the step log"; exit 1; }
# 5. the dry run's estimate of the rank's memory (bf16 compute copy and GEMM scratch included) is the
#    measured device peak within 10%
"$EXE" train "$RECIPE" "${common[@]}" --set runtime.backend=cuda --set runtime.precision=bf16 --dry-run > "$WORK/dry.log" 2>&1 \
  || { cat "$WORK/dry.log"; exit 1; }
/usr/bin/python3 - "$WORK/dry.log" "$WORK/run/metrics.jsonl" <<'PY'
import json, re, sys
m = re.search(r"largest rank: ([0-9.]+) (KiB|MiB|GiB)", open(sys.argv[1]).read())
est = float(m.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)]
peak = json.loads(open(sys.argv[2]).readlines()[-1])["device_peak_mb"]
print("dry-run estimate %.2f MiB, device peak %.2f MiB" % (est, peak))
assert abs(est - peak) <= 0.1 * peak, (est, peak)
# 6. the peak split by what it held (device_peak_split_mb): the kinds sum to the peak (each printed to 1e-3 MiB,
#    the peak to 0.1), weights, gradients, optimiser moments and activations all present, and the tables' three
#    equal to the dry run's columns for the rank within 10% (they are the same sizes, rounded for printing)
row = json.loads(open(sys.argv[2]).readlines()[-1])
split = row["device_peak_split_mb"]
assert sorted(split) == ["acts", "grads", "optim", "weights", "workspace"], split
assert abs(sum(split.values()) - peak) <= 0.06, (split, peak)
assert all(split[k] > 0 for k in ("weights", "grads", "optim", "acts")), split
unit = {"B": 1 / 1048576, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}
cols = None
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 15 and f[0] == "0" and f[4] in unit:  # rank 0: layers, params, then (value, unit) for weights .. total
        cols = [float(f[i]) * unit[f[i + 1]] for i in range(3, 15, 2)]
assert cols, "no rank 0 row in the dry run"
for k, c in (("weights", 0), ("grads", 1), ("optim", 2)):
    assert abs(split[k] - cols[c]) <= 0.1 * cols[c], (k, split[k], cols[c])
print("device peak split (MiB):", split, "dry run weights / grads / adam:", cols[:3])
PY
for k in gemm attention norm elementwise optimiser copies communication total; do
  grep -Eq "^  $k +[0-9.]+ ms" "$WORK/log" || { echo "no '$k' line in the profile summary"; exit 1; }
done
"$EXE" report "$WORK/run" --out "$WORK/report.html" > /dev/null 2>&1 || { echo "report failed"; exit 1; }
grep -q 'id="device"' "$WORK/report.html" && grep -q "GPU ms / step" "$WORK/report.html" \
  || { echo "the report has no Device section with the profile"; exit 1; }
if "$EXE" train "$RECIPE" "${common[@]}" --set runtime.profile=true --set train.run_dir="$WORK/cpu" > "$WORK/cpu.log" 2>&1; then
  echo "runtime.profile on the cpu backend was accepted"; exit 1
fi
grep -q "runtime.profile" "$WORK/cpu.log" || { cat "$WORK/cpu.log"; echo "the refusal does not name runtime.profile"; exit 1; }
echo "train profile emu: ok"
