// SPDX-License-Identifier: MIT
// ticket_lock: the FIFO spinlock that Linux used before qspinlock.
//
//   next_     ticket dispenser: lock() takes next_++ as its ticket
//   serving_  the ticket that may enter; unlock() advances it
//   sleepers_ how many waiters are parked (only with a parking policy)
//
//   free:            next_ == serving_
//   held, no queue:  next_ == serving_ + 1
//   held, k waiting: next_ == serving_ + 1 + k     (tickets compared mod 2^32)
//
// Every waiter reads the one serving_ line, so each handoff invalidates all of
// them: the reason Linux moved to queued locks. Kept as the baseline, and because
// it is small and strictly fair.
//
// Parking: a waiter that spun its budget registers in sleepers_, then sleeps on
// serving_ with futex channel (ticket mod 32); unlock wakes only the channel of the
// next ticket, so one handoff wakes one thread, not the herd. unlock() checks
// sleepers_ after its store without a locked instruction: the sleeper pays for the
// store-load ordering with an asymmetric heavy fence (membarrier) instead.
//
// Lifetime: with a parking policy, unlock() reads sleepers_ after the store that
// releases the lock, so the lock must outlive every unlock() call in progress; do not
// put it in an object that whichever thread next takes the lock may free (use
// mcs_lock or queued_lock there). Removing the read would need a locked RMW in
// unlock(), doubling the uncontended cost.
//
// sizeof(ticket_lock) == 12.
#pragma once

#include <atomic>
#include <cstdint>

#include "hotpath/detail/annotations.hpp"
#include "hotpath/detail/config.hpp"
#include "hotpath/detail/futex.hpp"
#include "hotpath/detail/membarrier.hpp"
#include "hotpath/detail/policy.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {
namespace detail {
struct lock_test_access;  // tests' view of the counters (tests/support/lock_test_access.hpp)
}  // namespace detail

template <class Policy = default_policy>
class HOTPATH_CAPABILITY("mutex") basic_ticket_lock {
 public:
  HOTPATH_LOCK_LIFETIME(basic_ticket_lock)
  basic_ticket_lock(const basic_ticket_lock&) = delete;
  basic_ticket_lock& operator=(const basic_ticket_lock&) = delete;

  void lock() noexcept HOTPATH_ACQUIRE() {
    detail::tsan_lock_begin(this);
    // Relaxed: taking a ticket orders nothing; entry is ordered by the acquire
    // load of serving_ below, which pairs with the release store in unlock().
    const std::uint32_t ticket = next_.fetch_add(1, std::memory_order_relaxed);
    if (serving_.load(entry_order) != ticket) wait_for(ticket);
    detail::tsan_lock_end(this);
  }

  bool try_lock() noexcept HOTPATH_TRY_ACQUIRE(true) {
    detail::tsan_lock_begin(this, true);
    std::uint32_t now = serving_.load(std::memory_order_acquire);
    // Only when nobody holds or waits (next_ == serving_) is ticket `now` ours at
    // once. Acquire on success pairs with the release store of serving_ that made
    // it free (we read that value above, and the CAS reads next_ after it).
    const bool ok = next_.compare_exchange_strong(now, now + 1, std::memory_order_acquire,
                                                  std::memory_order_relaxed);
    detail::tsan_lock_end(this, true, ok);
    return ok;
  }

  void unlock() noexcept HOTPATH_RELEASE() {
    detail::tsan_unlock_begin(this);
    // Only the holder writes serving_, so a load + store needs no RMW.
    const std::uint32_t next = serving_.load(std::memory_order_relaxed) + 1;
    serving_.store(next, std::memory_order_release);  // pairs with the acquire in lock()
    if constexpr (wait::parks) {
      // Dekker with the sleeper's (sleepers_++, heavy_fence, load serving_).
      detail::policy_light_fence<Policy>();
      if (sleepers_.load(std::memory_order_relaxed) != 0)
        detail::policy_unpark_channel<Policy>(serving_, next);
    }
    detail::tsan_unlock_end(this);
  }

  // True if some thread holds the lock (a snapshot, for assertions and statistics).
  [[nodiscard]] bool is_locked() const noexcept {
    return next_.load(std::memory_order_relaxed) != serving_.load(std::memory_order_relaxed);
  }

 private:
  using wait = typename Policy::wait;
  template <class T>
  using atomic = typename Policy::template atomic<T>;

  // Entry: pairs with the release store of serving_ in unlock().
  static constexpr auto entry_order = std::memory_order_acquire;

  void wait_for(std::uint32_t ticket) noexcept {
    unsigned n = 0;
    for (;;) {
      if (serving_.load(entry_order) == ticket) return;
      if (wait::relax(n)) continue;
      if constexpr (wait::parks) {
        sleepers_.fetch_add(1, std::memory_order_relaxed);
        detail::policy_heavy_fence<Policy>();  // pairs with light_fence() in unlock()
        const std::uint32_t now = serving_.load(std::memory_order_relaxed);
        if (now != ticket) detail::policy_park<Policy>(serving_, now, ticket);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        // Woken for our turn (or spuriously): spin again briefly before sleeping.
        n = 0;
      }
    }
  }

  friend struct detail::lock_test_access;

  atomic<std::uint32_t> next_{0};
  atomic<std::uint32_t> serving_{0};
  atomic<std::uint32_t> sleepers_{0};
};

using ticket_lock = basic_ticket_lock<>;

}  // namespace hotpath
HOTPATH_VISIBILITY_END
