# layout_lib.sh — sourced by dp_train.sh and tp_train.sh: a parallel layout against one process training the same
# global step. The caller sets BIN, RECIPE, W, MPI (mpirun and its options), NP, STEPS (the runs' train.steps),
# LAYOUT (its words, e.g. "pp=2 dp=2"), the arrays COMMON (every run's --set arguments), ONE (the one process's) and
# PAR (the layout's), and fail; the one process's run is $W/one.

# prints the largest relative loss difference of runs $1 and $2; exit 1 when over 1e-6 or either has not STEPS steps
close_losses() { /usr/bin/python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$STEPS" <<'PY'
import json, sys
a = [float.fromhex(json.loads(l)["loss_hex"]) for l in open(sys.argv[1])]
b = [float.fromhex(json.loads(l)["loss_hex"]) for l in open(sys.argv[2])]
d = max([abs(x - y) / abs(x) for x, y in zip(a, b)] or [0])
print("%.3g" % d)
sys.exit(0 if len(a) == len(b) == int(sys.argv[3]) and d <= 1e-6 else 1)
PY
}

# checkpoints across layouts, stopped at step $1: the layout's checkpoint resumed in one process ($W/resume-a; with
# $2, the stopped run must hold $2 checkpoints) and one process's resumed under the layout ($W/resume-b), each the
# one process's loss curve; their largest relative differences in dl and dl2
resume_across_layouts() {
  local stop=$1 ckpts=${2:-}
  D="$W/resume-a"
  $MPI -np "$NP" "$BIN" train "$RECIPE" "${COMMON[@]}" "${PAR[@]}" --set train.stop_at="$stop" --set train.run_dir="$D" \
    >"$D.log" 2>&1 || { cat "$D.log"; fail "half run under $LAYOUT"; }
  [ -z "$ckpts" ] || [ "$(ls -d "$D"/checkpoints/step-* | wc -l)" = "$ckpts" ] ||
    fail "half run under $LAYOUT: expected $ckpts checkpoint(s)"
  "$BIN" train "$RECIPE" "${COMMON[@]}" "${ONE[@]}" --set train.run_dir="$D" --resume latest >>"$D.log" 2>&1 \
    || { cat "$D.log"; fail "the $LAYOUT checkpoint resumed in one process"; }
  dl=$(close_losses "$W/one" "$D") || fail "$LAYOUT checkpoint resumed in one process: losses differ (max rel $dl)"
  D="$W/resume-b"
  "$BIN" train "$RECIPE" "${COMMON[@]}" "${ONE[@]}" --set train.stop_at="$stop" --set train.run_dir="$D" >"$D.log" 2>&1 \
    || fail "half run"
  $MPI -np "$NP" "$BIN" train "$RECIPE" "${COMMON[@]}" "${PAR[@]}" --set train.run_dir="$D" --resume latest \
    >>"$D.log" 2>&1 || { cat "$D.log"; fail "one-process checkpoint resumed under $LAYOUT"; }
  dl2=$(close_losses "$W/one" "$D") || fail "one-process checkpoint resumed with $LAYOUT: losses differ (max rel $dl2)"
}
