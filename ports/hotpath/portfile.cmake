# SPDX-License-Identifier: MIT
# An overlay port that builds the hotpath checkout it sits in:
#   vcpkg install hotpath --overlay-ports=<checkout>/ports
# For the vcpkg registry, SOURCE_PATH would come from vcpkg_from_github(REPO hotpath/hotpath
# REF "v${VERSION}" SHA512 <of that tag's tarball>) instead (docs/packaging.md).
set(VCPKG_BUILD_TYPE release) # header-only: one configuration, no debug tree

get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

vcpkg_cmake_configure(
    SOURCE_PATH "${SOURCE_PATH}"
    OPTIONS
        -DHOTPATH_BUILD_TESTS=OFF
        -DHOTPATH_BUILD_BENCHMARKS=OFF
        -DHOTPATH_BUILD_EXAMPLES=OFF
)
vcpkg_cmake_install()
# The package installs its config to share/cmake/hotpath; vcpkg wants share/hotpath.
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/hotpath)
# hotpath.pc says `Libs: -pthread`: vcpkg keeps such a .pc under lib/pkgconfig (only one
# without Libs may live in share/pkgconfig), as curated header-only ports move theirs.
file(MAKE_DIRECTORY "${CURRENT_PACKAGES_DIR}/lib")
file(RENAME "${CURRENT_PACKAGES_DIR}/share/pkgconfig" "${CURRENT_PACKAGES_DIR}/lib/pkgconfig")
vcpkg_fixup_pkgconfig()

# The licence goes to share/hotpath/copyright, not share/doc.
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/share/doc")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
