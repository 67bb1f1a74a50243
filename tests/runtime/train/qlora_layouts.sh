#!/usr/bin/env bash
# qlora_layouts.sh — QLoRA's checkpoints under tensor parallelism and the distributed optimizer (docs/training.md
# "QLoRA", "Layouts"), from a full-precision checkpoint (train.init_from) of a model 128 wide with a 256 MLP (every
# row-parallel slice at tp 2 is whole blocks of 64):
#   - tp 2: a run stopped at step 2 and resumed to step 4 gives the uninterrupted tp 2 run's losses and gradient
#     norms bit for bit (each rank takes its slice of the stored whole-weight NF4 form back), and the NF4 form its
#     checkpoints hold (TP rank 0 writes the whole weight's) is the one-process run's, byte for byte;
#   - across layouts: the tp 2 step-2 checkpoint continued in one process, and the one-process one under tp 2, keep
#     those NF4 bytes (read as stored, not re-quantised) and give the other layout's uninterrupted losses within
#     TOL = 1e-5 relative (tp_train.sh's: the TP all-reduces regroup fp32 sums);
#   - parallel.zero = 1 at dp 2: stopped at 2 and resumed under zero = 1, and continued under zero = 0, each bit for
#     bit the uninterrupted zero = 0 run (the NF4 base is frozen: only the adapters' state is sharded);
#   - the refusal of a tp whose row-parallel slices cut a block of 64 (the 64-wide model at tp 2).
# Usage: qlora_layouts.sh RRFP_MM RECIPE WORKDIR
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3
rm -rf "$W"; mkdir -p "$W"
MPI="timeout 200 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"
M=(--set model.text_width=128 --set model.ffn_hidden=256)
fail() { echo "FAIL: $*"; exit 1; }
"$BIN" train "$RECIPE" "${M[@]}" --set train.steps=1 --set optim.warmup=1 --set train.run_dir="$W/base" >"$W/base.txt" 2>&1 ||
  { cat "$W/base.txt"; fail "base run"; }
S=("${M[@]}" --set train.steps=4 --set optim.warmup=1 --set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25
   --set lora.quant=nf4 --set checkpoint.keep=0 --set train.checkpoint_every=2 --set train.log_every=1
   --set train.init_from="$W/base/checkpoints/step-00000001")
run() { local np=$1 dir=$2; shift 2
  if [ "$np" = 1 ]; then "$BIN" train "$RECIPE" "${S[@]}" "$@" --set train.run_dir="$W/$dir" >>"$W/$dir.txt" 2>&1
  else $MPI -np "$np" "$BIN" train "$RECIPE" "${S[@]}" "$@" --set train.run_dir="$W/$dir" >>"$W/$dir.txt" 2>&1; fi ||
    { tail -20 "$W/$dir.txt"; fail "$dir: $*"; }; }
# steps 3-4 of two runs: bitwise (TOL 0) or within TOL relative
cmp34() { /usr/bin/python3 - "$W/$1/metrics.jsonl" "$W/$2/metrics.jsonl" "$3" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if '"loss"' in l] for p in sys.argv[1:3])
tol = float(sys.argv[3])
a, b = ({r["step"]: r for r in x if r["step"] >= 3} for x in (a, b))
assert sorted(a) == sorted(b) == [3, 4], "steps 3 and 4 in both"
for s in (3, 4):
    la, lb = float.fromhex(a[s]["loss_hex"]), float.fromhex(b[s]["loss_hex"])
    if tol == 0 and (la != lb or a[s]["grad_norm"] != b[s]["grad_norm"]):
        sys.exit("step %d: loss %a vs %a, grad norm %r vs %r" % (s, la, lb, a[s]["grad_norm"], b[s]["grad_norm"]))
    if abs(la - lb) > tol * abs(lb):
        sys.exit("step %d: loss %r vs %r beyond %g relative" % (s, la, lb, tol))
