// SPDX-License-Identifier: MIT
// priority_lock: the Lockable suite, FIFO on the ordinary side, mutual exclusion across
// both sides, cede, standard guards; its bounds are in priority_lock_bound_test.cpp.
#include "hotpath/priority_lock.hpp"

#include "hotpath/queued_lock.hpp"

#include <gtest/gtest.h>

#include <pthread.h>

#include <condition_variable>
#include <csignal>
#include <mutex>
#include <type_traits>
#include <utility>

#include "support/lock_suite.hpp"
#include "support/lock_test_access.hpp"
#include "support/next_owner_frees.hpp"
#include "support/policies.hpp"
#include "support/signals.hpp"
#include "support/stress.hpp"

namespace hotpath::test {
namespace {

using priority_types = ::testing::Types<priority_lock, basic_priority_lock<spin_policy>,
                                        basic_priority_lock<yield_policy>, fifo_priority_lock>;

INSTANTIATE_TYPED_TEST_SUITE_P(priority, lockable_suite, priority_types);

static_assert(!std::is_copy_constructible_v<priority_lock>);
static_assert(sizeof(priority_lock) == 4);
[[maybe_unused]] constinit priority_lock constant_initialised;  // constexpr default constructor

// The next owner may free the lock while the unlock() that released it returns
// (support/next_owner_frees.hpp), through the ordinary side, FIFO or not.
TEST(PriorityLock, NextOwnerMayFreeTheLockAtOnce) {
  next_owner_frees_the_lock<basic_priority_lock<destroy::policy>>();
  next_owner_frees_the_lock<basic_priority_lock<destroy::policy, true>>();
}

TEST(PriorityLock, PrivilegedViewWorksWithScopedLock) {
  priority_lock l;
  {
    std::scoped_lock g(l.privileged());
    EXPECT_TRUE(l.is_locked());
    bool other = true;
    std::thread([&] { other = l.try_lock(); }).join();
    EXPECT_FALSE(other);
  }
  EXPECT_FALSE(l.is_locked());
  ASSERT_TRUE(l.try_lock_priority());
  EXPECT_FALSE(l.try_lock());
  l.unlock();
}

TEST(PriorityLock, OrdinarySideIsFifo) {
  basic_priority_lock<announcing_policy<spin_then_park<>>, true> lock;
  std::vector<int> expected(8);
  for (int i = 0; i < 8; ++i)
    expected[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(acquisition_order(lock, 8), expected);
}

// A signal ending the sleep of the gate's pending owner (waiter 1; waiter 0 holds
// the gate and waits on the owner word) must not send it behind later arrivals.
TEST(PriorityLock, OrdinarySideStaysFifoWhenAWaiterIsSignalled) {
  basic_priority_lock<announcing_policy<spin_then_park<>>, true> lock;
  EXPECT_EQ(acquisition_order(lock, 4, 1), (std::vector<int>{0, 1, 2, 3}));
}

#if !defined(NDEBUG) && !HOTPATH_TSAN

// A second privileged request while the first holds the lock trips the assertion.
TEST(PriorityLockDeathTest, SecondPrivilegedUserAsserts) {
  EXPECT_DEATH(
      {
        priority_lock l;
        l.lock_priority();
        l.lock_priority();
      },
      "privileged side");
}
#endif

// Ordinary threads and the privileged thread alternating: mutual exclusion holds
// across both sides. One `inside` check and one counter for both, so an ordinary
// and a privileged section overlapping is seen.
TEST(PriorityLock, MutualExclusionAcrossBothSides) {
  priority_lock l;
  std::uint64_t counter = 0;
  std::atomic<int> inside{0};  // atomic so the compiler cannot fold the check away
  std::atomic<std::uint64_t> violations{0}, ops{0};
  std::atomic<bool> stop{false};
  auto section = [&] {
    if (inside.fetch_add(1, std::memory_order_relaxed) != 0)
      violations.fetch_add(1, std::memory_order_relaxed);
    ++counter;
    inside.fetch_sub(1, std::memory_order_relaxed);
    l.unlock();
    ops.fetch_add(1, std::memory_order_relaxed);
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  // Runs until the ordinary threads are done, so the two sides really interleave.
  std::thread prio([&] {
    for (int i = 0; i < 1000000 && !stop.load(std::memory_order_relaxed); ++i) {
      l.lock_priority();
      section();
    }
  });
  std::vector<std::thread> pool;
  for (int t = 0; t < 6; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (i > 0 && std::chrono::steady_clock::now() > deadline) break;
        l.lock();
        section();
      }
    });
  }
  for (auto& t : pool)
    t.join();
  stop = true;
  prio.join();
  EXPECT_EQ(violations.load(), 0u);
  EXPECT_EQ(counter, ops.load());
}

// cede(): an ordinary owner in a long section lets a pending privileged section run
// and keeps the lock: no ordinary waiter gets in meanwhile, and the privileged
// section runs while the owner's section is paused, not ended.
TEST(PriorityLock, CedeLetsThePrivilegedSectionInAndKeepsTheLock) {
  priority_lock l;
  int ordinary_in = 0;                                 // guarded by l
  bool owner_paused = false, prio_saw_paused = false;  // guarded by l
  l.lock();
  EXPECT_FALSE(l.cede());  // nothing pending
  std::vector<std::thread> pool;
  for (int i = 0; i < 3; ++i) {
    pool.emplace_back([&] {
      l.lock();
      ++ordinary_in;
      l.unlock();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // let them queue (not required)
  std::thread prio([&] {
    l.lock_priority();
    prio_saw_paused = owner_paused;
    l.unlock();
  });
  while (!l.request_pending())
    std::this_thread::yield();
  owner_paused = true;
  EXPECT_TRUE(l.cede());
  owner_paused = false;
  EXPECT_TRUE(prio_saw_paused);
  EXPECT_EQ(ordinary_in, 0);
  EXPECT_TRUE(l.is_locked());
  EXPECT_FALSE(l.cede());
  l.unlock();
  prio.join();
  for (auto& t : pool)
    t.join();
  EXPECT_EQ(ordinary_in, 3);
  EXPECT_FALSE(l.is_locked());
}

// Mutual exclusion with cede() points in ordinary sections, both sides hammering.
TEST(PriorityLock, MutualExclusionWithCede) {
  priority_lock l;
  std::atomic<int> inside{0};
  std::atomic<std::uint64_t> violations{0}, cedes{0};
  std::atomic<bool> stop{false};
  std::uint64_t counter = 0, expected_ord = 0, expected_prio = 0;  // guarded by l
  auto enter = [&] {
    if (inside.fetch_add(1, std::memory_order_relaxed) != 0)
      violations.fetch_add(1, std::memory_order_relaxed);
  };
  auto leave = [&] { inside.fetch_sub(1, std::memory_order_relaxed); };
  std::thread prio([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      l.lock_priority();
      enter();
      ++counter;
      ++expected_prio;
      leave();
      l.unlock();
    }
  });
  std::vector<std::thread> pool;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  for (int t = 0; t < 3; ++t) {
    pool.emplace_back([&] {
      // Until the time is up and some section has ceded (the privileged thread may be
      // slow to run on a loaded machine), within a cap.
      for (int i = 0; i < 100000; ++i) {
        if (i > 100 && std::chrono::steady_clock::now() > deadline &&
            cedes.load(std::memory_order_relaxed) > 0)
          break;
        l.lock();
        enter();
        ++counter;
        for (int k = 0; k < 100; ++k)  // a long section: give the request time to come
          detail::cpu_relax();
        leave();
        if (l.cede()) cedes.fetch_add(1, std::memory_order_relaxed);
        enter();
        ++counter;
        ++expected_ord;
        leave();
        l.unlock();
      }
    });
  }
  for (auto& t : pool)
    t.join();
  stop = true;
  prio.join();
  EXPECT_EQ(violations.load(), 0u);
  EXPECT_EQ(counter, 2 * expected_ord + expected_prio);
  EXPECT_GT(cedes.load(), 0u);
}

// Both sides under the standard guards: std::scoped_lock (also with a second lock,
// whose deadlock avoidance uses try_lock_priority), std::unique_lock, and
// std::condition_variable_any ping-pong between an ordinary and the privileged thread.
TEST(PriorityLock, BothSidesWithStandardGuardsAndConditionVariable) {
  priority_lock l;
  queued_lock other;
  std::condition_variable_any cv;
  int turn = 0;  // even: the ordinary thread's turn, odd: the privileged thread's
  constexpr int kRounds = 2000;
  std::thread ordinary([&] {
    for (int i = 0; i < kRounds; ++i) {
      std::unique_lock g(l);
      cv.wait(g, [&] { return turn % 2 == 0; });
      ++turn;
      cv.notify_all();
    }
  });
  std::thread privileged([&] {
    for (int i = 0; i < kRounds; ++i) {
      std::unique_lock g(l.privileged());
      cv.wait(g, [&] { return turn % 2 == 1; });
      ++turn;
      cv.notify_all();
    }
  });
  ordinary.join();
  privileged.join();
  EXPECT_EQ(turn, 2 * kRounds);
  EXPECT_FALSE(l.is_locked());
  int shared = 0;
  std::thread a([&] {
    for (int i = 0; i < 3000; ++i) {
      std::scoped_lock g(other, l.privileged());
      ++shared;
    }
  });
  std::thread b([&] {
    for (int i = 0; i < 3000; ++i) {
      std::scoped_lock g(l, other);
      ++shared;
    }
  });
  a.join();
  b.join();
  EXPECT_EQ(shared, 6000);
  EXPECT_FALSE(l.is_locked());
}

// The same property seen from the ordinary side's sequence: with the lock held, a
// privileged request and ordinary waiters queued before it, the privileged thread
// enters first.
TEST(PriorityLock, PrivilegedJumpsTheQueue) {
  priority_lock l;
  std::vector<int> order;
  std::mutex order_mu;
  l.lock();
  std::vector<std::thread> pool;
  for (int i = 0; i < 4; ++i) {
    pool.emplace_back([&, i] {
      l.lock();
      {
        std::scoped_lock g(order_mu);
        order.push_back(i);
      }
      l.unlock();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let them queue
  std::thread prio([&] {
    l.lock_priority();
    {
      std::scoped_lock g(order_mu);
      order.push_back(-1);
    }
    l.unlock();
  });
  // The request is published once the state word shows it.
  while (!l.request_pending())
    std::this_thread::yield();
  l.unlock();
  prio.join();
  for (auto& t : pool)
    t.join();
  ASSERT_EQ(order.size(), 5u);
  EXPECT_EQ(order.front(), -1);
}

}  // namespace
}  // namespace hotpath::test
