// SPDX-License-Identifier: MIT
// ticket_lock under the deterministic scheduler: mutual exclusion, FIFO, and no lost
// wake-up between a sleeper and the unlock that races with its going to sleep.
#include "hotpath/ticket_lock.hpp"

#include "schedule/lock_properties.hpp"
#include "schedule/mutant.hpp"

namespace {

using namespace hotpath::test::sched;

template <class Wait>
using lock_type = hotpath::basic_ticket_lock<policy<Wait, mutant>>;

// Three threads, two sections each; the scheduler decides per seed how often a
// waiter parks instead of spinning.
HOTPATH_PROPERTY(mutual_exclusion, {}) {
  lock_type<wait> lock;
  mutual_exclusion(
      3, 2, [&](unsigned) { lock.lock(); }, [&](unsigned) { lock.unlock(); });
}

// Every waiter parks at its first spin: the sleeper's (sleepers_++, heavy_fence,
// load) against unlock's (store, light_fence, load sleepers_), in every order.
HOTPATH_PROPERTY(parking, {.park = 100}) {
  lock_type<wait> lock;
  mutual_exclusion(
      3, 2, [&](unsigned) { lock.lock(); }, [&](unsigned) { lock.unlock(); });
}

// try_lock() beside lock(): try_lock succeeds only when the lock is free, and a
// thread that gets it must still exclude the others.
HOTPATH_PROPERTY(try_lock, {}) {
  lock_type<wait> lock;
  mutual_exclusion_with_try_lock(lock, 3, 2);
}

#if defined(HOTPATH_MUTANT_FIFO_UNFAIR_LOCK)
// A check of the FIFO property itself: a test-and-set lock is not FIFO.
struct unfair_lock {
  atomic<bool> held{false};
  void lock() {
    unsigned n = 0;
    while (held.exchange(true, std::memory_order_acquire))
      (void)fifo_wait<wait>::relax(n);
  }
  void unlock() { held.store(false, std::memory_order_release); }
};
#endif

HOTPATH_PROPERTY(fifo, {}) {
#if defined(HOTPATH_MUTANT_FIFO_UNFAIR_LOCK)
  unfair_lock lock;
#else
  lock_type<fifo_wait<wait>> lock;
#endif
  fifo_order(
      3, 2, [&](unsigned) { lock.lock(); }, [&](unsigned) { lock.unlock(); });
}

}  // namespace
