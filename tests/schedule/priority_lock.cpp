// SPDX-License-Identifier: MIT
// priority_lock under the deterministic scheduler: mutual exclusion across the
// ordinary and the privileged side, the privileged bound (once the request is
// published, no ordinary section begins before the privileged one, beyond the one
// holding the lock), the ordinary side's handoff bound, FIFO for
// fifo_priority_lock's ordinary side, and the next owner freeing the lock.
#include "hotpath/priority_lock.hpp"

#include "schedule/mutant.hpp"
#include "schedule/queued_properties.hpp"
#include "support/lock_test_access.hpp"

namespace {

using namespace hotpath::test::sched;

template <class Wait, bool Fifo = false>
using lock_type = hotpath::basic_priority_lock<policy<Wait, mutant>, Fifo>;
using spied_lock = hotpath::basic_priority_lock<spy_policy<wait, mutant>>;

// Thread 1 is the privileged thread (lock_priority(), or try_lock_priority() in
// its first round); the others take the ordinary side, one round by try_lock().
template <class Lock>
bool enter(Lock& l, unsigned r) {
  if (thread_id() == 1) {
    if (r != 0 || !l.try_lock_priority()) l.lock_priority();
    return true;
  }
  if (r == 1 && thread_id() == 2) {
    while (!l.try_lock())
      (void)spin();
    return false;
  }
  l.lock();
  return false;
}

// Both sides, the bounds checked at every entry: the privileged one, and the
// handoff bound of the ordinary waiters.
HOTPATH_PROPERTY(bounds, {}) {
  spied_lock lock;
  bounded_sections(lock, 3, 2, [](spied_lock& l, unsigned r) { return enter(l, r); });
}

// The same with every waiter parking at its first spin (the privileged thread on
// channel 2 of the word).
HOTPATH_PROPERTY(parking, {.park = 100}) {
  spied_lock lock;
  bounded_sections(lock, 3, 2, [](spied_lock& l, unsigned r) { return enter(l, r); });
}

// fifo_priority_lock: its ordinary side (lock_fifo()) is FIFO.
HOTPATH_PROPERTY(fifo, {}) {
  lock_type<fifo_wait<wait>, true> lock;
  fifo_order(
      3, 2, [&](unsigned) { lock.lock(); }, [&](unsigned) { lock.unlock(); });
}

HOTPATH_PROPERTY(next_owner_frees, {}) {
  next_owner_frees<lock_type<wait>>(3);
  next_owner_frees<lock_type<wait, true>>(3);
}

}  // namespace
