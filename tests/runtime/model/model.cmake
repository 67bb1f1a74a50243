# model.cmake — the LLaVA model: finite differences, split/fused and pipeline-split equivalence, and
# golden steps checked by an independent PyTorch implementation (tests/support/ref/llava_ref.py).
add_executable(test_model tests/runtime/model/test_model.c)
target_link_libraries(test_model PRIVATE rrfp_core)
# test_model's modes, each the test model_<name> running `test_model <mode>` (name:mode where they differ):
#   fd, split_bitwise:split, pipeline_stages:stages, freeze: finite differences, split/fused and pipeline-split
#     equivalence, train.freeze;
#   *_variants: the same with the LM variants: grouped-query attention, q/k/v and o biases, tied embeddings, Llama-3 RoPE;
#   *_clip: the CLIP tower (model.vision_arch = clip) through the same checks (freeze_clip: a frozen tower's shared
#     forward scratch with CLIP's token tables and channel-major index);
#   fd_anyres*: LLaVA-NeXT's any-resolution images (docs/anyres.md): image_newline and the unpadded grid's gathers,
#     both towers;
#   forward_only*: the model eval and generate build (stage_init_forward: no gradient buffer) against stage_init's,
#     the same values: the same loss and logits bits, fp32 and bf16, with and without LoRA;
#   gpu*: on a device (label gpu, skipped without one); gpu_bf16a: runtime.precision = bf16, the LM on
#     2-byte activations against f32-word ones, one stage and two pipeline stages
#     (tests/runtime/model/test_model.c test_gpu_bf16a).
foreach(t fd fd_variants split_bitwise:split split_bitwise_variants:split_variants pipeline_stages:stages freeze fd_clip
          fd_anyres fd_anyres_clip split_bitwise_clip:split_clip pipeline_stages_clip:stages_clip freeze_clip gpu gpu_clip
          gpu_bf16a forward_only forward_only_clip)
  string(REPLACE ":" ";" t "${t}")
  list(GET t 0 name)
  list(GET t -1 mode)
  add_test(NAME model_${name} COMMAND test_model ${mode})
  if(mode MATCHES "^gpu")
    set_tests_properties(model_${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  endif()
endforeach()
# A damaged microbatch stops with exit 1 and a message naming the sample / image / position.
foreach(bad "budget|exceed the activation budget of" "image_id|5 image positions .id -1. but 6 patches"
            "target|sample 0: target 197 at position 7" "grid|image 0 has 6 patches, grid 2 x 4"
            "pos|sample 1: position 16 is 3, expected 0"
            "overlap|image 1 starts at LM position 4, inside or before image 0 at .2, 6."
            "anyres_grid|any-resolution image 0 has 3 tower images, its 1 x 1 grid needs 2"
            "anyres_model|any-resolution images, but the model is not any-resolution")
  string(REPLACE "|" ";" parts "${bad}")
  list(GET parts 0 name)
  list(GET parts 1 msg)
  add_test(NAME model_bad_${name} COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:test_model> -DARGS=bad_${name}
           -DEXPECT_RC=1 "-DEXPECT_ERR=${msg}" -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
endforeach()

add_executable(test_model_golden tests/runtime/model/test_model_golden.c)
target_link_libraries(test_model_golden PRIVATE rrfp_core)
foreach(case vit lm llava traj anyres)
  add_test(NAME model_torch_${case}
           COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py --run $<TARGET_FILE:test_model_golden>
                   ${case} ${CMAKE_CURRENT_BINARY_DIR}/model_golden_${case})
  set_tests_properties(model_torch_${case} PROPERTIES LABELS torch TIMEOUT 120)
endforeach()

# The trainer's own dumps (rrfp-mm train --set train.dump_step=N) on the synthetic recipe, checked by
# the same reference: step 1 (initial weights, init statistics too) and step 2 (after one AdamW step).
foreach(n 1 2)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/model_trainer_dump${n})
  add_test(NAME model_torch_trainer_dump${n}
           COMMAND sh -c "rm -rf '${dir}' && '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' --set train.steps=2 --set optim.warmup=1 --set train.dump_step=${n} --set train.run_dir='${dir}' > '${dir}.log' 2>&1 && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py' --check '${dir}/dump-${n}'")
  set_tests_properties(model_torch_trainer_dump${n} PROPERTIES LABELS torch TIMEOUT 120)
endforeach()
# the CLIP tower's step (model.vision_arch = clip: position embeddings interpolated to the synthetic images'
# grids, the exact-GELU projector) against the reference's ClipViT (F.interpolate's own backward)
set(dir ${CMAKE_CURRENT_BINARY_DIR}/model_trainer_dump_clip)
add_test(NAME model_torch_trainer_dump_clip
         COMMAND sh -c "rm -rf '${dir}' && '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' --set train.steps=2 --set optim.warmup=1 --set train.dump_step=1 --set train.run_dir='${dir}' --set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16 --set model.vision_feature_layer=-2 --set model.projector_act=gelu > '${dir}.log' 2>&1 && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py' --check '${dir}/dump-1'")
set_tests_properties(model_torch_trainer_dump_clip PROPERTIES LABELS torch TIMEOUT 120)
# the same checker on a pipelined step's per-stage dump (weights.ppRcC, grads.ppRcC, microbatch-m.ppRcC):
# stage 2 of a pp=2 run with the split backward, and stage 1 of an interleaved pp=2 x 2 chunks run
foreach(v 1f1b zbh1 interleaved)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/model_pp_dump_${v})
  if(v STREQUAL "interleaved")
    set(extra "--set parallel.hint=interleaved-1f1b --set parallel.chunks=2 --set model.text_layers=4 --set data.microbatches=4")
  elseif(v STREQUAL "zbh1")
    set(extra "--set parallel.hint=zb-h1")
  else()
    set(extra "")
  endif()
  add_test(NAME model_torch_pp_dump_${v}
           COMMAND sh -c "rm -rf '${dir}' && timeout 200 ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' --set parallel.pp=2 ${extra} --set train.steps=2 --set optim.warmup=1 --set train.dump_step=2 --set train.run_dir='${dir}' > '${dir}.log' 2>&1 && ls '${dir}'/dump-2/weights.pp1c0.safetensors '${dir}'/dump-2/grads.pp0c0.safetensors && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py' --check '${dir}/dump-2'")
  set_tests_properties(model_torch_pp_dump_${v} PROPERTIES LABELS "torch;mpi" TIMEOUT 240)
endforeach()
# the checker on a tensor-parallel step's per-rank dump (weights.ppRtpTcC ... with slice metadata, the
# reader reassembling the global tensors): pp 2 x tp 2 with the split backward
set(dir ${CMAKE_CURRENT_BINARY_DIR}/model_tp_dump)
add_test(NAME model_torch_tp_dump
         COMMAND sh -c "rm -rf '${dir}' && timeout 200 ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 4 -x OMP_NUM_THREADS=1 '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' --set parallel.pp=2 --set parallel.tp=2 --set parallel.hint=zb-h1 --set train.steps=2 --set optim.warmup=1 --set train.dump_step=2 --set train.run_dir='${dir}' > '${dir}.log' 2>&1 && ls '${dir}'/dump-2/weights.pp1tp1c0.safetensors '${dir}'/dump-2/grads.pp0tp1c0.safetensors && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py' --check '${dir}/dump-2'")
set_tests_properties(model_torch_tp_dump PROPERTIES LABELS "torch;mpi" TIMEOUT 240)
# ... and on a data-parallel step's dump (pp 2 x dp 2): replica 0's weights and gradients, each
# replica's microbatches as m x dp + d, so the reader sees the one-process step of dp x microbatches
set(dir ${CMAKE_CURRENT_BINARY_DIR}/model_dp_dump)
add_test(NAME model_torch_dp_dump
         COMMAND sh -c "rm -rf '${dir}' && timeout 200 ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 4 -x OMP_NUM_THREADS=1 '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' --set parallel.pp=2 --set parallel.dp=2 --set train.steps=2 --set optim.warmup=1 --set train.dump_step=2 --set train.run_dir='${dir}' > '${dir}.log' 2>&1 && ls '${dir}'/dump-2/weights.pp1c0.safetensors '${dir}'/dump-2/microbatch-3.pp1c0.safetensors && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py' --check '${dir}/dump-2'")
set_tests_properties(model_torch_dp_dump PROPERTIES LABELS "torch;mpi" TIMEOUT 240)
# model.rms_eps and model.rope_base away from their defaults (eps 0.01 dominates mean(x^2) ~ 4e-4 at
# init; theta 123): the reference takes them from the dump's config.json, the engine from the recipe.
set(dir ${CMAKE_CURRENT_BINARY_DIR}/model_trainer_dump_eps)
add_test(NAME model_torch_trainer_dump_eps
         COMMAND sh -c "rm -rf '${dir}' && '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' --set train.steps=2 --set optim.warmup=1 --set train.dump_step=1 --set model.rms_eps=0.01 --set model.rope_base=123 --set train.run_dir='${dir}' > '${dir}.log' 2>&1 && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py' --check '${dir}/dump-1'")
set_tests_properties(model_torch_trainer_dump_eps PROPERTIES LABELS torch TIMEOUT 120)
# Tensor-parallel split without MPI: each tensor's split and ownership, shard init = slice of the whole,
# vocabulary-parallel cross-entropy on in-process ranks against the unsplit op.
add_executable(test_tp tests/runtime/model/test_tp.c)
target_link_libraries(test_tp PRIVATE rrfp_core Threads::Threads)
foreach(t split marks init ce lm vit proj embed vit_clip proj_clip)
  add_test(NAME tp_${t} COMMAND test_tp ${t})
endforeach()
# The LM variants of LLaVA's successors in one step against the reference (its own GQA by repeat_interleave,
# biases as nn.Linear biases, Llama-3 frequencies as published, tied head as embed.weight^T): grouped-query
# attention (4 query heads on 2 key/value heads), q/k/v and o biases, tied embeddings, rope_type = llama3 with
# original_max_pos 512 so that the 8 frequency pairs of a 16-dim head fall in all three bands, theta 500000.
# Step 2's dump: the biases have moved from their zero init, so the forward uses them.
set(LM_VARIANT_SETS "--set model.text_heads=4 --set model.text_kv_heads=2 --set model.text_qkv_bias=true --set model.text_o_bias=true --set model.tie_embeddings=true --set model.rope_type=llama3 --set model.rope_original_max_pos=512 --set model.rope_base=500000")
set(dir ${CMAKE_CURRENT_BINARY_DIR}/model_trainer_dump_lm_variants)
add_test(NAME model_torch_trainer_dump_lm_variants
         COMMAND sh -c "rm -rf '${dir}' && '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' --set train.steps=2 --set optim.warmup=1 --set train.dump_step=2 ${LM_VARIANT_SETS} --set train.run_dir='${dir}' > '${dir}.log' 2>&1 && grep -Eq '\"Hkv\":[[:space:]]*2,' '${dir}/dump-2/config.json' && grep -Eq '\"tie_embeddings\":[[:space:]]*1,' '${dir}/dump-2/config.json' && grep -Eq '\"rope_type\":[[:space:]]*\"llama3\"' '${dir}/dump-2/config.json' && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py' --check '${dir}/dump-2'")
set_tests_properties(model_torch_trainer_dump_lm_variants PROPERTIES LABELS torch TIMEOUT 120)
# The CLIP tower and the LM variants in one model, step 2's dump against the reference (both published-model
# variants together: CLIP features into a GQA / biased / tied / llama3-RoPE LM)
set(dir ${CMAKE_CURRENT_BINARY_DIR}/model_trainer_dump_clip_lm_variants)
add_test(NAME model_torch_trainer_dump_clip_lm_variants
         COMMAND sh -c "rm -rf '${dir}' && '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' --set train.steps=2 --set optim.warmup=1 --set train.dump_step=2 ${LM_VARIANT_SETS} --set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16 --set model.vision_feature_layer=-2 --set model.projector_act=gelu --set train.run_dir='${dir}' > '${dir}.log' 2>&1 && grep -Eq '\"Hkv\":[[:space:]]*2,' '${dir}/dump-2/config.json' && grep -Eq '\"vision_arch\":[[:space:]]*\"clip\"' '${dir}/dump-2/config.json' && grep -Eq '\"tie_embeddings\":[[:space:]]*1,' '${dir}/dump-2/config.json' && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py' --check '${dir}/dump-2'")
set_tests_properties(model_torch_trainer_dump_clip_lm_variants PROPERTIES LABELS torch TIMEOUT 120)

# The model's own gpu test (test_model.c gpu, gpu_clip, gpu_bf16a) on the emulated CUDA backend: a
# 3-microbatch LLaVA step, CUDA vs CPU and CUDA split vs fused.
rrfp_emu_executable(test_model_emu tests/runtime/model/test_model.c)
target_compile_definitions(test_model_emu PRIVATE backend_cuda_get=backend_cuda_emu_get)
add_test(NAME model_gpu_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "gpu: [0-9]+ tensors" $<TARGET_FILE:test_model_emu> gpu)
set_tests_properties(model_gpu_emu PROPERTIES TIMEOUT 300
                     ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")
# runtime.precision = bf16: the LM and the tower on 2-byte activations against f32-word ones, bitwise;
# one thread order (the ops' two-order checks are cuda_bf16a_emu's), to stay quick
add_test(NAME model_gpu_emu_bf16a COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "gpu_bf16a: [0-9]+ \\+ [0-9]+ tensors" $<TARGET_FILE:test_model_emu> gpu_bf16a)
set_tests_properties(model_gpu_emu_bf16a PROPERTIES TIMEOUT 300 ENVIRONMENT "RR_EMU_GUARD=negzero")
add_test(NAME model_gpu_emu_bf16a_clip COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "gpu_bf16a: [0-9]+ \\+ [0-9]+ tensors" $<TARGET_FILE:test_model_emu> gpu_bf16a_clip)
set_tests_properties(model_gpu_emu_bf16a_clip PROPERTIES TIMEOUT 300 ENVIRONMENT "RR_EMU_GUARD=negzero")
# the same with the CLIP tower and the exact-GELU projector (clip_ops.cu)
add_test(NAME model_gpu_emu_clip COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "gpu: [0-9]+ tensors" $<TARGET_FILE:test_model_emu> gpu_clip)
set_tests_properties(model_gpu_emu_clip PROPERTIES TIMEOUT 300
                     ENVIRONMENT "RR_EMU_GUARD=negzero;RR_EMU_ORDERS=2")

# layer partitioning: partition, the balanced split against brute force, the split parser's errors; partition_tower,
# the tower's blocks over stages (partition_auto_tower) against brute force, when it splits, the 7B models' outcome
foreach(t partition partition_tower)
  add_executable(test_${t} tests/runtime/model/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE rrfp_core)
  add_test(NAME ${t} COMMAND test_${t})
endforeach()

# LoRA (text/lm_lora.c) against an independent PyTorch reference (tests/support/ref/lora_ref.py, PEFT's math written
# out): step 1 (PEFT's init, B = 0) and step 2 (trained factors) with dropout 0.25 (its mask from the specification)
foreach(n 1 2)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/lora_torch_step${n})
  add_test(NAME lora_torch_step${n}
           COMMAND sh -c "rm -rf '${dir}' && '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' --set train.steps=2 --set optim.warmup=1 --set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set train.dump_step=${n} --set train.run_dir='${dir}' > '${dir}.log' 2>&1 && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/lora_ref.py' --check '${dir}/dump-${n}'")
  set_tests_properties(lora_torch_step${n} PROPERTIES LABELS torch)
endforeach()
# the same under the parallel layouts (each rank's dump shards reassembled by the reference): pp 2 x tp 2 (A split
# like a row-parallel base, B like a column-parallel one, the all-reduces of text/lm_lora.c) and pp 2 x dp 2 (the
# dropout keys by the microbatch's global index); and LoRA on the CLIP tower too (vision/vit_lora.c: q, k, v in their
# columns of attn.qkv, out, fc1, fc2; its base frozen) beside LM adapters, one process and tp 2 (the tower's split
# adapters and all-reduces). Each entry: name, ranks, its --set arguments; every one step 2 with dropout 0.25.
set(RRFP_LORA_SETS "--set train.steps=2 --set optim.warmup=1 --set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set train.dump_step=2")
set(RRFP_LORA_TOWER_SETS "--set model.vision_arch=clip --set model.vision_image_size=16 --set model.vision_feature_layer=-1 --set model.projector_act=gelu --set train.freeze=vision --set lora.targets=q,v,down,vision.all")
foreach(layout "pp2tp2;4;--set parallel.pp=2 --set parallel.tp=2" "pp2dp2;4;--set parallel.pp=2 --set parallel.dp=2"
               "tower;1;${RRFP_LORA_TOWER_SETS}" "tower_tp2;2;${RRFP_LORA_TOWER_SETS} --set parallel.tp=2")
  list(GET layout 0 name)
  list(GET layout 1 np)
  list(GET layout 2 sets)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/lora_torch_${name})
  add_test(NAME lora_torch_${name}
           COMMAND sh -c "rm -rf '${dir}' && timeout 200 ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np ${np} -x OMP_NUM_THREADS=1 '$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' ${sets} ${RRFP_LORA_SETS} --set train.run_dir='${dir}' > '${dir}.log' 2>&1 && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/lora_ref.py' --check '${dir}/dump-2'")
  set_tests_properties(lora_torch_${name} PROPERTIES LABELS "torch;mpi" TIMEOUT 240)
