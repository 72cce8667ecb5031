// SPDX-License-Identifier: MIT
// priority_lock's bounds: the privileged thread waits at most the section in progress,
// no ordinary section begins between its request and its section, a stealer backs off
// from a free lock with a request, and ordinary waiters are bounded. The rest of its
// tests: priority_lock_test.cpp.
#include "hotpath/priority_lock.hpp"

#include "hotpath/queued_lock.hpp"

#include <gtest/gtest.h>

#include <pthread.h>

#include <mutex>
#include <type_traits>
#include <utility>

#include "support/handoff_bound.hpp"
#include "support/lock_test_access.hpp"
#include "support/policies.hpp"
#include "support/stress.hpp"
#include "support/word_observer.hpp"

namespace hotpath::test {
namespace {

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

}  // namespace
}  // namespace hotpath::test
