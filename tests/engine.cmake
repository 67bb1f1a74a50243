# engine.cmake — the CPU engine's tests: ops against a double reference and finite differences.
add_executable(test_ops_fd tests/test_ops_fd.c)
target_link_libraries(test_ops_fd PRIVATE rrfp_core)
add_test(NAME engine_ops_fd COMMAND test_ops_fd)

# Philox, init, schedule, parameter table, backend selection, AdamW against PyTorch.
add_executable(test_engine tests/test_engine.c)
target_link_libraries(test_engine PRIVATE rrfp_core)
foreach(t philox init lr sumsq)
  add_test(NAME engine_${t} COMMAND test_engine ${t})
endforeach()
add_test(NAME engine_init_python COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/init_ref.py $<TARGET_FILE:test_engine>)
add_test(NAME engine_adamw_torch COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/adamw_ref.py $<TARGET_FILE:test_engine>)
set_tests_properties(engine_adamw_torch PROPERTIES LABELS torch)
add_test(NAME engine_ce_bad_target COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine> -DARGS=ce_bad_target
         -DEXPECT_RC=1 "-DEXPECT_ERR=target 7 of row 1 is outside \\[0, 5\\)"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
add_test(NAME engine_params_duplicate COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine> -DARGS=params_dup
         -DEXPECT_RC=1 "-DEXPECT_ERR=parameter 'text.norm.weight' is registered twice"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
