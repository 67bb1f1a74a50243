# engine.cmake — the CPU engine's tests: ops against a double reference and finite differences.
add_executable(test_ops_fd tests/test_ops_fd.c)
target_link_libraries(test_ops_fd PRIVATE rrfp_core)
add_test(NAME engine_ops_fd COMMAND test_ops_fd)
