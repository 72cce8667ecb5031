// SPDX-License-Identifier: MIT
// Baselines that every lock benchmark is read against.
#include <mutex>

#include "support/lock_bench.hpp"

HOTPATH_LOCK_BENCHMARKS("std::mutex", std::mutex);
HOTPATH_LOCK_BENCHMARKS("tas", hotpath::bench::tas_lock);
