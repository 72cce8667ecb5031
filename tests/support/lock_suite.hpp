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
// Bounded by iterations and by time since all three threads run (FIFO pure-spin
// locks convoy when a waiter is preempted, which a loaded machine does all the time).
TYPED_TEST_P(lockable_suite, NestingSeveralLocks) {
  constexpr int kLocks = 6;
  TypeParam locks[kLocks];
  std::uint64_t counts[kLocks] = {};
  const int iters = stress_scaled(2000);
  start_gate gate(3, std::chrono::seconds(2));
  std::atomic<std::uint64_t> done{0};
  auto worker = [&](bool reverse_release) {
    gate.arrive_and_wait();
    int i = 0;
    for (; i < iters && (i == 0 || !gate.expired()); ++i) {
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
    done.fetch_add(static_cast<std::uint64_t>(i), std::memory_order_relaxed);
  };
  std::thread a(worker, false), b(worker, true), c(worker, false);
  a.join();
  b.join();
  c.join();
  EXPECT_GE(done.load(), 3u);
  for (int k = 0; k < kLocks; ++k)
    EXPECT_EQ(counts[k], done.load());
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
// Strict ping-pong through a condition_variable_any, bounded by rounds and by time
// since both players run; whoever finds the time up stops the game for both.
TYPED_TEST_P(lockable_suite, ConditionVariableAnyHandoff) {
  TypeParam lock;
  std::condition_variable_any cv;
  int turn = 0;  // even: ping's turn, odd: pong's
  bool stop = false;
  int moves[2] = {0, 0};
  const int rounds = stress_scaled(2000);
  start_gate gate(2, std::chrono::seconds(5));
  auto player = [&](int parity) {
    gate.arrive_and_wait();
    for (int i = 0; i < rounds; ++i) {
      std::unique_lock g(lock);
      cv.wait(g, [&] { return stop || turn % 2 == parity; });
      if (stop) break;
      if (turn > 0 && gate.expired()) {
        stop = true;
        cv.notify_all();
        break;
      }
      ++turn;
      ++moves[parity];
      cv.notify_all();
    }
  };
  std::thread ping(player, 0), pong(player, 1);
  ping.join();
  pong.join();
  EXPECT_GT(turn, 0);
  EXPECT_EQ(turn, moves[0] + moves[1]);
  EXPECT_EQ(moves[0] - moves[1], turn % 2);  // strictly alternating
  if (!stop) {
    EXPECT_EQ(turn, 2 * rounds);
  }
}

REGISTER_TYPED_TEST_SUITE_P(lockable_suite, MutualExclusionUnderStress,
                            TryLockFailsWhileHeldAndSucceedsWhenFree, NestingSeveralLocks,
                            WorksWithStandardGuards, ConditionVariableAnyHandoff);

}  // namespace hotpath::test
