// SPDX-License-Identifier: MIT
// Per-cpu counters against their baselines, same run: a plain non-atomic increment
// (the limit), std::atomic fetch_add (uncontended at 1 thread, one shared counter at
// 2), and tbb::enumerable_thread_specific where oneTBB is installed.
//
// percpu/...: one thread, Google Benchmark's loop; cpu_ns/add is thread CPU time.
// percpu_concurrent/...: 1 or 2 threads pinned one per cpu, adding in chunks of
// 4096 for a window of wall time. This machine is shared: other jobs take turns on
// our cores, so "2 threads" often means one running while the other waits, which
// hides both the scaling and the line bouncing we want to see. Each chunk is timed
// and counted as "both running" if the other thread finished a chunk meanwhile;
// the medians of those chunks give the rate of two threads that really run at the
// same time (adds/s_both_running, summed over both threads).
#include <benchmark/benchmark.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "hotpath/detail/config.hpp"
#include "hotpath/percpu.hpp"
#include "hotpath/percpu_counter.hpp"
#include "support/measure.hpp"

#if defined(HOTPATH_HAVE_TBB)
#include <tbb/enumerable_thread_specific.h>
#endif

namespace hotpath::bench {
namespace {

// With several threads, thread i runs on cpu i (mod the cpus we may use), so that
// two threads are never time-sliced on one cpu while the other idles.
class pin_for_threads {
 public:
  explicit pin_for_threads(const benchmark::State& state) {
    if (state.threads() < 2 || sched_getaffinity(0, sizeof saved_, &saved_) != 0) return;
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &saved_)) cpus.push_back(c);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<std::size_t>(state.thread_index()) % cpus.size()], &one);
    pinned_ = sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~pin_for_threads() {
    if (pinned_) sched_setaffinity(0, sizeof saved_, &saved_);
  }
  pin_for_threads(const pin_for_threads&) = delete;
  pin_for_threads& operator=(const pin_for_threads&) = delete;

 private:
  cpu_set_t saved_{};
  bool pinned_ = false;
};

// items_per_second: adds per second of wall time, all threads together. cpu_ns/add:
// CPU time per add, averaged over threads; on this shared machine, where other
// jobs take turns on our cores, threads / cpu_ns is the aggregate rate the threads
// reach while they run (it understates contention: it only counts while both run).
template <class Add>
void run_adds(benchmark::State& state, Add add) {
  pin_for_threads pin(state);
  const auto cpu0 = thread_cpu_time();
  for (auto _ : state)
    add();
  const auto cpu = thread_cpu_time() - cpu0;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["cpu_ns/add"] =
      benchmark::Counter(static_cast<double>(cpu.count()) / static_cast<double>(state.iterations()),
                         benchmark::Counter::kAvgThreads);
}

// A non-atomic read-modify-write of memory, per thread on its own line: the limit.
struct alignas(cache_line_size) padded_int {
  std::int64_t v = 0;
};
padded_int plain_slots[64];

void plain(benchmark::State& state) {
  std::int64_t* x = &plain_slots[state.thread_index() % 64].v;
  run_adds(state, [x] {
    ++*x;
    benchmark::ClobberMemory();  // keep it a memory increment, not a register
  });
}

// One std::atomic: uncontended at 1 thread, shared (the line bounces) at 2.
void shared_atomic(benchmark::State& state) {
  alignas(cache_line_size) static std::atomic<std::int64_t> a{0};
  run_adds(state, [] { a.fetch_add(1, std::memory_order_relaxed); });
}

// The same, also counting how often the line changed hands: an add whose result
// does not follow this thread's previous one means the other thread got the line
// in between. Not a baseline (the bookkeeping costs), an explanation of it.
void shared_atomic_handoffs(benchmark::State& state) {
  alignas(cache_line_size) static std::atomic<std::int64_t> a{0};
  std::int64_t prev = -2, handoffs = 0;
  run_adds(state, [&] {
    const std::int64_t v = a.fetch_add(1, std::memory_order_relaxed);
    handoffs += v != prev + 1;
    prev = v;
  });
  state.counters["adds/handoff"] = benchmark::Counter(
      static_cast<double>(state.iterations()) / static_cast<double>(handoffs > 0 ? handoffs : 1),
      benchmark::Counter::kAvgThreads);
}

