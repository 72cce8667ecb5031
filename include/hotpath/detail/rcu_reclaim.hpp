// SPDX-License-Identifier: MIT
// basic_rcu_domain's retire and reclamation, out of line (rcu.hpp declares them, and
// its opening states what they guarantee: the bound from retire to free, the backlog
// limit, exit and fork). Here: the lock-free pending list, the one batch in flight
// under reclaim_mutex_, the byte count checked and charged in one CAS, the reclaimer
// thread and its futex sleep (Dekker with the retires that wake it), the atexit
// handler, and fork's three handlers. Included by rcu.hpp after the class.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "hotpath/detail/background_thread.hpp"
#include "hotpath/detail/config.hpp"
#include "hotpath/detail/futex.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/rcu.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

// Returns after every retire scheduled before the call has been reclaimed.
template <class Policy>
inline void basic_rcu_domain<Policy>::barrier() noexcept {
  HOTPATH_ASSERT(!in_read_section(), "rcu_barrier() inside a read-side section");
  HOTPATH_ASSERT(!local().reclaiming, "rcu_barrier() from a deleter");
  std::scoped_lock l(reclaim_mutex_);
  // A batch another thread took before us: its grace period is running.
  if (batch_ != nullptr) {
    wait_for_readers(batch_gp_);
    run(std::exchange(batch_, nullptr));
    in_flight_.store(false, std::memory_order_relaxed);
  }
  if (detail::rcu_node* b = take_pending()) {
    wait_for_readers(start_grace_period());
    run(b);
  }
}

template <class Policy>
inline void basic_rcu_domain<Policy>::prepare_fork() noexcept {
  basic_rcu_domain& d = instance();
  const thread_state& s = local();
  if (s.reclaiming) {  // run() is called only with the mutex held
    d.fork_hold_ = fork_hold::ours;
  } else if (s.nesting == 0) {
    d.reclaim_mutex_.lock();
    d.fork_hold_ = fork_hold::taken;
  } else {
    d.fork_hold_ = d.reclaim_mutex_.try_lock() ? fork_hold::taken : fork_hold::other;
  }
}

template <class Policy>
inline void basic_rcu_domain<Policy>::parent_after_fork() noexcept {
  basic_rcu_domain& d = instance();
  if (std::exchange(d.fork_hold_, fork_hold::none) == fork_hold::taken) d.reclaim_mutex_.unlock();
}

template <class Policy>
inline void basic_rcu_domain<Policy>::child_after_fork() noexcept {
  basic_rcu_domain& d = instance();
  // The reclaimer did not survive the fork (nor any thread starting or stopping it):
  // the child's next retire starts its own. Not under ThreadSanitizer, which cannot
  // follow threads started in the child of a multithreaded process.
  new (&d.thread_mutex_) std::mutex;
  if (HOTPATH_TSAN) {
    d.thread_state_.store(thread_disallowed, std::memory_order_relaxed);
  } else if (d.thread_state_.load(std::memory_order_relaxed) == thread_running) {
    d.thread_state_.store(thread_idle, std::memory_order_relaxed);
  }
  d.stop_.store(false, std::memory_order_relaxed);
  d.sleeping_.store(0, std::memory_order_relaxed);
  const thread_state& me = local();
  const reader* mine = me.rec;
  d.overflow_.store(me.overflow ? 1 : 0, std::memory_order_relaxed);
  d.for_each_reader([&](reader& r) {
    if (&r == mine) return true;
    r.ctr.store(0, std::memory_order_relaxed);
    r.in_use.store(false, std::memory_order_relaxed);
    return true;
  });
  switch (std::exchange(d.fork_hold_, fork_hold::none)) {
    case fork_hold::taken:
      d.reclaim_mutex_.unlock();
      break;
    case fork_hold::other:  // its holder does not exist here
      new (&d.reclaim_mutex_) std::mutex;
      if (d.batch_ != nullptr) d.batch_gp_ = d.start_grace_period();
      break;
    default:
      break;
  }
  d.in_flight_.store(d.batch_ != nullptr, std::memory_order_relaxed);
  // What other threads had counted and not yet pushed, or were reclaiming, is not
  // here: count what is (the child is single-threaded here).
  std::size_t bytes = 0, count = 0;
  for (detail::rcu_node* n = d.pending_.load(std::memory_order_relaxed); n; n = n->rcu_next) {
    bytes += n->rcu_bytes;
    ++count;
  }
  d.pending_count_.store(count, std::memory_order_relaxed);
  for (detail::rcu_node* n = d.batch_; n != nullptr; n = n->rcu_next)
    bytes += n->rcu_bytes;
  d.backlog_.store(bytes, std::memory_order_relaxed);
  d.poll_running_.store(false, std::memory_order_relaxed);
}

