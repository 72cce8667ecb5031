// SPDX-License-Identifier: MIT
// The contended paths of detail::queued_core (detail/queued_core.hpp): the pending
// owner, the queue of nodes, the bounded wait and its handoff, the privileged side's
// wait, and sleeping on the word.
//
// Waiting in user space (the pvqspinlock idea; policies with `parks`): queued waiters
// spin on their node a bounded time, then sleep on it until made head. The pending
// owner and the head spin on the word, then set `slow` and sleep on it; an unlock()
// that sees the flag before its release takes the RMW path and wakes them. The
// pending owner keeps pending until it has the lock (so a signal or a spurious
// wake-up never sends it behind later arrivals); past its bound it asks for the
// handoff. The kernel marks the locked byte itself (value 3) and so pays a cmpxchg in
// every pv unlock (a locked byte exchange costs 2x our store unlock here, a word CAS
// 4x: docs/locks.md). Here unlock stays a store: a sleeper also counts itself in a
// process-wide sleeper table (a padded counter per hash bucket of the lock's
// address), and an unlock() whose flag check came too early reads that counter after
// its store and wakes. The counter lives in static memory, so the lock may be
// destroyed by its next owner while that unlock() is still returning; the
// store-then-load race is closed by an asymmetric fence pair (detail/membarrier.hpp):
// the sleeper pays the heavy side.
#pragma once

#include <algorithm>
#include <cstdint>

#include "hotpath/detail/config.hpp"
#include "hotpath/detail/futex.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/detail/queued_core.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath::detail {

// *,*,* -> *,*,*  [+r];  *,*,0 [r] -> *,*,1 [-r -rs +ph], or unlock_slow() hands over
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::lock_request() noexcept requires Requests {
  // Relaxed: ownership is acquired below, by the CAS or the load that sees the handover.
  std::uint32_t val = word_.fetch_or(request, std::memory_order_relaxed);
  HOTPATH_ASSERT((val & (request | prio_held)) == 0,
                 "priority_lock: two threads on the privileged side at once");
  val |= request;
  unsigned n = 0;
  for (;;) {
    if ((val & request) == 0) {  // handed over by unlock_slow()
      count(path::privileged);
      return;
    }
    if ((val & locked_mask) == 0) {
      // Acquire pairs with the release store (or RMW) of the previous owner's unlock().
      if (word_.compare_exchange_weak(val, (val & ~(request | prio_slow)) | locked_val | prio_held,
                                      std::memory_order_acquire, std::memory_order_acquire)) {
        count(path::privileged);
        return;
      }
      continue;
    }
    if (!wait::relax(n)) {
      if constexpr (wait::parks) {
        park_privileged();
        n = 0;
      }
    }
    // Acquire pairs with the release RMW in unlock_slow() that hands the lock over.
    val = word_.load(std::memory_order_acquire);
  }
}

// *,*,1 [r] -> *,*,1 [-r -rs +ph +c]; back at the privileged unlock: [-c -ph]
template <class Policy, bool Requests>
inline bool queued_core<Policy, Requests>::cede() noexcept requires Requests {
  std::uint32_t val = word_.load(std::memory_order_relaxed);
  do {
    if ((val & request) == 0) return false;
    // Release hands our section's writes to the privileged thread's acquire load.
  } while (!word_.compare_exchange_weak(val, (val & ~(request | prio_slow)) | prio_held | ceded,
                                        std::memory_order_release, std::memory_order_relaxed));
  if constexpr (wait::parks) {
    if (val & prio_slow) detail::policy_unpark_channel<Policy>(word_, 2);
  }
  // Never sleeps (nobody would wake us): the privileged section is short.
  unsigned n = 0;
  // Acquire pairs with the release RMW of the privileged unlock() that returns it.
  while (word_.load(std::memory_order_acquire) & ceded)
    detail::relax_or_yield<wait>(n);
  return true;
}

