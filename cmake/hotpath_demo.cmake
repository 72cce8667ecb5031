# SPDX-License-Identifier: MIT
# `cmake --build --preset release --target demo`: the main job, a short run of what
# hotpath is for, on this machine, with every figure beside its baseline.
set(hotpath_demo_commands)
if(TARGET hotpath-quickstart)
  list(APPEND hotpath_demo_commands COMMAND $<TARGET_FILE:hotpath-quickstart>)
endif()
if(TARGET hotpath-qdisc)
  list(APPEND hotpath_demo_commands COMMAND $<TARGET_FILE:hotpath-qdisc>)
endif()
if(TARGET hotpath-act-skbedit)
  list(APPEND hotpath_demo_commands COMMAND $<TARGET_FILE:hotpath-act-skbedit>)
endif()
if(TARGET hotpath-defrag)
  # The defragmenter on the kernel-judged capture (output beside the build), then a
  # short flood: 10 bogus fragments per legit one, the default 4 MiB budget.
  list(APPEND hotpath_demo_commands
       COMMAND $<TARGET_FILE:hotpath-defrag> ${HOTPATH_DEFRAG_CAPTURE} --threads 2 --repeat 21
               -w ${PROJECT_BINARY_DIR}/kernel-seed1.defrag.pcap
       COMMAND $<TARGET_FILE:hotpath-defrag> --synthetic --flood 10 --datagrams 1000 --repeat 3)
endif()
if(TARGET hotpath-bench)
  list(APPEND hotpath_demo_commands
       COMMAND $<TARGET_FILE:hotpath-bench> --benchmark_min_time=0.1
               "--benchmark_filter=^uncontended/|^contended/.*/threads:(1|2|8)/")
endif()
# Nothing to run when the examples and benchmarks are off (the vcpkg and Conan builds).
if(hotpath_demo_commands)
  add_custom_target(demo ${hotpath_demo_commands} USES_TERMINAL VERBATIM
                    COMMENT "hotpath demo: locks against std::mutex and test-and-set, the qdisc and act_skbedit experiments, the defragmenter")
endif()
