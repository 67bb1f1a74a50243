# engine.cmake — the engine's non-op pieces (engine/): Philox, init, schedule, the step-end ops, the
# parameter table, backend selection; safetensors and checkpoints; the cuBLAS layouts of the CUDA backend
# (engine/gemm_desc.c, checked on the CPU); the helpers the hostile-input checks rest on (engine/util.c).
# Philox, init, schedule, the step-end ops (sum_squares, scale, adamw_update: against the trainer's
# code they replaced, bitwise), parameter table, backend selection, AdamW against PyTorch.
add_executable(test_engine tests/engine/test_engine.c)
target_link_libraries(test_engine PRIVATE rrfp_core)
foreach(t philox init lr sumsq step_end params expf)
  add_test(NAME engine_${t} COMMAND test_engine ${t})
endforeach()
add_test(NAME engine_init_python COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/engine/init_ref.py $<TARGET_FILE:test_engine>)
add_test(NAME engine_adamw_torch COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/engine/adamw_ref.py $<TARGET_FILE:test_engine>)
set_tests_properties(engine_adamw_torch PROPERTIES LABELS torch)
add_test(NAME engine_backend_cpu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "backend: cpu" $<TARGET_FILE:test_engine> backend cpu)

add_test(NAME engine_backend_unknown COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine> "-DARGS=backend frob"
         -DEXPECT_RC=1 "-DEXPECT_ERR=unknown backend 'frob' \\(choices: cpu, cuda\\)"
         -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
if(NOT RRFP_HAVE_CUDA)
  # without the CUDA backend compiled in, the reason is the build; with it (no device here) the
  # CUDA area's tests check the "no CUDA device: ..." line
  add_test(NAME engine_backend_cuda_missing COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine>
           "-DARGS=backend cuda" -DEXPECT_RC=1 "-DEXPECT_ERR=cannot use backend 'cuda': built without CUDA"
           -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
endif()
add_test(NAME engine_ce_bad_target COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine> -DARGS=ce_bad_target
         -DEXPECT_RC=1 "-DEXPECT_ERR=target 7 of row 1 is outside \\[0, 5\\)"
         -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
add_test(NAME engine_params_duplicate COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_engine> -DARGS=params_dup
         -DEXPECT_RC=1 "-DEXPECT_ERR=parameter 'text.norm.weight' is registered twice"
         -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
# a forward-only table (eval, generate) has no gradient: zeroing it or making its moments aborts on the assertion
# (SIGABRT: 134), never writes nowhere
add_test(NAME engine_params_forward_only_grad COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 134
         "params_zero_grad on a forward-only table" $<TARGET_FILE:test_engine> params_forward_only_grad)
add_test(NAME engine_params_forward_only_optim COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 134
         "params_alloc_optimizer on a forward-only table" $<TARGET_FILE:test_engine> params_forward_only_optim)

# The op benchmark (bench/ops.sh runs it): GEMM per BLAS library and attention throughput.

add_executable(test_safetensors tests/engine/test_safetensors.c)
target_link_libraries(test_safetensors PRIVATE rrfp_core)
add_test(NAME safetensors_selftest COMMAND test_safetensors selftest ${CMAKE_CURRENT_BINARY_DIR})
# Independent pure-Python (json + struct) reader/writer against ours, and damaged files.
add_test(NAME safetensors_python_peer
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/engine/safetensors_peer.py $<TARGET_FILE:test_safetensors>
                 ${CMAKE_CURRENT_BINARY_DIR}/st_peer)

# The reader reads tensor bytes on demand: every dtype path, files changed after they were opened, the
# open-file limit.
add_executable(test_safetensors_read tests/engine/test_safetensors_read.c)
target_link_libraries(test_safetensors_read PRIVATE rrfp_core)
add_test(NAME safetensors_read COMMAND test_safetensors_read ${CMAKE_CURRENT_BINARY_DIR})

add_executable(test_checkpoint tests/engine/test_checkpoint.c)
target_link_libraries(test_checkpoint PRIVATE rrfp_core)
add_test(NAME checkpoint_unit COMMAND test_checkpoint ${CMAKE_CURRENT_BINARY_DIR})

# The CUDA backend's GEMM layout logic on the CPU: every cuBLAS / cuBLASLt call as a GemmDesc, executed
# through CBLAS against the CPU backend's linear op (the test keeps its CUDA-area name).
add_executable(test_gemm_desc tests/engine/test_gemm_desc.c)
target_link_libraries(test_gemm_desc PRIVATE rrfp_core)
add_test(NAME cuda_gemm_desc COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "gemm_desc: ok" $<TARGET_FILE:test_gemm_desc>)

# the helpers underneath: rr_read_file's caps (regular files, pipes, a FIFO; /dev/zero refused), rr_remove_tree (symbolic
# links not followed, shell syntax in names), checked 64-bit arithmetic, the slice-description parser
add_executable(test_hostile_util tests/engine/test_hostile_util.c)
target_link_libraries(test_hostile_util PRIVATE rrfp_core)
add_test(NAME hostile_util COMMAND test_hostile_util ${CMAKE_CURRENT_BINARY_DIR}/hostile_util)

add_executable(rrfp-bench-ops bench/bench_ops.c)
target_link_libraries(rrfp-bench-ops PRIVATE rrfp_core ${CMAKE_DL_LIBS})
# bitsandbytes' NF4 blockwise quantization with double quantization (engine/quant.c): the decision rules, and
# every code against an independent numpy implementation of the algorithm (tests/engine/quant_ref.py)
add_executable(test_quant tests/engine/test_quant.c)
target_link_libraries(test_quant PRIVATE rrfp_core)
add_test(NAME engine_quant COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "quant: ok" $<TARGET_FILE:test_quant> unit)
add_test(NAME engine_quant_ref COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "quant ref: ok" ${RRFP_PYTHON}
         ${CMAKE_SOURCE_DIR}/tests/engine/quant_ref.py $<TARGET_FILE:test_quant> ${CMAKE_CURRENT_BINARY_DIR}/engine_quant_ref)
