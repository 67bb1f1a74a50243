# support.cmake — what the tests of several folders share, included before every folder's .cmake:
# the CPU emulation of the CUDA runtime, cuBLAS(Lt) and NCCL (rrfp_cuda_emu), rrfp-mm linked against it
# (rrfp-mm-emu), and the shard tool.
#
# The CUDA backend's own source (engine/cuda/*.cu) compiled for the CPU emulation (tests/support/cuda_emu):
# kernels run as fibers, launch limits, barriers and buffer bounds are checked. Built in both builds (it
# needs no toolkit).
file(GLOB RRFP_CUDA_EMU_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/engine/cuda/*.cu)
set(RRFP_CUDA_EMU_GEN)
set(RRFP_CUDA_EMU_CPP)
foreach(cu ${RRFP_CUDA_EMU_CU})
  get_filename_component(stem ${cu} NAME_WE)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/${stem}.cpp)
  add_custom_command(OUTPUT ${out}
                     COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu
                     COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu/gen.py ${cu} ${out}
                     DEPENDS ${cu} ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu/gen.py VERBATIM)
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
                     COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu/gen.py ${cuh} ${out}
                     DEPENDS ${cuh} ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu/gen.py VERBATIM)
  list(APPEND RRFP_CUDA_EMU_GEN ${out})
endforeach()
# every generated source includes the generated headers: make sure they exist before it compiles
set(RRFP_CUDA_EMU_CUH_OUT ${RRFP_CUDA_EMU_GEN})
list(REMOVE_ITEM RRFP_CUDA_EMU_CUH_OUT ${RRFP_CUDA_EMU_CPP})
set_source_files_properties(${RRFP_CUDA_EMU_CPP} PROPERTIES OBJECT_DEPENDS "${RRFP_CUDA_EMU_CUH_OUT}")
# with NCCL emulated over MPI (nccl_emu.cpp) and runtime/comm/comm_nccl.c compiled against it
add_library(rrfp_cuda_emu STATIC tests/support/cuda_emu/emu.cpp tests/support/cuda_emu/nccl_emu.cpp tests/support/cuda_emu/comm_nccl_emu.cpp
            ${RRFP_CUDA_EMU_GEN})
target_link_libraries(rrfp_cuda_emu PUBLIC MPI::MPI_C)
target_compile_definitions(rrfp_cuda_emu PRIVATE OMPI_SKIP_MPICXX=1)
set_source_files_properties(tests/support/cuda_emu/comm_nccl_emu.cpp PROPERTIES OBJECT_DEPENDS
                            ${CMAKE_SOURCE_DIR}/runtime/comm/comm_nccl.c)
# tests/support/cuda_emu first: its cuda_runtime.h / cublas_v2.h stand in for the toolkit's
target_include_directories(rrfp_cuda_emu BEFORE PRIVATE ${CMAKE_SOURCE_DIR}/tests/support/cuda_emu)
target_include_directories(rrfp_cuda_emu PRIVATE ${CMAKE_SOURCE_DIR})
target_include_directories(rrfp_cuda_emu SYSTEM PRIVATE ${BLAS_INC})
target_compile_features(rrfp_cuda_emu PRIVATE cxx_std_17)

# rrfp-mm on the emulated CUDA backend (a tool for finding host code that touches device memory, e.g.
# `rrfp-mm-emu train recipes/test-synthetic.ini --set runtime.backend=cuda`, and the executable of the
# train_cuda_emu tests of tests/runtime/train/). The linker redirects every backend_cuda_get call to the emulation
# (tests/support/cuda_emu/wrap.c).
add_executable(rrfp-mm-emu runtime/cli/main.c tests/support/cuda_emu/wrap.c)
target_link_libraries(rrfp-mm-emu PRIVATE rrfp_cuda_emu rrfp_core)
target_link_options(rrfp-mm-emu PRIVATE -Wl,--wrap=backend_cuda_get -Wl,--wrap=comm_nccl_create
                    -Wl,--wrap=metrics_peak_rss_mb -Wl,--wrap=comm_nccl_profile -Wl,--wrap=comm_nccl_profile_take
                    -rdynamic)
set_target_properties(rrfp-mm-emu PROPERTIES LINKER_LANGUAGE CXX)

# shards written from the format for tests (an intact frame whose image does not decode; the sample of a step)
add_executable(data_shard_tool tests/support/data_shard_tool.c)
target_link_libraries(data_shard_tool PRIVATE rrfp_core)

# rrfp_emu_executable(<target> <source>...): a test program on the CPU emulation of the CUDA runtime: RR_CUDA_EMU
# defined (the program links the emulation's hooks instead of looking them up in librrfp-cuda.so), rrfp_cuda_emu
# and rrfp_core linked, symbols exported (-rdynamic: the backtrace the emulation prints at a stray host access names the
# functions), linked as C++.
function(rrfp_emu_executable target)
  add_executable(${target} ${ARGN})
  target_compile_definitions(${target} PRIVATE RR_CUDA_EMU=1)
  target_link_libraries(${target} PRIVATE rrfp_cuda_emu rrfp_core)
  target_link_options(${target} PRIVATE -rdynamic)
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
endfunction()

# rrfp_cli_py_test(<name> <script> <mode>): a Python program that drives rrfp-mm (<script>, a path under the source
# tree) run as `<script> RRFP_MM SOURCE_DIR WORKDIR MODE`, its work folder <name> in the build folder
function(rrfp_cli_py_test name script mode)
  add_test(NAME ${name}
           COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/${script} $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/${name} ${mode})
endfunction()

# The I/O fault injector of tests/runtime/cli/io_faults.py (LD_PRELOAD: fsync, close, rename, mkdir, opendir fail,
# a write comes up short; tests/support/faultio.c). A test tool, never linked into the engine; built without the
# sanitizers (it is preloaded into a process whose runtime is its own).
add_library(rrfp_faultio SHARED tests/support/faultio.c)
target_link_libraries(rrfp_faultio PRIVATE ${CMAKE_DL_LIBS})
target_compile_options(rrfp_faultio PRIVATE -fno-sanitize=all)
target_link_options(rrfp_faultio PRIVATE -fno-sanitize=all)