// Takes every pending node, oldest first. Caller holds reclaim_mutex_.
template <class Policy>
inline detail::rcu_node* basic_rcu_domain<Policy>::take_pending() noexcept {
  // Acquire pairs with the release CAS in retire().
  detail::rcu_node* n = pending_.exchange(nullptr, std::memory_order_acquire);
  detail::rcu_node* oldest = nullptr;
  std::size_t count = 0;
  while (n != nullptr) {
    detail::rcu_node* next = n->rcu_next;
    n->rcu_next = oldest;
    oldest = n;
    n = next;
    ++count;
  }
  pending_count_.fetch_sub(count, std::memory_order_relaxed);
  return oldest;
}

template <class Policy>
inline void basic_rcu_domain<Policy>::run(detail::rcu_node* n) noexcept {
  thread_state& s = local();
  const bool was = std::exchange(s.reclaiming, true);
  std::size_t bytes = 0;
  while (n != nullptr) {
    detail::rcu_node* next = n->rcu_next;
    bytes += n->rcu_bytes;  // before the deleter frees n
    n->rcu_reclaim(n);
    n = next;
  }
  // After the deleters: the backlog never reads less than what is still allocated.
  backlog_.fetch_sub(bytes, std::memory_order_relaxed);
  s.reclaiming = was;
}

// Non-blocking: finish the running batch if its readers have passed, and (if
// `take`) start a grace period for what is pending. If another thread is at it,
// leave it. Once exit() has run our handler, reclaims nothing.
template <class Policy>
inline auto basic_rcu_domain<Policy>::poll(bool take) noexcept -> poll_result {
  std::unique_lock l(reclaim_mutex_, std::try_to_lock);
  if (!l.owns_lock()) return poll_result::busy;
  // Dekker with stop_at_exit(): either it sees us running deleters and waits, or
  // we see that exit has begun and run none.
  poll_running_.store(true, std::memory_order_seq_cst);
  const struct done_polling {
    std::atomic<bool>& running;
    ~done_polling() { running.store(false, std::memory_order_release); }
  } done{poll_running_};
  if (exiting_.load(std::memory_order_seq_cst)) return poll_result::idle;
  if (batch_ != nullptr) {
    if (!readers_passed(batch_gp_)) return poll_result::in_flight;
    run(std::exchange(batch_, nullptr));
    in_flight_.store(false, std::memory_order_relaxed);
  }
  if (!take || (batch_ = take_pending()) == nullptr) return poll_result::idle;
  batch_gp_ = start_grace_period();
  // Idle readers: the batch can go at once.
  if (readers_passed(batch_gp_)) {
    run(std::exchange(batch_, nullptr));
    return poll_result::idle;
  }
  // Nobody may retire again: the reclaimer finishes it.
  in_flight_.store(true, std::memory_order_relaxed);
  wake_reclaimer();
  return poll_result::in_flight;
}

