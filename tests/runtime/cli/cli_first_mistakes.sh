#!/usr/bin/env bash
# cli_first_mistakes.sh BIN SRC WORK — the common first mistakes get a message that says what to do:
#   a misspelled command, sub-command or option: the one it most likely meant, from the usage the help shows
#   (runtime/cli/args.h cli_unknown_option); an option missing its value, or given as --opt=value; an option of
#   another sub-command that shares the usage (no wrong suggestion); a far-off word: no suggestion;
#   train or eval missing its recipe or checkpoint; a demo recipe's dry run without the demo data (make demo);
#   a recipe key in the wrong section or misspelled, in --set and in an INI file (runtime/train/recipe.c); a recipe
#   path that does not exist (the shipped recipes' folder); --resume of a folder that is not a checkpoint: missing,
#   empty, a run folder, a run's checkpoints/ folder (runtime/train/rundir.c); eval of a run's checkpoint with
#   other model keys than the run's (runtime/train/trainer.c: the keys from the run's recipe.ini); runtime.trace in a
#   one-stage run, which writes no trace (a note says so).
# Each case: the exit code and the stderr line, matched as an extended regex (and, where said, a text that must
# not appear).
set -u
BIN=$1 SRC=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
R=$SRC/recipes/test-synthetic.ini
fail=0 n=0
# expect RC REGEX [--not TEXT] -- ARGS...: run BIN ARGS in the current folder
expect() {
    local rc=$1 re=$2 not=""
    shift 2
    if [ "$1" = --not ]; then not=$2; shift 2; fi
    shift # --
    local err got
    err=$("$BIN" "$@" 2>&1 >/dev/null); got=$?
    n=$((n + 1))
    if [ $got -ne "$rc" ] || ! grep -Eq -- "$re" <<<"$err" || { [ -n "$not" ] && grep -Fq -- "$not" <<<"$err"; }; then
        echo "FAIL: rrfp-mm $* -> exit $got (expected $rc), stderr (expected /$re/${not:+, without '$not'}):"
        head -3 <<<"$err" | sed 's/^/    /'
        fail=1
    fi
}
# misspelled command and sub-command
expect 2 "unknown command 'trian'; did you mean 'train'\\?" -- trian
expect 2 "unknown subcommand 'encdoe'; did you mean 'encode'\\?" -- tokenizer encdoe
# misspelled options: one edit, a swap, a prefix, on commands of each parser style
expect 2 "train: unknown option '--dryrun'; did you mean '--dry-run'\\?" -- train "$R" --dryrun
expect 2 "generate: unknown option '--max-new'; did you mean '--max-new-tokens'\\?" -- generate "$R" --max-new 3
expect 2 "sim: unknown option '--stage'; did you mean '--stages'\\?" -- sim --stage 2
expect 2 "tensors diff: unknown option '--rtl'; did you mean '--rtol'\\?" -- tensors diff a b --rtl 1
expect 2 "export: unknown option '--chekpoint'; did you mean '--checkpoint'\\?" -- export hf --chekpoint x
expect 2 "eval: unknown option '--sample'; did you mean '--samples'\\?" -- eval "$R" --sample 3
# a far-off word: named, nothing suggested
expect 2 "train: unknown option '--frobnicate'" --not "did you mean" -- train "$R" --frobnicate
# an option the usage shows, given last or as --opt=value
expect 2 "demo-data: --samples needs a value" -- demo-data --samples
expect 2 "eval: --checkpoint needs a value" -- eval "$R" --checkpoint
expect 2 "demo-data: unknown option '--out=d': give the value as the next argument \\(--out d\\)" -- demo-data --out=d
# another sub-command's option of the shared tokenizer usage: unknown here, not "needs a value" nor suggested
expect 2 "tokenizer decode: unknown option '--lines'" --not "did you mean" -- tokenizer decode --lines
expect 2 "tokenizer encode: --tokenizer needs a value" -- tokenizer encode --tokenizer
# tensors ls takes one PATH: the extra word or option is named
expect 2 "tensors ls: unexpected argument 'b'" -- tensors ls a b
expect 2 "tensors ls: unknown option '--json'" -- tensors ls a --json
# recipe keys: the same key in another section, a misspelling, a misnamed section
expect 2 "--set train.lr=0.1: unknown key 'train.lr'; did you mean 'optim.lr'\\?" -- train "$R" --set train.lr=0.1
expect 2 "unknown key 'optim.lr0'; did you mean 'optim.lr'\\?" -- train "$R" --set optim.lr0=0.1
expect 2 "unknown key 'training.steps'; did you mean 'train.steps'\\?" -- train "$R" --set training.steps=3
expect 2 "unknown key 'checkpoint.every'; did you mean 'train.checkpoint_every'\\?" -- train "$R" --set checkpoint.every=5
expect 2 "unknown key 'optim.learning_rate' \\(see recipes/README.md" --not "did you mean" -- train "$R" --set optim.learning_rate=1
printf '[train]\nsteps = 2\nlr = 0.1\n' > wrong_section.ini
expect 2 "wrong_section.ini:3: unknown key 'lr' in \\[train\\] \\(did you mean 'lr' in \\[optim\\]\\?\\); allowed keys:" \
    -- train wrong_section.ini --dry-run
