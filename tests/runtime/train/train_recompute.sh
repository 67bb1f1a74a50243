#!/usr/bin/env bash
# train_recompute.sh — activation recompute (train.recompute) against the run without it, on a small model whose
# tower and LM both train (2 ViT blocks, 3 LM blocks):
#   cpu: one process, fp32 and bf16: recompute selective, full, and full on the LM only (train.recompute_lm) give
#        every step's loss bits (loss_hex) and grad norm, and the dumped gradients and weights of step 2 (the files,
#        byte for byte), of the run with recompute none; each step's recomputed_blocks is the blocks the backward
#        re-ran (microbatches x blocks of the components that recompute; absent without recompute); the dry run's
#        activations shrink none > selective > full, and a memory budget between full's total and none's is refused
#        with recompute the first change that fits; the calibrated simulator (rrfp-mm sim --calibrated on the 7B
#        recipe beside RECIPE, split backward) keeps F and grows B and W under full recompute (each re-runs the
#        forward: about twice a third of the block's work), and leaves selective's durations those of none.
#   pp MPIRUN...: parallel.pp = 2 under hints 1f1b (fused backward) and zb-h1 (split B / W: W recomputes again),
#        fp32, and zb-h1 in bf16: the same bitwise checks on every rank's dump; rank 0's recomputed_blocks is
#        microbatches x its blocks, twice that under zb-h1's full recompute (B and W each re-run the forward).
#   emu EMU: the emulated CUDA backend (rrfp-mm-emu; fp32 full, and bf16 on its 2-byte activation tables, selective and
#        full; 2 steps of one microbatch): every step's loss and grad norm, and every dumped tensor (within 1e-6 of its largest value), within
#        TOL_EMU = 1e-6 of the run without recompute. The gathers' backwards (the token embedding's, CLIP's class and
#        position embeddings') add repeated rows with float atomics in an order that depends on the emulator's
#        scheduling (what ran before them: the recomputed forwards), so those gradients differ by fp32 reordering
#        round-off (train_cuda_emu.sh's TOL_RESUME, for the same reason), and from the next step on the weights they
#        update; every other kernel re-runs on the same inputs with the same values. Seen on the RoPE tower: every tensor
#        bitwise but text.embed.weight's gradient (4 of 4096 values, by 2e-9 of 0.3), the losses' bits equal; on CLIP
#        (EXTRA_SETS, by hand): step 2's tensors within 3e-7 of their largest.
# EXTRA_SETS (environment): further `--set key=value` for every run (train_recompute_clip: the CLIP tower with
# vision_feature_layer -1, every block run, and the exact-GELU projector).
# Usage: train_recompute.sh RRFP_MM RECIPE WORKDIR cpu | pp MPIRUN... | emu RRFP_MM_EMU
set -euo pipefail
BIN=$1 RECIPE=$2 WORK=$3 MODE=$4
shift 4
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1
rm -rf "$WORK"
mkdir -p "$WORK"
LV=2 LT=3
STEPS=3
[ "$MODE" = emu ] && STEPS=2 # the emulation runs a step in seconds
common=(--set model.vision_layers=$LV --set model.text_layers=$LT --set train.steps=$STEPS --set optim.warmup=$STEPS
        --set train.checkpoint_every=-1 --set train.dump_step=2 --set train.log_every=1)
read -r -a extra <<<"${EXTRA_SETS:-}"
common+=("${extra[@]}")

# metrics rows of run $1: "step loss_hex grad_norm recomputed_blocks" (0 when absent)
rows() {
  /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(d["step"], d["loss_hex"], repr(d["grad_norm"]), d.get("recomputed_blocks", 0))' "$1/metrics.jsonl"
}

# run $2 (recompute) equals run $1 (none) bit for bit; every step recomputed $3 blocks on the writing rank
same_as() {
  local ref=$1 run=$2 want=$3 f n=0
  diff <(rows "$ref" | cut -d' ' -f1-3) <(rows "$run" | cut -d' ' -f1-3) >/dev/null ||
    fail "$run: loss or grad norm differs from $ref: $(diff <(rows "$ref") <(rows "$run") | head -4)"
  got=$(rows "$run" | cut -d' ' -f4 | sort -u | tr '\n' ' ')
  [ "$got" = "$want " ] || fail "$run: recomputed_blocks per step '$got', expected $want"
  [ "$(rows "$ref" | cut -d' ' -f4 | sort -u)" = 0 ] || fail "$ref: recomputed_blocks without recompute"
  for f in "$ref"/dump-2/grads*.safetensors "$ref"/dump-2/weights*.safetensors; do
    cmp -s "$f" "$run/dump-2/${f##*/}" || fail "$run: dump-2/${f##*/} differs from $ref's"
    n=$((n + 1))
  done
  [ "$n" -ge 2 ] || fail "$ref: no dump files"
  echo "ok   ${run##*/}: bitwise the run without recompute ($(rows "$run" | wc -l) steps, $n dump files), $want blocks recomputed a step"
}

