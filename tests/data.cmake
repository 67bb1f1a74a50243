# data.cmake — the data path (data/): demo data, JPEG decode + resize, manifests, shards, pack, loader.
add_executable(test_data tests/test_data.c)
target_link_libraries(test_data PRIVATE rrfp_core)
add_test(NAME data_roundtrip COMMAND test_data $<TARGET_FILE:rrfp-mm> ${CMAKE_CURRENT_BINARY_DIR}/data_roundtrip)
set_tests_properties(data_roundtrip PROPERTIES TIMEOUT 300)

# Our preprocessing against Pillow (Debian python3-pil) on real photographs (python3-skimage's data
# folder), greyscale and progressive JPEGs: smart_resize grids, DCT-scaled decode, resize, patches.
add_executable(data_image_tool tests/data_image_tool.c)
target_link_libraries(data_image_tool PRIVATE rrfp_core)
add_test(NAME data_pillow COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data_pillow.py $<TARGET_FILE:data_image_tool>
         ${CMAKE_CURRENT_BINARY_DIR}/data_pillow)
set_tests_properties(data_pillow PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# pack on good + every kind of bad record; loader round trip of real photographs (see the script)
add_test(NAME data_pack_errors COMMAND bash ${CMAKE_SOURCE_DIR}/tests/data_pack_errors.sh $<TARGET_FILE:rrfp-mm>
         $<TARGET_FILE:test_data> ${CMAKE_CURRENT_BINARY_DIR}/data_pack_errors)
set_tests_properties(data_pack_errors PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# PNG images (data/png.c): decoded as Pillow's convert("RGB") byte for byte (8 kinds), patches against
# Pillow's resize, damaged and oversized PNGs refused before allocating, pack names and skips them,
# training reads the PNG samples.
add_test(NAME data_png COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data_png.py $<TARGET_FILE:data_image_tool>
         $<TARGET_FILE:rrfp-mm> ${CMAKE_CURRENT_BINARY_DIR}/data_png)
set_tests_properties(data_png PROPERTIES TIMEOUT 300)

# libFuzzer targets for the shard reader, the manifest parser and the image path, built with clang by
# the script (the project builds with gcc) and run 7 s each from a seed corpus of real shards and manifests;
# skipped (77) without clang's libFuzzer runtime. RRFP_FUZZ_SECONDS changes the time per target.
set(RRFP_FUZZ_SECONDS 7 CACHE STRING "seconds per libFuzzer target in data_fuzz")
add_test(NAME data_fuzz COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fuzz/run_fuzz.sh ${CMAKE_SOURCE_DIR}
         $<TARGET_FILE:rrfp-mm> ${CMAKE_CURRENT_BINARY_DIR}/data_fuzz ${RRFP_FUZZ_SECONDS})
set_tests_properties(data_fuzz PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS fuzz)

# loader throughput program (bench/loader.sh runs it against bench/loader_pil.py)
add_executable(rrfp-bench-loader bench/bench_loader.c)
target_link_libraries(rrfp-bench-loader PRIVATE rrfp_core)
