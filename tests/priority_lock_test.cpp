// SPDX-License-Identifier: MIT
#include "hotpath/priority_lock.hpp"

#include "hotpath/queued_lock.hpp"

#include <gtest/gtest.h>

#include <pthread.h>

#include <condition_variable>
#include <csignal>
#include <mutex>
#include <type_traits>
#include <utility>

#include "support/handoff_bound.hpp"
#include "support/lock_suite.hpp"
#include "support/lock_test_access.hpp"
#include "support/next_owner_frees.hpp"
#include "support/policies.hpp"
#include "support/signals.hpp"
#include "support/stress.hpp"
#include "support/word_observer.hpp"

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

// The bound, as a property, counted exactly in the lock word's modification order.
// An instrumented atomic performs every RMW of the watched word under one test mutex
// and classifies it: the privileged thread's publish (request set), a grant to an
// ordinary thread (the locked byte set from clear, or an ordinary handoff: handoff
// cleared with the byte kept), a grant to the privileged thread (prio_held set).
// Between a publish and the privileged grant, no ordinary grant may occur: zero
// tolerance (the section in progress was granted before the publish). Also counts
// each thread's handoff request, for the ordinary side's per-waiter bound below.
// Word-wide paths only (byte_ops needs the plain std::atomic); the byte path's
// back-off is covered by NoOrdinarySectionBetweenRequestAndPrivileged.
struct word_log {
  bool published = false;
  std::uint64_t publishes = 0, prio_grants = 0, ordinary_grants = 0, violations = 0;
};
inline word_log wlog;  // written by the notes, read under observer.mu
inline thread_local bool privileged_thread = false;
inline thread_local bool asked_handoff = false;
inline thread_local std::uint64_t grants_at_ask = 0;

// Under observer.mu, in the word's modification order.
inline void classify_word_change(std::uint32_t old, std::uint32_t nv) noexcept {
  using lock_t = basic_priority_lock<>;
  constexpr std::uint32_t locked = 0xff, handoff = basic_queued_lock<>::handoff;
  if (privileged_thread && !(old & lock_t::request) && (nv & lock_t::request)) {
    wlog.published = true;
    ++wlog.publishes;
  }
  if (!privileged_thread && !(old & handoff) && (nv & handoff)) {
    asked_handoff = true;
    grants_at_ask = wlog.ordinary_grants;
  }
  const bool to_prio = (nv & lock_t::prio_held) && !(old & lock_t::prio_held);
  const bool to_ordinary =
      (nv & locked) && !(nv & lock_t::prio_held) &&
      (!(old & locked) || ((old & locked) && (old & handoff) && !(nv & handoff)));
  if (to_prio) {
    wlog.published = false;
    ++wlog.prio_grants;
  }
  if (to_ordinary) {
    ++wlog.ordinary_grants;
    if (wlog.published) ++wlog.violations;
  }
}

template <class T>
struct hooked_atomic : observed_atomic<T> {
  using observed_atomic<T>::observed_atomic;

  T fetch_or(T v, std::memory_order o) noexcept {
    const T old = observed_atomic<T>::fetch_or(v, o);
    if constexpr (std::is_same_v<T, std::uint32_t>) {
      // Widen the window after a publish: the lock may be free now (or freed by an
      // unlock() that looked at the flags just before), and ordinary threads must
      // still not take it.
      if (privileged_thread && (v & basic_priority_lock<>::request)) std::this_thread::yield();
    }
    return old;
  }
};

template <class Wait>
using hooked_priority_lock = basic_priority_lock<basic_policy<Wait, hooked_atomic>>;

template <class Lock>
void watch(Lock& l) {
  std::scoped_lock g(observer.mu);
  wlog = {};
  observer.watch(&l, classify_word_change, true);  // the lock is its word (sizeof == 4)
}

