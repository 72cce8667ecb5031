// SPDX-License-Identifier: MIT
// Measurement for the benchmarks that run their own threads for a window of wall
// time: examples/common/measure.hpp (clocks, CPU time, histogram, median, Jain's
// index, allowed cpus: one copy for examples, benchmarks and tests) brought into
// hotpath::bench, plus what only Google Benchmark programs need.
#pragma once

#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/measure.hpp"

namespace hotpath::bench {

using measure::allowed_cpus;
using measure::jain_index;
using measure::median;
using measure::now_ns;
using measure::thread_cpu_time;

inline double thread_cpu_seconds() noexcept {
  return std::chrono::duration<double>(thread_cpu_time()).count();
}

// measure::latency_histogram, which also reports itself as benchmark counters.
class latency_histogram : public measure::latency_histogram {
 public:
  // p50 ... p99.99 and the maximum as Google Benchmark counters, in ns.
  void report(benchmark::State& state) const {
    state.counters["p50_ns"] = percentile(0.50);
    state.counters["p90_ns"] = percentile(0.90);
    state.counters["p99_ns"] = percentile(0.99);
    state.counters["p99.9_ns"] = percentile(0.999);
    state.counters["p99.99_ns"] = percentile(0.9999);
    state.counters["max_ns"] = percentile(1.0);
    state.counters["samples"] = static_cast<double>(count());
  }
};

// Once all `threads` workers have counted themselves in `ready`, lets them run for
// `window`, raises `stop`, joins them and returns the seconds they ran.
inline double run_window(std::vector<std::thread>& pool, const std::atomic<unsigned>& ready,
                         unsigned threads, std::atomic<bool>& stop,
                         std::chrono::milliseconds window) {
  while (ready.load() < threads)
    std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(window);
  stop.store(true);
  for (auto& th : pool)
    th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Thread counts and window of a windowed benchmark: args {threads, ms}, one manually
// timed iteration.
inline benchmark::internal::Benchmark* windowed(benchmark::internal::Benchmark* b,
                                                const std::vector<int>& threads, int window_ms) {
  b->ArgNames({"threads", "ms"});
  for (int t : threads)
    b->Args({t, window_ms});
  return b->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
}

}  // namespace hotpath::bench
