# sim.cmake — the simulator (runtime/sim/): its unit cases and its command (`rrfp-mm sim`; sched_cli covers
# `rrfp-mm trace`'s SVG too).
# the simulator's unit cases (runtime/sim/): hand-computed makespans, every hint x mode x cap, duration files,
# the generator, lookahead and rollout on simulated steps
add_executable(test_sim tests/runtime/sim/test_sim.c)
target_link_libraries(test_sim PRIVATE rrfp_core)
add_test(NAME sim_core COMMAND test_sim)
add_test(NAME sched_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runtime/sim/sched_cli.sh $<TARGET_FILE:rrfp-mm>)
# An independent Python reading of docs/scheduler.md's contract against `rrfp-mm sim --json` (stdlib only). 16
# random cases (each runs the simulator for every hint x mode x cap): with the CUDA build each process
# start maps cuBLAS / cuBLASLt (~0.7 s), and 40 cases took 460 s of the suite's 15-minute budget.
add_test(NAME sched_ref COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/runtime/sim/sched_ref.py $<TARGET_FILE:rrfp-mm> 16)
# the calibrated generator with the tower's blocks over stages (--tower-split): work moved, not made; stage 0 relieved
add_test(NAME calib_tower COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "calib tower: ok"
         bash ${CMAKE_SOURCE_DIR}/tests/runtime/sim/calib_tower.sh $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR})
# the path-aware split (--partition, parallel.partition): the simulator's split is the dry run's; lower bound and step fall
add_test(NAME calib_partition COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "calib partition: ok"
         bash ${CMAKE_SOURCE_DIR}/tests/runtime/sim/calib_partition.sh $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR})
# adaptive's in-flight cap (pp_plan_order_cap): at 32 stages it is never slower than at a tighter cap, and says which it ran
add_test(NAME sim_plan_cap COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "plan cap: ok"
         bash ${CMAKE_SOURCE_DIR}/tests/runtime/sim/plan_cap.sh $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR})