printf '[model]\ntext_layerz = 2\n' > typo.ini
expect 2 "typo.ini:2: unknown key 'text_layerz' in \\[model\\] \\(did you mean 'text_layers'\\?\\)" -- train typo.ini --dry-run
# a command missing what it needs says which, before the usage
expect 2 "^rrfp-mm train: no recipe given \\(a RECIPE.ini: the shipped ones are recipes/\\*.ini" -- train
expect 2 "^rrfp-mm eval: no --checkpoint given" -- eval "$R"
expect 2 "^rrfp-mm eval: no recipe given" -- eval --checkpoint latest
expect 2 "^rrfp-mm eval: more than one recipe \\('a.ini', 'b.ini'\\)" -- eval a.ini b.ini --checkpoint latest
# a demo recipe's dry run in a folder without the demo data (a fresh clone): make demo, as a run says
expect 1 "HINT: the demo data \\(demo/tokenizer.json, demo/shards\\) is not part of the repository: make it with \`make demo\`" \
    -- train "$SRC/recipes/demo.ini" --dry-run
# a recipe path that does not exist: a shipped recipe named without its folder, else where they are
(cd "$SRC" && "$BIN" train demo.ini --dry-run) > /dev/null 2> demo_ini.err
n=$((n + 1))
grep -q "cannot open recipe 'demo.ini'" demo_ini.err && grep -q "HINT: did you mean 'recipes/demo.ini'?" demo_ini.err ||
    { echo "FAIL: rrfp-mm train demo.ini (in SRC) does not point to recipes/demo.ini:"; cat demo_ini.err; fail=1; }
expect 2 "cannot open recipe 'nosuch.ini': No such file or directory" -- train nosuch.ini
expect 2 "HINT: the path is from the working directory; the shipped recipes are the repository's recipes/\\*.ini" \
    -- train nosuch.ini
# --resume of a folder that is not a checkpoint (exit 1: a refusal at start, docs/reliability.md "Exit codes")
S=(--set train.steps=1 --set optim.warmup=1)
mkdir empty
expect 1 "checkpoint.resume = 'empty' holds no checkpoint \\(no state.json\\)" -- train "$R" "${S[@]}" --set train.run_dir=r0 --resume empty
expect 1 "HINT: --resume takes a checkpoint folder \\(RUN_DIR/checkpoints/step-N\\), or latest" -- train "$R" "${S[@]}" --set train.run_dir=r0 --resume empty
expect 1 "checkpoint.resume = 'nosuch': no such folder" -- train "$R" "${S[@]}" --set train.run_dir=r0 --resume nosuch
expect 1 "checkpoint.resume = 'wrong_section.ini': not a folder" -- train "$R" "${S[@]}" --set train.run_dir=r0 --resume wrong_section.ini
if ! "$BIN" train "$R" "${S[@]}" --set train.run_dir=run --set train.checkpoint_every=1 > run.log 2>&1 || [ ! -f run/checkpoints/step-00000001/state.json ]; then
    echo "FAIL: a one-step run with a checkpoint did not run:"; tail -3 run.log; fail=1
fi
S=(--set train.steps=2 --set optim.warmup=1)
expect 1 "checkpoint.resume = 'run' is a run folder, not a checkpoint" -- train "$R" "${S[@]}" --set train.run_dir=run --resume run
expect 1 "HINT: --resume latest --set train.run_dir=run resumes its newest checkpoint" -- train "$R" "${S[@]}" --set train.run_dir=run --resume run
expect 1 "checkpoint.resume = 'run/checkpoints' holds 1 step-\\* folder\\(s\\), it is not one" -- train "$R" "${S[@]}" --set train.run_dir=run --resume run/checkpoints
# and the checkpoint itself still resumes (with the run's own recipe: nothing left to do)
S=(--set train.steps=1 --set optim.warmup=1)
if ! "$BIN" train "$R" "${S[@]}" --set train.run_dir=run --resume run/checkpoints/step-00000001 > resume.log 2>&1 ||
   ! grep -q "steps 2..1 of 1" resume.log; then
    echo "FAIL: --resume of the checkpoint folder itself was refused:"; tail -3 resume.log; fail=1
fi
# eval (and generate) of a run's checkpoint with other model keys than the run's: the keys named from its recipe.ini
expect 1 "the run that wrote it was trained with other model keys \\(its recipe.ini -> this recipe\\):" \
    -- eval "$R" --set train.run_dir=run --set model.ffn_hidden=96 --checkpoint latest --samples 2
expect 1 "^  model.ffn_hidden: 172 -> 96$" -- eval "$R" --set train.run_dir=run --set model.ffn_hidden=96 --checkpoint latest --samples 2
# runtime.trace in a one-stage run: said, not silently nothing (the traces come from pipeline and TP runs)
expect 0 "note: runtime.trace = true: the traces \\(RUN_DIR/trace-rank\\*.json\\) are written by pipeline and tensor-parallel runs" \
    -- train "$R" --set train.steps=1 --set optim.warmup=1 --set runtime.trace=true --set train.run_dir=traced
[ $fail -eq 0 ] && echo "cli first mistakes: ok ($n cases)"
exit $fail
