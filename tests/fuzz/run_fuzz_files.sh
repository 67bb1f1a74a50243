#!/usr/bin/env bash
# run_fuzz_files.sh — libFuzzer targets where files come in (a crafted file is the attack surface), built with clang
# (-fsanitize=fuzzer,address,undefined, UB fatal) from the library sources they exercise:
#   fuzz_safetensors  safetensors reader + tensor-parallel slice metadata + assembly of sliced tensors
#   fuzz_checkpoint   checkpoint folder load: state.json + the model's safetensors file
#   fuzz_import       `import llama`: HF config.json + model.safetensors.index.json + model.safetensors
#   fuzz_recipe       recipe INI + --set values (a valid recipe's print loads back to the same recipe)
#   fuzz_durations    simulator duration files (round trip; small ones simulated)
#   fuzz_trace        Chrome trace files through `rrfp-mm trace --svg --json --durations`
#   fuzz_report       a run folder through `rrfp-mm report`: metrics.jsonl, recipe.ini, predictions.jsonl,
#                     zero-shot.jsonl, trace-rank0.json, a checkpoint's state.json; the recipe may name held-out
#                     shards and a tokenizer made here
#   fuzz_lora         `import lora`: adapter_config.json + adapter_model.safetensors onto a base made here
# These two compile their own sources for the fuzzer (report.c and the checkpoint record's reader; import_lora.c and
# the PEFT key parser) and take what those call (shards, images, the tokenizer, traces, checkpoints, the model: each
# fuzzed by its own target or checked by the tests) from the static libraries of the build in $RRFP_FUZZ_BUILD, whose
# rrfp-mm makes their data (fuzz.cmake sets it, and $RRFP_FUZZ_BLAS, that build's BLAS library); without it they are
# skipped, saying so
# Each starts from its committed seed corpus (tests/fuzz/seeds/TARGET: valid files and the hostile
# inputs' reproductions; tests/fuzz/make_seeds.py writes them) plus generated seeds (a real checkpoint, the
# recipes/ files), runs SECONDS_EACH seconds and fails on any crash, leak, UB or harness assertion; the
# input that did it is kept as WORK_DIR/crash-* (reproduce: WORK_DIR/fuzz_X WORK_DIR/crash-...).
# Longer runs: docs/reliability.md. Exit 77 (skipped) without clang or its libFuzzer runtime.
# usage: run_fuzz_files.sh SOURCE_DIR WORK_DIR [SECONDS_EACH=5] [TARGET...]
set -u
SRC=$1
W=$2
T=${3:-5}
shift 3 2>/dev/null || shift $#
TARGETS=${*:-"safetensors checkpoint import recipe durations trace report lora"}
case "$W" in /tmp/* | */build*/*) ;; *) echo "refusing work dir '$W'"; exit 2 ;; esac
CC=$(command -v clang || command -v clang-14 || true)
[ -n "$CC" ] || { echo "skipped: clang not found (apt-get install clang libclang-rt-14-dev)"; exit 77; }
rm -rf "$W" && mkdir -p "$W/obj" || exit 2
W=$(cd "$W" && pwd) # absolute: fuzz_report runs in a folder of its own
echo 'int main(void){return 0;}' > "$W/probe.c"
if ! "$CC" -fsanitize=fuzzer -c "$W/probe.c" -o "$W/probe.o" 2>/dev/null; then
    echo "skipped: $CC has no libFuzzer runtime (apt-get install libclang-rt-14-dev)"
    exit 77
fi
SAN="address,undefined -fno-sanitize-recover=undefined"
# line tables only: file:line in every sanitizer report and crash backtrace, a fifth less compile time than -g
CFLAGS="-gline-tables-only -O1 -I$SRC $(pkg-config --cflags libcjson libzstd) -DRRFP_VERSION=\"fuzz\""
LIBS="$(pkg-config --libs libcjson libzstd) -lm -lpthread"
# the library sources, compiled once (coverage-instrumented) for every target
LIB_SRCS="engine/util.c engine/backend_names.c engine/tensor.c engine/init.c engine/params.c engine/safetensors.c engine/checkpoint.c engine/json.c
          engine/params_quant.c engine/params_quant_st.c engine/quant.c
          runtime/hf/import.c runtime/train/recipe.c runtime/model/partition.c runtime/sched/dispatch.c
          runtime/sched/hints.c runtime/sim/sim.c runtime/plan/plan.c runtime/trace/trace.c runtime/cli/cmd_trace.c
          runtime/cli/args.c runtime/train/outguard.c runtime/train/rundir.c runtime/train/runckpt.c text/lm_lora.c vision/vit_lora_targets.c"
for s in $LIB_SRCS; do echo "$SRC/$s $W/obj/$(echo "$s" | tr / _).o"; done |
    xargs -P 2 -n 2 sh -c "$CC $CFLAGS -fsanitize=fuzzer-no-link,$SAN -c \"\$0\" -o \"\$1\" || exit 255" || exit 1
o() { for s in "$@"; do printf '%s ' "$W/obj/$(echo "$s" | tr / _).o"; done; }
ENGINE=$(o engine/util.c engine/backend_names.c engine/tensor.c engine/init.c engine/params.c engine/safetensors.c engine/checkpoint.c engine/json.c \
         engine/params_quant.c engine/params_quant_st.c engine/quant.c)
declare -A OBJS=(
    [safetensors]="$ENGINE"
    [checkpoint]="$ENGINE"
    [import]="$ENGINE $(o runtime/hf/import.c runtime/train/recipe.c runtime/model/partition.c text/lm_lora.c vision/vit_lora_targets.c)"
    [recipe]="$ENGINE $(o runtime/train/recipe.c runtime/model/partition.c text/lm_lora.c vision/vit_lora_targets.c)"
    [durations]="$(o engine/util.c runtime/sched/dispatch.c runtime/sched/hints.c runtime/sim/sim.c runtime/plan/plan.c)"
    [trace]="$ENGINE $(o runtime/sched/dispatch.c runtime/sched/hints.c runtime/sim/sim.c runtime/plan/plan.c runtime/trace/trace.c runtime/cli/cmd_trace.c runtime/cli/args.c) $(o runtime/train/outguard.c runtime/train/rundir.c runtime/train/runckpt.c runtime/train/recipe.c runtime/model/partition.c text/lm_lora.c vision/vit_lora_targets.c)"
)
declare -A MAXLEN=([safetensors]=16384 [checkpoint]=16384 [import]=16384 [recipe]=4096 [durations]=4096 [trace]=16384
                   [report]=16384 [lora]=32768)
BUILT=""
for t in $TARGETS; do
    if [ "$t" = report ] || [ "$t" = lora ]; then
        B=${RRFP_FUZZ_BUILD:-}
        if [ -z "$B" ] || [ ! -f "$B/librrfp_report.a" ] || [ ! -x "$B/rrfp-mm" ] || [ -z "${RRFP_FUZZ_BLAS:-}" ]; then
            echo "fuzz_$t: skipped (RRFP_FUZZ_BUILD names no build folder with its libraries and rrfp-mm, or RRFP_FUZZ_BLAS is unset)"
            continue
        fi
        # the target's own sources instrumented, first: the archives give only what they call (their own copies of
        # these files are never pulled)
        case $t in
            report) OWN="runtime/report/report.c runtime/train/trained.c runtime/train/runckpt.c" ;;
            lora) OWN="runtime/hf/import_lora.c runtime/hf/export_lora.c" ;;
        esac
        "$CC" $CFLAGS -D_GNU_SOURCE -fsanitize=fuzzer,$SAN -o "$W/fuzz_$t" "$SRC/tests/fuzz/fuzz_$t.c" \
            $(for s in $OWN; do printf '%s ' "$SRC/$s"; done) -Wl,--start-group $(ls "$B"/librrfp_*.a | grep -v cuda_emu) \
            -Wl,--end-group "$RRFP_FUZZ_BLAS" $LIBS $(pkg-config --libs libturbojpeg libpng16 libpcre2-8) -lgif -lgomp -ldl \
            || exit 1
        mkdir -p "$W/corpus_$t"
        if [ "$t" = report ]; then
            # held-out shards (plain and any-resolution) and their tokenizer, which the seeds' recipes name
            D="$W/report_data"
            mkdir -p "$D"
            "$B/rrfp-mm" demo-data --out "$D/demo" --samples 6 --heldout 4 --seed 5 >/dev/null 2>&1 &&
                "$B/rrfp-mm" tokenizer train --vocab 300 --manifest "$D/demo/train.json" --out "$D/tok.json" >/dev/null 2>&1 &&
                "$B/rrfp-mm" pack --manifest "$D/demo/heldout.json" --images "$D/demo/images" --tokenizer "$D/tok.json" \
                    --out "$D/heldout" --quiet >/dev/null 2>&1 &&
                "$B/rrfp-mm" pack --manifest "$D/demo/heldout.json" --images "$D/demo/images" --tokenizer "$D/tok.json" \
                    --out "$D/heldout_ar" --quiet --patch 14 --image-preprocess anyres --image-size 28 \
                    --grid-pinpoints "[[28,56],[56,28],[56,56]]" >/dev/null 2>&1 ||
                { echo "FAIL: fuzz_report: could not make its held-out data with $B/rrfp-mm"; exit 1; }
        else
            # the base (a tiny LLaVA run of 1 step, exported and imported as a published model comes in) and the
            # adapter of a LoRA run on it (export hf --adapter), the seed "real"
            D="$W/lora_data"
            R="$SRC/recipes/test-synthetic.ini"
            CLIP="--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16
                  --set model.vision_feature_layer=-2 --set model.projector_act=gelu --set optim.warmup=1"
            mkdir -p "$D"
            "$B/rrfp-mm" train "$R" $CLIP --set train.steps=1 --set train.checkpoint_every=1 --set train.run_dir="$D/a" \
                >/dev/null 2>&1 &&
                "$B/rrfp-mm" export hf --checkpoint "$D/a/checkpoints/step-00000001" --out "$D/a_hf" --image-token-id 1 \
                    >/dev/null 2>&1 &&
                "$B/rrfp-mm" import llava --hf "$D/a_hf" --out "$D/base" >/dev/null 2>&1 &&
                "$B/rrfp-mm" train "$R" $CLIP --set train.init_from="$D/base" --set train.freeze=vision,projector \
                    --set lora.r=2 --set lora.alpha=4 --set train.steps=1 --set train.checkpoint_every=1 \
                    --set train.run_dir="$D/l" >/dev/null 2>&1 &&
                "$B/rrfp-mm" export hf --checkpoint "$D/l/checkpoints/step-00000001" --adapter "$D/adapter" >/dev/null 2>&1 ||
                { echo "FAIL: fuzz_lora: could not make its base and adapter with $B/rrfp-mm"; exit 1; }
            { cat "$D/adapter/adapter_config.json"; printf '\n--8<--\n'; cat "$D/adapter/adapter_model.safetensors"; } \
                > "$W/corpus_lora/real"
        fi
    else
        [ -n "${OBJS[$t]:-}" ] || { echo "unknown target '$t'"; exit 2; }
        "$CC" $CFLAGS -D_GNU_SOURCE -fsanitize=fuzzer,$SAN -o "$W/fuzz_$t" "$SRC/tests/fuzz/fuzz_$t.c" ${OBJS[$t]} $LIBS || exit 1
    fi
    BUILT="$BUILT $t"
    mkdir -p "$W/corpus_$t"
    cp "$SRC/tests/fuzz/seeds/$t"/* "$W/corpus_$t/" 2>/dev/null
done
# generated seeds: a checkpoint as this build writes it, the recipes of the repository
case " $TARGETS " in *" checkpoint "*)
    FUZZ_SEED_DIR="$W/corpus_checkpoint" "$W/fuzz_checkpoint" -runs=0 >"$W/seed_checkpoint.log" 2>&1 &
    pid=$!
    wait $pid || { echo "FAIL: fuzz_checkpoint could not write its seed checkpoint"; cat "$W/seed_checkpoint.log"; exit 1; }
    rm -rf "/dev/shm/rrfp-fuzz-$pid" "/tmp/rrfp-fuzz-$pid" ;;
esac
case " $TARGETS " in *" recipe "*) for r in "$SRC"/recipes/*.ini; do cp "$r" "$W/corpus_recipe/$(basename "$r")"; done ;; esac

rc=0
for t in $BUILT; do
    echo "fuzz_$t: $(ls "$W/corpus_$t" | wc -l) seeds, ${T}s"
    # the work dir: a target's scratch files (on /dev/shm when there is one) are per process; no input on stdin
    FUZZ_REPORT_DATA="$W/report_data" FUZZ_LORA_BASE="$W/lora_data/base" "$W/fuzz_$t" -max_total_time="$T" -max_len="${MAXLEN[$t]}" -rss_limit_mb=2048 \
        -timeout=20 -dict="$SRC/tests/fuzz/files.dict" -artifact_prefix="$W/" -print_final_stats=1 "$W/corpus_$t" \
        </dev/null >"$W/fuzz_$t.log" 2>&1 &
    pid=$!
    wait $pid || rc=1
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$W/fuzz_$t.log" | tail -n 2
    rm -rf "/dev/shm/rrfp-fuzz-$pid" "/tmp/rrfp-fuzz-$pid"   # its scratch folder (fuzz_util.h), no other's
done
if [ $rc != 0 ]; then
    echo "FAIL: a fuzz target found a crash; logs in $W (reproduce with the crash-* file it names, kept there)"
    grep -h -B 2 -A 25 "ERROR\|SUMMARY\|fuzz_[a-z]*: " "$W"/fuzz_*.log | head -80
fi
exit $rc
