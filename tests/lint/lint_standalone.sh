#!/usr/bin/env bash
# lint_standalone.sh SRC — the repository reads on its own: no file in it sends the reader somewhere they
# cannot follow. In the sources, tests, benchmarks, scripts and build files (C, C++, CUDA, Python, shell,
# JavaScript, CMake, Makefile, .ci/) and in the documentation (*.md):
#   - no citation of a design or style file outside the repository (the design as built is docs/design.md
#     and the pages it links; cite those by path and section name);
#   - a design or style page cited by its path in the repository (docs/design.md, in any case of the name:
#     a bare DESIGN.md, Design.md or design.md names no file a reader can open), and no "section N of the design";
#   - no path into the folder beside the checkout (../shared/) or of one machine (/work/..., /home/...);
#   - no tracker number or pointer ("issue N", "PR N", "(#N)", "the issue's target", "see the issue"): say what the
#     issue meant, the reason, instead.
# In the code files (recipes' .ini and scripts' .sbatch too) also no calendar dates (2026-11-24, 2026/11/24,
# Nov 24, 2026: dated run logs belong in bench/README.md, not in file headers).
# The scan first proves on files of its own that it finds each form, so a broken pattern cannot pass.
set -u
src=${1:?usage: lint_standalone.sh SRC}
# the patterns are split so that this file does not match itself
ref='\b(DESIGN|STYLE)''(\.md\b|'"'"'s\b|:)|\bDESIGN\.md|\.\./shared''/|\b[Ii]ssues? #?[0-9]+'
ref+='|(^|[^/])\b([Dd][Ee][Ss][Ii][Gg][Nn]|[Ss][Tt][Yy][Ll][Ee])''\.[Mm][Dd]\b'
ref+='|\b[Ss]ection [0-9]+ of the ''design|\b[Dd]esign('"'"'s)? section ''[0-9]'
ref+='|(^|[^A-Za-z0-9_.~/-])/(work|home|Users)''/[A-Za-z]'
ref+='|\b[Ii]ssue'"'"'s\b|\b([Ss]ee|[Ii]n|[Pp]er|[Bb]y) the ''issue\b|\bPR #?''[0-9]+|\(#''[0-9]+\)'
date='\b20[0-9]{2}''[-/][01][0-9][-/][0-3][0-9]\b'
date+='|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* [0-3]?[0-9],? 20''[0-9]{2}\b'
code_re='\.(c|h|cu|cuh|cc|cpp|py|sh|js|cmake|ini|sbatch)$|(^|/)(CMakeLists\.txt|Makefile)$|^\.ci/'
doc_re='\.md$'
# files: what git tracks when SRC is a checkout, else every file but build output and installed packages
list() {
  if git -C "$1" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$1" ls-files
  else
    (cd "$1" && find . -type f -not -path '*/build*' -not -path '*/node_modules/*' -not -path './.git/*' \
       | sed 's|^\./||')
  fi
}
scan() {
  local dir=$1 files
  files=$(list "$dir" | grep -E "$code_re|$doc_re" | grep -v '^tests/lint/lint_standalone\.sh$')
  [ -n "$files" ] || return 1
  (cd "$dir" && {
    printf '%s\n' "$files" | grep -E "$code_re" | tr '\n' '\0' | xargs -0 -r grep -nHE "$ref|$date"
    printf '%s\n' "$files" | grep -E "$doc_re" | tr '\n' '\0' | xargs -0 -r grep -nHE "$ref"
  })
}
# self-check: each forbidden form is found, a clean file is not (outside a git checkout: find lists them)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lint_lib.sh"
mkdir -p "$tmp/clean"
printf '/* the streams of docs/design.md "Streams and events"; issued once; redesign.md; tissue 3; the issues */\n' \
  > "$tmp/clean/ok.c"
printf '# the forward issues the loads; see docs/design.md, section "Layout"; mpirun --allow-run-as-root\n' \
  > "$tmp/clean/ok.sh"
printf 'Measured on 2026''-11-26 (a run log of bench/README.md may carry its date).\n' > "$tmp/clean/ok.md"
scan_passes "$tmp/clean"
i=0
for form in 'x.c:/* DESIGN''.md section 3 */' "x.h: * as DESIGN""'s bound" 'x.cu:// (DESIGN'': default P - r)' \
            'x.py:# see issue'' 20' 'x.sh:# Issues'' 20 and 24' 'CMakeLists.txt:# STYLE''.md 7a' \
            'x.cmake:# ../shared''/device/README.md' 'x.c:// measured 2026''-11-24 on an H100' \
            'docs/x.md:as DESIGN''.md says' 'x.md:(issue'' 7)' 'Makefile:# ../shared''/DESIGN.md' \
            'x.c:/* as design''.md says */' 'docs/x.md:see Design''.md' 'x.h: * (STYLE''.MD)' \
            'x.cu:// section 4 of the ''design' 'x.py:# the design'"'"'s section'' 7' 'README.md:see the ''issue' \
            'bench/README.md:the issue'"'"'s'' target' 'x.js:// fixed in PR'' 12' 'x.sh:# (#''33)' \
            'x.md:`tool /work''/main/build/x`' 'x.cmake:# /home''/me/src' 'recipes/x.ini:; measured 2026''-11-24' \
            'x.sbatch:# 2026''/11/24 run' 'x.c:/* Nov 24, 2026'' on an H100 */'; do
  i=$((i + 1))
  mkdir -p "$tmp/bad$i/$(dirname "${form%%:*}")"
  printf '%s\n' "${form#*:}" > "$tmp/bad$i/${form%%:*}"
  scan_flags "$tmp/bad$i" "$form"
done
scan_tree "a reference the reader of this repository cannot follow (cite docs/ by path and section; say what an
issue meant instead of its number; dates belong in bench/README.md's run logs):"
echo "lint standalone: ok"
