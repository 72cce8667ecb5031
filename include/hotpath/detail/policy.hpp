// SPDX-License-Identifier: MIT
// Policies: how a primitive's shared state is stored (the atomic template) and how
// its waiters wait (the waiting strategy). A test can substitute instrumented
// atomics or a strategy that reports each spin, without touching the algorithm.
//
// A waiting strategy W provides
//   static constexpr bool parks;      // may the caller ever go to sleep?
//   static bool relax(unsigned& n);   // one step of spinning; false: park now
//   static void yield();              // optional: relax_or_yield()'s sched_yield()
// and the primitive parks with detail::park() / unpark_*() only when W::parks.
//
// A policy may also define static hooks that replace what a primitive otherwise
// calls directly: park(word, expected, channel), unpark_one(word, channel),
// unpark_channel(word, channel), unpark_all(word) (detail/futex.hpp), light_fence(),
// heavy_fence() (detail/membarrier.hpp), current_cpu() (percpu_counter, bucket_table),
// thread_slot() (queued_lock's name for the calling thread, instead of
// detail/thread_slots.hpp's), local<T>() (a thread's own T:
// detail::policy_local() below), now_ns() (the clock of RCU's batch ages),
// `static constexpr bool reclaimer_thread` (false: RCU starts no thread) and
// `static constexpr unsigned handoff_after` (queued_lock's batch bound, in relax()
// steps). The deterministic scheduler of tests/schedule/ defines all but the last,
// whose default it tests; basic_policy defines
// none, so the default path is the plain calls (detail::policy_park() and friends
// choose at compile time).
#pragma once

#include <atomic>

#include "hotpath/detail/config.hpp"

#if defined(__unix__)
#include <sched.h>
#else
#include <thread>
#endif

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

namespace detail {
inline void yield_cpu() noexcept {
#if defined(__unix__)
  sched_yield();
#else
  std::this_thread::yield();
#endif
}
}  // namespace detail

// Pure spinning, for threads pinned one per core that are never preempted. A
// waiter whose predecessor is descheduled burns its whole time slice.
struct spin_wait {
  static constexpr bool parks = false;
  static bool relax(unsigned& /*n*/) noexcept {
    detail::cpu_relax();
    return true;
  }
};

// Spin `Spins` times, then give the cpu away with sched_yield() on every step. Never
// sleeps, so the releasing side never pays for a wake-up; helps on an oversubscribed
// machine only as far as the scheduler honours yield.
template <unsigned Spins = 256>
struct spin_then_yield {
  static constexpr bool parks = false;
  static bool relax(unsigned& n) noexcept {
    if (n < Spins) {
      ++n;
      detail::cpu_relax();
    } else {
      detail::yield_cpu();
    }
    return true;
  }
};

// The default: spin a bounded time (the pvqspinlock idea), then sleep on a futex.
// A primitive records that it sleeps, so the releasing thread issues a wake-up
// only when someone actually sleeps. Between the two, a few sched_yield() calls:
// on an oversubscribed machine the thread we wait for is often runnable but not
// running, and a yield hands it our cpu for about a microsecond, where a futex
// sleep and wake-up costs tens. Measured on 2 cores with 8 threads, this is
// 2-3x the throughput of parking straight after the spin (benchmarks/).
template <unsigned Spins = 256, unsigned Yields = 32>
struct spin_then_park {
  static constexpr bool parks = true;
  static bool relax(unsigned& n) noexcept {
    if (n < Spins) {
      detail::cpu_relax();
    } else if (n < Spins + Yields) {
      detail::yield_cpu();
    } else {
      return false;
    }
    ++n;
    return true;
  }
};

template <class Wait, template <class> class Atomic = std::atomic>
struct basic_policy {
  using wait = Wait;
  template <class T>
  using atomic = Atomic<T>;
};

using default_policy = basic_policy<spin_then_park<>>;
// queued_lock's default: 4 yields, not 32, before sleeping. A
// running thread may steal those locks, so a yielding waiter mostly hands its cpu to a
// stealer and loses its turn again; sleeping sooner reaches the handoff sooner. In the
// showdown (2 cores, load 20) fair ops/s went from 20 M to 58 M at 8 threads and from
// starvation (one thread near 0) to 45 M at 16, at the same CPU per operation.
// priority_lock keeps 32 until the qdisc experiment is re-run with 4.
using queued_default_policy = basic_policy<spin_then_park<256, 4>>;
using spin_policy = basic_policy<spin_wait>;
using yield_policy = basic_policy<spin_then_yield<>>;

namespace detail {
// Wait where sleeping is impossible (nobody would wake us): spin the strategy's
// budget, then yield (W::yield() where the strategy defines it, as a test's
// scheduler does, else sched_yield()). Used for the short windows in which a peer is
// between two stores of a protocol, e.g. an MCS successor that swapped the tail but
// has not yet linked itself in.
template <class W>
inline void relax_or_yield(unsigned& n) noexcept {
  if (W::relax(n)) return;
  if constexpr (requires { W::yield(); }) {
    W::yield();
  } else {
    yield_cpu();
  }
}

// The calling thread's own T (value-initialised on first use, destroyed when the
// thread exits): a thread_local, unless the policy defines local<T>() (a scheduler
// that runs a test's threads as fibers gives each fiber its own).
template <class Policy, class T>
inline T& policy_local() noexcept {
  if constexpr (requires { Policy::template local<T>(); }) {
    return Policy::template local<T>();
  } else {
    thread_local T t;
    return t;
  }
}
}  // namespace detail

}  // namespace hotpath
HOTPATH_VISIBILITY_END
