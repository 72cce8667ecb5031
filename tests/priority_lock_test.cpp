// SPDX-License-Identifier: MIT
#include "hotpath/priority_lock.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <type_traits>

#include "support/lock_suite.hpp"
#include "support/policies.hpp"
#include "support/stress.hpp"

namespace hotpath::test {
namespace {

using priority_types = ::testing::Types<priority_lock, basic_priority_lock<spin_policy>,
                                        basic_priority_lock<yield_policy>>;
INSTANTIATE_TYPED_TEST_SUITE_P(priority, lockable_suite, priority_types);

static_assert(!std::is_copy_constructible_v<priority_lock>);
static_assert(sizeof(priority_lock) == 4);
[[maybe_unused]] constinit priority_lock constant_initialised;  // constexpr default constructor

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

// The bound, as a property. An instrumented atomic tells the privileged thread the
// moment its request is published (right after the fetch_or on the state word), and
// it then reads the sequence number of ordinary critical sections begun so far. In
// its own critical section it reads it again: at most one more ordinary section may
// have begun (the one in progress, which had entered but not yet counted itself).
inline std::atomic<std::uint64_t> begun{0};
inline thread_local bool privileged_thread = false;
inline thread_local std::uint64_t seen_at_publish = 0;
inline thread_local unsigned publishes = 0;

template <class T>
struct hooked_atomic : std::atomic<T> {
  using std::atomic<T>::atomic;
  T fetch_or(T v, std::memory_order o) noexcept {
    const T old = std::atomic<T>::fetch_or(v, o);
    if (privileged_thread && (v & basic_priority_lock<>::request)) {
      seen_at_publish = begun.load(std::memory_order_seq_cst);
      ++publishes;
    }
    return old;
  }
};

template <class Wait>
void privileged_bound(unsigned ordinary_threads) {
  using lock_type = basic_priority_lock<basic_policy<Wait, hooked_atomic>>;
  lock_type l;
  begun = 0;
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < ordinary_threads; ++i) {
    pool.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        l.lock();
        begun.fetch_add(1, std::memory_order_seq_cst);  // sequence number of this section
        for (int k = 0; k < 50; ++k)
          detail::cpu_relax();
        l.unlock();
      }
    });
  }
  std::uint64_t worst = 0, rounds = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  std::thread prio([&] {
    privileged_thread = true;
    while (rounds < 3000 && std::chrono::steady_clock::now() < deadline) {
      // Let the ordinary threads queue up again.
      for (int k = 0; k < 200; ++k)
        detail::cpu_relax();
      l.lock_priority();
      const std::uint64_t now = begun.load(std::memory_order_seq_cst);
      worst = std::max(worst, now - seen_at_publish);
      l.unlock();
      ++rounds;
    }
    EXPECT_EQ(publishes, rounds);
  });
  prio.join();
  stop = true;
  for (auto& t : pool)
    t.join();
  EXPECT_GT(rounds, 0u);
  EXPECT_LE(worst, 1u) << "ordinary sections began after the privileged request";
}

TEST(PriorityLock, PrivilegedWaitsAtMostTheSectionInProgress) {
  for (unsigned n : {1u, 3u, 7u}) {
    SCOPED_TRACE(n);
    privileged_bound<spin_then_park<>>(n);
  }
}
TEST(PriorityLock, PrivilegedBoundWithParkedWaiters) {
  privileged_bound<spin_then_park<0, 0>>(4);
}
TEST(PriorityLock, PrivilegedBoundSpinning) {
  privileged_bound<spin_wait>(3);
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
