#!/usr/bin/env bash
# expect.sh RC REGEX CMD [ARGS...] — a test's verdict from its exit code AND its output: pass only when
# CMD exits with RC and its stdout + stderr (as one text) matches the extended regex REGEX. Exit 77
# (skipped) passes through. Used instead of CTest's pass-regex test property, which ignores the exit code.
want=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 77 ] && exit 77
if [ "$rc" -ne "$want" ]; then
    echo "expect.sh: '$1' exited $rc, expected $want" >&2
    exit 1
fi
if ! printf '%s' "$out" | grep -Ezq -- "$regex"; then
    echo "expect.sh: the output of '$1' does not match: $regex" >&2
    exit 1
fi
