#!/usr/bin/env bash
# init_from_tp.sh — train.init_from from a tensor-parallel checkpoint: its shards hold slices of the
# global tensors (metadata "slice.<name>"), which init_from reassembles by global name as a resume does.
# A pp 1 x tp 2 run writes the checkpoint; runs started from it with train.init_from in one process, under
# tp 2 and under pp 2 dump their weights before step 1 (train.dump_step = 1), and every dumped tensor,
# assembled by global name, must equal the checkpoint's bit for bit (a load copies values: tolerance 0).
# The log must report every tensor loaded and none left at its initialisation.
# Usage: init_from_tp.sh RRFP_MM RECIPE WORKDIR
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
MPI="timeout 150 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"
COMMON=(--set optim.warmup=1 --set train.log_every=1)
$MPI -np 2 "$BIN" train "$RECIPE" "${COMMON[@]}" --set parallel.tp=2 --set train.steps=2 --set train.run_dir="$W/src" \
  >"$W/src.log" 2>&1 || { cat "$W/src.log"; fail "tp 2 run"; }
CK="$W/src/checkpoints/step-00000002"
ls "$CK"/model.pp0tp1c0.safetensors >/dev/null || fail "the tp 2 checkpoint has no TP shard files"
# one rank's shard alone holds half of each sliced tensor: refused, saying to give the folder
one=$("$BIN" tensors ls "$CK"/model.pp0tp1c0.safetensors 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "other tensor-parallel ranks' files are not among those read (give the checkpoint folder" <<<"$one" \
  || fail "tensors ls on one TP shard (rc $rc): $one"
"$BIN" tensors ls "$CK" >/dev/null || fail "tensors ls on the tp 2 checkpoint folder"
mkdir -p "$W/ck" && cp "$CK"/model*.safetensors "$W/ck/"
check() { # NAME NP SETS...: train one step from the checkpoint, compare the dumped weights with it
  local name=$1 np=$2
  shift 2
  local run=("$BIN" train "$RECIPE" "${COMMON[@]}" --set train.steps=1 --set train.dump_step=1
             --set train.init_from="$CK" --set train.run_dir="$W/$name" "$@")
  if [ "$np" = 1 ]; then "${run[@]}" >"$W/$name.log" 2>&1; else $MPI -np "$np" "${run[@]}" >"$W/$name.log" 2>&1; fi \
    || { cat "$W/$name.log"; fail "$name: init_from run"; }
  grep -q "init_from .*initialised 0 from model.seed, 0 in the checkpoint not used" "$W/$name.log" \
    || { grep -A12 "^init_from" "$W/$name.log"; fail "$name: not every tensor was loaded from the checkpoint"; }
  mkdir -p "$W/$name.w" && cp "$W/$name"/dump-1/weights*.safetensors "$W/$name.w/"
  "$BIN" tensors diff "$W/ck" "$W/$name.w" --quiet >"$W/$name.diff" 2>&1 \
    || { cat "$W/$name.diff"; fail "$name: the loaded weights differ from the tp 2 checkpoint's"; }
  echo "$name: $(grep -o 'loaded [0-9]* tensors ([0-9]* values)' "$W/$name.log"), equal to the checkpoint: $(tail -1 "$W/$name.diff")"
}
check one 1
check tp2 2 --set parallel.tp=2
check pp2 2 --set parallel.pp=2
echo "init_from tp: ok"
