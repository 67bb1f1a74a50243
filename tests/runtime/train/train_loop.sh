#!/usr/bin/env bash
# train_loop.sh — the fine-tuner's loop (docs/training.md). Modes:
#   world    mpirun -np 2 with no parallel.* key: dp = world size / (pp x tp) = 2, stated on the first log
#            line; both replicas ran (rank-1.json "d": 1), and the losses equal one process training the
#            same global step (data.microbatches x 2) within 1e-6 relative (docs/parallel.md's bound)
#   epochs   train.epochs = 2 on a tiny shard set (80 records): the derived train.steps is printed and
#            used, every metrics row has "epoch" (samples seen / records), rising, and the last is 2 within
#            the estimate's slack (1.8 .. 2.3); the log lines show it; the synthetic source is refused; the same
#            run stopped at steps 2 and 3 and resumed each time has every row's epoch equal (was: it went back
#            after a resume in the middle of a packing group, 3.25 -> 2.64)
#   eval     train.eval_every = 4 (96 held-out samples of the synthetic source): with it, every training loss
#            and grad norm is the same bit for bit as without it (one process against one process, pp 2
#            against pp 2: adaptive may reorder a pp step's microbatches, so pp 2 is not one process bit
#            for bit; its training losses are checked against one process's to 1e-5; with
#            parallel.reorder = false pp 2 with eval is one process without it bit for bit); "eval_loss" at steps 4, 8, 12
#            (and on the log lines); step 12's equals `rrfp-mm eval --samples 96` on its checkpoint (1e-5);
#            pp 2 (1e-6), tp 2 and dp 2 (1e-5; dp 2 against one process with 2 x the microbatches) give
#            the one-process held-out losses; on shards (24 held-out records), the held-out loss is
#            rrfp-mm eval's over every record once, in one process and at dp 2
#   optim    optim.schedule cosine / linear / constant: the metrics' lr follows the formula at every step,
#            the default hashes as before; optim.projector_lr: after one step the projector's tensors are
#            a run at that lr's, the others a run at optim.lr's, bit for bit
# Usage: train_loop.sh RRFP_MM SOURCE_DIR WORKDIR MODE
set -uo pipefail
BIN=$1 SRC=$2 W=$3 MODE=$4
rm -rf "$W"; mkdir -p "$W"; cd "$W" || exit 1
fail() { echo "FAIL ($MODE): $*"; for f in "$W"/*.txt; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
SYN="$SRC/recipes/test-synthetic.ini"
MPI=(timeout 300 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
. "$SRC/tests/support/util/tiny_data.sh"
SMALL=("${TINY[@]}" --set data.eval_shards=eval-shards --set data.microbatch_tokens=512)

case "$MODE" in
world)
  C=(--set train.steps=4 --set optim.warmup=1 --set train.log_every=1)
  "${MPI[@]}" -np 2 "$BIN" train "$SYN" "${C[@]}" --set train.run_dir=run/world >w.txt 2>&1 || fail "mpirun -np 2 without parallel keys"
  grep -q "layout pp 1 x tp 1 x dp 2 = 2 ranks (parallel.dp from the world size 2 / (pp 1 x tp 1))" <<<"$(head -1 w.txt)" \
    || fail "the first log line does not state the layout: $(head -1 w.txt)"
  grep -q '"d": 1' run/world/rank-1.json || fail "rank 1 is not replica 1: $(cat run/world/rank-1.json)"
  "$BIN" train "$SYN" "${C[@]}" --set data.microbatches=4 --set train.run_dir=run/one >o.txt 2>&1 || fail "one process"
  /usr/bin/python3 - run/one/metrics.jsonl run/world/metrics.jsonl <<'PY' || fail "losses differ"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 4, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("dp 2 from the world size against one process x 4 microbatches: max rel loss diff %.2e" % worst)
assert worst <= 1e-6, (a, b)
PY
  # a world the layout does not divide is refused, naming the ranks
  "${MPI[@]}" -np 3 "$BIN" train "$SYN" "${C[@]}" --set parallel.pp=2 --set train.run_dir=run/three >t.txt 2>&1
  [ $? -ne 0 ] && grep -q "needs 2 ranks" t.txt || fail "np 3 with pp 2 was not refused: $(grep error t.txt | head -2)"
  ;;
epochs)
  tiny_data
  "$BIN" train "$SRC/recipes/llava.ini" "${SMALL[@]}" --set train.epochs=2 --set train.run_dir=run/e --set train.log_every=1 >e.txt 2>&1 || fail "train.epochs"
  line=$(grep "^train.epochs = 2: 80 records" e.txt) || fail "no line deriving the steps"
  steps=$(echo "$line" | sed -n 's/.*train.steps = \([0-9]*\) .*/\1/p')
  [ -n "$steps" ] && [ "$steps" -gt 1 ] || fail "no derived step count in: $line"
  grep -q "steps 1..$steps of $steps" e.txt || fail "the run did not use the derived $steps steps"
  "$BIN" train "$SRC/recipes/llava.ini" "${SMALL[@]}" --set train.epochs=2 --dry-run >dry.txt 2>&1 || fail "dry run"
  grep -q "train.steps = $steps " dry.txt || fail "the dry run derives other steps: $(head -1 dry.txt)"
  grep -q "| epoch [0-9.]*$" e.txt || fail "the log lines show no epoch"
  /usr/bin/python3 - run/e/metrics.jsonl "$steps" <<'PY' || fail "epochs in metrics"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == int(sys.argv[2]), len(rows)
ep = [r["epoch"] for r in rows]
assert all(b > a for a, b in zip(ep, ep[1:])), ep
assert 1.8 <= ep[-1] <= 2.3, ep
print("epochs: %d steps, epoch %.3f after step 1 .. %.3f at the end" % (len(rows), ep[0], ep[-1]))
PY
  # stopped and resumed twice: the epoch goes on where it stopped
  for stop in 2 3 0; do
    X=(); [ "$stop" -gt 0 ] && X=(--set train.stop_at=$stop)
    "$BIN" train "$SRC/recipes/llava.ini" "${SMALL[@]}" --set train.epochs=2 --set train.run_dir=run/r --set train.log_every=1 \
      --set train.checkpoint_every=1 --resume auto "${X[@]}" >r$stop.txt 2>&1 || fail "resumed run (stop at $stop)"
  done
  /usr/bin/python3 - run/e/metrics.jsonl run/r/metrics.jsonl <<'PY' || fail "epochs after a resume"
import json, sys
a = [(r["step"], r["epoch"]) for r in map(json.loads, open(sys.argv[1]))]
b = [(r["step"], r["epoch"]) for r in map(json.loads, open(sys.argv[2]))]
assert a == b, "uninterrupted %s\nresumed at 2, 3: %s" % (a, b)
print("epochs: stopped at steps 2 and 3 and resumed, every row's epoch equals the uninterrupted run's")
PY
  "$BIN" train "$SYN" --set train.epochs=1 --set train.run_dir=run/syn >s.txt 2>&1
  [ $? -eq 2 ] && grep -q "train.epochs = 1: data.source = synthetic has no data set" s.txt || fail "epochs on the synthetic source: $(cat s.txt)"
  ;;
eval)
  # train.eval_every under every layout: the training numbers do not change, the held-out loss is the
  # same samples' loss as `rrfp-mm eval` scores and the same under pp 2, tp 2 and dp 2 (dp 2 x 2
  # microbatches: the one-process run with 4, the global step both train)
  E=(--set train.steps=12 --set optim.warmup=1 --set train.log_every=1000 --set train.eval_every=4 --set train.eval_samples=96)
  N=(--set train.steps=12 --set optim.warmup=1 --set train.log_every=1000)
  "$BIN" train "$SYN" "${N[@]}" --set train.run_dir=run/plain >p.txt 2>&1 || fail "without eval"
  "$BIN" train "$SYN" "${E[@]}" --set train.run_dir=run/one >o.txt 2>&1 || fail "with eval"
  grep -q "| eval loss [0-9.]*$" o.txt || fail "no eval loss on the log lines"
  "$BIN" eval "$SYN" "${E[@]}" --set train.run_dir=run/one --checkpoint latest --samples 96 >ev.txt 2>&1 || fail "rrfp-mm eval"
  "${MPI[@]}" -np 2 "$BIN" train "$SYN" "${E[@]}" --set parallel.pp=2 --set runtime.trace=1 --set train.run_dir=run/pp2 >pp.txt 2>&1 || fail "pp 2"
  "${MPI[@]}" -np 2 "$BIN" train "$SYN" "${N[@]}" --set parallel.pp=2 --set train.run_dir=run/pp2plain >ppn.txt 2>&1 || fail "pp 2 without eval"
  # the pp runs reorder steps (adaptive's order, decided on the step's data alone): what the bit-for-bit check is about
  grep -q "reordered (ends order)" pp.txt || fail "pp 2: adaptive reordered no step"
  # parallel.reorder = false: every step in the data's order, and pp 2 with eval is one process without it bit for bit
  "${MPI[@]}" -np 2 "$BIN" train "$SYN" "${E[@]}" --set parallel.pp=2 --set parallel.reorder=false --set train.run_dir=run/pp2keep >ppk.txt 2>&1 || fail "pp 2 reorder=false"
  grep -q "reordered" ppk.txt && fail "pp 2 with parallel.reorder = false reordered a step"
  # the evaluations leave no trace events: the timeline holds the 12 training steps once each
  /usr/bin/python3 - run/pp2/trace-rank0.json <<'PY' || fail "trace"
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
steps = [e["name"] for e in ev if e.get("name", "").startswith("step ")]
assert steps == ["step %d" % i for i in range(1, 13)], steps
PY
  "${MPI[@]}" -np 2 "$BIN" train "$SYN" "${E[@]}" --set parallel.tp=2 --set train.run_dir=run/tp2 >tp.txt 2>&1 || fail "tp 2"
  "${MPI[@]}" -np 2 "$BIN" train "$SYN" "${E[@]}" --set train.run_dir=run/dp2 >dp.txt 2>&1 || fail "dp 2"
  "$BIN" train "$SYN" "${E[@]}" --set data.microbatches=4 --set train.run_dir=run/one4 >o4.txt 2>&1 || fail "one process x 4"
  /usr/bin/python3 - run ev.txt <<'PY' || fail "eval numbers"
