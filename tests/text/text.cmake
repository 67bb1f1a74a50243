# tokenizer.cmake — byte-level BPE tokenizer (text/tokenizer.c, text/bpe_train.c) and its commands.
add_executable(test_tokenizer tests/test_tokenizer.c)
target_link_libraries(test_tokenizer PRIVATE rrfp_core)
add_test(NAME tokenizer_unit COMMAND test_tokenizer --corpus ${CMAKE_SOURCE_DIR}/tests/data/tokenizer_corpus.txt)

add_test(NAME tokenizer_cli_missing_file COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=tokenizer encode --tokenizer /nonexistent/tok.json --text hi"
         -DEXPECT_RC=1 "-DEXPECT_ERR=/nonexistent/tok.json: cannot read the tokenizer"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
add_test(NAME tokenizer_cli_usage COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm> -DARGS=tokenizer
         -DEXPECT_RC=2 -DEXPECT_ERR=usage -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)

# Same ids as Hugging Face's own implementation (the Rust library through its Node bindings) on
# GPT-2's real vocabulary and on a tokenizer trained here; exit 77 (skipped) without node/npm or
# when the npm registry cannot be reached to install it.
add_test(NAME tokenizer_peer_hf COMMAND bash ${CMAKE_SOURCE_DIR}/tests/tokenizer_peer.sh
         $<TARGET_FILE:rrfp-mm> $<TARGET_FILE:test_tokenizer> ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_peer)
# tests/node's packages are installed by whichever node test runs first (npm ci): one at a time
set_tests_properties(tokenizer_peer_hf PROPERTIES SKIP_RETURN_CODE 77 LABELS node TIMEOUT 300 RESOURCE_LOCK tests_node)

add_test(NAME tokenizer_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/tokenizer_cli.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_cli)

# libFuzzer (configure with CC=clang -DRRFP_FUZZ=ON): the tokenizer sources are compiled into the
# target with coverage and ASan/UBSan; ctest runs it for 20 s from the seeds in tests/data.
if(RRFP_FUZZ)
  add_executable(fuzz_tokenizer tests/fuzz_tokenizer.c text/tokenizer.c text/tokenizer_encode.c engine/util.c)
  target_include_directories(fuzz_tokenizer PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_options(fuzz_tokenizer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_tokenizer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_tokenizer PRIVATE PkgConfig::CJSON PkgConfig::PCRE2 Threads::Threads m)
  add_test(NAME tokenizer_fuzz COMMAND bash -c "mkdir -p fuzz_tokenizer_corpus && $<TARGET_FILE:fuzz_tokenizer> -max_total_time=20 -max_len=8192 fuzz_tokenizer_corpus ${CMAKE_SOURCE_DIR}/tests/data/fuzz_tokenizer")
  set_tests_properties(tokenizer_fuzz PROPERTIES LABELS fuzz TIMEOUT 120)
endif()
