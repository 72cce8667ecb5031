// SPDX-License-Identifier: MIT
// What every hotpath primitive shares: cache-line size, cpu_relax(), assertions,
// whether a sanitizer that cannot see through our fast paths is watching, and the
// check that every translation unit of a program was built in the same mode.
#pragma once

#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define HOTPATH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HOTPATH_TSAN 1
#endif
#endif
#ifndef HOTPATH_TSAN
#define HOTPATH_TSAN 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define HOTPATH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HOTPATH_ASAN 1
#endif
#endif
#ifndef HOTPATH_ASAN
#define HOTPATH_ASAN 0
#endif

// Restartable sequences (detail/rseq.hpp): x86-64 Linux with glibc only. The
// sanitizers cannot see inside the assembly, so their builds take the portable path.
// A build may set HOTPATH_RSEQ=0 itself (for the whole program: see below).
#if !defined(HOTPATH_RSEQ)
#if defined(__linux__) && defined(__x86_64__) && defined(__GLIBC__) && !HOTPATH_TSAN && \
    !HOTPATH_ASAN
#define HOTPATH_RSEQ 1
#else
#define HOTPATH_RSEQ 0
#endif
#endif

// Lock path counters (detail/lock_stats.hpp): off unless the build sets
// HOTPATH_LOCK_STATS=1 (for the whole program: see below).
#if !defined(HOTPATH_LOCK_STATS)
#define HOTPATH_LOCK_STATS 0
#endif

// One copy per process. hotpath keeps process-wide state in function-local statics,
// inline variables and thread_locals of inline functions and templates (the thread
// slot registry and node table, the RCU domain and each thread's reader state). In
// a shared library built with -fvisibility=hidden every library would get its own
// copy of each, so that a queue tail would name different nodes in two libraries
// sharing a lock, and a grace period in one would ignore the other's readers. So
// every hotpath header declares its entities with default visibility, as libstdc++
// does for namespace std: the dynamic linker then binds them to one definition.
// Instantiations with a user's policy type take that type's visibility: a policy
// used across libraries needs default visibility too.
#if defined(__GNUC__)
#define HOTPATH_VISIBILITY_BEGIN _Pragma("GCC visibility push(default)")
#define HOTPATH_VISIBILITY_END _Pragma("GCC visibility pop")
#else
#define HOTPATH_VISIBILITY_BEGIN
#define HOTPATH_VISIBILITY_END
#endif

// Debug-build precondition checks; compiled out with NDEBUG like assert().
#define HOTPATH_ASSERT(cond, msg) assert((cond) && (msg))

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

// The size hotpath pads and aligns shared data to. A constant per architecture, not
// std::hardware_destructive_interference_size: it is part of the layout of types that
// objects built by different compilers may share (queued_lock's nodes, the RCU
// domain, rcu_cell, percpu slots), and that value is not: GCC gives 256 on aarch64
// where Clang before 19 has none (a fallback of 64), and GCC's changes with -mtune
// and --param destructive-interference-size (tests/build_mode_test.cpp builds one
// translation unit with that flag and compares layouts). 128 on aarch64 (Apple cores
// have 128-byte lines) and POWER, 256 on s390x, 64 elsewhere (x86-64: GCC's value).
#if defined(__aarch64__) || defined(__powerpc64__)
inline constexpr std::size_t cache_line_size = 128;
#elif defined(__s390x__)
inline constexpr std::size_t cache_line_size = 256;
#else
inline constexpr std::size_t cache_line_size = 64;
#endif

namespace detail {

// One iteration of a spin-wait loop: tells the core (and an SMT sibling) that we
// are spinning, as the kernel's cpu_relax() does.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  asm volatile("" ::: "memory");
#endif
}

// Keeps the caller's errno across a scope that may change it: a syscall that fails,
// a first-use initialisation (an allocation, a mutex, a magic static whose guard
// sleeps on a futex and wakes with EINTR or EAGAIN). No hotpath lock changes errno
// in lock(), try_lock() or unlock(): a caller may lock between a failed call and its
// read of errno, and a signal handler that takes a lock would spoil the errno of the
// code it interrupted. (RCU's first read section of a thread, its grace-period waits
// and the constructors of per-cpu data make no such promise.)
class errno_keeper {
 public:
  errno_keeper() noexcept : saved_(errno) {}
  ~errno_keeper() { errno = saved_; }
  errno_keeper(const errno_keeper&) = delete;
  errno_keeper& operator=(const errno_keeper&) = delete;

 private:
  int saved_;
};

// One build mode per process. HOTPATH_RSEQ (percpu_counter's paths and error bound),
// HOTPATH_NO_MEMBARRIER (which fences pair up), ThreadSanitizer (fences and
// annotations) and HOTPATH_LOCK_STATS (counts on the lock paths) change the bodies of
// inline functions, and the linker keeps one copy of each: two objects built with
// different values would break the one-definition rule silently, e.g. a reader built
// for membarrier (a compiler barrier) paired with a grace period built for
// ThreadSanitizer (no membarrier). So each translation unit checks its mode against
// the first one's when the program or a shared library is loaded, and a mismatch stops
// the process with a message. Not a link error: an absolute symbol whose value is the
// mode makes GNU ld, gold and lld refuse a mismatch, but Clang's LTO refuses even two
// equal copies of it.
inline void check_build_mode(unsigned mode) noexcept {
  static constinit std::atomic<unsigned> first{0};
  unsigned seen = 0;
  // Relaxed: one word, compared only with itself.
  if (first.compare_exchange_strong(seen, mode, std::memory_order_relaxed) || seen == mode) return;
  auto bit = [](unsigned m, unsigned b) { return (m >> b) & 1u; };
  std::fprintf(stderr,
               "hotpath: translation units built in different modes (HOTPATH_RSEQ %u/%u, "
               "HOTPATH_NO_MEMBARRIER %u/%u, ThreadSanitizer %u/%u, HOTPATH_LOCK_STATS %u/%u); "
               "build every object of the program with the same settings\n",
               bit(seen, 1), bit(mode, 1), bit(seen, 2), bit(mode, 2), bit(seen, 3), bit(mode, 3),
               bit(seen, 4), bit(mode, 4));
  std::abort();
}

#if defined(__GNUC__)
namespace {
#if defined(HOTPATH_NO_MEMBARRIER)
constexpr unsigned no_membarrier = 1;
#else
constexpr unsigned no_membarrier = 0;
#endif
// This translation unit's mode; bit 0 keeps it nonzero.
constexpr unsigned build_mode = 1u | (HOTPATH_RSEQ ? 2u : 0u) | (no_membarrier << 2) |
                                (HOTPATH_TSAN ? 8u : 0u) | (HOTPATH_LOCK_STATS ? 16u : 0u);
[[gnu::constructor]] void check_this_translation_unit() noexcept {
  check_build_mode(build_mode);
}
}  // namespace
#endif

}  // namespace detail
}  // namespace hotpath
HOTPATH_VISIBILITY_END
