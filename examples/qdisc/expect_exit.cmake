# SPDX-License-Identifier: MIT
# Runs PROGRAM with ARGS (a list) and fails unless it exits with status EXPECT.
# EMULATOR: how a cross build runs its programs (CMAKE_CROSSCOMPILING_EMULATOR, its
# list separators written as `|`), or empty.
string(REPLACE "|" ";" emulator "${EMULATOR}")
execute_process(COMMAND ${emulator} ${PROGRAM} ${ARGS} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT)
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: exit ${rc}, expected ${EXPECT}\n${err}")
endif()
if(err STREQUAL "")
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: no message on stderr")
endif()
