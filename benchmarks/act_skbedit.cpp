// SPDX-License-Identifier: MIT
// The act_skbedit experiment. In 2018 the tc skbedit action's packet path moved
// from one spinlock guarding parameters and statistics to RCU parameters plus
// per-cpu statistics (+14% at 2 threads, +52% at 4, pktgen, pps per thread).
//
//   (a) spinlock: lock; count packet and bytes; apply parameters; unlock
//   (b) rcu:      read section on rcu_cell<params>; apply; per-cpu stats add
//
// Each thread pushes "packets" through the action for a fixed window while a
// control thread replaces the parameters every 100 us. Counters: pps per thread
// (the kernel's figure), in total, and per CPU-second the packet threads ran. The spinlock is the
// test-and-set lock of support/lock_bench.hpp: the kernel's spin_lock() fast path, with no parking.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <thread>
#include <vector>

#include "hotpath/percpu_counter.hpp"
#include "hotpath/rcu_cell.hpp"
#include "support/lock_bench.hpp"

namespace {

// What tcf_skbedit_params carries, roughly.
struct skbedit_params {
  std::uint32_t flags = 1;
  std::uint32_t priority = 0;
  std::uint32_t mark = 0;
  std::uint32_t mask = 0xffffffff;
  std::uint16_t queue_mapping = 0;
  int action = 0;  // TC_ACT_PIPE
};

struct packet {
  std::uint32_t priority = 0;
  std::uint32_t mark = 0;
  std::uint16_t queue = 0;
  std::uint32_t len = 0;
};

inline int apply(const skbedit_params& p, packet& pkt) {
  if (p.flags & 1) pkt.priority = p.priority;
  pkt.mark = (pkt.mark & ~p.mask) | (p.mark & p.mask);
  pkt.queue = p.queue_mapping;
  return p.action;
}

skbedit_params next_params(std::uint32_t i) {
  skbedit_params p;
  p.priority = i;
  p.mark = i * 7;
  p.queue_mapping = static_cast<std::uint16_t>(i & 7);
  return p;
}

// (a) the pre-2018 action: everything under tcf_lock.
struct action_spinlock {
  alignas(hotpath::cache_line_size) hotpath::bench::tas_lock lock;
  skbedit_params params;
  std::uint64_t packets = 0;
  std::uint64_t bytes = 0;

  int act(packet& pkt) {
    std::scoped_lock l(lock);
    ++packets;
    bytes += pkt.len;
    return apply(params, pkt);
  }
  void replace(const skbedit_params& p) {
    std::scoped_lock l(lock);
    params = p;
  }
  std::uint64_t packet_count() const { return packets; }
};

// (b) the 2018 action: RCU parameters, per-cpu statistics.
struct action_rcu {
  enum : std::size_t { packets_field = 0, bytes_field = 1 };
  hotpath::rcu_cell<skbedit_params> params;
  hotpath::percpu_stats<2> stats;

  int act(packet& pkt) {
    int r;
    {
      auto p = params.read();
      r = apply(*p, pkt);
    }
    stats.inc(packets_field);
    stats.add(bytes_field, pkt.len);
    return r;
  }
  void replace(const skbedit_params& p) { params.store(p); }
  std::uint64_t packet_count() const {
    return static_cast<std::uint64_t>(stats.sum(packets_field));
  }
};

template <class Action>
void skbedit(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  const auto window = std::chrono::milliseconds(state.range(1));
  for (auto _ : state) {
    Action action;
    std::atomic<unsigned> ready{0};
    std::atomic<bool> stop{false};
    std::vector<std::uint64_t> sent(threads);
    std::vector<double> cpu(threads);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < threads + 1)
          std::this_thread::yield();
        packet pkt;
        std::uint64_t n = 0;
        const double cpu0 = hotpath::bench::thread_cpu_seconds();
        while (!stop.load(std::memory_order_relaxed)) {
          pkt.len = 64 + static_cast<std::uint32_t>(n & 1023);
          benchmark::DoNotOptimize(action.act(pkt));
          ++n;
        }
        cpu[t] = hotpath::bench::thread_cpu_seconds() - cpu0;
        sent[t] = n;
      });
    }
    std::uint64_t swaps = 0;
    // The control thread: one more participant in the window.
    pool.emplace_back([&] {
      ready.fetch_add(1);
      while (!stop.load(std::memory_order_relaxed)) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        action.replace(next_params(static_cast<std::uint32_t>(++swaps)));
      }
    });
    const double secs = hotpath::bench::run_window(pool, ready, threads + 1, stop, window);
    state.SetIterationTime(secs);
    std::uint64_t total = 0;
    double cpu_secs = 0;
    for (unsigned t = 0; t < threads; ++t) {
      total += sent[t];
      cpu_secs += cpu[t];
    }
    if (action.packet_count() != total) state.SkipWithError("packets lost from the statistics");
    state.counters["pps"] = static_cast<double>(total) / secs;
    state.counters["pps/thread"] = static_cast<double>(total) / secs / threads;
    // Packets per second of CPU the packet threads got: steadier than wall time on
    // a machine that other jobs share, and a spinning waiter still counts.
    state.counters["pps/cpu"] = static_cast<double>(total) / cpu_secs;
    state.counters["swaps"] = static_cast<double>(swaps);
  }
  hotpath::rcu_barrier();
}

void skbedit_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "ms"});
  for (int t : {1, 2, 4})
    b->Args({t, 300});
  b->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK(skbedit<action_spinlock>)->Name("act_skbedit/a_spinlock")->Apply(skbedit_args);
BENCHMARK(skbedit<action_rcu>)->Name("act_skbedit/b_rcu_percpu")->Apply(skbedit_args);

}  // namespace
