#!/usr/bin/env bash
# train_bf16a_tp_emu.sh — 2-byte activations under tensor parallelism: a bf16 training run with
# parallel.tp > 1 on the emulated CUDA runtime and NCCL (rrfp-mm-emu under mpirun), with 2-byte
# activations (the default) against the same run with RRFP_BF16_ACTIVATIONS=0 (f32 words holding bf16 values), BITWISE:
#   - every step's loss (hex) and gradient norm (metrics JSONL, the printed digits);
#   - step 1's dump (train.dump_step = 1): every microbatch's logits and loss, every rank's gradients and
#     weights (`rrfp-mm tensors diff` with rtol = atol = 0, the TP slices assembled);
#   - the last checkpoint's model and optimizer shards (weights, AdamW m and v), every tensor (rtol = atol = 0);
#   but for the token embedding's tensors, within 1e-6 (the embedding backward's atomics, `same` below), and the
#   CLIP tower's position table's and class embedding's, within 1e-6 of the tensor's largest (rows_gather's
#   backward atomics, `same`).
# The TP sums of the row-parallel outputs (attention o, MLP down) stay f32 with 2-byte activations
# (text/lm.c lm_tp_residual), the vocabulary-parallel embedding and cross-entropy too (model.c), so the
# values are the gate-off run's. That the gate ran: the gated run's device peak (the log rank's step lines)
# is below the ungated one's in every step (2-byte activations take half the bytes). With pp 1 also the dry run's
# memory estimate for either gate state within 10% of that run's device peak (as train_profile_emu at tp = 1).
# Usage: train_bf16a_tp_emu.sh RRFP_MM_EMU RECIPE WORKDIR PP TP MPIRUN...
# Environment: SETS (more section.key=value overrides for both runs, blank-separated), STEPS (2).
set -euo pipefail
EMU=$1 RECIPE=$2 WORK=$3 PP=$4 TP=$5
shift 5
MPIRUN=("$@")
STEPS=${STEPS:-2}
unset RR_EMU_PROTECT RRFP_BF16_ACTIVATIONS
export OMP_NUM_THREADS=1
rm -rf "$WORK"
mkdir -p "$WORK"
common=(--set train.steps="$STEPS" --set optim.warmup=1 --set train.log_every=1 --set checkpoint.keep=0
        --set runtime.precision=bf16 --set runtime.backend=cuda --set runtime.comm=nccl --set parallel.pp="$PP"
        --set parallel.tp="$TP" --set train.dump_step=1)
for kv in ${SETS:-}; do common+=(--set "$kv"); done
NP=$((PP * TP))
for g in off on; do
  env=()
  [ "$g" = off ] && env=(-x RRFP_BF16_ACTIVATIONS=0)
  echo "== bf16, pp $PP x tp $TP ($NP ranks), 2-byte activations $g"
  timeout 400 "${MPIRUN[@]}" -np "$NP" -x OMP_NUM_THREADS=1 "${env[@]}" "$EMU" train "$RECIPE" "${common[@]}" \
    --set train.run_dir="$WORK/$g" >"$WORK/$g.log" 2>&1 || { cat "$WORK/$g.log"; exit 1; }
  grep -E "^step" "$WORK/$g.log" || true
done

/usr/bin/python3 - "$WORK" "$STEPS" <<'PY'
import json, re, sys
work, steps = sys.argv[1], int(sys.argv[2])
def rows(g):
    r = [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (work, g))]
    assert [x["step"] for x in r] == list(range(1, steps + 1)), (g, [x["step"] for x in r])
    return r
off, on = rows("off"), rows("on")
ok = True
for a, b in zip(off, on):
    same = a["loss_hex"] == b["loss_hex"] and a["grad_norm"] == b["grad_norm"]
    print("step %d: loss %s / %s, grad norm %r / %r (gate off / on) %s" % (a["step"], a["loss_hex"], b["loss_hex"],
          a["grad_norm"], b["grad_norm"], "same" if same else "DIFFER"))
    ok &= same
# the path ran: 2-byte activations lower the device peak in every step (the log rank's step lines)
def peaks(g):
    return [float(m) for m in re.findall(r"device peak ([0-9.]+) MiB", open("%s/%s.log" % (work, g)).read())]
p_off, p_on = peaks("off"), peaks("on")
print("device peak MiB, gate off:", p_off, " on:", p_on)
if not p_on or len(p_on) != len(p_off) or not all(b < a for a, b in zip(p_off, p_on)):
    print("FAIL: the gated run's device peak is not below the ungated one's: the 2-byte path did not run")
    ok = False
sys.exit(0 if ok else 1)
PY

