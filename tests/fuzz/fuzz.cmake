# fuzz.cmake — the libFuzzer runs (a kind of run, not an area: each fuzzes the readers of one or more
# folders). Built with clang by their scripts or by -DRRFP_FUZZ=ON; skipped (77) without clang's libFuzzer.

# libFuzzer targets for the shard reader, the manifest parser and the image path, built with clang by
# the script (the project builds with gcc) and run 3 s each from a seed corpus of real shards and manifests;
# skipped (77) without clang's libFuzzer runtime. RRFP_FUZZ_SECONDS changes the time per target.
set(RRFP_FUZZ_SECONDS 3 CACHE STRING "seconds per libFuzzer target in data_fuzz")
add_test(NAME data_fuzz COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fuzz/run_fuzz.sh ${CMAKE_SOURCE_DIR}
         $<TARGET_FILE:rrfp-mm> ${CMAKE_CURRENT_BINARY_DIR}/data_fuzz ${RRFP_FUZZ_SECONDS})
set_tests_properties(data_fuzz PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS fuzz)

# libFuzzer targets where files come in (tests/fuzz/run_fuzz_files.sh: safetensors + slices, checkpoint
# folders, HF import, recipes + --set, duration files, traces, a run folder's report, import lora), each from its
# committed seeds for
# RRFP_FUZZ_FILES_SECONDS seconds; longer runs: docs/reliability.md. Skipped (77) without clang.
set(RRFP_FUZZ_FILES_SECONDS 2 CACHE STRING "seconds per libFuzzer target in files_fuzz")
add_test(NAME files_fuzz COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fuzz/run_fuzz_files.sh ${CMAKE_SOURCE_DIR}
         ${CMAKE_CURRENT_BINARY_DIR}/files_fuzz ${RRFP_FUZZ_FILES_SECONDS})
# fuzz_report and fuzz_lora link this build's static libraries (their own sources alone compiled for the fuzzer) and
# make their data with this build's rrfp-mm: they need them built
set_tests_properties(files_fuzz PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS fuzz
                     ENVIRONMENT "RRFP_FUZZ_BUILD=${CMAKE_BINARY_DIR};RRFP_FUZZ_BLAS=${BLAS_LIB}")

# libFuzzer (configure with CC=clang -DRRFP_FUZZ=ON): the tokenizer sources are compiled into the
# target with coverage and ASan/UBSan; ctest runs it for 20 s from the seeds in tests/support/fixtures/fuzz_tokenizer.
if(RRFP_FUZZ)
  add_executable(fuzz_tokenizer tests/fuzz/fuzz_tokenizer.c text/tokenizer.c text/tokenizer_encode.c engine/util.c)
  target_include_directories(fuzz_tokenizer PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_options(fuzz_tokenizer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_tokenizer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_tokenizer PRIVATE PkgConfig::CJSON PkgConfig::PCRE2 Threads::Threads m)
  add_test(NAME tokenizer_fuzz COMMAND bash -c "mkdir -p fuzz_tokenizer_corpus && $<TARGET_FILE:fuzz_tokenizer> -max_total_time=20 -max_len=8192 fuzz_tokenizer_corpus ${CMAKE_SOURCE_DIR}/tests/support/fixtures/fuzz_tokenizer")
  set_tests_properties(tokenizer_fuzz PROPERTIES LABELS fuzz TIMEOUT 120)
endif()
