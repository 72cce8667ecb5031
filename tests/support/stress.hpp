// SPDX-License-Identifier: MIT
// Stress and measurement harness shared by the tests: bounded by iterations and by
// time, and checking invariants inside the critical section.
//
// One knob sets how long every stress test runs: HOTPATH_STRESS_FACTOR (default 1)
// multiplies each start_gate budget, stress_lock's iterations and whatever a test
// passes through stress_scaled(). `ctest --preset stress` runs the suite with 10.
#pragma once

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "common/measure.hpp"

namespace hotpath::test {

// Polls `done` until it holds or `limit` passes (the limit is generous against a
// loaded machine: a bug fails the test, it does not hang it).
template <class F>
bool eventually(F done, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

using measure::process_cpu_time;

// HOTPATH_STRESS_FACTOR, read once: a positive number, 1 when unset; anything else
// is reported and taken as 1.
inline double stress_factor() {
  static const double factor = [] {
    const char* env = std::getenv("HOTPATH_STRESS_FACTOR");
    if (env == nullptr || *env == '\0') return 1.0;
    char* end = nullptr;
    const double f = std::strtod(env, &end);
    if (*end != '\0' || !std::isfinite(f) || f <= 0 || f > 1e6) {
      std::fprintf(stderr, "HOTPATH_STRESS_FACTOR='%s' is not a positive number; using 1\n", env);
      return 1.0;
    }
    return f;
  }();
  return factor;
}

// A stress test's iteration count or time budget, scaled by the factor (at least 1
// iteration; counts saturate rather than overflow).
template <class Int>
requires std::is_integral_v<Int> Int stress_scaled(Int n) {
  const double v = std::ceil(static_cast<double>(n) * stress_factor());
  if (v >= static_cast<double>(std::numeric_limits<Int>::max()))
    return std::numeric_limits<Int>::max();
  return std::max<Int>(static_cast<Int>(v), n > 0 ? 1 : n);
}
template <class Rep, class Period>
std::chrono::duration<Rep, Period> stress_scaled(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration<Rep, Period>(stress_scaled(d.count()));
}

// A deadline that starts only once every thread of a test is running, so that a
// loaded machine (threads slow to be scheduled) cannot use up the budget before any
// work is done. Each of the `threads` participants calls arrive_and_wait(); the last
// to arrive starts the clock and lets everybody go.
class start_gate {
 public:
  // `budget` is scaled by HOTPATH_STRESS_FACTOR.
  start_gate(unsigned threads, std::chrono::steady_clock::duration budget)
      : threads_(threads), budget_(stress_scaled(budget)) {}
  start_gate(const start_gate&) = delete;
  start_gate& operator=(const start_gate&) = delete;

  void arrive_and_wait() noexcept {
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) {
      deadline_ = std::chrono::steady_clock::now() + budget_;
      open_.store(true, std::memory_order_release);  // publishes deadline_
      return;
    }
    while (!open_.load(std::memory_order_acquire))
      std::this_thread::yield();
  }
  // Only after arrive_and_wait() has returned.
  bool expired() const noexcept { return std::chrono::steady_clock::now() > deadline_; }
  std::chrono::steady_clock::time_point deadline() const noexcept { return deadline_; }

 private:
  const unsigned threads_;
  const std::chrono::steady_clock::duration budget_;
  std::atomic<unsigned> arrived_{0};
  std::atomic<bool> open_{false};
  std::chrono::steady_clock::time_point deadline_{};
};

struct stress_result {
  std::uint64_t counter = 0;     // incremented non-atomically under the lock
  std::uint64_t total = 0;       // sum of per-thread iteration counts
  std::uint64_t violations = 0;  // times someone else was found inside
};

// `threads` threads each run up to `iters` critical sections, stopping early once
// `budget` has passed since all of them were running (checked outside the lock), so
// oversubscribed pure-spin runs stay bounded. The counts must still balance exactly.
// Both `iters` and `budget` are scaled by HOTPATH_STRESS_FACTOR.
template <class Lock>
stress_result stress_lock(Lock& lock, unsigned threads, std::uint64_t iters,
                          std::chrono::milliseconds budget) {
  iters = stress_scaled(iters);
  std::uint64_t counter = 0;
  int inside = 0;
  std::atomic<std::uint64_t> violations{0};
  std::vector<std::uint64_t> done(threads, 0);
  start_gate gate(threads, budget);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      gate.arrive_and_wait();
      std::uint64_t i = 0;
      for (; i < iters; ++i) {
        // Every thread gets at least one critical section, however loaded the machine.
        if (i > 0 && gate.expired()) break;
        lock.lock();
        if (++inside != 1) violations.fetch_add(1, std::memory_order_relaxed);
        ++counter;
        --inside;
        lock.unlock();
      }
      done[t] = i;
    });
  }
  for (auto& th : pool) {
    th.join();
  }
  stress_result r;
  r.counter = counter;
  r.violations = violations.load();
  for (auto d : done)
    r.total += d;
  return r;
}

