# data.cmake — the data path (data/): demo data, JPEG decode + resize, manifests, shards, pack, loader.
add_executable(test_data tests/test_data.c)
target_link_libraries(test_data PRIVATE rrfp_core)
add_test(NAME data_roundtrip COMMAND test_data $<TARGET_FILE:rrfp-mm> ${CMAKE_CURRENT_BINARY_DIR}/data_roundtrip)
set_tests_properties(data_roundtrip PROPERTIES TIMEOUT 300)