//   *,*,1 [c] -> *,*,1 [-c -ph]         back to the owner that ceded
//   *,*,1 [r] -> *,*,1 [-r -rs +ph]     to the privileged thread
//   *,*,1 [h] -> *,*,1 [-h -s -ph]      to the pending owner or the head that asked
//   *,*,1     -> *,*,0 [-s -p -ph]      released; wakes the sleepers it cleared
// Word-wide unlock: a handoff to the privileged thread or the head, or release with
// wake-ups. One RMW, so (single modification order) it sees every sleeper's flag
// and every request set before it; after it succeeds the word is not touched
// again (the lock may be gone).
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::unlock_slow() noexcept {
  std::uint32_t val = word_.load(std::memory_order_relaxed);
  std::uint32_t nv;
  do {
    if (Requests && (val & ceded)) {
      // The privileged section inside an ordinary one ends: the locked byte stays
      // set and goes back to the owner that ceded it (spinning in cede()).
      nv = val & ~(ceded | prio_held);
    } else if (Requests && (val & request)) {
      // To the privileged thread: the locked byte stays set; an ordinary handoff
      // asked for stays asked for, and is served by the privileged unlock().
      nv = (val & ~(request | prio_slow)) | prio_held;
    } else if (val & handoff) {
      // To the pending owner or the head: the locked byte stays set.
      nv = val & ~(handoff | slow | prio_held);
    } else {
      nv = val & ~(locked_mask | slow | parked | prio_held);
    }
    // Release pairs with the acquire load of the next owner.
  } while (
      !word_.compare_exchange_weak(val, nv, std::memory_order_release, std::memory_order_relaxed));
  if constexpr (wait::parks) {
    if (Requests && (val & (ceded | request)) != 0) {
      if ((val & ceded) == 0 && (val & prio_slow)) detail::policy_unpark_channel<Policy>(word_, 2);
      return;
    }
    if (val & slow) detail::policy_unpark_channel<Policy>(word_, 0);
    if ((val & parked) && (nv & parked) == 0) detail::policy_unpark_channel<Policy>(word_, 1);
  }
}

// 0,0,* -> 0,1,* (we own pending: pending_wait), else queue.
//
// The claim is a CAS that succeeds only while there is no pending owner and no
// queue. The kernel sets the bit with a fetch-or and withdraws it if a tail had
// appeared; a thread preempted between the two would hold the queue head (which
// waits for pending to clear) for its whole time slice. The kernel runs that window
// with preemption off; user space cannot, so the bit is never set on a queue. (Our
// fetch-or, whose whole result was used, already compiled to a CAS loop on x86;
// the kernel's x86 claim is a `lock bts` and a load.)
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::lock_slow() noexcept {
  std::uint32_t val = word_.load(std::memory_order_relaxed);
  // Relaxed: the claim orders nothing; pending_wait()'s acquire takes the lock.
  while ((val & (pending | tail_mask)) == 0) {
    if (word_.compare_exchange_weak(val, val | pending, std::memory_order_relaxed,
                                    std::memory_order_relaxed)) {
      pending_wait();
      return;
    }
  }
  queue();
}

// *,1,0 -> *,0,1 [-h], or handed over: *,1,1 -> *,0,1
// We own pending: wait until the locked byte clears and take it. Spin, then sleep
// (flag `slow`). We never give pending up (a spurious wake, a signal, or losing the
// free lock to a stealer would otherwise send us behind later arrivals): once past
// the bound (handoff_after steps, or slept once) we ask for the handoff, as the
// head does. The bit is ours alone: the head asks
// only while pending is clear, and nobody takes pending while a queue exists.
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::pending_wait() noexcept {
  bounded_wait w;
  for (;;) {
    // Acquire pairs with the release store in unlock() or the handoff RMW.
    std::uint32_t val = word_.load(std::memory_order_acquire);
    if (w.asked && (val & handoff) == 0) {
      // Handed over: the locked byte is ours; now let the head contend.
      word_.fetch_and(~pending, std::memory_order_relaxed);
      count(path::handed_off);
      return;
    }
    if ((val & busy_mask) == 0) {
      // pending -> locked, and our handoff request (if any) withdrawn; slow stays
      // (the head may sleep too). Acquire pairs with the release store in unlock().
      if (word_.compare_exchange_weak(val, (val & ~(pending | handoff)) | locked_val,
                                      std::memory_order_acquire, std::memory_order_relaxed)) {
        count(path::pending);
        return;
      }
      continue;
    }
    wait_step(w, true);
  }
}

