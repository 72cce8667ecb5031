// SPDX-License-Identifier: MIT
// What hotpath tells the tools that check locking: clang's thread-safety analysis at
// compile time, ThreadSanitizer's mutex model at run time.
//
// 1. Thread-safety attributes (clang's -Wthread-safety). Every hotpath lock is a
//    capability and its lock()/unlock() acquire and release it, so a user's
//      long hits HOTPATH_GUARDED_BY(lock_);
//    is checked: an access without lock_ held, or a function that returns with it
//    still held, is a compile-time warning. Each macro expands to nothing on other
//    compilers, or when HOTPATH_NO_THREAD_ANNOTATIONS is defined. The names follow
//    clang's documentation (ThreadSafetyAnalysis.html), which describes each.
//
// 2. ThreadSanitizer's mutex annotations, only in a TSan build (gcc's
//    __SANITIZE_THREAD__ or clang's __has_feature(thread_sanitizer); off with
//    HOTPATH_NO_TSAN_ANNOTATIONS). TSan then knows which hotpath locks a thread holds:
//    it reports lock-order inversions (a potential deadlock), an unlock of a lock the
//    thread does not hold, and a lock destroyed while held, and names the locks held
//    in its race reports, as it does for std::mutex.
//
//    What TSan is told, and what it is not: only ownership. The happens-before edges
//    between one critical section and the next still come from the locks' own
//    atomics, as without the annotations, so a lock whose acquire is too weak still
//    shows up as a data race on the data it guards (the usual annotation protocol
//    would hide that: TSan ignores the lock's atomics between pre_lock and post_lock
//    and adds an edge of its own from each unlock to the next lock). So each entry and
//    exit here is bracketed: "divert" re-enables the lock's atomics inside the
//    annotated region, and the annotation's own acquire and release run with
//    synchronisation ignored.
//
//    The annotation functions are TSan's public interface (sanitizer/tsan_interface.h),
//    declared here by hand so that no sanitizer header is needed.
#pragma once

#include <type_traits>

#include "hotpath/detail/config.hpp"

// --- clang thread-safety attributes ------------------------------------------------
#if defined(__clang__) && defined(__has_attribute) && !defined(HOTPATH_NO_THREAD_ANNOTATIONS)
#if __has_attribute(capability)
#define HOTPATH_THREAD_ATTRIBUTE(x) __attribute__((x))
#endif
#endif
#ifndef HOTPATH_THREAD_ATTRIBUTE
#define HOTPATH_THREAD_ATTRIBUTE(x)
#endif

// A type whose objects are locks ("mutex" in clang's messages).
#define HOTPATH_CAPABILITY(x) HOTPATH_THREAD_ATTRIBUTE(capability(x))
// An RAII type that holds the capability its constructor acquires until it is destroyed.
#define HOTPATH_SCOPED_CAPABILITY HOTPATH_THREAD_ATTRIBUTE(scoped_lockable)
// Data that may be touched only with the given lock held (for a pointer: the pointee).
#define HOTPATH_GUARDED_BY(x) HOTPATH_THREAD_ATTRIBUTE(guarded_by(x))
#define HOTPATH_PT_GUARDED_BY(x) HOTPATH_THREAD_ATTRIBUTE(pt_guarded_by(x))
// Lock ordering among capabilities (checked with -Wthread-safety-beta).
#define HOTPATH_ACQUIRED_BEFORE(...) HOTPATH_THREAD_ATTRIBUTE(acquired_before(__VA_ARGS__))
#define HOTPATH_ACQUIRED_AFTER(...) HOTPATH_THREAD_ATTRIBUTE(acquired_after(__VA_ARGS__))
// A function that must be called with the given locks held (or, EXCLUDES, not held).
#define HOTPATH_REQUIRES(...) HOTPATH_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
#define HOTPATH_REQUIRES_SHARED(...) \
  HOTPATH_THREAD_ATTRIBUTE(requires_shared_capability(__VA_ARGS__))
#define HOTPATH_EXCLUDES(...) HOTPATH_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
// A function that returns with the lock held, or that is entered with it and releases
// it; with no argument, the object the member function is called on.
#define HOTPATH_ACQUIRE(...) HOTPATH_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define HOTPATH_ACQUIRE_SHARED(...) HOTPATH_THREAD_ATTRIBUTE(acquire_shared_capability(__VA_ARGS__))
#define HOTPATH_RELEASE(...) HOTPATH_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
#define HOTPATH_RELEASE_SHARED(...) HOTPATH_THREAD_ATTRIBUTE(release_shared_capability(__VA_ARGS__))
// A function that holds the lock on return iff it returns the first argument (true).
#define HOTPATH_TRY_ACQUIRE(...) HOTPATH_THREAD_ATTRIBUTE(try_acquire_capability(__VA_ARGS__))
// A run-time check that the lock is held; from then on the analysis assumes it.
#define HOTPATH_ASSERT_CAPABILITY(x) HOTPATH_THREAD_ATTRIBUTE(assert_capability(x))
// A function that returns a reference to the given lock (an accessor, or a view of it).
#define HOTPATH_RETURN_CAPABILITY(x) HOTPATH_THREAD_ATTRIBUTE(lock_returned(x))
// The analysis does not look inside this function (locking it cannot express).
#define HOTPATH_NO_THREAD_SAFETY_ANALYSIS HOTPATH_THREAD_ATTRIBUTE(no_thread_safety_analysis)

