#!/usr/bin/env bash
# reports_none.sh DIR — the sanitizer build's last test: fail when any test's process wrote a sanitizer
# report (ASan, UBSan, LeakSanitizer) into DIR (log_path=DIR/TEST, one file per process: TEST.PID),
# printing each with the test that wrote it. See tests/asan/asan.cmake.
D=$1
shopt -s nullglob
files=("$D"/*)
if [ ${#files[@]} -eq 0 ]; then
    echo "sanitizer reports: none"
    exit 0
fi
for f in "${files[@]}"; do
    b=$(basename "$f")
    echo "=== test ${b%.*} (pid ${b##*.}): $f"
    head -n 60 "$f"
done
echo "FAIL: ${#files[@]} sanitizer report(s) (above)"
exit 1