// CPU time consumed so far by the threads with these clocks (pthread_getcpuclockid).
inline std::chrono::nanoseconds threads_cpu_time(const std::vector<clockid_t>& clocks) {
  std::chrono::nanoseconds sum{0};
  for (const clockid_t c : clocks) {
    timespec ts{};
    clock_gettime(c, &ts);
    sum += std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  }
  return sum;
}

// True if thread `tid` of this process is asleep (state S in /proc: a futex wait,
// not a spin or a sched_yield, which show R).
inline bool thread_sleeps(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // the name may hold spaces and parens
  return paren != nullptr && paren[1] == ' ' && paren[2] == 'S';
}

// Holds `lock` for `hold` while `waiters` threads block in lock(); returns the CPU
// time the waiters spent during the hold (the holder itself sleeps). The hold begins
// once every waiter runs and then, with `until_asleep`, once every waiter sleeps (at
// most 30 s: a lock whose waiters never park is then measured spinning), else after
// `settle`. Counting only the waiters' own clocks keeps the rest of the process (a
// sanitizer's background thread) out of it.
template <class Lock>
std::chrono::nanoseconds cpu_while_waiting(Lock& lock, unsigned waiters, bool until_asleep,
                                           std::chrono::milliseconds settle,
                                           std::chrono::milliseconds hold) {
  lock.lock();
  std::atomic<unsigned> started{0}, entered{0};
  std::vector<std::atomic<pid_t>> tids(waiters);
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < waiters; ++i) {
    pool.emplace_back([&, i] {
      tids[i].store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_relaxed);
      started.fetch_add(1, std::memory_order_release);  // publishes the tid
      lock.lock();
      entered.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
    });
  }
  std::vector<clockid_t> clocks(waiters);
  for (unsigned i = 0; i < waiters; ++i)
    pthread_getcpuclockid(pool[i].native_handle(), &clocks[i]);
  while (started.load(std::memory_order_acquire) < waiters)
    std::this_thread::yield();
  if (until_asleep) {
    // Every waiter asleep in two looks 10 ms apart (a thread may block briefly on
    // its way into the lock, e.g. allocating its queue node).
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (unsigned quiet = 0; quiet < 2 && std::chrono::steady_clock::now() < limit;) {
      bool all = true;
      for (unsigned i = 0; i < waiters && all; ++i)
        all = thread_sleeps(tids[i].load(std::memory_order_relaxed));
      quiet = all ? quiet + 1 : 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } else {
    std::this_thread::sleep_for(settle);
  }
  const auto before = threads_cpu_time(clocks);
  std::this_thread::sleep_for(hold);
  const auto spent = threads_cpu_time(clocks) - before;
  const unsigned early = entered.load();
  lock.unlock();
  for (auto& th : pool)
    th.join();
  // Nobody may have entered while we held it.
  return early == 0 && entered.load() == waiters ? spent : std::chrono::nanoseconds::max();
}

// The parking property: while a holder sleeps 300 ms, four waiters of a parking lock,
// once asleep, cost almost no CPU; the same lock with a pure-spin policy is the
// control that shows the measurement can see waiting. On a loaded machine the
// spinners get less than two cores, so the control is held only to a floor and to
// the contrast.
template <class ParkingLock, class SpinningLock>
void expect_waiters_park() {
  using namespace std::chrono_literals;
  ParkingLock parking;
  SpinningLock spinning;
  const auto parked = cpu_while_waiting(parking, 4, true, 0ms, 300ms);
  const auto spun = cpu_while_waiting(spinning, 4, false, 50ms, 300ms);
  EXPECT_LT(parked, 30ms) << "parked waiters used " << parked.count() << " ns of CPU";
  EXPECT_GT(spun, 20ms) << "spinning waiters used only " << spun.count() << " ns of CPU";
  EXPECT_GT(spun, 4 * parked);
}

}  // namespace hotpath::test
