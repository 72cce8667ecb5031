// SPDX-License-Identifier: MIT
// The showdown's latency percentiles come from latency_histogram: check them against
// exact percentiles of known samples.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "support/lock_bench.hpp"

namespace {

using hotpath::bench::latency_histogram;

double exact(std::vector<std::uint64_t> v, double p) {
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))]);
}

TEST(latency_histogram, small_values_are_exact) {
  latency_histogram h;
  for (std::uint64_t v = 0; v < 32; ++v)
    h.record(v);
  EXPECT_EQ(h.count(), 32u);
  EXPECT_EQ(h.percentile(0.0), 0);
  EXPECT_EQ(h.percentile(0.5), 15);
  EXPECT_EQ(h.percentile(1.0), 31);
}

TEST(latency_histogram, percentiles_within_bucket_width) {
  std::mt19937_64 rng(12);
  std::lognormal_distribution<double> dist(6.0, 2.0);  // ns: a few hundred, long tail
  std::vector<std::uint64_t> samples;
  latency_histogram a, b;
  for (int i = 0; i < 200000; ++i) {
    const auto v = static_cast<std::uint64_t>(dist(rng));
    samples.push_back(v);
    (i % 2 ? a : b).record(v);  // merged below, as the per-thread histograms are
  }
  a.merge(b);
  ASSERT_EQ(a.count(), samples.size());
  for (double p : {0.0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0}) {
    const double want = exact(samples, p);
    EXPECT_NEAR(a.percentile(p), want, want / 32 + 1) << "p=" << p;  // half a bucket
  }
}

TEST(latency_histogram, huge_values_land_in_the_last_buckets) {
  latency_histogram h;
  h.record(1);
  h.record(UINT64_MAX);
  EXPECT_EQ(h.percentile(0.0), 1);
  EXPECT_GT(h.percentile(1.0), 1.7e19);
}

}  // namespace