import json, sys
run, evf = sys.argv[1], sys.argv[2]
rd = lambda n: [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (run, n))]
plain, one, pp2, tp2, dp2, one4, pp2plain, pp2keep = (rd(n) for n in ("plain", "one", "pp2", "tp2", "dp2", "one4", "pp2plain", "pp2keep"))
for name, rows, base in (("one process", one, plain), ("pp 2", pp2, pp2plain), ("pp 2, parallel.reorder = false", pp2keep, plain)):
    assert len(rows) == len(base) == 12, (name, len(rows), len(base))
    assert [r["loss_hex"] for r in rows] == [r["loss_hex"] for r in base], name + ": training losses changed"
    assert [r["grad_norm"] for r in rows] == [r["grad_norm"] for r in base], name + ": grad norms changed"
ev = lambda rows: [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
assert [s for s, _ in ev(one)] == [4, 8, 12], ev(one)
assert not any("eval_loss" in r for r in plain)
cli = [json.loads(l) for l in open(evf) if l.startswith("{")][0]
rel = lambda a, b: abs(a - b) / abs(b)
assert rel(ev(one)[-1][1], cli["loss"]) < 1e-5, (ev(one)[-1], cli["loss"])
worst = {}
for name, rows, ref, tol in (("pp 2", pp2, one, 1e-6), ("tp 2", tp2, one, 1e-5), ("dp 2", dp2, one4, 1e-5)):
    a, b = ev(rows), ev(ref)
    assert [s for s, _ in a] == [s for s, _ in b], (name, a, b)
    worst[name] = max(rel(x, y) for (_, x), (_, y) in zip(a, b))
    assert worst[name] <= tol, (name, a, b)
    assert all(rel(x["loss"], y["loss"]) <= 1e-5 for x, y in zip(rows, ref)), name + ": training losses"
print("eval: training losses and grad norms bit for bit with and without eval (one process, pp 2; pp 2 with "
      "parallel.reorder = false against one process); eval loss at step 12 "
      "%.6f = rrfp-mm eval's %.6f; max rel diff against one process: %s" % (ev(one)[-1][1], cli["loss"],
      ", ".join("%s %.1e" % kv for kv in worst.items())))
PY
  # on shards (24 held-out records, each once): the last held-out loss is rrfp-mm eval's on that
  # checkpoint, and dp 2 x 2 microbatches gives one process x 4's
  tiny_data
  H=("${SMALL[@]}" --set train.steps=4 --set train.eval_every=2 --set train.log_every=100)
  "$BIN" train "$SRC/recipes/llava.ini" "${H[@]}" --set data.microbatches=4 --set train.run_dir=run/s1 >s1.txt 2>&1 || fail "shards, one process"
  "${MPI[@]}" -np 2 "$BIN" train "$SRC/recipes/llava.ini" "${H[@]}" --set train.run_dir=run/s2 >s2.txt 2>&1 || fail "shards, dp 2"
  "$BIN" eval "$SRC/recipes/llava.ini" "${H[@]}" --set data.microbatches=4 --set train.run_dir=run/s1 --checkpoint latest \
    >se.txt 2>&1 || fail "eval on shards"
  /usr/bin/python3 - run/s1/metrics.jsonl run/s2/metrics.jsonl se.txt <<'PY' || fail "held-out loss on shards"
import json, sys
ev = lambda f: [(r["step"], r["eval_loss"]) for r in map(json.loads, open(f)) if "eval_loss" in r]
a, b = ev(sys.argv[1]), ev(sys.argv[2])
cli = [json.loads(l) for l in open(sys.argv[3]) if l.startswith("{")][0]
assert [s for s, _ in a] == [s for s, _ in b] == [2, 4], (a, b)
assert all(abs(x - y) <= 1e-5 * abs(x) for (_, x), (_, y) in zip(a, b)), (a, b)
assert cli["samples"] == 24 and abs(a[-1][1] - cli["loss"]) <= 1e-5 * cli["loss"], (a, cli)
print("shards: held-out loss %.6f at step 4 = rrfp-mm eval's %.6f over the 24 records; dp 2 %.6f" % (a[-1][1], cli["loss"], b[-1][1]))
PY
  "$BIN" report run/one --out one.html >/dev/null 2>&1 || fail "report"
  [ "$(grep -c '<circle class="heldout-dot"' one.html)" -eq 3 ] || fail "the report does not draw the 3 held-out points"
  grep -q '<path class="heldout"' one.html || fail "the report draws no held-out curve"
  ;;
optim)
  # optim.schedule: the metrics' lr at every step is the formula's (warm-up, then linear / constant /
  # cosine); the default hashes as before (recipes of earlier checkpoints resume), the others do not
  O=(--set train.steps=20 --set optim.warmup=4 --set optim.lr=2e-3 --set optim.min_lr=2e-4 --set train.log_every=1000)
  for k in cosine linear constant; do
    "$BIN" train "$SYN" "${O[@]}" --set optim.schedule=$k --set train.run_dir=run/$k >$k.txt 2>&1 || fail "schedule $k"
  done
  /usr/bin/python3 - run <<'PY' || fail "schedules"
