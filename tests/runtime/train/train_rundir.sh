#!/usr/bin/env bash
# train_rundir.sh — run folders never mix runs (runtime/train/rundir.h). Modes:
#   reuse    the data-loss case: run A (60 steps, checkpoints 40 and 60 kept) in run/my; a fresh run B there
#            is refused naming the metrics rows and checkpoints and the three ways on, and nothing changes
#            (every file's bytes); with train.overwrite = true A's contents move aside into
#            run/my/previous-*/ byte for byte, B's step-20 checkpoint stays (keep 2), metrics.jsonl holds
#            B's 20 rows, and `eval --checkpoint latest` scores B's step 20
#   identity another run's checkpoint put into this run's checkpoint folder by hand (step 90, newer than
#            every one of this run's): `latest` / --resume auto take this run's newest, checkpoint.keep never
#            deletes it
#   auto     --resume auto in an empty folder starts fresh; stopped at 20 and resumed with the same line,
#            the losses equal an uninterrupted run's bit for bit; --resume latest in an empty folder is an
#            error naming --resume auto; auto in a folder with metrics rows but no checkpoint (a first
#            attempt that died before one) moves them aside and starts fresh; a changed hashed key is
#            refused naming the key, its old and new values
#   append   a resumed run appends to metrics.jsonl: the rows of a lost attempt past the checkpoint stay,
#            the resumed run's rows for those steps follow, equal bit for bit; `rrfp-mm report` draws one
#            row per step
#   mpi      pp 2 under mpirun: --resume auto fresh, then resumed by the same line (rank 0 decides, every
#            rank follows), bit for bit against one uninterrupted pp 2 run
#   incomplete  a step-* folder without state.json (newer than every checkpoint): --resume auto names it
#            and resumes the newest complete one; when the run reaches that step its checkpoint moves the
#            folder aside to step-N.kept.PID, named, every file kept (was: skipped without a word, then
#            deleted); another run's checkpoint in the way is kept the same way
#   cwd      train.overwrite = true with run_dir = . (the working folder, holding the recipe and shards)
#            or a run folder holding data.shards is refused naming why, and nothing moves (was: the user's
#            shards and recipe moved into previous-*/)
# Usage: train_rundir.sh RRFP_MM RECIPE WORKDIR MODE
set -uo pipefail
BIN=$1 RECIPE=$2 W=$3 MODE=$4
rm -rf "$W"; mkdir -p "$W"; cd "$W" || exit 1
fail() { echo "FAIL ($MODE): $*"; for f in "$W"/*.txt; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
C=(--set train.log_every=1000 --set checkpoint.keep=2)
sums() { (cd "$1" && find . -type f ! -name .lock | sort | xargs md5sum); }
rows() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
hexes() { /usr/bin/python3 -c 'import json,sys; print(" ".join("%d:%s" % (r["step"], r["loss_hex"]) for r in map(json.loads, open(sys.argv[1]))))' "$1"; }

case "$MODE" in
reuse)
  "$BIN" train "$RECIPE" "${C[@]}" --set train.run_dir=run/my --set train.steps=60 --set train.checkpoint_every=20 >a.txt 2>&1 || fail "run A"
  [ "$(ls run/my/checkpoints)" = "$(printf 'step-00000040\nstep-00000060')" ] || fail "run A's checkpoints: $(ls run/my/checkpoints)"
  sums run/my >before.sums
  "$BIN" train "$RECIPE" "${C[@]}" --set train.run_dir=run/my --set train.steps=20 --set train.checkpoint_every=20 >b.txt 2>&1
  rc=$?
  [ $rc -eq 1 ] || fail "a fresh run into a used folder exited $rc, expected 1"
  for want in "run/my/metrics.jsonl with 60 rows \(steps 1..60\)" "2 checkpoints in run/my/checkpoints \(step-00000040, step-00000060\)" \
              "--resume auto" "train.run_dir=" "train.overwrite=true" "nothing is deleted"; do
    grep -Eq -- "$want" b.txt || fail "the refusal does not say '$want'"
  done
  sums run/my >after.sums
  cmp -s before.sums after.sums || fail "the refused run changed the folder: $(diff before.sums after.sums)"
  echo "refused: $(head -1 b.txt)"
  "$BIN" train "$RECIPE" "${C[@]}" --set train.run_dir=run/my --set train.steps=20 --set train.checkpoint_every=20 \
    --set train.overwrite=true >c.txt 2>&1 || fail "overwrite run"
  prev=$(ls -d run/my/previous-* 2>/dev/null)
  [ "$(echo "$prev" | wc -w)" -eq 1 ] || fail "expected one previous-* folder, got '$prev'"
  sums "$prev" >moved.sums
  cmp -s before.sums moved.sums || fail "the moved contents differ from run A's: $(diff before.sums moved.sums)"
  [ "$(ls run/my/checkpoints)" = step-00000020 ] || fail "run B's checkpoints: $(ls run/my/checkpoints) (keep must not delete B's step 20)"
  [ "$(rows run/my/metrics.jsonl)" -eq 20 ] || fail "run B's metrics: $(rows run/my/metrics.jsonl) rows"
  grep -q "moved the previous contents of run/my" c.txt || fail "the overwrite does not say where the old run went"
  "$BIN" eval "$RECIPE" --set train.run_dir=run/my --checkpoint latest --samples 8 >e.txt 2>&1 || fail "eval latest"
  grep -q "at step 20 " e.txt || fail "eval --checkpoint latest did not score run B's step 20: $(head -1 e.txt)"
  echo "overwrite: run A moved byte for byte into $prev; run B: checkpoint step 20, 20 metrics rows; eval latest = step 20"
  ;;
identity)
  "$BIN" train "$RECIPE" "${C[@]}" --set train.run_dir=run/a --set train.steps=90 --set train.checkpoint_every=30 >a.txt 2>&1 || fail "run A"
  "$BIN" train "$RECIPE" "${C[@]}" --set train.run_dir=run/b --set train.steps=40 --set train.checkpoint_every=10 --set train.stop_at=20 >b.txt 2>&1 || fail "run B"
  cp -r run/a/checkpoints/step-00000090 run/b/checkpoints/
  "$BIN" eval "$RECIPE" --set train.run_dir=run/b --checkpoint latest --samples 8 >e.txt 2>&1 || fail "eval latest"
  grep -q "at step 20 " e.txt || fail "latest is not run B's newest (step 20): $(head -1 e.txt)"
  "$BIN" train "$RECIPE" "${C[@]}" --set train.run_dir=run/b --set train.steps=40 --set train.checkpoint_every=10 --resume auto >b2.txt 2>&1 || fail "resume B"
  grep -q "resumed from run/b/checkpoints/step-00000020 at step 20" b2.txt || fail "auto did not resume B's step 20: $(grep resumed b2.txt)"
  [ "$(ls run/b/checkpoints | tr '\n' ' ')" = "step-00000030 step-00000040 step-00000090 " ] \
    || fail "keep 2 must keep B's newest two and never touch A's step 90: $(ls run/b/checkpoints | tr '\n' ' ')"
  ida=$(grep -o '"run_id":[^,]*' run/a/run.json); idb=$(grep -o '"run_id":[^,]*' run/b/run.json)
  [ "$ida" != "$idb" ] || fail "two runs share an identity"
  grep -q "${idb#*:}" run/b/checkpoints/step-00000040/state.json || fail "B's checkpoint lacks B's run_id"
  # a checkpoint of an earlier build (no run_id) counts as the run's that finds it (as before identities):
  # A's step 90 in B's folder without its run_id (its files keep their own step, job and layout, which
  # the load checks against state.json, so the step is not renamed)
  /usr/bin/python3 - run/b/checkpoints/step-00000090/state.json <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s.pop("run_id")
json.dump(s, open(sys.argv[1], "w"))
PY
  "$BIN" eval "$RECIPE" --set train.run_dir=run/b --checkpoint latest --samples 8 >e2.txt 2>&1 || fail "eval latest (legacy)"
  grep -q "at step 90 " e2.txt || fail "a checkpoint without run_id is not this run's latest: $(head -1 e2.txt)"
  echo "identity: latest and auto take run B's step 20 over run A's step 90; keep 2 left B's 30, 40 and A's 90;"
  echo "          a checkpoint without run_id (an earlier build's: A's step 90 with it removed) counts as B's"
  ;;
auto)
  S=(--set train.steps=40 --set train.checkpoint_every=10)
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/full >full.txt 2>&1 || fail "uninterrupted run"
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/job --resume latest >l.txt 2>&1
  [ $? -eq 1 ] && grep -q "no checkpoint in 'run/job/checkpoints'.*" l.txt && grep -q -- "--resume auto starts fresh" l.txt \
    || fail "--resume latest in an empty folder: $(cat l.txt)"
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/job --resume auto --set train.stop_at=20 >j1.txt 2>&1 || fail "first start"
  grep -q resumed j1.txt && fail "the first start resumed something"
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/job --resume auto >j2.txt 2>&1 || fail "requeue"
  grep -q "resumed from run/job/checkpoints/step-00000020 at step 20" j2.txt || fail "the requeue did not resume step 20"
  [ "$(hexes run/full/metrics.jsonl)" = "$(hexes run/job/metrics.jsonl)" ] || fail "auto resume is not bit for bit"
  # a first attempt that died before its first checkpoint: rows, no checkpoint
  mkdir -p run/dead && head -5 run/full/metrics.jsonl >run/dead/metrics.jsonl
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/dead --resume auto --set train.stop_at=10 >d.txt 2>&1 || fail "auto after a dead attempt"
  [ "$(rows run/dead/previous-*/metrics.jsonl)" -eq 5 ] && [ "$(rows run/dead/metrics.jsonl)" -eq 10 ] || fail "the dead attempt's rows were not moved aside"
  # a changed hashed key names itself with both values
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/job --resume auto --set optim.lr=1e-3 --set data.seed=9 >k.txt 2>&1
  [ $? -eq 1 ] || fail "a changed key was not refused"
  grep -q "optim.lr: 0.003 -> 0.001" k.txt && grep -q "data.seed: 3 -> 9" k.txt || fail "the refusal does not name the keys: $(cat k.txt)"
  grep -q "model\.\|train.steps" k.txt && fail "the refusal names keys that did not change: $(cat k.txt)"
  echo "auto: fresh, then resumed at 20 by the same line, 40 losses bit for bit; latest in an empty folder refused;"
  echo "      a dead attempt's rows moved aside; changed keys named: $(grep -c ' -> ' k.txt) lines"
  ;;
