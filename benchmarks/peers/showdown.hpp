// SPDX-License-Identifier: MIT
// The showdown: every hotpath primitive against the peers a user would otherwise
// pick, in one program and one run. Each family's file registers its benchmarks
// through HOTPATH_SHOWDOWN(fn); main() (showdown.cpp) calls them once the options
// are parsed. Benchmark names read FAMILY/MEASURE/IMPLEMENTATION[/args], e.g.
// lock/contended/hotpath::queued_lock/threads:8/ms:300; benchmarks/peers/plot.py
// depends on that shape.
#pragma once

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

}  // namespace hotpath::showdown

#define HOTPATH_SHOWDOWN(fn)                                    \
  static const bool BENCHMARK_PRIVATE_NAME(hotpath_showdown_) = \
      ::hotpath::showdown::add_registrar(fn)
