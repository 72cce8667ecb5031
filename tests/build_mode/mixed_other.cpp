// SPDX-License-Identifier: MIT
#include "hotpath/rcu_cell.hpp"

int read_elsewhere(hotpath::rcu_cell<int>& cell) {
  return *cell.read();
}
