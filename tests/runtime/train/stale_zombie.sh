#!/usr/bin/env bash
# stale_zombie.sh — a killed rank's temporary checkpoint folder is removed at the next start even while
# the killed process lingers as a zombie (its parent has not reaped it: kill(pid, 0) still succeeds),
# and a live writer's folder is still kept (docs/reliability.md).
# Usage: stale_zombie.sh RRFP_MM RECIPE WORKDIR
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3
case "$W" in /tmp/* | */build*/*) ;; *) echo "refusing work dir '$W'"; exit 2 ;; esac
rm -rf "$W"; mkdir -p "$W/run/checkpoints"
fail() { echo "FAIL: $*"; [ -f "$W/out.txt" ] && cat "$W/out.txt"; kill "$PARENT" 2>/dev/null; exit 1; }
# a parent that never reaps its child: the child exits at once and stays a zombie for the parent's life, which
# lasts as long as this script's (it ends the parent; a fixed life could end before a slow training run did)
python3 -c "
import os, sys, time
pid = os.fork()
if pid == 0:
    os._exit(0)
print(pid, flush=True)
ppid = os.getppid()
while os.getppid() == ppid:
    time.sleep(0.2)" >"$W/zpid" &
PARENT=$!
for i in $(seq 1 600); do [ -s "$W/zpid" ] && break; sleep 0.1; done
Z=$(cat "$W/zpid")
[ -n "$Z" ] || fail "the parent printed no pid in 60 s"
for i in $(seq 1 600); do grep -q '^State:.*Z' "/proc/$Z/status" 2>/dev/null && break; sleep 0.1; done
grep -q '^State:.*Z' "/proc/$Z/status" 2>/dev/null || fail "pid $Z did not become a zombie"
kill -0 "$Z" 2>/dev/null || fail "kill -0 does not succeed on the zombie $Z (the test would judge nothing)"
CK="$W/run/checkpoints"
mkdir -p "$CK/.step-00000003.tmp.$Z" "$CK/.step-00000004.tmp.$PARENT"
touch "$CK/.step-00000003.tmp.$Z/model.safetensors"
"$BIN" train "$RECIPE" --set train.run_dir="$W/run" --set train.steps=1 --set optim.warmup=1 >"$W/out.txt" 2>&1 || fail "training failed"
[ ! -e "$CK/.step-00000003.tmp.$Z" ] || fail "the zombie writer's .tmp folder was kept"
[ -e "$CK/.step-00000004.tmp.$PARENT" ] || fail "a live process's .tmp folder was removed"
grep -q "removed 1 unfinished checkpoint folder" "$W/out.txt" || fail "the removal is not said"
kill "$PARENT" 2>/dev/null
wait "$PARENT" 2>/dev/null
echo "stale zombie: ok"
