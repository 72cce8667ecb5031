// SPDX-License-Identifier: MIT
// The layout of types that objects built differently may share, as seen by one
// translation unit: layout_here() has internal linkage, so each unit that calls it
// computes its own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hotpath/mcs_lock.hpp"
#include "hotpath/percpu.hpp"
#include "hotpath/percpu_counter.hpp"
#include "hotpath/rcu.hpp"
#include "hotpath/rcu_cell.hpp"

namespace hotpath::test {

struct type_layout {
  std::size_t cache_line, mcs_node_align, rcu_cell_size, rcu_domain_size, percpu_stride,
      percpu_counter_size;
  bool operator==(const type_layout&) const = default;
};

namespace {
type_layout layout_here() {
  return {cache_line_size,    alignof(mcs_lock::node),       sizeof(rcu_cell<int>),
          sizeof(rcu_domain), percpu<std::uint32_t>::stride, sizeof(percpu_counter<>)};
}
}  // namespace

// From tests/build_mode/elsewhere.cpp, built with another interference-size setting.
type_layout layout_elsewhere();

}  // namespace hotpath::test
