// SPDX-License-Identifier: MIT
// Built with GCC's --param destructive-interference-size=128 (tests/CMakeLists.txt),
// which moves std::hardware_destructive_interference_size from 64 to 128.
#include "build_mode/layout.hpp"

namespace hotpath::test {
type_layout layout_elsewhere() {
  return layout_here();
}
}  // namespace hotpath::test
