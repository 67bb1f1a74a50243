#!/usr/bin/env bash
# cli_contract.sh BIN — the command-line contract of every command and sub-command:
#   `--help` (and -h) prints the usage on stdout and exits 0;
#   an unknown option is a usage error: exit 2 with a message on stderr that names it.
set -u
BIN=$1
fail=0
check_help() {
    out=$("$BIN" "$@" 2>/dev/null); rc=$?
    if [ $rc -ne 0 ] || ! grep -q "usage" <<<"$out"; then
        echo "FAIL: rrfp-mm $* -> exit $rc, stdout: $(head -c 200 <<<"$out")"
        fail=1
    fi
}
check_unknown() {
    err=$("$BIN" "$@" --no-such-option 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "--no-such-option" <<<"$err"; then
        echo "FAIL: rrfp-mm $* --no-such-option -> exit $rc (expected 2), stderr: $(head -c 200 <<<"$err")"
        fail=1
    fi
}
cmds=(version train eval generate tensors tokenizer sim trace demo-data pack import export report)
subs=("tokenizer train" "tokenizer encode" "tokenizer decode" "tokenizer info" "tensors ls" "tensors diff" "import llama"
      "import llava" "import clip" "export hf")
# every command listed by `rrfp-mm --help` is covered here
for c in $("$BIN" --help | awk '/^commands:/{on=1; next} on && !NF {exit} on {print $1}'); do
    [[ " ${cmds[*]} " == *" $c "* ]] || { echo "FAIL: command '$c' is not covered by this test"; fail=1; }
done
for c in "${cmds[@]}"; do
    check_help $c --help
    check_help $c -h
    [ "$c" = version ] || check_unknown $c
done
for s in "${subs[@]}"; do
    check_help $s --help
    check_unknown $s
done
[ $fail -eq 0 ] && echo "cli contract: ok"
exit $fail
