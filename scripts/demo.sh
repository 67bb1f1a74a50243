#!/usr/bin/env bash
# demo.sh — `make demo`: demo data -> tokenizer -> shards -> train recipes/demo.ini -> held-out QA -> report.
#
#   scripts/demo.sh [RRFP_MM]        (default build/rrfp-mm; writes demo/ and run/demo/)
#   DEMO_STEPS=N (train steps, default the recipe's), DEMO_WARMUP=W (default N/10),
#   DEMO_SAMPLES=S (training records, default 20000), DEMO_HELDOUT=K (held-out questions, default 1200:
#   400 per question type), DEMO_DATA=DIR (default demo), DEMO_RUN=DIR (default run/demo): the test
#   suite's small run (tests/runtime/train/demo_small.sh) uses the last four.
#
# The demo's scenes are square with one mid-grey background (demo-data --square) so that every image
# becomes the same 3 x 3 grid of 24-px patches (recipes/demo.ini: patch 24, 9 patches), one patch per
# cell of the scenes' layout. Three question types (demo-data --types, docs/training.md "Demo"), one
# question per training record (--questions 1): "How many shapes are there?" (count_all, 1-4 shapes),
# "What colour is the shape?" (lone_colour, one shape) and "What colour is the square?" (colour, 1-4
# shapes, the named kind appears once).
# Prints the training log (the loss falls), then the held-out accuracy per question type against chance
# and against the blind majority, a few answers generated with `rrfp-mm generate` and their accuracy
# beside eval's, and ends with the report page's path. Everything it makes is under
# demo/ and run/demo/; a second run reuses demo/ when it is complete.
# When this build lacks the data commands (demo-data, pack) it says so and runs the same pipeline
# on generated data (data.source = synthetic) instead of pretending.
set -euo pipefail
EXE=${1:-build/rrfp-mm}
cd "$(dirname "$0")/.."
STEPS=${DEMO_STEPS:-}
HELDOUT=${DEMO_HELDOUT:-1200}
SAMPLES=${DEMO_SAMPLES:-20000}
DATA=${DEMO_DATA:-demo}
RUN=${DEMO_RUN:-run/demo}
TYPES=count_all,lone_colour,colour
T0=$SECONDS
# each part says how long the demo has run so far (make demo's set-up and build are before T0)
part() { printf '== %s  [%dm%02ds]\n' "$1" $(((SECONDS - T0) / 60)) $(((SECONDS - T0) % 60)); }
has() { grep -qE "^  $1 " <<<"$("$EXE" --help 2>/dev/null)"; }

if has demo-data && has pack && "$EXE" tokenizer --help >/dev/null 2>&1; then
  STAMP="square flat types $TYPES questions 1 samples $SAMPLES heldout $HELDOUT"
  if [ "$(cat "$DATA/.complete" 2>/dev/null)" != "$STAMP" ]; then
    rm -rf "$DATA"
    mkdir -p "$DATA"
    part "demo data"
    "$EXE" demo-data --square --types "$TYPES" --questions 1 --out "$DATA/data" --samples "$SAMPLES" --heldout "$HELDOUT"
    part "tokenizer (byte-level BPE trained on the demo manifest)"
    # the demo's text has few distinct words: its byte-level BPE runs out of pairs near 450 tokens
    "$EXE" tokenizer train --vocab 448 --manifest "$DATA/data/train.json" --out "$DATA/tokenizer.json" --quiet
    part "pack"
    # the patch grid of recipes/demo.ini (patch 24, 9 patches: 72 x 72 px)
    for s in train:shards heldout:eval-shards; do
      "$EXE" pack --manifest "$DATA/data/${s%%:*}.json" --images "$DATA/data/images" --tokenizer "$DATA/tokenizer.json" \
        --out "$DATA/${s#*:}" --patch 24 --min-patches 9 --max-patches 9 --quiet
    done
    echo "$STAMP" >"$DATA/.complete"
  fi
  RECIPE=recipes/demo.ini
  SETS=(--set data.shards="$DATA/shards" --set data.eval_shards="$DATA/eval-shards" --set data.tokenizer="$DATA/tokenizer.json")
  MODE=shards
else
  echo "rrfp-mm: note: this build has no demo-data / pack / tokenizer commands yet;" >&2
  echo "          training recipes/llava.ini's model on generated data (data.source = synthetic) instead." >&2
  RECIPE=recipes/llava.ini
  SETS=(--set data.source=synthetic --set model.vocab=256 --set train.steps=${STEPS:-120})
  STEPS=
  MODE=synthetic
