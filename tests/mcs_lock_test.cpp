// SPDX-License-Identifier: MIT
#include "hotpath/mcs_lock.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <ranges>
#include <type_traits>

#include "support/lock_suite.hpp"
#include "support/policies.hpp"
#include "support/stress.hpp"

namespace hotpath::test {
namespace {

using mcs_types =
    ::testing::Types<mcs_lock, basic_mcs_lock<spin_policy>, basic_mcs_lock<yield_policy>>;
INSTANTIATE_TYPED_TEST_SUITE_P(mcs, lockable_suite, mcs_types);

static_assert(!std::is_copy_constructible_v<mcs_lock>);
static_assert(!std::is_move_constructible_v<mcs_lock>);
static_assert(sizeof(mcs_lock) == 16);
static_assert(alignof(mcs_lock::node) == cache_line_size);
[[maybe_unused]] constinit mcs_lock constant_initialised;  // constexpr default constructor

std::vector<int> iota_vector(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(McsLock, LockableIsFifo) {
  basic_mcs_lock<announcing_policy<spin_then_park<>>> lock;
  EXPECT_EQ(acquisition_order(lock, 8), iota_vector(8));
}

// The same through explicit nodes, with the waiters parked at once (no spin, no yield).
TEST(McsLock, ExplicitNodesAreFifoAndParked) {
  using lock_type = basic_mcs_lock<announcing_policy<spin_then_park<0, 0>>>;
  lock_type lock;
  std::vector<int> order;
  std::vector<std::thread> pool;
  waiting_threads = 0;
  lock_type::node mine;
  lock.lock(mine);
  for (int i = 0; i < 6; ++i) {
    pool.emplace_back([&, i] {
      lock_type::guard g(lock);
      order.push_back(i);
    });
    ASSERT_TRUE(wait_for_waiters(static_cast<unsigned>(i + 1)));
  }
  lock.unlock(mine);
  for (auto& t : pool)
    t.join();
  EXPECT_EQ(order, iota_vector(6));
}

TEST(McsLock, ExplicitTryLock) {
  mcs_lock lock;
  mcs_lock::node a, b;
  ASSERT_TRUE(lock.try_lock(a));
  EXPECT_TRUE(lock.is_locked());
  bool other = true;
  std::thread([&] { other = lock.try_lock(b); }).join();
  EXPECT_FALSE(other);
  lock.unlock(a);
  EXPECT_FALSE(lock.is_locked());
  ASSERT_TRUE(lock.try_lock(b));
  lock.unlock(b);
}

TEST(McsLock, GuardStress) {
  for (const unsigned threads : {2u, 8u}) {
    mcs_lock lock;
    // stress_lock wants lock()/unlock(): each thread passes its own explicit node.
    struct by_node {
      mcs_lock& l;
      void lock() { l.lock(node()); }
      void unlock() { l.unlock(node()); }
      static mcs_lock::node& node() {
        thread_local mcs_lock::node n;
        return n;
      }
    } adapter{lock};
    const stress_result r = stress_lock(adapter, threads, 20000, std::chrono::milliseconds(300));
    EXPECT_EQ(r.violations, 0u);
    EXPECT_EQ(r.counter, r.total);
  }
}

// A thread holding more mcs_locks than it has inline nodes falls back to the heap.
TEST(McsLock, DeepNestingBeyondInlineNodes) {
  constexpr int kLocks = 40;
  std::vector<mcs_lock> locks(kLocks);
  int sum = 0;
  auto worker = [&] {
    for (int i = 0; i < 200; ++i) {
      for (auto& l : locks) {
        l.lock();
      }
      ++sum;
      // Reverse iterators, not views::reverse: clang 14 cannot compile that with libstdc++ 12.
      for (auto l = locks.rbegin(); l != locks.rend(); ++l) {
        l->unlock();
      }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  EXPECT_EQ(sum, 400);
}

TEST(McsLock, WaitersParkInsteadOfBurningCpu) {
  expect_waiters_park<mcs_lock, basic_mcs_lock<spin_policy>>();
}

}  // namespace
}  // namespace hotpath::test
