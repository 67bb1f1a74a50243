#!/usr/bin/env bash
# train_nccl_emu.sh — training with runtime.backend = cuda and runtime.comm = nccl under mpirun, on the
# emulated CUDA runtime and NCCL (rrfp-mm-emu: tests/support/cuda_emu, NCCL over MPI), against the CPU backend's
# one-process run of the same global step (the synthetic source gives replica d microbatches d, d + DP,
# ..., so one process with DP x M microbatches trains on their union; tests/runtime/train/dp_train.sh).
#   - every step's loss and grad norm within TOL (below);
#   - RR_EMU_COMM_DELAY (default 2): every NCCL receive completes 2..4 polls after its message came and
#     its buffer holds NaN until then: a task that read its input before the receive's event completed
#     would turn the loss NaN (the control of that mechanism: tests/runtime/comm/test_nccl_emu.c);
#   - RR_EMU_COMPUTE_DELAY (default 2, CDELAY): every kernel, GEMM and copy finishes 2..4 polls after it
#     reached the head of its stream, so a send, a DP bucket or a TP all-reduce that does not wait for its
#     producer's event reads the buffer before the producer wrote it (stale activations, or NaN in a
#     pool buffer's first use) and the losses leave the tolerance (the control: tests/runtime/comm/test_nccl_emu.c.
#     Tried by hand: deleting the wait for the producer before a pipeline send (transport.c,
#     isend_copy_dev) made train_nccl_emu_pp2 fail at step 1 with loss NaN; with CDELAY=0 the same
#     deletion passed, which is the gap this closes);
#   - RR_EMU_STEP_ALLOCS: no cudaMalloc on any rank in steps 2..STEPS (a stage's memory is allocated in
#     its first step, then reused), and NCCL operations were issued;
#   - no MPI in steps 2..STEPS on any rank: no collective and no point-to-point through comm/'s MPI groups
#     (comm_mpi_counts, printed at each step end by tests/support/cuda_emu/wrap.c): the step's scalars (the plan's
#     totals, the loss sum, the gradient norm, the stop flag, the vocabulary-parallel cross-entropy's row
#     statistics) travel over NCCL; MPI carries the job start and the unique ids only (step 1's count
#     includes them and is not checked);
#   - with PP > 1, the pipeline's start line names comm nccl.
# TOL 1e-5 relative: as train_cuda_emu.sh's TOL_CPU (the CUDA kernels against the CPU's; the pipeline and
# the DP all-reduce reorder fp32 sums by ~1e-7 more, tests/runtime/train/dp_train.sh). PRECISION=bf16: 2e-2, the bound
# of train_cuda_emu.sh's bf16 run and for the same reason (flips of the bf16 compute copy after step 1);
# it also checks that the bf16 GEMMs' scratch, sized by BackendDevice.reserve, never grows in a step.
# Memory protection stays on.
# Environment: MODE (ready), HINT (1f1b), DELAY (2), PRECISION (fp32), TP (1: parallel.tp; the TP
# all-reduces then run in place on the device group, and the pipeline's leader-decides choices travel
# over it), SETS (more section.key=value overrides for both runs, blank-separated).
# Usage: train_nccl_emu.sh RRFP_MM_EMU RRFP_MM RECIPE WORKDIR STEPS PP DP M MPIRUN...
set -euo pipefail
EMU=$1 CPU=$2 RECIPE=$3 WORK=$4 STEPS=$5 PP=$6 DP=$7 M=$8
shift 8
MPIRUN=("$@")
MODE=${MODE:-ready} HINT=${HINT:-1f1b} DELAY=${DELAY:-2} CDELAY=${CDELAY:-2} PRECISION=${PRECISION:-fp32} TP=${TP:-1}
unset RR_EMU_PROTECT
export OMP_NUM_THREADS=1
rm -rf "$WORK"
mkdir -p "$WORK"
common=(--set train.steps="$STEPS" --set optim.warmup=1 --set train.log_every=1 --set checkpoint.keep=0
        --set runtime.precision="$PRECISION")
for kv in ${SETS:-}; do common+=(--set "$kv"); done
echo "== CPU backend, one process: $STEPS steps of $((DP * M)) microbatches"
"$CPU" train "$RECIPE" "${common[@]}" --set data.microbatches=$((DP * M)) --set train.run_dir="$WORK/cpu" >"$WORK/cpu.log" 2>&1 \
  || { cat "$WORK/cpu.log"; exit 1; }
NP=$((PP * DP * TP))
echo "== CUDA backend + NCCL (emulated), pp $PP x tp $TP x dp $DP ($NP ranks), mode $MODE, hint $HINT, RR_EMU_COMM_DELAY=$DELAY, RR_EMU_COMPUTE_DELAY=$CDELAY"
timeout 400 "${MPIRUN[@]}" -np "$NP" -x OMP_NUM_THREADS=1 -x RR_EMU_COMM_DELAY="$DELAY" -x RR_EMU_COMPUTE_DELAY="$CDELAY" \
  -x RR_EMU_STEP_ALLOCS=1 \
  "$EMU" train "$RECIPE" "${common[@]}" --set runtime.backend=cuda --set runtime.comm=nccl \
  --set parallel.pp="$PP" --set parallel.dp="$DP" --set parallel.tp="$TP" --set data.microbatches="$M" --set parallel.mode="$MODE" \
  --set parallel.hint="$HINT" --set train.run_dir="$WORK/nccl" >"$WORK/nccl.log" 2>&1 || { cat "$WORK/nccl.log"; exit 1; }
