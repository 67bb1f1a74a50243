# cli.cmake — the executable's command-line contract (runtime/cli/): help, usage errors, `tensors diff`,
# and what every command does with hostile or silently-wrong input.
add_test(NAME cli_help COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "commands:.*version" $<TARGET_FILE:rrfp-mm> --help)

add_test(NAME cli_unknown_command COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm> -DARGS=frobnicate
         -DEXPECT_RC=2 -DEXPECT_ERR=unknown\ command -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
add_test(NAME cli_version COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "blas: (blis|openblas)" $<TARGET_FILE:rrfp-mm> version)

# --help on every command and sub-command (exit 0, usage on stdout); unknown options exit 2 naming them
add_test(NAME cli_contract COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runtime/cli/cli_contract.sh $<TARGET_FILE:rrfp-mm>)
# the common first mistakes (a misspelled command, option or recipe key, an option without its value, a recipe path
# or --resume folder that is not one) get a message that says what to do: the name meant, the value, the folder (~1 s CPU)
add_test(NAME cli_first_mistakes COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runtime/cli/cli_first_mistakes.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/cli_first_mistakes)
# `rrfp-mm tensors diff` on files written by an independent Python writer
add_test(NAME tensors_diff COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "tensors diff: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/cli/test_tensors_diff.sh $<TARGET_FILE:rrfp-mm>)

# Crafted files and arguments get a clean refusal (docs/reliability.md "What is
# checked"): config.json / index overflows, --out paths with shell syntax, checkpoints with 5..9-dim tensors,
# forged slice descriptions, state.json values, files of another step or job, NaN weights, /dev/zero and
# huge files where a JSON / INI / trace / duration / metrics file belongs. Each case: exit 1..125, the file
# and field named, no sanitizer report, nothing outside the output folder touched, no partial output.
# ~1000 checks, ~30 s (most of it the start-up of the ~30 refused `train` runs).
rrfp_cli_py_test(hostile_inputs tests/runtime/cli/hostile_inputs.py base)
# Paths that are not the file they should be, for every input of every command (a directory, a FIFO with no
# writer, /dev/zero, /dev/urandom, a link loop, an empty file, a missing path), files cut at every section,
# size fields of 2^63-1 / -1 / 1e999, JSON with something after it, duration files of another generator
# (docs/scheduler.md "The simulator's semantics"), and outputs that are inputs, devices or fail half-way
# (RLIMIT_FSIZE). ~1100 checks, ~20 s (3 s of CPU); a hang (a FIFO opened blocking) is killed after 30 s and fails.
rrfp_cli_py_test(hostile_shapes tests/runtime/cli/hostile_shapes.py all)
set_tests_properties(hostile_shapes PROPERTIES TIMEOUT 300)
# Readers the two above do not reach, each with the crafted input that once hung, crashed or was misreported: a
# tokenizer.json of 100,000 added tokens (a quadratic load), import lora onto a base too small for the model (the
# message said 0 parameters), report of steps or losses too close for their magnitude (a tick loop that never
# ended) and of an empty zero-shot.jsonl. Each command under a timeout. ~1 s of CPU.
rrfp_cli_py_test(hostile_readers tests/runtime/cli/hostile_readers.py all)
set_tests_properties(hostile_readers PROPERTIES TIMEOUT 300)
# A full disk (ENOSPC) under every command that writes, at several fill levels and with no inode left: a tmpfs in a
# private mount namespace (root; else skipped, 77). Exit 1 naming the path and the disk, no partial output or
# temporary, inputs unchanged; train: no half checkpoint, the last one resumes bit for bit once space is freed;
# pp 2: both ranks stop (docs/reliability.md "Nothing lost on write errors"). ~5 s, ~10 s, ~10 s.
rrfp_cli_py_test(disk_full_commands tests/runtime/cli/disk_full.py commands)
rrfp_cli_py_test(disk_full_train tests/runtime/cli/disk_full.py train)
rrfp_cli_py_test(disk_full_pp tests/runtime/cli/disk_full.py pp)
set_tests_properties(disk_full_commands disk_full_train disk_full_pp PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
set_tests_properties(disk_full_pp PROPERTIES LABELS mpi)
# The write failures a full disk cannot produce, under the same commands and the same checks: fsync / close failing
# (EIO), rename failing (EXDEV, EACCES, EIO), mkdir / opendir failing, a short write, from an LD_PRELOAD fault
# injector (tests/support/faultio.c) aimed at each path the command's traced run writes; train: at each write of the
# second checkpoint, its folder's rename, the checkpoints folder's fsync, the put-back of a replaced checkpoint; pp 2:
# rank 1's fsync, rank 0's rename. Not in the sanitizer build: its runtime interposes the same calls and must come
# first in the process (a preload ahead of it is refused), and the error paths these faults reach are the ENOSPC
# paths disk_full_* runs there. ~5 s, ~15 s, ~5 s on an idle machine (3, 6 and 1.4 s of CPU).
if(NOT RRFP_SANITIZE)
foreach(m commands train pp)
  add_test(NAME io_faults_${m}
           COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/runtime/cli/io_faults.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/io_faults_${m} ${m} $<TARGET_FILE:rrfp_faultio>)
  set_tests_properties(io_faults_${m} PROPERTIES TIMEOUT 300)
endforeach()
set_tests_properties(io_faults_pp PROPERTIES LABELS mpi)
endif()
set_tests_properties(hostile_inputs PROPERTIES TIMEOUT 300)
# the same for one shard: a pp 2 (and a tp 2) checkpoint folder holding one shard of a later step is refused,
# under that layout and in one process (~12 s)
rrfp_cli_py_test(hostile_inputs_pp tests/runtime/cli/hostile_inputs.py pp)
set_tests_properties(hostile_inputs_pp PROPERTIES LABELS mpi TIMEOUT 300 SKIP_RETURN_CODE 77)
# import llava / import clip / export hf under the same rules: every vision_config / text_config number,
# vision_feature_layer, image_token_index; the index; NaN weights; 5..8-dim tensors; FIFOs and /dev/zero
# where a file belongs; --out paths with quotes and spaces, inside the input, existing or dangling (~10 s)
rrfp_cli_py_test(hostile_llava tests/runtime/cli/hostile_inputs.py llava)
set_tests_properties(hostile_llava PROPERTIES TIMEOUT 300)
# arguments and files that once gave a wrong answer with exit 0, each now refused with a message (or answered right)
add_test(NAME silent_answers
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "silent answers: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/cli/silent_answers.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/silent_answers)
set_tests_properties(silent_answers PROPERTIES TIMEOUT 120)
