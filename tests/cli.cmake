# cli.cmake — the executable's command-line contract.
add_test(NAME cli_help COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "commands:.*version" $<TARGET_FILE:rrfp-mm> --help)

add_test(NAME cli_unknown_command COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm> -DARGS=frobnicate
         -DEXPECT_RC=2 -DEXPECT_ERR=unknown\ command -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
add_test(NAME cli_version COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "blas: (blis|openblas)" $<TARGET_FILE:rrfp-mm> version)

# --help on every command and sub-command (exit 0, usage on stdout); unknown options exit 2 naming them
add_test(NAME cli_contract COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli_contract.sh $<TARGET_FILE:rrfp-mm>)
# structural rules: MPI only in runtime/comm/, no exits below runtime/cli/, verdicts by exit code
add_test(NAME lint_layers COMMAND bash ${CMAKE_SOURCE_DIR}/tests/lint_layers.sh ${CMAKE_SOURCE_DIR})
# no shell from C code: system / popen / "sh -c" nowhere in the C, C++ and CUDA sources
add_test(NAME lint_no_shell COMMAND bash ${CMAKE_SOURCE_DIR}/tests/lint_no_shell.sh ${CMAKE_SOURCE_DIR})
# the repository reads on its own: no citation of files outside it, of issue numbers, or dates in code
add_test(NAME lint_standalone COMMAND bash ${CMAKE_SOURCE_DIR}/tests/lint_standalone.sh ${CMAKE_SOURCE_DIR})
