#!/usr/bin/env bash
# report_browser.sh RRFP_MM SOURCE_DIR WORK_DIR [MPIRUN [ARGS...]] — the report page in a real browser.
# Square demo data (200 samples) -> tokenizer -> shards -> 4 steps of a small recipes/demo.ini, pipelined
# over 2 ranks with runtime.trace when MPIRUN is given (else one process) -> eval with predictions ->
# rrfp-mm report -> headless Chromium --dump-dom; tests/runtime/report/report_check.py checks the DOM (curves with a
# point per step, recipe table, one step's F/B rects, question cards whose data URIs are JPEGs) and
# that Chromium logged no console error. Exit 77 (skipped) when Debian's chromium is not installed.
set -uo pipefail
EXE=$1 SRC=$2 WORK=$3
shift 3
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
    echo "report_browser: skipped: no chromium on PATH (Debian's package; scripts/deps.sh --with-browser installs it, and make test runs that as root)"
    exit 77
fi
fail() {
    echo "report_browser: FAIL: $*" >&2
    exit 1
}
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || fail "cannot make $WORK"
"$EXE" demo-data --square --out data --samples 200 --heldout 30 2>/dev/null || fail "demo-data"
"$EXE" tokenizer train --vocab 448 --manifest data/train.json --out tok.json --quiet || fail "tokenizer train"
for s in train heldout; do
    "$EXE" pack --manifest data/$s.json --images data/images --tokenizer tok.json --out $s-shards --patch 24 \
        --min-patches 9 --max-patches 9 --quiet || fail "pack $s"
done
SETS=(--set data.shards=train-shards --set data.tokenizer=tok.json --set data.eval_shards=heldout-shards
      --set train.run_dir=run --set train.steps=4 --set optim.warmup=1 --set train.log_every=1
      --set model.vision_width=32 --set model.vision_heads=2 --set model.vision_layers=1 --set model.text_width=64
      --set model.text_heads=2 --set model.text_layers=2 --set model.ffn_hidden=128
      --set data.microbatch_tokens=256 --set data.microbatches=4 --set runtime.threads=1)
if [ $# -gt 0 ]; then
    timeout 300 "$@" -np 2 "$EXE" train "$SRC/recipes/demo.ini" "${SETS[@]}" --set parallel.pp=2 \
        --set runtime.trace=true || fail "pipelined training (pp 2, traced)"
    TRACED=1
else
    "$EXE" train "$SRC/recipes/demo.ini" "${SETS[@]}" || fail "training"
    TRACED=0
fi
"$EXE" eval "$SRC/recipes/demo.ini" "${SETS[@]}" --checkpoint latest --samples 30 \
    --predictions run/predictions.jsonl || fail "eval"
"$EXE" report run --questions 8 || fail "rrfp-mm report"
[ -s run/report.html ] || fail "no run/report.html"
timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 \
    --dump-dom "file://$WORK/run/report.html" >dom.html 2>chrome.log || fail "chromium exited $? (chrome.log: $(tail -3 chrome.log))"
/usr/bin/python3 "$SRC/tests/runtime/report/report_check.py" dom.html chrome.log --steps 4 --cards 8 --traced $TRACED --ranks 2 \
    --microbatches 4