# run $2 (recompute) against run $1 (none) on the emulated CUDA backend (TOL_EMU above); $3 blocks recomputed a step
close_to() {
  local got
  got=$(rows "$2" | cut -d' ' -f4 | sort -u | tr '\n' ' ')
  [ "$got" = "$3 " ] || fail "$2: recomputed_blocks per step '$got', expected $3"
  counts=$(/usr/bin/python3 - "$1" "$2" <<'PY'
import glob, json, os, struct, sys
import numpy as np
ref, run = sys.argv[1], sys.argv[2]
TOL_EMU = 1e-6
def rows(d):
    return [json.loads(l) for l in open(d + "/metrics.jsonl")]
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype=np.uint8)
            .view(np.float32 if v["dtype"] == "F32" else np.uint16) for k, v in h.items() if k != "__metadata__"}
bad = same = n = 0
for a, b in zip(rows(ref), rows(run)):
    for k in ("loss", "grad_norm"):
        if abs(a[k] - b[k]) > TOL_EMU * abs(a[k]):
            print("step %d %s: %r against %r" % (a["step"], k, b[k], a[k]), file=sys.stderr); bad = 1
files = sorted(glob.glob(ref + "/dump-2/grads*.safetensors") + glob.glob(ref + "/dump-2/weights*.safetensors"))
assert files, "no dump files"
for f in files:
    A, B = load(f), load(run + "/dump-2/" + os.path.basename(f))
    for k in A:
        n += 1
        if np.array_equal(A[k], B[k]):
            same += 1
            continue
        a = A[k].astype(np.float64)
        d = np.abs(a - B[k]).max()
        if A[k].dtype != np.float32 or d > TOL_EMU * np.abs(a).max(): # 2-byte words: bitwise or a flip
            print("%s %s differs by %g of %g" % (os.path.basename(f), k, d, np.abs(a).max()), file=sys.stderr); bad = 1
print(same, n)
sys.exit(bad)
PY
  ) || fail "$2: differs from $1 beyond TOL_EMU"
  echo "ok   ${2##*/}: the run without recompute within TOL_EMU, ${counts% *} of ${counts#* } dumped tensors bitwise, $3 blocks recomputed a step"
}

# the dry run's activations column (fields 10-11) of rank $2 with --set train.recompute=$1, in MiB
acts_mib() {
  "$BIN" train "$RECIPE" "${common[@]}" --set train.recompute="$1" --dry-run |
    awk -v r="$2" '$1 == r && NF >= 13 { print ($11 == "GiB") ? $10 * 1024 : $10 }'
}

# the dry run's total (fields 14-15) of rank 0 with --set train.recompute=$1, in MiB
total_mib() {
  "$BIN" train "$RECIPE" "${common[@]}" --set train.recompute="$1" --dry-run |
    awk '$1 == "0" && NF >= 15 { print ($15 == "GiB") ? $14 * 1024 : $14 }'
}

case "$MODE" in
cpu)
  M=2
  for p in fp32 bf16; do
    for m in none selective full; do
      "$BIN" train "$RECIPE" "${common[@]}" --set runtime.precision=$p --set data.microbatches=$M \
        --set train.recompute=$m --set train.run_dir="$WORK/$p-$m" >"$WORK/$p-$m.log" 2>&1 ||
        fail "$p $m: $(tail -3 "$WORK/$p-$m.log")"
    done
    "$BIN" train "$RECIPE" "${common[@]}" --set runtime.precision=$p --set data.microbatches=$M \
      --set train.recompute_lm=full --set train.run_dir="$WORK/$p-lm" >"$WORK/$p-lm.log" 2>&1 ||
      fail "$p lm: $(tail -3 "$WORK/$p-lm.log")"
    same_as "$WORK/$p-none" "$WORK/$p-selective" $((M * (LV + LT)))
    same_as "$WORK/$p-none" "$WORK/$p-full" $((M * (LV + LT)))
    same_as "$WORK/$p-none" "$WORK/$p-lm" $((M * LT))
  done
  a0=$(acts_mib none 0) a1=$(acts_mib selective 0) a2=$(acts_mib full 0)
  [ -n "$a0" ] && [ -n "$a1" ] && [ -n "$a2" ] || fail "dry run: no activations column ($a0, $a1, $a2)"
  awk -v a="$a0" -v b="$a1" -v c="$a2" 'BEGIN { exit !(a > b && b > c) }' ||
    fail "dry run: activations none $a0, selective $a1, full $a2 MiB do not shrink"
  echo "ok   dry run: activations none $a0 MiB > selective $a1 > full $a2"
  # a memory budget between full recompute's total and none's: refused, recompute the first change that fits
  t0=$(total_mib none) t2=$(total_mib full)
  budget=$(awk -v a="$t0" -v b="$t2" 'BEGIN { printf "%.6f", (a + b) / 2 / 1024 }')
  out=$("$BIN" train "$RECIPE" "${common[@]}" --set runtime.memory_budget="$budget" --dry-run 2>&1) &&
    fail "budget $budget GiB (totals $t0, $t2 MiB): not refused"
  grep -q "changes that fit: --set train.recompute=" <<<"$out" || fail "budget $budget GiB: recompute not suggested first: $out"
  fix=$(echo "$out" | sed -n 's/.*changes that fit: --set \(train.recompute=[a-z]*\).*/\1/p')
  "$BIN" train "$RECIPE" "${common[@]}" --set runtime.memory_budget="$budget" --set "$fix" --dry-run >/dev/null 2>&1 ||
    fail "budget $budget GiB: the suggested $fix does not fit"
  echo "ok   budget between full's and none's totals: $fix suggested first, and fits"
  for m in none selective full; do
    "$BIN" sim --calibrated "$(dirname "$RECIPE")/llava-1.5-7b.ini" --recompute $m --split-backward --hint zb-h1 --seed 3 \
      --json --dump "$WORK/sim-$m.json" >/dev/null 2>&1 || fail "sim --recompute $m"
  done
  /usr/bin/python3 - "$WORK" <<'PY' || fail "sim: the recompute is not costed as expected"
