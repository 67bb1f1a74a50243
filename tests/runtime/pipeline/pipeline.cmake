# pipeline.cmake — the pipeline runtime (runtime/pipeline/): gradient equivalence with one process, the
# pipeline trainer under mpirun, faults, stalls, skips, leader-decides, replay. Multi-rank tests run under a
# timeout so a hang fails instead of stalling CI.
add_executable(rrfp-bench-pipeline bench/bench_pipeline.c)
target_link_libraries(rrfp-bench-pipeline PRIVATE rrfp_core)
set_target_properties(rrfp-bench-pipeline PROPERTIES EXCLUDE_FROM_ALL ON)
# Gradient equivalence of the pipeline with the single-process step, every hint x mode (2 and 4
# ranks; 2 chunks per rank for interleaved-1f1b).
add_executable(test_pipeline tests/runtime/pipeline/test_pipeline.c)
target_link_libraries(test_pipeline PRIVATE rrfp_core)
foreach(np 2 4)
  add_test(NAME pipeline_equiv_np${np}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline equivalence: ok" timeout 240 ${RRFP_MPIRUN} -np ${np} -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_pipeline>)
  set_tests_properties(pipeline_equiv_np${np} PROPERTIES LABELS mpi TIMEOUT 300)
endforeach()
# Several microbatches in flight at once, with data that change from step to step: consumers held until the
# step's messages have landed in their receive buffers (gpipe, fixed and ready, both transports), and slowed
# producers (1f1b); each step's loss and gradients against one process (test_pipeline inflight).
add_test(NAME pipeline_inflight_np2
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline in flight: ok" timeout 120 ${RRFP_MPIRUN} -np 2 -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_pipeline> inflight)
set_tests_properties(pipeline_inflight_np2 PROPERTIES LABELS mpi TIMEOUT 150)
add_test(NAME pipeline_equiv_interleaved_np2
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline equivalence: ok" timeout 240 ${RRFP_MPIRUN} -np 2 -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_pipeline> 2)
set_tests_properties(pipeline_equiv_interleaved_np2 PROPERTIES LABELS mpi TIMEOUT 300)
# The V hints (zbv, dualpipev: two chunks per rank in a V, the tip rank hands its output to itself):
# every mode x cap x transport, one step's gradients and three optimiser steps against one process.
foreach(np 2 4)
  add_test(NAME pipeline_equiv_vshape_np${np}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline equivalence: ok" timeout 240 ${RRFP_MPIRUN} -np ${np} -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_pipeline> v)
  set_tests_properties(pipeline_equiv_vshape_np${np} PROPERTIES LABELS mpi TIMEOUT 300)
  if(np EQUAL 4)  # about 55 s on 2 shared cores: the middle ranks of the V
    set_tests_properties(pipeline_equiv_vshape_np4 PROPERTIES LABELS "mpi;slow")
  endif()
endforeach()
# rrfp-mm train under mpirun against one process: every hint x mode, resume across layouts, traces.
foreach(np 2 4)
  add_test(NAME pipeline_train_np${np}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/pipeline/pipeline_train.sh $<TARGET_FILE:rrfp-mm>
                   ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/pipeline_train_np${np} ${np} --set model.text_layers=4)
  set_tests_properties(pipeline_train_np${np} PROPERTIES LABELS mpi TIMEOUT 400)
endforeach()
# A rank killed mid-step: the job ends within 30 s naming the rank; the last checkpoint resumes.
add_test(NAME pipeline_kill_rank
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "kill at tp 1: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/pipeline/pipeline_kill.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/pipeline_kill_rank 1)
set_tests_properties(pipeline_kill_rank PROPERTIES LABELS mpi TIMEOUT 400)
# The pipeline with its stages on the CUDA backend (host-staged messages): on a device (label gpu,
# skipped without one) and on the emulated CUDA runtime of tests/support/cuda_emu, which runs here.
add_test(NAME pipeline_equiv_gpu_np2
         COMMAND timeout 240 ${RRFP_MPIRUN} -np 2 -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_pipeline> 1 cuda)
set_tests_properties(pipeline_equiv_gpu_np2 PROPERTIES LABELS "mpi;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
if(TARGET rrfp_cuda_emu)
  add_executable(test_pipeline_emu tests/runtime/pipeline/test_pipeline.c)
  target_compile_definitions(test_pipeline_emu PRIVATE backend_cuda_get=backend_cuda_emu_get)
  target_link_libraries(test_pipeline_emu PRIVATE rrfp_cuda_emu rrfp_core)
  set_target_properties(test_pipeline_emu PROPERTIES LINKER_LANGUAGE CXX)
  add_test(NAME pipeline_equiv_cuda_emu_np2
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline equivalence: ok" timeout 580 ${RRFP_MPIRUN} -np 2 -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_pipeline_emu> 1 cuda)
  set_tests_properties(pipeline_equiv_cuda_emu_np2 PROPERTIES LABELS mpi TIMEOUT 600)
endif()
# only the first pipeline stage decodes JPEGs (rank-R.json of a pp = 2 run on real shards)
add_test(NAME pipeline_decode_first_stage
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runtime/pipeline/pipeline_decode.sh $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/pipeline_decode)
set_tests_properties(pipeline_decode_first_stage PROPERTIES LABELS mpi TIMEOUT 400)
# A rank stopped (SIGSTOP) for 6 s with runtime.stall_warn_s = 2: the other rank warns naming what it
# waits for, and the run finishes once it continues.
add_test(NAME pipeline_stall_warn
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline stall: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/pipeline/pipeline_stall.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/pipeline_stall_warn)
set_tests_properties(pipeline_stall_warn PROPERTIES LABELS mpi TIMEOUT 300)
# Fault injection: kill -9 a rank or SIGTERM both at random moments of a pp=2 run with a checkpoint every
# step, 10 faults; every resumed run ends with the uninterrupted run's losses bit for bit.
add_test(NAME pipeline_faults
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline faults: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/pipeline/pipeline_faults.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/pipeline_faults 10)
set_tests_properties(pipeline_faults PROPERTIES LABELS mpi TIMEOUT 400)
# Replay (docs/scheduler.md "The simulator's semantics"): the runtime with each task sleeping its duration from a duration file,
# real messages between 8 real ranks: every configuration completes (timings are bench/replay.sh's).
add_executable(rrfp-bench-replay bench/bench_replay.c)
target_link_libraries(rrfp-bench-replay PRIVATE rrfp_core)
add_test(NAME pipeline_replay_np8
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "replay: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/pipeline/replay_quick.sh
                 $<TARGET_FILE:rrfp-mm> $<TARGET_FILE:rrfp-bench-replay> ${CMAKE_CURRENT_BINARY_DIR}/replay_quick ${RRFP_MPIRUN})
set_tests_properties(pipeline_replay_np8 PROPERTIES LABELS mpi TIMEOUT 200)
# adaptive's in-flight cap in the MPI runtime: on a replayed step whose plan takes a cap tighter than 2x, the step runs
# that cap (its stats) and keeps to it on every rank, where ready at 2x goes above it (test_plan_cap.c).
add_executable(test_plan_cap tests/runtime/pipeline/test_plan_cap.c)
target_link_libraries(test_plan_cap PRIVATE rrfp_core)
add_test(NAME pipeline_plan_cap_np4
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline plan cap: ok" timeout 60 ${RRFP_MPIRUN} -np 4 -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_plan_cap>)
set_tests_properties(pipeline_plan_cap_np4 PROPERTIES LABELS mpi TIMEOUT 90)
# the same with TP 2 on every stage (pp 4 x tp 2): every TP rank of a stage runs its leader's planned cap, where the
# followers' own estimates would keep 2x
add_test(NAME pipeline_plan_cap_tp_np8
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline plan cap: ok" timeout 60 ${RRFP_MPIRUN} -np 8 -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_plan_cap> 2)
set_tests_properties(pipeline_plan_cap_tp_np8 PROPERTIES LABELS mpi TIMEOUT 90)
# rrfp-mm train with runtime.compute = replay:FILE at P = 8: every task once per step, in fixed mode in the
# hint's order, lasting at least the file's duration, real messages of the microbatches' sizes, the
# measured makespan at least the simulator's (fixed is monotone); adaptive runs; bad files refused.
add_test(NAME train_replay_np8
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "replay train: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/pipeline/replay_train.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/replay_train)
set_tests_properties(train_replay_np8 PROPERTIES LABELS mpi TIMEOUT 200)
# Leader-decides: the TP ranks of a stage run their leader's task sequence under injected arrival
# delays (ready bf / bfw, fixed 1f1b; adaptive 1f1b with the TP groups' plans made to differ: every TP rank
# runs its leader's mode), pp 2 x tp 2; and the negative control (independent dispatch
# must diverge under the same delays).
add_executable(test_tp_dispatch tests/runtime/pipeline/test_tp_dispatch.c)
target_link_libraries(test_tp_dispatch PRIVATE rrfp_core)
add_test(NAME tp_dispatch_np4
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "tp dispatch: ok" timeout 240 ${RRFP_MPIRUN} -np 4 -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_tp_dispatch> 2)
add_test(NAME tp_dispatch_independent_np4
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "negative control: ok, independent dispatch diverged" timeout 240 ${RRFP_MPIRUN} -np 4 -x OMP_NUM_THREADS=1 $<TARGET_FILE:test_tp_dispatch> 2 independent)
set_tests_properties(tp_dispatch_np4 tp_dispatch_independent_np4 PROPERTIES LABELS mpi TIMEOUT 300)

add_test(NAME tp_kill_peer
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "kill at tp 2: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/pipeline/pipeline_kill.sh $<TARGET_FILE:rrfp-mm>
                 ${CMAKE_SOURCE_DIR}/recipes/test-synthetic.ini ${CMAKE_CURRENT_BINARY_DIR}/tp_kill_peer 2)
set_tests_properties(tp_kill_peer PROPERTIES LABELS mpi TIMEOUT 400)
# a sample whose frame is intact but whose image does not decode, at one process, pp 2, pp 2 x tp 2 and dp 2:
# completes, names it once, the same plan everywhere, resume before and after it bit for bit
add_test(NAME pipeline_skips
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "pipeline skips: ok" ${CMAKE_SOURCE_DIR}/tests/runtime/pipeline/pipeline_skips.sh
                 $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR} $<TARGET_FILE:data_shard_tool> ${CMAKE_CURRENT_BINARY_DIR}/pipeline_skips)
set_tests_properties(pipeline_skips PROPERTIES LABELS mpi TIMEOUT 400)
# adaptive's order cost model counts a microbatch's patches on every virtual stage with tower blocks (the tower over stages)
add_executable(test_order_costs tests/runtime/pipeline/test_order_costs.c)
target_link_libraries(test_order_costs PRIVATE rrfp_core)
add_test(NAME pipeline_order_costs COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "order costs: ok" $<TARGET_FILE:test_order_costs>)
