// SPDX-License-Identifier: MIT
// version.hpp against project(VERSION), which CMake passes in as HOTPATH_PROJECT_VERSION.
// Through the umbrella header, which must bring the version macros too.
#include <hotpath/hotpath.hpp>

#include <gtest/gtest.h>

#include <cstdio>

TEST(version, macros_match_the_project_version) {
  int major = -1;
  int minor = -1;
  int patch = -1;
  ASSERT_EQ(std::sscanf(HOTPATH_PROJECT_VERSION, "%d.%d.%d", &major, &minor, &patch), 3);
  EXPECT_EQ(HOTPATH_VERSION_MAJOR, major);
  EXPECT_EQ(HOTPATH_VERSION_MINOR, minor);
  EXPECT_EQ(HOTPATH_VERSION_PATCH, patch);
  EXPECT_EQ(HOTPATH_VERSION, major * 10000 + minor * 100 + patch);
}

// A consumer's minimum-version test works in the preprocessor.
#if !defined(HOTPATH_VERSION) || HOTPATH_VERSION < 100
#error "HOTPATH_VERSION is missing or older than 0.1.0"
#endif
