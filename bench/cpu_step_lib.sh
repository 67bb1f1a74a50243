# cpu_step_lib.sh — sourced by the CPU-backend benchmarks that time a training step by its CPU time (bench/lora.sh,
# bench/recompute.sh): user + sys of one thread, since a shared machine's load stretches the wall clock, not the
# work. A step's time: (CPU of a STEPS-step run - CPU of a 1-step run) / (STEPS - 1), the runs of every variant
# repeated ROUNDS times interleaved, the least of the rounds. Sourcing it makes the scratch folder WORK (removed at
# exit) and sets one OpenMP thread; the caller sets BIN, ROOT, STEPS, ROUNDS and the array `sets` (every run's --set
# arguments over recipes/llava.ini), and defines `vsets VARIANT` (the variant's --set arguments, printed).
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
cpu_run() { # variant steps name: CPU seconds of the run into WORK/name.cpu
  # shellcheck disable=SC2046
  /usr/bin/time -f "%U %S" -o "$WORK/$3.cpu" "$BIN" train "$ROOT/recipes/llava.ini" "${sets[@]}" $(vsets "$1") \
    --set train.steps="$2" --set train.run_dir="$WORK/$3" >"$WORK/$3.log" 2>&1 || { tail -3 "$WORK/$3.log"; exit 1; }
}
cpu_rounds() { # variant...: each one's STEPS-step and 1-step runs, ROUNDS times interleaved
  local r v
  for r in $(seq "$ROUNDS"); do
    for v in "$@"; do
      cpu_run "$v" "$STEPS" "$v-$r"
      cpu_run "$v" 1 "$v-$r-one"
    done
  done
}
cpu_step() { # variant: "CPU s per step, the fastest step's wall s (metrics step_time_s), the peak RSS MiB"
  /usr/bin/python3 - "$WORK" "$1" "$ROUNDS" "$STEPS" <<'PY'
import json, sys
work, v, rounds, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cpu = lambda f: sum(map(float, open(f).read().split()[-2:]))
per = min((cpu("%s/%s-%d.cpu" % (work, v, r)) - cpu("%s/%s-%d-one.cpu" % (work, v, r))) / (steps - 1) for r in range(1, rounds + 1))
rows = [x for r in range(1, rounds + 1) for x in [json.loads(l) for l in open("%s/%s-%d/metrics.jsonl" % (work, v, r))][1:]]
print(per, min(x["step_time_s"] for x in rows), max(x["peak_mem_mb"] for x in rows))
PY
}