// --- ThreadSanitizer mutex annotations -----------------------------------------------
#if HOTPATH_TSAN && !defined(HOTPATH_NO_TSAN_ANNOTATIONS)
#define HOTPATH_TSAN_ANNOTATIONS 1
#else
#define HOTPATH_TSAN_ANNOTATIONS 0
#endif

#if HOTPATH_TSAN_ANNOTATIONS
extern "C" {
void __tsan_mutex_create(void* addr, unsigned flags);
void __tsan_mutex_destroy(void* addr, unsigned flags);
void __tsan_mutex_pre_lock(void* addr, unsigned flags);
void __tsan_mutex_post_lock(void* addr, unsigned flags, int recursion);
int __tsan_mutex_pre_unlock(void* addr, unsigned flags);
void __tsan_mutex_post_unlock(void* addr, unsigned flags);
void __tsan_mutex_pre_divert(void* addr, unsigned flags);
void __tsan_mutex_post_divert(void* addr, unsigned flags);
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
}
#endif

HOTPATH_VISIBILITY_BEGIN
namespace hotpath::detail {

#if HOTPATH_TSAN_ANNOTATIONS
// Flag values of sanitizer/tsan_interface.h.
inline constexpr unsigned tsan_mutex_not_static = 1u << 8;
inline constexpr unsigned tsan_mutex_try_lock = 1u << 4;
inline constexpr unsigned tsan_mutex_try_lock_failed = 1u << 5;

// A lock object begins (a constructor run at run time; a constant-initialised lock
// with static storage is never "created" and so never destroyed either: TSan learns
// of it at its first lock). not_static: a destroyed lock's address may be reused by
// another lock, which must not inherit its lock-order history or its owner.
inline void tsan_mutex_create(const void* m) noexcept {
  __tsan_mutex_create(const_cast<void*>(m), tsan_mutex_not_static);
}
// ... and ends. Ignored for a lock that was not created (the static one above), so
// that a static lock still in use by a detached thread is not torn down at exit.
inline void tsan_mutex_destroy(const void* m) noexcept {
  __tsan_mutex_destroy(const_cast<void*>(m), tsan_mutex_not_static);
}

// Before the lock's own acquisition: TSan checks the lock order here (so a real
// deadlock is reported before it hangs), then watches the lock's atomics as usual.
inline void tsan_lock_begin(void* m, bool is_try = false) noexcept {
  const unsigned f = is_try ? tsan_mutex_try_lock : 0u;
  __tsan_mutex_pre_lock(m, f);
  __tsan_mutex_pre_divert(m, f);
}
// After it: this thread owns m (if `acquired`). Synchronisation ignored: the acquire
// was the lock's own atomic, which TSan has seen.
inline void tsan_lock_end(void* m, bool is_try = false, bool acquired = true) noexcept {
  const unsigned f =
      (is_try ? tsan_mutex_try_lock : 0u) | (acquired ? 0u : tsan_mutex_try_lock_failed);
  __tsan_mutex_post_divert(m, 0);
  AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
  __tsan_mutex_post_lock(m, f, 0);
  AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
}
// Before the lock's own release: this thread gives up m (TSan reports an unlock of a
// lock it does not hold). Its release is the lock's own atomic, which TSan then sees.
inline void tsan_unlock_begin(void* m) noexcept {
  AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
  __tsan_mutex_pre_unlock(m, 0);
  __tsan_mutex_pre_divert(m, 0);
  AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
}
inline void tsan_unlock_end(void* m) noexcept {
  __tsan_mutex_post_divert(m, 0);
  __tsan_mutex_post_unlock(m, 0);
}
#else
inline void tsan_lock_begin(void*, bool = false) noexcept {}
inline void tsan_lock_end(void*, bool = false, bool = true) noexcept {}
inline void tsan_unlock_begin(void*) noexcept {}
inline void tsan_unlock_end(void*) noexcept {}
#endif

}  // namespace hotpath::detail
HOTPATH_VISIBILITY_END

// A hotpath lock's default constructor, and under TSan its destructor: TSan is told
// when a lock object begins and ends. Still constexpr (is_constant_evaluated() skips
// the annotation during constant initialisation); without TSan, exactly the
// defaulted constructor and the implicit destructor.
#if HOTPATH_TSAN_ANNOTATIONS
#define HOTPATH_LOCK_LIFETIME(T)                                                    \
  constexpr T() noexcept {                                                          \
    if (!std::is_constant_evaluated()) ::hotpath::detail::tsan_mutex_create(this);  \
  }                                                                                 \
  constexpr ~T() {                                                                  \
    if (!std::is_constant_evaluated()) ::hotpath::detail::tsan_mutex_destroy(this); \
  }
#else
#define HOTPATH_LOCK_LIFETIME(T) constexpr T() noexcept = default;
#endif
