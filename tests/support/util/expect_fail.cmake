# expect_fail.cmake — run CMD with ARGS (;-separated), require exit code EXPECT_RC and that stderr
# contains EXPECT_ERR. Used for "bad input gives this exact error" tests.
separate_arguments(arglist UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${CMD} ${arglist} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit ${EXPECT_RC}, got ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
if(DEFINED EXPECT_ERR AND NOT err MATCHES "${EXPECT_ERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_ERR}':\n${err}")
endif()
