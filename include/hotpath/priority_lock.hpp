// SPDX-License-Identifier: MIT
// priority_lock: a queued_lock for ordinary threads, plus lock_priority() for one
// privileged thread (a qdisc's dequeuer) that jumps ahead of every ordinary waiter.
//
// One 32-bit word, queued_lock's (detail/queued_core.hpp has the full layout), with three
// more bits in its flag byte:
//   bit 12  request    the privileged thread has asked; no ordinary thread may take
//                      the lock, and the owner's unlock() hands it over
//   bit 13  prio_slow  the privileged thread sleeps on the word (futex channel 2)
//   bit 14  prio_held  the privileged thread holds the lock
//   bit 15  ceded      ... lent to it by an ordinary owner's cede(), to be returned
//
// Transitions, in detail/queued_core.hpp's notation (tail,pending,locked [flags]; r request,
// rs prio_slow, ph prio_held, c ceded, h handoff, s slow, p parked):
//
//   *,*,* -> *,*,* [+r]                 lock_priority() publishes (lock_request)
//   *,*,0 [r] -> *,*,1 [-r -rs +ph]     ... and takes the free lock
//   *,*,1 [r] -> *,*,1 [-r -rs +ph]     or the owner's unlock() hands it over
//                                       (unlock_slow; an asked-for h stays asked)
//   *,*,1 [ph] -> *,*,0 [-ph -s -p]     the privileged unlock(), as queued_lock's
//                                       (or [h] -> [-h -s -ph]: hands over to the asker)
//   *,*,1 [r] -> *,*,1 [-r -rs +ph +c]  an ordinary owner's cede() lends it
//   *,*,1 [c] -> *,*,1 [-c -ph]         the privileged unlock() gives it back
//   *,*,* -> *,*,* [+rs]                the privileged thread sleeps (park_privileged)
//
// Ordinary side (lock(), try_lock()): queued_lock::lock() exactly, with the request bit
// in the "busy" test of every way in: the fast CAS of the free locked byte (which
// cannot see the flag byte: it reads the flag byte after its CAS and, if a request is
// there, backs off by unlock(), which hands the lock to the privileged thread before
// any critical section begins), the pending owner, the queue head, the overflow
// waiters. So a running thread may take a free lock before a sleeping queue head, and
// the head's bounded-wait handoff keeps every ordinary waiter moving, as in queued_lock.
//
// Guarantee: once lock_priority() has published its request (the fetch_or), no
// ordinary critical section begins before the privileged one: every ordinary
// acquisition is an RMW of the word that fails on the request bit (or, for the byte
// CAS, is withdrawn on seeing it), and an unlock() that sees the bit hands the lock
// to the privileged thread. It waits for at most the section in progress, plus the
// handoff (and a stealer's back-off, which holds no critical section). An unlock()
// that checked the flag byte just before the request releases the lock; the word is
// then free with the request set, which only the privileged thread may take.
//
// Uncontended, an ordinary lock()+unlock() costs queued_lock's: one byte CAS plus a
// load of the flag byte, and one release store. The privileged unlock() is one RMW.
//
// Strict FIFO: basic_priority_lock<Policy, /*Fifo=*/true> (fifo_priority_lock) enters
// ordinary threads by queued_lock::lock_fifo() (no steal attempt): FIFO among
// ordinary threads (try_lock() aside), every handoff a wake-up when waiters sleep.
//
// Only one thread at a time may use the privileged side (lock_priority(),
// try_lock_priority(), privileged()); debug builds assert it.
//
// sizeof(priority_lock) == 4, constexpr-constructible.
#pragma once

#include <cstdint>

#include "hotpath/detail/annotations.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/queued_lock.hpp"