import json, math, sys
for k in ("cosine", "linear", "constant"):
    lr = [json.loads(l)["lr"] for l in open("%s/%s/metrics.jsonl" % (sys.argv[1], k))]
    for s, got in enumerate(lr):
        if s < 4: want = 2e-3 * (s + 1) / 4
        else:
            p = (s - 4) / 16
            want = {"cosine": 2e-4 + 0.5 * 1.8e-3 * (1 + math.cos(math.pi * p)), "linear": 2e-3 - 1.8e-3 * p,
                    "constant": 2e-3}[k]
        assert abs(got - want) <= 1e-6 * want, (k, s, got, want)
print("schedules: cosine, linear, constant lr at every step as the formula (within f32)")
PY
  h() { "$BIN" train "$SYN" "$@" --dry-run | sed -n 's/.*(hash \([0-9a-f]*\)).*/\1/p'; }
  h0=$(h); hc=$(h --set optim.schedule=cosine); hl=$(h --set optim.schedule=linear); hp0=$(h --set optim.projector_lr=0)
  [ -n "$h0" ] && [ "$h0" = "$hc" ] && [ "$h0" = "$hp0" ] || fail "default schedule / projector_lr change the hash: $h0 $hc $hp0"
  [ "$h0" != "$hl" ] || fail "optim.schedule=linear hashes like cosine"
  # optim.projector_lr: after one step (AdamW's first update), the projector's tensors are those of a run
  # whose optim.lr is projector_lr, every other tensor that of a run at optim.lr (bit for bit)
  P=(--set train.steps=1 --set optim.warmup=1 --set train.log_every=1000)
  "$BIN" train "$SYN" "${P[@]}" --set optim.lr=1e-3 --set optim.projector_lr=2e-3 --set train.run_dir=run/pa >pa.txt 2>&1 || fail "projector_lr"
  "$BIN" train "$SYN" "${P[@]}" --set optim.lr=1e-3 --set train.run_dir=run/pb >pb.txt 2>&1 || fail "lr 1e-3"
  "$BIN" train "$SYN" "${P[@]}" --set optim.lr=2e-3 --set optim.min_lr=2e-4 --set train.run_dir=run/pc >pc.txt 2>&1 || fail "lr 2e-3"
  /usr/bin/python3 - run <<'PY' || fail "projector_lr tensors"
import json, struct, sys
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
ck = lambda r: read("%s/%s/checkpoints/step-00000001/model.safetensors" % (sys.argv[1], r))
a, b, c = ck("pa"), ck("pb"), ck("pc")
proj = [k for k in a if k.startswith("projector.")]
assert len(proj) == 4, proj
for k in a:
    want = c if k.startswith("projector.") else b
    assert a[k] == want[k], k
    if k.startswith("projector.") and k.endswith("weight"):
        assert a[k] != b[k], k  # it did move at another rate
print("projector_lr: %d projector tensors as at lr 2e-3, %d others as at lr 1e-3, bit for bit" % (len(proj), len(a) - len(proj)))
PY
  ;;
*) fail "unknown mode" ;;
esac
echo "train loop $MODE: ok"