append)
  S=(--set train.steps=40 --set train.checkpoint_every=20)
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/r --set train.stop_at=30 >a.txt 2>&1 || fail "first attempt"
  # the attempt's checkpoint at 30 is lost: the newest left is step 20, its rows 21..30 stay
  rm -rf run/r/checkpoints/step-00000030
  cp run/r/metrics.jsonl first.jsonl
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/r --resume auto >b.txt 2>&1 || fail "resume"
  grep -q "keeps its 10 rows past step 20" b.txt || fail "no note about the rows past the checkpoint"
  [ "$(rows run/r/metrics.jsonl)" -eq 50 ] || fail "metrics.jsonl has $(rows run/r/metrics.jsonl) rows, expected 30 + 20"
  head -30 run/r/metrics.jsonl | cmp -s - first.jsonl || fail "the first attempt's rows changed"
  /usr/bin/python3 - run/r/metrics.jsonl <<'PY' || fail "rows"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == list(range(1, 31)) + list(range(21, 41)), [r["step"] for r in rows]
for a, b in zip(rows[20:30], rows[30:40]):
    assert a["loss_hex"] == b["loss_hex"], (a, b)
PY
  "$BIN" report run/r --out r.html >rep.txt 2>&1 || fail "report"
  grep -q "<td>1 .. 40 (40 lines)</td>" r.html || fail "the report does not draw one row per step: $(grep -o '<td>[0-9]* .. [^<]*</td>' r.html)"
  echo "append: 30 rows of the first attempt kept, 20 of the resumed run appended (steps 21..30 equal bit for bit)"
  ;;
