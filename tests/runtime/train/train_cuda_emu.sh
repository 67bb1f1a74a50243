#!/usr/bin/env bash
# train_cuda_emu.sh — training with runtime.backend = cuda, end to end, on the emulated CUDA runtime
# (rrfp-mm-emu: the CLI linked against tests/support/cuda_emu, where device memory is PROT_NONE whenever host
# code runs, so any host access to parameters, gradients, moments or activations kills the run with
# "host code touched device memory"). Protection is left on (RR_EMU_PROTECT unset).
#
#   single (default): the CPU backend's run of RECIPE (rrfp-mm) against
#     1. the CUDA run of the same STEPS steps: every step's loss and grad norm within TOL_CPU;
#     2. the CUDA run stopped at STEPS/2 (checkpoint) and resumed to STEPS, with the step dump
#        (train.dump_step) of a resumed step: every step within TOL_RESUME of the uninterrupted CUDA
#        run, the dump's step.json equal to that step's metrics;
#     3. eval of the CUDA run's last checkpoint on the CUDA backend against eval of the CPU run's on the
#        CPU backend: held-out loss within TOL_CPU, the same greedy and candidate accuracies.
#   pp NP MPIRUN...: the CUDA run with parallel.pp = NP under MPIRUN (rank per stage), stopped at
#     STEPS/2 and resumed, against the CPU backend's single-process run: every step within TOL_CPU.
#   tp NP MPIRUN...: the CUDA run with parallel.tp = NP (runtime.comm = nccl) under MPIRUN against the CPU
#     backend's run with the same parallel.tp under MPIRUN: every step within TOL_CPU (train_cuda_emu_clip_tp2_bf16:
#     the CLIP tower's f32-compute position table under a TP parameter table, bf16).
#
# Tolerances (relative):
#   TOL_CPU 1e-5: the CUDA kernels are not the CPU's (float block reductions, another GEMM order); one
#     step's gradients agree within 1e-5 of each tensor's largest (model_gpu_emu's bound), and AdamW's
#     normalised update does not amplify a relative gradient error over a few steps. Seen here: equal
#     losses, grad norms within 5e-8.
#   TOL_RESUME 1e-6: the embedding backward adds repeated ids' gradients with float atomics, in an order
#     that depends on scheduling (here: the emulator's fiber order, which differs after a restart), so a
#     resumed CUDA run is not bitwise the uninterrupted one; the difference is fp32 reordering round-off.
#     Seen here: equal losses, grad norms within 1e-8.
# PRECISION=bf16 (environment) runs both sides with runtime.precision = bf16 (test train_cuda_emu_bf16):
# tolerances for it in the verdict below (flips of the bf16 compute copy, not f32 round-off).
# EXTRA_SETS (environment): further `--set key=value` for both sides (train_cuda_emu_clip_lm_variants: the CLIP
# tower and the LM variants); each must show in both runs' recipe.ini.
# RESUME=0 (environment) leaves out the stop/resume/dump part of single mode (2.): checkpointing does
# not depend on the precision, and train_cuda_emu covers it; train_cuda_emu_bf16 sets it (the
# emulation runs a step in tens of seconds).
# Usage: train_cuda_emu.sh RRFP_MM_EMU RRFP_MM RECIPE WORKDIR STEPS [pp|tp NP MPIRUN...]
set -euo pipefail
EMU=$1 CPU=$2 RECIPE=$3 WORK=$4 STEPS=$5
shift 5
MODE=single
if [ $# -gt 0 ] && { [ "$1" = pp ] || [ "$1" = tp ]; }; then
  MODE=$1 NP=$2
  shift 2
  MPIRUN=("$@")
fi
unset RR_EMU_PROTECT
export OMP_NUM_THREADS=1
rm -rf "$WORK"
mkdir -p "$WORK"
HALF=$((STEPS / 2))
DUMP=$((HALF + 1))
PRECISION=${PRECISION:-fp32} # runtime.precision of both backends' runs (env; bf16: see TOL_CPU)
RESUME=${RESUME:-1}
# optim.warmup: the recipe's 5 steps, or all of them when fewer run (a warm-up longer than the run is refused)
common=(--set train.steps="$STEPS" --set optim.warmup=$((STEPS < 5 ? STEPS : 5)) --set train.log_every=1
        --set checkpoint.keep=0 --set runtime.precision="$PRECISION")
read -r -a extra <<<"${EXTRA_SETS:-}"
common+=("${extra[@]}")
# EXTRA_SETS took effect (a test named for a model variant must have trained that variant)
check_extra() {
  local kv k v
  for kv in "${extra[@]}"; do
    [ "$kv" = --set ] && continue
    k=${kv#*.}; k=${k%%=*}; v=${kv#*=}
    grep -qx "$k = $v" "$1/recipe.ini" || { echo "FAIL: $1: $kv not in its recipe.ini"; exit 1; }
  done
}

CUDA=(--set runtime.backend=cuda)
if [ "$MODE" = tp ]; then
  echo "== CPU backend, parallel.tp = $NP: $STEPS steps"
  timeout 200 "${MPIRUN[@]}" -np "$NP" -x OMP_NUM_THREADS=1 "$CPU" train "$RECIPE" "${common[@]}" \
    --set parallel.tp="$NP" --set train.run_dir="$WORK/cpu"
else
  echo "== CPU backend: $STEPS steps"
  "$CPU" train "$RECIPE" "${common[@]}" --set train.run_dir="$WORK/cpu"
fi

if [ "$MODE" = single ]; then
  echo "== CUDA backend (emulated, memory protected): $STEPS steps"
  "$EMU" train "$RECIPE" "${common[@]}" "${CUDA[@]}" --set train.run_dir="$WORK/cuda"
  check_extra "$WORK/cpu"
  check_extra "$WORK/cuda"
  if [ "$RESUME" = 1 ]; then
    echo "== CUDA backend: stop at $HALF, resume with the dump of step $DUMP"
    "$EMU" train "$RECIPE" "${common[@]}" "${CUDA[@]}" --set train.run_dir="$WORK/split" --set train.stop_at="$HALF"
    "$EMU" train "$RECIPE" "${common[@]}" "${CUDA[@]}" --set train.run_dir="$WORK/split" --resume latest \
      --set train.dump_step="$DUMP"
  fi
  echo "== eval: CUDA checkpoint on the CUDA backend, CPU checkpoint on the CPU backend"
  CK=checkpoints/step-$(printf %08d "$STEPS")
  "$EMU" eval "$RECIPE" "${common[@]}" "${CUDA[@]}" --set train.run_dir="$WORK/cuda" --checkpoint "$WORK/cuda/$CK" \
    --samples 64 | tee "$WORK/eval_cuda.txt"
  "$CPU" eval "$RECIPE" "${common[@]}" --set train.run_dir="$WORK/cpu" --checkpoint "$WORK/cpu/$CK" \
    --samples 64 | tee "$WORK/eval_cpu.txt"
elif [ "$MODE" = tp ]; then
  echo "== CUDA backend (emulated, memory protected), parallel.tp = $NP: $STEPS steps"
  timeout 200 "${MPIRUN[@]}" -np "$NP" -x OMP_NUM_THREADS=1 "$EMU" train "$RECIPE" "${common[@]}" "${CUDA[@]}" \
    --set runtime.comm=nccl --set parallel.tp="$NP" --set train.run_dir="$WORK/tp"
  check_extra "$WORK/cpu"
  check_extra "$WORK/tp"
  grep -qx "tp = $NP" "$WORK/tp/recipe.ini" || { echo "FAIL: $WORK/tp: parallel.tp = $NP not in its recipe.ini"; exit 1; }
else
  echo "== CUDA backend (emulated, memory protected), parallel.pp = $NP: stop at $HALF, resume"
  PP=(--set parallel.pp="$NP")
  # each job under its own timeout: a hung rank fails the test instead of stalling it
  timeout 200 "${MPIRUN[@]}" -np "$NP" -x OMP_NUM_THREADS=1 "$EMU" train "$RECIPE" "${common[@]}" "${CUDA[@]}" \
    "${PP[@]}" --set train.run_dir="$WORK/pp" --set train.stop_at="$HALF"
  timeout 200 "${MPIRUN[@]}" -np "$NP" -x OMP_NUM_THREADS=1 "$EMU" train "$RECIPE" "${common[@]}" "${CUDA[@]}" \
    "${PP[@]}" --set train.run_dir="$WORK/pp" --resume latest
fi

/usr/bin/python3 - "$WORK" "$STEPS" "$MODE" "$DUMP" "$PRECISION" "$RESUME" <<'PY'
import json, sys
work, steps, mode, dump, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
resume = sys.argv[6] == "1"
TOL_CPU, TOL_RESUME = 1e-5, 1e-6
if precision == "bf16":
    # bf16 (PRECISION=bf16): step 1 matches as in fp32 (seen: equal loss bits, grad norm 2e-7). After it
    # the f32 masters of the two runs differ by f32 round-off, and a master weight that close to a
    # bf16 rounding boundary lands on the other bf16 neighbour in the compute copy: a 2^-7 relative
    # change of that weight, not a round-off-sized one, and more of them each step as the masters
    # drift. The runs then differ like two bf16 runs of slightly different weights. Seen over 6 steps:
    # loss within 5e-5, grad norm within 2.3e-3 (step 6); 2e-2 leaves ~10x. The resumed run differs
    # from the uninterrupted one the same way (the embedding's float atomics reorder, then flips).
    TOL_CPU, TOL_RESUME = 2e-2, 2e-2
ok = True

def metrics(name):
    rows = [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (work, name))]
    assert [r["step"] for r in rows] == list(range(1, steps + 1)), (name, [r["step"] for r in rows])
    return rows

def rel(a, b):
    return abs(a - b) / abs(b)

def compare(what, got, want, tol):
    global ok
    worst = 0.0
    for a, b in zip(got, want):
        la, lb = float.fromhex(a["loss_hex"]), float.fromhex(b["loss_hex"])
        e = max(rel(la, lb), rel(a["grad_norm"], b["grad_norm"]))
        worst = max(worst, e)
        if not e <= tol:  # a NaN fails too
            print("MISMATCH %s step %d: loss %s vs %s, grad norm %.9g vs %.9g (relative %.2e > %.0e)"
                  % (what, a["step"], a["loss_hex"], b["loss_hex"], a["grad_norm"], b["grad_norm"], e, tol))
            ok = False
    print("%s: %d steps, worst relative difference of loss / grad norm %.2e (tolerance %.0e)" % (what, steps, worst, tol))

cpu = metrics("cpu")
if mode == "single":
    cuda = metrics("cuda")
    compare("cuda vs cpu", cuda, cpu, TOL_CPU)
    if resume:
        split = metrics("split")
        compare("cuda resumed vs cuda", split, cuda, TOL_RESUME)
        st = json.load(open("%s/split/dump-%d/step.json" % (work, dump)))
        row = split[dump - 1]
        if st["loss_hex"] != row["loss_hex"] or rel(st["grad_norm"], row["grad_norm"]) > 1e-8:
            print("DUMP MISMATCH: step.json %s / %.9g, metrics %s / %.9g" % (st["loss_hex"], st["grad_norm"],
                                                                           row["loss_hex"], row["grad_norm"]))
            ok = False
        else:
            print("dump: step %d's step.json matches its metrics line" % dump)
    ev = {k: [json.loads(l) for l in open("%s/eval_%s.txt" % (work, k)) if l.startswith("{")][0] for k in ("cuda", "cpu")}
    e = rel(ev["cuda"]["loss"], ev["cpu"]["loss"])
    same_acc = all(ev["cuda"][k] == ev["cpu"][k] for k in ("samples", "greedy_accuracy", "candidate_accuracy"))
    if precision == "bf16":
        # the two bf16 models differ by bf16 flips (above), so an answer whose two best logits are that
        # close can change: up to 3 of the held-out answers may differ (seen: 1 of 64, greedy)
        n = ev["cpu"]["samples"]
        same_acc = ev["cuda"]["samples"] == n and all(
            abs(ev["cuda"][k] - ev["cpu"][k]) * n <= 3 + 1e-9 for k in ("greedy_accuracy", "candidate_accuracy"))
    print("eval: held-out loss %.6f (cuda) vs %.6f (cpu), relative %.2e; greedy accuracy %.4f vs %.4f" %
          (ev["cuda"]["loss"], ev["cpu"]["loss"], e, ev["cuda"]["greedy_accuracy"], ev["cpu"]["greedy_accuracy"]))
    if e > TOL_CPU or not same_acc:
        ok = False
elif mode == "tp":
    compare("cuda tensor parallel vs cpu tensor parallel", metrics("tp"), cpu, TOL_CPU)
else:
    compare("cuda pipeline (resumed) vs cpu", metrics("pp"), cpu, TOL_CPU)
print("train cuda emu: %s" % ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