# same A B PREFIX: every tensor of the files PREFIX.* in A and B bitwise equal, but for the token embedding's
# (its gradient, and the weight and AdamW moments it made): the CUDA embedding backward adds rows with
# atomics, whose order varies between runs (docs/cuda.md, bf16 storage: 4.7e-10 at tp = 1), within 1e-6;
# and the CLIP tower's position table's and class embedding's (vision.pos_embed.weight, vision.class_embedding):
# rows_gather's backward adds the interpolated taps (the class rows) with atomics too (the same f32 kernel with the
# gate on and off; vision.patch_embed.weight's gradient, from the same upstream gradient, is bitwise), every
# element within 1e-6 of the tensor's largest magnitude (near-zero sums cancel, so an element's own relative
# difference is not round-off-sized: seen 1.3e-6 in the position table's gradient; against the largest:
# gradient 8e-8, weights 1.1e-7, AdamW m 1.7e-7, v 2.2e-7 after 2 steps)
same() {
  local out out6 beyond rc6 differ
  if out=$("$EMU" tensors diff "$1" "$2" --files "$3" --rtol 0 --atol 0 --quiet 2>&1); then
    echo "$out" | tail -1
    return 0
  fi
  differ=$(grep -E "differ beyond" <<<"$out" || true)
  [ -z "$differ" ] || echo "$differ"
  if [ -n "$differ" ] && grep -vqE "^tensors diff: ([mv]\.)?(text\.embed\.weight|vision\.pos_embed\.weight|vision\.class_embedding): " <<<"$differ"; then
    echo "FAIL: $3: tensors other than the token embedding's and the CLIP position / class embeddings' differ between the gate off and on"
    return 1
  fi
  # within 1e-6 elementwise, or (the CLIP tensors only) the per-tensor bound below; any other failure fails
  rc6=0
  out6=$("$EMU" tensors diff "$1" "$2" --files "$3" --rtol 1e-6 --atol 1e-12 --quiet 2>&1) || rc6=$?
  beyond=$(echo "$out6" | grep -E "differ beyond" || true)
  if [ "$rc6" -ne 0 ] && { [ -z "$beyond" ] ||
     grep -vqE "^tensors diff: ([mv]\.)?(vision\.pos_embed\.weight|vision\.class_embedding): " <<<"$beyond"; }; then
    echo "$out6"
    echo "FAIL: $3: the token embedding's tensors differ by more than the atomics' 1e-6"
    return 1
  fi
  if grep -qE "^tensors diff: ([mv]\.)?(vision\.pos_embed\.weight|vision\.class_embedding): " <<<"$out"; then
    /usr/bin/python3 - "$1" "$2" "$3" <<'PY' || { echo "FAIL: $3: the CLIP position / class embeddings' tensors differ by more than 1e-6 of their largest"; return 1; }
import glob, json, os, struct, sys
import numpy as np
a_dir, b_dir, prefix = sys.argv[1:4]
def load(f):
    b = open(f, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k.endswith("vision.pos_embed.weight") or k.endswith("vision.class_embedding"):
            assert v["dtype"] == "F32", (f, k, v["dtype"])
            s, e = v["data_offsets"]
            out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32)
    return out
ok, seen = True, 0
for fa in sorted(glob.glob(os.path.join(a_dir, prefix + ".*.safetensors"))):
    ta, tb = load(fa), load(os.path.join(b_dir, os.path.basename(fa)))
    assert sorted(ta) == sorted(tb), (fa, sorted(ta), sorted(tb))
    for k in ta:
        big = float(np.abs(tb[k]).max())
        d = float(np.abs(ta[k].astype(np.float64) - tb[k].astype(np.float64)).max())
        seen += 1
        print("%s %s: largest difference %.3g, %.2e of the largest magnitude %.3g" % (os.path.basename(fa), k, d, d / big if big else 0.0, big))
        if not d <= 1e-6 * big:
            ok = False
assert seen > 0, "no CLIP position / class embedding tensor in %s/%s.*" % (a_dir, prefix)
sys.exit(0 if ok else 1)
PY
  fi
}
for p in microbatch-0 microbatch-1 grads weights; do
  ls "$WORK/off/dump-1/$p".* >/dev/null 2>&1 || { echo "FAIL: no $p in the dump"; exit 1; }
  same "$WORK/off/dump-1" "$WORK/on/dump-1" "$p" || exit 1
done
ck=$(cd "$WORK/off/checkpoints" && ls -d step-* | tail -1)
for p in model optimizer; do
  n=$(ls "$WORK/on/checkpoints/$ck/$p".*.safetensors | wc -l)
  [ "$n" -eq "$NP" ] || { echo "FAIL: $n $p shards in $ck, expected $NP"; exit 1; }
  same "$WORK/off/checkpoints/$ck" "$WORK/on/checkpoints/$ck" "$p" || exit 1
done
# the dry run's memory estimate in step (pp 1: the log rank's device peak is the largest rank's): each gate
# state's "largest rank" within 10% of its run's device peak, the gated one the smaller
if [ "$PP" -eq 1 ]; then
  for g in off on; do
    ( [ "$g" = off ] && export RRFP_BF16_ACTIVATIONS=0
      "$EMU" train "$RECIPE" "${common[@]}" --dry-run >"$WORK/dry-$g.log" 2>&1 ) || { cat "$WORK/dry-$g.log"; exit 1; }
  done
  /usr/bin/python3 - "$WORK" <<'PY'
import json, re, sys
work = sys.argv[1]
est = {}
for g in ("off", "on"):
    m = re.search(r"largest rank: ([0-9.]+) (KiB|MiB|GiB)", open("%s/dry-%s.log" % (work, g)).read())
    est[g] = float(m.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)]
    peak = json.loads(open("%s/%s/metrics.jsonl" % (work, g)).readlines()[-1])["device_peak_mb"]
    print("gate %s: dry-run estimate %.2f MiB, device peak %.2f MiB" % (g, est[g], peak))
    assert abs(est[g] - peak) <= 0.1 * peak, (g, est[g], peak)
assert est["on"] < est["off"], est
PY
fi
echo "train bf16a tp emu: ok"