incomplete)
  S=(--set train.steps=6 --set train.checkpoint_every=2 --set checkpoint.keep=0)
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/i --set train.stop_at=4 >a.txt 2>&1 || fail "first attempt"
  # step 4 loses its state.json (a folder left by hand or by another tool: no complete checkpoint)
  rm run/i/checkpoints/step-00000004/state.json
  echo "the user's" >run/i/checkpoints/step-00000004/notes.txt
  before=$(sums run/i/checkpoints/step-00000004)
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/i --resume auto >b.txt 2>&1 || fail "resume"
  grep -q "checkpoint.resume = auto: 'run/i/checkpoints/step-00000004' has no state.json .*skipped, resuming from run/i/checkpoints/step-00000002" b.txt \
    || fail "the folder without state.json is not named"
  grep -q "resumed from run/i/checkpoints/step-00000002 at step 2" b.txt || fail "did not resume step 2"
  kept=$(ls -d run/i/checkpoints/step-00000004.kept.* 2>/dev/null | head -1)
  [ -n "$kept" ] && [ "$(sums "$kept")" = "$before" ] || fail "the folder without state.json was not kept whole: $(ls run/i/checkpoints)"
  grep -q "warning: 'run/i/checkpoints/step-00000004' was in the way of this run's checkpoint of step 4 .*no state.json.*moved aside to '$kept', not deleted" b.txt \
    || fail "moving it aside is not said"
  [ -f run/i/checkpoints/step-00000004/state.json ] && [ -f run/i/checkpoints/step-00000006/state.json ] || fail "the run's own checkpoints"
  # another run's checkpoint of a step this run writes: kept, not replaced
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/o --set train.stop_at=2 >o.txt 2>&1 || fail "run O"
  cp -r run/i/checkpoints/step-00000004 run/o/checkpoints/
  before=$(sums run/o/checkpoints/step-00000004)
  "$BIN" train "$RECIPE" "${C[@]}" "${S[@]}" --set train.run_dir=run/o --resume auto >o2.txt 2>&1 || fail "resume O"
  grep -q "step-00000004' was in the way .*it belongs to another run" o2.txt || fail "another run's checkpoint in the way is not named"
  kept=$(ls -d run/o/checkpoints/step-00000004.kept.* 2>/dev/null | head -1)
  [ -n "$kept" ] && [ "$(sums "$kept")" = "$before" ] || fail "another run's checkpoint was not kept: $(ls run/o/checkpoints)"
  echo "incomplete: a step folder without state.json named at resume and kept aside; another run's kept aside"
  ;;
