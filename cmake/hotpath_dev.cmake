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
# hotpath_find_or_fetch(package name url tag option): find_package(package), else fetch
# `name` from `url` at `tag` with its own `option` (tests, install) turned off.
include(FetchContent)
function(hotpath_find_or_fetch package name url tag option)
  find_package(${package} CONFIG QUIET)
  if(NOT ${package}_FOUND)
    message(STATUS "${name} not installed: fetching it")
    FetchContent_Declare(${name} GIT_REPOSITORY ${url} GIT_TAG ${tag})
    set(${option} OFF CACHE BOOL "" FORCE)
    FetchContent_MakeAvailable(${name})
  endif()
endfunction()
# GoogleTest from a source tree (Debian's googletest package: /usr/src/googletest),
# built for the target: what a cross build takes, whose root has no GTest package.
set(HOTPATH_GTEST_SOURCE "" CACHE PATH "Build GoogleTest from these sources (a cross build)")
if(HOTPATH_BUILD_TESTS AND HOTPATH_GTEST_SOURCE)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(${HOTPATH_GTEST_SOURCE} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  foreach(lib gtest gtest_main)  # GoogleTest 1.12 and older define no GTest:: names
    if(NOT TARGET GTest::${lib})
      add_library(GTest::${lib} ALIAS ${lib})
    endif()
  endforeach()
elseif(HOTPATH_BUILD_TESTS)
  hotpath_find_or_fetch(GTest googletest https://github.com/google/googletest.git v1.14.0
                        INSTALL_GTEST)
endif()
if(HOTPATH_BUILD_BENCHMARKS)
  hotpath_find_or_fetch(benchmark benchmark https://github.com/google/benchmark.git v1.8.3
                        BENCHMARK_ENABLE_TESTING)
endif()

# libpcap, for the defrag example's capture input and output (Debian: libpcap-dev).
# The examples are the main job: without libpcap they fail to configure, loudly; a
# build of the library alone (HOTPATH_BUILD_EXAMPLES=OFF, as vcpkg and Conan) goes on.
find_path(HOTPATH_PCAP_INCLUDE_DIR pcap/pcap.h)
find_library(HOTPATH_PCAP_LIBRARY pcap)
if(HOTPATH_PCAP_INCLUDE_DIR AND HOTPATH_PCAP_LIBRARY)
  add_library(hotpath_pcap INTERFACE IMPORTED)
  target_include_directories(hotpath_pcap INTERFACE ${HOTPATH_PCAP_INCLUDE_DIR})
  target_link_libraries(hotpath_pcap INTERFACE ${HOTPATH_PCAP_LIBRARY})
elseif(HOTPATH_BUILD_EXAMPLES)
  message(FATAL_ERROR "libpcap not found: hotpath-defrag (an example, and the main job) needs it.\n"
                      "Install it with scripts/setup (Debian and Ubuntu: libpcap-dev; the aarch64 "
                      "preset: scripts/setup ci, libpcap-dev:arm64), or build without the "
                      "examples: -DHOTPATH_BUILD_EXAMPLES=OFF.")
endif()

# How a cross build runs the target's programs from a script (the scripts split it
# back at `|`); empty on a native build.
string(REPLACE ";" "|" hotpath_emulator "${CMAKE_CROSSCOMPILING_EMULATOR}")
