// SPDX-License-Identifier: MIT
// hotpath's version. project(VERSION) in CMakeLists.txt is the one source: configuring
// stops when these disagree with it (cmake/hotpath_version.cmake).
#pragma once

#define HOTPATH_VERSION_MAJOR 0
#define HOTPATH_VERSION_MINOR 1
#define HOTPATH_VERSION_PATCH 0

// One number for #if: 0.1.0 is 100, 1.2.3 is 10203.
#define HOTPATH_VERSION \
  (HOTPATH_VERSION_MAJOR * 10000 + HOTPATH_VERSION_MINOR * 100 + HOTPATH_VERSION_PATCH)
