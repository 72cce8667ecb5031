// SPDX-License-Identifier: MIT
// queued_lock: the Linux qspinlock in user space, in one 32-bit word.
//
// Uncontended, lock() is one compare-and-swap of the locked byte and unlock() one
// release store to it, as in the kernel. Contended, the second thread waits in the
// pending bit, the others in a queue of per-thread nodes, each spinning on its own;
// with a parking policy (the default) they sleep on a futex past a bounded spin.
// How: detail/queued_core.hpp (the word, its transitions, the uncontended paths) and
// detail/queued_slowpath.hpp (waiting).
//
// Fairness. Lock stealing: lock() makes one attempt at the free locked byte before
// it queues, so a running thread takes a lock that a sleeping (or waking) head would
// leave idle; that is what keeps an oversubscribed machine busy, as std::mutex's
// barging does. The pending owner and the queued waiters are FIFO among themselves
// (lock_fifo() alone is FIFO outright).
//
// Batches. The pending owner and the head load the word every 2, 4, ... up to 64
// relax() steps, not at every one (at every one again once past the bound). Loading
// at every step, the waiter saw each release at once and took the lock, so two
// threads trading it alternated strictly and moved the lock's line and the data's at
// every acquisition. Now the owner mostly re-takes the lock it releases before the
// waiter looks, and sections run in batches on warm lines. Cohort locks and CNA bound
// a batch by a count of handoffs; here the waiter bounds it by how long it has waited
// (the owner's fast path stays a byte CAS and a byte store). The cost: a lock released
// for good while the waiter is between loads sits free until its next load, up to 64
// steps (64 pauses, 2 us on this project's EPYC host; a pause costs 10x less on some
// CPUs), and at 2 threads an acquisition may wait a batch.
//
// Bounded wait: the pending owner, or with none the head, asks for the handoff once
// it has waited handoff_after (256) relax() steps or has slept and been woken,
// whichever comes first. With queued_default_policy that is its 256 pauses (about
// 7 us here), before the yields and the sleep. It sets `handoff`; from then on the
// next unlock() hands it the lock directly, so no thread can take it first. So a
// waiter that has claimed pending waits at most handoff_after steps (or one sleep),
// then the critical section in progress plus at most one more ordinary one (one that
// began in the instant between an owner's check of `handoff` and its store); with
// priority_lock also the privileged sections requested meanwhile, which unlock()
// serves first. The head asks only while nobody holds pending, so it waits for the
// pending owner's bounded wait and section first, then its own. Overflow waiters (no
// node) are not fair: they take the lock whenever it is free, as the kernel's
// fallback does.
//
// The algorithm lives in detail::queued_core<Policy, Requests>; queued_lock is the
// core without privileged requests, priority_lock (priority_lock.hpp) the core with
// them. Without Requests the request bits are never set and no path tests them.
// sizeof(queued_lock) == 4, constexpr-constructible.
#pragma once

#include "hotpath/detail/annotations.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/detail/queued_core.hpp"
#include "hotpath/detail/queued_slowpath.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

// The core's ways in and out, told to clang's analysis and to TSan
// (detail/annotations.hpp); the core itself calls only its own, unannotated.
template <class Policy = queued_default_policy>
class HOTPATH_CAPABILITY("mutex") basic_queued_lock : public detail::queued_core<Policy, false> {
  using core = detail::queued_core<Policy, false>;

 public:
  HOTPATH_LOCK_LIFETIME(basic_queued_lock)

  void lock() noexcept HOTPATH_ACQUIRE() {
    detail::tsan_lock_begin(this);
    core::lock();
    detail::tsan_lock_end(this);
  }
  void lock_fifo() noexcept HOTPATH_ACQUIRE() {
    detail::tsan_lock_begin(this);
    core::lock_fifo();
    detail::tsan_lock_end(this);
  }
  bool try_lock() noexcept HOTPATH_TRY_ACQUIRE(true) {
    detail::tsan_lock_begin(this, true);
    const bool ok = core::try_lock();
    detail::tsan_lock_end(this, true, ok);
    return ok;
  }
  void unlock() noexcept HOTPATH_RELEASE() {
    detail::tsan_unlock_begin(this);
    core::unlock();
    detail::tsan_unlock_end(this);
  }
};

using queued_lock = basic_queued_lock<>;

}  // namespace hotpath
HOTPATH_VISIBILITY_END
