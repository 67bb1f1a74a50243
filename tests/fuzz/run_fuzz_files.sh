#!/usr/bin/env bash
# run_fuzz_files.sh — libFuzzer targets where files come in (a crafted file is the attack surface), built with clang
# (-fsanitize=fuzzer,address,undefined, UB fatal) from the library sources they exercise:
#   fuzz_safetensors  safetensors reader + tensor-parallel slice metadata + assembly of sliced tensors
#   fuzz_checkpoint   checkpoint folder load: state.json + the model's safetensors file
#   fuzz_import       `import llama`: HF config.json + model.safetensors.index.json + model.safetensors
#   fuzz_recipe       recipe INI + --set values (a valid recipe's print loads back to the same recipe)
#   fuzz_durations    simulator duration files (round trip; small ones simulated)
#   fuzz_trace        Chrome trace files through `rrfp-mm trace --svg --json --durations`
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
TARGETS=${*:-"safetensors checkpoint import recipe durations trace"}
case "$W" in /tmp/* | */build*/*) ;; *) echo "refusing work dir '$W'"; exit 2 ;; esac
CC=$(command -v clang || command -v clang-14 || true)
[ -n "$CC" ] || { echo "skipped: clang not found (apt-get install clang libclang-rt-14-dev)"; exit 77; }
rm -rf "$W" && mkdir -p "$W/obj" || exit 2
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
declare -A MAXLEN=([safetensors]=16384 [checkpoint]=16384 [import]=16384 [recipe]=4096 [durations]=4096 [trace]=16384)
for t in $TARGETS; do
    [ -n "${OBJS[$t]:-}" ] || { echo "unknown target '$t'"; exit 2; }
    "$CC" $CFLAGS -D_GNU_SOURCE -fsanitize=fuzzer,$SAN -o "$W/fuzz_$t" "$SRC/tests/fuzz/fuzz_$t.c" ${OBJS[$t]} $LIBS || exit 1
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
for t in $TARGETS; do
    echo "fuzz_$t: $(ls "$W/corpus_$t" | wc -l) seeds, ${T}s"
    # the work dir: a target's scratch files (on /dev/shm when there is one) are per process
    "$W/fuzz_$t" -max_total_time="$T" -max_len="${MAXLEN[$t]}" -rss_limit_mb=2048 -timeout=20 -dict="$SRC/tests/fuzz/files.dict" \
        -artifact_prefix="$W/" -print_final_stats=1 "$W/corpus_$t" >"$W/fuzz_$t.log" 2>&1 &
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
