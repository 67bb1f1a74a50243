# engine.cmake — the CPU engine's tests: ops against a double reference and finite differences.
add_executable(test_ops_fd tests/test_ops_fd.c)
target_link_libraries(test_ops_fd PRIVATE rrfp_core)
add_test(NAME engine_ops_fd COMMAND test_ops_fd)
# runtime.precision = bf16: every op of backend_cpu_bf16 against the f32 op within a bf16 round-off
# bound derived per element (tests/test_ops_bf16.c), rounding points present, operands rounded
add_executable(test_ops_bf16 tests/test_ops_bf16.c)
target_link_libraries(test_ops_bf16 PRIVATE rrfp_core)
add_test(NAME engine_ops_bf16 COMMAND test_ops_bf16)

# Philox, init, schedule, the step-end ops (sum_squares, scale, adamw_update: against the trainer's
# code they replaced, bitwise), parameter table, backend selection, AdamW against PyTorch.
add_executable(test_engine tests/test_engine.c)
target_link_libraries(test_engine PRIVATE rrfp_core)
foreach(t philox init lr sumsq step_end params expf)
  add_test(NAME engine_${t} COMMAND test_engine ${t})
endforeach()
add_test(NAME engine_init_python COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/init_ref.py $<TARGET_FILE:test_engine>)
add_test(NAME engine_adamw_torch COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/adamw_ref.py $<TARGET_FILE:test_engine>)
set_tests_properties(engine_adamw_torch PROPERTIES LABELS torch)
add_test(NAME engine_backend_cpu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "backend: cpu" $<TARGET_FILE:test_engine> backend cpu)

add_test(NAME engine_backend_unknown COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine> "-DARGS=backend frob"
         -DEXPECT_RC=1 "-DEXPECT_ERR=unknown backend 'frob' \\(choices: cpu, cuda\\)"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
if(NOT RRFP_HAVE_CUDA)
  # without the CUDA backend compiled in, the reason is the build; with it (no device here) the
  # CUDA area's tests check the "no CUDA device: ..." line
  add_test(NAME engine_backend_cuda_missing COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine>
           "-DARGS=backend cuda" -DEXPECT_RC=1 "-DEXPECT_ERR=cannot use backend 'cuda': built without CUDA"
           -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
endif()
add_test(NAME engine_ce_bad_target COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine> -DARGS=ce_bad_target
         -DEXPECT_RC=1 "-DEXPECT_ERR=target 7 of row 1 is outside \\[0, 5\\)"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
add_test(NAME engine_params_duplicate COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine> -DARGS=params_dup
         -DEXPECT_RC=1 "-DEXPECT_ERR=parameter 'text.norm.weight' is registered twice"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)

# The op benchmark (bench/ops.sh runs it): GEMM per BLAS library and attention throughput.
add_executable(rrfp-bench-ops bench/bench_ops.c)
target_link_libraries(rrfp-bench-ops PRIVATE rrfp_core ${CMAKE_DL_LIBS})