cwd)
  mkdir -p here && cp "$RECIPE" here/r.ini
  (cd here && "$BIN" train r.ini "${C[@]}" --set train.steps=2 --set optim.warmup=1 --set train.run_dir=. >../a.txt 2>&1) || fail "a run in ."
  before=$(sums here)
  (cd here && "$BIN" train r.ini "${C[@]}" --set train.steps=2 --set optim.warmup=1 --set train.run_dir=. --set train.overwrite=true >../b.txt 2>&1)
  [ $? -eq 1 ] || fail "train.overwrite in the working folder was not refused"
  grep -q "train.run_dir = . is the working folder: moving a used run folder's contents aside" b.txt || fail "the refusal does not say why"
  [ "$(sums here)" = "$before" ] && [ -z "$(ls -d here/previous-* 2>/dev/null)" ] || fail "something moved: $(ls here)"
  # a run folder holding the run's own inputs (here: a shards folder)
  L=(--set model.vision_width=32 --set model.vision_layers=1 --set model.vision_heads=2 --set model.text_width=64
     --set model.text_layers=2 --set model.text_heads=2 --set model.ffn_hidden=172 --set optim.warmup=1 --set train.steps=2)
  "$BIN" demo-data --out data --samples 12 --heldout 2 >/dev/null && \
    "$BIN" tokenizer train --vocab 300 --manifest data/train.json --out tok.json --quiet && \
    "$BIN" pack --manifest data/train.json --images data/images --tokenizer tok.json --out run/s/shards >/dev/null 2>&1 || fail "data"
  SRCR=$(dirname "$RECIPE")/llava.ini
  "$BIN" train "$SRCR" "${L[@]}" --set data.shards=run/s/shards --set data.tokenizer=tok.json --set train.run_dir=run/s >s1.txt 2>&1 || fail "run S"
  before=$(sums run/s)
  "$BIN" train "$SRCR" "${L[@]}" --set data.shards=run/s/shards --set data.tokenizer=tok.json --set train.run_dir=run/s \
    --set train.overwrite=true >s2.txt 2>&1
  [ $? -eq 1 ] && grep -q "train.run_dir = run/s holds data.shards (run/s/shards), an input of this run" s2.txt || fail "a run folder holding data.shards: $(tail -3 s2.txt)"
  [ "$(sums run/s)" = "$before" ] || fail "something moved in run/s"
  echo "cwd: overwrite refused in the working folder and in a run folder holding data.shards; nothing moved"
  ;;
mpi)
  MPI=(timeout 300 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np 2)
  P=(--set parallel.pp=2 --set train.steps=12 --set train.checkpoint_every=3)
  "${MPI[@]}" "$BIN" train "$RECIPE" "${C[@]}" "${P[@]}" --set train.run_dir=run/full >full.txt 2>&1 || fail "uninterrupted"
  "${MPI[@]}" "$BIN" train "$RECIPE" "${C[@]}" "${P[@]}" --set train.run_dir=run/job --resume auto --set train.stop_at=6 >j1.txt 2>&1 || fail "first start"
  "${MPI[@]}" "$BIN" train "$RECIPE" "${C[@]}" "${P[@]}" --set train.run_dir=run/job --resume auto >j2.txt 2>&1 || fail "requeue"
  grep -q "resumed from run/job/checkpoints/step-00000006 at step 6" j2.txt || fail "pp 2 did not resume step 6"
  [ "$(hexes run/full/metrics.jsonl)" = "$(hexes run/job/metrics.jsonl)" ] || fail "pp 2 auto resume is not bit for bit"
  "${MPI[@]}" "$BIN" train "$RECIPE" "${C[@]}" "${P[@]}" --set train.run_dir=run/job >k.txt 2>&1
  [ $? -ne 0 ] && grep -q "holds another run" k.txt || fail "pp 2: a fresh start into the used folder was not refused"
  echo "mpi: pp 2 --resume auto fresh then resumed at step 6, 12 losses bit for bit; fresh start refused"
  ;;
*) fail "unknown mode" ;;
esac
echo "train rundir $MODE: ok"
