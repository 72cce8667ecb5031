// SPDX-License-Identifier: MIT
// The cpus a test may move its threads between.
#pragma once

#include <sched.h>

#include <vector>

namespace hotpath::test {

// The cpus this process may run on (its affinity mask).
inline std::vector<unsigned> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<unsigned> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

}  // namespace hotpath::test
