// SPDX-License-Identifier: MIT
// An atomic for a lock's policy, basic_policy<Wait, observed_atomic>, that shows a test
// each change a read-modify-write (fetch_or, fetch_and, compare-exchange) makes to one
// watched 32-bit lock word: the test sets the word and a hook, note(old, new), and
// reads from there which transitions the lock made. Every other atomic, and the
// watched one's loads and stores, behave as std::atomic. With `in_order`, each RMW
// and its note run under one mutex, so the notes follow the word's modification order
// exactly and the test reads what they record under that mutex. Word-wide paths
// only: a lock's byte_ops need the plain std::atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>

namespace hotpath::test {

struct word_observer {
  using hook = void (*)(std::uint32_t old, std::uint32_t nv) noexcept;

  // Set while no thread uses the word, read by the lock's threads.
  std::atomic<const void*> word{nullptr};
  hook note = nullptr;
  bool in_order = false;
  std::mutex mu;

  void watch(const void* w, hook h, bool ordered) noexcept {
    note = h;
    in_order = ordered;
    word.store(w, std::memory_order_relaxed);  // published by the threads' creation
  }
  void stop() noexcept { word.store(nullptr, std::memory_order_relaxed); }
};
inline word_observer observer;

template <class T>
struct observed_atomic : std::atomic<T> {
  using base = std::atomic<T>;
  using base::base;

  T fetch_or(T v, std::memory_order o) noexcept {
    return rmw([&] {
      const T old = base::fetch_or(v, o);
      return std::pair{old, static_cast<T>(old | v)};
    });
  }
  T fetch_and(T v, std::memory_order o) noexcept {
    return rmw([&] {
      const T old = base::fetch_and(v, o);
      return std::pair{old, static_cast<T>(old & v)};
    });
  }
  // Never fails spuriously: a failure here means the word held something else.
  bool compare_exchange_weak(T& expected, T desired, std::memory_order s,
                             std::memory_order f) noexcept {
    return compare_exchange_strong(expected, desired, s, f);
  }
  bool compare_exchange_strong(T& expected, T desired, std::memory_order s,
                               std::memory_order f) noexcept {
    bool ok = false;
    rmw([&] {
      const T old = expected;
      ok = base::compare_exchange_strong(expected, desired, s, f);
      return ok ? std::pair{old, desired} : std::pair{expected, expected};
    });
    return ok;
  }

 private:
  // op() performs the RMW and returns {old, new}; the RMW's result is old.
  template <class Op>
  T rmw(Op op) noexcept {
    if constexpr (std::is_same_v<T, std::uint32_t>) {
      if (static_cast<const void*>(this) == observer.word.load(std::memory_order_relaxed)) {
        std::unique_lock g(observer.mu, std::defer_lock);
        if (observer.in_order) g.lock();
        const auto [old, nv] = op();
        if (old != nv) observer.note(old, nv);
        return old;
      }
    }
    return op().first;
  }
};

}  // namespace hotpath::test