PY
}
# the NF4 form (every NAME.nf4.* tensor) of two checkpoint folders, byte for byte
nf4same() { /usr/bin/python3 - "$W/$1" "$W/$2" <<'PY'
import glob, json, struct, sys
def nf4(d):
    out = {}
    for p in glob.glob(d + "/model*.safetensors"):
        raw = open(p, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        for k, v in json.loads(raw[8:8 + n]).items():
            if ".nf4." in k:
                assert k not in out, k + " twice"
                out[k] = raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
    return out
a, b = nf4(sys.argv[1]), nf4(sys.argv[2])
assert a and sorted(a) == sorted(b), "the same NF4 tensors"
bad = [k for k in a if a[k] != b[k]]
sys.exit("NF4 bytes differ: %s" % bad[:3] if bad else 0)
PY
}
# tensor parallelism
run 2 t2 --set parallel.tp=2
grep -q "layout pp 1 x tp 2 x dp 1" "$W/t2.txt" || fail "tp 2 did not run"
run 2 t2p --set parallel.tp=2 --set train.stop_at=2
run 2 t2p --set parallel.tp=2 --set checkpoint.resume=latest
d=$(cmp34 t2 t2p 0) || fail "tp 2 resumed under tp 2: $d"
run 1 one
d=$(nf4same t2/checkpoints/step-00000004 one/checkpoints/step-00000004) || fail "tp 2 against one process: $d"
cp -r "$W/t2p" "$W/x1"; rm -rf "$W/x1/checkpoints/step-00000004"; : >"$W/x1/metrics.jsonl"
run 1 x1 --set checkpoint.resume="$W/t2p/checkpoints/step-00000002"
d=$(cmp34 one x1 1e-5) || fail "tp 2 checkpoint continued in one process: $d"
d=$(nf4same x1/checkpoints/step-00000004 one/checkpoints/step-00000004) || fail "tp 2 -> one process: $d"
run 1 x2 --set train.stop_at=2
run 2 x2 --set parallel.tp=2 --set checkpoint.resume=latest
d=$(cmp34 t2 x2 1e-5) || fail "one-process checkpoint continued under tp 2: $d"
d=$(nf4same x2/checkpoints/step-00000004 t2/checkpoints/step-00000004) || fail "one process -> tp 2: $d"
echo "tp 2: resumed bitwise, the NF4 form the one process's byte for byte, resumed across tp 1 <-> 2 within 1e-5"
# the distributed optimizer
Z=(--set parallel.dp=2)
run 2 z0 "${Z[@]}" --set parallel.zero=0
run 2 z1 "${Z[@]}" --set parallel.zero=1 --set train.stop_at=2
grep -q "distributed optimizer: 2 replicas" "$W/z1.txt" || fail "zero = 1 did not run"
cp -r "$W/z1" "$W/z1b"; cp "$W/z1.txt" "$W/z1b.txt"
run 2 z1 "${Z[@]}" --set parallel.zero=1 --set checkpoint.resume=latest
run 2 z1b "${Z[@]}" --set parallel.zero=0 --set checkpoint.resume=latest
d=$(cmp34 z0 z1 0) || fail "zero = 1 resumed under zero = 1 against zero = 0: $d"
d=$(cmp34 z0 z1b 0) || fail "zero = 1 continued under zero = 0 against zero = 0: $d"
d=$(nf4same z1/checkpoints/step-00000004 z0/checkpoints/step-00000004) || fail "zero 1 against zero 0: $d"
echo "zero = 1: resumed under zero = 1 and continued under zero = 0 bitwise the zero = 0 run"
# the refusal: the 64-wide model's o (64 x 64) at tp 2 leaves 32 columns a rank
"$BIN" train "$RECIPE" --set lora.r=4 --set lora.quant=nf4 --set parallel.tp=2 --dry-run >"$W/r.txt" 2>&1 && fail "a cut block accepted"
grep -q "cuts one of bitsandbytes' blocks of 64" "$W/r.txt" || { cat "$W/r.txt"; fail "no cut-block refusal"; }
echo "qlora layouts: ok"
