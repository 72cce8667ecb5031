// SPDX-License-Identifier: MIT
// Counters: hotpath's percpu_counter and percpu_stats against one shared
// std::atomic (fetch_add) and oneTBB's enumerable_thread_specific (where installed):
// its reference cached once per thread (the best case) and looked up with local()
// on every add (what code without a cached reference pays).
// counter/uncontended/NAME: one thread, Google Benchmark's loop, ns per add.
// counter/contended/NAME: every thread adds to the same counter for the window;
// the total must equal the sum of the adds.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "hotpath/percpu_counter.hpp"
#include "showdown.hpp"

#if defined(HOTPATH_HAVE_TBB)
#include <oneapi/tbb/enumerable_thread_specific.h>
#endif

namespace {

using hotpath::cache_line_size;

struct atomic_counter {
  alignas(cache_line_size) std::atomic<std::int64_t> v{0};
  struct adder {
    atomic_counter* c;
    void operator()() const { c->v.fetch_add(1, std::memory_order_relaxed); }
  };
  adder local() { return {this}; }
  std::int64_t total() const { return v.load(std::memory_order_relaxed); }
};

struct percpu_counter_counter {
  hotpath::percpu_counter<> c;
  struct adder {
    hotpath::percpu_counter<>* c;
    void operator()() const { c->add(1); }
  };
  adder local() { return {&c}; }
  std::int64_t total() const { return c.sum(); }
};

struct percpu_stats_counter {
  hotpath::percpu_stats<3> s;
  struct adder {
    hotpath::percpu_stats<3>* s;
    void operator()() const { s->inc(0); }
  };
  adder local() { return {&s}; }
  std::int64_t total() const { return s.sum(0); }
};

#if defined(HOTPATH_HAVE_TBB)
struct alignas(cache_line_size) padded_int {
  std::int64_t v = 0;
};
using ets_type = tbb::enumerable_thread_specific<padded_int>;
std::int64_t ets_total(const ets_type& ets) {
  std::int64_t sum = 0;
  for (const padded_int& p : ets)
    sum += p.v;
  return sum;
}

struct tbb_ets_cached {
  ets_type ets;
  struct adder {
    std::int64_t* v;
    void operator()() const {
      ++*v;
      benchmark::ClobberMemory();  // keep it a memory increment, not a register
    }
  };
  adder local() { return {&ets.local().v}; }
  std::int64_t total() const { return ets_total(ets); }
};

struct tbb_ets_lookup {
  ets_type ets;
  struct adder {
    ets_type* ets;
    void operator()() const {
      ++ets->local().v;
      benchmark::ClobberMemory();
    }
  };
  adder local() { return {&ets}; }
  std::int64_t total() const { return ets_total(ets); }
};
#endif

template <class Counter>
void uncontended(benchmark::State& state) {
  static Counter c;
  const auto add = c.local();
  for (auto _ : state)
    add();
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

template <class Counter>
void contended(benchmark::State& state) {
  for (auto _ : state) {
    auto c = std::make_unique<Counter>();
    // 256 adds between looks at the stop flag.
    const std::uint64_t total = hotpath::showdown::run_chunks(
        state, 256, [&](unsigned) { return [add = c->local()](std::uint64_t) { add(); }; });
    if (static_cast<std::uint64_t>(c->total()) != total)
      hotpath::bench::fail(state, "the counter lost adds");
  }
}

template <class Counter>
void register_counter(const std::string& name, const hotpath::showdown::options& o) {
  hotpath::showdown::register_pair("counter", "contended", name, uncontended<Counter>,
                                   contended<Counter>, o);
}

void register_counters(const hotpath::showdown::options& o) {
  register_counter<atomic_counter>("std::atomic", o);
#if defined(HOTPATH_HAVE_TBB)
  register_counter<tbb_ets_cached>("tbb::ets", o);
  register_counter<tbb_ets_lookup>("tbb::ets.local()", o);
#endif
  register_counter<percpu_counter_counter>("hotpath::percpu_counter", o);
  register_counter<percpu_stats_counter>("hotpath::percpu_stats", o);
}
HOTPATH_SHOWDOWN(register_counters);

}  // namespace
