// SPDX-License-Identifier: MIT
// bucket_table's sampler on its own (detail/table_sampler.hpp): scale() spreads the
// indices of 2^bits over a range of any size, in order, each value getting floor or
// ceil of 2^bits / size of them; sample_indices draws fresh bits for every index
// (never reusing one that an earlier index of the same draw used), or exactly the
// policy's random() stream where the policy has one.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hotpath/detail/policy.hpp"
#include "hotpath/detail/table_sampler.hpp"

namespace {

using hotpath::detail::sample_indices;
using hotpath::detail::scale;

// Every index of 2^bits, for sizes at the edges (1, 2^bits - 1, 2^bits) and between.
TEST(TableSampler, ScaleSpreadsEveryIndexEvenlyAndInOrder) {
  for (unsigned bits = 1; bits <= 12; ++bits) {
    const std::size_t n = std::size_t{1} << bits;
    for (std::size_t size :
         {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}, n / 3, n - 1, n}) {
      if (size == 0 || size > n) continue;
      std::vector<std::size_t> hits(size, 0);
      std::size_t last = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t v = scale(i, size, bits);
        ASSERT_LT(v, size) << "bits " << bits << " size " << size << " i " << i;
        ASSERT_GE(v, last) << "bits " << bits << " size " << size << " i " << i;
        last = v;
        ++hits[v];
      }
      for (std::size_t v = 0; v < size; ++v) {
        EXPECT_GE(hits[v], n / size) << "bits " << bits << " size " << size << " value " << v;
        EXPECT_LE(hits[v], (n + size - 1) / size) << "bits " << bits << " size " << size;
      }
      if (size == n) {
        EXPECT_EQ(scale(n - 1, size, bits), n - 1);  // the identity
      }
    }
  }
}

// No overflow where i * size needs more than 64 bits.
TEST(TableSampler, ScaleOfLargeIndicesDoesNotOverflow) {
  const std::size_t top = (std::size_t{1} << 63) - 1;
  EXPECT_EQ(scale(top, std::size_t{1} << 40, 63), (std::size_t{1} << 40) - 1);
  EXPECT_EQ(scale(std::size_t{1} << 62, 3, 63), 1u);
  EXPECT_EQ(scale(0, std::size_t{1} << 62, 63), 0u);
}

// Pairs of consecutive indices cover all 2^(2 bits) combinations evenly: an index
// that reused bits of the previous one (a shift by fewer than `bits`) would tie each
// to the last, and most pairs would be rare. 4 bits: 256 pairs, 2^18 indices, about
// 1024 of each pair; a fair generator puts any pair outside [1/2, 3/2] of that with
// probability below 1e-44.
TEST(TableSampler, ConsecutiveIndicesAreIndependent) {
  constexpr unsigned bits = 4;
  constexpr std::size_t cells = std::size_t{1} << (2 * bits);
  constexpr std::size_t draws = std::size_t{1} << 18;
  sample_indices<hotpath::default_policy> pick(bits);
  std::vector<std::size_t> pairs(cells, 0);
  std::size_t prev = pick.next() & 15u;
  for (std::size_t k = 0; k < draws; ++k) {
    const std::size_t cur = pick.next() & 15u;
    ++pairs[(prev << bits) | cur];
    prev = cur;
  }
  const std::size_t mean = draws / cells;
  for (std::size_t c = 0; c < cells; ++c) {
    EXPECT_GE(pairs[c], mean / 2) << "pair " << (c >> bits) << "," << (c & 15u);
    EXPECT_LE(pairs[c], mean * 3 / 2) << "pair " << (c >> bits) << "," << (c & 15u);
  }
}

// With bits that divide 64 unevenly (13: 4 indices a draw, 12 bits left over), each
// index still takes fresh bits: the same pair test on the low bits.
TEST(TableSampler, IndicesTakeFreshBitsAcrossDraws) {
  constexpr unsigned bits = 13;
  sample_indices<hotpath::default_policy> pick(bits);
  std::vector<std::size_t> pairs(256, 0);
  std::size_t prev = pick.next() & 15u;
  for (std::size_t k = 0; k < (std::size_t{1} << 18); ++k) {
    const std::size_t cur = pick.next() & 15u;
    ++pairs[(prev << 4) | cur];
    prev = cur;
  }
  for (std::size_t c = 0; c < pairs.size(); ++c) {
    EXPECT_GE(pairs[c], 512u) << "pair " << c;
    EXPECT_LE(pairs[c], 1536u) << "pair " << c;
  }
}

// A policy's random() is used as it is, one call per index.
struct counting_policy : hotpath::default_policy {
  static inline std::uint64_t calls = 0;
  static std::uint64_t random() noexcept { return 1000 + calls++; }
};

TEST(TableSampler, APolicysRandomIsUsedOneCallPerIndex) {
  counting_policy::calls = 0;
  sample_indices<counting_policy> pick(6);
  for (std::uint64_t k = 0; k < 100; ++k)
    EXPECT_EQ(pick.next(), 1000 + k);
  EXPECT_EQ(counting_policy::calls, 100u);
}

}  // namespace
