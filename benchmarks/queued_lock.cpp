// SPDX-License-Identifier: MIT
#include "hotpath/queued_lock.hpp"

#include "support/lock_bench.hpp"

HOTPATH_LOCK_BENCHMARKS("queued_lock", hotpath::queued_lock);
HOTPATH_LOCK_BENCHMARKS("queued_lock<spin>", hotpath::basic_queued_lock<hotpath::spin_policy>);
