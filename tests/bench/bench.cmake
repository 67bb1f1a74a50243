# bench/gpu_train.sh: the samples of packed shards as JSON lines for its transformers side (bench/train_samples.c)
add_executable(rrfp-bench-samples bench/train_samples.c)
target_link_libraries(rrfp-bench-samples PRIVATE rrfp_core)
# bench/gpu_train.sh's dry mode (GPU_TRAIN_TINY=1; no device: the CPU backend, transformers' side saying why it did
# not run): data, tokenizer, pack, recipes, metric parsing and the table at tiny shapes, after its CPU-side checks
# (each config's model-FLOP formula against the cuBLAS FLOPs rrfp-mm-emu counted; rrfp-mm's step shape against the
# shape gpu_train_hf.py batches from the same samples)
add_test(NAME bench_gpu_train_tiny
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0
                 "\\(a\\)[^|]*counted [0-9]+: ok.*\\(b\\)[^|]*counted [0-9]+: ok.*\\(c\\)[^|]*counted [0-9]+: ok.*one step of every sample[^|]*: ok.*\\| \\(c\\) LLaVA-1.5-7B stage 2 LoRA \\| rrfp-mm \\| [0-9.]+ \\|"
                 ${CMAKE_SOURCE_DIR}/bench/gpu_train.sh ${CMAKE_BINARY_DIR})
set_tests_properties(bench_gpu_train_tiny PROPERTIES LABELS torch TIMEOUT 300
                     ENVIRONMENT "GPU_TRAIN_TINY=1;PY=${RRFP_PYTHON}")