// Counts `bytes` into the backlog before the caller retires them. Past the limit,
// starts a grace period at once and, where the caller may wait (outside a section,
// not in a deleter, not once exit has begun), reclaims: a poll, which with idle
// readers frees everything, else one barrier (a grace period), after which it
// counts the bytes whatever the backlog (as kvfree_rcu_mightsleep() proceeds after
// its synchronize_rcu()): a retire waits at most one grace period. The check and
// the count are one CAS, so that threads retiring at once cannot pass the limit
// together.
template <class Policy>
inline void basic_rcu_domain<Policy>::charge(std::size_t bytes) noexcept {
  thread_state& s = local();
  const bool may_wait =
      s.nesting == 0 && !s.reclaiming && !s.no_wait && !exiting_.load(std::memory_order_relaxed);
  unsigned waits = 0;
  std::size_t held = backlog_.load(std::memory_order_relaxed);
  for (;;) {
    const std::size_t limit = backlog_limit_.load(std::memory_order_relaxed);
    const bool over = held != 0 && bytes > limit - std::min(held, limit);
    if (over && may_wait && waits < 2) {
      if (waits++ == 0) {
        (void)poll();
      } else {
        barrier();
      }
      held = backlog_.load(std::memory_order_relaxed);
      continue;
    }
    if (over && !s.reclaiming && s.nesting != 0) s.poll_due = s.unlock_work = true;
    // Relaxed: the count is a bound, not a publication (the push below is).
    if (backlog_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed,
                                       std::memory_order_relaxed))
      return;
  }
}

// Pushes n, charged `charged` bytes already (n->rcu_bytes is what run() uncounts).
// Never waits.
template <class Policy>
inline void basic_rcu_domain<Policy>::retire_charged(detail::rcu_node* n,
                                                     std::size_t charged) noexcept {
  if (n->rcu_bytes != charged)  // modular: the sum comes out right either way
    backlog_.fetch_add(n->rcu_bytes - charged, std::memory_order_relaxed);
  detail::rcu_node* head = pending_.load(std::memory_order_relaxed);
  do {
    n->rcu_next = head;
    // Release: the reclaimer's exchange (acquire) in take_pending() sees *n.
  } while (!pending_.compare_exchange_weak(head, n, std::memory_order_release,
                                           std::memory_order_relaxed));
  const std::size_t count = pending_count_.fetch_add(1, std::memory_order_relaxed) + 1;
  bool due = count >= batch_size;
  // A batch's first retire, or no reclaimer: the batch's age is our business.
  if (head == nullptr || thread_state_.load(std::memory_order_relaxed) != thread_running)
      [[unlikely]]
    due |= batch_started(head == nullptr);
  thread_state& s = local();
  // Never from a deleter. Inside our own section, leave it to the outermost
  // unlock(): our slot would hold up any batch we start (its ctr is older than
  // the new sequence), and deleters should not run inside a caller's section.
  if (due && !s.reclaiming) {
    if (s.nesting == 0) {
      (void)poll();
    } else {
      s.poll_due = true;
      s.unlock_work = true;
    }
  }
}

// After a push that found the list empty (`first`) or no reclaimer running: notes
// when the batch began, starts or wakes the reclaimer, and without one says
// whether the batch is old enough to close here.
template <class Policy>
[[gnu::noinline]] bool basic_rcu_domain<Policy>::batch_started(bool first) noexcept {
  const std::uint64_t now = detail::policy_now_ns<Policy>();
  if (first) pending_since_.store(now, std::memory_order_relaxed);
  switch (thread_state_.load(std::memory_order_relaxed)) {
    case thread_running:
      wake_reclaimer();
      return false;
    case thread_idle:
      // Once per batch age at most (a failing pthread_create is not cheap). If
      // another thread is starting it, the new reclaimer may already have looked
      // at the list and gone to sleep: wake it.
      if (now - last_start_ns_.load(std::memory_order_relaxed) >= age_ns || first) {
        last_start_ns_.store(now, std::memory_order_relaxed);
        if (start_reclaimer()) return false;
      }
      wake_reclaimer();
      break;
    default:
      break;
  }
  return now - pending_since_.load(std::memory_order_relaxed) >= age_ns;
}

