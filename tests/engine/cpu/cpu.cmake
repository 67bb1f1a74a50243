# cpu.cmake — the CPU backend's ops (engine/cpu/): every op against a double reference and finite
# differences, the bf16 table against the f32 one, packed variable-length attention (a 4096-token sample
# with bounded memory), attention_decode against a KV cache; and the attention bench program.
add_executable(test_ops_fd tests/engine/cpu/test_ops_fd.c)
target_link_libraries(test_ops_fd PRIVATE rrfp_core)
add_test(NAME engine_ops_fd COMMAND test_ops_fd)
# runtime.precision = bf16: every op of backend_cpu_bf16 against the f32 op within a bf16 round-off
# bound derived per element (tests/engine/cpu/test_ops_bf16.c), rounding points present, operands rounded
add_executable(test_ops_bf16 tests/engine/cpu/test_ops_bf16.c)
target_link_libraries(test_ops_bf16 PRIVATE rrfp_core)
add_test(NAME engine_ops_bf16 COMMAND test_ops_bf16)

add_executable(test_attention tests/engine/cpu/test_attention.c)
target_link_libraries(test_attention PRIVATE rrfp_core)
add_test(NAME attention_table COMMAND test_attention table)
add_test(NAME attention_long4096 COMMAND test_attention long)

# BackendOps.attention_decode (generation's attention against a KV cache) on the CPU: against a double
# reference (multi-head and grouped-query, 1 and 3 new queries, padded strides) and against
# attention_forward's last rows (tests/engine/cpu/test_attention_decode.c).
add_executable(test_attention_decode tests/engine/cpu/test_attention_decode.c)
target_link_libraries(test_attention_decode PRIVATE rrfp_core)
add_test(NAME attention_decode COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "attention_decode: ok" $<TARGET_FILE:test_attention_decode>)


# bench/attention.sh: the attention bench against the materialising baseline and PyTorch.
add_executable(rrfp-bench-attn bench/attn_bench.c)
target_link_libraries(rrfp-bench-attn PRIVATE rrfp_core)

# The attention tiles' softmax loops (a polynomial exp with a clamp) need the vectoriser's
# if-conversion, which -O2's "very cheap" cost model refuses; -O3 lets it (engine/cpu/attention.c).
set_source_files_properties(engine/cpu/attention.c PROPERTIES COMPILE_OPTIONS "-O3")
