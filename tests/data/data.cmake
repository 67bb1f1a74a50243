# data.cmake — the data path (data/): demo data, JPEG decode + resize, manifests, shards, pack, loader.
add_executable(test_data tests/data/test_data.c)
target_link_libraries(test_data PRIVATE rrfp_core)
add_test(NAME data_roundtrip COMMAND test_data $<TARGET_FILE:rrfp-mm> ${CMAKE_CURRENT_BINARY_DIR}/data_roundtrip)
set_tests_properties(data_roundtrip PROPERTIES TIMEOUT 300)
# How good the packer is: ffd and balanced on hand-worked windows (exact bins, balanced's costliest bin no
# costlier than ffd's) and on the calibrated generator's 7B steps
add_executable(test_packing tests/data/test_packing.c)
target_link_libraries(test_packing PRIVATE rrfp_core)
add_test(NAME data_packing_quality COMMAND test_packing)
# The manifest's line cap: a file of more lines than line numbers (ints) can count is refused before parsing, naming
# it; exactly the cap parses whole (JSONL, a JSON array, blank lines, a byte-order mark), under small caps
add_executable(test_manifest tests/data/test_manifest.c)
target_link_libraries(test_manifest PRIVATE rrfp_core)
add_test(NAME data_manifest_lines COMMAND test_manifest)

# Our preprocessing against Pillow (Debian python3-pil) on real photographs (python3-skimage's data
# folder), greyscale and progressive JPEGs: smart_resize grids, DCT-scaled decode, resize, patches.
add_executable(data_image_tool tests/data/data_image_tool.c)
target_link_libraries(data_image_tool PRIVATE rrfp_core)
add_test(NAME data_pillow COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/data_pillow.py $<TARGET_FILE:data_image_tool>
         ${CMAKE_CURRENT_BINARY_DIR}/data_pillow)
set_tests_properties(data_pillow PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
add_test(NAME data_llava_pillow COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/data_llava_pillow.py $<TARGET_FILE:data_image_tool>
         ${CMAKE_CURRENT_BINARY_DIR}/data_llava_pillow)
set_tests_properties(data_llava_pillow PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# pack on good + every kind of bad record; loader round trip of real photographs (see the script)
add_test(NAME data_pack_errors COMMAND bash ${CMAKE_SOURCE_DIR}/tests/data/data_pack_errors.sh $<TARGET_FILE:rrfp-mm>
         $<TARGET_FILE:test_data> ${CMAKE_CURRENT_BINARY_DIR}/data_pack_errors)
set_tests_properties(data_pack_errors PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# pack --workers N: the same shards byte for byte and the same messages for N = 1, 2, 3, 7 (rejected, text-only and
# multi-image records over several shards), --strict's first failure and the reject-fraction stop in manifest order,
# the default from the CPUs, SIGTERM / SIGINT leave no shard and no *.rrs.tmp
add_test(NAME data_pack_workers COMMAND bash ${CMAKE_SOURCE_DIR}/tests/data/pack_workers.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_CURRENT_BINARY_DIR}/data_pack_workers)
set_tests_properties(data_pack_workers PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# PNG images (data/png.c): decoded as Pillow's convert("RGB") byte for byte (8 kinds), patches against
# Pillow's resize, damaged and oversized PNGs refused before allocating, pack names and skips them,
# training reads the PNG samples.
add_test(NAME data_png COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/data_png.py $<TARGET_FILE:data_image_tool>
         $<TARGET_FILE:rrfp-mm> ${CMAKE_CURRENT_BINARY_DIR}/data_png)
set_tests_properties(data_png PROPERTIES TIMEOUT 300)

# loader throughput program (bench/loader.sh runs it against bench/loader_pil.py)
add_executable(rrfp-bench-loader bench/bench_loader.c)
target_link_libraries(rrfp-bench-loader PRIVATE rrfp_core)
# pack --image-preprocess llava -> version 2 shards -> the loader's LLaVA pixels -> a CLIP model trains;
# refusals name model.patch / data.min_patches
add_test(NAME pack_llava
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pack llava: ok" ${CMAKE_SOURCE_DIR}/tests/data/pack_llava.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/pack_llava)
set_tests_properties(pack_llava PROPERTIES TIMEOUT 300)
# LLaVA's chat templates (data/template.h) against the prompts LLaVA's conversation.py / train.py build
# (tests/support/fixtures/chat_templates_expected.json, written by tests/data/chat_templates_ref.py), their supervised
# pieces, and segment-wise tokenization equal to the whole text's with a SentencePiece-style tokenizer
add_executable(test_templates tests/data/test_templates.c)
target_link_libraries(test_templates PRIVATE rrfp_core)
add_test(NAME data_chat_templates COMMAND test_templates ${CMAKE_SOURCE_DIR}/tests/support/fixtures/chat_templates_expected.json)
# `rrfp-mm pack --template` end to end: every template packs (plain: one-exchange image records only, the
# others rejected with the reason), refusals before anything is written, two steps on vicuna_v1 shards
add_test(NAME data_pack_templates COMMAND bash ${CMAKE_SOURCE_DIR}/tests/data/pack_templates.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/pack_templates)
set_tests_properties(data_pack_templates PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
# LLaVA-NeXT's any-resolution layout (data/anyres.c: best resolution, tile grid, resize / paste, unpadded
# features, position count, feature order) against an independent reference of transformers' rules
add_test(NAME data_anyres_ref COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/anyres_ref.py $<TARGET_FILE:data_image_tool>)
set_tests_properties(data_anyres_ref PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# any-resolution pixels (data/image_anyres.c) against LlavaNextImageProcessor's rules in Pillow / numpy on
# real photographs and portrait / wide / tiny / large / greyscale shapes: RGB8 tiles byte for byte, patches
add_test(NAME data_anyres_pillow COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/data_anyres_pillow.py
         $<TARGET_FILE:data_image_tool> ${CMAKE_CURRENT_BINARY_DIR}/data_anyres_pillow)
set_tests_properties(data_anyres_pillow PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# pack --image-preprocess anyres on photographs -> version 3 shards -> the loader's any-resolution microbatches
# (checked and trained by a model.anyres model) against the reference's grid, positions and Pillow patches
add_executable(test_anyres_loader tests/data/test_anyres_loader.c)
target_link_libraries(test_anyres_loader PRIVATE rrfp_core)
add_test(NAME pack_anyres COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/pack_anyres.py $<TARGET_FILE:rrfp-mm>
         $<TARGET_FILE:test_anyres_loader> ${CMAKE_CURRENT_BINARY_DIR}/pack_anyres)
set_tests_properties(pack_anyres PROPERTIES LABELS torch TIMEOUT 300 SKIP_RETURN_CODE 77)
# CMYK / YCCK JPEGs and GIFs (data/image.c, data/gif.c) against Pillow's convert("RGB") byte for byte, at every DCT
# scale for the JPEGs; then pack (smart and llava) -> shards -> the loader's patches (tests/data/test_image_loader.c)
# equal to those of PNG twins holding Pillow's bytes; damaged GIFs and a cut CMYK JPEG refused and named by pack
add_executable(test_image_loader tests/data/test_image_loader.c)
target_link_libraries(test_image_loader PRIVATE rrfp_core)
add_test(NAME data_cmyk_gif COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/data/data_cmyk_gif.py $<TARGET_FILE:data_image_tool>
         $<TARGET_FILE:test_image_loader> $<TARGET_FILE:rrfp-mm> ${CMAKE_CURRENT_BINARY_DIR}/data_cmyk_gif)
set_tests_properties(data_cmyk_gif PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
