# One LoRA linear of the CLIP tower (vision/vit_lora.c) on the CPU backend: forward against a double reference (q, k,
# v in their columns of qkv), the input and factor gradients against central finite differences, the dropout mask
# (tests/vision/test_vit_lora.c)
add_executable(test_vit_lora tests/vision/test_vit_lora.c)
target_link_libraries(test_vit_lora PRIVATE rrfp_core)
add_test(NAME vit_lora_fd COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "vit_lora: ok" $<TARGET_FILE:test_vit_lora>)
