# robustness.cmake — answers that were silently wrong, and write errors that lost data.
add_test(NAME silent_answers
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "silent answers: ok" bash ${CMAKE_SOURCE_DIR}/tests/silent_answers.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/silent_answers)
set_tests_properties(silent_answers PROPERTIES TIMEOUT 120)
# metrics.jsonl, the log and the trace: a failed write stops the run naming the file (after a checkpoint);
# a torn last metrics row is reported by resume and report. `full` mounts a tmpfs (root; else skipped).
foreach(mode metrics metrics_mpi log torn full trace)
  add_test(NAME write_errors_${mode}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "write errors ${mode}: ok" bash ${CMAKE_SOURCE_DIR}/tests/write_errors.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/write_errors_${mode} ${mode})
  set_tests_properties(write_errors_${mode} PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()
set_tests_properties(write_errors_trace write_errors_metrics_mpi PROPERTIES LABELS mpi)
# libFuzzer targets where files come in (tests/fuzz/run_fuzz_files.sh: safetensors + slices, checkpoint
# folders, HF import, recipes + --set, duration files, traces), each from its committed seeds for
# RRFP_FUZZ_FILES_SECONDS seconds; longer runs: docs/reliability.md. Skipped (77) without clang.
set(RRFP_FUZZ_FILES_SECONDS 5 CACHE STRING "seconds per libFuzzer target in files_fuzz")
add_test(NAME files_fuzz COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fuzz/run_fuzz_files.sh ${CMAKE_SOURCE_DIR}
         ${CMAKE_CURRENT_BINARY_DIR}/files_fuzz ${RRFP_FUZZ_FILES_SECONDS})
set_tests_properties(files_fuzz PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS fuzz)
# a killed rank's temporary checkpoint folder is removed while the rank lingers as a zombie
add_test(NAME stale_zombie
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "stale zombie: ok" bash ${CMAKE_SOURCE_DIR}/tests/stale_zombie.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/stale_zombie)
set_tests_properties(stale_zombie PROPERTIES TIMEOUT 120)
# Outputs never overwrite inputs (runtime/train/outguard.h): each command that writes a file refuses, before
# its work, an output that is an input, a checkpoint's or a run folder's own file, or a folder; generate
# writes each answer as it goes and --resume continues the file; --image repeated; eval counts each
# held-out sample once when one is skipped; pack names a tokenizer without <image>. Seconds each.
foreach(mode generate resume images eval report export pack tokenizer trace)
  add_test(NAME outputs_guard_${mode}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "outputs guard ${mode}: ok" bash ${CMAKE_SOURCE_DIR}/tests/outputs_guard.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/outputs_guard_${mode} ${mode})
  set_tests_properties(outputs_guard_${mode} PROPERTIES TIMEOUT 180)
endforeach()
