# cuda.cmake — the CUDA backend's tests (engine/cuda/). No machine here has a GPU, so the backend's logic
# is tested on the CPU in both builds: the kernels' math (test_kernel_math) and the op matrix, the
# bf16 table on both activation storages and the own attention kernel on the CPU emulation of the CUDA runtime
# (tests/support/support.cmake). The same programs on a device are labelled `gpu` and exit 77 (skipped)
# with the reason where there is no device or no CUDA build.
add_executable(test_kernel_math tests/engine/cuda/test_kernel_math.c)
target_link_libraries(test_kernel_math PRIVATE rrfp_core)
add_test(NAME cuda_kernel_math COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "kernel_math: ok" $<TARGET_FILE:test_kernel_math>)

# The op matrix on the GPU against the CPU backend: skipped (77) without a device or a CUDA build.
add_executable(test_cuda_ops tests/engine/cuda/test_cuda_ops.c)
target_link_libraries(test_cuda_ops PRIVATE rrfp_core ${CMAKE_DL_LIBS})
add_test(NAME cuda_ops_gpu COMMAND test_cuda_ops)
set_tests_properties(cuda_ops_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
# backend_select("cuda"): the backend where there is a device, else one line "no CUDA device: ..."
# (CUDA build) or "built without CUDA" (CPU-only build), exit 1
add_test(NAME cuda_select COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "select: (ok|a device is present)" $<TARGET_FILE:test_cuda_ops> --select)

# The same matrix on the CUDA backend's own source compiled for the CPU emulation of the CUDA runtime
# (tests/support/cuda_emu).
rrfp_emu_executable(test_cuda_ops_emu tests/engine/cuda/test_cuda_ops.c)
add_test(NAME cuda_ops_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu>)
set_tests_properties(cuda_ops_emu PROPERTIES TIMEOUT 300)
# again with -0.0 guard zones, which catch stray writes of x += 0 that NaN guards cannot, and every
# launch run twice (threads in ascending, then descending order) with the outputs compared: a read
# of another thread's write without a barrier in between changes them
add_test(NAME cuda_ops_emu_strict COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu>)
set_tests_properties(cuda_ops_emu_strict PROPERTIES TIMEOUT 300
                     ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# runtime.precision = bf16: the CUDA backend's bf16 table (cuBLASLt GEMMs, rounding kernels) against
# backend_cpu_bf16, strict (two thread orders, -0.0 guards); tolerances in tests/engine/cuda/test_cuda_ops.c (cmp)
add_test(NAME cuda_ops_emu_bf16 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu> --bf16)
set_tests_properties(cuda_ops_emu_bf16 PROPERTIES TIMEOUT 300 ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# every op through a table bound to a second stream (the ops take their table, docs/design.md "Streams and events"):
# the emulation fails any work that lands on another stream; both precisions
add_test(NAME cuda_ops_emu_stream COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu> --stream)
add_test(NAME cuda_ops_emu_stream_bf16 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu> --bf16 --stream)
set_tests_properties(cuda_ops_emu_stream cuda_ops_emu_stream_bf16 PROPERTIES TIMEOUT 300)
add_test(NAME cuda_ops_gpu_stream COMMAND test_cuda_ops --stream)
set_tests_properties(cuda_ops_gpu_stream PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
add_test(NAME cuda_ops_gpu_bf16 COMMAND test_cuda_ops --bf16)
set_tests_properties(cuda_ops_gpu_bf16 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
# the bf16 attention cases with cuDNN's fused attention (engine/cuda/attention_cudnn.cu): --expect-cudnn fails a
# case within cuDNN's support that cuDNN did not run, forward and (head dims that are multiples of 16) backward;
# refused and disagreed are reported apart; RRFP_CUDNN_STRICT=1 compares every run with the own tensor-core
# kernel and makes a disagreement an error (cuDNN's result is then what the test compares with the CPU). Then
# cuDNN's forward with the own backward (RRFP_CUDNN_ATTENTION_BWD=0), and cuDNN turned off (the own kernel).
add_test(NAME cuda_ops_gpu_bf16_attn_cudnn COMMAND test_cuda_ops --bf16 --expect-cudnn attn)
add_test(NAME cuda_ops_gpu_bf16_attn_cudnn_fwd_only COMMAND test_cuda_ops --bf16 --expect-cudnn attn)
add_test(NAME cuda_ops_gpu_bf16_attn_fallback COMMAND test_cuda_ops --bf16 attn)
set_tests_properties(cuda_ops_gpu_bf16_attn_cudnn cuda_ops_gpu_bf16_attn_cudnn_fwd_only cuda_ops_gpu_bf16_attn_fallback
                     PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
set_tests_properties(cuda_ops_gpu_bf16_attn_cudnn PROPERTIES ENVIRONMENT "RRFP_CUDNN_VERBOSE=1;RRFP_CUDNN_STRICT=1")
set_tests_properties(cuda_ops_gpu_bf16_attn_cudnn_fwd_only PROPERTIES
                     ENVIRONMENT "RRFP_CUDNN_VERBOSE=1;RRFP_CUDNN_STRICT=1;RRFP_CUDNN_ATTENTION_BWD=0")
set_tests_properties(cuda_ops_gpu_bf16_attn_fallback PROPERTIES ENVIRONMENT "RRFP_CUDNN_ATTENTION=0")
set_tests_properties(cuda_ops_gpu cuda_ops_gpu_stream cuda_ops_gpu_bf16 PROPERTIES ENVIRONMENT "RRFP_CUDNN_STRICT=1")
# The bf16 table on 2-byte activations (Bufs of DTYPE_BF16) against the same table on f32 words, op by op (tests/engine/cuda/test_cuda_bf16a.c): bitwise in the emulation (strict: two thread orders, -0.0 guards),
# within one bf16 ulp on a device (gpu, skipped without one)
add_executable(test_cuda_bf16a tests/engine/cuda/test_cuda_bf16a.c)
target_link_libraries(test_cuda_bf16a PRIVATE rrfp_core ${CMAKE_DL_LIBS})
add_test(NAME cuda_bf16a_gpu COMMAND test_cuda_bf16a)
set_tests_properties(cuda_bf16a_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
rrfp_emu_executable(test_cuda_bf16a_emu tests/engine/cuda/test_cuda_bf16a.c)
add_test(NAME cuda_bf16a_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "cuda_bf16a: ok" $<TARGET_FILE:test_cuda_bf16a_emu>)
set_tests_properties(cuda_bf16a_emu PROPERTIES TIMEOUT 120 ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# bad data met inside a kernel is reported at the next synchronize, in the CPU backend's words
add_test(NAME cuda_emu_bad_target COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_cuda_ops_emu> -DARGS=--bad-target
         -DEXPECT_RC=1 "-DEXPECT_ERR=cross-entropy: target 7 of row 1 is outside \\[0, 5\\) and is not the ignore index -100"
         -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
add_test(NAME cuda_emu_bad_id COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_cuda_ops_emu> -DARGS=--bad-id
         -DEXPECT_RC=1 "-DEXPECT_ERR=embedding: token id -3 of row 2 is negative"
         -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)

# The own tensor-core attention (engine/cuda/flash_attention.cu) called directly: GQA / MQA, bf16 and f32
# storage, head dims 32..256, ragged lengths, many short samples (tests/engine/cuda/test_flash_attn.c), in the CPU
# emulation (strict: two thread orders, -0.0 guards) and on a device (gpu, skipped without one).
rrfp_emu_executable(test_flash_attn_emu tests/engine/cuda/test_flash_attn.c)
add_test(NAME flash_attn_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "flash_attn: ok" $<TARGET_FILE:test_flash_attn_emu>)
set_tests_properties(flash_attn_emu PROPERTIES TIMEOUT 300 ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
add_executable(test_flash_attn tests/engine/cuda/test_flash_attn.c)
target_link_libraries(test_flash_attn PRIVATE rrfp_core ${CMAKE_DL_LIBS})
add_test(NAME flash_attn_gpu COMMAND test_flash_attn)
set_tests_properties(flash_attn_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
# bench/gpu_attention.sh's program (bench/gpu_attn_bench.c): on a device; the -emu build runs it here on the
# CPU emulation (a check of the program, not a figure: `rrfp-bench-gpu-attn-emu 1 lm_8x512`)
add_executable(rrfp-bench-gpu-attn bench/gpu_attn_bench.c)
target_link_libraries(rrfp-bench-gpu-attn PRIVATE rrfp_core ${CMAKE_DL_LIBS})
rrfp_emu_executable(rrfp-bench-gpu-attn-emu bench/gpu_attn_bench.c)

# bench/gpu_bw.sh's program (bench/gpu_bw_bench.c: the bandwidth-bound ops at a stage's shapes): on a device; the
# -emu build runs it here on the CPU emulation (a check of the program, not a figure: `rrfp-bench-gpu-bw-emu 1 small`)
add_executable(rrfp-bench-gpu-bw bench/gpu_bw_bench.c)
target_link_libraries(rrfp-bench-gpu-bw PRIVATE rrfp_core ${CMAKE_DL_LIBS})
rrfp_emu_executable(rrfp-bench-gpu-bw-emu bench/gpu_bw_bench.c)

# Launches and bytes of a bf16 LM block and ViT block step on the emulated CUDA backend, per op
# against the bytes it must move (docs/cuda.md, "Traffic budget"); the profiler's counts against the
# emulation's (tests/engine/cuda/test_traffic.c)
rrfp_emu_executable(test_traffic tests/engine/cuda/test_traffic.c)
add_test(NAME cuda_emu_traffic COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "traffic: ok" $<TARGET_FILE:test_traffic>)
set_tests_properties(cuda_emu_traffic PROPERTIES TIMEOUT 300)

# The multi-tensor AdamW (BackendOps.adamw_multi: every tensor of a stage in one launch) bitwise against the
# per-tensor one, and its launches (tests/engine/cuda/test_adamw_multi.c), strict
rrfp_emu_executable(test_adamw_multi_emu tests/engine/cuda/test_adamw_multi.c)
add_test(NAME adamw_multi_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "adamw_multi: ok" $<TARGET_FILE:test_adamw_multi_emu>)
set_tests_properties(adamw_multi_emu PROPERTIES TIMEOUT 120 ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# the multi-tensor sum of squares (the gradient norm under tp and with a tied copy) bitwise the per-tensor loop, its launches
rrfp_emu_executable(test_sumsq_multi_emu tests/engine/cuda/test_sumsq_multi.c)
add_test(NAME sumsq_multi_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "sumsq_multi: ok" $<TARGET_FILE:test_sumsq_multi_emu>)
set_tests_properties(sumsq_multi_emu PROPERTIES TIMEOUT 120 ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# a QLoRA base weight dequantized to bf16 by the CUDA kernel (engine/cuda/quant.cu) equals the CPU's bit for bit, on
# the emulated CUDA runtime, strict (two thread orders, -0.0 guards)
rrfp_emu_executable(test_quant_cuda_emu tests/engine/cuda/test_quant_cuda.c)
add_test(NAME quant_cuda_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "quant cuda: ok" $<TARGET_FILE:test_quant_cuda_emu>)
set_tests_properties(quant_cuda_emu PROPERTIES ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# The emulation's checks fire (tests/engine/cuda/test_emu_checks.c, on the rule-breaking kernels of
# tests/engine/cuda/emu_checks.cu): a host read or write of a cudaMalloc allocation outside a device operation ends
# the process naming the byte and the allocation, under protection keys (skipped on a machine without them) and
# under mprotect (RR_EMU_PKEY=0); a launch whose result depends on the order of its blocks or threads fails with
# RR_EMU_ORDERS=2; a write past an allocation's end fails at the launch.
set(RRFP_EMU_CHECKS_CPP ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/emu_checks.cpp)
add_custom_command(OUTPUT ${RRFP_EMU_CHECKS_CPP}
                   COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu/gen.py
                           ${CMAKE_SOURCE_DIR}/tests/engine/cuda/emu_checks.cu ${RRFP_EMU_CHECKS_CPP}
                   DEPENDS ${CMAKE_SOURCE_DIR}/tests/engine/cuda/emu_checks.cu ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu/gen.py
                   VERBATIM)
set_source_files_properties(${RRFP_EMU_CHECKS_CPP} PROPERTIES OBJECT_DEPENDS "${RRFP_CUDA_EMU_CUH_OUT}")
add_executable(test_emu_checks tests/engine/cuda/test_emu_checks.c ${RRFP_EMU_CHECKS_CPP})
target_include_directories(test_emu_checks BEFORE PRIVATE ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu)
target_include_directories(test_emu_checks PRIVATE ${CMAKE_SOURCE_DIR})
target_include_directories(test_emu_checks SYSTEM PRIVATE ${BLAS_INC})
target_link_libraries(test_emu_checks PRIVATE rrfp_cuda_emu rrfp_core)
target_compile_features(test_emu_checks PRIVATE cxx_std_17)
set_target_properties(test_emu_checks PROPERTIES LINKER_LANGUAGE CXX)
set(RRFP_EMU_CHECKS bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh)
foreach(mode pkey mprotect)
  if(mode STREQUAL "pkey")
    set(env "RR_EMU_PROTECT=1")
  else()
    set(env "RR_EMU_PROTECT=1;RR_EMU_PKEY=0")
  endif()
  add_test(NAME emu_checks_protect_${mode}_ok
           COMMAND ${RRFP_EMU_CHECKS} 0 "emu checks: protect \\(${mode}\\) ok" $<TARGET_FILE:test_emu_checks> protect ${mode} ok)
  foreach(what read write)
    add_test(NAME emu_checks_protect_${mode}_${what}
             COMMAND ${RRFP_EMU_CHECKS} 3 "host code touched device memory: byte 492 of a 4000-byte cudaMalloc allocation"
                     $<TARGET_FILE:test_emu_checks> protect ${mode} ${what})
  endforeach()
  foreach(what ok read write)
    set_tests_properties(emu_checks_protect_${mode}_${what} PROPERTIES ENVIRONMENT "${env}" SKIP_RETURN_CODE 77)
  endforeach()
endforeach()
add_test(NAME emu_checks_chain COMMAND ${RRFP_EMU_CHECKS} 0 "emu_checks_chain: the result depends on the order.*chain reported"
         $<TARGET_FILE:test_emu_checks> chain)
add_test(NAME emu_checks_race COMMAND ${RRFP_EMU_CHECKS} 0 "emu_checks_race: the result depends on the order.*race reported"
         $<TARGET_FILE:test_emu_checks> race)
set_tests_properties(emu_checks_chain emu_checks_race PROPERTIES ENVIRONMENT "RR_EMU_ORDERS=2")
add_test(NAME emu_checks_overrun COMMAND ${RRFP_EMU_CHECKS} 0 "emu_checks_overrun wrote past the end of a 4000-byte allocation.*overrun reported"
         $<TARGET_FILE:test_emu_checks> overrun)
