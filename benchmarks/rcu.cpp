// SPDX-License-Identifier: MIT
// RCU read side against what a reader could use instead, in the same run: a plain
// pointer load (the limit: no protection at all), std::shared_mutex in shared mode,
// std::atomic<std::shared_ptr<T>>::load(), and liburcu's memb flavour (when
// liburcu-dev is installed; its read side inlined with _LGPL_SOURCE, its best case).
// Each body reads a pointer and dereferences it. Then rcu_synchronize() latency
// with idle registered readers, beside liburcu's synchronize_rcu() and one bare
// membarrier (detail::heavy_fence()).
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "hotpath/detail/membarrier.hpp"
#include "hotpath/rcu.hpp"
#include "hotpath/rcu_cell.hpp"
#include "support/rcu_bench.hpp"

#if defined(HOTPATH_HAVE_URCU)
#define _LGPL_SOURCE
#include <urcu/urcu-memb.h>
#endif

namespace {

struct payload {
  long value = 42;
  long pad[7] = {};
};

// Everything a reader touches sits on lines of its own.
struct alignas(hotpath::cache_line_size) shared_state {
  payload obj;
  alignas(hotpath::cache_line_size) std::atomic<payload*> ptr{&obj};
  alignas(hotpath::cache_line_size) std::shared_mutex rw;
  alignas(hotpath::cache_line_size) std::atomic<std::shared_ptr<payload>> sp{
      std::make_shared<payload>()};
};
shared_state& state_() {
  static shared_state s;
  return s;
}

void finish(benchmark::State& state) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

void read_plain_load(benchmark::State& state) {
  shared_state& s = state_();
  for (auto _ : state) {
    const payload* p = s.ptr.load(std::memory_order_acquire);
    benchmark::DoNotOptimize(p->value);
  }
  finish(state);
}

void read_rcu_section(benchmark::State& state) {
  shared_state& s = state_();
  hotpath::rcu_domain& d = hotpath::rcu_default_domain();
  for (auto _ : state) {
    std::scoped_lock r(d);
    const payload* p = s.ptr.load(std::memory_order_acquire);
    benchmark::DoNotOptimize(p->value);
  }
  finish(state);
}

void read_rcu_cell(benchmark::State& state) {
  static hotpath::rcu_cell<payload> cell;
  for (auto _ : state) {
    auto g = cell.read();
    benchmark::DoNotOptimize(g->value);
  }
  finish(state);
}

void read_shared_mutex(benchmark::State& state) {
  shared_state& s = state_();
  for (auto _ : state) {
    std::shared_lock l(s.rw);
    const payload* p = s.ptr.load(std::memory_order_relaxed);
    benchmark::DoNotOptimize(p->value);
  }
  finish(state);
}

void read_atomic_shared_ptr(benchmark::State& state) {
  shared_state& s = state_();
  for (auto _ : state) {
    const std::shared_ptr<payload> p = s.sp.load(std::memory_order_acquire);
    benchmark::DoNotOptimize(p->value);
  }
  finish(state);
}

#if defined(HOTPATH_HAVE_URCU)
void read_urcu_memb(benchmark::State& state) {
  shared_state& s = state_();
  urcu_memb_register_thread();
  for (auto _ : state) {
    urcu_memb_read_lock();
    const payload* p = s.ptr.load(std::memory_order_acquire);
    benchmark::DoNotOptimize(p->value);
    urcu_memb_read_unlock();
  }
  urcu_memb_unregister_thread();
  finish(state);
}
#endif

void threads_1_2(benchmark::internal::Benchmark* b) {
  b->Threads(1)->Threads(2);
}

BENCHMARK(read_plain_load)->Apply(threads_1_2);
BENCHMARK(read_rcu_section)->Apply(threads_1_2);
BENCHMARK(read_rcu_cell)->Apply(threads_1_2);
BENCHMARK(read_shared_mutex)->Apply(threads_1_2);
BENCHMARK(read_atomic_shared_ptr)->Apply(threads_1_2);
#if defined(HOTPATH_HAVE_URCU)
BENCHMARK(read_urcu_memb)->Apply(threads_1_2);
#endif

// range(0) registered readers that have run one read-side section and now sleep.
using hotpath::bench::idle_readers;

void synchronize_rcu_domain(benchmark::State& state) {
  auto reg = [] { std::scoped_lock r(hotpath::rcu_default_domain()); };
  auto readers = idle_readers(static_cast<int>(state.range(0)), reg, [] {});
  for (auto _ : state)
    hotpath::rcu_synchronize();
  finish(state);
}

void synchronize_membarrier_only(benchmark::State& state) {
  auto readers = idle_readers(
      static_cast<int>(state.range(0)), [] {}, [] {});
  for (auto _ : state)
    hotpath::detail::heavy_fence();
  finish(state);
}

#if defined(HOTPATH_HAVE_URCU)
void synchronize_urcu_memb(benchmark::State& state) {
  urcu_memb_register_thread();  // the caller is a registered reader too, as in ours
  auto readers = idle_readers(
      static_cast<int>(state.range(0)), [] { urcu_memb_register_thread(); },
      [] { urcu_memb_unregister_thread(); });
  for (auto _ : state)
    urcu_memb_synchronize_rcu();
  urcu_memb_unregister_thread();
  finish(state);
}
#endif

void idle_args(benchmark::internal::Benchmark* b) {
  b->ArgName("idle_readers")->Arg(0)->Arg(2)->Arg(8)->Unit(benchmark::kMicrosecond);
}

BENCHMARK(synchronize_rcu_domain)->Apply(idle_args);
BENCHMARK(synchronize_membarrier_only)->Apply(idle_args);
#if defined(HOTPATH_HAVE_URCU)
BENCHMARK(synchronize_urcu_memb)->Apply(idle_args);
#endif

}  // namespace
