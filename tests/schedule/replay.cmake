# SPDX-License-Identifier: MIT
# A seed reruns alone exactly as it ran in turn: run PROGRAM's PROPERTY over SEEDS
# seeds printing each schedule's hash, then rerun a few of them one at a time
# (HOTPATH_SCHEDULE_SEED) and compare the hashes.
# EMULATOR: how a cross build runs its programs (CMAKE_CROSSCOMPILING_EMULATOR, its
# list separators written as `|`), or empty.
string(REPLACE "|" ";" emulator "${EMULATOR}")
execute_process(COMMAND ${emulator} ${PROGRAM} --property ${PROPERTY} --seeds ${SEEDS} --hashes
                OUTPUT_VARIABLE all RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --property ${PROPERTY} failed:\n${all}")
endif()
foreach(seed 1 2 ${SEEDS})
  string(REGEX MATCH "seed ${seed} hash [0-9a-f]+" in_turn "${all}")
  set(ENV{HOTPATH_SCHEDULE_SEED} ${seed})
  execute_process(COMMAND ${emulator} ${PROGRAM} --property ${PROPERTY} --hashes OUTPUT_VARIABLE one
                  RESULT_VARIABLE rc)
  string(REGEX MATCH "seed ${seed} hash [0-9a-f]+" alone "${one}")
  if(NOT rc EQUAL 0 OR in_turn STREQUAL "" OR NOT in_turn STREQUAL alone)
    message(FATAL_ERROR "seed ${seed}: in turn '${in_turn}', alone '${alone}' (rc ${rc})")
  endif()
  message(STATUS "seed ${seed}: ${alone} both ways")
endforeach()
