// SPDX-License-Identifier: MIT
// What every hotpath primitive shares: cache-line size, cpu_relax(), assertions,
// and whether a sanitizer that cannot see through our fast paths is watching.
#pragma once

#include <cassert>
#include <cstddef>
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

}  // namespace detail
}  // namespace hotpath
HOTPATH_VISIBILITY_END
