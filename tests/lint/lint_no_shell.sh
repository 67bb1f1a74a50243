#!/usr/bin/env bash
# lint_no_shell.sh SRC — no shell is ever run from the C code (a path with shell syntax must stay a path): the identifiers system and popen
# followed by "(" appear nowhere in the C, C++ and CUDA sources of SRC (library, tools and tests alike;
# comments too, so the rule is one grep), nor does a "/bin/sh" or an "sh -c" argument vector. Folders are
# removed with rr_remove_tree (nftw), programs run from an argument vector (tests/support/util/proc.h).
# The scan first proves on files of its own that it finds each form, so a broken pattern cannot pass.
set -u
src=${1:?usage: lint_no_shell.sh SRC}
pattern='\b(system|popen)[[:space:]]*\(|"/bin/(ba)?sh"|"sh",[[:space:]]*"-c"'
scan() {
  grep -rnE "$pattern" "$1" --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' --include='*.cc' \
       --include='*.cpp' --exclude-dir='build*' --exclude-dir=node_modules --exclude-dir=.git
}
# self-check: each forbidden form is found, a clean file is not
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lint_lib.sh"
printf 'int f(void) { return 0; }\nint filesystem_ok(void);\n' > "$tmp/clean.c"
scan_passes "$tmp"
i=0
for form in 'system("rm -rf x");' 'FILE* p = popen ("ls", "r");' 'execl("/bin/sh", "sh", "-c", cmd, NULL);' \
            'char* a[] = {"sh", "-c", cmd};' '(void)system (cmd);'; do
  i=$((i + 1))
  mkdir -p "$tmp/bad$i"
  printf '%s\n' "$form" > "$tmp/bad$i/x.cu"
  scan_flags "$tmp/bad$i" "$form"
done
scan_tree "a shell is run from C code (remove folders with rr_remove_tree, run programs with an argument vector):"
echo "lint no shell: ok"
