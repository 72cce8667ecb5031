// SPDX-License-Identifier: MIT
// Baselines that every lock benchmark is read against.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

#include "support/lock_bench.hpp"

HOTPATH_LOCK_BENCHMARKS("std::mutex", std::mutex);
HOTPATH_LOCK_BENCHMARKS("tas", hotpath::bench::tas_lock);

namespace {

// What any handoff between two cores costs at least: one cache line passed back and
// forth, each thread waiting for the other's store in turn. An iteration is a round
// trip, two transfers; `transfer` is the time of one. (A lock passed between cores,
// a ring's index, a shared counter: each pays this per line it moves.)
void line_transfer(benchmark::State& state) {
  struct alignas(hotpath::cache_line_size) line {
    std::atomic<std::uint64_t> token{0};
  } l;
  std::atomic<bool> stop{false};
  std::thread partner([&] {
    // Relaxed: the token carries no data, only the turn.
    for (std::uint64_t want = 1; !stop.load(std::memory_order_relaxed);) {
      if (l.token.load(std::memory_order_relaxed) != want) {
        hotpath::detail::cpu_relax();
        continue;
      }
      l.token.store(want + 1, std::memory_order_relaxed);
      want += 2;
    }
  });
  std::uint64_t turn = 0;
  for (auto _ : state) {
    l.token.store(turn + 1, std::memory_order_relaxed);
    while (l.token.load(std::memory_order_relaxed) != turn + 2)
      hotpath::detail::cpu_relax();
    turn += 2;
  }
  stop.store(true, std::memory_order_relaxed);
  partner.join();
  state.counters["transfer"] =
      benchmark::Counter(static_cast<double>(2 * state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(line_transfer)->Name("baseline/line_transfer")->UseRealTime();

}  // namespace