namespace hotpath {

namespace detail {
// The privileged side as a Lockable (an empty base of the lock, so no extra bytes).
// To clang's analysis the view is the lock itself (privileged() returns it).
template <class Lock>
class HOTPATH_CAPABILITY("mutex") privileged_side {
 public:
  void lock() noexcept HOTPATH_ACQUIRE() { self().lock_priority(); }
  bool try_lock() noexcept HOTPATH_TRY_ACQUIRE(true) { return self().try_lock_priority(); }
  void unlock() noexcept HOTPATH_RELEASE() { self().unlock(); }

 private:
  Lock& self() noexcept { return static_cast<Lock&>(*this); }
};
}  // namespace detail

template <class Policy = default_policy, bool Fifo = false>
class HOTPATH_CAPABILITY("mutex") basic_priority_lock
    : private detail::privileged_side<basic_priority_lock<Policy, Fifo>> {
  using side = detail::privileged_side<basic_priority_lock<Policy, Fifo>>;
  using core = detail::queued_core<Policy, true>;
  friend side;

 public:
  static constexpr std::uint32_t request = core::request;
  static constexpr std::uint32_t prio_slow = core::prio_slow;
  static constexpr std::uint32_t prio_held = core::prio_held;
  static constexpr bool fifo = Fifo;

  using privileged_view = side;

  HOTPATH_LOCK_LIFETIME(basic_priority_lock)
  basic_priority_lock(const basic_priority_lock&) = delete;
  basic_priority_lock& operator=(const basic_priority_lock&) = delete;

  // Ordinary side.
  void lock() noexcept HOTPATH_ACQUIRE() {
    detail::tsan_lock_begin(this);
    if constexpr (Fifo) {
      core_.lock_fifo();
    } else {
      core_.lock();
    }
    detail::tsan_lock_end(this);
  }
  bool try_lock() noexcept HOTPATH_TRY_ACQUIRE(true) {
    detail::tsan_lock_begin(this, true);
    const bool ok = core_.try_lock();
    detail::tsan_lock_end(this, true, ok);
    return ok;
  }

  // Privileged side.
  void lock_priority() noexcept HOTPATH_ACQUIRE() {
    detail::tsan_lock_begin(this);
    core_.lock_request();
    detail::tsan_lock_end(this);
  }
  bool try_lock_priority() noexcept HOTPATH_TRY_ACQUIRE(true) {
    detail::tsan_lock_begin(this, true);
    const bool ok = core_.try_lock_request();
    detail::tsan_lock_end(this, true, ok);
    return ok;
  }

  // Ordinary owner inside a long critical section: if a privileged request is
  // pending, let the privileged section run now and carry on holding the lock after
  // it (no ordinary thread gets in between). True if it ceded. This keeps the
  // privileged wait at one stretch between cede() calls, not the whole section.
  // To TSan the owner gives the lock up while the privileged section runs (a request,
  // once seen by the owner, stays until the owner serves it, so cede() will cede).
  bool cede() noexcept HOTPATH_REQUIRES(this) {
    if (!request_pending()) return false;
    detail::tsan_unlock_begin(this);
    detail::tsan_unlock_end(this);
    const bool ceded = core_.cede();
    detail::tsan_lock_begin(this);
    detail::tsan_lock_end(this);
    return ceded;
  }

  // Either side.
  void unlock() noexcept HOTPATH_RELEASE() {
    detail::tsan_unlock_begin(this);
    core_.unlock();
    detail::tsan_unlock_end(this);
  }

  // A Lockable whose lock() is lock_priority(): std::scoped_lock g(l.privileged());
  privileged_view& privileged() noexcept HOTPATH_RETURN_CAPABILITY(this) { return *this; }

  bool is_locked() const noexcept { return core_.is_locked(); }
  // True while a privileged request is published and not yet granted (a snapshot).
  bool request_pending() const noexcept { return core_.request_pending(); }

 private:
  friend struct detail::lock_test_access;
  core core_;
};

using priority_lock = basic_priority_lock<>;
using fifo_priority_lock = basic_priority_lock<default_policy, true>;

}  // namespace hotpath
