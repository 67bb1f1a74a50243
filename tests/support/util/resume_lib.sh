# resume_lib.sh — sourced by the stop-and-resume tests (bash): `resume_bitwise RECIPE ARGS...` trains RECIPE with the
# rrfp-mm $BIN and the `train` arguments ARGS (train.steps = 4) uninterrupted into $W/full, then stopped
# at step 2 and resumed from its latest checkpoint into $W/part (logs $W/full.txt, part1.txt, part2.txt), and fails
# (exit 1) unless steps 3 and 4 have the same loss and gradient norm bit for bit (their hex) in both metrics.jsonl.
resume_steps() { # metrics.jsonl: "step loss grad_norm" (hex) of its steps >= 3
  /usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("step", 0) >= 3 and "loss" in r: print(r["step"], r["loss"].hex() if isinstance(r["loss"], float) else r["loss"], r["grad_norm"].hex())' "$1"
}
resume_bitwise() {
  local recipe=$1
  shift
  "$BIN" train "$recipe" "$@" --set train.run_dir="$W/full" >"$W/full.txt" 2>&1
  "$BIN" train "$recipe" "$@" --set train.run_dir="$W/part" --set train.stop_at=2 >"$W/part1.txt" 2>&1
  "$BIN" train "$recipe" "$@" --set train.run_dir="$W/part" --set checkpoint.resume=latest >"$W/part2.txt" 2>&1
  local a b
  a=$(resume_steps "$W/full/metrics.jsonl") b=$(resume_steps "$W/part/metrics.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: resumed steps differ:"; echo "$a"; echo "--"; echo "$b"; exit 1; }
  echo "steps 3-4 equal bit for bit after the resume:"; echo "$a"
}
