// SPDX-License-Identifier: MIT
// queued_lock under the deterministic scheduler: mutual exclusion through lock(),
// lock_fifo() and try_lock(); FIFO for lock_fifo(); the bounded wait (a waiter asks
// for the handoff after exactly handoff_after steps, and once it has asked is passed
// by at most the bound); no lost wake-up between a sleeper on the word and an
// unlock() racing with its going to sleep; and the next owner freeing the lock while
// the unlock() that released it still runs. The locked byte is stored on its own
// (store_bits), as the header does on hardware.
#include "hotpath/queued_lock.hpp"

#include "schedule/mutant.hpp"
#include "schedule/queued_properties.hpp"
#include "support/lock_test_access.hpp"

namespace {

using namespace hotpath::test::sched;
using hotpath::test::lock_test_access;

template <class Wait>
using lock_type = hotpath::basic_queued_lock<policy<Wait, mutant>>;
using spied_lock = hotpath::basic_queued_lock<spy_policy<wait, mutant>>;
// Never parks, and counts each thread's relax() steps (handoff_after, batch_ends).
using counted_lock = hotpath::basic_queued_lock<spy_policy<counting_wait<spin_wait>, mutant>>;

// If thread `id` asked for the handoff, it asked at exactly its handoff_after-th step.
void asked_at_the_edge(unsigned id) {
  if (bounds.relaxed_at_ask[id] != 0)
    check(bounds.relaxed_at_ask[id] == counted_lock::handoff_after,
          "the pending owner asked after another number of steps than handoff_after");
}

// Even rounds lock(), odd ones lock_fifo(): three threads, so the pending owner, a
// queue head and a queued waiter all occur, and stealing beside them.
template <class Lock>
void both_ways(Lock& lock, unsigned r) {
  if (r % 2 == 0) {
    lock.lock();
  } else {
    lock.lock_fifo();
  }
}

HOTPATH_PROPERTY(mutual_exclusion, {}) {
  lock_type<wait> lock;
  mutual_exclusion(
      3, 2, [&](unsigned r) { both_ways(lock, r); }, [&](unsigned) { lock.unlock(); });
}

// Every waiter parks at its first spin: the pending owner and the head sleep on the
// word (flag, sleeper count, heavy fence, load) against unlock()'s (check, store,
// light fence, count), and queued waiters on their nodes, in every order.
HOTPATH_PROPERTY(parking, {.park = 100}) {
  lock_type<wait> lock;
  mutual_exclusion(
      3, 2, [&](unsigned r) { both_ways(lock, r); }, [&](unsigned) { lock.unlock(); });
}

HOTPATH_PROPERTY(try_lock, {}) {
  lock_type<wait> lock;
  mutual_exclusion_with_try_lock(lock, 3, 2);
}

// lock_fifo() alone: FIFO among every thread.
HOTPATH_PROPERTY(fifo, {}) {
  lock_type<fifo_wait<wait>> lock;
  fifo_order(
      3, 2, [&](unsigned) { lock.lock_fifo(); }, [&](unsigned) { lock.unlock(); });
}

// The bounded wait, with stealing: three threads, three sections each through
// lock(). A pending owner or head that slept asks for the handoff; from then on at
// most the section holding the lock and one more may begin before it enters.
HOTPATH_PROPERTY(handoff_bound, {}) {
  spied_lock lock;
  bounded_sections(lock, 3, 3, [](spied_lock& l, unsigned) {
    l.lock();
    return false;
  });
}

// The ask at its exact edge: a pending owner whose lock stays held asks for the
// handoff after exactly handoff_after relax() steps, not one more or fewer (a policy
// that never parks, so that no sleep brings the ask forward). Without the bound the
// owner, which holds the lock until the ask, would wait forever.
HOTPATH_PROPERTY(handoff_after, {}) {
  counted_lock lock;
  bounds = {};
  bounds.word = lock_test_access::word(lock);
  atomic<bool> held(false);
  run(2, [&](unsigned id) {
    if (id == 1) {
      lock.lock();
      held.store(true, std::memory_order_relaxed);
      while (!bounds.asked[2])
        (void)spin();
      lock.unlock();
    } else {
      while (!held.load(std::memory_order_relaxed))
        (void)spin();
      lock.lock();  // pending: the lock is held, and nobody queues
      check(bounds.asked[2], "the pending owner got the lock without asking for it");
      asked_at_the_edge(2);
      lock.unlock();
    }
  });
}

// The bound while the lock changes hands: the other threads take and release it in a
// loop until the waiter (the last thread) is in, which it gets by asking or by a load
// that finds the lock free. With two, the waiter is the pending owner: if it asks, it
// asks at exactly its handoff_after-th step however often the owner changed. With
// three, it may be the head or queued; every asker is passed by at most the bound
// (entered()). (Without the bound a waiter still gets in by a lucky load:
// handoff_after above catches queued_never_asks, this one does not.)
void until_the_waiter_is_in(unsigned threads) {
  counted_lock lock;
  bounds = {};
  bounds.word = lock_test_access::word(lock);
  atomic<bool> in(false);
  run(threads, [&](unsigned id) {
    if (id < threads) {
      while (!in.load(std::memory_order_relaxed)) {
        lock.lock();
        entered();
        lock.unlock();
      }
      return;
    }
    lock.lock();
    entered();
    in.store(true, std::memory_order_relaxed);
    if (threads == 2) asked_at_the_edge(id);
    lock.unlock();
  });
}

HOTPATH_PROPERTY(batch_ends, {.seeds = 20000}) {
  until_the_waiter_is_in(2);
  until_the_waiter_is_in(3);
}

// The lock's destruction by its next owner, two and three threads.
HOTPATH_PROPERTY(next_owner_frees, {}) {
  next_owner_frees<lock_type<wait>>(2);
  next_owner_frees<lock_type<wait>>(3);
}

}  // namespace
