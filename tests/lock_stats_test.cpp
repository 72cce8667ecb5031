// SPDX-License-Identifier: MIT
// queued_lock's and priority_lock's path counters (detail/lock_stats.hpp), built with
// HOTPATH_LOCK_STATS=1 (tests/CMakeLists.txt): every acquisition is counted exactly
// once, and the paths a scenario forces are the ones counted.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "hotpath/priority_lock.hpp"
#include "hotpath/queued_lock.hpp"
#include "support/policies.hpp"
#include "support/stress.hpp"

static_assert(hotpath::detail::lock_stats_enabled, "built with HOTPATH_LOCK_STATS=1");

namespace hotpath::test {
namespace {

lock_stats operator-(const lock_stats& a, const lock_stats& b) {
  return {a.fast - b.fast,
          a.stolen - b.stolen,
          a.pending - b.pending,
          a.queued - b.queued,
          a.handed_off - b.handed_off,
          a.overflow - b.overflow,
          a.privileged - b.privileged,
          a.parked - b.parked};
}

// The owner holds the lock while two threads line up: the first as the pending
// owner, the second queued on a node (or, with no slot to be had, as an overflow
// waiter). Three acquisitions, one per path.
template <class Lock>
lock_stats three_paths() {
  Lock lock;
  waiting_threads = 0;
  const lock_stats before = read_lock_stats();
  lock.lock();  // fast
  std::vector<std::thread> pool;
  for (unsigned i = 1; i <= 2; ++i) {
    pool.emplace_back([&] {
      lock.lock();
      lock.unlock();
    });
    EXPECT_TRUE(wait_for_waiters(i));
  }
  lock.unlock();
  for (auto& t : pool)
    t.join();
  return read_lock_stats() - before;
}

TEST(LockStats, PendingAndQueuedWaitersEachCountOnce) {
  const lock_stats d = three_paths<basic_queued_lock<announcing_policy<spin_then_park<>>>>();
  EXPECT_EQ(d.acquisitions(), 3u);
  EXPECT_EQ(d.fast, 1u);
  EXPECT_EQ(d.pending + d.queued + d.handed_off, 2u);
  EXPECT_EQ(d.stolen + d.overflow + d.privileged, 0u);
}

TEST(LockStats, AWaiterWithoutASlotCountsAsOverflow) {
  auto& registry = detail::thread_slot_registry::instance();
  const std::uint32_t old_limit = registry.limit();
  registry.set_limit(registry.live());  // new threads get no slot
  const lock_stats d = three_paths<basic_queued_lock<announcing_policy<spin_then_park<>>>>();
  registry.set_limit(old_limit);
  EXPECT_EQ(d.acquisitions(), 3u);
  EXPECT_EQ(d.fast, 1u);
  EXPECT_EQ(d.overflow, 1u);  // the second waiter: no slot, so no node
  EXPECT_EQ(d.pending + d.handed_off, 1u);
}

// Under stress, ordinary and privileged, lock() and try_lock(): the counted
// acquisitions are exactly the sections entered.
template <class Lock, bool Privileged>
void counts_balance() {
  Lock lock;
  std::uint64_t sections = 0;  // guarded by the lock
  const lock_stats before = read_lock_stats();
  start_gate gate(Privileged ? 5 : 4, std::chrono::seconds(1));
  auto worker = [&](unsigned id) {
    gate.arrive_and_wait();
    for (int i = 0; i < 20000 && (i == 0 || !gate.expired()); ++i) {
      if constexpr (Privileged) {
        if (id == 0) {
          lock.lock_priority();
          ++sections;
          lock.unlock();
          continue;
        }
      }
      if (i % 4 == 3) {
        if (!lock.try_lock()) continue;
      } else {
        lock.lock();
      }
      ++sections;
      lock.unlock();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < (Privileged ? 5u : 4u); ++t)
    pool.emplace_back(worker, t);
  for (auto& t : pool)
    t.join();
  const lock_stats d = read_lock_stats() - before;
  std::printf(
      "fast %llu stolen %llu pending %llu queued %llu handed_off %llu overflow %llu "
      "privileged %llu parked %llu\n",
      static_cast<unsigned long long>(d.fast), static_cast<unsigned long long>(d.stolen),
      static_cast<unsigned long long>(d.pending), static_cast<unsigned long long>(d.queued),
      static_cast<unsigned long long>(d.handed_off), static_cast<unsigned long long>(d.overflow),
      static_cast<unsigned long long>(d.privileged), static_cast<unsigned long long>(d.parked));
  EXPECT_EQ(d.acquisitions(), sections);
  EXPECT_GT(sections, 0u);
  if (!Privileged) {
    EXPECT_EQ(d.privileged, 0u);
  }
}

TEST(LockStats, CountsBalanceQueuedLock) {
  counts_balance<queued_lock, false>();
  counts_balance<basic_queued_lock<spin_policy>, false>();
}
TEST(LockStats, CountsBalancePriorityLock) {
  counts_balance<priority_lock, true>();
  counts_balance<fifo_priority_lock, true>();
}

}  // namespace
}  // namespace hotpath::test
