#!/usr/bin/env bash
# lint_layers.sh SRC — the structural rules of docs/design.md "Layout" and "Errors" that a compiler does
# not check (the link checks of CMakeLists.txt catch calls that point back up):
#   - MPI (and NCCL) only in runtime/comm/ (tests and bench may use MPI directly);
#   - no rank counts from Open MPI's environment (OMPI_COMM_WORLD_*): MPI itself says;
#   - no exit / abort in library code below runtime/cli/ but comm_abort (which cli/ alone calls), and
#     rr_die in runtime/{pipeline,train,hf,report,model,comm,sched,sim,plan} only for internal invariants ("internal...");
#   - no branch on a backend's name outside engine/backend.c (the device table's flags say what code needs);
#   - a test's verdict is its exit code: no CTest pass-regex property in any tests/**/*.cmake.
set -u
cd "$1" || exit 2
fail=0
bad() { echo "FAIL: $*"; fail=1; }
hits=$(grep -rlE '\bMPI_[A-Z][a-z_]*\(|#include <mpi\.h>|\bnccl[A-Z][A-Za-z]*\(' engine data text vision runtime \
       --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' | grep -v '^runtime/comm/')
[ -z "$hits" ] || bad "MPI/NCCL calls outside runtime/comm/: $hits"
# NCCL's header only in runtime/comm/, and only in the NCCL implementation's own file (librrfp-nccl.so, opened
# on first use: a process that does not ask for NCCL never maps it)
hits=$(grep -rlE '#include <nccl\.h>' engine data text vision runtime --include='*.c' --include='*.h' --include='*.cu' \
       --include='*.cuh' | grep -v '^runtime/comm/comm_nccl\.c$')
[ -z "$hits" ] || bad "nccl.h included outside runtime/comm/comm_nccl.c: $hits"
# the CUDA runtime only in engine/cuda/ and runtime/comm/ (docs/design.md "Layout")
hits=$(grep -rlE '#include <cuda_runtime\.h>|\bcuda[A-Z][A-Za-z]*\(' data text vision runtime engine --include='*.c' \
       --include='*.h' | grep -vE '^(engine/cuda|runtime/comm)/')
[ -z "$hits" ] || bad "CUDA runtime calls outside engine/cuda/ and runtime/comm/: $hits"
# (the one Open MPI setting made, not read: comm_mpi.c turns off its fatal-signal handlers before MPI_Init)
hits=$(grep -rn 'OMPI_' engine data text vision runtime --include='*.c' --include='*.h' \
       | grep -v '^runtime/comm/comm_mpi\.c:[0-9]*: *setenv("OMPI_MCA_opal_signal", "", 0);$')
[ -z "$hits" ] || bad "Open MPI environment variables read in: $hits"
hits=$(grep -rnE '\b(exit|abort)\(' engine data text vision runtime --include='*.c' --include='*.h' \
       | grep -v '^runtime/cli/' | grep -v 'runtime/comm/comm_mpi.c:.*exit(code)' | grep -v '^engine/util\.[ch]:')
[ -z "$hits" ] || bad "exit/abort below runtime/cli/: $hits"
hits=$(grep -rnE 'rr_die(_hint)?\(' runtime/pipeline runtime/train runtime/hf runtime/report runtime/model runtime/comm runtime/sched runtime/sim runtime/plan \
       --include='*.c' | grep -v 'rr_die[_a-z]*("internal')
[ -z "$hits" ] || bad "rr_die on a path a user's input can reach (return the error instead): $hits"
# a backend is known by its device table's flags (BackendDevice.host_addressable, ...), never by its name: only
# engine/backend.c and engine/backend_names.c map a name to a table (backend_open, backend_name_host_addressable)
hits=$(grep -rnE 'str(n?cmp|str|n?casecmp)\([^;)]*("cpu"|"cuda"|dev->name|->backend\b)' engine data text vision runtime \
       --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' | grep -vE '^engine/backend(_names)?\.c:')
[ -z "$hits" ] || bad "a backend told by its name (ask its device table, or backend_name_host_addressable): $hits"
pass_regex='PASS_REGULAR''_EXPRESSION' # split so this file does not match itself
hits=$(grep -rln --include='*.cmake' "$pass_regex" tests)
[ -z "$hits" ] || bad "$pass_regex (ignores the exit code) in: $hits"
[ $fail -eq 0 ] && echo "lint layers: ok"
exit $fail
