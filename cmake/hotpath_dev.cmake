# SPDX-License-Identifier: MIT
# Warnings, sanitizers and third-party test libraries for hotpath's own build.

set(HOTPATH_SANITIZE "" CACHE STRING "Sanitizers for tests and examples: thread, or address,undefined")

add_library(hotpath_dev_options INTERFACE)
target_compile_options(hotpath_dev_options INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                       -Wconversion -Wno-sign-conversion)
if(HOTPATH_SANITIZE)
  target_compile_options(hotpath_dev_options INTERFACE -fsanitize=${HOTPATH_SANITIZE}
                         -fno-omit-frame-pointer -g)
  target_link_options(hotpath_dev_options INTERFACE -fsanitize=${HOTPATH_SANITIZE})
  if(HOTPATH_SANITIZE MATCHES "undefined")
    target_compile_options(hotpath_dev_options INTERFACE -fno-sanitize-recover=undefined)
  endif()
endif()

# The installed packages first; FetchContent only where they are missing.
include(FetchContent)
if(HOTPATH_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  if(NOT GTest_FOUND)
    message(STATUS "GoogleTest not installed: fetching it")
    FetchContent_Declare(googletest GIT_REPOSITORY https://github.com/google/googletest.git
                         GIT_TAG v1.14.0)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    FetchContent_MakeAvailable(googletest)
  endif()
endif()
if(HOTPATH_BUILD_BENCHMARKS)
  find_package(benchmark CONFIG QUIET)
  if(NOT benchmark_FOUND)
    message(STATUS "Google Benchmark not installed: fetching it")
    FetchContent_Declare(benchmark GIT_REPOSITORY https://github.com/google/benchmark.git
                         GIT_TAG v1.8.3)
    set(BENCHMARK_ENABLE_TESTING OFF CACHE BOOL "" FORCE)
    FetchContent_MakeAvailable(benchmark)
  endif()
endif()

# libpcap, for the defrag example's capture input and output (Debian: libpcap-dev).
# Without it, hotpath-defrag and its tests are left out.
find_path(HOTPATH_PCAP_INCLUDE_DIR pcap/pcap.h)
find_library(HOTPATH_PCAP_LIBRARY pcap)
if(HOTPATH_PCAP_INCLUDE_DIR AND HOTPATH_PCAP_LIBRARY)
  add_library(hotpath_pcap INTERFACE IMPORTED)
  target_include_directories(hotpath_pcap INTERFACE ${HOTPATH_PCAP_INCLUDE_DIR})
  target_link_libraries(hotpath_pcap INTERFACE ${HOTPATH_PCAP_LIBRARY})
else()
  message(STATUS "libpcap not found: hotpath-defrag and its tests are not built")
endif()
