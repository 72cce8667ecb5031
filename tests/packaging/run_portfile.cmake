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

# As vcpkg's: every .pc made relative to where it lies (prefix=${pcfiledir}/../..), then
# read by pkg-config, which must accept it.
function(vcpkg_fixup_pkgconfig)
  file(GLOB_RECURSE pc_files "${CURRENT_PACKAGES_DIR}/*.pc")
  if(NOT pc_files)
    message(FATAL_ERROR "vcpkg_fixup_pkgconfig: the package installs no .pc file")
  endif()
  foreach(pc IN LISTS pc_files)
    file(READ "${pc}" text)
    string(REPLACE "${CURRENT_PACKAGES_DIR}" [[${prefix}]] text "${text}")
    string(REGEX REPLACE "(^|\n) *prefix[\t ]*=[^\n]*" "" text "${text}")
    file(WRITE "${pc}" "prefix=\${pcfiledir}/../..\n${text}")
    get_filename_component(dir "${pc}" DIRECTORY)
    get_filename_component(name "${pc}" NAME_WE)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${dir}"
                            pkg-config --print-errors --exists ${name}
                    RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "vcpkg_fixup_pkgconfig: pkg-config refuses ${pc}: ${err}")
    endif()
  endforeach()
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

# vcpkg's post-build checks that apply to a header-only port (vcpkg-tool,
# src/vcpkg/postbuildlint.cpp): each failure says what vcpkg would warn about.
set(hotpath_lint_failures "")
macro(lint what)
  string(APPEND hotpath_lint_failures "  ${what}\n")
endmacro()
set(pkg "${CURRENT_PACKAGES_DIR}")

# A .pc with a Libs line (any `Libs...:` with a value) only under lib/pkgconfig or
# debug/lib/pkgconfig; one without, also under share/pkgconfig.
file(GLOB_RECURSE pcs RELATIVE "${pkg}" "${pkg}/*.pc")
foreach(pc IN LISTS pcs)
  get_filename_component(dir "${pc}" DIRECTORY)
  if(dir STREQUAL "lib/pkgconfig" OR dir STREQUAL "debug/lib/pkgconfig")
    continue()
  endif()
  file(STRINGS "${pkg}/${pc}" libs REGEX "^Libs[^:]*: *[^ ]")
  if(libs OR NOT dir STREQUAL "share/pkgconfig")
    lint("misplaced pkgconfig file ${pc}: one with a Libs line belongs in lib/pkgconfig")
  endif()
endforeach()

# No empty directories, anywhere.
file(GLOB_RECURSE dirs LIST_DIRECTORIES true RELATIVE "${pkg}" "${pkg}/*")
foreach(d IN LISTS dirs)
  if(IS_DIRECTORY "${pkg}/${d}")
    file(GLOB entries "${pkg}/${d}/*")
    if(NOT entries)
      lint("empty directory ${d}")
    endif()
  endif()
endforeach()

# No absolute path of the build machine (the package, the build tree, the sources)
# in the files vcpkg reads: headers, CMake, pkg-config, scripts, usage. (vcpkg skips
# comments; this does not, which is stricter.)
file(GLOB_RECURSE files RELATIVE "${pkg}" "${pkg}/*")
foreach(f IN LISTS files)
  get_filename_component(name "${f}" NAME)
  get_filename_component(ext "${f}" LAST_EXT)
  if(NOT ext MATCHES "^\\.(h|hpp|hxx|cfg|ini|py|sh|cmake|pc|conf|csh|pl)$" AND NOT name STREQUAL "usage")
    continue()
  endif()
  file(READ "${pkg}/${f}" text)
  foreach(root "${pkg}" "${WORK_DIR}" "${SOURCE_PATH}")
    string(FIND "${text}" "${root}" at)
    if(NOT at EQUAL -1)
      lint("absolute path ${root} in ${f}")
    endif()
  endforeach()
endforeach()

# The licence as share/<port>/copyright (a file); the port's usage installed beside it.
if(NOT EXISTS "${pkg}/share/${PORT}/copyright" OR IS_DIRECTORY "${pkg}/share/${PORT}/copyright")
  lint("no licence file share/${PORT}/copyright")
endif()
if(EXISTS "${PORT_DIR}/usage" AND (NOT EXISTS "${pkg}/share/${PORT}/usage"
                                   OR IS_DIRECTORY "${pkg}/share/${PORT}/usage"))
  lint("the port has a usage file but does not install it to share/${PORT}/usage")
endif()

# Headers in include/ (not empty), none in debug/include.
file(GLOB_RECURSE headers "${pkg}/include/*")
if(NOT headers)
  lint("include/ is empty or missing")
endif()
if(EXISTS "${pkg}/debug/include" OR EXISTS "${pkg}/debug/share")
  lint("debug/include or debug/share installed")
endif()

# CMake files only in share/<port>: none under cmake/, lib/cmake/ or their debug/ twins.
foreach(d cmake debug/cmake lib/cmake debug/lib/cmake)
  if(EXISTS "${pkg}/${d}")
    lint("CMake files in ${d}/, where vcpkg does not expect them")
  endif()
endforeach()

# No regular file at the package's top or in debug/; no libraries or programs at all
# (a header-only port); lib/ only for lib/pkgconfig; the docs go as copyright.
file(GLOB top LIST_DIRECTORIES false RELATIVE "${pkg}" "${pkg}/*" "${pkg}/debug/*")
foreach(f IN LISTS top)
  lint("regular file ${f} at the top of the package")
endforeach()
file(GLOB lib_entries RELATIVE "${pkg}/lib" "${pkg}/lib/*")
list(REMOVE_ITEM lib_entries pkgconfig)
if(lib_entries)
  lint("lib/ holds ${lib_entries}: a header-only port installs only lib/pkgconfig there")
endif()
foreach(d bin debug/bin debug/lib share/doc)
  if(EXISTS "${pkg}/${d}")
    lint("a header-only port leaves no ${d}/")
  endif()
endforeach()

if(hotpath_lint_failures)
  message(FATAL_ERROR "vcpkg's post-build checks would warn:\n${hotpath_lint_failures}")
endif()
