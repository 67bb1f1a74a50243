#!/usr/bin/env bash
# train_gpu_one_device.sh — `rrfp-mm train` as a pp 2 pipeline of two processes sharing one GPU (the MPI
# transport: each process opens the same device, messages staged through the host), stopped half way and
# resumed, against the CPU backend's single process: every step's loss and grad norm within
# tests/runtime/train/train_cuda_emu.sh's TOL_CPU (its pp mode, run with the real binary instead of the emulation). NCCL needs
# a device per rank, so runtime.comm = nccl joins only where the machine has two (the same comparison over it).
# Exit 77 (skipped) without a device.
# Usage: train_gpu_one_device.sh RRFP_MM RECIPE WORKDIR MPIRUN...
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3
shift 3
ver=$("$BIN" version 2>&1)
grep -q '^backends: .*cuda' <<<"$ver" || { echo "skipped: $(echo "$ver" | grep '^cuda:' || echo 'no CUDA backend')"; exit 77; }
SRC=$(cd "$(dirname "$0")" && pwd)
bash "$SRC/train_cuda_emu.sh" "$BIN" "$BIN" "$RECIPE" "$W/mpi" 6 pp 2 "$@" || exit 1
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${n:-0}" -ge 2 ]; then
    EXTRA_SETS="--set runtime.comm=nccl" bash "$SRC/train_cuda_emu.sh" "$BIN" "$BIN" "$RECIPE" "$W/nccl" 6 pp 2 "$@" || exit 1
else
    echo "runtime.comm = nccl: left out (${n:-0} device(s); NCCL takes one per rank)"
fi
echo "gpu one device: ok"
