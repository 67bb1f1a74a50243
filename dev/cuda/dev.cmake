# dev.cmake — the kernel versions that did not ship (dev/cuda/README.md), built only with -DRRFP_DEV_CUDA=ON.
# flash_attention_variants.cu is appended to engine/cuda/flash_attention.cu (one translation unit) and the
# CUDA backend is built a second time with that file in place of the shipping one: for the CPU emulation
# (rrfp_cuda_emu_dev, the check: label dev) and, in a CUDA build, for a device (build/dev/librrfp-cuda.so,
# opened through RRFP_CUDA_LIB by the device check and the benchmark).
set(RRFP_DEV_DIR ${CMAKE_CURRENT_BINARY_DIR}/dev)
set(RRFP_DEV_FA ${RRFP_DEV_DIR}/flash_attention_dev.cu)
add_custom_command(OUTPUT ${RRFP_DEV_FA}
                   COMMAND ${CMAKE_COMMAND} -E make_directory ${RRFP_DEV_DIR}
                   COMMAND ${CMAKE_COMMAND} -DA=${CMAKE_SOURCE_DIR}/engine/cuda/flash_attention.cu
                           -DB=${CMAKE_SOURCE_DIR}/dev/cuda/flash_attention_variants.cu -DOUT=${RRFP_DEV_FA}
                           -P ${CMAKE_SOURCE_DIR}/dev/cuda/concat.cmake
                   DEPENDS ${CMAKE_SOURCE_DIR}/engine/cuda/flash_attention.cu
                           ${CMAKE_SOURCE_DIR}/dev/cuda/flash_attention_variants.cu ${CMAKE_SOURCE_DIR}/dev/cuda/concat.cmake
                   VERBATIM)

# ---- the CPU emulation (tests/support/support.cmake's rrfp_cuda_emu with the dev translation unit) ----------------------
set(RRFP_DEV_EMU_CPP ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/flash_attention_dev.cpp)
add_custom_command(OUTPUT ${RRFP_DEV_EMU_CPP}
                   COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu/gen.py ${RRFP_DEV_FA} ${RRFP_DEV_EMU_CPP}
                   DEPENDS ${RRFP_DEV_FA} ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu/gen.py VERBATIM)
set_source_files_properties(${RRFP_DEV_EMU_CPP} PROPERTIES OBJECT_DEPENDS "${RRFP_CUDA_EMU_CUH_OUT}")
set(RRFP_DEV_EMU_SRC ${RRFP_CUDA_EMU_GEN})
list(REMOVE_ITEM RRFP_DEV_EMU_SRC ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/flash_attention.cpp)
add_library(rrfp_cuda_emu_dev STATIC tests/support/cuda_emu/emu.cpp tests/support/cuda_emu/nccl_emu.cpp tests/support/cuda_emu/comm_nccl_emu.cpp
            ${RRFP_DEV_EMU_SRC} ${RRFP_DEV_EMU_CPP})
target_link_libraries(rrfp_cuda_emu_dev PUBLIC MPI::MPI_C)
target_compile_definitions(rrfp_cuda_emu_dev PRIVATE OMPI_SKIP_MPICXX=1)
target_include_directories(rrfp_cuda_emu_dev BEFORE PRIVATE ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu)
target_include_directories(rrfp_cuda_emu_dev PRIVATE ${CMAKE_SOURCE_DIR})
target_include_directories(rrfp_cuda_emu_dev SYSTEM PRIVATE ${BLAS_INC})
target_compile_features(rrfp_cuda_emu_dev PRIVATE cxx_std_17)

# The check: tests/engine/cuda/test_flash_attn.c through rrfp_dev_flash_attention, each version on the cases it changes (the
# driver fails a case when another version ran), strict emulation as the shipping flash_attn_emu
add_executable(test_flash_attn_emu_dev tests/engine/cuda/test_flash_attn.c)
target_compile_definitions(test_flash_attn_emu_dev PRIVATE RR_CUDA_EMU=1 RR_FA_DEV=1)
target_link_libraries(test_flash_attn_emu_dev PRIVATE rrfp_cuda_emu_dev rrfp_core)
target_link_options(test_flash_attn_emu_dev PRIVATE -rdynamic)
set_target_properties(test_flash_attn_emu_dev PROPERTIES LINKER_LANGUAGE CXX)
set(RRFP_DEV_EMU_ENV "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# v1 on every case, the 8-warp dk/dv blocks and dq2 on the d 128 ones, the longest-first order on the multi-tile ones
foreach(v "v1;;RRFP_FA_BWD=v1" "w8;d128;RRFP_FA_DKDV_WARPS=8" "dq_double;d128;RRFP_FA_DQ=double" "lpt;tiles;RRFP_FA_LPT=1")
  list(GET v 0 name)
  list(GET v 1 filter)
  list(GET v 2 env)
  add_test(NAME flash_attn_dev_emu_${name} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "flash_attn: ok"
           $<TARGET_FILE:test_flash_attn_emu_dev> ${filter})
  set_tests_properties(flash_attn_dev_emu_${name} PROPERTIES LABELS dev TIMEOUT 300 ENVIRONMENT "${RRFP_DEV_EMU_ENV};${env}")
endforeach()

# ---- a device (CUDA build): the backend with the dev translation unit, the check and the benchmark -----------
if(RRFP_HAVE_CUDA)
  set(RRFP_DEV_CUDA_SOURCES ${RRFP_CUDA_SOURCES})
  list(REMOVE_ITEM RRFP_DEV_CUDA_SOURCES ${CMAKE_SOURCE_DIR}/engine/cuda/flash_attention.cu)
  add_library(rrfp_cuda_dev SHARED ${RRFP_DEV_CUDA_SOURCES} ${RRFP_DEV_FA} engine/util.c engine/gemm_desc.c
              engine/gemm_lt_desc.c)
  foreach(p OUTPUT_NAME CUDA_SEPARABLE_COMPILATION CUDA_RESOLVE_DEVICE_SYMBOLS C_VISIBILITY_PRESET CUDA_VISIBILITY_PRESET
            CXX_VISIBILITY_PRESET COMPILE_DEFINITIONS COMPILE_OPTIONS INCLUDE_DIRECTORIES LINK_LIBRARIES LINK_OPTIONS)
    get_target_property(val rrfp_cuda ${p})
    if(val)
      set_target_properties(rrfp_cuda_dev PROPERTIES ${p} "${val}")
    endif()
  endforeach()
  set_target_properties(rrfp_cuda_dev PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${RRFP_DEV_DIR})
  add_executable(test_flash_attn_dev tests/engine/cuda/test_flash_attn.c)
  target_compile_definitions(test_flash_attn_dev PRIVATE RR_FA_DEV=1)
  target_link_libraries(test_flash_attn_dev PRIVATE rrfp_core ${CMAKE_DL_LIBS})
  add_dependencies(test_flash_attn_dev rrfp_cuda_dev)
  add_executable(rrfp-bench-gpu-attn-dev bench/gpu_attn_bench.c)
  target_compile_definitions(rrfp-bench-gpu-attn-dev PRIVATE RR_FA_DEV=1)
  target_link_libraries(rrfp-bench-gpu-attn-dev PRIVATE rrfp_core ${CMAKE_DL_LIBS})
  add_dependencies(rrfp-bench-gpu-attn-dev rrfp_cuda_dev)
endif()
