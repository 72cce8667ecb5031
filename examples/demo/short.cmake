# SPDX-License-Identifier: MIT
# example.demo.short: the demo's steps (cmake/hotpath_demo.cmake) in miniature, then its
# summary, which must name every primitive and program and find the defragmenter exact.
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN}: exit ${rc}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
step(${QDISC} --duration 0.02 --repeat 1 --senders 1,8 --json ${DIR}/qdisc.json)
step(${SKBEDIT} --ms 10 --repeat 1 --threads 2 --json ${DIR}/act_skbedit.json)
step(${DEFRAG} ${CAPTURE} --threads 2 --repeat 1 --expect ${EXPECTED} --json ${DIR}/defrag.json)
step(${DEFRAG} --synthetic --flood 10 --datagrams 100 --json ${DIR}/flood.json)
step(${BENCH} --benchmark_min_time=0.001
     "--benchmark_filter=${FILTER}"
     --benchmark_out=${DIR}/bench.json --benchmark_out_format=json)
step(${SUMMARY} ${DIR})
message("${out}")
foreach(want "queued_lock +uncontended [0-9.]+x a test-and-set lock; 2 threads [0-9.]+x std::mutex; 8 threads"
        "priority_lock " "mcs_lock " "ticket_lock " "percpu_counter +2 threads" "rcu_cell +2 threads"
        "bucket_table +2 threads" "qdisc +8 senders: priority_lock delivers [0-9.]+x busylock"
        "act_skbedit +2 threads" "defrag +51 of 51 datagrams exactly as Linux delivered them; 2 workers"
        "defrag flood +10 bogus")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "the summary has no line matching '${want}'")
  endif()
endforeach()
