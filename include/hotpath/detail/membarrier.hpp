// SPDX-License-Identifier: MIT
// Asymmetric fences: make a frequent side cheap by making a rare side expensive.
//
// light_fence() and heavy_fence() together order "store X; fence; load Y" on one
// side against "store Y; fence; load X" on the other (Dekker), so at least one side
// sees the other's store. With membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which
// makes every running thread of the process execute a full barrier, the light side
// needs only a compiler barrier; a thread that is not running has been through a
// context switch, which is a full barrier. Without membarrier (not Linux, an old
// kernel, or ThreadSanitizer, which does not model it) both sides use a seq_cst fence.
// liburcu's memb flavour and folly's asymmetric barriers rest on the same guarantee.
#pragma once

#include <atomic>
#include <cstdlib>

#include "hotpath/detail/config.hpp"

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

HOTPATH_VISIBILITY_BEGIN
namespace hotpath::detail {

inline bool membarrier_register() noexcept {
#if defined(__linux__) && defined(SYS_membarrier) && !HOTPATH_TSAN && \
    !defined(HOTPATH_NO_MEMBARRIER)
  const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
  return false;
#endif
}

// Decided once per process: 1 available, 2 not, 0 not yet. The first answer stored
// wins, so every thread fences the same way; threads that race to decide each
// register (harmless: registering twice is allowed) and then take the stored answer.
// A thread reads 1 only after a registration has returned, so heavy_fence() never
// issues the command unregistered. Not a magic static: a thread that found another
// inside its initialisation would sleep on the guard's futex and wake with errno set
// (EINTR, EAGAIN), and registration itself sets errno where it fails (ENOSYS, EPERM
// under seccomp); both would leak out of an unlock().
inline constinit std::atomic<int> membarrier_state{0};

[[gnu::cold, gnu::noinline]] inline int membarrier_decide() noexcept {
  const errno_keeper keep;
  const int mine = membarrier_register() ? 1 : 2;
  int stored = 0;
  // Release publishes our registration to whoever reads 1; acquire on failure pairs
  // with the winner's release: its registration has returned.
  if (membarrier_state.compare_exchange_strong(stored, mine, std::memory_order_release,
                                               std::memory_order_acquire)) {
    return mine;
  }
  return stored;
}

inline bool membarrier_available() noexcept {
  // Acquire pairs with the CAS above: the registration that decided 1 has returned.
  int s = membarrier_state.load(std::memory_order_acquire);
  if (s == 0) [[unlikely]]
    s = membarrier_decide();
  return s == 1;
}

#if HOTPATH_TSAN
// ThreadSanitizer ignores atomic_thread_fence (and GCC warns about it): both sides
// do a seq_cst RMW on one shared word instead, which orders them just as a pair of
// fences would (the later RMW reads from the earlier) and which TSan does model.
// The price: TSan then sees every fencing thread synchronise with every earlier
// one, so a race whose two sides both pass a fence can hide in sanitizer builds.
inline std::atomic<unsigned> tsan_fence_word{0};
#endif

inline void light_fence() noexcept {
#if HOTPATH_TSAN
  tsan_fence_word.fetch_add(1, std::memory_order_seq_cst);
#else
  if (membarrier_available()) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
#endif
}

inline void heavy_fence() noexcept {
#if HOTPATH_TSAN
  tsan_fence_word.fetch_add(1, std::memory_order_seq_cst);
#else
#if defined(__linux__) && defined(SYS_membarrier)
  if (membarrier_available()) {
    // Cannot fail once registered. If it ever did, a fence here would not do: the
    // light side is only a compiler barrier, so nothing would order the readers,
    // and a grace period could end under them. Stop rather than free memory early.
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) std::abort();
    return;
  }
#endif
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// The pair through a primitive's policy: a policy may define static light_fence()
// and heavy_fence() (the deterministic scheduler of tests/schedule/ does, to model
// them); otherwise these are the functions above, at no cost.
template <class Policy>
inline void policy_light_fence() noexcept {
  if constexpr (requires { Policy::light_fence(); }) {
    Policy::light_fence();
  } else {
    light_fence();
  }
}
template <class Policy>
inline void policy_heavy_fence() noexcept {
  if constexpr (requires { Policy::heavy_fence(); }) {
    Policy::heavy_fence();
  } else {
    heavy_fence();
  }
}

}  // namespace hotpath::detail
HOTPATH_VISIBILITY_END
