// SPDX-License-Identifier: MIT
// Measurement helpers shared by the benchmarks that run their own threads for a
// window of wall time.
#pragma once

#include <benchmark/benchmark.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <thread>
#include <vector>

namespace hotpath::bench {

// The cpus this process may run on.
inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// The median (reorders v); 0 for an empty v.
inline double median(std::vector<double>& v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

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

// Arguments {threads, ms} for each thread count, one manually timed iteration.
inline void thread_window_args(benchmark::internal::Benchmark* b,
                               std::initializer_list<int> threads, int ms) {
  b->ArgNames({"threads", "ms"});
  for (int t : threads)
    b->Args({t, ms});
  b->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
}

}  // namespace hotpath::bench
