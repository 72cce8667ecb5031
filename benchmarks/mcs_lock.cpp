// SPDX-License-Identifier: MIT
#include "hotpath/mcs_lock.hpp"

#include "support/lock_bench.hpp"

HOTPATH_LOCK_BENCHMARKS("mcs_lock", hotpath::mcs_lock);
HOTPATH_LOCK_BENCHMARKS("mcs_lock<spin>", hotpath::basic_mcs_lock<hotpath::spin_policy>);
