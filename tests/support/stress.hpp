// SPDX-License-Identifier: MIT
// Stress and measurement harness shared by the tests: bounded by iterations and by
// time, and checking invariants inside the critical section.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <thread>
#include <vector>

namespace hotpath::test {

struct stress_result {
  std::uint64_t counter = 0;     // incremented non-atomically under the lock
  std::uint64_t total = 0;       // sum of per-thread iteration counts
  std::uint64_t violations = 0;  // times someone else was found inside
};

// `threads` threads each run up to `iters` critical sections, stopping early once
// `budget` has passed (checked outside the lock), so oversubscribed pure-spin runs
// stay bounded. The counts must still balance exactly.
template <class Lock>
stress_result stress_lock(Lock& lock, unsigned threads, std::uint64_t iters,
                          std::chrono::milliseconds budget) {
  std::uint64_t counter = 0;
  int inside = 0;
  std::atomic<std::uint64_t> violations{0};
  std::atomic<bool> go{false};
  std::vector<std::uint64_t> done(threads, 0);
  const auto deadline = std::chrono::steady_clock::now() + budget;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!go.load(std::memory_order_acquire))
        std::this_thread::yield();
      std::uint64_t i = 0;
      for (; i < iters; ++i) {
        if (std::chrono::steady_clock::now() > deadline) break;
        lock.lock();
        if (++inside != 1) violations.fetch_add(1, std::memory_order_relaxed);
        ++counter;
        --inside;
        lock.unlock();
      }
      done[t] = i;
    });
  }
  go.store(true, std::memory_order_release);
  for (auto& th : pool)
    th.join();
  stress_result r;
  r.counter = counter;
  r.violations = violations.load();
  for (auto d : done)
    r.total += d;
  return r;
}

// CPU time consumed by the whole process so far.
inline std::chrono::nanoseconds process_cpu_time() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// Holds `lock` for `hold` while `waiters` threads block in lock(); returns the
// process CPU time spent during the hold (after `settle`, which lets waiters
// finish spinning their budget). The holder itself sleeps.
template <class Lock>
std::chrono::nanoseconds cpu_while_waiting(Lock& lock, unsigned waiters,
                                           std::chrono::milliseconds settle,
                                           std::chrono::milliseconds hold) {
  lock.lock();
  std::atomic<unsigned> entered{0};
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < waiters; ++i) {
    pool.emplace_back([&] {
      lock.lock();
      entered.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
    });
  }
  std::this_thread::sleep_for(settle);
  const auto before = process_cpu_time();
  std::this_thread::sleep_for(hold);
  const auto spent = process_cpu_time() - before;
  const unsigned early = entered.load();
  lock.unlock();
  for (auto& th : pool)
    th.join();
  // Nobody may have entered while we held it.
  return early == 0 && entered.load() == waiters ? spent : std::chrono::nanoseconds::max();
}

}  // namespace hotpath::test
