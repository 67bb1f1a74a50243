#!/usr/bin/env bash
# build_cores.sh — how busy a build keeps the cores: configures a new build folder as CI does (.ci/run's CMAKE_ARGS),
# with this script as the launcher of every compile and link (each one's start, end and CPU seconds logged), builds
# it with -j JOBS and prints the build's CPU seconds, its wall seconds, the cores it kept busy on average, the
# seconds it ran fewer jobs than JOBS, and the jobs that ended last (the build's critical path: a long one running
# alone there is a core idle). Compiles go through ccache when it is installed, forced to compile
# (CCACHE_RECACHE): the figures are compilers' time, never a cache hit's.
#   scripts/build_cores.sh BUILD_DIR [GENERATOR [JOBS]]    e.g. scripts/build_cores.sh /tmp/b Ninja 2
# GENERATOR: cmake's -G (default: the Makefile's choice, Ninja where it is installed). The machine's other load
# stretches the wall seconds (say what it was); CPU seconds and the jobs' overlap are the build's own.
set -euo pipefail
if [ "${1:-}" = "--launch" ]; then # LOG COMMAND...: one job, logged as "start end cpu output"
    log=$2
    shift 2
    out=""
    prev=""
    for a in "$@"; do
        [ "$prev" = "-o" ] && out=$a
        prev=$a
    done
    s=$(date +%s.%N)
    rc=0
    if command -v ccache >/dev/null; then CCACHE_RECACHE=1 ccache "$@" || rc=$?; else "$@" || rc=$?; fi
    e=$(date +%s.%N)
    # the second line of `times` (in this shell, not a subshell): the user and system CPU of its children (the
    # compiler and its own)
    times >"$log.$$"
    cpu=$(sed -n 2p "$log.$$" | awk '{n = 0; for (i = 1; i <= 2; i++) {split($i, a, /[ms]/); n += a[1] * 60 + a[2]}
                                      printf "%.2f", n}')
    rm -f "$log.$$"
    echo "$s $e $cpu ${out:-$(basename "$1")}" >>"$log"
    exit $rc
fi
[ $# -ge 1 ] || { sed -n '2,11p' "$0"; exit 2; }
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
echo "$(grep -c . "$log") jobs; log: $log; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v S="$start" -v E="$end" -v J="$jobs" '
    { cpu += $3; n++; s[n] = $1 - S; e[n] = $2 - S; c[n] = $3; o[n] = $4 }
    END {
        wall = E - S
        # the jobs running at each tenth of a second
        for (i = 1; i <= n; i++) for (t = int(s[i] * 10); t < int(e[i] * 10); t++) busy[t]++
        for (t = 0; t < int(wall * 10); t++) { sum += busy[t]; if (busy[t] < J) short++ }
        printf "CPU %.1f s, wall %.1f s, %.2f jobs running on average, %.1f s with fewer than %d\n", cpu, wall,
               sum / (wall * 10), short / 10, J
        print "the last jobs to end (start, end, CPU s):"
        for (k = 0; k < 8; k++) { m = 0; for (i = 1; i <= n; i++) if (!(i in done) && (!m || e[i] > e[m])) m = i
                                   done[m] = 1; printf "  %7.1f %7.1f %6.1f  %s\n", s[m], e[m], c[m], o[m] }
        print "the longest jobs:"
        for (k = 0; k < 5; k++) { m = 0; for (i = 1; i <= n; i++) if (!(i in top) && (!m || c[i] > c[m])) m = i
                                   top[m] = 1; printf "  %7.1f %7.1f %6.1f  %s\n", s[m], e[m], c[m], o[m] }
    }' "$log"
