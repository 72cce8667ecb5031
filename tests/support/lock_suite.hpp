// SPDX-License-Identifier: MIT
// The properties every hotpath lock must have, as a typed GoogleTest suite:
// instantiate it with INSTANTIATE_TYPED_TEST_SUITE_P for each lock and policy.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "support/stress.hpp"

namespace hotpath::test {

template <class Lock>
class lockable_suite : public ::testing::Test {};
TYPED_TEST_SUITE_P(lockable_suite);

// Mutual exclusion, with more threads than cores: a plain counter and a plain
// "inside" count that must read 1 inside every critical section.
TYPED_TEST_P(lockable_suite, MutualExclusionUnderStress) {
  for (const unsigned threads : {1u, 2u, 4u, 8u, 16u}) {
    SCOPED_TRACE(threads);
    TypeParam lock;
    const stress_result r = stress_lock(lock, threads, 20000, std::chrono::milliseconds(400));
    EXPECT_EQ(r.violations, 0u);
    EXPECT_EQ(r.counter, r.total);
    EXPECT_GT(r.total, 0u);
  }
}

TYPED_TEST_P(lockable_suite, TryLockFailsWhileHeldAndSucceedsWhenFree) {
  TypeParam lock;
  ASSERT_TRUE(lock.try_lock());
  std::atomic<int> other{-1};
  std::thread([&] { other = lock.try_lock() ? 1 : 0; }).join();
  EXPECT_EQ(other.load(), 0);
  lock.unlock();
  std::thread([&] {
    other = lock.try_lock() ? 1 : 0;
    if (other == 1) lock.unlock();
  }).join();
  EXPECT_EQ(other.load(), 1);
  // Free again: this thread can take it the normal way.
  lock.lock();
  lock.unlock();
}

// Several locks of one type held at once, taken and released in different orders.
TYPED_TEST_P(lockable_suite, NestingSeveralLocks) {
  constexpr int kLocks = 6;
  TypeParam locks[kLocks];
  std::uint64_t counts[kLocks] = {};
  constexpr int kIters = 2000;
  auto worker = [&](bool reverse_release) {
    for (int i = 0; i < kIters; ++i) {
      for (int k = 0; k < kLocks; ++k)
        locks[k].lock();  // one global order: no deadlock
      for (int k = 0; k < kLocks; ++k)
        ++counts[k];
      if (reverse_release) {
        for (int k = kLocks - 1; k >= 0; --k)
          locks[k].unlock();
      } else {
        for (int k = 0; k < kLocks; ++k)
          locks[k].unlock();
      }
    }
  };
  std::thread a(worker, false), b(worker, true), c(worker, false);
  a.join();
  b.join();
  c.join();
  for (int k = 0; k < kLocks; ++k)
    EXPECT_EQ(counts[k], 3u * kIters);
}

TYPED_TEST_P(lockable_suite, WorksWithStandardGuards) {
  TypeParam a, b;
  int shared = 0;
  auto worker = [&] {
    for (int i = 0; i < 3000; ++i) {
      if (i % 2 == 0) {
        std::scoped_lock g(a, b);  // std::lock's deadlock avoidance uses try_lock
        ++shared;
      } else {
        std::unique_lock g(b);
        std::unique_lock g2(a, std::defer_lock);
        g2.lock();
        ++shared;
      }
    }
  };
  std::thread t1(worker), t2(worker);
  t1.join();
  t2.join();
  EXPECT_EQ(shared, 6000);
  EXPECT_TRUE(a.try_lock());
  a.unlock();
}

// Ping-pong through condition_variable_any: every hand-off must be seen in order.
TYPED_TEST_P(lockable_suite, ConditionVariableAnyHandoff) {
  TypeParam lock;
  std::condition_variable_any cv;
  int turn = 0;  // even: ping's turn, odd: pong's
  constexpr int kRounds = 2000;
  auto player = [&](int parity) {
    for (int i = 0; i < kRounds; ++i) {
      std::unique_lock g(lock);
      cv.wait(g, [&] { return turn % 2 == parity; });
      ++turn;
      cv.notify_all();
    }
  };
  std::thread ping(player, 0), pong(player, 1);
  ping.join();
  pong.join();
  EXPECT_EQ(turn, 2 * kRounds);
}

REGISTER_TYPED_TEST_SUITE_P(lockable_suite, MutualExclusionUnderStress,
                            TryLockFailsWhileHeldAndSucceedsWhenFree, NestingSeveralLocks,
                            WorksWithStandardGuards, ConditionVariableAnyHandoff);

}  // namespace hotpath::test
