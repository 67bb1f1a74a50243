# train.cmake — safetensors, recipes, checkpoints, the single-process trainer and its end-to-end run.
add_executable(test_safetensors tests/test_safetensors.c)
target_link_libraries(test_safetensors PRIVATE rrfp_core)
add_test(NAME safetensors_selftest COMMAND test_safetensors selftest ${CMAKE_CURRENT_BINARY_DIR})
# Independent pure-Python (json + struct) reader/writer against ours, and damaged files.
add_test(NAME safetensors_python_peer
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/safetensors_peer.py $<TARGET_FILE:test_safetensors>
                 ${CMAKE_CURRENT_BINARY_DIR}/st_peer)

# Recipes: loading, overrides, validation with FILE:LINE / --set errors, README documents every key.
add_executable(test_recipe tests/test_recipe.c)
target_link_libraries(test_recipe PRIVATE rrfp_core)
add_test(NAME recipe_unit COMMAND test_recipe ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR})
# The CLI reports a bad key with the file:line and a bad override with --set, exit 2.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/bad_key.ini "[model]\npatch = 8\n[optim]\nlearning_rate = 1\n")
add_test(NAME recipe_cli_bad_key COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=train ${CMAKE_CURRENT_BINARY_DIR}/bad_key.ini --dry-run" -DEXPECT_RC=2
         "-DEXPECT_ERR=bad_key.ini:4: unknown key 'learning_rate' in \\[optim\\]"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
add_test(NAME recipe_cli_bad_set COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=train ${CMAKE_SOURCE_DIR}/recipes/llava.ini --set model.text_heads=3 --dry-run" -DEXPECT_RC=2
         "-DEXPECT_ERR=--set: model.text_heads = 3: model.text_width \\(256\\) is not divisible"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
# --print-recipe of every shipped recipe (with a 250-byte run_dir) loads back and prints the same.
add_test(NAME recipe_print_roundtrip COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "recipe print round trip: ok" bash ${CMAKE_SOURCE_DIR}/tests/recipe_print_roundtrip.sh
         $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/recipe_print_roundtrip)
# The full-size recipe is accepted and described without allocating (7B-class parameter count).
add_test(NAME recipe_dry_run_7b COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "total +7\\.[0-9][0-9]B.*LM layers per virtual stage: [0-9,]+.*largest rank" $<TARGET_FILE:rrfp-mm> train ${CMAKE_SOURCE_DIR}/recipes/llava-1.5-7b.ini --dry-run)

add_test(NAME checkpoint_unit COMMAND test_safetensors checkpoint ${CMAKE_CURRENT_BINARY_DIR})
# A resume continues the data where the checkpoint stopped it, through `train --resume latest` (the
# loader position of state.json): shards stopped inside a packing group, and the synthetic source; the
# resumed steps' token and target counts and losses bit for bit, the last checkpoints equal.
add_test(NAME train_resume_loader
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "resume loader: ok" bash ${CMAKE_SOURCE_DIR}/tests/resume_loader.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/train_resume_loader)
set_tests_properties(train_resume_loader PROPERTIES TIMEOUT 120)

# Single-process training end to end on generated data (seconds): the loss falls by >= 50% and the
# held-out answers beat chance (1/8) by >= 25 points; stop at half way + resume reproduces every
# step's loss bit for bit.
add_test(NAME train_synthetic_e2e
         COMMAND ${CMAKE_SOURCE_DIR}/tests/train_e2e.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_synthetic_e2e
                 60 0.5 0.25)
set_tests_properties(train_synthetic_e2e PROPERTIES TIMEOUT 300)
# The same with the CLIP tower (model.vision_arch = clip; the synthetic images' grids of 4 .. 16 patches get
# the 4 x 4 position embeddings bicubic-interpolated) and the exact-GELU projector.
add_test(NAME train_clip_e2e
         COMMAND ${CMAKE_SOURCE_DIR}/tests/train_e2e.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_clip_e2e
                 60 0.5 0.25 --set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16
                 --set model.vision_feature_layer=-2 --set model.projector_act=gelu)
set_tests_properties(train_clip_e2e PROPERTIES TIMEOUT 300)

# runtime.precision = bf16 against fp32 on the same recipe: step 1 within 1%, the loss curve in a band
# (per step 10% + 0.005, last 10 steps 5% on average), bf16 learns, bf16 resume bit for bit. The band
# is derived and measured in tests/train_bf16.sh.
add_test(NAME train_bf16_synthetic
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train bf16: ok" ${CMAKE_SOURCE_DIR}/tests/train_bf16.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_bf16_synthetic 60)
set_tests_properties(train_bf16_synthetic PROPERTIES TIMEOUT 300)
# data.synthetic_plan: the synthetic source on given sample shapes (bench/gpu_stage.sh's fair comparison)
add_test(NAME train_synthetic_plan
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "synthetic plan: ok" ${CMAKE_SOURCE_DIR}/tests/train_synthetic_plan.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_synthetic_plan)
set_tests_properties(train_synthetic_plan PROPERTIES TIMEOUT 120)

# The real data path (demo data, tokenizer, shards, loader) end to end: 16 steps of recipes/llava.ini
# (2 microbatches of 1024 tokens), the loss falls by >= 30% (seen: 6.1 -> 3.3 nats), and stopping at
# step 8 + resuming reproduces all 16 losses bit for bit. 27 s here when idle, 96 s under load.
add_test(NAME train_demo_e2e
         COMMAND ${CMAKE_SOURCE_DIR}/tests/train_demo_e2e.sh $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/train_demo_e2e 16 0.3)
set_tests_properties(train_demo_e2e PROPERTIES LABELS slow TIMEOUT 900)
# make demo's own script (scripts/demo.sh: the demo's data flags, recipes/demo.ini, eval, per-type table,
# report page) at a small size: 300 records, 6 steps. The accuracy is `make demo`'s (docs/training.md).
add_test(NAME demo_small
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "demo_small: ok" ${CMAKE_SOURCE_DIR}/tests/demo_small.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/demo_small)
set_tests_properties(demo_small PROPERTIES TIMEOUT 300)
# the dry run prints the layer split the trainer uses (one function computes it)
add_test(NAME layer_split_dry_run COMMAND bash ${CMAKE_SOURCE_DIR}/tests/layer_split.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/layer_split)
set_tests_properties(layer_split_dry_run PROPERTIES LABELS mpi TIMEOUT 300)
# a tp layout started without its ranks is refused naming what mpirun must start
add_test(NAME train_tp_refused COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=train ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini --set parallel.tp=2 --set train.run_dir=${CMAKE_CURRENT_BINARY_DIR}/tp_refused"
         -DEXPECT_RC=1 "-DEXPECT_ERR=parallel.tp = 2, parallel.dp = 1: the layout pp 1 x tp 2 x dp 1 needs 2 ranks"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)

# Start-up refusals and clean-ups (docs/reliability.md): run-folder lock, checkpoint-folder lock, memory
# check, leftovers of killed checkpoint writers, threads vs cores, the demo data hint.
foreach(mode lock ckptlock memory stale threads demo)
  add_test(NAME train_guard_${mode}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train guard ${mode}: ok" bash ${CMAKE_SOURCE_DIR}/tests/train_guard.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_guard_${mode} ${mode})
  set_tests_properties(train_guard_${mode} PROPERTIES TIMEOUT 120)
endforeach()

# Run folders never mix runs (issue 23, runtime/train/rundir.h): a fresh start into a used folder is
# refused naming what is there, train.overwrite moves it aside byte for byte, `latest` / --resume auto /
# checkpoint.keep see this run's checkpoints only, metrics.jsonl is appended on resume, a refused resume
# names the keys; the mpi variant: pp 2 decides on rank 0; a step folder without state.json is named at
# resume and kept aside, never deleted; train.overwrite never moves the working folder or the run's inputs.
# Seconds each (mpi: ~8 s).
foreach(mode reuse identity auto append mpi incomplete cwd)
  add_test(NAME train_rundir_${mode}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train rundir ${mode}: ok" bash ${CMAKE_SOURCE_DIR}/tests/train_rundir.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_rundir_${mode} ${mode})
  set_tests_properties(train_rundir_${mode} PROPERTIES TIMEOUT 300)
endforeach()
set_tests_properties(train_rundir_mpi PROPERTIES LABELS mpi)

# The fine-tuner's loop (tests/train_loop.sh): dp from the world size with no parallel.* key (stated
# on the first log line, losses = one process x 2 microbatches), train.epochs (derived steps, "epoch" in
# metrics and log), train.eval_every (training numbers bit for bit with and without it, the held-out
# loss = rrfp-mm eval's and the same under pp 2 / tp 2 / dp 2, drawn on the report), optim.schedule and
# optim.projector_lr.
foreach(mode world epochs eval optim)
  add_test(NAME train_loop_${mode}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train loop ${mode}: ok" bash ${CMAKE_SOURCE_DIR}/tests/train_loop.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/train_loop_${mode} ${mode})
  set_tests_properties(train_loop_${mode} PROPERTIES TIMEOUT 300)
endforeach()
set_tests_properties(train_loop_world train_loop_eval PROPERTIES LABELS mpi)

# BackendOps.attention_decode (generation's attention against a KV cache) on the CPU: against a double
# reference (multi-head and grouped-query, 1 and 3 new queries, padded strides) and against
# attention_forward's last rows (tests/test_attention_decode.c).
add_executable(test_attention_decode tests/test_attention_decode.c)
target_link_libraries(test_attention_decode PRIVATE rrfp_core)
add_test(NAME attention_decode COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "attention_decode: ok" $<TARGET_FILE:test_attention_decode>)

# rrfp-mm generate (tests/generate.sh): KV-cache decoding equals a full re-forward at every step (the
# greedy token never differs, logits within 1e-4), the answers file, --image/--prompt, seeded sampling,
# bad input named. The CUDA backend's kernel under emulation: generate_cuda_emu (tests/cuda.cmake).
add_test(NAME generate_kv
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "generate kv: ok" bash ${CMAKE_SOURCE_DIR}/tests/generate.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_kv kv)
set_tests_properties(generate_kv PROPERTIES TIMEOUT 300)
# the same on a grouped-query model (model.text_heads 4 over model.text_kv_heads 2): the KV cache Dkv wide
add_test(NAME generate_kv_gqa
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "generate kv_gqa: ok" bash ${CMAKE_SOURCE_DIR}/tests/generate.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_kv_gqa kv_gqa)
set_tests_properties(generate_kv_gqa PROPERTIES TIMEOUT 300)
# generate's greedy answers are right on the same records as eval's teacher-forced exact match, on a
# model that has learnt part of its data (53% / 88%); eval --predictions' record ids and texts.
add_test(NAME generate_eval
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "generate eval: ok" bash ${CMAKE_SOURCE_DIR}/tests/generate.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_eval eval)
set_tests_properties(generate_eval PROPERTIES TIMEOUT 300)
# the published-LLaVA settings (vicuna_v1, --image-preprocess llava, JPEG and PNG, a tokenizer without
# <|endoftext|>): generate decides each record as eval does and stops at </s>; a retrained tokenizer is refused
add_test(NAME generate_eval_llava
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "generate eval_llava: ok" bash ${CMAKE_SOURCE_DIR}/tests/generate.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_eval_llava eval_llava)
set_tests_properties(generate_eval_llava PROPERTIES TIMEOUT 300)

# scripts/train.sbatch (docs/training.md "Launching"): valid bash that starts with --resume auto, asks
# SLURM for SIGTERM before the limit and requeues on exit 143 (no SLURM here to run it).
add_test(NAME train_sbatch_script COMMAND bash -c "bash -n '${CMAKE_SOURCE_DIR}/scripts/train.sbatch' && grep -q -- '--resume auto' '${CMAKE_SOURCE_DIR}/scripts/train.sbatch' && grep -q '^#SBATCH --signal=TERM@' '${CMAKE_SOURCE_DIR}/scripts/train.sbatch' && grep -q 'scontrol requeue' '${CMAKE_SOURCE_DIR}/scripts/train.sbatch'")

# SIGTERM / SIGINT finish the step, checkpoint, exit 128 + signal; resuming continues bit for bit. The
# mpi variant stops both pipeline ranks at the same step end; a second signal exits at once.
foreach(mode single second mpi mpirun)
  add_test(NAME train_signal_${mode}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "train signal ${mode}: ok" bash ${CMAKE_SOURCE_DIR}/tests/train_signal.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_signal_${mode} ${mode})
  set_tests_properties(train_signal_${mode} PROPERTIES TIMEOUT 300)
endforeach()
set_tests_properties(train_signal_mpi train_signal_mpirun PROPERTIES LABELS mpi)

# eval under other packing settings than the checkpoint's (it never seeks the training loader).
add_test(NAME train_eval_packing
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "eval packing: ok" bash ${CMAKE_SOURCE_DIR}/tests/train_eval_packing.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/train_eval_packing)
set_tests_properties(train_eval_packing PROPERTIES TIMEOUT 200)

# LLaVA's workflow: recipes/llava-stage1.ini (train.freeze = vision,text) then llava-stage2.ini
# (train.freeze = vision, train.init_from = stage 1's checkpoint), one process and pp 2 (checks in the script).
add_test(NAME train_llava_stages
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "llava stages: ok" ${CMAKE_SOURCE_DIR}/tests/train_llava_stages.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/train_llava_stages)
set_tests_properties(train_llava_stages PROPERTIES LABELS mpi TIMEOUT 600)
# runtime.precision = bf16 computes with the weights train.init_from and a resume load: the compute copy of
# every tensor (frozen ones included) is the loaded master rounded, on every rank (one process, pp 2, tp 2,
# a resume under pp 2), and bf16's losses from a loaded checkpoint follow fp32's (tests/train_bf16_init_from.sh)
add_test(NAME train_bf16_init_from
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "bf16 init_from: ok" ${CMAKE_SOURCE_DIR}/tests/train_bf16_init_from.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_bf16_init_from
                 - timeout 300 ${RRFP_MPIRUN})
set_tests_properties(train_bf16_init_from PROPERTIES LABELS mpi TIMEOUT 600)
# A freeze list that names no parameter is refused before anything trains, naming the item (exit 1).
add_test(NAME train_freeze_bad_key COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=train ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini --set train.freeze=vision,txt --set train.run_dir=${CMAKE_CURRENT_BINARY_DIR}/freeze_bad"
         -DEXPECT_RC=1 "-DEXPECT_ERR=train.freeze = vision,txt: 'txt' names no parameter of this model"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
# init_from of a folder that is not a checkpoint: a clear error naming it (exit 1).
add_test(NAME train_init_from_missing COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=train ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini --set train.init_from=${CMAKE_CURRENT_BINARY_DIR}/no_such_ckpt --set train.run_dir=${CMAKE_CURRENT_BINARY_DIR}/init_from_missing"
         -DEXPECT_RC=1 "-DEXPECT_ERR=train.init_from = .*no_such_ckpt/state.json: cannot read"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)

# rrfp-mm import llama: a Hugging Face Llama written by the test (2 shards, F32 / BF16 / F16, index json)
# gives the logits of an independent float64 Llama forward (tolerance in the script); GQA, tied embeddings,
# rope_scaling and biases are refused.
add_executable(test_llama_logits tests/test_llama_logits.c)
target_link_libraries(test_llama_logits PRIVATE rrfp_core)
add_test(NAME import_llama_torch
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/import_llama.py $<TARGET_FILE:rrfp-mm>
                 $<TARGET_FILE:test_llama_logits> ${CMAKE_CURRENT_BINARY_DIR}/import_llama)
set_tests_properties(import_llama_torch PROPERTIES LABELS torch TIMEOUT 300)
# import llava / import clip / export hf: three namings, logits against a float64 reference, round trip,
# refusals; and the same against transformers itself where it is installed (77 = skipped)
add_executable(test_llava_logits tests/test_llava_logits.c)
target_link_libraries(test_llava_logits PRIVATE rrfp_core)
add_test(NAME import_llava_torch
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/import_llava.py $<TARGET_FILE:rrfp-mm>
                 $<TARGET_FILE:test_llava_logits> ${CMAKE_CURRENT_BINARY_DIR}/import_llava)
set_tests_properties(import_llava_torch PROPERTIES LABELS torch TIMEOUT 300)
# A published LLaVA asked as it is (tests/import_serve.py): import -> generate -> eval -> train.init_from ->
# export hf with a recipe of [data] keys only and no id given by hand, both namings; a recipe that disagrees on a
# model key is refused naming it (generate, eval, train.init_from, export).
add_test(NAME import_serve_torch
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/import_serve.py $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_CURRENT_BINARY_DIR}/import_serve)
set_tests_properties(import_serve_torch PROPERTIES LABELS torch TIMEOUT 300)
add_test(NAME import_llava_transformers
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/import_llava.py --transformers $<TARGET_FILE:rrfp-mm>
                 $<TARGET_FILE:test_llava_logits> ${CMAKE_CURRENT_BINARY_DIR}/import_llava_tf)
set_tests_properties(import_llava_transformers PROPERTIES LABELS torch TIMEOUT 300 SKIP_RETURN_CODE 77)
# the Hugging Face files around the weights: import llava keeps the folder's config, tokenizer and processor
# files; export hf gives the imported config.json back key by key (max_position_embeddings 512 stays 512) and
# writes the processor, image processor (the shards' preprocessing), tokenizer and generation configs, read
# back with Python's json against transformers' field names; one <image> id (a tokenizer listing it twice is
# refused); import llava without text_config refused
add_test(NAME export_hf_files
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/export_hf_files.py $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_CURRENT_BINARY_DIR}/export_hf_files)
set_tests_properties(export_hf_files PROPERTIES LABELS torch TIMEOUT 300)
# the same exports opened by Hugging Face's own libraries through Node (tests/node): the tokenizer.json gives
# the engine's ids in `tokenizers`, each template's chat template rendered by @huggingface/jinja is pack's
# prompt (LLaVA's conversation.py text), with and without the generation prompt; 77 = skipped without node
add_test(NAME export_hf_files_node
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/export_hf_files.py --node $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_CURRENT_BINARY_DIR}/export_hf_files_node)
set_tests_properties(export_hf_files_node PROPERTIES LABELS "torch;node" TIMEOUT 300 SKIP_RETURN_CODE 77 RESOURCE_LOCK tests_node)
# grouped-query attention: tensor parallelism splits by key/value head, so tp must divide model.text_kv_heads
# (refused before any rank starts, naming the key); text_kv_heads must divide text_heads
add_test(NAME train_tp_kv_heads_refused COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=train ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini --set model.text_kv_heads=1 --set parallel.tp=2 --set train.run_dir=${CMAKE_CURRENT_BINARY_DIR}/tp_kv_refused"
         -DEXPECT_RC=2 "-DEXPECT_ERR=parallel.tp = 2: model.text_kv_heads .tensor parallelism splits grouped-query attention by key/value head. .1. is not divisible by it"
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
add_test(NAME train_kv_heads_refused COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=train ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini --set model.text_kv_heads=3 --set train.run_dir=${CMAKE_CURRENT_BINARY_DIR}/kv_refused"
         -DEXPECT_RC=2 "-DEXPECT_ERR=model.text_kv_heads = 3: does not divide model.text_heads .2."
         -P ${CMAKE_SOURCE_DIR}/tests/util/expect_fail.cmake)
