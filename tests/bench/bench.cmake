# bench/gpu_train.sh: the samples of packed shards as JSON lines for its transformers side (bench/train_samples.c)
add_executable(rrfp-bench-samples bench/train_samples.c)
target_link_libraries(rrfp-bench-samples PRIVATE rrfp_core)
