# train.cmake — safetensors, recipes, checkpoints, the single-process trainer and its end-to-end run.
add_executable(test_safetensors tests/test_safetensors.c)
target_link_libraries(test_safetensors PRIVATE rrfp_core)
add_test(NAME safetensors_selftest COMMAND test_safetensors selftest ${CMAKE_CURRENT_BINARY_DIR})
# Independent pure-Python (json + struct) reader/writer against ours, and damaged files.
add_test(NAME safetensors_python_peer
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/safetensors_peer.py $<TARGET_FILE:test_safetensors>
                 ${CMAKE_CURRENT_BINARY_DIR}/st_peer)
