// SPDX-License-Identifier: MIT
// A program of two translation units built in different modes (mixed_other.cpp with
// HOTPATH_NO_MEMBARRIER, or HOTPATH_LOCK_STATS=1): it must stop at load with hotpath's
// message, not run.
#include <cstdio>

#include "hotpath/rcu_cell.hpp"

int read_elsewhere(hotpath::rcu_cell<int>& cell);

int main() {
  hotpath::rcu_cell<int> cell(1);
  std::printf("ran mixed: %d\n", read_elsewhere(cell) + *cell.read());
  return 0;
}
