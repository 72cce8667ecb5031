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

#if defined(__cpp_lib_hardware_interference_size)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// GCC warns that the value may differ between -mtune settings; we accept that:
// it only sizes padding, never an ABI that crosses a library boundary.
#pragma GCC diagnostic ignored "-Winterference-size"
#endif
inline constexpr std::size_t cache_line_size = std::hardware_destructive_interference_size;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
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
