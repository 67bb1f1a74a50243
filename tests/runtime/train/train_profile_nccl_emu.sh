#!/usr/bin/env bash
# train_profile_nccl_emu.sh — runtime.profile's `communication` kind: 2 bf16 steps of one fixed
# batch with parallel.pp = 2 and runtime.comm = nccl on the emulated CUDA runtime and NCCL under mpirun.
# Rank 0 (the log rank, stage 0) sends each microbatch's hidden state and receives its gradient over
# NCCL and takes part in the NCCL all-reduces of the step end, so its metrics rows must show
# communication operations (> 0; the same count in steps 2 and 3, the same batch; step 1 also carries the
# run's one-time exchanges) beside the compute kinds.
# Usage: train_profile_nccl_emu.sh RRFP_MM_EMU RECIPE WORKDIR MPIRUN...
set -euo pipefail
EMU=$1 RECIPE=$2 WORK=$3
shift 3
MPIRUN=("$@")
export OMP_NUM_THREADS=1
unset RR_EMU_PROTECT
rm -rf "$WORK"
mkdir -p "$WORK"
timeout 300 "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS=1 "$EMU" train "$RECIPE" --set train.steps=3 --set optim.warmup=1 \
  --set train.log_every=1 --set checkpoint.keep=0 --set train.checkpoint_every=-1 --set data.fixed_batch=true \
  --set data.source=synthetic --set runtime.backend=cuda --set runtime.precision=bf16 --set runtime.comm=nccl \
  --set parallel.pp=2 --set runtime.profile=true --set train.run_dir="$WORK/run" > "$WORK/log" 2>&1 \
  || { cat "$WORK/log"; exit 1; }
grep -E "^step|^  (gemm|communication) " "$WORK/log" || true
/usr/bin/python3 - "$WORK/run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3, rows
comm = [r["profile"]["communication"]["launches"] for r in rows]
# step 1 also carries the run's one-time exchanges; steps 2 and 3 run the same batch the same way
assert all(c > 0 for c in comm) and comm[1] == comm[2] and comm[0] >= comm[1], comm
assert all(r["profile"]["gemm"]["launches"] > 0 for r in rows), rows
print("communication operations per step:", comm)
PY
grep -Eq "^  communication +[0-9.]+ ms" "$WORK/log" || { echo "no communication line in the profile summary"; exit 1; }
echo "train profile nccl emu: ok"
