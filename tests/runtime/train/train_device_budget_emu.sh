#!/usr/bin/env bash
# train_device_budget_emu.sh — the default memory budget: with runtime.memory_budget unset, a device backend's rank
# must fit the device's memory less the reserve (runtime/train/layout.h, TRAIN_DEVICE_RESERVE). The emulated CUDA
# device is made small (RR_EMU_DEVICE_MB: cudaMemGetInfo reports it and cudaMalloc fails past it):
#   1. the dry run on it prints the budget from the device, refuses the layout (exit 1) naming the device's memory
#      and the rank's need, and lists changes that fit;
#   2. the run itself is refused the same way before its first step (no metrics row);
#   3. the first suggested change, applied, passes the dry run within the budget and trains on the same small
#      device, its device peak within the device;
#   4. runtime.allow_overcommit = 1 drops the default: the refused layout then starts and runs out of the emulated
#      device's memory (the refusal was right);
#   5. runtime.memory_budget, when set, is the budget whatever the device;
#   6. without a device (RRFP_MM, built here without CUDA) and on the cpu backend: no default, said so;
#   7. a pp 2 run over the emulated NCCL: rank 0's device peak within the dry run's figure (its message buffers
#      counted) and the reserve.
# Usage: train_device_budget_emu.sh RRFP_MM_EMU RRFP_MM RECIPE WORKDIR
set -uo pipefail
# a process that exits without MPI_Finalize (the run out of the device's memory in 4.) leaves its Open MPI session folder: this
# test's own (CMakeLists.txt gives each test one), removed when the script ends
trap '[ -z "${OMPI_MCA_orte_top_session_dir:-}" ] || rm -rf "$OMPI_MCA_orte_top_session_dir"' EXIT
EMU=$1 EXE=$2 RECIPE=$3 WORK=$4
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$WORK"
mkdir -p "$WORK"
export RR_EMU_DEVICE_MB=8.4
common=(--set runtime.backend=cuda --set train.steps=1 --set optim.warmup=1 --set data.source=synthetic
        --set train.checkpoint_every=0 --set checkpoint.keep=0 --set train.log_every=1)

# 1. refused by the dry run, with the device's memory named and changes that fit
"$EMU" train "$RECIPE" "${common[@]}" --dry-run >"$WORK/dry" 2>"$WORK/dry.err" && fail "dry run on an 8.4 MiB device passed: $(cat "$WORK/dry")"
cat "$WORK/dry" "$WORK/dry.err"
grep -q "^memory budget: 8.0 MiB per rank (runtime.memory_budget unset: the device's 8.4 MiB less a 5% reserve" "$WORK/dry" ||
  fail "the dry run does not print the device's budget"
grep -q "the device's memory (8.4 MiB less a 5% reserve: 8.0 MiB; runtime.memory_budget unset): rank 0 needs" "$WORK/dry.err" ||
  fail "the refusal does not name the device's memory: $(cat "$WORK/dry.err")"
fix=$(sed -n 's/.*changes that fit: \([^;]*\).*/\1/p' "$WORK/dry.err")
[ -n "$fix" ] && [ "${fix#--set }" != "$fix" ] || fail "no change that fits is suggested: $(cat "$WORK/dry.err")"
echo "first suggestion: $fix"
read -r -a fixargs <<<"$fix"

# 2. the run is refused before it starts
"$EMU" train "$RECIPE" "${common[@]}" --set train.run_dir="$WORK/refused" >"$WORK/refused.log" 2>&1 &&
  fail "training on an 8.4 MiB device started: $(cat "$WORK/refused.log")"
grep -q "the device's memory (8.4 MiB less a 5% reserve" "$WORK/refused.log" || fail "the run's refusal: $(cat "$WORK/refused.log")"
[ ! -s "$WORK/refused/metrics.jsonl" ] || fail "the refused run wrote metrics"

# 3. the suggestion fits and trains on the same device
"$EMU" train "$RECIPE" "${common[@]}" "${fixargs[@]}" --dry-run >"$WORK/fix.dry" 2>&1 || fail "with $fix: $(cat "$WORK/fix.dry")"
grep -q "^  0 .* <= 8.0 MiB$" "$WORK/fix.dry" || fail "with $fix the rank is not within the budget: $(cat "$WORK/fix.dry")"
"$EMU" train "$RECIPE" "${common[@]}" "${fixargs[@]}" --set train.run_dir="$WORK/fits" >"$WORK/fits.log" 2>&1 ||
  fail "with $fix the run failed: $(cat "$WORK/fits.log")"
