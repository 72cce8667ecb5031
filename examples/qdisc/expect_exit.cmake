# SPDX-License-Identifier: MIT
# Runs PROGRAM with ARGS (a list) and fails unless it exits with status EXPECT.
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT)
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: exit ${rc}, expected ${EXPECT}\n${err}")
endif()
if(err STREQUAL "")
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: no message on stderr")
endif()