void counter_add(benchmark::State& state) {
  static percpu_counter<> c;
  run_adds(state, [] { c.add(1); });
  if (state.thread_index() == 0) state.counters["rseq"] = rseq_fast_path() ? 1 : 0;
}

// The portable path: current_cpu() then a relaxed fetch_add on that slot (the
// kernel commit's "getcpu + atomic").
void counter_add_portable(benchmark::State& state) {
  static percpu_counter<> c;
  set_rseq_fast_path(false);
  run_adds(state, [] { c.add(1); });
  set_rseq_fast_path(true);
}

// The default batch folds into the shared centre every 32 adds per cpu; a large
// batch shows the per-cpu part alone.
struct batch_4096_counter : percpu_counter<> {
  batch_4096_counter() { set_batch(4096); }
};
void counter_add_batch_4096(benchmark::State& state) {
  static batch_4096_counter c;
  run_adds(state, [] { c.add(1); });
}

void stats_add(benchmark::State& state) {
  static percpu_stats<3> s;
  run_adds(state, [] { s.inc(0); });
}

#if defined(HOTPATH_HAVE_TBB)
void tbb_ets(benchmark::State& state) {
  static tbb::enumerable_thread_specific<padded_int> ets;
  padded_int& mine = ets.local();
  run_adds(state, [&mine] {
    ++mine.v;
    benchmark::ClobberMemory();
  });
}
// ets.local() on every add: the lookup a caller without a cached reference pays.
void tbb_ets_lookup(benchmark::State& state) {
  static tbb::enumerable_thread_specific<padded_int> ets;
  run_adds(state, [] {
    ++ets.local().v;
    benchmark::ClobberMemory();
  });
}
#endif

// Bodies for the chunked runs: adder(t) is called on thread t and returns what one
// add is.
struct plain_body {
  padded_int slot[2];
  auto adder(int t) {
    return [x = &slot[t].v] {
      ++*x;
      benchmark::ClobberMemory();
    };
  }
};
struct shared_atomic_body {
  alignas(cache_line_size) std::atomic<std::int64_t> a{0};
  auto adder(int) {
    return [this] { a.fetch_add(1, std::memory_order_relaxed); };
  }
};
template <std::int64_t Batch, bool Portable = false>
struct counter_body {
  percpu_counter<> c;
  counter_body() {
    if (Batch != 0) c.set_batch(Batch);
  }
  auto adder(int) {
    set_rseq_fast_path(!Portable);  // on the calling (fresh) thread
    return [this] { c.add(1); };
  }
};
struct stats_body {
  percpu_stats<3> s;
  auto adder(int) {
    return [this] { s.inc(0); };
  }
};
#if defined(HOTPATH_HAVE_TBB)
struct tbb_body {
  tbb::enumerable_thread_specific<padded_int> ets;
  auto adder(int) {
    return [x = &ets.local().v] {
      ++*x;
      benchmark::ClobberMemory();
    };
  }
};
#endif

