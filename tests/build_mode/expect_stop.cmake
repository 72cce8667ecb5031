# SPDX-License-Identifier: MIT
# Runs PROGRAM, which must stop (not exit 0) with hotpath's build-mode message, and the
# message must show MACRO set differently in its units (0/1 or 1/0).
# EMULATOR: how a cross build runs its programs (CMAKE_CROSSCOMPILING_EMULATOR, its
# list separators written as `|`), or empty.
string(REPLACE "|" ";" emulator "${EMULATOR}")
execute_process(COMMAND ${emulator} ${PROGRAM} OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT err MATCHES "hotpath: translation units built in different modes"
   OR NOT err MATCHES "${MACRO} (0/1|1/0)")
  message(FATAL_ERROR "expected a stop with the build-mode message naming ${MACRO}; "
                      "exit ${rc}\n${out}\n${err}")
endif()
message(STATUS "stopped as expected (${rc}): ${err}")
