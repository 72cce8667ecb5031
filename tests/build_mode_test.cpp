// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>

#include "build_mode/layout.hpp"

namespace hotpath::test {
namespace {

// The types' layout does not move with the compiler's interference-size setting
// (before cache_line_size became a constant, rcu_cell, the RCU domain, MCS nodes and
// percpu slots doubled in the unit built with 128).
TEST(BuildMode, LayoutDoesNotDependOnTheInterferenceSizeSetting) {
  const type_layout here = layout_here(), there = layout_elsewhere();
  EXPECT_EQ(here.cache_line, there.cache_line);
  EXPECT_EQ(here.mcs_node_align, there.mcs_node_align);
  EXPECT_EQ(here.rcu_cell_size, there.rcu_cell_size);
  EXPECT_EQ(here.rcu_domain_size, there.rcu_domain_size);
  EXPECT_EQ(here.percpu_stride, there.percpu_stride);
  EXPECT_EQ(here.percpu_counter_size, there.percpu_counter_size);
  EXPECT_TRUE(here == there);
}

#if defined(__x86_64__)
static_assert(cache_line_size == 64);  // what GCC's default gave, so no layout moved
#endif

}  // namespace
}  // namespace hotpath::test
