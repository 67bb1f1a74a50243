# hostile.cmake — crafted files and arguments get a clean refusal (docs/reliability.md "What is
# checked"): config.json / index overflows, --out paths with shell syntax, checkpoints with 5..9-dim tensors,
# forged slice descriptions, state.json values, files of another step or job, NaN weights, /dev/zero and
# huge files where a JSON / INI / trace / duration / metrics file belongs. Each case: exit 1..125, the file
# and field named, no sanitizer report, nothing outside the output folder touched, no partial output.
# ~1000 checks, ~30 s (most of it the start-up of the ~30 refused `train` runs).
add_test(NAME hostile_inputs
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/hostile_inputs.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/hostile_inputs base)
set_tests_properties(hostile_inputs PROPERTIES TIMEOUT 300)
# the same for one shard: a pp 2 (and a tp 2) checkpoint folder holding one shard of a later step is refused,
# under that layout and in one process (~12 s)
add_test(NAME hostile_inputs_pp
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/hostile_inputs.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/hostile_inputs_pp pp)
set_tests_properties(hostile_inputs_pp PROPERTIES LABELS mpi TIMEOUT 300 SKIP_RETURN_CODE 77)
# Damage only a checksum or the checkpoint identity sees, refused by exit code 1 and the damaged file's path
# (not a message's wording), each beside its control (the undamaged copy works): one bit of a checkpoint
# tensor (model and optimizer files; train --resume and eval), one byte of a sample id in a shard's index
# (train), ~7 s; and a pp 2 checkpoint's two model files swapped (eval and a one-process resume), ~5 s.
add_test(NAME refusals_by_file
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/refusals_by_file.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/refusals_by_file files)
set_tests_properties(refusals_by_file PROPERTIES TIMEOUT 120)
add_test(NAME refusals_by_file_shard
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/refusals_by_file.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/refusals_by_file_shard shard)
set_tests_properties(refusals_by_file_shard PROPERTIES LABELS mpi TIMEOUT 150 SKIP_RETURN_CODE 77)
# import llava / import clip / export hf under the same rules: every vision_config / text_config number,
# vision_feature_layer, image_token_index; the index; NaN weights; 5..8-dim tensors; FIFOs and /dev/zero
# where a file belongs; --out paths with quotes and spaces, inside the input, existing or dangling (~10 s)
add_test(NAME hostile_llava
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/hostile_inputs.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/hostile_llava llava)
set_tests_properties(hostile_llava PROPERTIES TIMEOUT 300)
# the helpers underneath: rr_read_file's caps (regular files, /dev/zero, pipes), rr_remove_tree (symbolic
# links not followed, shell syntax in names), checked 64-bit arithmetic, the slice-description parser
add_executable(test_hostile_util tests/test_hostile_util.c)
target_link_libraries(test_hostile_util PRIVATE rrfp_core)
add_test(NAME hostile_util COMMAND test_hostile_util ${CMAKE_CURRENT_BINARY_DIR}/hostile_util)
