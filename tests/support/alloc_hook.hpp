// SPDX-License-Identifier: MIT
// Replaces the global operator new/delete of a test program (include it in exactly
// one of its translation units) to count this thread's allocations and to make
// them fail on demand:
//   alloc_hook::count()       allocations by this thread so far
//   alloc_hook::fail_after(k) this thread's allocation after the next k throws bad_alloc
//                             (errno ENOMEM, as a real failure leaves it)
//   alloc_hook::fail_all()    every allocation of this thread throws, until:
//   alloc_hook::no_failure()  cancels either
//   alloc_hook::failures()    allocations of this thread that were made to fail
// Counters are per thread (plain thread_locals, async-signal-safe to read), so a
// signal handler's allocations are counted on the thread it interrupts.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace hotpath::test::alloc_hook {

inline thread_local std::uint64_t allocations = 0;
inline thread_local std::int64_t countdown = -1;  // < 0: no failure planned
inline thread_local std::uint64_t failed = 0;
inline thread_local bool failing = false;

inline std::uint64_t count() noexcept {
  return allocations;
}
inline std::uint64_t failures() noexcept {
  return failed;
}
inline void fail_after(std::int64_t k) noexcept {
  countdown = k;
}
inline void fail_all() noexcept {
  failing = true;
}
inline void no_failure() noexcept {
  countdown = -1;
  failing = false;
}

inline void* allocate(std::size_t n, std::size_t align) {
  ++allocations;
  if (failing || (countdown >= 0 && countdown-- == 0)) {
    ++failed;
    errno = ENOMEM;  // as malloc() leaves it when operator new fails for real
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

// Out of line, so that the compiler does not see operator new's memory reach free().
[[gnu::noinline]] inline void deallocate(void* p) noexcept {
  std::free(p);
}

}  // namespace hotpath::test::alloc_hook

// Every form: a sanitizer's runtime replaces each of them, so one left out here
// would bypass the hook.
void* operator new(std::size_t n) {
  return hotpath::test::alloc_hook::allocate(n, alignof(std::max_align_t));
}
void* operator new[](std::size_t n) {
  return hotpath::test::alloc_hook::allocate(n, alignof(std::max_align_t));
}
void* operator new(std::size_t n, std::align_val_t a) {
  return hotpath::test::alloc_hook::allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return hotpath::test::alloc_hook::allocate(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return hotpath::test::alloc_hook::allocate(n, alignof(std::max_align_t));
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return hotpath::test::alloc_hook::allocate(n, alignof(std::max_align_t));
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return hotpath::test::alloc_hook::allocate(n, static_cast<std::size_t>(a));
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return hotpath::test::alloc_hook::allocate(n, static_cast<std::size_t>(a));
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete[](void* p) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete(void* p, std::size_t) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  hotpath::test::alloc_hook::deallocate(p);
}