template <class Wait>
void privileged_bound(unsigned ordinary_threads) {
  using lock_type = hooked_priority_lock<Wait>;
  static_assert(sizeof(lock_type) == 4);
  lock_type l;
  watch(l);
  std::atomic<bool> stop{false};
  std::atomic<unsigned> running{0};
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < ordinary_threads; ++i) {
    pool.emplace_back([&] {
      running.fetch_add(1);
      do {  // one section at least, however late this thread first runs
        l.lock();
        for (int k = 0; k < 50; ++k)
          detail::cpu_relax();
        l.unlock();
      } while (!stop.load(std::memory_order_relaxed));
    });
  }
  while (running.load() < ordinary_threads)
    std::this_thread::yield();
  std::uint64_t rounds = 0;
  std::thread prio([&] {
    privileged_thread = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (rounds == 0 || (rounds < 3000 && std::chrono::steady_clock::now() < deadline)) {
      // Let the ordinary threads queue up again.
      for (int k = 0; k < 200; ++k)
        detail::cpu_relax();
      l.lock_priority();
      l.unlock();
      ++rounds;
    }
  });
  prio.join();
  stop = true;
  for (auto& t : pool)
    t.join();
  std::scoped_lock g(observer.mu);
  observer.stop();
  EXPECT_GT(rounds, 0u);
  EXPECT_EQ(wlog.publishes, rounds);
  EXPECT_EQ(wlog.prio_grants, rounds);
  EXPECT_GT(wlog.ordinary_grants, 0u);
  EXPECT_EQ(wlog.violations, 0u) << "ordinary sections began after the privileged request";
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

// The same guarantee seen from inside the critical sections, exactly, on the real lock
// (byte operations, so the fast path's back-off too). The privileged thread counts
// its sections in `prio_count` (written inside them). An ordinary thread reads the
// count, then the word: if a request shows, it was published after section `c` (the
// request for `c` was cleared before `c` counted itself), so when the ordinary thread
// then gets in, section c + 1 must already have run. In the main thread's rounds it
// holds the lock while the request is published and releases it once it sees the
// request, so the waiters queued, pending or asleep meet the request too.
template <class Lock>
void no_ordinary_section_between(unsigned ordinary_threads) {
  Lock l;
  std::atomic<int> prio_count{0};                        // written only inside privileged sections
  std::uint64_t violations = 0, ordinary = 0, seen = 0;  // guarded by l
  std::atomic<int> go{0};
  std::atomic<bool> stop{false};
  std::atomic<unsigned> running{0};
  auto check = [&](int c, bool req) {
    if (req) {
      ++seen;
      if (prio_count.load(std::memory_order_relaxed) == c) ++violations;
    }
    ++ordinary;
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < ordinary_threads; ++i) {
    pool.emplace_back([&, i] {
      running.fetch_add(1);
      for (unsigned k = 0; k == 0 || !stop.load(std::memory_order_relaxed); ++k) {
        // Acquire: the word is read after the count (see above).
        const int c = prio_count.load(std::memory_order_acquire);
        const bool req = l.request_pending();
        l.lock();
        check(c, req);
        l.unlock();
        if ((k + i) % 8 == 0) std::this_thread::yield();  // come back as a fresh stealer
      }
    });
  }
  std::thread prio([&] {
    for (unsigned k = 0; !stop.load(std::memory_order_relaxed); ++k) {
      // Rounds driven by the main thread, and free-running requests in between.
      const int r = go.load(std::memory_order_acquire);
      if (r == 0 && k % 2 == 0) {
        std::this_thread::yield();
        continue;
      }
      l.lock_priority();
      prio_count.store(prio_count.load(std::memory_order_relaxed) + 1,
                       std::memory_order_release);  // pairs with the acquire load above
      l.unlock();
      if (r != 0) go.store(0, std::memory_order_release);
    }
  });
  // A signal that stalls the privileged thread for a while, landing at random points
  // of lock_priority() (between its publish and its CAS of a free lock, too), widens
  // the windows that the ordinary side must not use. TSan defers signals to safe
  // points, so there it sends none.
  signal_stalls<20> stalls(SIGUSR2, prio.native_handle());
  while (running.load() < ordinary_threads)
    std::this_thread::yield();
  int rounds = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  for (int r = 1; r == 1 || (r <= 4000 && std::chrono::steady_clock::now() < deadline); ++r) {
    l.lock();
    const int c = prio_count.load(std::memory_order_relaxed);
    go.store(r, std::memory_order_release);
    while (!l.request_pending())
      std::this_thread::yield();
    for (int k = 0; k < (r % 4) * 100; ++k)  // let some waiters spin, some sleep
      detail::cpu_relax();
    l.unlock();
    while (go.load(std::memory_order_acquire) != 0)
      std::this_thread::yield();
    l.lock();
    if (prio_count.load(std::memory_order_relaxed) == c) ++violations;
    l.unlock();
    rounds = r;
  }
  stop = true;
  stalls.stop();
  prio.join();
  for (auto& t : pool)
    t.join();
  EXPECT_GT(rounds, 0);
  EXPECT_GT(ordinary, 0u);
  EXPECT_EQ(violations, 0u) << "an ordinary section began between a request and its section ("
                            << seen << " sections saw a request first)";
}

