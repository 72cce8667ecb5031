// SPDX-License-Identifier: MIT
// Lock benchmark bodies shared by the per-primitive files and the showdown
// (benchmarks/peers/), and the baselines they are compared with in the same run:
// std::mutex and a plain test-and-set spinlock. Also the machinery every windowed
// benchmark uses: run_window() (threads of our own for a fixed wall-clock window,
// with throughput, fairness and CPU-time counters); latency_histogram and the clocks
// are support/measure.hpp's.
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

// Before any benchmark runs, the process has had a second thread, as every program
// that takes a lock has. Until then glibc's pthread_mutex (std::mutex) takes a
// single-threaded shortcut without atomic instructions (__libc_single_threaded), and
// the uncontended figures, which run first, measured that: std::mutex 3.3-3.9 ns
// instead of 12.8 on this machine (docs/locks.md). Nothing resets it once set.
inline const bool process_has_had_a_second_thread = [] {
  std::thread([] {}).join();
  return true;
}();

// Benchmarks that found a broken result (lost updates, wrong sums); a main() of our
// own turns a non-zero count into a failing exit status.
inline std::atomic<int> errors{0};
inline void fail(benchmark::State& state, const char* why) {
  errors.fetch_add(1, std::memory_order_relaxed);
  state.SkipWithError(why);
}

// Runs `threads` threads of our own for a fixed window of wall time, rather than
// Google Benchmark's, which give every thread the same iteration count: with more
// threads than cores that hides starvation and lets one descheduled spinner stretch
// a run without bound. body(t, stop) runs on thread t, loops until stop reads true
// and returns its operation count. Sets the iteration time and these counters:
//   ops/s       operations per second of wall time, all threads together
//   min/max     the slowest thread's share over the fastest's
//   jain        Jain's fairness index over the per-thread counts (1 = equal)
//   fair_ops/s  threads x the slowest thread's rate: what a fixed amount of work per
//               thread would see, since it finishes with the slowest thread
//   cpu_ns/op   CPU time of all threads per operation: a waiter that spins where it
//               could sleep pays here, and so do time slices lost to the spinners
// Returns the total operation count.
template <class Body>
std::uint64_t run_window(benchmark::State& state, unsigned threads,
                         std::chrono::milliseconds window, Body&& body) {
  std::atomic<unsigned> ready{0};
  std::atomic<bool> stop{false};
  std::vector<std::uint64_t> ops(threads);
  std::vector<double> cpu(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1, std::memory_order_relaxed);
      while (ready.load(std::memory_order_relaxed) < threads)
        std::this_thread::yield();
      const double cpu0 = thread_cpu_seconds();
      ops[t] = body(t, static_cast<const std::atomic<bool>&>(stop));
      cpu[t] = thread_cpu_seconds() - cpu0;
    });
  }
  const double secs = run_window(pool, ready, threads, stop, window);  // support/measure.hpp
  state.SetIterationTime(secs);
  double total = 0, lo = 1e300, hi = 0, cpu_secs = 0;
  for (unsigned t = 0; t < threads; ++t) {
    const auto d = static_cast<double>(ops[t]);
    total += d;
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    cpu_secs += cpu[t];
  }
  state.counters["ops/s"] = total / secs;
  state.counters["min/max"] = hi > 0 ? lo / hi : 0;
  state.counters["jain"] = jain_index(ops);
  state.counters["fair_ops/s"] = threads * lo / secs;
  state.counters["cpu_ns/op"] = total > 0 ? cpu_secs * 1e9 / total : 0;
  std::uint64_t sum = 0;
  for (auto n : ops)
    sum += n;
  return sum;
}

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
// their own line, as a counter update would touch) for a fixed window of wall time:
// range(0) threads, range(1) ms. With Latency, each lock() call is timed (two clock
// reads per operation, so throughput is not comparable) and p50 ... max reported.
template <class Lock, bool Latency = false>
void contended(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  const auto window = std::chrono::milliseconds(state.range(1));
  struct alignas(cache_line_size) shared_state {
    Lock lock;
    alignas(cache_line_size) std::uint64_t a = 0, b = 0;
  };
  for (auto _ : state) {
    shared_state s;
    std::vector<latency_histogram> hist(Latency ? threads : 0);
    const std::uint64_t total =
        run_window(state, threads, window, [&](unsigned t, const std::atomic<bool>& stop) {
          std::uint64_t n = 0;
          while (!stop.load(std::memory_order_relaxed)) {
            if constexpr (Latency) {
              const std::uint64_t t0 = now_ns();
              s.lock.lock();
              hist[t].record(now_ns() - t0);
            } else {
              s.lock.lock();
            }
            ++s.a;
            s.b += s.a;
            s.lock.unlock();
            ++n;
          }
          return n;
        });
    if (s.a != total) fail(state, "lost update: lock is broken");
    if constexpr (Latency) {
      for (unsigned t = 1; t < threads; ++t)
        hist[0].merge(hist[t]);
      hist[0].report(state);
    }
  }
}

// Where and how long: the benchmark-name prefix, thread counts and window.
struct lock_bench_options {
  std::string prefix;
  std::vector<int> threads{1, 2, 4, 8, 16};
  int window_ms = 300;
  bool latency = false;  // also register latency/<name>
};

template <class Lock>
int register_lock(const std::string& name, const lock_bench_options& o = {}) {
  benchmark::RegisterBenchmark((o.prefix + "uncontended/" + name).c_str(), uncontended<Lock>);
  windowed(benchmark::RegisterBenchmark((o.prefix + "contended/" + name).c_str(), contended<Lock>),
           o.threads, o.window_ms);
  if (o.latency)
    windowed(
        benchmark::RegisterBenchmark((o.prefix + "latency/" + name).c_str(), contended<Lock, true>),
        o.threads, o.window_ms);
  return 0;
}

}  // namespace hotpath::bench

// Registers the uncontended and contended benchmarks of one lock type.
#define HOTPATH_LOCK_BENCHMARKS(name, ...)                 \
  static const int BENCHMARK_PRIVATE_NAME(hotpath_lock_) = \
      ::hotpath::bench::register_lock<__VA_ARGS__>(name)
