# SPDX-License-Identifier: MIT
# `cmake --build --preset release --target demo`: the main job, a short run of what
# hotpath is for, on this machine, with every figure beside its baseline. Each program
# also writes its figures into demo/ of the build tree; hotpath-demo-summary ends the
# run with one screen of them. A step that fails (a lost packet, a datagram Linux would
# not have delivered) fails the demo.
if(NOT HOTPATH_BUILD_EXAMPLES OR NOT HOTPATH_BUILD_BENCHMARKS)
  return()  # the library alone (vcpkg, Conan): nothing to run
endif()
set(dir ${PROJECT_BINARY_DIR}/demo)
add_custom_target(
  demo
  COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
  COMMAND $<TARGET_FILE:hotpath-quickstart>
  COMMAND $<TARGET_FILE:hotpath-qdisc> --json ${dir}/qdisc.json
  COMMAND $<TARGET_FILE:hotpath-act-skbedit> --json ${dir}/act_skbedit.json
  # The defragmenter on the kernel-judged capture, judged against what Linux delivered,
  # then a short flood: 10 bogus fragments per legit one, the default 4 MiB budget.
  COMMAND $<TARGET_FILE:hotpath-defrag> ${HOTPATH_DEFRAG_CAPTURE} --threads 2 --repeat 21
          --expect ${HOTPATH_DEFRAG_EXPECTED} -w ${dir}/kernel-seed1.defrag.pcap
          --json ${dir}/defrag.json
  COMMAND $<TARGET_FILE:hotpath-defrag> --synthetic --flood 10 --datagrams 1000 --repeat 3
          --json ${dir}/flood.json
  COMMAND $<TARGET_FILE:hotpath-bench> --benchmark_min_time=0.1 --benchmark_filter=${HOTPATH_DEMO_FILTER}
          --benchmark_out=${dir}/bench.json --benchmark_out_format=json
  COMMAND $<TARGET_FILE:hotpath-demo-summary> ${dir}
  USES_TERMINAL VERBATIM
  COMMENT "hotpath demo: the qdisc and act_skbedit experiments, the defragmenter, the primitives against their baselines")
