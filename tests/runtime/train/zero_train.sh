#!/usr/bin/env bash
# zero_train.sh — the distributed optimizer (parallel.zero = 1, runtime/train/exec_zero.c) against the same
# layout without it (parallel.zero = 0): `mpirun -np PP*TP*DP rrfp-mm train` twice on the same steps.
#   - every step's loss bitwise equal, every step's grad norm within 1e-8 relative (below), and
#     the last checkpoint (parameters, AdamW moments) bitwise equal (`rrfp-mm tensors diff`, tolerance 0);
#   - the step-2 dump (weights and gradients) bitwise equal;
#   - the shard: the log rank holds the moments of floor or ceil(N / DP) of its stage's N trainable values
#     (the last replica the remainder), and under bf16 only that many f32 masters (fp32: every value);
#   - the zero = 0 run logs the all-reduce's line and the zero = 1 run the distributed optimizer's (the path ran);
#   - (cpu) checkpoints stay free of the layout: a zero = 1 checkpoint (step 3) continued under zero = 0 with
#     dp 1 (DP x M microbatches) and a zero = 0 dp 1 checkpoint continued under zero = 1, each bitwise equal to
#     the same two legs run with zero = 0 throughout (losses, norms, step-6 checkpoint), and within XTOL of the
#     uninterrupted dp DP curve; a zero = 1 checkpoint continued under zero = 1 bitwise equal to the
#     uninterrupted zero = 1 run (its moments read back as the shard's part).
# Why bitwise at dp 2: the reduce-scatter adds the two replicas' fp32 gradients as the all-reduce does (a + b
# = b + a exactly), AdamW is elementwise, so each shard's update is the same arithmetic, and the all-gathered
# weights are copies (bf16: the 2-byte values, exact both ways). The grad norm's double sum of squares is
# grouped by shard instead of by tensor (and the CUDA kernel's chunks fall elsewhere): ~1e-16 relative, seen
# through the 9 digits metrics.jsonl prints, where it can flip the last one: 1e-8 relative (a clipping factor
# rounded to fp32 moves only when that difference lands on a rounding boundary, ~1e-9 odds a step). Resumes across dp
# change the order of the fp32 sums over microbatches: XTOL = 1e-6 relative in fp32 (dp_train.sh's bound,
# derived there), 2e-2 in bf16 (train_nccl_emu.sh's bf16 bound: a reordered sum flips bf16 compute copies).
#   - with SETS holding parallel.chunks=2 (interleaved): a stage's reduce-scatter started while the backward ran.
#   - the updated weights' all-gather overlapped with the next forward (the default) against the same run with
#     parallel.dp_overlap = 0 (gathered at the step end): losses, norms and the step-STEPS checkpoint bitwise (the
#     same bytes unpacked at another time); in 0.01 MiB rounds (several per stage) the overlapped run completed
#     every round of step 1's gather inside step 2's forward, some after a stage's first LM block had run (the
#     later blocks waiting for their own rounds), and the other run none.
# MODE=cpu (default): RRFP_MM on the CPU backend over MPI. MODE=emu: RRFP_MM is rrfp-mm-emu, runtime.backend
# = cuda and runtime.comm = nccl (the emulated CUDA runtime and NCCL: reduce-scatter and all-gather on device
# memory, the checkpoint's gathers through the device staging). PRECISION (fp32 | bf16), SETS (more overrides).
# Usage: zero_train.sh RRFP_MM RECIPE WORKDIR PP TP DP M
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 PP=$4 TP=$5 DP=$6 M=$7
MODE=${MODE:-cpu} PRECISION=${PRECISION:-fp32}
XTOL=1e-6; [ "$PRECISION" = bf16 ] && XTOL=2e-2
NP=$((PP * TP * DP))
rm -rf "$W"; mkdir -p "$W"
MPI="timeout 300 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"
STEPS=6 CK=3 DUMP=2; [ "$MODE" = emu ] && STEPS=2 CK=2 DUMP=1 # the emulation runs a step of this model in ~10 s
# (emu: the dump at step 1, so that step 1's all-gather completes in step 2's forward; the step-2 checkpoint
# compares the weights after an update)
COMMON=(--set train.steps=$STEPS --set optim.warmup=1 --set train.log_every=1 --set train.checkpoint_every=$CK
        --set checkpoint.keep=0 --set runtime.precision="$PRECISION" --set parallel.pp="$PP" --set parallel.tp="$TP")
for kv in ${SETS:-}; do COMMON+=(--set "$kv"); done
# emu: every NCCL receive and every kernel completes 2..4 polls late (train_nccl_emu.sh), so a collective that
# did not wait for the gradients' or the packed weights' producer reads stale values and the comparison fails
[ "$MODE" = emu ] && COMMON+=(--set runtime.backend=cuda --set runtime.comm=nccl) &&
  MPI+=" -x RR_EMU_COMM_DELAY=2 -x RR_EMU_COMPUTE_DELAY=2"