template <class Policy>
inline bool basic_rcu_domain<Policy>::start_reclaimer() noexcept {
  std::unique_lock l(thread_mutex_, std::try_to_lock);  // never waits: someone is at it
  if (!l.owns_lock() || exiting_.load(std::memory_order_relaxed) ||
      thread_state_.load(std::memory_order_relaxed) != thread_idle)
    return false;
  // No deleter may run once exit() has begun: without the handler, no thread.
  if (!exit_handler_ && std::atexit(&stop_at_exit) != 0) return false;
  exit_handler_ = true;
  stop_.store(false, std::memory_order_relaxed);
  exited_.store(0, std::memory_order_relaxed);
  if (!detail::start_background_thread(&reclaimer_main, this))
    return false;  // tried again next batch
  thread_state_.store(thread_running, std::memory_order_relaxed);
  return true;
}

// Dekker with the reclaimer's sleep: whoever publishes work (a push, an in-flight
// batch, stop_) then reads sleeping_; the reclaimer stores it, then reads the work.
template <class Policy>
inline void basic_rcu_domain<Policy>::wake_reclaimer() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_relaxed) != 0 &&
      sleeping_.exchange(0, std::memory_order_relaxed) != 0)
    detail::unpark_all(sleeping_);
}

template <class Policy>
inline void* basic_rcu_domain<Policy>::reclaimer_main(void* self) noexcept {
  auto* d = static_cast<basic_rcu_domain*>(self);
  d->reclaim_loop();
  d->exited_.store(1, std::memory_order_release);  // for set_reclaimer_thread(false)
  detail::unpark_all(d->exited_);
  return nullptr;
}

// The reclaimer: sleeps until something is pending, lets the batch reach its age
// (a retiring thread may close it sooner, by size), then polls until no grace
// period is in flight, napping between polls: readers never wake anybody.
template <class Policy>
inline void basic_rcu_domain<Policy>::reclaim_loop() noexcept {
  for (;;) {
    while (!has_work()) {
      if (stop_.load(std::memory_order_relaxed) || exiting_.load(std::memory_order_relaxed)) return;
      sleeping_.store(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!has_work() && !stop_.load(std::memory_order_relaxed)) detail::park(sleeping_, 1);
      sleeping_.store(0, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_relaxed) || exiting_.load(std::memory_order_relaxed)) return;
    if (pending_.load(std::memory_order_relaxed) != nullptr) {
      // pending_since_ may be a later batch's (then we close early) or stale
      // (earlier): never later than when we saw this one.
      const std::uint64_t seen = detail::policy_now_ns<Policy>();
      const std::uint64_t since = std::min(pending_since_.load(std::memory_order_relaxed), seen);
      if (seen - since < age_ns)
        std::this_thread::sleep_for(std::chrono::nanoseconds(age_ns - (seen - since)));
    }
    napper nap;
    for (bool take = true; !stop_.load(std::memory_order_relaxed); take = false) {
      if (poll(take) == poll_result::idle) break;
      nap();
    }
  }
}

// atexit: after this returns no poll runs a deleter (the reclaimer's or a
// retire's; rcu_barrier() still does), no retire waits, and the reclaimer has
// returned, unless it did not within 1 s (descheduled, or in a deleter that waits
// for us): exit never hangs on it. At a dlclose() of a library built with hidden
// visibility, which runs the handler of that library's own domain, its code then no
// longer runs. Waits for the deleters a poll is running, never for readers (one may
// leave its section only during static destruction), unless called from a deleter.
template <class Policy>
inline void basic_rcu_domain<Policy>::stop_at_exit() noexcept {
  basic_rcu_domain& d = instance();
  d.exiting_.store(true, std::memory_order_seq_cst);
  d.stop_.store(true, std::memory_order_relaxed);
  d.wake_reclaimer();
  if (local().reclaiming) return;  // exit() from a deleter
  unsigned n = 0;
  while (d.poll_running_.load(std::memory_order_seq_cst))
    detail::relax_or_yield<wait>(n);
  // It returns within a nap (1 ms) of the wake-up; exit never hangs on it: at most 1 s.
  if (d.thread_state_.load(std::memory_order_relaxed) == thread_running) {
    for (int ms = 0; ms < 1000 && d.exited_.load(std::memory_order_acquire) == 0; ++ms)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace hotpath
HOTPATH_VISIBILITY_END
