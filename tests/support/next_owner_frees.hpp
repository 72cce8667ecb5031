// SPDX-License-Identifier: MIT
// queued_lock's and priority_lock's promise that the lock may be destroyed once
// unlocked, tested where AddressSanitizer can see a broken one.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "hotpath/detail/membarrier.hpp"
#include "hotpath/queued_lock.hpp"
#include "support/lock_test_access.hpp"

namespace hotpath::test {

// Safe destruction, the whole promise: the next owner frees the lock (heap memory,
// which AddressSanitizer watches) as soon as it has acquired and released it, while
// the unlock() that released it to that owner has not yet returned. The policy parks
// (so unlock() has its sleeper check after the release store) and holds the
// releasing thread inside unlock(), at its fence after the release store, until the
// lock is freed: the window is certain, not sampled. Any access of that unlock() to
// the lock after its release is then a heap-use-after-free under ASan. The next owner
// spins as the pending owner (it must not sleep: an unlock that sees a sleeper takes
// the RMW path, which has no such window; nor ask for the handoff, for the same reason).
namespace destroy {
inline std::atomic<bool> freed{false};
inline std::atomic<unsigned> windows{0};  // unlock() calls held open until the free
inline thread_local bool releaser = false;
struct policy : basic_policy<spin_then_park<(1u << 22), 0>> {
  // Never asks for the handoff, whose unlock() is the RMW path.
  static constexpr unsigned handoff_after = 1u << 30;
  static void light_fence() noexcept {
    if (releaser) {
      windows.fetch_add(1, std::memory_order_relaxed);
      // Bounded: a next owner that went to sleep after all never frees the lock here.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!freed.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    }
    detail::light_fence();
  }
};
}  // namespace destroy

template <class Lock>
void next_owner_frees_the_lock() {
  using word = basic_queued_lock<>;
  destroy::windows = 0;
  for (int k = 0; k < 50; ++k) {
    auto* l = new Lock;
    destroy::freed = false;
    l->lock();
    std::thread next([l] {
      l->lock();  // the pending owner: spins on the word until the release
      l->unlock();
      delete l;
      destroy::freed.store(true, std::memory_order_release);
    });
    // Until the next owner waits on the word as the pending owner.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while ((lock_test_access::state(*l) & word::pending) == 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::yield();
    }
    destroy::releaser = true;
    l->unlock();  // held at its fence until `next` has freed the lock
    destroy::releaser = false;
    next.join();
  }
  EXPECT_GT(destroy::windows.load(), 0u) << "no unlock() was held open: the test tested nothing";
}

}  // namespace hotpath::test
