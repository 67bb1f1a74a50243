#!/usr/bin/env bash
# lint_shell_pipes.sh SRC — no pipe into a reader that stops early (grep -q) in a script under `set -o pipefail`.
# grep -q exits at its first match; a writer still writing then dies of SIGPIPE, and pipefail makes the whole
# pipe fail (status 141) though the line was there: `ldd "$BIN" | grep -q libasan` is then false on some runs
# and not others. Give the reader the whole text instead: grep -q PATTERN <<<"$(command)".
# The scan first proves on files of its own that it finds each form, so a broken pattern cannot pass.
set -u
src=${1:?usage: lint_shell_pipes.sh SRC}
# a pipe, then grep with q among its short options (after any others), or --quiet / --silent
pattern='\|[[:space:]]*grep([[:space:]]+-[^[:space:]]+)*[[:space:]]+(-[[:alpha:]]*q[[:alpha:]]*|--quiet|--silent)([[:space:]]|$)'
scan() {
  local f
  grep -rlE --include='*.sh' --exclude-dir='build*' --exclude-dir=node_modules --exclude-dir=.git \
       '^[[:space:]]*set .*pipefail' "$1" | sort | while read -r f; do
    grep -nE "$pattern" "$f" | sed "s|^|$f:|"
  done | grep .
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lint_lib.sh"
mkdir -p "$tmp/clean"
printf 'set -euo pipefail\ngrep -q libasan <<<"$(ldd x)"\necho "$a" | grep -c b\necho "$a" | grep -s b\necho "|grep -q" >/dev/null\n' > "$tmp/clean/ok.sh"
printf 'set -eu\nldd x | grep -q libasan\necho "$a" | grep -s b\n' > "$tmp/clean/nopipefail.sh"
scan_passes "$tmp/clean"
i=0
for form in 'ldd "$BIN" | grep -q libasan' 'echo "$out" |grep -qE "^a"' 'x | grep -vqE b' 'x | grep -Eq b' 'x | grep --quiet b' \
            'x | grep -s -q b' 'if tr a b </f | grep -qx c; then :; fi'; do
  i=$((i + 1))
  mkdir -p "$tmp/bad$i"
  printf 'set -euo pipefail\n%s\n' "$form" > "$tmp/bad$i/x.sh"
  scan_flags "$tmp/bad$i" "$form"
done
mkdir -p "$tmp/bad_o"
printf '#!/bin/bash\nset -e -o pipefail\nx | grep -q b\n' > "$tmp/bad_o/x.sh"
scan_flags "$tmp/bad_o" "set -e -o pipefail"
scan_tree "a pipe into grep -q under pipefail (fails with 141 when the writer outlives the match; use grep -q PATTERN <<<\"\$(command)\"):"
echo "lint shell pipes: ok"
