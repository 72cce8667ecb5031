// SPDX-License-Identifier: MIT
// Parking: sleep until a 32-bit word changes, and wake sleepers.
//
// On Linux the raw futex is used for std::atomic<uint32_t>: FUTEX_WAIT_BITSET lets a
// waiter sleep on one "channel" (a bit of the mask) so that a lock can wake exactly
// the waiter whose turn it is, and futex wake on an address whose object has ended is
// harmless to the kernel, which a lock that hands over a stack-allocated node needs
// (the sleeper may return and reuse its node before the waker's syscall runs).
// (A test's instrumented atomic derived from std::atomic<uint32_t> takes the same
// path, so tests sleep as users do.) Elsewhere, and for other atomic types (the
// deterministic scheduler's), C++20 atomic wait/notify is used; channels are then ignored
// and every wake is a notify_all, which is correct because every wait is in a loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "hotpath/detail/config.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

HOTPATH_VISIBILITY_BEGIN
namespace hotpath::detail {

inline constexpr unsigned futex_channels = 32;

#if defined(__linux__)
// Every futex call goes through here. errno is left as it was (errno_keeper): a wait
// that returns EAGAIN or EINTR (or a wake on an address since unmapped, EFAULT) would
// otherwise leave it set. glibc's futex calls for pthread_mutex never set it.
inline void futex_call(const void* addr, int op, std::uint32_t val, std::uint32_t mask) noexcept {
  const errno_keeper keep;
  syscall(SYS_futex, addr, op, val, nullptr, nullptr, mask);
}
inline void futex_wait_raw(const void* addr, std::uint32_t expected, unsigned channel) noexcept {
  // Returns on wake, EAGAIN (value changed) or EINTR; callers loop and re-check.
  futex_call(addr, FUTEX_WAIT_BITSET_PRIVATE, expected, 1u << (channel % futex_channels));
}
inline void futex_wake_raw(const void* addr, unsigned channel, int count) noexcept {
  futex_call(addr, FUTEX_WAKE_BITSET_PRIVATE, static_cast<std::uint32_t>(count),
             1u << (channel % futex_channels));
}
inline void futex_wake_all_raw(const void* addr) noexcept {
  futex_call(addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, 0);
}
#endif

template <class A>
inline constexpr bool raw_futex_ok =
#if defined(__linux__)
    std::is_base_of_v<std::atomic<std::uint32_t>, A> &&
    sizeof(A) == 4 && std::atomic<std::uint32_t>::is_always_lock_free;
#else
    false;
#endif

// Sleep while `word` holds `expected`. May return spuriously.
template <class A>
inline void park(A& word, std::uint32_t expected, unsigned channel = 0) noexcept {
#if defined(__linux__)
  if constexpr (raw_futex_ok<A>) {
    futex_wait_raw(&word, expected, channel);
    return;
  }
#endif
  (void)channel;
  const errno_keeper keep;  // libstdc++'s wait leaves EINTR or EAGAIN in it
  word.wait(expected, std::memory_order_acquire);
}

// Wake every sleeper on `word`. Also the fallback of the two below: without channels
// every wake is a notify_all.
template <class A>
inline void unpark_all(A& word) noexcept {
#if defined(__linux__)
  if constexpr (raw_futex_ok<A>) {
    futex_wake_all_raw(&word);
    return;
  }
#endif
  const errno_keeper keep;
  word.notify_all();
}

// Wake one sleeper of `channel` on `word`.
template <class A>
inline void unpark_one(A& word, unsigned channel = 0) noexcept {
#if defined(__linux__)
  if constexpr (raw_futex_ok<A>) {
    futex_wake_raw(&word, channel, 1);
    return;
  }
#endif
  (void)channel;
  unpark_all(word);
}

// Wake every sleeper of `channel` on `word`.
template <class A>
inline void unpark_channel(A& word, unsigned channel) noexcept {
#if defined(__linux__)
  if constexpr (raw_futex_ok<A>) {
    futex_wake_raw(&word, channel, 0x7fffffff);
    return;
  }
#endif
  (void)channel;
  unpark_all(word);
}

// The same four through a primitive's policy: a policy may define static park(),
// unpark_one(), unpark_channel() and unpark_all() with the signatures above (the
// deterministic scheduler of tests/schedule/ does, to explore sleeps and wake-ups);
// otherwise these are the functions above, at no cost.
template <class Policy, class A>
inline void policy_park(A& word, std::uint32_t expected, unsigned channel = 0) noexcept {
  if constexpr (requires { Policy::park(word, expected, channel); }) {
    Policy::park(word, expected, channel);
  } else {
    park(word, expected, channel);
  }
}
template <class Policy, class A>
inline void policy_unpark_one(A& word, unsigned channel = 0) noexcept {
  if constexpr (requires { Policy::unpark_one(word, channel); }) {
    Policy::unpark_one(word, channel);
  } else {
    unpark_one(word, channel);
  }
}
template <class Policy, class A>
inline void policy_unpark_channel(A& word, unsigned channel) noexcept {
  if constexpr (requires { Policy::unpark_channel(word, channel); }) {
    Policy::unpark_channel(word, channel);
  } else {
    unpark_channel(word, channel);
  }
}
template <class Policy, class A>
inline void policy_unpark_all(A& word) noexcept {
  if constexpr (requires { Policy::unpark_all(word); }) {
    Policy::unpark_all(word);
  } else {
    unpark_all(word);
  }
}

}  // namespace hotpath::detail
HOTPATH_VISIBILITY_END
