// SPDX-License-Identifier: MIT
// mcs_lock under the deterministic scheduler, through both ways in (a node on the
// caller's stack, and Lockable with per-thread nodes): mutual exclusion, FIFO, and
// no lost wake-up of a successor that parks while its predecessor hands over.
#include "hotpath/mcs_lock.hpp"

#include "schedule/lock_properties.hpp"
#include "schedule/mutant.hpp"

namespace {

using namespace hotpath::test::sched;

template <class Wait>
using lock_type = hotpath::basic_mcs_lock<policy<Wait, mutant>>;

// Even rounds take the lock with a guard (node on the stack), odd ones as Lockable.
template <class Lock>
struct both_ways {
  Lock& lock;
  typename Lock::node nodes[8];  // one per thread id, for the explicit-node rounds
  void enter(unsigned r) {
    if (r % 2 == 0) {
      lock.lock(nodes[thread_id()]);
    } else {
      lock.lock();
    }
  }
  void leave(unsigned r) {
    if (r % 2 == 0) {
      lock.unlock(nodes[thread_id()]);
    } else {
      lock.unlock();
    }
  }
};

HOTPATH_PROPERTY(mutual_exclusion, {}) {
  lock_type<wait> lock;
  both_ways<lock_type<wait>> w{lock, {}};
  mutual_exclusion(
      3, 2, [&](unsigned r) { w.enter(r); }, [&](unsigned r) { w.leave(r); });
}

// Every successor parks at its first spin: the grant exchange against the
// successor's CAS to sleeping, in every order.
HOTPATH_PROPERTY(parking, {.park = 100}) {
  lock_type<wait> lock;
  both_ways<lock_type<wait>> w{lock, {}};
  mutual_exclusion(
      3, 2, [&](unsigned r) { w.enter(r); }, [&](unsigned r) { w.leave(r); });
}

HOTPATH_PROPERTY(try_lock, {}) {
  lock_type<wait> lock;
  mutual_exclusion_with_try_lock(lock, 3, 2);
}

HOTPATH_PROPERTY(fifo, {}) {
  lock_type<fifo_wait<wait>> lock;
  both_ways<lock_type<fifo_wait<wait>>> w{lock, {}};
  fifo_order(
      3, 2, [&](unsigned r) { w.enter(r); }, [&](unsigned r) { w.leave(r); });
}

}  // namespace
