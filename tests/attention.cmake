# attention.cmake — packed variable-length attention (engine/cpu/attention.c): forward and backward
# against a double reference and finite differences, a 4096-token sample with bounded memory; and
# the attention bench program (bench/attention.sh runs it).
add_executable(test_attention tests/test_attention.c)
target_link_libraries(test_attention PRIVATE rrfp_core)
add_test(NAME attention_table COMMAND test_attention table)
add_test(NAME attention_long4096 COMMAND test_attention long)
