# cuda.cmake — the CUDA backend's tests. No machine here has a GPU, so the backend's logic is tested
# on the CPU in both builds: the cuBLAS layouts (test_gemm_desc) and the kernels' math
# (test_kernel_math). test_cuda_ops runs the op matrix on the GPU against the CPU backend; it is
# labelled `gpu` and exits 77 (skipped) with the reason where there is no device or no CUDA build.
add_executable(test_gemm_desc tests/test_gemm_desc.c)
target_link_libraries(test_gemm_desc PRIVATE rrfp_core)
add_test(NAME cuda_gemm_desc COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "gemm_desc: ok" $<TARGET_FILE:test_gemm_desc>)

add_executable(test_kernel_math tests/test_kernel_math.c)
target_link_libraries(test_kernel_math PRIVATE rrfp_core)
add_test(NAME cuda_kernel_math COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "kernel_math: ok" $<TARGET_FILE:test_kernel_math>)

# The op matrix on the GPU against the CPU backend: skipped (77) without a device or a CUDA build.
add_executable(test_cuda_ops tests/test_cuda_ops.c)
target_link_libraries(test_cuda_ops PRIVATE rrfp_core ${CMAKE_DL_LIBS})
add_test(NAME cuda_ops_gpu COMMAND test_cuda_ops)
set_tests_properties(cuda_ops_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
# backend_select("cuda"): the backend where there is a device, else one line "no CUDA device: ..."
# (CUDA build) or "built without CUDA" (CPU-only build), exit 1
add_test(NAME cuda_select COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "select: (ok|a device is present)" $<TARGET_FILE:test_cuda_ops> --select)

# The same matrix on the CUDA backend's own source compiled for the CPU emulation of the CUDA runtime
# (tests/cuda_emu): kernels run as fibers, launch limits, barriers and buffer bounds are checked.
# Built in both builds (it needs no toolkit).
file(GLOB RRFP_CUDA_EMU_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/engine/cuda/*.cu)
set(RRFP_CUDA_EMU_GEN)
set(RRFP_CUDA_EMU_CPP)
foreach(cu ${RRFP_CUDA_EMU_CU})
  get_filename_component(stem ${cu} NAME_WE)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/${stem}.cpp)
  add_custom_command(OUTPUT ${out}
                     COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu
                     COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/cuda_emu/gen.py ${cu} ${out}
                     DEPENDS ${cu} ${CMAKE_SOURCE_DIR}/tests/cuda_emu/gen.py VERBATIM)
  list(APPEND RRFP_CUDA_EMU_GEN ${out})
  list(APPEND RRFP_CUDA_EMU_CPP ${out})
endforeach()
# the headers too (cuda_common.cuh launches a kernel): the generated sources include them by the
# same path, and a quoted include looks beside the including file first
file(GLOB RRFP_CUDA_EMU_CUH CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/engine/cuda/*.cuh)
foreach(cuh ${RRFP_CUDA_EMU_CUH})
  get_filename_component(name ${cuh} NAME)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/engine/cuda/${name})
  add_custom_command(OUTPUT ${out}
                     COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/engine/cuda
                     COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/cuda_emu/gen.py ${cuh} ${out}
                     DEPENDS ${cuh} ${CMAKE_SOURCE_DIR}/tests/cuda_emu/gen.py VERBATIM)
  list(APPEND RRFP_CUDA_EMU_GEN ${out})
endforeach()
# every generated source includes the generated headers: make sure they exist before it compiles
set(RRFP_CUDA_EMU_CUH_OUT ${RRFP_CUDA_EMU_GEN})
list(REMOVE_ITEM RRFP_CUDA_EMU_CUH_OUT ${RRFP_CUDA_EMU_CPP})
set_source_files_properties(${RRFP_CUDA_EMU_CPP} PROPERTIES OBJECT_DEPENDS "${RRFP_CUDA_EMU_CUH_OUT}")
# with NCCL emulated over MPI (nccl_emu.cpp) and runtime/comm/comm_nccl.c compiled against it
add_library(rrfp_cuda_emu STATIC tests/cuda_emu/emu.cpp tests/cuda_emu/nccl_emu.cpp tests/cuda_emu/comm_nccl_emu.cpp
            ${RRFP_CUDA_EMU_GEN})
target_link_libraries(rrfp_cuda_emu PUBLIC MPI::MPI_C)
target_compile_definitions(rrfp_cuda_emu PRIVATE OMPI_SKIP_MPICXX=1)
set_source_files_properties(tests/cuda_emu/comm_nccl_emu.cpp PROPERTIES OBJECT_DEPENDS
                            ${CMAKE_SOURCE_DIR}/runtime/comm/comm_nccl.c)
# tests/cuda_emu first: its cuda_runtime.h / cublas_v2.h stand in for the toolkit's
target_include_directories(rrfp_cuda_emu BEFORE PRIVATE ${CMAKE_SOURCE_DIR}/tests/cuda_emu)
target_include_directories(rrfp_cuda_emu PRIVATE ${CMAKE_SOURCE_DIR})
target_include_directories(rrfp_cuda_emu SYSTEM PRIVATE ${BLAS_INC})
target_compile_features(rrfp_cuda_emu PRIVATE cxx_std_17)
add_executable(test_cuda_ops_emu tests/test_cuda_ops.c)
target_compile_definitions(test_cuda_ops_emu PRIVATE RR_CUDA_EMU=1)
target_link_libraries(test_cuda_ops_emu PRIVATE rrfp_cuda_emu rrfp_core)
target_link_options(test_cuda_ops_emu PRIVATE -rdynamic)
set_target_properties(test_cuda_ops_emu PROPERTIES LINKER_LANGUAGE CXX)
add_test(NAME cuda_ops_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu>)
set_tests_properties(cuda_ops_emu PROPERTIES TIMEOUT 300)
# again with -0.0 guard zones, which catch stray writes of x += 0 that NaN guards cannot, and every
# launch run twice (threads in ascending, then descending order) with the outputs compared: a read
# of another thread's write without a barrier in between changes them
add_test(NAME cuda_ops_emu_strict COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu>)
set_tests_properties(cuda_ops_emu_strict PROPERTIES TIMEOUT 300
                     ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# runtime.precision = bf16: the CUDA backend's bf16 table (cuBLASLt GEMMs, rounding kernels) against
# backend_cpu_bf16, strict (two thread orders, -0.0 guards); tolerances in tests/test_cuda_ops.c (cmp)
add_test(NAME cuda_ops_emu_bf16 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu> --bf16)
set_tests_properties(cuda_ops_emu_bf16 PROPERTIES TIMEOUT 300 ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# every op through a table bound to a second stream (the ops take their table, docs/design.md "Streams and events"):
# the emulation fails any work that lands on another stream; both precisions
add_test(NAME cuda_ops_emu_stream COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu> --stream)
add_test(NAME cuda_ops_emu_stream_bf16 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "cuda_ops: ok" $<TARGET_FILE:test_cuda_ops_emu> --bf16 --stream)
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
# The bf16-activation table (backend_cuda_bf16a: activations stored as 2-byte bf16) against the bf16
# table, op by op (tests/test_cuda_bf16a.c): bitwise in the emulation (strict: two thread orders, -0.0 guards),
# within one bf16 ulp on a device (gpu, skipped without one)
add_executable(test_cuda_bf16a tests/test_cuda_bf16a.c)
target_link_libraries(test_cuda_bf16a PRIVATE rrfp_core ${CMAKE_DL_LIBS})
add_test(NAME cuda_bf16a_gpu COMMAND test_cuda_bf16a)
set_tests_properties(cuda_bf16a_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
add_executable(test_cuda_bf16a_emu tests/test_cuda_bf16a.c)
target_compile_definitions(test_cuda_bf16a_emu PRIVATE RR_CUDA_EMU=1)
target_link_libraries(test_cuda_bf16a_emu PRIVATE rrfp_cuda_emu rrfp_core)
target_link_options(test_cuda_bf16a_emu PRIVATE -rdynamic)
set_target_properties(test_cuda_bf16a_emu PROPERTIES LINKER_LANGUAGE CXX)
add_test(NAME cuda_bf16a_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "cuda_bf16a: ok" $<TARGET_FILE:test_cuda_bf16a_emu>)
set_tests_properties(cuda_bf16a_emu PROPERTIES TIMEOUT 120 ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# bad data met inside a kernel is reported at the next synchronize, in the CPU backend's words
add_test(NAME cuda_emu_bad_target COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_cuda_ops_emu> -DARGS=--bad-target
         -DEXPECT_RC=1 "-DEXPECT_ERR=cross-entropy: target 7 of row 1 is outside \\[0, 5\\) and is not the ignore index -100"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
add_test(NAME cuda_emu_bad_id COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_cuda_ops_emu> -DARGS=--bad-id
         -DEXPECT_RC=1 "-DEXPECT_ERR=embedding: token id -3 of row 2 is negative"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
# The model's own gpu test (tests/test_model.c, model helper's file, compiled unchanged) on the
# emulated CUDA backend: a 3-microbatch LLaVA step, CUDA vs CPU and CUDA split vs fused.
if(EXISTS ${CMAKE_SOURCE_DIR}/tests/test_model.c)
  add_executable(test_model_emu tests/test_model.c)
  target_compile_definitions(test_model_emu PRIVATE backend_cuda_get=backend_cuda_emu_get RR_CUDA_EMU=1)
  target_link_libraries(test_model_emu PRIVATE rrfp_cuda_emu rrfp_core)
  set_target_properties(test_model_emu PROPERTIES LINKER_LANGUAGE CXX)
  add_test(NAME model_gpu_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "gpu: [0-9]+ tensors" $<TARGET_FILE:test_model_emu> gpu)
  set_tests_properties(model_gpu_emu PROPERTIES TIMEOUT 300
                       ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
  # runtime.precision = bf16: the LM and the tower on the bf16-activation table against the bf16 table, bitwise;
  # one thread order (the ops' two-order checks are cuda_bf16a_emu's), to stay quick
  add_test(NAME model_gpu_emu_bf16a COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "gpu_bf16a: [0-9]+ \\+ [0-9]+ tensors" $<TARGET_FILE:test_model_emu> gpu_bf16a)
  set_tests_properties(model_gpu_emu_bf16a PROPERTIES TIMEOUT 300 ENVIRONMENT "RR_EMU_GUARD=negzero")
  add_test(NAME model_gpu_emu_bf16a_clip COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "gpu_bf16a: [0-9]+ \\+ [0-9]+ tensors" $<TARGET_FILE:test_model_emu> gpu_bf16a_clip)
  set_tests_properties(model_gpu_emu_bf16a_clip PROPERTIES TIMEOUT 300 ENVIRONMENT "RR_EMU_GUARD=negzero")
  # the same with the CLIP tower and the exact-GELU projector (clip_ops.cu)
  add_test(NAME model_gpu_emu_clip COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "gpu: [0-9]+ tensors" $<TARGET_FILE:test_model_emu> gpu_clip)
  set_tests_properties(model_gpu_emu_clip PROPERTIES TIMEOUT 300
                       ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
endif()
# rrfp-mm on the emulated CUDA backend (a tool for finding host code that touches device memory, e.g.
# `rrfp-mm-emu train recipes/test-synthetic.ini --set runtime.backend=cuda`, and the executable of the
# train_cuda_emu tests below). The linker redirects every backend_cuda_get call to the emulation
# (tests/cuda_emu/wrap.c).
add_executable(rrfp-mm-emu runtime/cli/main.c tests/cuda_emu/wrap.c)
target_link_libraries(rrfp-mm-emu PRIVATE rrfp_cuda_emu rrfp_core)
target_link_options(rrfp-mm-emu PRIVATE -Wl,--wrap=backend_cuda_get -Wl,--wrap=comm_nccl_create
                    -Wl,--wrap=metrics_peak_rss_mb -Wl,--wrap=comm_nccl_profile -Wl,--wrap=comm_nccl_profile_take
                    -rdynamic)
set_target_properties(rrfp-mm-emu PROPERTIES LINKER_LANGUAGE CXX)
# Training with runtime.backend = cuda end to end with device memory protected (any host access to
# device memory kills the run): 4 steps against the CPU backend's run of the same recipe (losses and
# grad norms within 1e-5), stop at 3 + resume with a step dump, eval on the CUDA backend; then the
# same through the pipeline trainer (parallel.pp = 2 under mpirun, stop + resume). Tolerances are
# explained in tests/train_cuda_emu.sh.
if(TARGET rrfp_cuda_emu)
  # rrfp-mm generate on the CUDA backend's own kernels (attention_decode.cu) under emulation: the answers
  # equal the CPU backend's and the KV cache equals a full re-forward (tests/generate.sh emu)
  add_test(NAME generate_cuda_emu
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "generate emu: ok" bash ${CMAKE_SOURCE_DIR}/tests/generate.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_cuda_emu emu $<TARGET_FILE:rrfp-mm-emu>)
  set_tests_properties(generate_cuda_emu PROPERTIES TIMEOUT 300)
  # the same on a grouped-query model (text_heads 4 over text_kv_heads 2): the kernel's h / (H / Hkv)
  add_test(NAME generate_cuda_emu_gqa
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "generate emu_gqa: ok" bash ${CMAKE_SOURCE_DIR}/tests/generate.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_cuda_emu_gqa emu_gqa $<TARGET_FILE:rrfp-mm-emu>)
  set_tests_properties(generate_cuda_emu_gqa PROPERTIES TIMEOUT 300)
  add_test(NAME train_cuda_emu
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train cuda emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_cuda_emu.sh $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu 4)
  set_tests_properties(train_cuda_emu PROPERTIES TIMEOUT 600)
  # runtime.precision = bf16 on both sides: the CUDA bf16 table (cuBLASLt emulated) against backend_cpu_bf16
  # (the stop/resume part is train_cuda_emu's: RESUME=0)
  add_test(NAME train_cuda_emu_bf16
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train cuda emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_cuda_emu.sh $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu_bf16 4)
  set_tests_properties(train_cuda_emu_bf16 PROPERTIES TIMEOUT 600 ENVIRONMENT "PRECISION=bf16;RESUME=0")
  # the CLIP tower trained on the emulated CUDA backend against the CPU backend (RESUME=0: train_cuda_emu
  # covers checkpointing)
  add_test(NAME train_cuda_emu_clip
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train cuda emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_cuda_emu.sh $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu_clip 4)
  set_tests_properties(train_cuda_emu_clip PROPERTIES TIMEOUT 600 ENVIRONMENT
                       "RESUME=0;EXTRA_SETS=--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16 --set model.vision_feature_layer=-2 --set model.projector_act=gelu")
  add_test(NAME train_cuda_emu_pp2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train cuda emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_cuda_emu.sh $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu_pp2 6
                   pp 2 ${RRFP_MPIRUN})
  set_tests_properties(train_cuda_emu_pp2 PROPERTIES LABELS mpi TIMEOUT 450)
  # the CUDA bf16 table's 2-byte compute copies after train.init_from (tests/train_bf16_init_from.sh, part 4)
  add_test(NAME train_cuda_emu_bf16_init_from
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "bf16 init_from: ok" ${CMAKE_SOURCE_DIR}/tests/train_bf16_init_from.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu_bf16_init_from
                   $<TARGET_FILE:rrfp-mm-emu>)
  set_tests_properties(train_cuda_emu_bf16_init_from PROPERTIES TIMEOUT 300)
  # the CLIP tower at parallel.tp = 2 in bf16 on the emulated CUDA backend (NCCL) against the CPU backend's bf16
  # tp 2 run: the TP parameter table keeps vision.pos_embed.weight's f32 compute copy (it lost the mark and
  # the tower read bf16 words as f32: loss NaN in step 1)
  add_test(NAME train_cuda_emu_clip_tp2_bf16
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train cuda emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_cuda_emu.sh $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu_clip_tp2_bf16 3
                   tp 2 ${RRFP_MPIRUN})
  set_tests_properties(train_cuda_emu_clip_tp2_bf16 PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT
                       "PRECISION=bf16;EXTRA_SETS=--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16")
endif()

# NCCL emulated over MPI (tests/cuda_emu/nccl_emu.cpp) under runtime/comm/comm_nccl.c: a delayed receive is
# NaN until its event (the control), a send that skips its producer's event sends stale data under the
# delayed compute stream (the control of RR_EMU_COMPUTE_DELAY), the FIFO transport with device payloads,
# the collectives (host ones over NCCL, without MPI).
add_executable(test_nccl_emu tests/test_nccl_emu.c)
target_link_libraries(test_nccl_emu PRIVATE rrfp_cuda_emu rrfp_core)
set_target_properties(test_nccl_emu PROPERTIES LINKER_LANGUAGE CXX)
foreach(np 2 4)
  add_test(NAME nccl_emu_np${np}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "nccl emu: ok" timeout 120 ${RRFP_MPIRUN} -np ${np}
                   -x RR_EMU_COMM_DELAY=3 $<TARGET_FILE:test_nccl_emu>)
  # the same with the compute streams delayed too: everything must still hold, and the control of
  # RR_EMU_COMPUTE_DELAY (a send that skips its producer's event sends stale data) must see it
  add_test(NAME nccl_emu_np${np}_compute_delay
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "nccl emu: ok" timeout 120 ${RRFP_MPIRUN} -np ${np}
                   -x RR_EMU_COMM_DELAY=3 -x RR_EMU_COMPUTE_DELAY=2 $<TARGET_FILE:test_nccl_emu> --compute-delay)
  set_tests_properties(nccl_emu_np${np} nccl_emu_np${np}_compute_delay PROPERTIES LABELS mpi TIMEOUT 150)
endforeach()

# Training with runtime.comm = nccl on the emulated CUDA runtime and NCCL, against the CPU backend's one
# process (tests/train_nccl_emu.sh): pp 2 (the FIFO protocol over one communicator per direction, inputs
# ready on their receive's event, receives delayed), dp 2 (the gradient all-reduce in place on device
# memory), fixed-sync (synchronous device sends). No cudaMalloc after the first step on any rank.
if(TARGET rrfp_cuda_emu)
  add_test(NAME train_nccl_emu_pp2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_nccl_emu_pp2 4 2 1 2 ${RRFP_MPIRUN})
  add_test(NAME train_nccl_emu_dp2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_nccl_emu_dp2 3 1 2 1 ${RRFP_MPIRUN})
  add_test(NAME train_nccl_emu_pp2_fixed_sync
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_nccl_emu_pp2_fs 3 2 1 2 ${RRFP_MPIRUN})
  add_test(NAME train_nccl_emu_pp2_bf16
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_nccl_emu_pp2_bf16 3 2 1 2 ${RRFP_MPIRUN})
  add_test(NAME train_nccl_emu_tp2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_nccl_emu_tp2 3 1 1 2 ${RRFP_MPIRUN})
  # tp 4: a TP leader's choices reach its third peer over an NCCL link too (every two ranks of a group of
  # <= 8 are linked), so no step after the first calls MPI
  add_test(NAME train_nccl_emu_tp4
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_nccl_emu_tp4 2 1 1 2 ${RRFP_MPIRUN})
  set_tests_properties(train_nccl_emu_pp2 train_nccl_emu_dp2 train_nccl_emu_pp2_fixed_sync train_nccl_emu_pp2_bf16
                       train_nccl_emu_tp2 train_nccl_emu_tp4 PROPERTIES LABELS mpi TIMEOUT 480)
  set_tests_properties(train_nccl_emu_tp2 PROPERTIES ENVIRONMENT "TP=2")
  set_tests_properties(train_nccl_emu_tp4 PROPERTIES ENVIRONMENT "TP=4;SETS=model.vision_heads=4 model.text_heads=4")
  set_tests_properties(train_nccl_emu_pp2_fixed_sync PROPERTIES ENVIRONMENT "MODE=fixed-sync")
  set_tests_properties(train_nccl_emu_pp2_bf16 PROPERTIES ENVIRONMENT "PRECISION=bf16")
endif()
# The LM variants (grouped-query attention 4 on 2 heads, q/k/v and o biases, tied embeddings, Llama-3 RoPE) on
# the CUDA backend's kernels: one process against the CPU backend (RESUME=0: checkpointing is
# train_cuda_emu's), and pp 2 over the emulated NCCL, where the tied embedding's gradient sum between the
# first and last stage runs in place on the device group (no MPI in steps 2..3)
if(TARGET rrfp_cuda_emu)
  set(LM_VARIANTS_SETS "model.text_layers=4 model.text_heads=4 model.text_kv_heads=2 model.text_qkv_bias=true model.text_o_bias=true model.tie_embeddings=true model.rope_type=llama3 model.rope_original_max_pos=512 model.rope_base=500000")
  string(REPLACE "model." "--set model." LM_VARIANTS_EXTRA "${LM_VARIANTS_SETS}")
  add_test(NAME train_cuda_emu_lm_variants
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train cuda emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_cuda_emu.sh $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu_lm_variants 2)
  set_tests_properties(train_cuda_emu_lm_variants PROPERTIES TIMEOUT 300 ENVIRONMENT "RESUME=0;EXTRA_SETS=${LM_VARIANTS_EXTRA}")
  add_test(NAME train_nccl_emu_pp2_lm_variants
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_nccl_emu_pp2_lm_variants 2 2 1 2 ${RRFP_MPIRUN})
  set_tests_properties(train_nccl_emu_pp2_lm_variants PROPERTIES LABELS mpi TIMEOUT 480 ENVIRONMENT "SETS=${LM_VARIANTS_SETS}")
  # the same under runtime.precision = bf16: grouped-query attention through the own tensor-core kernel
  # (cuDNN is never asked for Hkv < H) and the tied embedding read as a 2-byte GEMM weight and
  # embedding table
  add_test(NAME train_cuda_emu_lm_variants_bf16
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train cuda emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_cuda_emu.sh $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu_lm_variants_bf16 2)
  set_tests_properties(train_cuda_emu_lm_variants_bf16 PROPERTIES TIMEOUT 300 ENVIRONMENT "PRECISION=bf16;RESUME=0;EXTRA_SETS=${LM_VARIANTS_EXTRA}")
  # the CLIP tower under bf16 on the CUDA table: its position embedding keeps an f32 compute copy
  # (params_keep_f32_compute, read by rows_gather), every other 2-D tensor 2-byte
  add_test(NAME train_cuda_emu_clip_bf16
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train cuda emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_cuda_emu.sh $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu_clip_bf16 2)
  set_tests_properties(train_cuda_emu_clip_bf16 PROPERTIES TIMEOUT 300 ENVIRONMENT
                       "PRECISION=bf16;RESUME=0;EXTRA_SETS=--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16 --set model.vision_feature_layer=-2 --set model.projector_act=gelu")
endif()

# The own tensor-core attention (engine/cuda/flash_attention.cu) called directly: GQA / MQA, bf16 and f32
# storage, head dims 32..256, ragged lengths, many short samples (tests/test_flash_attn.c), in the CPU
# emulation (strict: two thread orders, -0.0 guards) and on a device (gpu, skipped without one).
add_executable(test_flash_attn_emu tests/test_flash_attn.c)
target_compile_definitions(test_flash_attn_emu PRIVATE RR_CUDA_EMU=1)
target_link_libraries(test_flash_attn_emu PRIVATE rrfp_cuda_emu rrfp_core)
target_link_options(test_flash_attn_emu PRIVATE -rdynamic)
set_target_properties(test_flash_attn_emu PROPERTIES LINKER_LANGUAGE CXX)
add_test(NAME flash_attn_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "flash_attn: ok" $<TARGET_FILE:test_flash_attn_emu>)
set_tests_properties(flash_attn_emu PROPERTIES TIMEOUT 300 ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
add_executable(test_flash_attn tests/test_flash_attn.c)
target_link_libraries(test_flash_attn PRIVATE rrfp_core ${CMAKE_DL_LIBS})
add_test(NAME flash_attn_gpu COMMAND test_flash_attn)
set_tests_properties(flash_attn_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
# bench/gpu_attention.sh's program (bench/gpu_attn_bench.c): on a device; the -emu build runs it here on the
# CPU emulation (a check of the program, not a figure: `rrfp-bench-gpu-attn-emu 1 lm_8x512`)
add_executable(rrfp-bench-gpu-attn bench/gpu_attn_bench.c)
target_link_libraries(rrfp-bench-gpu-attn PRIVATE rrfp_core ${CMAKE_DL_LIBS})
add_executable(rrfp-bench-gpu-attn-emu bench/gpu_attn_bench.c)
target_compile_definitions(rrfp-bench-gpu-attn-emu PRIVATE RR_CUDA_EMU=1)
target_link_libraries(rrfp-bench-gpu-attn-emu PRIVATE rrfp_cuda_emu rrfp_core)
set_target_properties(rrfp-bench-gpu-attn-emu PROPERTIES LINKER_LANGUAGE CXX)

# bench/gpu_bw.sh's program (bench/gpu_bw_bench.c: the bandwidth-bound ops at a stage's shapes): on a device; the
# -emu build runs it here on the CPU emulation (a check of the program, not a figure: `rrfp-bench-gpu-bw-emu 1 small`)
add_executable(rrfp-bench-gpu-bw bench/gpu_bw_bench.c)
target_link_libraries(rrfp-bench-gpu-bw PRIVATE rrfp_core ${CMAKE_DL_LIBS})
add_executable(rrfp-bench-gpu-bw-emu bench/gpu_bw_bench.c)
target_compile_definitions(rrfp-bench-gpu-bw-emu PRIVATE RR_CUDA_EMU=1)
target_link_libraries(rrfp-bench-gpu-bw-emu PRIVATE rrfp_cuda_emu rrfp_core)
set_target_properties(rrfp-bench-gpu-bw-emu PROPERTIES LINKER_LANGUAGE CXX)

# Launches and bytes of a bf16 LM block and ViT block step on the emulated CUDA backend, per op
# against the bytes it must move (docs/cuda.md, "Traffic budget"); the profiler's counts against the
# emulation's (tests/test_traffic.c)
add_executable(test_traffic tests/test_traffic.c)
target_link_libraries(test_traffic PRIVATE rrfp_cuda_emu rrfp_core)
set_target_properties(test_traffic PROPERTIES LINKER_LANGUAGE CXX)
add_test(NAME cuda_emu_traffic COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "traffic: ok" $<TARGET_FILE:test_traffic>)
set_tests_properties(cuda_emu_traffic PROPERTIES TIMEOUT 300)
# runtime.profile and device_peak_mb end to end on the emulated CUDA backend (tests/train_profile_emu.sh)
if(TARGET rrfp_cuda_emu)
  add_test(NAME train_profile_emu
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train profile emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_profile_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_profile_emu)
  set_tests_properties(train_profile_emu PROPERTIES TIMEOUT 300)
  # the communication kind: NCCL operations timed on their streams (pp 2 under mpirun)
  add_test(NAME train_profile_nccl_emu
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train profile nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_profile_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_profile_nccl_emu ${RRFP_MPIRUN})
  set_tests_properties(train_profile_nccl_emu PROPERTIES LABELS mpi TIMEOUT 300)
endif()
# 2-byte activations under tensor parallelism (tests/train_bf16a_tp_emu.sh): bf16 training with
# parallel.tp = 2 on the emulated CUDA runtime and NCCL, the bf16-activation table against
# RRFP_BF16_ACTIVATIONS=0, bitwise (losses, gradient norms, step 1's dump, the last checkpoint; the token
# embedding's atomics within 1e-6): pp 1 (one stage: embedding, tower, LM, vocabulary-parallel head), pp 2 (the
# stage-edge conversions), and the LM variants (GQA, q/k/v and o biases: o's added by TP rank 0 before the sum,
# tied embeddings, Llama-3 RoPE)
if(TARGET rrfp_cuda_emu)
  add_test(NAME train_bf16a_tp_emu_tp2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train bf16a tp emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_bf16a_tp_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_bf16a_tp_emu_tp2 1 2 ${RRFP_MPIRUN})
  add_test(NAME train_bf16a_tp_emu_pp2tp2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train bf16a tp emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_bf16a_tp_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_bf16a_tp_emu_pp2tp2 2 2 ${RRFP_MPIRUN})
  add_test(NAME train_bf16a_tp_emu_tp2_lm_variants
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train bf16a tp emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_bf16a_tp_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_bf16a_tp_emu_tp2_lm_variants 1 2 ${RRFP_MPIRUN})
  set_tests_properties(train_bf16a_tp_emu_tp2 train_bf16a_tp_emu_pp2tp2 train_bf16a_tp_emu_tp2_lm_variants
                       PROPERTIES LABELS mpi TIMEOUT 300)
  set_tests_properties(train_bf16a_tp_emu_pp2tp2 PROPERTIES ENVIRONMENT "SETS=model.text_layers=4")
  set_tests_properties(train_bf16a_tp_emu_tp2_lm_variants PROPERTIES ENVIRONMENT "SETS=${LM_VARIANTS_SETS}")
  # the CLIP tower (class embedding, interpolated position table kept f32 in the compute copy, pre-LN, no
  # patch bias) under tp 2: gate on against off as above
  add_test(NAME train_bf16a_tp_emu_tp2_clip
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train bf16a tp emu: ok" ${CMAKE_SOURCE_DIR}/tests/train_bf16a_tp_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_bf16a_tp_emu_tp2_clip 1 2 ${RRFP_MPIRUN})
  set_tests_properties(train_bf16a_tp_emu_tp2_clip PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT
                       "SETS=model.vision_arch=clip model.vision_layers=2 model.vision_image_size=16")
endif()
