// SPDX-License-Identifier: MIT
// Per-cpu counters against their baselines, same run: a plain non-atomic increment
// (the limit), std::atomic fetch_add (uncontended at 1 thread, one shared counter at
// 2), and tbb::enumerable_thread_specific where oneTBB is installed. Read
// items_per_second: at 2 threads it is the aggregate over both (real time).
#include <benchmark/benchmark.h>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <vector>

#include "hotpath/detail/config.hpp"
#include "hotpath/percpu.hpp"
#include "hotpath/percpu_counter.hpp"

#if defined(HOTPATH_HAVE_TBB)
#include <tbb/enumerable_thread_specific.h>
#endif

namespace hotpath::bench {
namespace {

std::chrono::nanoseconds thread_cpu_time() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

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

void threads_1_2(benchmark::internal::Benchmark* b) {
  b->Threads(1)->Threads(2)->UseRealTime();
}

BENCHMARK(plain)->Name("percpu/plain_increment")->Apply(threads_1_2);
BENCHMARK(shared_atomic)->Name("percpu/std_atomic_fetch_add")->Apply(threads_1_2);
BENCHMARK(shared_atomic_handoffs)
    ->Name("percpu/std_atomic_fetch_add_handoffs")
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(counter_add)->Name("percpu/percpu_counter_add")->Apply(threads_1_2);
BENCHMARK(counter_add_portable)->Name("percpu/percpu_counter_add_portable")->Apply(threads_1_2);
BENCHMARK(counter_add_batch_4096)->Name("percpu/percpu_counter_add_batch4096")->Apply(threads_1_2);
BENCHMARK(stats_add)->Name("percpu/percpu_stats_add")->Apply(threads_1_2);
#if defined(HOTPATH_HAVE_TBB)
BENCHMARK(tbb_ets)->Name("percpu/tbb_ets_cached_local")->Apply(threads_1_2);
BENCHMARK(tbb_ets_lookup)->Name("percpu/tbb_ets_local")->Apply(threads_1_2);
#endif

}  // namespace
}  // namespace hotpath::bench
