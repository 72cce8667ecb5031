// SPDX-License-Identifier: MIT
// priority_lock: the usual lock benchmarks (its ordinary side), and the privileged
// thread's wait while ordinary threads contend, beside the same thread using plain
// lock() on the same lock.
#include "hotpath/priority_lock.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "support/lock_bench.hpp"

HOTPATH_LOCK_BENCHMARKS("priority_lock", hotpath::priority_lock);
HOTPATH_LOCK_BENCHMARKS("priority_lock<spin>", hotpath::basic_priority_lock<hotpath::spin_policy>);

namespace {

// A short critical section, as a qdisc enqueue or dequeue would be.
inline void critical_section(std::uint64_t& a, std::uint64_t& b) {
  ++a;
  b += a;
  for (int k = 0; k < 20; ++k)
    hotpath::detail::cpu_relax();
}

// range(0): ordinary threads; range(1): 1 = lock_priority(), 0 = plain lock().
// Counters: p50 and p99 of the measuring thread's wait in ns, its acquisitions, and
// the ordinary threads' throughput (they must keep moving).
template <class Lock>
void privileged_wait(benchmark::State& state) {
  const auto ordinary = static_cast<unsigned>(state.range(0));
  const bool privileged = state.range(1) != 0;
  for (auto _ : state) {
    struct alignas(hotpath::cache_line_size) shared_state {
      Lock lock;
      alignas(hotpath::cache_line_size) std::uint64_t a = 0, b = 0;
    } s;
    std::atomic<bool> stop{false};
    std::atomic<unsigned> ready{0};
    std::atomic<std::uint64_t> ordinary_ops{0};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < ordinary; ++t) {
      pool.emplace_back([&] {
        ready.fetch_add(1);
        std::uint64_t n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          s.lock.lock();
          critical_section(s.a, s.b);
          s.lock.unlock();
          ++n;
        }
        ordinary_ops.fetch_add(n);
      });
    }
    while (ready.load() < ordinary)
      std::this_thread::yield();
    std::vector<std::uint64_t> waits;
    waits.reserve(1 << 16);
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::milliseconds(300);
    while (std::chrono::steady_clock::now() < end && waits.size() < (1u << 16)) {
      for (int k = 0; k < 200; ++k)  // the dequeuer's work between acquisitions
        hotpath::detail::cpu_relax();
      const auto t0 = std::chrono::steady_clock::now();
      if (privileged) {
        s.lock.lock_priority();
      } else {
        s.lock.lock();
      }
      const auto t1 = std::chrono::steady_clock::now();
      critical_section(s.a, s.b);
      s.lock.unlock();
      waits.push_back(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    }
    stop = true;
    for (auto& th : pool)
      th.join();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(secs);
    std::sort(waits.begin(), waits.end());
    auto pct = [&](double p) {
      return static_cast<double>(waits[static_cast<std::size_t>(p * (waits.size() - 1))]);
    };
    state.counters["p50_ns"] = pct(0.50);
    state.counters["p99_ns"] = pct(0.99);
    state.counters["acquisitions"] = static_cast<double>(waits.size());
    state.counters["ordinary_ops/s"] = static_cast<double>(ordinary_ops.load()) / secs;
  }
}

void privileged_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ordinary", "privileged"});
  for (int t : {1, 3, 7})
    for (int p : {1, 0})
      b->Args({t, p});
  b->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(privileged_wait<hotpath::priority_lock>)
    ->Name("privileged_wait/priority_lock")
    ->Apply(privileged_args);
