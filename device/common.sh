# device/common.sh — sourced by the device/*_check.sh scripts (a prepared run on a GPU machine): the clock, the
# timed parts, the `ctest -L gpu` opening and the closing tarball. They set OUT (what comes back), W (the work
# folder whose logs they pack) and BUILD before calling these.
START=${START:-$(date +%s)}
elapsed() { echo $(($(date +%s) - START)); }

part() { # name seconds command...: runs it under timeout, its log into $W/name.log, one line into $W/parts.txt
    local name=$1 secs=$2
    shift 2
    local t0=$(date +%s)
    timeout -k 5 "$secs" "$@" > "$W/$name.log" 2>&1
    local rc=$?
    echo "$name: rc $rc ($(( $(date +%s) - t0 )) s)$([ $rc = 124 ] && echo ', TIMED OUT')" >> "$W/parts.txt"
}

gpu_ctest() { # the machine into $W/env.txt, ctest -L gpu (70 s) into $W/ctest_gpu.log, its verdicts opening
    # $OUT/summary.txt; ctest_rc set to ctest's exit status
    {
        date -u
        nvidia-smi 2>&1 | head -20
        "$BUILD/rrfp-mm" version 2>&1
        git log --oneline -1 2>/dev/null
    } > "$W/env.txt" 2>&1
    (cd "$BUILD" && timeout -k 5 70 ctest -L gpu --output-on-failure --timeout 60) > "$W/ctest_gpu.log" 2>&1
    ctest_rc=$?
    {
        echo "== $(grep -m1 -E "NVIDIA (H|A)[0-9]+" "$W/env.txt" | sed 's/  */ /g' | cut -c1-90)"
        echo "== commit $(git log --oneline -1 2>/dev/null | cut -c1-80)"
        echo "ctest -L gpu: rc $ctest_rc after $(elapsed) s"
        grep -E "Test +#|tests passed" "$W/ctest_gpu.log" | sed 's/  */ /g'
    } > "$OUT/summary.txt"
}

gpu_finish() { # tarball: the summary beside the logs in $OUT/tarball, the summary printed, exit with ctest's status
    cp "$OUT/summary.txt" "$W/summary.txt"
    tar -C "$W" -czf "$OUT/$1" . 2>/dev/null
    rm -rf "$W"
    cat "$OUT/summary.txt"
    exit $ctest_rc
}