PAR=(--set data.microbatches="$M" --set parallel.dp="$DP" --set parallel.dp_bucket_mb=0.01)
ONE=(--set data.microbatches=$((DP * M)) --set parallel.dp=1)
fail() { echo "FAIL: $*"; exit 1; }
# compare two runs' metrics: bitwise losses + norms to the printed digits (TOL = 0), or losses within TOL relative
cmp_metrics() { /usr/bin/python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
assert [x["step"] for x in a] == [x["step"] for x in b] and len(a) in (2, 6), "steps differ"
worst = 0.0
for x, y in zip(a, b):
    la, lb = float.fromhex(x["loss_hex"]), float.fromhex(y["loss_hex"])
    worst = max(worst, abs(la - lb) / abs(la))
    if tol == 0 and (la != lb or abs(x["grad_norm"] - y["grad_norm"]) > 1e-8 * abs(x["grad_norm"])):
        sys.exit("step %d: loss %a vs %a, grad norm %r vs %r" % (x["step"], la, lb, x["grad_norm"], y["grad_norm"]))
print("%.3g" % worst)
sys.exit(0 if worst <= tol else 1)
PY
}
run() { local np=$1 dir=$2; shift 2; $MPI -np "$np" "$BIN" train "$RECIPE" "${COMMON[@]}" "$@" --set train.run_dir="$dir" >>"$dir.log" 2>&1; }

for z in 0 1; do
  run "$NP" "$W/z$z" "${PAR[@]}" --set parallel.zero=$z --set train.dump_step=$DUMP ||
    { cat "$W/z$z.log"; fail "pp $PP tp $TP dp $DP zero $z failed"; }
done
run "$NP" "$W/zn" "${PAR[@]}" --set parallel.zero=1 --set parallel.dp_overlap=0 --set train.dump_step=$DUMP ||
  { cat "$W/zn.log"; fail "pp $PP tp $TP dp $DP zero 1 without overlap failed"; }
d=$(cmp_metrics "$W/zn" "$W/z1" 0) || fail "zero = 1 overlapped against not overlapped: $d"
"$BIN" tensors diff "$W/zn/checkpoints/step-0000000$STEPS" "$W/z1/checkpoints/step-0000000$STEPS" --quiet --rtol 0 \
  --atol 0 >"$W/ck.diff" 2>&1 || { cat "$W/ck.diff"; fail "overlapped all-gather: the step-$STEPS checkpoints differ"; }
# "... all-gathered in R round(s), F completed inside the next step's forward, L of them after a stage's first LM
# block ran": the gathers of the steps before a step that reads no weights first (a dump, a checkpoint, the end)
gat() { sed -n "s/.*all-gathered in \([0-9]*\) round(s), \([0-9]*\) completed inside the next step's forward, \([0-9]*\) of them.*/\1 \2 \3/p" "$1"; }
read -r R F L < <(gat "$W/z1.log"); [ -n "${R:-}" ] || fail "zero = 1: no all-gather line in the log"
# (L counts rounds waited for by a stage's second block or its head: none where every chunk holds one block and no
# head, as the interleaved case's rank 0)
ONEBLOCK=0; grep -q "parallel.chunks=2" <<<"${SETS:-}" && ONEBLOCK=1
[ "$R" -ge $((2 * STEPS)) ] && [ "$F" -gt 0 ] && { [ "$L" -gt 0 ] || [ $ONEBLOCK = 1 ]; } ||
  fail "overlapped all-gather: $F of $R rounds completed inside the next forward, $L after a first block ran"
read -r Rn Fn Ln < <(gat "$W/zn.log"); [ "${Rn:-}" = "$R" ] && [ "$Fn" -eq 0 ] ||
  fail "parallel.dp_overlap = 0: ${Fn:-?} of ${Rn:-?} rounds completed inside the next forward, expected 0 of $R"
echo "all-gather overlapped with the next forward: $F of $R rounds completed inside it ($L after a stage's first block), bitwise the run gathering at the step end"
# the step-2 dump: the weights before the step (bf16: the sharded masters made whole) and the step's gradients
# (every replica's reduced shard gathered) are zero = 0's, bit for bit
for f in weights grads; do
  "$BIN" tensors diff "$W/z0/dump-$DUMP" "$W/z1/dump-$DUMP" --files $f --quiet --rtol 0 --atol 0 >"$W/dump.diff" 2>&1 ||
    { cat "$W/dump.diff"; fail "the step-$DUMP dump's $f differ"; }
done
grep -q "data parallel:.*all-reduce" "$W/z0.log" || fail "zero = 0: no all-reduce line in the log"
grep -q "distributed optimizer:" "$W/z0.log" && fail "zero = 0 ran the distributed optimizer"
line=$(grep "distributed optimizer:" "$W/z1.log") || fail "zero = 1: the distributed optimizer did not run"
grep -q "data parallel:" "$W/z1.log" && fail "zero = 1 ran the all-reduce"
d=$(cmp_metrics "$W/z0" "$W/z1" 0) || fail "zero = 1 against zero = 0: $d"
"$BIN" tensors diff "$W/z0/checkpoints/step-0000000$STEPS" "$W/z1/checkpoints/step-0000000$STEPS" --quiet --rtol 0 \
  --atol 0 >"$W/ck.diff" 2>&1 || { cat "$W/ck.diff"; fail "the step-$STEPS checkpoints differ"; }
