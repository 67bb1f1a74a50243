# sched.cmake — scheduler core, simulator and trace tool (runtime/sched/, runtime/sim/, runtime/trace/).
add_executable(test_sched tests/test_sched.c)
target_link_libraries(test_sched PRIVATE rrfp_core)
add_test(NAME sched_core COMMAND test_sched)
add_test(NAME sched_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sched_cli.sh $<TARGET_FILE:rrfp-mm>)
# `rrfp-mm trace --durations-dir`: every step of a run's traces as a duration file (a written 3-step trace).
add_test(NAME trace_steps
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/util/expect.sh 0 "trace steps: ok" bash ${CMAKE_SOURCE_DIR}/tests/trace_steps.sh $<TARGET_FILE:rrfp-mm>)
set_tests_properties(trace_steps PROPERTIES TIMEOUT 120)
# An independent Python reading of docs/scheduler.md's contract against `rrfp-mm sim --json` (stdlib only). 16
# random cases (each runs the simulator for every hint x mode x cap): with the CUDA build each process
# start maps cuBLAS / cuBLASLt (~0.7 s), and 40 cases took 460 s of the suite's 15-minute budget.
add_test(NAME sched_ref COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/sched_ref.py $<TARGET_FILE:rrfp-mm> 16)
# The check of the default dispatch mode against the better of fixed and ready (bench/adaptive.sh).
add_executable(rrfp-bench-adaptive bench/bench_adaptive.c)
target_link_libraries(rrfp-bench-adaptive PRIVATE rrfp_core)
