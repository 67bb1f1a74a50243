# lint.cmake — structural rules checked over the whole source tree.
# structural rules: MPI only in runtime/comm/, no exits below runtime/cli/, verdicts by exit code
add_test(NAME lint_layers COMMAND bash ${CMAKE_SOURCE_DIR}/tests/lint/lint_layers.sh ${CMAKE_SOURCE_DIR})
# no shell from C code: system / popen / "sh -c" nowhere in the C, C++ and CUDA sources
add_test(NAME lint_no_shell COMMAND bash ${CMAKE_SOURCE_DIR}/tests/lint/lint_no_shell.sh ${CMAKE_SOURCE_DIR})
# the repository reads on its own: no citation of files outside it, of issue numbers, or dates in code
add_test(NAME lint_standalone COMMAND bash ${CMAKE_SOURCE_DIR}/tests/lint/lint_standalone.sh ${CMAKE_SOURCE_DIR})
# no pipe into grep -q in a script under pipefail (the writer's SIGPIPE fails the pipe though the line was there)
add_test(NAME lint_shell_pipes COMMAND bash ${CMAKE_SOURCE_DIR}/tests/lint/lint_shell_pipes.sh ${CMAKE_SOURCE_DIR})
# a 2-byte buffer never travels as float*: the op tables' float* parameters are f32 by contract, the model code
# carves and addresses its activations as typed buffers; proves its rules first
add_test(NAME lint_typed_buffers COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/lint/lint_typed_buffers.py ${CMAKE_SOURCE_DIR})
# tests/ mirrors the source tree: each test folder mirrors a source folder, registers its tests in the .cmake named
# after it, runs no other folder's files; a test named after a source file sits in that file's mirror; proves its rules first
add_test(NAME lint_mirror COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/lint/lint_mirror.py ${CMAKE_SOURCE_DIR})
# the options a user reads are the options the parsers take: every option a command accepts is in its --help, every
# option --help, README.md, docs/*.md and recipes/README.md show for a command is accepted (asked of the binary), every
# recipe key the docs show in --set, INI blocks and code spans is known, recipes/README.md's key table is --list-keys;
# proves its rules first (~2 s)
add_test(NAME lint_cli_docs COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/lint/lint_cli_docs.py ${CMAKE_SOURCE_DIR} $<TARGET_FILE:rrfp-mm>)