grep -E "^step|pipeline:|cuda-emu" "$WORK/nccl.log" || true
# SETS took effect (a test named for a model variant must have trained that variant): in the CPU run's
# recipe.ini, and the NCCL run's last checkpoint has the same recipe hash (the hashed keys: the model's)
for kv in ${SETS:-}; do
  k=${kv#*.}; k=${k%%=*}; v=${kv#*=}
  grep -qx "$k = $v" "$WORK/cpu/recipe.ini" || { echo "FAIL: the CPU run: $kv not in its recipe.ini"; exit 1; }
done
if [ -n "${SETS:-}" ]; then
  h=() ; for run in cpu nccl; do
    st=$(ls -d "$WORK/$run"/checkpoints/step-* | tail -1)/state.json
    h+=("$(sed -n 's/.*"recipe_hash":[[:space:]]*"\([0-9a-f]*\)".*/\1/p' "$st")")
  done
  [ -n "${h[0]}" ] && [ "${h[0]}" = "${h[1]}" ] || { echo "FAIL: recipe hashes differ (cpu ${h[0]}, nccl ${h[1]}): SETS not applied alike"; exit 1; }
fi

/usr/bin/python3 - "$WORK" "$STEPS" "$PP" "$NP" "$PRECISION" <<'PY'
import json, re, sys
work, steps, pp, np_ = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
TOL = 2e-2 if sys.argv[5] == "bf16" else 1e-5
ok = True
def rows(name):
    r = [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (work, name))]
    assert [x["step"] for x in r] == list(range(1, steps + 1)), (name, [x["step"] for x in r])
    return r
worst = 0.0
for a, b in zip(rows("nccl"), rows("cpu")):
    la, lb = float.fromhex(a["loss_hex"]), float.fromhex(b["loss_hex"])
    e = max(abs(la - lb) / abs(lb), abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"]))
    worst = max(worst, e)
    if not e <= TOL:
        print("MISMATCH step %d: loss %s vs %s, grad norm %.9g vs %.9g (relative %.2e > %.0e)"
              % (a["step"], a["loss_hex"], b["loss_hex"], a["grad_norm"], b["grad_norm"], e, TOL))
        ok = False
print("nccl vs cpu: %d steps, worst relative difference of loss / grad norm %.2e (tolerance %.0e)" % (steps, worst, TOL))
log = open("%s/nccl.log" % work).read()
ends = re.findall(r"cuda-emu: rank (\d+) step-end (\d+): (\d+) cudaMalloc calls since the previous one, (\d+) NCCL "
                  r"operations so far, (\d+) MPI collectives and (\d+) MPI point-to-point", log)
per_rank, mpi = {}, {}
for r, s, n, ops, coll, p2p in ends:
    per_rank.setdefault(int(r), []).append((int(s), int(n), int(ops)))
    mpi.setdefault(int(r), []).append((int(s), int(coll), int(p2p)))
if sorted(per_rank) != list(range(np_)):
    print("STEP ALLOCS: expected step-end lines from ranks 0..%d, got %s" % (np_ - 1, sorted(per_rank)))
    ok = False
for r, v in sorted(per_rank.items()):
    later = [n for s, n, _ in v if 2 <= s <= steps]
    if len(later) != steps - 1 or any(later):
        print("STEP ALLOCS: rank %d: cudaMalloc calls in steps 2..%d: %s" % (r, steps, later))
        ok = False
    if not v or v[-1][2] == 0:
        print("rank %d issued no NCCL operation" % r)
        ok = False
print("cudaMalloc in steps 2..%d: %s; NCCL operations per rank: %s" % (steps, "none" if ok else "see above",
      [v[-1][2] for r, v in sorted(per_rank.items())]))
mpi_ok = True
for r, v in sorted(mpi.items()):
    later = [(s, c, p) for s, c, p in v if 2 <= s <= steps]
    if len(later) != steps - 1 or any(c or p for _, c, p in later):
        print("MPI IN STEPS: rank %d: (step, MPI collectives, MPI point-to-point) in steps 2..%d: %s" % (r, steps, later))
        mpi_ok = False
ok = ok and mpi_ok
print("MPI calls in steps 2..%d: %s; in step 1 (the job start included), collectives per rank: %s"
      % (steps, "none" if mpi_ok else "see above", [v[0][1] for r, v in sorted(mpi.items())]))
if pp > 1 and "comm nccl" not in log:
    print("the pipeline did not run over NCCL (no 'comm nccl' in its start line)")
    ok = False
print("train nccl emu: %s" % ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
