# SPDX-License-Identifier: MIT
# example.defrag.tshark_reads_output: Wireshark's tshark reads what hotpath-defrag wrote
# and finds UDP in it. Without tshark it says SKIP, which ctest reports as skipped.
# cmake -DTSHARK=<path or NOTFOUND> -DCAPTURE=<pcap> -P tshark_reads.cmake
if(NOT TSHARK OR NOT EXISTS "${TSHARK}")
  message("SKIP: tshark not found (Debian: tshark; scripts/setup tests installs it)")
  return()
endif()
execute_process(COMMAND "${TSHARK}" -r "${CAPTURE}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tshark -r ${CAPTURE} failed (${rc}): ${err}")
endif()
string(REGEX MATCHALL "UDP" udp "${out}")
list(LENGTH udp n)
if(n EQUAL 0)
  message(FATAL_ERROR "tshark read ${CAPTURE} but found no UDP datagram:\n${out}")
endif()
message("tshark read ${n} UDP datagrams from ${CAPTURE}")
