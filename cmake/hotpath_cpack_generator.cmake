# SPDX-License-Identifier: MIT
# Read by cpack once per generator: the .deb installs the hotpath and hotpath_deb
# components (its copyright file instead of share/doc/hotpath/LICENSE).
if(CPACK_GENERATOR STREQUAL "DEB")
  set(CPACK_INSTALL_CMAKE_PROJECTS ${CPACK_HOTPATH_DEB_PROJECTS})
endif()