import json, sys
d = {m: json.load(open("%s/sim-%s.json" % (sys.argv[1], m))) for m in ("none", "selective", "full")}
assert d["selective"] == d["none"], "selective's durations differ from none's"
assert d["full"]["F"] == d["none"]["F"], "full recompute changed F"
for k in "BW":
    r = sum(map(sum, d["full"][k])) / sum(map(sum, d["none"][k]))
    assert 1.5 < r < 2.0, "%s grows by %g under full recompute (the recomputed forward: about 2x with the split)" % (k, r)
    print("ok   sim: %s x %.3f under full recompute, F and selective unchanged" % (k, r))
PY
  ;;
pp)
  MPIRUN=("$@")
  M=4
  run_pp() { # hint precision recompute (on one layer split: full recompute's cost may move the balanced one)
    timeout 200 "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS=1 "$BIN" train "$RECIPE" "${common[@]}" --set parallel.pp=2 \
      --set parallel.layers="$split" \
      --set parallel.hint="$1" --set runtime.precision="$2" --set data.microbatches=$M --set train.recompute="$3" \
      --set train.run_dir="$WORK/$1-$2-$3" >"$WORK/$1-$2-$3.log" 2>&1 || fail "$1 $2 $3: $(tail -3 "$WORK/$1-$2-$3.log")"
  }
  # rank 0's blocks: the tower's and its LM layers (the split the trainer takes, from the dry run)
  split=$("$BIN" train "$RECIPE" "${common[@]}" --set parallel.pp=2 --dry-run |
    sed -n 's/^LM layers per virtual stage: \([0-9,]*\) .*/\1/p')
  [ -n "$split" ] || fail "no layer split in the dry run"
  l0=${split%%,*}
  n0=$((M * (LV + l0)))
  for h in 1f1b zb-h1; do
    for m in none selective full; do run_pp $h fp32 $m; done
    same_as "$WORK/$h-fp32-none" "$WORK/$h-fp32-selective" $n0
    same_as "$WORK/$h-fp32-none" "$WORK/$h-fp32-full" $([ $h = zb-h1 ] && echo $((2 * n0)) || echo $n0)
  done
  for m in none full; do run_pp zb-h1 bf16 $m; done
  same_as "$WORK/zb-h1-bf16-none" "$WORK/zb-h1-bf16-full" $((2 * n0))
  ;;
emu)
  EMU=$1
  M=1 # the emulation runs a microbatch in seconds
  unset RR_EMU_PROTECT
  run_emu() { # precision recompute
    "$EMU" train "$RECIPE" "${common[@]}" --set runtime.backend=cuda --set runtime.precision=$1 \
      --set data.microbatches=$M --set train.recompute=$2 --set train.run_dir="$WORK/$1-$2" >"$WORK/$1-$2.log" 2>&1 ||
      fail "emu $1 $2: $(tail -3 "$WORK/$1-$2.log")"
  }
  for m in none full; do run_emu fp32 $m; done
  close_to "$WORK/fp32-none" "$WORK/fp32-full" $((M * (LV + LT)))
  for m in none selective full; do run_emu bf16 $m; done
  close_to "$WORK/bf16-none" "$WORK/bf16-selective" $((M * (LV + LT)))
  close_to "$WORK/bf16-none" "$WORK/bf16-full" $((M * (LV + LT)))
  ;;
*) fail "mode '$MODE': cpu, pp or emu" ;;
esac
echo "train recompute $MODE: ok"