fi
[ -n "$STEPS" ] && SETS+=(--set train.steps="$STEPS" --set optim.warmup="${DEMO_WARMUP:-$((STEPS / 10))}")

part "train $RECIPE"
rm -rf "$RUN"
"$EXE" train "$RECIPE" "${SETS[@]}" --set train.run_dir="$RUN"
part "held-out questions"
"$EXE" eval "$RECIPE" "${SETS[@]}" --set train.run_dir="$RUN" --checkpoint latest --samples "$HELDOUT" \
  --predictions "$RUN/predictions.jsonl"
/usr/bin/python3 - "$RUN/metrics.jsonl" "$DATA/data/eval.jsonl" "$RUN/predictions.jsonl" "$MODE" <<'EOF'
import collections, json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
if sys.argv[4] == "shards":
    # held-out sample i of the shards is record i of heldout.json = line i of eval.jsonl
    ev = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    pr = [json.loads(l) for l in open(sys.argv[3])]
    by = collections.defaultdict(list)
    for p in pr:
        e = ev[p["sample_index"]]
        by[e["type"]].append((p["correct"], 1.0 / len(e["choices"])))
    # majority: always answering the type's most frequent held-out answer (a blind model's best)
    maj = {}
    for k in by:
        answers = collections.Counter(e["answer"] for e in ev if e["type"] == k)
        maj[k] = answers.most_common(1)[0][1] / sum(answers.values())
    print("held-out accuracy by question type (chance = 1 / answer choices; majority = the type's most"
          " frequent answer):")
    for k in sorted(by):
        v = by[k]
        print("  %-12s %4d questions  accuracy %5.1f%%  chance %5.1f%%  majority %5.1f%%" % (k, len(v),
              100 * sum(c for c, _ in v) / len(v), 100 * sum(x for _, x in v) / len(v), 100 * maj[k]))
    allv = [x for v in by.values() for x in v]
    n_all = sum(len(v) for v in by.values())
    acc_all = 100 * sum(c for c, _ in allv) / len(allv)
    maj_all = 100 * sum(maj[k] * len(by[k]) for k in by) / n_all
    print("  %-12s %4d questions  accuracy %5.1f%%  chance %5.1f%%  majority %5.1f%%  (%+.1f points over the"
          " blind majority)" % ("all", len(allv), acc_all, 100 * sum(x for _, x in allv) / len(allv), maj_all,
                                acc_all - maj_all))
k = max(1, len(rows) // 10)
a = sum(r["loss"] for r in rows[:k]) / k
b = sum(r["loss"] for r in rows[-k:]) / k
print("loss: %.3f (first %d steps) -> %.3f (last %d steps); median %.0f tokens/s" %
      (a, k, b, k, sorted(r["tokens_per_s"] for r in rows)[len(rows) // 2]))
EOF
if [ "$MODE" = shards ]; then
  part "generated answers (rrfp-mm generate: greedy decoding with a KV cache)"
  "$EXE" generate "$RECIPE" "${SETS[@]}" --set train.run_dir="$RUN" --checkpoint latest --manifest "$DATA/data/heldout.json" \
    --images "$DATA/data/images" --out "$RUN/answers.jsonl" --samples "$HELDOUT" --max-new-tokens 16 2>"$RUN/generate.log" \
    || { cat "$RUN/generate.log" >&2; exit 1; }
  tail -1 "$RUN/generate.log"
  /usr/bin/python3 - "$DATA/data/heldout.json" "$RUN/answers.jsonl" "$RUN/predictions.jsonl" <<'EOF'
import json, sys
ref = {r["id"]: r for r in json.load(open(sys.argv[1]))}
ans = [json.loads(l) for l in open(sys.argv[2])]
pr = [json.loads(l) for l in open(sys.argv[3])]
for a in ans[:5]:
    r = ref[a["question_id"]]
    print("  %-16s %-30s -> %-10s (reference: %s)" % (r["image"], a["prompt"].replace("<image>\n", ""), a["text"],
                                                       r["conversations"][1]["value"]))
gen = 100 * sum(a["text"].strip() == ref[a["question_id"]]["conversations"][1]["value"].strip() for a in ans) / len(ans)
ev = 100 * sum(p["correct"] for p in pr) / len(pr)
print("generated answers equal to the reference: %.1f%% of %d (eval's teacher-forced greedy exact match: %.1f%% of %d)"
      % (gen, len(ans), ev, len(pr)))
EOF
fi
part "report"
"$EXE" report "$RUN"
