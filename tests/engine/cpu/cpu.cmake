# attention.cmake — packed variable-length attention (engine/cpu/attention.c): forward and backward
# against a double reference and finite differences, a 4096-token sample with bounded memory; and
# the attention bench program (bench/attention.sh runs it).
add_executable(test_attention tests/test_attention.c)
target_link_libraries(test_attention PRIVATE rrfp_core)
add_test(NAME attention_table COMMAND test_attention table)
add_test(NAME attention_long4096 COMMAND test_attention long)

# bench/attention.sh: the attention bench against the materialising baseline and PyTorch.
add_executable(rrfp-bench-attn bench/attn_bench.c)
target_link_libraries(rrfp-bench-attn PRIVATE rrfp_core)

# The attention tiles' softmax loops (a polynomial exp with a clamp) need the vectoriser's
# if-conversion, which -O2's "very cheap" cost model refuses; -O3 lets it (engine/cpu/attention.c).
set_source_files_properties(engine/cpu/attention.c PROPERTIES COMPILE_OPTIONS "-O3")
