// SPDX-License-Identifier: MIT
// Replaces the global operator new/delete of a test program (include it in exactly
// one of its translation units) to count this thread's allocations and to make
// them fail on demand:
//   alloc_hook::count()     allocations by this thread so far
//   alloc_hook::fail_next(n)  the next n allocations of this thread throw bad_alloc
//   alloc_hook::failures()  allocations of this thread that were made to fail
// Counters are per thread (plain thread_locals, async-signal-safe to read), so a
// signal handler's allocations are counted on the thread it interrupts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace hotpath::test::alloc_hook {

inline thread_local std::uint64_t allocations = 0;
inline thread_local std::uint64_t to_fail = 0;
inline thread_local std::uint64_t failed = 0;

inline std::uint64_t count() noexcept {
  return allocations;
}
inline std::uint64_t failures() noexcept {
  return failed;
}
inline void fail_next(std::uint64_t n) noexcept {
  to_fail = n;
}

inline void* allocate(std::size_t n, std::size_t align) {
  ++allocations;
  if (to_fail != 0) {
    --to_fail;
    ++failed;
    throw std::bad_alloc();
  }
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else if (posix_memalign(&p, align, n) != 0) {
    p = nullptr;
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace hotpath::test::alloc_hook

// The ordinary and aligned forms; the array and nothrow forms call these.
void* operator new(std::size_t n) {
  return hotpath::test::alloc_hook::allocate(n, alignof(std::max_align_t));
}
void* operator new(std::size_t n, std::align_val_t a) {
  return hotpath::test::alloc_hook::allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
