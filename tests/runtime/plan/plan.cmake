# plan.cmake — adaptive's plan (runtime/plan/: the mode, cap and microbatch order chosen by simulating the
# candidates, the fit it plans on, the learner) and the runtime's pre-step dry run.
add_executable(test_plan tests/runtime/plan/test_plan.c)
target_link_libraries(test_plan PRIVATE rrfp_core)
add_test(NAME plan_core COMMAND test_plan)
