# train.cmake — recipes, the trainer (runtime/train/) and `rrfp-mm train` / `eval` / `generate` end to end:
# single process, data / tensor parallel layouts, run folders, signals, write errors, and the same on the
# emulated CUDA backend.

# rrfp_train_cuda_emu_test(<name> <steps> [<layout> <n> <mpirun>...]): tests/runtime/train/train_cuda_emu.sh, the
# emulated CUDA backend's run of recipes/test-synthetic.ini against the CPU backend's, in the folder <name>
function(rrfp_train_cuda_emu_test name steps)
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train cuda emu: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_cuda_emu.sh $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/${name} ${steps} ${ARGN})
endfunction()
# rrfp_train_nccl_emu_test(<name> <steps> <pp> <dp> <microbatches>): tests/runtime/train/train_nccl_emu.sh, runtime.comm = nccl
# on the emulated CUDA runtime under mpirun against the CPU backend's one process, in the folder <name>
function(rrfp_train_nccl_emu_test name)
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/${name} ${ARGN} ${RRFP_MPIRUN})
endfunction()

# rrfp_train_refused(<name> <rc> <message regex> <arguments>): `rrfp-mm train recipes/test-synthetic.ini <arguments>`
# (in a run folder of its own) exits <rc> with the message (tests/support/util/expect_fail.cmake)
function(rrfp_train_refused name rc err args)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
           "-DARGS=train ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${args} --set train.run_dir=${CMAKE_CURRENT_BINARY_DIR}/${name}"
           -DEXPECT_RC=${rc} "-DEXPECT_ERR=${err}" -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
endfunction()

# rrfp_train_script_modes(<stem> <arg> MODES <mode>... PROPERTIES <test properties>...): the test <stem>_<mode> per
# mode: tests/runtime/train/<stem>.sh RRFP_MM <arg> WORKDIR <mode>, passing when it prints "<stem, _ as spaces> <mode>: ok"
function(rrfp_train_script_modes stem arg)
  cmake_parse_arguments(PARSE_ARGV 2 S "" "" "MODES;PROPERTIES")
  string(REPLACE "_" " " words ${stem})
  foreach(mode ${S_MODES})
    add_test(NAME ${stem}_${mode}
             COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "${words} ${mode}: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/${stem}.sh
                     $<TARGET_FILE:rrfp-mm> ${arg} ${CMAKE_CURRENT_BINARY_DIR}/${stem}_${mode} ${mode})
    set_tests_properties(${stem}_${mode} PROPERTIES ${S_PROPERTIES})
  endforeach()
endfunction()

# Recipes: loading, overrides, validation with FILE:LINE / --set errors, README documents every key.
add_executable(test_recipe tests/runtime/train/test_recipe.c)
target_link_libraries(test_recipe PRIVATE rrfp_core)
add_test(NAME recipe_unit COMMAND test_recipe ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR})
# The CLI reports a bad key with the file:line and a bad override with --set, exit 2.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/bad_key.ini "[model]\npatch = 8\n[optim]\nlearning_rate = 1\n")
add_test(NAME recipe_cli_bad_key COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=train ${CMAKE_CURRENT_BINARY_DIR}/bad_key.ini --dry-run" -DEXPECT_RC=2
         "-DEXPECT_ERR=bad_key.ini:4: unknown key 'learning_rate' in \\[optim\\]"
         -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
add_test(NAME recipe_cli_bad_set COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rrfp-mm>
         "-DARGS=train ${CMAKE_SOURCE_DIR}/recipes/llava.ini --set model.text_heads=3 --dry-run" -DEXPECT_RC=2
         "-DEXPECT_ERR=--set: model.text_heads = 3: model.text_width \\(256\\) is not divisible"
         -P ${CMAKE_SOURCE_DIR}/tests/support/util/expect_fail.cmake)
# --print-recipe of every shipped recipe (with a 250-byte run_dir) loads back and prints the same.
add_test(NAME recipe_print_roundtrip COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "recipe print round trip: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/recipe_print_roundtrip.sh
         $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/recipe_print_roundtrip)
# The full-size recipe is accepted and described without allocating (7B-class parameter count).
add_test(NAME recipe_dry_run_7b COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "total +7\\.[0-9][0-9]B.*LM layers per virtual stage: [0-9,]+.*largest rank" $<TARGET_FILE:rrfp-mm> train ${CMAKE_SOURCE_DIR}/recipes/llava-1.5-7b.ini --dry-run)
# runtime.memory_budget on the 7B recipe's dry run: a split that fits is taken, a budget nothing fits is refused
# with changes that each fit when applied, a hand-given split over it is refused (train_memory_budget.sh)
add_test(NAME train_memory_budget COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "memory budget: ok"
         bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_memory_budget.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_SOURCE_DIR}/recipes/llava-1.5-7b.ini)
