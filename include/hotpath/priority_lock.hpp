// SPDX-License-Identifier: MIT
// priority_lock: ordinary threads queue FIFO; one privileged thread (a qdisc's
// dequeuer) jumps the queue.
//
//   gate_   a queued_lock that ordinary threads pass one at a time, entering by
//           lock_fifo() (no lock stealing), so in FIFO order;
//           its holder is the one ordinary candidate for own_ (released once in)
//   own_    bit 0 held, bit 1 privileged request, bit 2 held by the privileged
//           thread, bit 3 ordinary candidate asleep, bit 4 privileged thread asleep
//
//   own_: 0 --ordinary CAS (neither held nor request) -> held--> held --unlock--> 0
//         * --lock_priority: fetch_or(request)--> request|* --held clears--> held|prio
//
// Guarantee: an ordinary thread enters only by a CAS from a value of own_ with
// neither `held` nor `request`, and the privileged thread's request is a fetch_or on
// own_, so every ordinary CAS after it in own_'s modification order fails. Once the request is
// published, no ordinary critical section begins before the privileged one: it waits for at most
// the critical section in progress (plus the handoff). Ordinary threads enter in the order they
// leave gate_, which is FIFO.
//
// Only one thread at a time may use the privileged side (lock_priority(),
// try_lock_priority(), privileged()); debug builds assert it.
//
// sizeof(priority_lock) == 8; waiters in gate_'s queue use its per-thread nodes.
#pragma once

#include <atomic>
#include <cstdint>

#include "hotpath/detail/config.hpp"
#include "hotpath/detail/futex.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/queued_lock.hpp"

namespace hotpath {

template <class Policy = default_policy>
class basic_priority_lock;

namespace detail {
// The privileged side as a Lockable (an empty base of the lock, so no extra bytes).
template <class Lock>
class privileged_side {
 public:
  void lock() noexcept { self().lock_priority(); }
  bool try_lock() noexcept { return self().try_lock_priority(); }
  void unlock() noexcept { self().unlock(); }

 private:
  Lock& self() noexcept { return static_cast<Lock&>(*this); }
};
}  // namespace detail

template <class Policy>
class basic_priority_lock : private detail::privileged_side<basic_priority_lock<Policy>> {
  using wait = typename Policy::wait;
  template <class T>
  using atomic = typename Policy::template atomic<T>;
  using side = detail::privileged_side<basic_priority_lock<Policy>>;
  friend side;

 public:
  static constexpr std::uint32_t held = 1u << 0;
  static constexpr std::uint32_t request = 1u << 1;
  static constexpr std::uint32_t prio_held = 1u << 2;
  static constexpr std::uint32_t ord_asleep = 1u << 3;
  static constexpr std::uint32_t prio_asleep = 1u << 4;

  using privileged_view = side;

  constexpr basic_priority_lock() noexcept = default;
  basic_priority_lock(const basic_priority_lock&) = delete;
  basic_priority_lock& operator=(const basic_priority_lock&) = delete;

  // Ordinary side.
  void lock() noexcept {
    std::uint32_t val = 0;
    // Nobody at the gate: nobody to pass, so try own_ directly (uncontended cost: one
    // load, one CAS). Acquire pairs with the release RMW in unlock().
    if (gate_.state() == 0 && own_.compare_exchange_strong(val, held, std::memory_order_acquire,
                                                           std::memory_order_relaxed)) {
      return;
    }
    gate_.lock_fifo();
    val = 0;
    // Acquire pairs with the release RMW in unlock().
    if (!own_.compare_exchange_strong(val, held, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
      wait_ordinary();
    }
    gate_.unlock();  // the next ordinary thread may now wait on own_
  }

  bool try_lock() noexcept {
    if (!gate_.try_lock()) return false;
    std::uint32_t val = 0;
    // Acquire pairs with the release RMW in unlock().
    const bool ok = own_.compare_exchange_strong(val, held, std::memory_order_acquire,
                                                 std::memory_order_relaxed);
    gate_.unlock();
    return ok;
  }

  // Privileged side.
  void lock_priority() noexcept {
    // Publishing the request: from here no ordinary CAS from 0 can succeed.
    const std::uint32_t old = own_.fetch_or(request, std::memory_order_acquire);
    HOTPATH_ASSERT((old & (request | prio_held)) == 0,
                   "priority_lock: two threads on the privileged side at once");
    (void)old;
    unsigned n = 0;
    for (;;) {
      std::uint32_t val = own_.load(std::memory_order_relaxed);
      if ((val & held) == 0) {
        // Acquire pairs with the release RMW in unlock().
        if (own_.compare_exchange_weak(val, (val & ~request) | held | prio_held,
                                       std::memory_order_acquire, std::memory_order_relaxed)) {
          return;
        }
        continue;
      }
      if (wait::relax(n)) continue;
      if constexpr (wait::parks) {
        park(held, prio_asleep, 1);
        n = 0;
      }
    }
  }

  bool try_lock_priority() noexcept {
    std::uint32_t val = own_.load(std::memory_order_relaxed);
    HOTPATH_ASSERT((val & (request | prio_held)) == 0,
                   "priority_lock: two threads on the privileged side at once");
    while ((val & held) == 0) {
      // Acquire pairs with the release RMW in unlock().
      if (own_.compare_exchange_weak(val, val | held | prio_held, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }

  // Either side.
  void unlock() noexcept {
    // Release hands the critical section over; the old value says who sleeps.
    const std::uint32_t old =
        own_.fetch_and(~(held | prio_held | ord_asleep | prio_asleep), std::memory_order_release);
    HOTPATH_ASSERT(old & held, "priority_lock::unlock() of a free lock");
    if constexpr (wait::parks) {
      if (old & prio_asleep) detail::unpark_channel(own_, 1);
      if (old & ord_asleep) detail::unpark_channel(own_, 0);
    }
  }

  // A Lockable whose lock() is lock_priority(): std::scoped_lock g(l.privileged());
  privileged_view& privileged() noexcept { return *this; }

  bool is_locked() const noexcept { return (own_.load(std::memory_order_relaxed) & held) != 0; }
  // True while a privileged request is published and not yet granted (a snapshot).
  bool request_pending() const noexcept {
    return (own_.load(std::memory_order_relaxed) & request) != 0;
  }

 private:
  // The ordinary candidate (gate_'s holder): wait for own_ to be free of both the
  // holder and a privileged request.
  void wait_ordinary() noexcept {
    unsigned n = 0;
    for (;;) {
      std::uint32_t val = own_.load(std::memory_order_relaxed);
      if ((val & (held | request)) == 0) {
        // Acquire pairs with the release RMW in unlock().
        if (own_.compare_exchange_weak(val, val | held, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
          return;
        }
        continue;
      }
      if (wait::relax(n)) continue;
      if constexpr (wait::parks) {
        park(held | request, ord_asleep, 0);
        n = 0;
      }
    }
  }

  // Sleep while a bit of `mask` and our `flag` are set. Every RMW on own_ is in one
  // modification order, so unlock()'s fetch_and either sees our flag or clears
  // `held` before our load (and the futex then sees a changed word).
  void park(std::uint32_t mask, std::uint32_t flag, unsigned channel) noexcept {
    const std::uint32_t val = own_.fetch_or(flag, std::memory_order_relaxed) | flag;
    if ((val & mask) != 0) detail::park(own_, val, channel);
  }

  basic_queued_lock<Policy> gate_;
  atomic<std::uint32_t> own_{0};
};

using priority_lock = basic_priority_lock<>;

}  // namespace hotpath
