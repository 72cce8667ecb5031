# SPDX-License-Identifier: MIT
# Runs ports/hotpath/portfile.cmake without vcpkg (which CI cannot install): vcpkg's
# helpers become stand-ins that configure and install for real, with exactly the
# arguments the portfile gives them, and check what vcpkg would check. What vcpkg itself
# adds (its toolchain, moving the config to share/hotpath and fixing its prefix) is not
# tried; the config is left where CONFIG_PATH says it is, and that is checked.
#   cmake -DPORT_DIR=ports/hotpath -DCURRENT_PACKAGES_DIR=<fresh prefix> -DWORK_DIR=<dir>
#         -P tests/packaging/run_portfile.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var PORT_DIR CURRENT_PACKAGES_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_portfile.cmake: set ${var}")
  endif()
endforeach()
if(EXISTS "${CURRENT_PACKAGES_DIR}")
  message(FATAL_ERROR "${CURRENT_PACKAGES_DIR} exists: the port must install into a fresh prefix")
endif()

# What vcpkg defines before it runs a portfile.
file(READ "${PORT_DIR}/vcpkg.json" manifest)
string(JSON PORT GET "${manifest}" name)
string(JSON VERSION GET "${manifest}" version)
set(CURRENT_BUILDTREES_DIR "${WORK_DIR}")
set(hotpath_stub_log "${WORK_DIR}/portfile-calls.txt")
file(WRITE "${hotpath_stub_log}" "")

function(vcpkg_cmake_configure)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "SOURCE_PATH" "OPTIONS;OPTIONS_RELEASE;OPTIONS_DEBUG")
  if(NOT VCPKG_BUILD_TYPE STREQUAL "release")
    message(FATAL_ERROR "a header-only port builds release only: set(VCPKG_BUILD_TYPE release)")
  endif()
  # vcpkg fails a port whose options the project ignores; so does this.
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${arg_SOURCE_PATH}" -B "${WORK_DIR}/build" -G Ninja
            -DCMAKE_BUILD_TYPE=Release "-DCMAKE_INSTALL_PREFIX=${CURRENT_PACKAGES_DIR}"
            ${arg_OPTIONS} ${arg_OPTIONS_RELEASE}
    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR err MATCHES "Manually-specified variables were not used")
    message(FATAL_ERROR "vcpkg_cmake_configure: ${err}")
  endif()
  foreach(option IN LISTS arg_OPTIONS arg_OPTIONS_RELEASE)
    file(APPEND "${hotpath_stub_log}" "option ${option}\n")
  endforeach()
endfunction()

function(vcpkg_cmake_install)
  execute_process(COMMAND "${CMAKE_COMMAND}" --install "${WORK_DIR}/build" OUTPUT_QUIET
                  COMMAND_ERROR_IS_FATAL ANY)
endfunction()

function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "PACKAGE_NAME;CONFIG_PATH" "")
  if(NOT arg_PACKAGE_NAME)
    set(arg_PACKAGE_NAME "${PORT}")
  endif()
  if(NOT arg_CONFIG_PATH)
    set(arg_CONFIG_PATH "share/${arg_PACKAGE_NAME}")
  endif()
  if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/${arg_CONFIG_PATH}/${arg_PACKAGE_NAME}Config.cmake")
    message(FATAL_ERROR "vcpkg_cmake_config_fixup: no ${arg_PACKAGE_NAME}Config.cmake in "
                        "${arg_CONFIG_PATH}, where the portfile says the package puts it")
  endif()
  file(APPEND "${hotpath_stub_log}" "config ${arg_CONFIG_PATH}\n")
endfunction()

function(vcpkg_fixup_pkgconfig)
  file(GLOB pc_files "${CURRENT_PACKAGES_DIR}/share/pkgconfig/*.pc"
       "${CURRENT_PACKAGES_DIR}/lib/pkgconfig/*.pc")
  if(NOT pc_files)
    message(FATAL_ERROR "vcpkg_fixup_pkgconfig: the package installs no .pc file")
  endif()
endfunction()

function(vcpkg_install_copyright)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "" "FILE_LIST")
  list(LENGTH arg_FILE_LIST n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "vcpkg_install_copyright: expected the one LICENSE, got ${arg_FILE_LIST}")
  endif()
  file(INSTALL "${arg_FILE_LIST}" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}"
       RENAME copyright)
endfunction()

include("${PORT_DIR}/portfile.cmake")

# What vcpkg's post-build checks would look for in a header-only port.
foreach(f "share/${PORT}/copyright" "share/${PORT}/usage" "include/hotpath/hotpath.hpp")
  if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/${f}")
    message(FATAL_ERROR "the port installs no ${f}")
  endif()
endforeach()
foreach(d bin lib debug share/doc)
  if(EXISTS "${CURRENT_PACKAGES_DIR}/${d}")
    message(FATAL_ERROR "a header-only port must leave no ${d}/")
  endif()
endforeach()
