// SPDX-License-Identifier: MIT
#include "hotpath/ticket_lock.hpp"

#include "support/lock_bench.hpp"

HOTPATH_LOCK_BENCHMARKS("ticket_lock", hotpath::ticket_lock);
HOTPATH_LOCK_BENCHMARKS("ticket_lock<spin>", hotpath::basic_ticket_lock<hotpath::spin_policy>);
