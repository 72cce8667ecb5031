// SPDX-License-Identifier: MIT
// Measurement helpers for the example programs, the benchmarks and the tests: one
// clock, one CPU-time reading, one latency histogram, one fairness index, one median,
// one calibrated spin. Standard library and POSIX only, so that an example copied out
// of the tree takes this directory with it (examples/common/) and nothing else.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace hotpath::measure {

// Steady-clock nanoseconds since an arbitrary epoch.
inline std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

namespace detail {
inline std::chrono::nanoseconds cpu_clock(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}
}  // namespace detail

// CPU time the calling thread has run: unlike wall time, it leaves out the time the
// thread waited for a core that other processes held, and a spinning waiter pays.
inline std::chrono::nanoseconds thread_cpu_time() noexcept {
  return detail::cpu_clock(CLOCK_THREAD_CPUTIME_ID);
}
// CPU time of every thread of the process so far.
inline std::chrono::nanoseconds process_cpu_time() noexcept {
  return detail::cpu_clock(CLOCK_PROCESS_CPUTIME_ID);
}

// The cpus this process may run on (its affinity mask).
inline std::vector<unsigned> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<unsigned> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (unsigned c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// The 1-minute load average, so that a reader of a figure sees how busy the machine was.
inline std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one;
  if (!(f >> one)) return "unknown";
  return one;
}

// The median of v (0 for an empty v).
template <class T>
double median(std::vector<T> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return static_cast<double>(v[v.size() / 2]);
}

// Jain's fairness index of per-thread counts: 1 when all are equal, 1/n when one
// thread did everything (1 for no work at all).
template <class Counts>
double jain_index(const Counts& counts) {
  double s = 0, s2 = 0, n = 0;
  for (const auto c : counts) {
    const auto d = static_cast<double>(c);
    s += d;
    s2 += d * d;
    n += 1;
  }
  return s2 == 0 ? 1.0 : s * s / (n * s2);
}

// Log-linear histogram of nanosecond values: exact below 32, then 16 buckets per
// power of two (within 6.25%), any number of samples in 8 KiB, merged after the run.
// Aligned to a cache line: per-thread histograms side by side in a vector stay apart.
class alignas(64) latency_histogram {
 public:
  void record(std::uint64_t ns) noexcept {
    ++buckets_[index(ns)];
    ++count_;
  }
  void merge(const latency_histogram& o) noexcept {
    for (std::size_t i = 0; i < buckets_.size(); ++i)
      buckets_[i] += o.buckets_[i];
    count_ += o.count_;
  }
  std::uint64_t count() const noexcept { return count_; }
  // The middle of the bucket at or below which a fraction p of the samples lie.
  double percentile(double p) const noexcept {
    if (count_ == 0) return 0;
    const auto rank = static_cast<std::uint64_t>(p * static_cast<double>(count_ - 1)) + 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      seen += buckets_[i];
      if (seen >= rank) return value(i);
    }
    return value(buckets_.size() - 1);
  }

 private:
  static constexpr unsigned sub_bits = 4;
  static std::size_t index(std::uint64_t v) noexcept {
    if (v < (2u << sub_bits)) return static_cast<std::size_t>(v);
    const unsigned e = static_cast<unsigned>(std::bit_width(v)) - 1;  // >= sub_bits + 1
    const std::uint64_t mantissa = (v >> (e - sub_bits)) & ((1u << sub_bits) - 1);
    return ((e - sub_bits + 1) << sub_bits) + static_cast<std::size_t>(mantissa);
  }
  static double value(std::size_t i) noexcept {
    if (i < (2u << sub_bits)) return static_cast<double>(i);
    const unsigned e = static_cast<unsigned>(i >> sub_bits) + sub_bits - 1;
    const std::uint64_t mantissa = i & ((1u << sub_bits) - 1);
    const double low = static_cast<double>(((1ull << sub_bits) + mantissa) << (e - sub_bits));
    return low + static_cast<double>(1ull << (e - sub_bits)) / 2;
  }
  std::array<std::uint64_t, (64 - sub_bits + 1) << sub_bits> buckets_{};
  std::uint64_t count_ = 0;
};

// A fixed amount of CPU work standing for what a program does outside its locks (a
// packet's transmit, building the next one): `iters` steps of a dependent chain the
// compiler cannot remove. spin_ns_per_iter() calibrates it once per run.
inline void spin(std::uint64_t iters) noexcept {
  thread_local std::uint64_t sink = 0;  // per thread: a shared sink would bounce a line
  std::uint64_t x = sink;
  for (std::uint64_t i = 0; i < iters; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    asm volatile("" : "+r"(x));
  }
  sink = x;
}
// Nanoseconds per spin() step: the best of five runs (the least disturbed one).
inline double spin_ns_per_iter() {
  constexpr std::uint64_t iters = 2000000;
  double best = 1e9;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = now_ns();
    spin(iters);
    best = std::min(best, static_cast<double>(now_ns() - t0) / iters);
  }
  return best;
}

}  // namespace hotpath::measure
