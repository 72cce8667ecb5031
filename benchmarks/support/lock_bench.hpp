// SPDX-License-Identifier: MIT
// Lock benchmark bodies shared by the per-primitive files, and the baselines they
// are compared with in the same run: std::mutex and a plain test-and-set spinlock.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/detail/config.hpp"
#include "support/measure.hpp"

namespace hotpath::bench {

// The limit for a spinlock: one atomic exchange to lock, one store to unlock.
class tas_lock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed))
        detail::cpu_relax();
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// One thread, nobody else: the cost of lock() + unlock() on a warm line.
template <class Lock>
void uncontended(benchmark::State& state) {
  static Lock lock;
  std::uint64_t x = 0;
  for (auto _ : state) {
    lock.lock();
    benchmark::DoNotOptimize(++x);
    lock.unlock();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

// All threads hammer one lock around a short critical section (two shared words on
// their own line, as a counter update would touch) for a fixed window of wall time.
// The benchmark runs its own threads rather than Google Benchmark's, which give
// every thread the same iteration count: with more threads than cores that hides
// starvation and lets one descheduled spinner stretch a run without bound. Counters:
// ops/s over all threads, per-thread shares (min/max, Jain's fairness index), and
// fair_ops/s = threads x the slowest thread's rate.
template <class Lock>
void contended(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  const auto window = std::chrono::milliseconds(state.range(1));
  struct alignas(cache_line_size) shared_state {
    Lock lock;
    alignas(cache_line_size) std::uint64_t a = 0, b = 0;
  };
  for (auto _ : state) {
    shared_state s;
    std::atomic<unsigned> ready{0};
    std::atomic<bool> stop{false};
    std::vector<std::uint64_t> ops(threads);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < threads)
          std::this_thread::yield();
        std::uint64_t n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          s.lock.lock();
          ++s.a;
          s.b += s.a;
          s.lock.unlock();
          ++n;
        }
        ops[t] = n;
      });
    }
    const double secs = run_window(pool, ready, threads, stop, window);
    state.SetIterationTime(secs);
    double total = 0, sq = 0, lo = 1e300, hi = 0;
    for (auto n : ops) {
      const auto d = static_cast<double>(n);
      total += d;
      sq += d * d;
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    if (s.a != static_cast<std::uint64_t>(total))
      state.SkipWithError("lost update: lock is broken");
    state.counters["ops/s"] = total / secs;
    state.counters["min/max"] = hi > 0 ? lo / hi : 0;
    state.counters["jain"] = sq > 0 ? total * total / (threads * sq) : 0;
    // The rate at which every thread progresses: what a fixed amount of work per
    // thread would see, since it finishes with the slowest thread.
    state.counters["fair_ops/s"] = threads * lo / secs;
  }
}

inline void contended_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "ms"});
  for (int t : {1, 2, 4, 8, 16})
    b->Args({t, 300});
  b->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
}

template <class Lock>
int register_lock(const std::string& name) {
  benchmark::RegisterBenchmark(("uncontended/" + name).c_str(), uncontended<Lock>);
  benchmark::RegisterBenchmark(("contended/" + name).c_str(), contended<Lock>)
      ->Apply(contended_args);
  return 0;
}

}  // namespace hotpath::bench

// Registers the uncontended and contended benchmarks of one lock type.
#define HOTPATH_LOCK_BENCHMARKS(name, ...)                 \
  static const int BENCHMARK_PRIVATE_NAME(hotpath_lock_) = \
      ::hotpath::bench::register_lock<__VA_ARGS__>(name)
