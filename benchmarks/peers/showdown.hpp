// SPDX-License-Identifier: MIT
// The showdown: every hotpath primitive against the peers a user would otherwise
// pick, in one program and one run. Each family's file registers its benchmarks
// through HOTPATH_SHOWDOWN(fn); main() (showdown.cpp) calls them once the options
// are parsed. Benchmark names read FAMILY/MEASURE/IMPLEMENTATION[/args], e.g.
// lock/contended/hotpath::queued_lock/threads:8/ms:300; benchmarks/peers/plot.py
// depends on that shape.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "support/lock_bench.hpp"

namespace hotpath::showdown {

struct options {
  std::vector<int> threads{1, 2, 4, 8, 16};  // --threads=1,2,4,8,16
  int window_ms = 300;                       // --window_ms=300: each windowed point
};

using registrar = void (*)(const options&);
inline std::vector<registrar>& registrars() {
  static std::vector<registrar> r;
  return r;
}
inline bool add_registrar(registrar r) {
  registrars().push_back(r);
  return true;
}

// A windowed benchmark (args threads, ms) at every thread count of the options.
template <class Fn>
benchmark::internal::Benchmark* register_windowed(const std::string& name, Fn fn,
                                                  const options& o) {
  return bench::windowed(benchmark::RegisterBenchmark(name.c_str(), fn), o.threads, o.window_ms);
}

// The body of a windowed benchmark (args threads, ms): on each thread t, op =
// make_op(t), then op(i) for i = 0, 1, ... until the window closes, looking at the
// stop flag every `chunk` calls; run_window's counters. Returns the calls made.
template <class MakeOp>
std::uint64_t run_chunks(benchmark::State& state, std::uint64_t chunk, MakeOp make_op) {
  const auto threads = static_cast<unsigned>(state.range(0));
  const auto window = std::chrono::milliseconds(state.range(1));
  return bench::run_window(state, threads, window, [&](unsigned t, const auto& stop) {
    auto op = make_op(t);
    std::uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      for (std::uint64_t i = 0; i < chunk; ++i)
        op(n + i);
      n += chunk;
    }
    return n;
  });
}

// FAMILY/uncontended/NAME (Google Benchmark's loop, one thread) and
// FAMILY/MEASURE/NAME (windowed, at every thread count).
template <class Uncontended, class Windowed>
void register_pair(const std::string& family, const std::string& measure, const std::string& name,
                   Uncontended u, Windowed w, const options& o) {
  benchmark::RegisterBenchmark((family + "/uncontended/" + name).c_str(), u);
  register_windowed(family + "/" + measure + "/" + name, w, o);
}

}  // namespace hotpath::showdown

#define HOTPATH_SHOWDOWN(fn)                                    \
  static const bool BENCHMARK_PRIVATE_NAME(hotpath_showdown_) = \
      ::hotpath::showdown::add_registrar(fn)
