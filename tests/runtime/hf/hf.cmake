# hf.cmake — Hugging Face import and export (`rrfp-mm import llama|llava|clip`, `rrfp-mm export hf`).
# hf_torch_test(<name> <script> <arg>...): tests/runtime/hf/<script> run by RRFP_PYTHON with <arg>... and its work
# folder <name> in the build folder; label torch, 300 s
function(hf_torch_test name script)
  add_test(NAME ${name} COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/runtime/hf/${script} ${ARGN} ${CMAKE_CURRENT_BINARY_DIR}/${name})
  set_tests_properties(${name} PROPERTIES LABELS torch TIMEOUT 300)
endfunction()

# rrfp-mm import llama: a Hugging Face Llama written by the test (2 shards, F32 / BF16 / F16, index json)
# gives the logits of an independent float64 Llama forward (tolerance in the script); GQA, tied embeddings,
# rope_scaling and biases are refused.
add_executable(test_llama_logits tests/runtime/hf/test_llama_logits.c)
target_link_libraries(test_llama_logits PRIVATE rrfp_core)
hf_torch_test(import_llama_torch import_llama.py $<TARGET_FILE:rrfp-mm> $<TARGET_FILE:test_llama_logits>)
# import llava / import clip / export hf: three namings, logits against a float64 reference, round trip,
# refusals; and the same against transformers itself where it is installed (77 = skipped)
add_executable(test_llava_logits tests/runtime/hf/test_llava_logits.c)
target_link_libraries(test_llava_logits PRIVATE rrfp_core)
hf_torch_test(import_llava_torch import_llava.py $<TARGET_FILE:rrfp-mm> $<TARGET_FILE:test_llava_logits>)
# A published LLaVA asked as it is (tests/runtime/hf/import_serve.py): import -> generate -> eval -> train.init_from ->
# export hf with a recipe of [data] keys only and no id given by hand, both namings; a recipe that disagrees on a
# model key is refused naming it (generate, eval, train.init_from, export).
hf_torch_test(import_serve_torch import_serve.py $<TARGET_FILE:rrfp-mm>)
add_test(NAME import_llava_transformers
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/runtime/hf/import_llava.py --transformers $<TARGET_FILE:rrfp-mm>
                 $<TARGET_FILE:test_llava_logits> ${CMAKE_CURRENT_BINARY_DIR}/import_llava_tf)
set_tests_properties(import_llava_transformers PROPERTIES LABELS torch TIMEOUT 300 SKIP_RETURN_CODE 77)
# the Hugging Face files around the weights: import llava keeps the folder's config, tokenizer and processor
# files; export hf gives the imported config.json back key by key (max_position_embeddings 512 stays 512) and
# writes the processor, image processor (the shards' preprocessing), tokenizer and generation configs, read
# back with Python's json against transformers' field names; one <image> id (a tokenizer listing it twice is
# refused); import llava without text_config refused
hf_torch_test(export_hf_files export_hf_files.py $<TARGET_FILE:rrfp-mm>)
# the same exports opened by Hugging Face's own libraries through Node (tests/support/node): the tokenizer.json gives
# the engine's ids in `tokenizers`, each template's chat template rendered by @huggingface/jinja is pack's
# prompt (LLaVA's conversation.py text), with and without the generation prompt; 77 = skipped without node
add_test(NAME export_hf_files_node
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/runtime/hf/export_hf_files.py --node $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_CURRENT_BINARY_DIR}/export_hf_files_node)
set_tests_properties(export_hf_files_node PROPERTIES LABELS "torch;node" TIMEOUT 300 SKIP_RETURN_CODE 77 RESOURCE_LOCK tests_node)
# export hf of a pp 2 x tp 2 checkpoint (slices reassembled), imported back: bit for bit
add_test(NAME export_hf_layout_pp2tp2
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "export hf layout: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/hf/export_hf_layout.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/export_hf_layout)
set_tests_properties(export_hf_layout_pp2tp2 PROPERTIES LABELS mpi TIMEOUT 300)
# the same with the LM variants under the CLIP tower: grouped-query attention (4 on 2), q/k/v and o biases,
# tied embeddings (the last stage's copy is in no file: the export takes stage 0's), Llama-3 RoPE
set(lm_variant_sets --set model.text_heads=4 --set model.text_kv_heads=2 --set model.text_qkv_bias=true
    --set model.text_o_bias=true --set model.tie_embeddings=true --set model.rope_type=llama3
    --set model.rope_original_max_pos=512 --set model.rope_base=500000)
add_test(NAME export_hf_layout_pp2tp2_lm_variants
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "export hf layout: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/hf/export_hf_layout.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/export_hf_layout_lm_variants
                 ${lm_variant_sets})
set_tests_properties(export_hf_layout_pp2tp2_lm_variants PROPERTIES LABELS mpi TIMEOUT 300)
# LoRA out and in (runtime/hf/lora_hf.h): the merged export against W + (alpha/r) B A in float64 and its logits against
# the unmerged checkpoint's; export hf --adapter read back by hand (PEFT's names, config, F32, values); import lora of it
# onto the imported base: the checkpoint's tensors bit for bit and the next step's loss; refusals naming the key; a
# QLoRA checkpoint's merged export against its NF4 form dequantised here (numpy) plus (alpha/r) B A (~8 s)
hf_torch_test(lora_hf lora_hf.py $<TARGET_FILE:rrfp-mm> $<TARGET_FILE:test_llava_logits> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini)
# import llava_next / export hf of an any-resolution model: image_newline and image_grid_pinpoints both ways, bit for
# bit, model.anyres printed, refusals (tests/runtime/hf/import_llava_next.py)
hf_torch_test(import_llava_next_torch import_llava_next.py $<TARGET_FILE:rrfp-mm>)
# LoRA on the CLIP tower out and in (vision/vit_lora.c, runtime/hf/lora_hf.h): the merged tower linears (q from the
# stacked qkv, out, fc1) against W + (alpha/r) B A in float64, the others bit for bit; the adapter's tower names and
# target_modules; import lora of it bit for bit with the next step's loss; two refusals
hf_torch_test(lora_tower_hf lora_tower_hf.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini)
