// SPDX-License-Identifier: MIT
// hotpath-showdown: Google Benchmark's flags plus
//   --threads=1,2,4,8,16   thread counts of the windowed benchmarks
//   --window_ms=300        wall-clock window of each windowed point
// Exits non-zero when a benchmark found a wrong result (a lost update, a bad sum).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "showdown.hpp"

namespace {

bool parse(const char* arg, hotpath::showdown::options& o) {
  const std::string a(arg);
  if (a.rfind("--window_ms=", 0) == 0) {
    o.window_ms = std::atoi(a.c_str() + std::strlen("--window_ms="));
    return true;
  }
  if (a.rfind("--threads=", 0) == 0) {
    o.threads.clear();
    std::stringstream in(a.substr(std::strlen("--threads=")));
    for (std::string t; std::getline(in, t, ',');)
      o.threads.push_back(std::atoi(t.c_str()));
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  hotpath::showdown::options o;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i)
    if (i == 0 || !parse(argv[i], o)) rest.push_back(argv[i]);
  if (o.window_ms < 1 || o.threads.empty() ||
      std::any_of(o.threads.begin(), o.threads.end(), [](int t) { return t < 1; })) {
    std::cerr << "hotpath-showdown: bad --window_ms or --threads\n";
    return 2;
  }
  for (auto r : hotpath::showdown::registrars())
    r(o);
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const int errors = hotpath::bench::errors.load(std::memory_order_relaxed);
  if (errors != 0) std::cerr << "hotpath-showdown: " << errors << " benchmark(s) failed\n";
  return errors == 0 ? 0 : 1;
}