# A resume continues the data where the checkpoint stopped it, through `train --resume latest` (the
# loader position of state.json): shards stopped inside a packing group, and the synthetic source; the
# resumed steps' token and target counts and losses bit for bit, the last checkpoints equal.
add_test(NAME train_resume_loader
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "resume loader: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/resume_loader.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/train_resume_loader)
set_tests_properties(train_resume_loader PROPERTIES TIMEOUT 120)

# Single-process training end to end on generated data (seconds): the loss falls by >= 50% and the
# held-out answers beat chance (1/8) by >= 25 points; stop at half way + resume reproduces every
# step's loss bit for bit.
add_test(NAME train_synthetic_e2e
         COMMAND ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_e2e.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_synthetic_e2e
                 60 0.5 0.25)
set_tests_properties(train_synthetic_e2e PROPERTIES TIMEOUT 300)
# The same with the CLIP tower (model.vision_arch = clip; the synthetic images' grids of 4 .. 16 patches get
# the 4 x 4 position embeddings bicubic-interpolated) and the exact-GELU projector.
add_test(NAME train_clip_e2e
         COMMAND ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_e2e.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_clip_e2e
                 60 0.5 0.25 --set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16
                 --set model.vision_feature_layer=-2 --set model.projector_act=gelu)
set_tests_properties(train_clip_e2e PROPERTIES TIMEOUT 300)

# runtime.precision = bf16 against fp32 on the same recipe: step 1 within 1%, the loss curve in a band
# (per step 10% + 0.005, last 10 steps 5% on average), bf16 learns, bf16 resume bit for bit. The band
# is derived and measured in tests/runtime/train/train_bf16.sh.
add_test(NAME train_bf16_synthetic
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train bf16: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_bf16.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_bf16_synthetic 60)
set_tests_properties(train_bf16_synthetic PROPERTIES TIMEOUT 300)
# data.synthetic_plan: the synthetic source on given sample shapes (bench/gpu_stage.sh's fair comparison)
add_test(NAME train_synthetic_plan
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "synthetic plan: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_synthetic_plan.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_synthetic_plan)
set_tests_properties(train_synthetic_plan PROPERTIES TIMEOUT 120)

# The real data path (demo data, tokenizer, shards, loader) end to end: 16 steps of recipes/llava.ini
# (2 microbatches of 1024 tokens), the loss falls by >= 30% (seen: 6.1 -> 3.3 nats), and stopping at
# step 8 + resuming reproduces all 16 losses bit for bit. 27 s here when idle, 96 s under load.
add_test(NAME train_demo_e2e
         COMMAND ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_demo_e2e.sh $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/train_demo_e2e 16 0.3)
# resume on packed shards with llava.ini is train_resume_loader's (RESUME=0: not run twice)
set_tests_properties(train_demo_e2e PROPERTIES LABELS slow TIMEOUT 900 ENVIRONMENT "RESUME=0")
# make demo's own script (scripts/demo.sh: the demo's data flags, recipes/demo.ini, eval, per-type table,
# report page) at a small size: 300 records, 6 steps. The accuracy is `make demo`'s (docs/training.md).
add_test(NAME demo_small
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "demo_small: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/demo_small.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/demo_small)
set_tests_properties(demo_small PROPERTIES TIMEOUT 300)
# the dry run prints the layer split the trainer uses (one function computes it)
add_test(NAME layer_split_dry_run COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/layer_split.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/layer_split)
set_tests_properties(layer_split_dry_run PROPERTIES LABELS mpi TIMEOUT 300)
# an any-resolution model's split counts its tiles, as the calibrated simulator's anyres workload (dry runs: seconds)
add_test(NAME layer_split_anyres
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "layer split anyres: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/layer_split_anyres.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR})
set_tests_properties(layer_split_anyres PROPERTIES TIMEOUT 120)
# a tp layout started without its ranks is refused naming what mpirun must start
rrfp_train_refused(train_tp_refused 1 "parallel.tp = 2, parallel.dp = 1: the layout pp 1 x tp 2 x dp 1 needs 2 ranks"
                   "--set parallel.tp=2")

# Start-up refusals and clean-ups (docs/reliability.md): run-folder lock, checkpoint-folder lock, memory
# check, leftovers of killed checkpoint writers, threads vs cores, the demo data hint.
rrfp_train_script_modes(train_guard ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini MODES lock ckptlock memory stale threads demo
                        PROPERTIES TIMEOUT 120)

# Run folders never mix runs (runtime/train/rundir.h): a fresh start into a used folder is
# refused naming what is there, train.overwrite moves it aside byte for byte, `latest` / --resume auto /
# checkpoint.keep see this run's checkpoints only, metrics.jsonl is appended on resume, a refused resume
# names the keys; the mpi variant: pp 2 decides on rank 0; a step folder without state.json is named at
# resume and kept aside, never deleted; train.overwrite never moves the working folder or the run's inputs.
# Seconds each (mpi: ~8 s).
rrfp_train_script_modes(train_rundir ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini MODES reuse identity auto append mpi incomplete cwd
                        PROPERTIES TIMEOUT 300)
set_tests_properties(train_rundir_mpi PROPERTIES LABELS mpi)

# The fine-tuner's loop (tests/runtime/train/train_loop.sh): dp from the world size with no parallel.* key (stated
# on the first log line, losses = one process x 2 microbatches), train.epochs (derived steps, "epoch" in
# metrics and log), train.eval_every (training numbers bit for bit with and without it, the held-out
# loss = rrfp-mm eval's and the same under pp 2 / tp 2 / dp 2, drawn on the report), optim.schedule and
# optim.projector_lr.
rrfp_train_script_modes(train_loop ${CMAKE_SOURCE_DIR} MODES world epochs eval optim
                        PROPERTIES TIMEOUT 300)
set_tests_properties(train_loop_world train_loop_eval PROPERTIES LABELS mpi)

# rrfp-mm generate (tests/runtime/train/generate.sh), one test per mode:
#   kv: KV-cache decoding equals a full re-forward at every step (the greedy token never differs, logits within
#       1e-4), the answers file, --image/--prompt, seeded sampling, bad input named;
#   kv_gqa: the same on a grouped-query model (model.text_heads 4 over model.text_kv_heads 2): the KV cache Dkv wide;
#   eval: generate's greedy answers are right on the same records as eval's teacher-forced exact match, on a
#       model that has learnt part of its data (53% / 88%); eval --predictions' record ids and texts;
#   eval_llava: the published-LLaVA settings (vicuna_v1, --image-preprocess llava, JPEG and PNG, a tokenizer without
#       <|endoftext|>): generate decides each record as eval does and stops at </s>; a retrained tokenizer is refused.
# The CUDA backend's kernel under emulation: generate_cuda_emu (below).
rrfp_train_script_modes(generate ${CMAKE_SOURCE_DIR} MODES kv kv_gqa eval eval_llava
                        PROPERTIES TIMEOUT 300)
# eval on an any-resolution model (model.anyres): the held-out loss is the training forward's (train.eval_every),
# the images, tiles and positions the forward laid out are the reference's (tests/data/anyres_ref.py)
add_test(NAME eval_anyres
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/runtime/train/eval_anyres.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/eval_anyres)
set_tests_properties(eval_anyres PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# scripts/train.sbatch (docs/training.md "Launching"): valid bash that starts with --resume auto, asks
# SLURM for SIGTERM before the limit and requeues on exit 143 (no SLURM here to run it).
add_test(NAME train_sbatch_script COMMAND bash -c "bash -n '${CMAKE_SOURCE_DIR}/scripts/train.sbatch' && grep -q -- '--resume auto' '${CMAKE_SOURCE_DIR}/scripts/train.sbatch' && grep -q '^#SBATCH --signal=TERM@' '${CMAKE_SOURCE_DIR}/scripts/train.sbatch' && grep -q 'scontrol requeue' '${CMAKE_SOURCE_DIR}/scripts/train.sbatch'")

# SIGTERM / SIGINT finish the step, checkpoint, exit 128 + signal; resuming continues bit for bit. The
# mpi variant stops both pipeline ranks at the same step end; a second signal exits at once.
rrfp_train_script_modes(train_signal ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini MODES single second mpi mpirun
                        PROPERTIES TIMEOUT 300)
set_tests_properties(train_signal_mpi train_signal_mpirun PROPERTIES LABELS mpi)

# eval under other packing settings than the checkpoint's (it never seeks the training loader).
# a step that waits for the loader is marked "data wait N%" in the log, with one warning naming data.workers
add_test(NAME train_data_wait COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "data wait: ok" bash
         ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_data_wait.sh $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
         ${CMAKE_CURRENT_BINARY_DIR}/train_data_wait)
add_test(NAME train_eval_packing
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "eval packing: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_eval_packing.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/train_eval_packing)
set_tests_properties(train_eval_packing PROPERTIES TIMEOUT 200)

# LLaVA's workflow: recipes/llava-stage1.ini (train.freeze = vision,text) then llava-stage2.ini
# (train.freeze = vision, train.init_from = stage 1's checkpoint), one process and pp 2 (checks in the script).
add_test(NAME train_llava_stages
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "llava stages: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_llava_stages.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/train_llava_stages)
set_tests_properties(train_llava_stages PROPERTIES LABELS mpi TIMEOUT 600)
# runtime.precision = bf16 computes with the weights train.init_from and a resume load: the compute copy of
# every tensor (frozen ones included) is the loaded master rounded, on every rank (one process, pp 2, tp 2,
# a resume under pp 2), and bf16's losses from a loaded checkpoint follow fp32's (tests/runtime/train/train_bf16_init_from.sh)
add_test(NAME train_bf16_init_from
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "bf16 init_from: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_bf16_init_from.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_bf16_init_from
                 - timeout 300 ${RRFP_MPIRUN})
set_tests_properties(train_bf16_init_from PROPERTIES LABELS mpi TIMEOUT 600)
# A freeze list that names no parameter is refused before anything trains, naming the item (exit 1).
rrfp_train_refused(train_freeze_bad_key 1 "train.freeze = vision,txt: 'txt' names no parameter of this model"
                   "--set train.freeze=vision,txt")
# init_from of a folder that is not a checkpoint: a clear error naming it (exit 1).
rrfp_train_refused(train_init_from_missing 1 "train.init_from = .*no_such_ckpt/state.json: cannot read"
                   "--set train.init_from=${CMAKE_CURRENT_BINARY_DIR}/no_such_ckpt")

# grouped-query attention: tensor parallelism splits by key/value head, so tp must divide model.text_kv_heads
# (refused before any rank starts, naming the key); text_kv_heads must divide text_heads
rrfp_train_refused(train_tp_kv_heads_refused 2 "parallel.tp = 2: model.text_kv_heads .tensor parallelism splits grouped-query attention by key/value head. .1. is not divisible by it"
                   "--set model.text_kv_heads=1 --set parallel.tp=2")
rrfp_train_refused(train_kv_heads_refused 2 "model.text_kv_heads = 3: does not divide model.text_heads .2."
                   "--set model.text_kv_heads=3")

# metrics.jsonl, the log and the trace: a failed write stops the run naming the file (after a checkpoint);
# a torn last metrics row is reported by resume and report. `full` mounts a tmpfs (root; else skipped).
rrfp_train_script_modes(write_errors ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini MODES metrics metrics_mpi log torn full trace
                        PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
set_tests_properties(write_errors_trace write_errors_metrics_mpi PROPERTIES LABELS mpi)
# a killed rank's temporary checkpoint folder is removed while the rank lingers as a zombie
add_test(NAME stale_zombie
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "stale zombie: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/stale_zombie.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/stale_zombie)
set_tests_properties(stale_zombie PROPERTIES TIMEOUT 120)
# Outputs never overwrite inputs (runtime/train/outguard.h): each command that writes a file refuses, before
# its work, an output that is an input, a checkpoint's or a run folder's own file, or a folder; generate
# writes each answer as it goes and --resume continues the file; --image repeated; eval counts each
# held-out sample once when one is skipped; pack names a tokenizer without <image>. Seconds each.
rrfp_train_script_modes(outputs_guard ${CMAKE_SOURCE_DIR} MODES generate resume images eval report export pack tokenizer trace
                        PROPERTIES TIMEOUT 180)
# Damage only a checksum or the checkpoint identity sees, refused by exit code 1 and the damaged file's path
# (not a message's wording), each beside its control (the undamaged copy works): one bit of a checkpoint
# tensor (model and optimizer files; train --resume and eval), one byte of a sample id in a shard's index
# (train), ~7 s; and a pp 2 checkpoint's two model files swapped (eval and a one-process resume), ~5 s.
rrfp_cli_py_test(refusals_by_file tests/runtime/train/refusals_by_file.py files)
set_tests_properties(refusals_by_file PROPERTIES TIMEOUT 120)
rrfp_cli_py_test(refusals_by_file_shard tests/runtime/train/refusals_by_file.py shard)
set_tests_properties(refusals_by_file_shard PROPERTIES LABELS mpi TIMEOUT 150 SKIP_RETURN_CODE 77)

# Data parallelism: rrfp-mm train with dp = 2 (pp 1 and pp 2) against one process training the same
# global step (dp x microbatches), every mode and a hint set, small and large buckets, resume across layouts.
add_test(NAME dp_train_np2
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "dp train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/dp_train.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/dp_train_np2 1 2 2)
set_tests_properties(dp_train_np2 PROPERTIES LABELS mpi TIMEOUT 400)
# The data-parallel gradients themselves (not only the losses, which clipping and AdamW keep equal under
# gradients off by a constant factor): dp 2 against one process with clipping off, every step's gradient
# norm, step 2's gradient dump and the final AdamW moments (tests/runtime/train/dp_grads.sh).
add_test(NAME dp_grads_np2
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "dp grads: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/dp_grads.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/dp_grads_np2)
set_tests_properties(dp_grads_np2 PROPERTIES LABELS mpi TIMEOUT 150)
add_test(NAME dp_train_np4
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "dp train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/dp_train.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/dp_train_np4 2 2 2 --set model.text_layers=4)
set_tests_properties(dp_train_np4 PROPERTIES LABELS mpi TIMEOUT 500)
# Data parallelism on real shards (tests/runtime/train/dp_shards.sh): demo-data -> pack, then dp 2 (pp 1, pp 2, and
# pp 2 x tp 2 on 8 ranks) against one process with dp x microbatches: 3 losses (step 1 bitwise at tp 1),
# first stages decode, resume across dp layouts both ways.
foreach(l "1;1" "2;1" "2;2")
  list(GET l 0 pp)
  list(GET l 1 tp)
  set(name dp_shards_pp${pp}tp${tp}dp2)
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "dp shards: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/dp_shards.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/${name} ${pp} ${tp})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 600)
endforeach()
# train.init_from from a pp 1 x tp 2 checkpoint (slices reassembled by global name) into one process,
# tp 2 and pp 2: the loaded weights equal the checkpoint's bit for bit.
add_test(NAME init_from_tp_checkpoint
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "init_from tp: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/init_from_tp.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/init_from_tp)
set_tests_properties(init_from_tp_checkpoint PROPERTIES LABELS mpi TIMEOUT 300)
# train.init_from at pp 4 from a 100 MB model file: each rank's memory grows by at most its stage's tensors plus
# one tensor plus 16 MiB while it loads (the reader holds no file's bytes).
add_test(NAME init_from_memory
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "init_from memory: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/init_from_memory.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/init_from_memory)
set_tests_properties(init_from_memory PROPERTIES LABELS mpi TIMEOUT 300 SKIP_RETURN_CODE 77)
# The commands that read or write a whole model (a checkpoint save, eval, generate, export hf, import llava) at a 100 MB model:
# each peak bounded by the copies of the model it must hold (tests/runtime/train/whole_model_memory.sh).
add_test(NAME whole_model_memory
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "whole model memory: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/whole_model_memory.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/whole_model_memory
                 $<TARGET_FILE:rrfp-mm-emu>)
set_tests_properties(whole_model_memory PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# Tensor parallelism (tests/runtime/train/tp_train.sh): one step's loss and every global gradient against one process,
# for (pp, tp, dp) x hints x modes, the dump reassembled, resume across layouts. 8 ranks share 2 cores.
foreach(l "1;2;1;" "1;4;1;--set;model.vision_heads=4;--set;model.text_heads=4" "2;2;1;--set;model.text_layers=4"
          "1;2;2;" "2;2;2;--set;model.text_layers=4")
  list(GET l 0 pp)
  list(GET l 1 tp)
  list(GET l 2 dp)
  list(SUBLIST l 3 -1 extra)
  set(name tp_train_pp${pp}tp${tp}dp${dp})
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "tp train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/tp_train.sh $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/${name} ${pp} ${tp} ${dp} 2 ${extra})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 500)
endforeach()
# the CLIP tower (model.vision_arch = clip, feature layer -2: a never-run frozen block) under pp 2 x tp 2
set(clip_sets --set model.text_layers=4 --set model.vision_arch=clip --set model.vision_layers=2
    --set model.vision_image_size=16 --set model.vision_feature_layer=-2 --set model.projector_act=gelu)
# the LM variants: grouped-query attention (4 on 2), q/k/v and o biases, tied embeddings (the last stage's
# copy is in no file: the export takes stage 0's), Llama-3 RoPE
set(lm_variant_sets --set model.text_heads=4 --set model.text_kv_heads=2 --set model.text_qkv_bias=true
    --set model.text_o_bias=true --set model.tie_embeddings=true --set model.rope_type=llama3
    --set model.rope_original_max_pos=512 --set model.rope_base=500000)
# The CLIP tower and the LM variants together under pp 2 x tp 2, every hint x mode, against one process
# (the default tower: tp_train_pp2tp2dp1 above): the tied head's copy on the last stage gets the first
# stage's gradient summed in (exec_tied.c; without that sum the losses differ by ~1e-2 from step 2), k / v
# split by key/value head, o's bias added once.
add_test(NAME tp_train_pp2tp2dp1_clip_lm_variants
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "tp train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/tp_train.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/tp_train_clip_lm_variants 2 2 1 2
                 ${clip_sets} ${lm_variant_sets})
set_tests_properties(tp_train_pp2tp2dp1_clip_lm_variants PROPERTIES LABELS mpi TIMEOUT 500)
# Tied embeddings with data parallelism: the DP buckets (started early, overlapping the backward) must be
# finished before the tied gradient sum between the first and last stage reads them: pp 2 x dp 2 against
# one process, with one key/value head (grouped-query attention at its extreme)
add_test(NAME tp_train_pp2tp1dp2_tied
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "tp train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/tp_train.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/tp_train_tied_dp 2 1 2 2
                 --set model.text_layers=4 --set model.tie_embeddings=true --set model.text_kv_heads=1)
set_tests_properties(tp_train_pp2tp1dp2_tied PROPERTIES LABELS mpi TIMEOUT 500)
# Training with runtime.backend = cuda end to end with device memory protected (any host access to
# device memory kills the run): 4 steps against the CPU backend's run of the same recipe (losses and
# grad norms within 1e-5), stop at 3 + resume with a step dump, eval on the CUDA backend; then the
# same through the pipeline trainer (parallel.pp = 2 under mpirun, stop + resume). Tolerances are
# explained in tests/runtime/train/train_cuda_emu.sh.
if(TARGET rrfp_cuda_emu)
  # rrfp-mm generate on the CUDA backend's own kernels (attention_decode.cu) under emulation: the answers
  # equal the CPU backend's and the KV cache equals a full re-forward (tests/runtime/train/generate.sh emu)
  add_test(NAME generate_cuda_emu
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "generate emu: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/generate.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_cuda_emu emu $<TARGET_FILE:rrfp-mm-emu>)
  set_tests_properties(generate_cuda_emu PROPERTIES TIMEOUT 300)
  # the same on a grouped-query model (text_heads 4 over text_kv_heads 2): the kernel's h / (H / Hkv)
  add_test(NAME generate_cuda_emu_gqa
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "generate emu_gqa: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/generate.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_cuda_emu_gqa emu_gqa $<TARGET_FILE:rrfp-mm-emu>)
  set_tests_properties(generate_cuda_emu_gqa PROPERTIES TIMEOUT 300)
  rrfp_train_cuda_emu_test(train_cuda_emu 4)
  set_tests_properties(train_cuda_emu PROPERTIES TIMEOUT 600)
  # runtime.precision = bf16 on both sides: the CUDA bf16 table (cuBLASLt emulated) against backend_cpu_bf16
  # (the stop/resume part is train_cuda_emu's: RESUME=0)
  rrfp_train_cuda_emu_test(train_cuda_emu_bf16 4)
  set_tests_properties(train_cuda_emu_bf16 PROPERTIES TIMEOUT 600 ENVIRONMENT "PRECISION=bf16;RESUME=0")
  rrfp_train_cuda_emu_test(train_cuda_emu_pp2 6 pp 2 ${RRFP_MPIRUN})
  set_tests_properties(train_cuda_emu_pp2 PROPERTIES LABELS mpi TIMEOUT 450)
  # the CUDA bf16 table's 2-byte compute copies after train.init_from (tests/runtime/train/train_bf16_init_from.sh, part 4)
  add_test(NAME train_cuda_emu_bf16_init_from
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "bf16 init_from: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_bf16_init_from.sh
                   $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_cuda_emu_bf16_init_from
                   $<TARGET_FILE:rrfp-mm-emu>)
  set_tests_properties(train_cuda_emu_bf16_init_from PROPERTIES TIMEOUT 300)
  # the CLIP tower at parallel.tp = 2 in bf16 on the emulated CUDA backend (NCCL) against the CPU backend's bf16
  # tp 2 run: the TP parameter table keeps vision.pos_embed.weight's f32 compute copy (it lost the mark and
  # the tower read bf16 words as f32: loss NaN in step 1)
  rrfp_train_cuda_emu_test(train_cuda_emu_clip_tp2_bf16 3 tp 2 ${RRFP_MPIRUN})
  set_tests_properties(train_cuda_emu_clip_tp2_bf16 PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT
                       "PRECISION=bf16;EXTRA_SETS=--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16")
endif()

# The default memory budget on a small emulated device (RR_EMU_DEVICE_MB): refused with changes that fit, the first
# change fits and trains, overcommitted it runs out of the device (train_device_budget_emu.sh)
if(TARGET rrfp_cuda_emu)
  add_test(NAME train_device_budget_emu
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "device budget emu: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_device_budget_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_device_budget_emu)
  set_tests_properties(train_device_budget_emu PROPERTIES TIMEOUT 300)
endif()

# LoRA on the emulated CUDA backend (bf16 table: its GEMMs on 2-byte weights, the rounding dropout kernel) against
# the CPU backend's bf16 run, every linear adapted (the LM's and the CLIP tower's), dropout on
if(TARGET rrfp_cuda_emu)
  rrfp_train_cuda_emu_test(train_cuda_emu_lora 2)
  set_tests_properties(train_cuda_emu_lora PROPERTIES TIMEOUT 600 ENVIRONMENT
                       "PRECISION=bf16;RESUME=0;EXTRA_SETS=--set model.vision_arch=clip --set model.vision_image_size=16 --set model.vision_feature_layer=-1 --set model.projector_act=gelu --set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set lora.targets=all,vision.all")
endif()

# QLoRA on the emulated CUDA backend (bf16 table: the NF4 base dequantised by engine/cuda/quant.cu into 2-byte weights
# for the GEMMs) against the CPU backend's bf16 run, every linear adapted, dropout on
if(TARGET rrfp_cuda_emu)
  rrfp_train_cuda_emu_test(train_cuda_emu_qlora 2)
  set_tests_properties(train_cuda_emu_qlora PROPERTIES TIMEOUT 600 ENVIRONMENT
                       "PRECISION=bf16;RESUME=0;EXTRA_SETS=--set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set lora.quant=nf4")
endif()

# Training with runtime.comm = nccl on the emulated CUDA runtime and NCCL, against the CPU backend's one
# process (tests/runtime/train/train_nccl_emu.sh): pp 2 (the FIFO protocol over one communicator per direction, inputs
# ready on their receive's event, receives delayed), dp 2 (the gradient all-reduce in place on device
# memory), fixed-sync (synchronous device sends). No cudaMalloc after the first step on any rank.
if(TARGET rrfp_cuda_emu)
  rrfp_train_nccl_emu_test(train_nccl_emu_pp2 4 2 1 2)
  rrfp_train_nccl_emu_test(train_nccl_emu_dp2 3 1 2 1)
  rrfp_train_nccl_emu_test(train_nccl_emu_pp2_fixed_sync 3 2 1 2)
  rrfp_train_nccl_emu_test(train_nccl_emu_pp2_bf16 3 2 1 2)
  rrfp_train_nccl_emu_test(train_nccl_emu_tp2 3 1 1 2)
  # tp 4: a TP leader's choices reach its third peer over an NCCL link too (every two ranks of a group of
  # <= 8 are linked), so no step after the first calls MPI
  rrfp_train_nccl_emu_test(train_nccl_emu_tp4 2 1 1 2)
  set_tests_properties(train_nccl_emu_pp2 train_nccl_emu_dp2 train_nccl_emu_pp2_fixed_sync train_nccl_emu_pp2_bf16
                       train_nccl_emu_tp2 train_nccl_emu_tp4 PROPERTIES LABELS mpi TIMEOUT 480)
  set_tests_properties(train_nccl_emu_tp2 PROPERTIES ENVIRONMENT "TP=2")
  set_tests_properties(train_nccl_emu_tp4 PROPERTIES ENVIRONMENT "TP=4;SETS=model.vision_heads=4 model.text_heads=4")
  set_tests_properties(train_nccl_emu_pp2_fixed_sync PROPERTIES ENVIRONMENT "MODE=fixed-sync")
  set_tests_properties(train_nccl_emu_pp2_bf16 PROPERTIES ENVIRONMENT "PRECISION=bf16")
endif()
# The LM variants (grouped-query attention 4 on 2 heads, q/k/v and o biases, tied embeddings, Llama-3 RoPE) on
# the CUDA backend's kernels: one process against the CPU backend, under the CLIP tower (class embedding,
# interpolated position table, pre-LN, a never-run frozen block at feature layer -2, GELU projector), f32 and
# bf16; and pp 2 over the emulated NCCL, where the tied embedding's gradient sum between the first and last
# stage runs in place on the device group (no MPI in steps 2..3)
if(TARGET rrfp_cuda_emu)
  set(LM_VARIANTS_SETS "model.text_layers=4 model.text_heads=4 model.text_kv_heads=2 model.text_qkv_bias=true model.text_o_bias=true model.tie_embeddings=true model.rope_type=llama3 model.rope_original_max_pos=512 model.rope_base=500000")
  string(REPLACE "model." "--set model." LM_VARIANTS_EXTRA "${LM_VARIANTS_SETS}")
  # one process against the CPU backend with the CLIP tower under the variants (RESUME=0: checkpointing is
  # train_cuda_emu's; the default tower is train_cuda_emu's too)
  set(CLIP_EXTRA "--set model.vision_arch=clip --set model.vision_layers=2 --set model.vision_image_size=16 --set model.vision_feature_layer=-2 --set model.projector_act=gelu")
  rrfp_train_cuda_emu_test(train_cuda_emu_clip_lm_variants 3)
  set_tests_properties(train_cuda_emu_clip_lm_variants PROPERTIES TIMEOUT 300 ENVIRONMENT "RESUME=0;EXTRA_SETS=${LM_VARIANTS_EXTRA} ${CLIP_EXTRA}")
  rrfp_train_nccl_emu_test(train_nccl_emu_pp2_lm_variants 2 2 1 2)
  set_tests_properties(train_nccl_emu_pp2_lm_variants PROPERTIES LABELS mpi TIMEOUT 480 ENVIRONMENT "SETS=${LM_VARIANTS_SETS}")
  # the same under runtime.precision = bf16: grouped-query attention through the own tensor-core kernel
  # (cuDNN is never asked for Hkv < H), the tied embedding read as a 2-byte GEMM weight and embedding
  # table, and the CLIP tower's position embedding kept as an f32 compute copy (params_keep_f32_compute,
  # read by rows_gather), every other 2-D tensor 2-byte
  rrfp_train_cuda_emu_test(train_cuda_emu_clip_lm_variants_bf16 2)
  set_tests_properties(train_cuda_emu_clip_lm_variants_bf16 PROPERTIES TIMEOUT 300 ENVIRONMENT "PRECISION=bf16;RESUME=0;EXTRA_SETS=${LM_VARIANTS_EXTRA} ${CLIP_EXTRA}")
endif()

# runtime.profile and device_peak_mb end to end on the emulated CUDA backend (tests/runtime/train/train_profile_emu.sh)
if(TARGET rrfp_cuda_emu)
  add_test(NAME train_profile_emu
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train profile emu: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_profile_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_profile_emu)
  set_tests_properties(train_profile_emu PROPERTIES TIMEOUT 300)
  # the launches of a step held (the emulation's count against the profiler's; tests/runtime/train/train_launches_emu.sh)
  add_test(NAME train_launches_emu
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train launches emu: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_launches_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_launches_emu)
  set_tests_properties(train_launches_emu PROPERTIES TIMEOUT 300)
  # the communication kind: NCCL operations timed on their streams (pp 2 under mpirun)
  add_test(NAME train_profile_nccl_emu
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train profile nccl emu: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_profile_nccl_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_profile_nccl_emu ${RRFP_MPIRUN})
  set_tests_properties(train_profile_nccl_emu PROPERTIES LABELS mpi TIMEOUT 300)
endif()
# 2-byte activations under tensor parallelism (tests/runtime/train/train_bf16a_tp_emu.sh): bf16 training with
# parallel.tp = 2 on the emulated CUDA runtime and NCCL, 2-byte activations against
# RRFP_BF16_ACTIVATIONS=0, bitwise (losses, gradient norms, step 1's dump, the last checkpoint; the token
# embedding's atomics within 1e-6): pp 1 (one stage: embedding, tower, LM, vocabulary-parallel head) with the
# CLIP tower and the LM variants (GQA, q/k/v and o biases: o's added by TP rank 0 before the sum, tied
# embeddings, Llama-3 RoPE), pp 2 (the stage-edge conversions) with the default tower and LM
if(TARGET rrfp_cuda_emu)
  add_test(NAME train_bf16a_tp_emu_tp2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train bf16a tp emu: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_bf16a_tp_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_bf16a_tp_emu_tp2 1 2 ${RRFP_MPIRUN})
  add_test(NAME train_bf16a_tp_emu_pp2tp2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train bf16a tp emu: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_bf16a_tp_emu.sh
                   $<TARGET_FILE:rrfp-mm-emu> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini
                   ${CMAKE_CURRENT_BINARY_DIR}/train_bf16a_tp_emu_pp2tp2 2 2 ${RRFP_MPIRUN})
  set_tests_properties(train_bf16a_tp_emu_tp2 train_bf16a_tp_emu_pp2tp2 PROPERTIES LABELS mpi TIMEOUT 600)
  set_tests_properties(train_bf16a_tp_emu_pp2tp2 PROPERTIES ENVIRONMENT "SETS=model.text_layers=4")
  # pp 1: the CLIP tower (class embedding, interpolated position table kept f32 in the compute copy, pre-LN,
  # no patch bias) feeding the LM variants (the default tower and LM: pp2tp2)
  set_tests_properties(train_bf16a_tp_emu_tp2 PROPERTIES ENVIRONMENT
                       "SETS=${LM_VARIANTS_SETS} model.vision_arch=clip model.vision_layers=2 model.vision_image_size=16")
endif()

# LoRA checkpoints: a resume is bit for bit the uninterrupted run (dropout on), the checkpoint holds the adapters and
# the base (tests/runtime/train/lora_resume.sh); generation on a LoRA checkpoint, unmerged (generate.sh kv_lora)
add_test(NAME train_lora_resume
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "lora resume: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/lora_resume.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_lora_resume)
add_test(NAME generate_kv_lora
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "generate kv_lora: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/generate.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_kv_lora kv_lora)
set_tests_properties(generate_kv_lora PROPERTIES TIMEOUT 300)
# the LoRA recipe's dry run: the first stage's gradients and AdamW state are the projector's and the adapters' (MiB),
# not the LM's (GiB, as recipe_dry_run_7b shows them)
add_test(NAME recipe_dry_run_7b_lora COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "total +7\\.[0-9][0-9]B.* 0 +4\\+ViT +[0-9.]+M +[0-9.]+ GiB +[0-9.]+ MiB +[0-9.]+ MiB" $<TARGET_FILE:rrfp-mm> train ${CMAKE_SOURCE_DIR}/recipes/llava-1.5-7b-lora.ini --dry-run)
# The distributed optimizer (parallel.zero = 1) against the same layout with zero = 0
# (tests/runtime/train/zero_train.sh): losses bitwise, grad norms to round-off, checkpoints bitwise, the shard
# 1/dp of the state, resume across zero on/off and dp; pp 2 x dp 2 in bf16 with interleaved chunks (the
# masters sharded, reduce-scatters started early), tp 2 x dp 2; and on the emulated CUDA + NCCL path.
add_test(NAME zero_train_dp2
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "zero train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/zero_train.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/zero_train_dp2 1 1 2 2)
add_test(NAME zero_train_pp2dp2_bf16
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "zero train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/zero_train.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/zero_train_pp2dp2_bf16 2 1 2 2)
set_tests_properties(zero_train_pp2dp2_bf16 PROPERTIES ENVIRONMENT
                     "PRECISION=bf16;SETS=model.text_layers=4 parallel.hint=interleaved-1f1b parallel.chunks=2")
add_test(NAME zero_train_tp2dp2
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "zero train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/zero_train.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/zero_train_tp2dp2 1 2 2 2)
set_tests_properties(zero_train_dp2 zero_train_pp2dp2_bf16 zero_train_tp2dp2 PROPERTIES LABELS mpi TIMEOUT 200)
if(TARGET rrfp_cuda_emu)
  add_test(NAME zero_train_nccl_emu_dp2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "zero train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/zero_train.sh $<TARGET_FILE:rrfp-mm-emu>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/zero_train_nccl_emu_dp2 1 1 2 2)
  # text.embed frozen: the CUDA embedding backward adds rows with float atomics, whose order differs from run
  # to run, so two runs agree only to round-off there; without it the comparison is bitwise (and the frozen
  # tensor, master-less in bf16, is saved from its compute copy by a zero run)
  set_tests_properties(zero_train_nccl_emu_dp2 PROPERTIES LABELS mpi TIMEOUT 400 ENVIRONMENT
                       "MODE=emu;PRECISION=bf16;SETS=train.freeze=text.embed")
endif()
# Activation recompute (train.recompute, tests/runtime/train/train_recompute.sh): selective, full and the LM only
# against no recompute, bit for bit (every step's loss and grad norm, a step's dumped gradients and weights), the
# recomputed blocks counted in the metrics, the dry run's activations shrinking; one process in fp32 and bf16,
# pp 2 under 1f1b and zb-h1 (the split backward's W recomputes too), and the emulated CUDA backend (within 1e-6: the
# gathers' float atomics)
add_test(NAME train_recompute COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train recompute cpu: ok"
         bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_recompute.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_recompute cpu)
set_tests_properties(train_recompute PROPERTIES TIMEOUT 300)
# the same with the CLIP tower (QuickGELU recomputed from its kept input; every block run), the exact-GELU projector
# and LoRA on the LM and the tower (the recompute redraws the adapters' dropout and the down projection's and fc2's adapter
# inputs)
add_test(NAME train_recompute_clip COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train recompute cpu: ok"
         bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_recompute.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_recompute_clip cpu)
set_tests_properties(train_recompute_clip PROPERTIES TIMEOUT 300 ENVIRONMENT
                     "EXTRA_SETS=--set model.vision_arch=clip --set model.vision_image_size=16 --set model.vision_feature_layer=-1 --set model.projector_act=gelu --set lora.r=4 --set lora.alpha=8 --set lora.dropout=0.25 --set lora.targets=all,vision.all")
add_test(NAME train_recompute_pp COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train recompute pp: ok"
         bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_recompute.sh $<TARGET_FILE:rrfp-mm>
         ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_recompute_pp pp ${RRFP_MPIRUN})
set_tests_properties(train_recompute_pp PROPERTIES LABELS mpi TIMEOUT 300)
if(TARGET rrfp_cuda_emu)
  add_test(NAME train_recompute_emu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "train recompute emu: ok"
           bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_recompute.sh $<TARGET_FILE:rrfp-mm>
           ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_recompute_emu emu
           $<TARGET_FILE:rrfp-mm-emu>)
  set_tests_properties(train_recompute_emu PROPERTIES TIMEOUT 450)
endif()
# bf16 frozen tensors hold only their compute copy (tests/runtime/train/bf16_frozen.sh): a resume bit for bit, the
# checkpoint's frozen tensors the bf16 rounding of their start values, train.init_from of an fp32 file rounded once
add_test(NAME train_bf16_frozen
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "bf16 frozen: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/bf16_frozen.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_bf16_frozen)
# LLaVA-1.5-7B stage 1 on one rank in bf16: tower and LM frozen at 2 bytes (13.24 GiB of weights; 39.47 GiB with f32 masters)
add_test(NAME recipe_dry_run_7b_stage1_bf16 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 " 0 +32\\+ViT +7\\.06B +13\\.24 GiB " $<TARGET_FILE:rrfp-mm> train ${CMAKE_SOURCE_DIR}/recipes/llava-1.5-7b.ini
         --set train.freeze=vision,text --set parallel.pp=1 --set parallel.tp=1 --set parallel.dp=1 --dry-run)

# QLoRA checkpoints (tests/runtime/train/qlora_resume.sh): from a full-precision init_from, a resume is bit for bit the
# uninterrupted run (the NF4 codes read back as trained on), tensors ls shows the quantised blocks, altered codes are
# refused by their checksum, the recipe's refusals; generate and eval on a QLoRA checkpoint (generate.sh kv_qlora)
add_test(NAME train_qlora_resume
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "qlora resume: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/qlora_resume.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_qlora_resume)
# QLoRA under tp 2 and parallel.zero = 1 (tests/runtime/train/qlora_layouts.sh): resumes bitwise within a layout, the
# NF4 form the one process's byte for byte across tp 1 <-> 2, zero = 1 <-> 0 bitwise, the refusal of a split that cuts
# a block of 64
add_test(NAME train_qlora_layouts
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "qlora layouts: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/qlora_layouts.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_qlora_layouts)
set_tests_properties(train_qlora_layouts PROPERTIES LABELS mpi TIMEOUT 300)
add_test(NAME generate_kv_qlora
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "generate kv_qlora: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/generate.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/generate_kv_qlora kv_qlora)
set_tests_properties(generate_kv_qlora PROPERTIES TIMEOUT 300)
# the QLoRA recipe's dry run: LLaVA-1.5-7B stage 2, r 128, one GPU, 4096-token microbatches, full recompute fits 24 GB,
# its weights (the NF4 base at 4.13 bits a value), gradients and AdamW state derived from the model's sizes
# (tests/runtime/train/dry_run_qlora.py)
add_test(NAME recipe_dry_run_7b_qlora
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "dry run qlora: ok" ${RRFP_PYTHON}
                 ${CMAKE_SOURCE_DIR}/tests/runtime/train/dry_run_qlora.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/llava-1.5-7b-qlora.ini)
# LLaVA-1.5-13B stage 2 on one node of 8 x 80 GB (an 80 GB device less the 5% reserve: 75 GiB a rank): the recipe (pp 8,
# selective recompute) and its run without recompute both fit the budget with the automatic (path-aware) split (no re-split)
add_test(NAME recipe_dry_run_13b_80g COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0
         "total +13\\.[0-9][0-9]B.*LM layers per virtual stage: 5,6,5,5,5,5,5,4 \\(path-aware\\).* 0 +5\\+ViT .*<= 75\\.00 GiB.*largest rank: 5[0-9]\\.[0-9][0-9] GiB"
         $<TARGET_FILE:rrfp-mm> train ${CMAKE_SOURCE_DIR}/recipes/llava-1.5-13b.ini --dry-run --set runtime.memory_budget=75)
add_test(NAME recipe_dry_run_13b_80g_none COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0
         "LM layers per virtual stage: 5,6,5,5,5,5,5,4 \\(path-aware\\).*largest rank: [67][0-9]\\.[0-9][0-9] GiB"
         $<TARGET_FILE:rrfp-mm> train ${CMAKE_SOURCE_DIR}/recipes/llava-1.5-13b.ini --dry-run --set runtime.memory_budget=75
         --set train.recompute=none)
# The vision tower over live pipeline stages (parallel.tower_layers, parallel.tower_split = auto): pp 2 and 3 against one
# process, bitwise (docs/anyres.md "The tower over stages")
add_test(NAME train_tower_stages
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "tower stages: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/train/tower_stages.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/train_tower_stages)
set_tests_properties(train_tower_stages PROPERTIES LABELS mpi TIMEOUT 300)

# Two ranks on one GPU: a pp 2 `rrfp-mm train` of two processes sharing the device (MPI transport), stopped and
# resumed, against the CPU backend's one process; skipped without a
# device
add_test(NAME train_gpu_pp2_one_device
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runtime/train/train_gpu_one_device.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/train_gpu_pp2_one_device ${RRFP_MPIRUN})
set_tests_properties(train_gpu_pp2_one_device PROPERTIES LABELS "mpi;gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)

# The memory refit over the tower-and-LM chain (parallel.tower_split = auto) against every split of small models.
add_executable(test_layout_fit tests/runtime/train/test_layout_fit.c)
target_link_libraries(test_layout_fit PRIVATE rrfp_core)
add_test(NAME layout_fit_chain COMMAND test_layout_fit ${CMAKE_SOURCE_DIR})
