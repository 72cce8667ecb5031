# SPDX-License-Identifier: MIT
# project(VERSION) is the one place the version is written. include/hotpath/version.hpp
# is checked in (so it installs and works through add_subdirectory and FetchContent with
# no generated file), and configuring stops here when it says anything else.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../include/hotpath/version.hpp" hotpath_version_defines
     REGEX "^#define HOTPATH_VERSION_(MAJOR|MINOR|PATCH) ")
foreach(part MAJOR MINOR PATCH)
  set(hotpath_header_${part} "")
  foreach(line IN LISTS hotpath_version_defines)
    if(line MATCHES "^#define HOTPATH_VERSION_${part} ([0-9]+)$")
      set(hotpath_header_${part} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(NOT hotpath_header_${part} STREQUAL PROJECT_VERSION_${part})
    message(FATAL_ERROR "include/hotpath/version.hpp: HOTPATH_VERSION_${part} is "
                        "'${hotpath_header_${part}}', project(VERSION ${PROJECT_VERSION}) says "
                        "${PROJECT_VERSION_${part}}")
  endif()
  # HOTPATH_VERSION packs minor and patch into two decimal digits each.
  if(NOT part STREQUAL "MAJOR" AND PROJECT_VERSION_${part} GREATER 99)
    message(FATAL_ERROR "HOTPATH_VERSION has two digits for the ${part} version")
  endif()
endforeach()
