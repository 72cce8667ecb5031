// SPDX-License-Identifier: MIT
// What tests/schedule/queued_lock.cpp and priority_lock.cpp share: a lock word that
// reports the moments the bounds start from (a waiter's handoff request, the
// privileged thread's request), critical sections that count themselves against
// those moments, and a lock that its next owner frees.
#pragma once

#include <array>
#include <cstdint>

#include "hotpath/queued_lock.hpp"
#include "schedule/lock_properties.hpp"
#include "support/lock_test_access.hpp"

namespace hotpath::test::sched {

using word_bits = hotpath::detail::queued_core<hotpath::default_policy, true>;

// Bookkeeping of one run, touched only by the scheduled thread that runs.
struct bound_book {
  const void* word = nullptr;  // the watched lock word
  unsigned entries = 0;        // ordinary critical sections begun so far
  // Per thread: entries when it asked for the handoff, and sections allowed after.
  std::array<unsigned, 8> asked_at{};
  std::array<unsigned, 8> allowed{};
  std::array<bool, 8> asked{};
  bool requested = false;  // the privileged request, as asked/asked_at/allowed
  unsigned requested_at = 0, request_allowed = 0;
  // Per thread: relax() steps taken so far (counting_wait), and when it asked.
  std::array<unsigned, 8> relaxed{};
  std::array<unsigned, 8> relaxed_at_ask{};
};
inline bound_book bounds;

// A wait strategy that counts each thread's relax() steps in `bounds`.
template <class W>
struct counting_wait {
  static constexpr bool parks = W::parks;
  static bool relax(unsigned& n) noexcept {
    ++bounds.relaxed[thread_id()];
    return W::relax(n);
  }
  static void yield() noexcept { W::yield(); }
};

// sched::atomic that notes the two requests when the watched word's fetch_or makes
// them. The moment is exact (no scheduling point between the RMW and the note); the
// sections allowed after it: the one holding the lock then, if the locked byte was
// set (its entry may be counted just after), and for the handoff one more, begun in
// the instant between an owner's check of `handoff` and its release store.
//
// It also checks that pending is never set on a word that has a queue: the head
// waits for pending to clear, so a claimant preempted before withdrawing such a bit
// would stall every queued thread for its time slice.
template <class T>
struct spy_atomic : atomic<T> {
  using atomic<T>::atomic;
  bool compare_exchange_weak(T& e, T d, std::memory_order s, std::memory_order f) noexcept {
    const T old = e;
    const bool ok = atomic<T>::compare_exchange_weak(e, d, s, f);
    if (ok) no_pending_on_a_queue(old, d);
    return ok;
  }
  bool compare_exchange_strong(T& e, T d, std::memory_order s, std::memory_order f) noexcept {
    const T old = e;
    const bool ok = atomic<T>::compare_exchange_strong(e, d, s, f);
    if (ok) no_pending_on_a_queue(old, d);
    return ok;
  }
  void no_pending_on_a_queue(T old, T nv) noexcept {
    if constexpr (std::is_integral_v<T>) {
      if (static_cast<const void*>(this) == bounds.word) {
        check(!((nv & word_bits::pending) && !(old & word_bits::pending) &&
                (old & word_bits::tail_mask)),
              "pending was set on a word with a queue (a preempted claimant stalls its head)");
      }
    }
  }
  T fetch_or(T v, std::memory_order o) noexcept requires std::is_integral_v<T> {
    const T old = atomic<T>::fetch_or(v, o);
    no_pending_on_a_queue(old, old | v);
    if (static_cast<const void*>(this) == bounds.word) {
      const unsigned held = (old & word_bits::locked_mask) != 0 ? 1 : 0;
      if ((v & word_bits::handoff) && !(old & word_bits::handoff)) {
        const unsigned id = thread_id();
        bounds.asked[id] = true;
        bounds.asked_at[id] = bounds.entries;
        bounds.relaxed_at_ask[id] = bounds.relaxed[id];
        bounds.allowed[id] = held + 1;
      }
      if ((v & word_bits::request) && !(old & word_bits::request)) {
        bounds.requested = true;
        bounds.requested_at = bounds.entries;
        bounds.request_allowed = held;
      }
    }
    return old;
  }
};

template <class Wait, mutations M>
struct spy_policy : policy<Wait, M> {
  template <class T>
  using atomic = spy_atomic<T>;
};

// Called by a thread that has just entered a critical section (after lock()
// returned): checks the bounds and counts the section.
inline void entered(bool privileged = false) {
  const unsigned id = thread_id();
  if (bounds.asked[id]) {
    check(bounds.entries - bounds.asked_at[id] <= bounds.allowed[id],
          "more sections passed a waiter after it asked for the handoff than the bound allows");
    bounds.asked[id] = false;
  }
  if (privileged) {
    check(!bounds.requested || bounds.entries - bounds.requested_at <= bounds.request_allowed,
          "an ordinary section began after the privileged request");
    bounds.requested = false;
  } else {
    ++bounds.entries;
  }
}

// Mutual exclusion (lock_properties.hpp's checks) with the bounds above.
template <class Lock, class Enter>
void bounded_sections(Lock& lock, unsigned threads, unsigned rounds, Enter enter) {
  bounds = {};
  bounds.word = hotpath::detail::lock_test_access::word(lock);
  mutual_exclusion(
      threads, rounds,
      [&](unsigned r) {
        const bool privileged = enter(lock, r);
        entered(privileged);
      },
      [&](unsigned) { lock.unlock(); });
}

// The next owner may free the lock while the unlock() that released it to that
// owner still runs: `threads` threads take it once each and the last one in frees
// it as soon as it has unlocked. The lock's memory outlives the seed (graveyard), so
// any access to it after its destruction, a load included, fails the run.
template <class Lock>
void next_owner_frees(unsigned threads) {
  struct holder : graveyard_object {
    Lock lock;
  };
  auto* h = new holder;
  data<unsigned> inside(0);
  run(threads, [&](unsigned) {
    h->lock.lock();
    const unsigned n = inside.read() + 1;
    inside.write(n);
    h->lock.unlock();
    if (n == threads) delete h;
  });
}

}  // namespace hotpath::test::sched
