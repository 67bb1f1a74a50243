# cli.cmake — the executable's command-line contract.
add_test(NAME cli_help COMMAND rrfp-mm --help)
set_tests_properties(cli_help PROPERTIES PASS_REGULAR_EXPRESSION "commands:.*version")
add_test(NAME cli_unknown_command COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm> -DARGS=frobnicate
         -DEXPECT_RC=2 -DEXPECT_ERR=unknown\ command -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
add_test(NAME cli_version COMMAND rrfp-mm version)
set_tests_properties(cli_version PROPERTIES PASS_REGULAR_EXPRESSION "blas: (blis|openblas)")
