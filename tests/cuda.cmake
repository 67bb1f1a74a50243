# cuda.cmake — the CUDA backend's tests. No machine here has a GPU, so the backend's logic is tested
# on the CPU in both builds: the cuBLAS layouts (test_gemm_desc) and the kernels' math
# (test_kernel_math). test_cuda_ops runs the op matrix on the GPU against the CPU backend; it is
# labelled `gpu` and exits 77 (skipped) with the reason where there is no device or no CUDA build.
add_executable(test_gemm_desc tests/test_gemm_desc.c)
target_link_libraries(test_gemm_desc PRIVATE rrfp_core)
add_test(NAME cuda_gemm_desc COMMAND test_gemm_desc)
set_tests_properties(cuda_gemm_desc PROPERTIES PASS_REGULAR_EXPRESSION "gemm_desc: ok")
add_executable(test_kernel_math tests/test_kernel_math.c)
target_link_libraries(test_kernel_math PRIVATE rrfp_core)
add_test(NAME cuda_kernel_math COMMAND test_kernel_math)
set_tests_properties(cuda_kernel_math PROPERTIES PASS_REGULAR_EXPRESSION "kernel_math: ok")
