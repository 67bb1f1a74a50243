# trace.cmake — the trace tool (runtime/trace/, `rrfp-mm trace`).
# `rrfp-mm trace --durations-dir`: every step of a run's traces as a duration file (a written 3-step trace).
add_test(NAME trace_steps
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "trace steps: ok" bash ${CMAKE_SOURCE_DIR}/tests/runtime/trace/trace_steps.sh $<TARGET_FILE:rrfp-mm>)
set_tests_properties(trace_steps PROPERTIES TIMEOUT 120)
# The trace writer and reader as the runtime uses them (one file per rank, flows linked on merge, refusals).
add_executable(test_trace tests/runtime/trace/test_trace.c)
target_link_libraries(test_trace PRIVATE rrfp_core)
add_test(NAME trace_writer COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "trace writer: ok" $<TARGET_FILE:test_trace>)