// *,*,* -> t,*,* (the tail swap), then wait_head() and head_acquire()
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::queue() noexcept {
  unsigned& d = depth();
  const std::uint32_t slot = this_slot();
  node_block* b = nullptr;
  if (slot != slots::no_slot && d < nodes_per_thread) b = table::find_or_create(slot);
  if (b == nullptr) {  // no slot, nested too deep, or out of memory
    lock_overflow();
    return;
  }
  node& me = b->nodes[d];
  const std::uint32_t my_tail = ((slot + 1) << slot_shift) | (d << idx_shift);
  ++d;
  me.next.store(nullptr, std::memory_order_relaxed);
  me.state.store(waiting, std::memory_order_relaxed);

  // Swap the tail. Release publishes me's initialisation to the successor that
  // decodes our tail; acquire pairs with the predecessor's release here.
  std::uint32_t old = word_.load(std::memory_order_relaxed);
  while (!word_.compare_exchange_weak(old, (old & ~tail_mask) | my_tail, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
  }
  bool slept = false;
  if (old & tail_mask) {
    node_of(old & tail_mask).next.store(&me, std::memory_order_release);  // read by prev
    slept = wait_head(me);
  }
  head_acquire(my_tail, me, slept);
  --d;
}

// t,0,0 -> 0,0,1 [-h -s] or n,0,0 -> n,0,1 [-h -s] (keeps p); handed over:
// t,*,1 -> 0,*,1
// Queue head: take the free lock, or, after the bound, have it handed over.
// `slept`: it already slept in the queue, i.e. waited past the bound.
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::head_acquire(std::uint32_t my_tail, node& me,
                                                        bool slept) noexcept {
  bounded_wait w;
  w.past_bound = slept;
  for (;;) {
    // Acquire pairs with the release store in unlock() or the handoff RMW.
    std::uint32_t val = word_.load(std::memory_order_acquire);
    if (w.asked && (val & handoff) == 0) {
      // Handed over: the locked byte is ours. Clear the tail if it is still ours.
      count(path::handed_off);
      while ((val & tail_mask) == my_tail) {
        if (word_.compare_exchange_weak(val, val & ~tail_mask, std::memory_order_relaxed,
                                        std::memory_order_relaxed)) {
          return;
        }
      }
      grant_next(me);
      return;
    }
    if ((val & (busy_mask | pending)) == 0) {
      // Take it; clear handoff and slow (only ours: pending is clear, so there is
      // no pending owner asleep) and the tail if it is ours.
      const bool last = (val & tail_mask) == my_tail;
      const std::uint32_t keep = parked | (last ? 0 : tail_mask);
      // Acquire pairs with the release store of the previous owner's unlock().
      if (!word_.compare_exchange_weak(val, (val & keep) | locked_val, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        continue;
      }
      count(path::queued);
      if (!last) grant_next(me);
      return;
    }
    // Not while a pending owner waits: it came first, and no new one can appear
    // behind a queue.
    wait_step(w, (val & pending) == 0);
  }
}

// *,*,* -> *,*,* [+h] (the ask), or park_on_word() [+s]
// One step of it: once past the bound (handoff_after steps, or slept once) and
// `may_ask`, ask for the handoff so that from now on the lock comes to us;
// otherwise spin, and with a parking policy sleep (flag slow).
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::wait_step(bounded_wait& w, bool may_ask) noexcept {
  if (!w.asked && w.past_bound && may_ask) {
    word_.fetch_or(handoff, std::memory_order_relaxed);
    w.asked = true;
    w.n = 0;  // a fresh spin budget for the handoff: it comes within two sections
    return;
  }
  // Spaced loads (see "Batches" in queued_lock.hpp): the owner re-takes the lock it releases
  // while we do not look.
  unsigned gap = 1;
  if (!w.past_bound) {
    gap = std::min({2u + w.steps, poll_gap_max, handoff_after - w.steps});
    w.past_bound = (w.steps += gap) == handoff_after;
  }
  bool park_now = false;
  for (unsigned i = 0; i < gap && !park_now; ++i)
    park_now = !wait::relax(w.n);
  if (!park_now) return;
  if constexpr (wait::parks) {
    park_on_word(0, slow, w.asked);
    w.past_bound = true;  // slept once
    w.n = 0;
  }
}

// successor's node: waiting -> head, or sleeping -> head and a wake-up
// Make our successor the queue head.
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::grant_next(node& me) noexcept {
  node* succ = me.next.load(std::memory_order_acquire);
  unsigned spins = 0;
  while (succ == nullptr) {
    // It swapped the tail but has not linked in yet; it cannot sleep before it does.
    detail::relax_or_yield<wait>(spins);
    succ = me.next.load(std::memory_order_acquire);
  }
  // Release/acquire with wait_head(); the old value says whether it sleeps.
  const std::uint32_t old = succ->state.exchange(head, std::memory_order_acq_rel);
  if constexpr (wait::parks) {
    // succ may be running and reuse its node: a spurious wake is then harmless.
    if (old == sleeping) detail::policy_unpark_one<Policy>(succ->state);
  }
}

// our node: waiting -> sleeping (then head, by grant_next())
// Wait to be made head; true if we slept on the way.
template <class Policy, bool Requests>
inline bool queued_core<Policy, Requests>::wait_head(node& me) noexcept {
  unsigned n = 0;
  for (;;) {
    // Acquire pairs with the exchange in the predecessor's grant_next().
    if (me.state.load(std::memory_order_acquire) == head) return false;
    if (wait::relax(n)) continue;
    if constexpr (wait::parks) {
      std::uint32_t expected = waiting;
      // Acquire on failure: it fails only because we were made head.
      if (me.state.compare_exchange_strong(expected, sleeping, std::memory_order_acquire,
                                           std::memory_order_acquire)) {
        do {
          count(path::parked);
          detail::policy_park<Policy>(me.state, sleeping);
        } while (me.state.load(std::memory_order_acquire) != head);
        return true;
      }
      return false;
    }
  }
}

// *,*,0 -> *,*,1, or park_on_word() [+p]
// No node (overflow): trylock, spin, then sleep on the word.
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::lock_overflow() noexcept {
  unsigned n = 0;
  for (;;) {
    std::uint32_t val = word_.load(std::memory_order_relaxed);
    if ((val & busy_mask) == 0) {
      // Acquire pairs with the release store in unlock().
      if (word_.compare_exchange_weak(val, val | locked_val, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        count(path::overflow);
        return;
      }
      continue;
    }
    if (wait::relax(n)) continue;
    if constexpr (wait::parks) {
      park_on_word(1, parked, false);
      n = 0;
    }
  }
}

// *,*,* -> *,*,* [+s] or [+p]; sleeps while the word stays as loaded
// Announce a sleeper with `flag` (so that unlock() takes unlock_slow(), which
// wakes precisely) and in the sleeper table (so that an unlock() already past its
// flag check sees us), then sleep on `channel` while the lock is held (and, for a
// head that asked for the handoff, not yet handed to it). Dekker with unlock(): we
// count ourselves, fence, load the word; it stores the locked byte, fences, loads
// the count (or does one RMW that sees the flag).
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::park_on_word(unsigned channel, std::uint32_t flag,
                                                        bool asked) noexcept {
  word_.fetch_or(flag, std::memory_order_relaxed);
  sleep_on_word(channel, [&](std::uint32_t val) {
    if ((val & busy_mask) == 0 || (val & flag) == 0) return false;
    return !asked || (val & handoff) != 0;  // not handed over meanwhile
  });
}

// *,*,* -> *,*,* [+rs]; sleeps while *,*,1 [r rs]
// The privileged thread sleeps while the lock is held and its request not yet
// served. The request bit alone already sends every unlock() that sees it to
// unlock_slow(), which wakes channel 2.
template <class Policy, bool Requests>
inline void queued_core<Policy, Requests>::park_privileged() noexcept {
  word_.fetch_or(prio_slow, std::memory_order_relaxed);
  sleep_on_word(2, [](std::uint32_t val) {
    return (val & locked_mask) != 0 && (val & request) != 0 && (val & prio_slow) != 0;
  });
}

// Count ourselves in the sleeper table, fence, and sleep on `channel` if the word
// (loaded after the fence) still says so.
template <class Policy, bool Requests>
template <class Still>
inline void queued_core<Policy, Requests>::sleep_on_word(unsigned channel,
                                                         Still still_blocked) noexcept {
  atomic<std::uint32_t>& counted = sleepers::of(this);
  counted.fetch_add(1, std::memory_order_relaxed);
  detail::policy_heavy_fence<Policy>();  // pairs with light_fence() in unlock()
  const std::uint32_t val = word_.load(std::memory_order_relaxed);
  if (still_blocked(val)) {
    count(path::parked);
    detail::policy_park<Policy>(word_, val, channel);
  }
  counted.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace hotpath::detail
HOTPATH_VISIBILITY_END