template <class Body>
void concurrent(benchmark::State& state) {
  const auto threads = static_cast<int>(state.range(0));
  const auto window = std::chrono::milliseconds(state.range(1));
  constexpr int chunk = 4096;
  const std::vector<unsigned> cpus = allowed_cpus();
  for (auto _ : state) {
    auto body = std::make_unique<Body>();
    struct alignas(cache_line_size) side {
      std::atomic<std::uint64_t> chunks{0};
      std::vector<double> both, alone;  // ns per add of each chunk
    };
    side sides[2];
    std::atomic<int> ready{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[static_cast<std::size_t>(t) % cpus.size()], &one);
        sched_setaffinity(0, sizeof one, &one);
        auto add = body->adder(t);
        side& me = sides[t];
        const side& other = sides[threads > 1 ? 1 - t : t];
        ready.fetch_add(1);
        while (ready.load() < threads)
          std::this_thread::yield();
        while (!stop.load(std::memory_order_relaxed)) {
          const auto o0 = other.chunks.load(std::memory_order_relaxed);
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < chunk; ++i)
            add();
          const auto t1 = std::chrono::steady_clock::now();
          const auto o1 = other.chunks.load(std::memory_order_relaxed);
          me.chunks.store(me.chunks.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
          const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
          if (ns > 1e6) continue;  // descheduled inside the chunk: neither
          (threads > 1 && o1 != o0 ? me.both : me.alone).push_back(ns / chunk);
        }
      });
    }
    while (ready.load() < threads)
      std::this_thread::yield();
    std::this_thread::sleep_for(window);
    stop.store(true);
    for (auto& th : pool)
      th.join();
    state.SetIterationTime(std::chrono::duration<double>(window).count());
    if (threads == 1) {
      const double ns = median(sides[0].alone);
      state.counters["ns/add"] = ns;
      state.counters["adds/s"] = ns > 0 ? 1e9 / ns : 0;
      continue;
    }
    if (sides[0].both.empty() || sides[1].both.empty()) {
      state.SkipWithError("the two threads never ran at the same time");
      continue;
    }
    const double n0 = median(sides[0].both), n1 = median(sides[1].both);
    const double both = static_cast<double>(sides[0].both.size() + sides[1].both.size());
    const double alone = static_cast<double>(sides[0].alone.size() + sides[1].alone.size());
    state.counters["ns/add_both_running"] = (n0 + n1) / 2;
    state.counters["adds/s_both_running"] = 1e9 / n0 + 1e9 / n1;
    state.counters["both_running_share"] = both / (both + alone);
  }
}

void concurrent_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "ms"})->Args({1, 300})->Args({2, 600});
  b->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK(plain)->Name("percpu/plain_increment");
BENCHMARK(shared_atomic)->Name("percpu/std_atomic_fetch_add");
BENCHMARK(counter_add)->Name("percpu/percpu_counter_add");
BENCHMARK(counter_add_portable)->Name("percpu/percpu_counter_add_portable");
BENCHMARK(counter_add_batch_4096)->Name("percpu/percpu_counter_add_batch4096");
BENCHMARK(stats_add)->Name("percpu/percpu_stats_add");
#if defined(HOTPATH_HAVE_TBB)
BENCHMARK(tbb_ets)->Name("percpu/tbb_ets_cached_local");
BENCHMARK(tbb_ets_lookup)->Name("percpu/tbb_ets_local");
#endif
BENCHMARK(shared_atomic_handoffs)
    ->Name("percpu/std_atomic_fetch_add_handoffs")
    ->Threads(2)
    ->UseRealTime();

BENCHMARK_TEMPLATE(concurrent, plain_body)
    ->Name("percpu_concurrent/plain_increment")
    ->Apply(concurrent_args);
BENCHMARK_TEMPLATE(concurrent, shared_atomic_body)
    ->Name("percpu_concurrent/std_atomic_fetch_add")
    ->Apply(concurrent_args);
BENCHMARK_TEMPLATE(concurrent, counter_body<0>)
    ->Name("percpu_concurrent/percpu_counter_add")
    ->Apply(concurrent_args);
BENCHMARK_TEMPLATE(concurrent, counter_body<4096>)
    ->Name("percpu_concurrent/percpu_counter_add_batch4096")
    ->Apply(concurrent_args);
BENCHMARK_TEMPLATE(concurrent, counter_body<0, true>)
    ->Name("percpu_concurrent/percpu_counter_add_portable")
    ->Apply(concurrent_args);
BENCHMARK_TEMPLATE(concurrent, stats_body)
    ->Name("percpu_concurrent/percpu_stats_add")
    ->Apply(concurrent_args);
#if defined(HOTPATH_HAVE_TBB)
BENCHMARK_TEMPLATE(concurrent, tbb_body)
    ->Name("percpu_concurrent/tbb_ets_cached_local")
    ->Apply(concurrent_args);
#endif

}  // namespace
}  // namespace hotpath::bench
