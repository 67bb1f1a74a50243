#!/usr/bin/env bash
# build_cores.sh — how busy a build keeps the cores: configures a new build folder as CI does (.ci/run's CMAKE_ARGS),
# with this script as the launcher of every compile and link (each one's start, end and CPU seconds logged), builds
# it with -j JOBS and prints the build's CPU seconds, its wall seconds, the cores it kept busy on average, the
# seconds it ran fewer jobs than JOBS, and the jobs that ended last (the build's critical path: a long one running
# alone there is a core idle). Compiles go through ccache when it is installed, forced to compile
# (CCACHE_RECACHE): the figures are compilers' time, never a cache hit's.
#   scripts/build_cores.sh BUILD_DIR [GENERATOR [JOBS]]    e.g. scripts/build_cores.sh /tmp/b Ninja 2
#   scripts/build_cores.sh --report LOG START END [JOBS]   the report of a kept log (START, END: epoch seconds)
# GENERATOR: cmake's -G (default: the Makefile's choice, Ninja where it is installed). The machine's other load
# stretches the wall seconds (say what it was); CPU seconds and the jobs' overlap are the build's own.
set -euo pipefail
if [ "${1:-}" = "--launch" ]; then # LOG COMMAND...: one job, logged as "start end user system output"
    # no process of its own but the job's (bash's clock and `times`): on a loaded machine every extra process
    # start would show as a gap between jobs
    log=$2
    shift 2
    out=""
    prev=""
    for a in "$@"; do
        [ "$prev" = "-o" ] && out=$a
        prev=$a
    done
    s=$EPOCHREALTIME
    rc=0
    if command -v ccache >/dev/null; then CCACHE_RECACHE=1 ccache "$@" || rc=$?; else "$@" || rc=$?; fi
    e=$EPOCHREALTIME
    # the second line of `times` (in this shell, not a subshell): the user and system CPU of its children (the
    # compiler and its own), as 0m1.234s 0m0.056s
    times >"$log.$$"
    { read -r _; read -r u sy; } <"$log.$$"
    rm -f "$log.$$"
    echo "$s $e $u $sy ${out:-${1##*/}}" >>"$log"
    exit $rc
fi
# the report of a log: report LOG START END JOBS (START, END: the build's epoch seconds)
report() {
    echo "$(grep -c . "$1") jobs; log: $1"
    awk -v S="$2" -v E="$3" -v J="$4" '
        function sec(x, a) { split(x, a, /[ms]/); return a[1] * 60 + a[2] } # 1m2.5s
        { n++; s[n] = $1 - S; e[n] = $2 - S; c[n] = sec($3) + sec($4); o[n] = $5; cpu += c[n] }
        END {
            wall = E - S
            # the jobs running at each tenth of a second
            for (i = 1; i <= n; i++) for (t = int(s[i] * 10); t < int(e[i] * 10); t++) busy[t]++
            for (t = 0; t < int(wall * 10); t++) { sum += busy[t]; if (busy[t] < J) short++ }
            printf "CPU %.1f s, wall %.1f s, %.2f jobs running on average, %.1f s with fewer than %d\n", cpu, wall,
                   sum / (wall * 10), short / 10, J
            print "the last jobs to end (start, end, CPU s):"
            for (k = 0; k < 8 && k < n; k++) { m = 0; for (i = 1; i <= n; i++) if (!(i in done) && (!m || e[i] > e[m])) m = i
                                       done[m] = 1; printf "  %7.1f %7.1f %6.1f  %s\n", s[m], e[m], c[m], o[m] }
            print "the longest jobs:"
            for (k = 0; k < 5 && k < n; k++) { m = 0; for (i = 1; i <= n; i++) if (!(i in top) && (!m || c[i] > c[m])) m = i
                                       top[m] = 1; printf "  %7.1f %7.1f %6.1f  %s\n", s[m], e[m], c[m], o[m] }
        }' "$1"
}
if [ "${1:-}" = "--report" ]; then # LOG START END [JOBS]: the report of a kept log
    report "$2" "$3" "$4" "${5:-2}"
    exit 0
fi
[ $# -ge 1 ] || { sed -n '2,12p' "$0"; exit 2; }
dir=$1
gen=${2:-}
jobs=${3:-2}
[ ! -e "$dir" ] || { echo "build_cores.sh: $dir exists (a new folder measures a whole build)"; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
self="$src/scripts/build_cores.sh"
log=$(mktemp)
launch="$self;--launch;$log"
if [ -z "$gen" ] && command -v ninja >/dev/null; then gen=Ninja; fi
cmake ${gen:+-G "$gen"} -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRRFP_DEBUG_INFO=lines \
    -DRRFP_CUDA_LINEINFO=OFF "-DCMAKE_C_COMPILER_LAUNCHER=$launch" "-DCMAKE_CXX_COMPILER_LAUNCHER=$launch" \
    "-DCMAKE_CUDA_COMPILER_LAUNCHER=$launch" "-DCMAKE_C_LINKER_LAUNCHER=$launch" "-DCMAKE_CXX_LINKER_LAUNCHER=$launch" \
    "-DCMAKE_CUDA_LINKER_LAUNCHER=$launch" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
start=$(date +%s.%N)
cmake --build "$dir" -j "$jobs" >"$dir.build.log" 2>&1 || { tail -n 40 "$dir.build.log"; exit 1; }
end=$(date +%s.%N)
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
report "$log" "$start" "$end" "$jobs"
