// SPDX-License-Identifier: MIT
// RCU benchmark bodies of the showdown, shared by rcu.cpp and the liburcu flavours
// (each in a file of its own: liburcu's flavour headers do not mix in one file).
//
// A reader implementation R has: static enter()/exit() (thread registration),
// static long read() (one read-side section: load the published pointer,
// dereference it), static quiescent() (QSBR: announce a quiescent state; called
// every 256 reads). One with a grace period also has static synchronize() and
// static offline()/online() (QSBR: an idle thread leaves and rejoins).
//   rcu/uncontended/NAME          one thread, Google Benchmark's loop, ns per read
//   rcu/read/NAME/threads:N       readers only, for the window (no writer)
//   rcu/grace/NAME/idle:I/busy:B  synchronize() latency with I registered idle
//                                 readers and B readers in a loop of sections
//   rcu/reclaim/NAME              retire three objects, then do nothing: time until
//                                 all three deleters have run (call_rcu users' wait);
//                                 needs static retire(std::atomic<int>* freed)
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "showdown.hpp"
#include "support/rcu_bench.hpp"

namespace hotpath::showdown::rcu {

// What readers find behind the published pointer.
struct payload {
  long value = 42;
  long pad[7] = {};
};
inline constexpr long expected_value = 42;
inline constexpr std::uint64_t reads_per_quiescent = 256;

template <class R>
void read_uncontended(benchmark::State& state) {
  R::enter();
  long sum = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(sum += R::read());
  R::exit();
  if (sum != expected_value * static_cast<long>(state.iterations()))
    bench::fail(state, "a reader saw a wrong value");
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

template <class R>
void read_contended(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  const auto window = std::chrono::milliseconds(state.range(1));
  for (auto _ : state) {
    std::atomic<bool> wrong{false};
    bench::run_window(state, threads, window, [&](unsigned, const auto& stop) {
      R::enter();
      std::uint64_t n = 0;
      long sum = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (std::uint64_t i = 0; i < reads_per_quiescent; ++i)
          sum += R::read();
        R::quiescent();
        n += reads_per_quiescent;
      }
      R::exit();
      if (sum != expected_value * static_cast<long>(n)) wrong.store(true);
      return n;
    });
    if (wrong.load()) bench::fail(state, "a reader saw a wrong value");
  }
}

template <class R>
void grace(benchmark::State& state) {
  const int idle = static_cast<int>(state.range(0));
  const int busy = static_cast<int>(state.range(1));
  R::enter();  // the caller is a registered reader too, as most updaters are
  auto idlers = bench::idle_readers(
      idle,
      [] {
        R::enter();
        R::offline();
      },
      [] {
        R::online();
        R::exit();
      });
  auto busy_readers =
      bench::background_threads(busy, [](auto ready, const std::atomic<bool>& stop) {
        R::enter();
        ready();
        long sum = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          for (std::uint64_t i = 0; i < reads_per_quiescent; ++i)
            sum += R::read();
          R::quiescent();
        }
        benchmark::DoNotOptimize(sum);
        R::exit();
      });
  bench::latency_histogram hist;
  for (auto _ : state) {
    const std::uint64_t t0 = bench::now_ns();
    R::synchronize();
    hist.record(bench::now_ns() - t0);
  }
  R::exit();
  hist.report(state);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

// Retire-to-free with nothing else happening: the caller polls, napping 10 us, as
// a program waiting for its callback would; the same for every implementation.
template <class R>
void reclaim(benchmark::State& state) {
  R::enter();
  bench::latency_histogram hist;
  static std::atomic<int> freed{0};  // a deleter late past the deadline still finds it
  for (auto _ : state) {
    freed.store(0, std::memory_order_relaxed);
    const std::uint64_t t0 = bench::now_ns();
    for (int i = 0; i < 3; ++i)
      R::retire(&freed);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (freed.load(std::memory_order_acquire) != 3) {
      if (std::chrono::steady_clock::now() > deadline) {
        bench::fail(state, "not 3 of 3 freed within 10 s");
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
    hist.record(bench::now_ns() - t0);
  }
  R::exit();
  hist.report(state);
}

template <class R>
void register_reclaim(const std::string& name) {
  benchmark::RegisterBenchmark(("rcu/reclaim/" + name).c_str(), reclaim<R>)
      ->Iterations(100)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

template <class R>
void register_reader(const std::string& name, const options& o) {
  register_pair("rcu", "read", name, read_uncontended<R>, read_contended<R>, o);
}

template <class R>
void register_grace(const std::string& name) {
  benchmark::RegisterBenchmark(("rcu/grace/" + name).c_str(), grace<R>)
      ->ArgNames({"idle", "busy"})
      ->Args({0, 0})
      ->Args({8, 0})
      ->Args({0, 2})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace hotpath::showdown::rcu
