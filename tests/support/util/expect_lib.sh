# expect_lib.sh — sourced by the command-line tests (bash): `fail MESSAGE` counts a failure in $fails;
# `expect RC PATTERN -- CMD...` runs CMD with stdout + stderr into $T/out (T: the test's work folder) and
# checks its exit status RC and that the output matches PATTERN (grep -E).
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
expect() {
  local rc=$1 pat=$2; shift 3
  "$@" >"$T/out" 2>&1
  local got=$?
  if [ "$got" != "$rc" ]; then fail "$* -> exit $got, expected $rc: $(cat "$T/out")"; return; fi
  grep -Eq -e "$pat" "$T/out" || fail "$* -> output does not match '$pat': $(cat "$T/out")"
}
