# SPDX-License-Identifier: MIT
# The Debian package, libhotpath-dev (headers, CMake package, pkg-config file), built with
#   cmake -S . -B build/deb -DCMAKE_INSTALL_PREFIX=/usr -DHOTPATH_BUILD_TESTS=OFF ...
#   cpack --config build/deb/CPackConfig.cmake -G DEB -B build/deb
# The package installs where the build was configured to, so hotpath.pc's prefix and the
# files agree; a Debian package wants CMAKE_INSTALL_PREFIX=/usr.
set(CPACK_PACKAGE_NAME libhotpath-dev)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR hotpath)
set(CPACK_PACKAGE_CONTACT "hotpath maintainers <hotpath@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION} (header-only C++20)")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "Header-only C++20 concurrency primitives from the Linux networking stack: ticket, MCS, "
    "queued and priority locks, per-cpu counters and RCU-style configuration cells. Provides "
    "the hotpath::hotpath CMake target and the hotpath pkg-config module.")
set(CPACK_PACKAGE_HOMEPAGE_URL "${PROJECT_HOMEPAGE_URL}")
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE")
set(CPACK_PACKAGING_INSTALL_PREFIX "${CMAKE_INSTALL_PREFIX}")

set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

# Debian wants the licence as /usr/share/doc/<package>/copyright: a component of its
# own, left out of plain installs; the .deb takes it instead of share/doc/hotpath.
install(FILES LICENSE DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/${CPACK_PACKAGE_NAME}"
        RENAME copyright COMPONENT hotpath_deb EXCLUDE_FROM_ALL)
set(CPACK_HOTPATH_DEB_PROJECTS "${PROJECT_BINARY_DIR};hotpath;hotpath;/"
                               "${PROJECT_BINARY_DIR};hotpath;hotpath_deb;/")
set(CPACK_PROJECT_CONFIG_FILE "${CMAKE_CURRENT_LIST_DIR}/hotpath_cpack_generator.cmake")
include(CPack)
