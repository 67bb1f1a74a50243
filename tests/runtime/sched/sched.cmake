# sched.cmake — the scheduler core (runtime/sched/: hint orders, caps, the dispatcher; the simulator's cases are
# tests/runtime/sim/'s, the adaptive plan's tests/runtime/plan/'s).
add_executable(test_sched tests/runtime/sched/test_sched.c)
target_link_libraries(test_sched PRIVATE rrfp_core)
add_test(NAME sched_core COMMAND test_sched)
# The check of the default dispatch mode against the better of fixed and ready (bench/adaptive.sh).
add_executable(rrfp-bench-adaptive bench/bench_adaptive.c)
target_link_libraries(rrfp-bench-adaptive PRIVATE rrfp_core)