/usr/bin/python3 - "$WORK/fits/metrics.jsonl" <<'PY' || fail "the fitted run's metrics"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 1, rows
peak = rows[0]["device_peak_mb"]
assert 0 < peak <= 8.4, peak
print("fitted run: loss %.4f, device peak %.2f MiB of 8.4" % (rows[0]["loss"], peak))
PY

# 4. without the default the refused layout runs out of the device
"$EMU" train "$RECIPE" "${common[@]}" --set runtime.allow_overcommit=1 --set train.run_dir="$WORK/over" >"$WORK/over.log" 2>&1 &&
  fail "the overcommitted run fitted an 8.4 MiB device: the refusal was wrong"
grep -q "cudaErrorMemoryAllocation" "$WORK/over.log" || fail "the overcommitted run failed otherwise: $(cat "$WORK/over.log")"

# 5. an explicit runtime.memory_budget wins over the device
"$EMU" train "$RECIPE" "${common[@]}" --set runtime.memory_budget=1 --dry-run >"$WORK/explicit" 2>&1 ||
  fail "runtime.memory_budget = 1: $(cat "$WORK/explicit")"
grep -q "^memory budget: 1 GiB per rank (runtime.memory_budget)" "$WORK/explicit" || fail "runtime.memory_budget = 1 not taken"

# 6. no device, and the cpu backend: no default
"$EXE" train "$RECIPE" "${common[@]}" --dry-run >"$WORK/nodev" 2>&1 || fail "no device: $(cat "$WORK/nodev")"
grep -q "no device memory to budget by here" "$WORK/nodev" && grep -q "^memory budget: none" "$WORK/nodev" ||
  fail "no device: $(cat "$WORK/nodev")"
"$EMU" train "$RECIPE" "${common[@]}" --set runtime.backend=cpu --dry-run >"$WORK/cpu" 2>&1 || fail "cpu: $(cat "$WORK/cpu")"
grep -q "^memory budget: none (runtime.memory_budget unset; the cpu backend has no default" "$WORK/cpu" || fail "cpu: $(cat "$WORK/cpu")"
# 7. a pipeline over NCCL holds its message buffers on the device (a receive buffer per microbatch per direction, the
#    send pool, the outgoing message's): the dry run counts them in the workspace, so rank 0's measured device peak
#    stays within its figure and the reserve (16 microbatches: the buffers are a third of the rank's need)
pp=(--set runtime.backend=cuda --set runtime.comm=nccl --set parallel.pp=2 --set data.microbatches=16 --set train.steps=2
    --set optim.warmup=1 --set data.source=synthetic --set train.checkpoint_every=0 --set checkpoint.keep=0 --set train.log_every=1)
RR_EMU_DEVICE_MB=64 "$EMU" train "$RECIPE" "${pp[@]}" --dry-run >"$WORK/pp.dry" 2>&1 || fail "pp 2 nccl dry run: $(cat "$WORK/pp.dry")"
timeout 240 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 -x RR_EMU_DEVICE_MB=64 \
  "$EMU" train "$RECIPE" "${pp[@]}" --set train.run_dir="$WORK/pp" >"$WORK/pp.log" 2>&1 || fail "pp 2 nccl run: $(tail -20 "$WORK/pp.log")"
/usr/bin/python3 - "$WORK/pp.dry" "$WORK/pp/metrics.jsonl" <<'PY' || fail "pp 2 over nccl: the dry run's figure"
import json, re, sys
unit = {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}
row = next(l for l in open(sys.argv[1]) if re.match(r"\s+0\s+\S+\s", l))
vals = [float(v) * unit[u] for v, u in re.findall(r"([0-9.]+) (KiB|MiB|GiB)", row.split("<=")[0])]
total = vals[-1]
peak = max(json.loads(l)["device_peak_mb"] for l in open(sys.argv[2]))
print("pp 2 over nccl, 16 microbatches: rank 0's device peak %.2f MiB, the dry run's %.2f MiB (+%.0f%% reserve)"
      % (peak, total, 100 * 0.05))
assert peak <= total * 1.05, "the device peak %.2f MiB is over the dry run's %.2f MiB and its reserve: %s" % (peak, total, row)
PY
echo "device budget emu: ok"
