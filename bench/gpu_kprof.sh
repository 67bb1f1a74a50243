#!/usr/bin/env bash
# gpu_kprof.sh — per-kernel GPU time of one step of bench/gpu_stage.sh's stages (ours only), from CUPTI: where the
# step's time goes kernel by kernel, which runtime.profile's per-kind table cannot say.
#
# Each stage runs twice under the CUPTI shim (LD_PRELOAD=$KPROF: a CUPTI shim, kprof.so, that writes one row
# per kernel name: kind, count, total ns, name), with N1 and N2 steps of the same fixed microbatch; the per-step
# figures are the difference of the two runs' totals divided by N2 - N1, so start-up (the weights' upload, their
# compute copies, cuBLAS's and cuDNN's first calls) and the first steps drop out exactly, with no time-based skip.
# Printed per stage: the kernels by GPU time per step (count per step, ms per step, share of the step's GPU time,
# demangled name), then the totals per group (GEMMs: cuBLAS's nvjet / sm90 kernels; attention: fa_* / cudnn; memsets;
# copies; the rest by kernel).
#
# Usage: bench/gpu_kprof.sh [build-dir] [stage...]   (stages: lm vit stage0; default lm vit)
# Environment: KPROF (the shim; the device's setup.sh exports it), PY (python3; default /usr/bin/python3),
#              GPU_KPROF_STEPS="N1 N2" (default "4 14"), GPU_KPROF_TOP (rows per stage, default 30),
#              GPU_KPROF_LOGS=DIR (keep the runs' logs and tables there).
# Without a GPU or without KPROF it says so and exits 0 (nothing measured).
set -uo pipefail
BUILD=${1:-build}
shift $(($# > 0 ? 1 : 0))
STAGES=${*:-lm vit}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
EXE="$BUILD/rrfp-mm"
PY=${PY:-/usr/bin/python3}
read -r N1 N2 <<< "${GPU_KPROF_STEPS:-4 14}"
[ -x "$EXE" ] || { echo "gpu_kprof.sh: $EXE not found; build first" >&2; exit 1; }
[ "$N2" -gt "$N1" ] 2> /dev/null || { echo "gpu_kprof.sh: GPU_KPROF_STEPS must be two step counts N1 < N2" >&2; exit 2; }
for stage in $STAGES; do
  case $stage in lm | vit | stage0) ;; *) echo "gpu_kprof.sh: unknown stage '$stage' (lm, vit, stage0)" >&2; exit 2 ;; esac
done
if ! grep -q "^backends: cpu, cuda" <<<"$("$EXE" version 2>&1)"; then
  echo "gpu_kprof.sh: not measured: no GPU ($("$EXE" version 2>&1 | grep -i cuda | head -1))"
  exit 0
fi
if [ -z "${KPROF:-}" ] || [ ! -f "$KPROF" ]; then
  echo "gpu_kprof.sh: not measured: KPROF (the path of the CUPTI shim kprof.so) is not set"
  exit 0
fi
T=$(mktemp -d)
trap '[ -n "${GPU_KPROF_LOGS:-}" ] && mkdir -p "$GPU_KPROF_LOGS" && cp -r "$T"/. "$GPU_KPROF_LOGS"/ 2>/dev/null; rm -rf "$T"' EXIT
source "$HERE/gpu_stage_sets.sh"

for stage in $STAGES; do
  "$PY" "$HERE/gpu_stage_torch.py" --write-plan "$stage" "$T/plan-$stage.txt" "$TOKENS" || exit 1
  eval "args=(\"\${${stage}_sets[@]}\")"
  for n in "$N1" "$N2"; do
    rm -rf "$T/run-$stage-$n"
    if ! LD_PRELOAD="$KPROF" KPROF_OUT="$T/$stage-$n.tsv" KPROF_SKIP_S=0 "$EXE" train "$ROOT/recipes/test-synthetic.ini" \
         "${args[@]}" "${common[@]}" --set runtime.backend=cuda --set data.synthetic_plan="$T/plan-$stage.txt" \
         --set train.steps="$n" --set train.run_dir="$T/run-$stage-$n" > "$T/$stage-$n.log" 2>&1; then
      echo "$stage: the run of $n steps failed:"; tail -5 "$T/$stage-$n.log"; continue 2
    fi
    rm -rf "$T/run-$stage-$n"
  done
  echo "== $stage stage: per step, from the difference of a $N2-step and a $N1-step run"
  "$PY" - "$T/$stage-$N1.tsv" "$T/$stage-$N2.tsv" "$((N2 - N1))" "${GPU_KPROF_TOP:-30}" <<'PY'
import re, shutil, subprocess, sys

def load(path):
    rows = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 4 or f[0] not in "KCS":
            continue  # the shim's summary rows (window, busy)
        key = (f[0], f[3])
        n, ns = rows.get(key, (0, 0))
        rows[key] = (n + int(f[1]), ns + int(f[2]))
    return rows

a, b, steps, top = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
per = {}
for key, (n, ns) in b.items():
    n0, ns0 = a.get(key, (0, 0))
    if n - n0 > 0:
        per[key] = ((n - n0) / steps, (ns - ns0) / steps / 1e6)
names = [k[1] for k in per]
if shutil.which("c++filt"):
    dm = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    dm = dict(zip(names, dm))
else:
    dm = {n: n for n in names}
total = sum(ms for _, ms in per.values())

def group(kind, name):
    if kind == "S":
        return "memset"
    if kind == "C":
        return "memcpy"
    base = dm[name].replace("void ", "", 1).replace("(anonymous namespace)::", "")
    if re.match(r"(nvjet|sm90_xmma|cutlass)", name) or "gemm" in name.lower():
        return "gemm (cuBLAS)"
    if base.startswith("fa_") or re.search(r"cudnn|sdpa|flash", base):
        return "attention"
    return re.sub(r"[<(].*", "", base).strip()

print("  %8s %9s %6s  %s" % ("per step", "ms", "share", "kernel"))
for key, (n, ms) in sorted(per.items(), key=lambda kv: -kv[1][1])[:top]:
    print("  %8.1f %9.3f %5.1f%%  %s" % (n, ms, 100 * ms / total if total else 0, dm[key[1]][:110]))
groups = {}
for key, (n, ms) in per.items():
    g = group(*key)
    c, t = groups.get(g, (0, 0))
    groups[g] = (c + n, t + ms)
print("  by group:")
for g, (n, ms) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:top]:
    print("  %8.1f %9.3f %5.1f%%  %s" % (n, ms, 100 * ms / total if total else 0, g))
print("  total %.2f ms of GPU time per step (%d kernels, memsets and copies a step)" % (total, round(sum(n for n, _ in per.values()))))
PY
done