endforeach()
# any-resolution images on the CUDA backend's source compiled for the emulation, against the same PyTorch reference
rrfp_emu_executable(test_model_golden_emu tests/runtime/model/test_model_golden.c)
target_compile_definitions(test_model_golden_emu PRIVATE backend_cuda_get=backend_cuda_emu_get)
add_test(NAME model_torch_anyres_emu
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/support/ref/llava_ref.py --run $<TARGET_FILE:test_model_golden_emu>
                 anyres_gpu ${CMAKE_CURRENT_BINARY_DIR}/model_golden_anyres_emu)
set_tests_properties(model_torch_anyres_emu PROPERTIES LABELS torch TIMEOUT 300)
# QLoRA (lora.quant = nf4, text/lm_qlora.c) against an independent PyTorch reference of bitsandbytes' NF4
# (tests/support/ref/qlora_ref.py): the run starts from a full-precision checkpoint (train.init_from), the reference
# quantises its weights as quantize_4bit does and compares every code, dequantises the dumped NF4 form bit for bit
# as the engine does and checks the step 2 loss and adapter gradients with PEFT's LoRA on top; one process, pp 2 x
# dp 2, tp 2 (each rank's NF4 slice cut from the whole weight's quantisation: a model 128 wide with a 256 MLP, so
# every row-parallel slice is whole blocks of 64) and dp 2 under the distributed optimizer (the NF4 base frozen,
# the adapters sharded). Each entry: name, ranks, layout, model, a line the run's log must hold (the layout ran).
foreach(layout "step;1;;;layout pp 1 x tp 1 x dp 1" "pp2dp2;4;--set parallel.pp=2 --set parallel.dp=2;;layout pp 2 x tp 1 x dp 2"
               "tp2;2;--set parallel.tp=2;--set model.text_width=128 --set model.ffn_hidden=256;layout pp 1 x tp 2 x dp 1"
               "dp2zero;2;--set parallel.dp=2 --set parallel.zero=1;;distributed optimizer: 2 replicas")
  list(GET layout 0 name)
  list(GET layout 1 np)
  list(GET layout 2 sets)
  list(GET layout 3 model)
  list(GET layout 4 ran)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/qlora_torch_${name})
  set(run "'$<TARGET_FILE:rrfp-mm>' train '${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini' ${model}")
  set(q "--set train.steps=2 --set optim.warmup=1 --set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set lora.quant=nf4 --set train.dump_step=2 --set train.init_from='${dir}/base/checkpoints/step-00000001'")
  if(np EQUAL 1)
    set(qrun "${run} ${q}")
  else()
    set(qrun "timeout 200 ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np ${np} -x OMP_NUM_THREADS=1 ${run} ${sets} ${q}")
  endif()
  add_test(NAME qlora_torch_${name}
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && ${run} --set train.steps=1 --set optim.warmup=1 --set train.run_dir='${dir}/base' > '${dir}/base.log' 2>&1 && ${qrun} --set train.run_dir='${dir}/q' > '${dir}/q.log' 2>&1 && grep -q '${ran}' '${dir}/q.log' && '${RRFP_PYTHON}' '${CMAKE_SOURCE_DIR}/tests/support/ref/qlora_ref.py' --check '${dir}/q/dump-2' --source '${dir}/base/checkpoints/step-00000001/model.safetensors'")
  set_tests_properties(qlora_torch_${name} PROPERTIES LABELS torch TIMEOUT 200)
endforeach()
set_tests_properties(qlora_torch_pp2dp2 qlora_torch_tp2 qlora_torch_dp2zero PROPERTIES LABELS "torch;mpi")
# The tower over pipeline stages (tests/runtime/model/test_tower_stages.c): tower-only stages chained in one process,
# bitwise against one stage (any-resolution RoPE tower; LLaVA-1.5's CLIP with feature layer -2)
add_executable(test_tower_stages tests/runtime/model/test_tower_stages.c)
target_link_libraries(test_tower_stages PRIVATE rrfp_core)
add_test(NAME model_tower_stages_anyres COMMAND test_tower_stages anyres)
add_test(NAME model_tower_stages_clip COMMAND test_tower_stages clip)
# the same on the emulated CUDA runtime, f32 and bf16 with 2-byte activations
add_executable(test_tower_stages_emu tests/runtime/model/test_tower_stages.c)
target_compile_definitions(test_tower_stages_emu PRIVATE backend_cuda_get=backend_cuda_emu_get RR_CUDA_EMU=1)
target_link_libraries(test_tower_stages_emu PRIVATE rrfp_cuda_emu rrfp_core)
set_target_properties(test_tower_stages_emu PROPERTIES LINKER_LANGUAGE CXX)
add_test(NAME model_tower_stages_emu_clip COMMAND test_tower_stages_emu clip gpu)
add_test(NAME model_tower_stages_emu_bf16_anyres COMMAND test_tower_stages_emu anyres gpu_bf16)
set_tests_properties(model_tower_stages_emu_clip model_tower_stages_emu_bf16_anyres PROPERTIES TIMEOUT 300)