TEST(PriorityLock, NoOrdinarySectionBetweenRequestAndPrivileged) {
  no_ordinary_section_between<priority_lock>(4);
}
TEST(PriorityLock, NoOrdinarySectionBetweenRequestAndPrivilegedSpinning) {
  no_ordinary_section_between<basic_priority_lock<spin_policy>>(3);
}
TEST(PriorityLock, NoOrdinarySectionBetweenRequestAndPrivilegedFifo) {
  no_ordinary_section_between<fifo_priority_lock>(4);
}

// The privileged thread that a forged request word stands for is this thread: it
// tells ThreadSanitizer so before unlocking on that thread's behalf (no-op elsewhere).
void stand_in_for_privileged(priority_lock& l) {
  hotpath::detail::tsan_lock_begin(&l);
  hotpath::detail::tsan_lock_end(&l);
}

// The one moment the lock is free while a request is pending: an unlock() that
// looked at the flag byte just before the request was published released it with a
// plain store. Reached here directly (the lock is its word): a stealer's byte CAS then
// succeeds, and it must back off, handing the lock to the privileged thread.
TEST(PriorityLock, StealerBacksOffFromAFreeLockWithARequest) {
  priority_lock l;
  static_assert(sizeof(l) == sizeof(std::atomic<std::uint32_t>));
  auto& word = reinterpret_cast<std::atomic<std::uint32_t>&>(l);
  word.store(priority_lock::request, std::memory_order_relaxed);
  EXPECT_FALSE(l.try_lock());
  // Handed over: held, for the privileged thread, its request served.
  EXPECT_TRUE(l.is_locked());
  EXPECT_FALSE(l.request_pending());
  EXPECT_NE(lock_test_access::state(l) & priority_lock::prio_held, 0u);
  stand_in_for_privileged(l);
  l.unlock();
  EXPECT_EQ(lock_test_access::state(l), 0u);
  // The same through lock(): it backs off, queues, and gets in after the privileged
  // section (which this thread runs on the privileged thread's behalf).
  word.store(priority_lock::request, std::memory_order_relaxed);
  std::atomic<bool> in{false};
  std::thread t([&] {
    l.lock();
    in = true;
    l.unlock();
  });
  while (lock_test_access::state(l) == priority_lock::request)
    std::this_thread::yield();
  EXPECT_FALSE(in.load());
  stand_in_for_privileged(l);
  l.unlock();  // the privileged section ends
  t.join();
  EXPECT_TRUE(in.load());
  EXPECT_EQ(lock_test_access::state(l) & ~(basic_queued_lock<>::slow | basic_queued_lock<>::parked),
            0u);
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

// No ordinary thread starves, as a per-waiter bound counted in the word's order: two
// threads re-take the lock back to back (each unlock followed at once by a steal
// attempt), four others come and go, and the privileged thread cuts in. A waiter
// that asked for the handoff (past its bound) is passed by at most one more
// ordinary section: one that took the lock in the instant between the waiter's look
// at it and its request. Without the handoff the stealers pass it without bound.
template <class Wait>
void waiters_bounded(unsigned rounds_per_waiter) {
  using lock_type = hooked_priority_lock<Wait>;
  lock_type l;
  watch(l);
  std::atomic<bool> done{false};
  std::atomic<unsigned> running{0};
  auto hammer = [&] {
    running.fetch_add(1);
    while (!done.load(std::memory_order_relaxed)) {
      l.lock();
      l.unlock();
    }
  };
  std::thread h1(hammer), h2(hammer);
  std::thread prio([&] {
    privileged_thread = true;
    while (!done.load(std::memory_order_relaxed)) {
      l.lock_priority();
      l.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  while (running.load() < 2)
    std::this_thread::yield();
  handoff_bound b;
  b.run_waiters(4, rounds_per_waiter, 20 * rounds_per_waiter, 1, [&] {
    asked_handoff = false;
    l.lock();
    if (asked_handoff) {
      std::scoped_lock g(observer.mu);
      b.passed(wlog.ordinary_grants - grants_at_ask - 1);  // not counting our own
    }
    l.unlock();
  });
  done = true;
  h1.join();
  h2.join();
  prio.join();
  observer.stop();
  b.expect_at_most(1);
}

TEST(PriorityLock, OrdinaryWaitersAreBoundedParking) {
  waiters_bounded<spin_then_park<>>(50);
}
TEST(PriorityLock, OrdinaryWaitersAreBoundedParkingAtOnce) {
  waiters_bounded<spin_then_park<0, 0>>(50);
}
TEST(PriorityLock, OrdinaryWaitersAreBoundedSpinning) {
  waiters_bounded<spin_then_yield<>>(50);
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
