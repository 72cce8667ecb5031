// SPDX-License-Identifier: MIT
// The per-waiter bound of a lock's handoff, counted in sections: waiters come and go
// as newcomers while other threads keep the lock busy, and a waiter that asked for
// the handoff on its way in reports, once in, how many sections passed it after it
// asked. How it knows both is the test's (support/word_observer.hpp sees the request).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace hotpath::test {

class handoff_bound {
 public:
  // `waiters` threads each run `once()` (one acquisition) `rounds` times, and on until
  // `asks` acquisitions in all have asked for the handoff (most get in sooner), up to
  // `cap` rounds or 60 s from when every waiter runs, whichever is later (on a loaded
  // machine, both cores busy and under TSan, 1000 rounds of 4 waiters saw no ask);
  // each pauses after a round so that it comes back as a newcomer.
  template <class Once>
  void run_waiters(unsigned waiters, unsigned rounds, unsigned cap, std::uint64_t asks, Once once) {
    using clock = std::chrono::steady_clock;
    waiters_ = waiters;
    std::atomic<unsigned> started{0};
    std::atomic<clock::rep> deadline{0};
    std::vector<std::thread> pool;
    for (unsigned i = 0; i < waiters; ++i) {
      pool.emplace_back([&] {
        if (started.fetch_add(1) + 1 == waiters)
          deadline = (clock::now() + std::chrono::seconds(60)).time_since_epoch().count();
        while (deadline.load() == 0)
          std::this_thread::yield();
        auto more = [&](unsigned k) {
          return this->asks() < asks &&
                 (k < cap || clock::now().time_since_epoch().count() < deadline.load());
        };
        for (unsigned k = 0; k < rounds || more(k); ++k) {
          once();
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        through_.fetch_add(1, std::memory_order_relaxed);
      });
    }
    for (auto& t : pool)
      t.join();
  }

  // From once(): this acquisition asked for the handoff and `n` sections passed it.
  void passed(std::uint64_t n) noexcept {
    // Relaxed: counts, read once the waiters are joined (or as a loop's hint).
    asks_.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t w = worst_.load(std::memory_order_relaxed);
    while (n > w && !worst_.compare_exchange_weak(w, n, std::memory_order_relaxed)) {
    }
  }
  std::uint64_t asks() const noexcept { return asks_.load(std::memory_order_relaxed); }

  // Every waiter got through, some asked for the handoff, and none that asked was
  // passed by more than `limit` sections.
  void expect_at_most(std::uint64_t limit) const {
    EXPECT_EQ(through_.load(std::memory_order_relaxed), waiters_);
    EXPECT_GT(asks(), 0u) << "no waiter reached its bound: the test saw no handoff";
    const std::uint64_t worst = worst_.load(std::memory_order_relaxed);
    EXPECT_LE(worst, limit) << "a waiter that asked for the handoff was passed by " << worst
                            << " sections";
  }

 private:
  unsigned waiters_ = 0;
  std::atomic<unsigned> through_{0};
  std::atomic<std::uint64_t> asks_{0}, worst_{0};
};

}  // namespace hotpath::test
