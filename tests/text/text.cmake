# text.cmake — byte-level BPE tokenizer (text/tokenizer.c, text/bpe_train.c) and its commands.
add_executable(test_tokenizer tests/text/test_tokenizer.c)
target_link_libraries(test_tokenizer PRIVATE rrfp_core)
add_test(NAME tokenizer_unit COMMAND test_tokenizer --corpus ${CMAKE_SOURCE_DIR}/tests/support/fixtures/tokenizer_corpus.txt)

add_test(NAME tokenizer_cli_missing_file COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=tokenizer encode --tokenizer /nonexistent/tok.json --text hi"
         -DEXPECT_RC=1 "-DEXPECT_ERR=/nonexistent/tok.json: cannot read the tokenizer"
         -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
add_test(NAME tokenizer_cli_usage COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm> -DARGS=tokenizer
         -DEXPECT_RC=2 -DEXPECT_ERR=usage -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)

# Same ids as Hugging Face's own implementation (the Rust library through its Node bindings) on
# GPT-2's real vocabulary and on a tokenizer trained here; exit 77 (skipped) without node/npm or
# when the npm registry cannot be reached to install it.
add_test(NAME tokenizer_peer_hf COMMAND bash ${CMAKE_SOURCE_DIR}/tests/text/tokenizer_peer.sh
         $<TARGET_FILE:rrfp-mm> $<TARGET_FILE:test_tokenizer> ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_peer)
# tests/support/node's packages are installed by whichever node test runs first (npm ci): one at a time
set_tests_properties(tokenizer_peer_hf PROPERTIES SKIP_RETURN_CODE 77 LABELS node TIMEOUT 300 RESOURCE_LOCK tests_node)

add_test(NAME tokenizer_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/text/tokenizer_cli.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_cli)

# One LoRA linear (text/lm_lora.c) on the CPU backend: forward against a double reference, the input and factor
# gradients against central finite differences, the dropout mask's statistics (tests/text/test_lm_lora.c)
add_executable(test_lm_lora tests/text/test_lm_lora.c)
target_link_libraries(test_lm_lora PRIVATE rrfp_core)
add_test(NAME lm_lora_fd COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "lm_lora: ok" $<TARGET_FILE:test_lm_lora>)