# the shard: "... holds AdamW moments of S of its stage's N trainable values and F f32 masters"
read -r S N F < <(sed -n 's/.*moments of \([0-9]*\) of its stage.s \([0-9]*\) trainable values and \([0-9]*\) f32.*/\1 \2 \3/p' <<<"$line")
[ -n "${S:-}" ] || fail "no shard counts in: $line"
[ "$S" -eq $((N / DP)) ] || fail "the log rank's shard holds $S moments, expected floor($N / $DP) = $((N / DP))"
if [ "$PRECISION" = bf16 ]; then [ "$F" -eq "$S" ] || fail "bf16: $F f32 masters held, expected the shard's $S"
else [ "$F" -ge "$N" ] || fail "fp32: $F f32 values held, expected every one (>= $N)"; fi
# interleaved (2 chunks per rank): chunk 1's gradients are final while chunk 0 still runs: its reduce-scatter starts early
if grep -q "parallel.chunks=2" <<<"${SETS:-}"; then
  early=$(sed -n 's/.*, \([0-9]*\) stage(s) started while.*/\1/p' <<<"$line")
  [ "${early:-0}" -gt 0 ] || fail "interleaved: no reduce-scatter started before the backward ended: $line"
fi
echo "pp $PP tp $TP dp $DP $MODE $PRECISION: $STEPS losses and grad norms equal, step-$STEPS checkpoint bitwise; rank 0 holds $S of $N moments, $F masters"
echo "  $line"

if [ "$MODE" = cpu ]; then
  NP1=$((PP * TP))
  # each zero = 1 leg against the same legs with zero = 0 (the halves' checkpoints are bitwise equal, above)
  same() { d=$(cmp_metrics "$1" "$2" 0) || fail "$3: $d"
    "$BIN" tensors diff "$1/checkpoints/step-00000006" "$2/checkpoints/step-00000006" --quiet --rtol 0 --atol 0 \
      >"$W/ck.diff" 2>&1 || { cat "$W/ck.diff"; fail "$3: the step-6 checkpoint differs"; }; }
  # a zero = 1 checkpoint continued under zero = 0 and dp 1
  for z in 0 1; do D="$W/a$z"
    run "$NP" "$D" "${PAR[@]}" --set parallel.zero=$z --set train.stop_at=3 || { cat "$D.log"; fail "dp $DP zero $z half run"; }
    run "$NP1" "$D" "${ONE[@]}" --set parallel.zero=0 --resume latest || { cat "$D.log"; fail "zero $z checkpoint under dp 1"; }
  done
  same "$W/a0" "$W/a1" "a zero = 1 checkpoint continued under zero = 0, dp 1"
  d=$(cmp_metrics "$W/z0" "$W/a1" "$XTOL") || fail "zero = 1 -> dp 1: losses leave the dp $DP curve (max rel $d)"
  # a zero = 0 dp 1 checkpoint continued under zero = 1, dp DP
  D="$W/b0"; run "$NP1" "$D" "${ONE[@]}" --set parallel.zero=0 --set train.stop_at=3 || { cat "$D.log"; fail "dp 1 half run"; }
  cp -r "$W/b0" "$W/b1"; cp "$W/b0.log" "$W/b1.log"
  for z in 0 1; do D="$W/b$z"
    run "$NP" "$D" "${PAR[@]}" --set parallel.zero=$z --resume latest || { cat "$D.log"; fail "dp 1 checkpoint under zero $z"; }
  done
  same "$W/b0" "$W/b1" "a dp 1 checkpoint continued under zero = 1"
  d=$(cmp_metrics "$W/z0" "$W/b1" "$XTOL") || fail "dp 1 -> zero = 1: losses leave the dp $DP curve (max rel $d)"
  # zero = 1 -> zero = 1: the moments read back as the shard's part: the uninterrupted run's numbers
  D="$W/c"; run "$NP" "$D" "${PAR[@]}" --set parallel.zero=1 --set train.stop_at=3 || { cat "$D.log"; fail "zero = 1 half run"; }
  run "$NP" "$D" "${PAR[@]}" --set parallel.zero=1 --resume latest || { cat "$D.log"; fail "zero = 1 resumed"; }
  same "$W/z1" "$D" "zero = 1 resumed under zero = 1"
  echo "resume: zero 1 dp $DP -> zero 0 dp 1 and zero 0 dp 1 -> zero 1 dp $DP bitwise as with zero 0 (and within $XTOL of the dp $DP curve), zero 1 -> zero 1 bitwise"
fi
echo "zero train: ok"
