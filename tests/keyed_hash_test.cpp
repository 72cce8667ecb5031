// SPDX-License-Identifier: MIT
#include "hotpath/keyed_hash.hpp"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace hotpath::test {
namespace {

// The paper's key: bytes 00 01 .. 0f.
constexpr hash_key paper_key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};

std::array<unsigned char, 64> counting_bytes() {
  std::array<unsigned char, 64> m{};
  for (std::size_t i = 0; i < m.size(); ++i)
    m[i] = static_cast<unsigned char>(i);
  return m;
}

TEST(KeyedHash, SipHash24MatchesThePaper) {
  const auto m = counting_bytes();
  // Appendix A of the paper: the 15-byte message 00 .. 0e.
  EXPECT_EQ((siphash<2, 4>(paper_key, m.data(), 15)), 0xa129ca6149be45e5ull);
  // The reference implementation's vectors.h, lengths 0 and 8.
  EXPECT_EQ((siphash<2, 4>(paper_key, m.data(), 0)), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ((siphash<2, 4>(paper_key, m.data(), 8)), 0x93f5f5799a932462ull);
}

TEST(KeyedHash, SipHash13MatchesTheReferenceVectors) {
  // The reference implementation built with cROUNDS = 1, dROUNDS = 3, message
  // 00 01 .. (n - 1) under the paper's key.
  const auto m = counting_bytes();
  const std::array<std::pair<std::size_t, std::uint64_t>, 6> vectors{{{0, 0xabac0158050fc4dcull},
                                                                      {1, 0xc9f49bf37d57ca93ull},
                                                                      {7, 0xd3927d989bb11140ull},
                                                                      {8, 0x369095118d299a8eull},
                                                                      {9, 0x25a48eb36c063de4ull},
                                                                      {12, 0x78a384b157b4d9a2ull}}};
  for (auto [n, want] : vectors)
    EXPECT_EQ(siphash13(paper_key, m.data(), n), want) << n << " bytes";
}

struct ipv4_key {
  std::uint32_t src, dst;
  std::uint16_t id;
  std::uint8_t proto, pad;
};
static_assert(sizeof(ipv4_key) == 12);
struct padded {
  std::uint8_t a;
  std::uint32_t b;
};
static_assert(detail::hashable_as_bytes<ipv4_key>);
static_assert(!detail::hashable_as_bytes<padded>, "padding bytes would make equal keys differ");
static_assert(!detail::hashable_as_bytes<double>, "+0.0 == -0.0 but their bytes differ");

TEST(KeyedHash, ObjectsHashAsTheirBytesAndSequencesAgree) {
  const keyed_hash<ipv4_key> h(paper_key);
  const ipv4_key k{0x0a000001, 0x0a000002, 0x1234, 17, 0};
  EXPECT_EQ(h(k), siphash13(paper_key, &k, sizeof k));
  const std::string s = "hello, fragments";
  const auto bytes = std::as_bytes(std::span(s));
  EXPECT_EQ(keyed_hash<std::string>(paper_key)(s), siphash13(paper_key, s.data(), s.size()));
  EXPECT_EQ(keyed_hash<std::string_view>(paper_key)(s), keyed_hash<std::string>(paper_key)(s));
  EXPECT_EQ(keyed_hash<std::span<const std::byte>>(paper_key)(bytes),
            keyed_hash<std::string>(paper_key)(s));
}

TEST(KeyedHash, FixedKeyReproducesAndRandomKeysDiffer) {
  const ipv4_key k{1, 2, 3, 6, 0};
  EXPECT_EQ(keyed_hash<ipv4_key>(hash_key{5, 7})(k), keyed_hash<ipv4_key>(hash_key{5, 7})(k));
  EXPECT_NE(keyed_hash<ipv4_key>(hash_key{5, 7})(k), keyed_hash<ipv4_key>(hash_key{5, 8})(k));
  const keyed_hash<ipv4_key> a, b;
  EXPECT_NE(a.key(), b.key()) << "two random 128-bit keys from the OS were equal";
  EXPECT_NE(a(k), b(k));
}

// A pseudorandom function: flipping any one input bit flips each output bit with
// probability 1/2, so about 32 of 64 on average.
TEST(KeyedHash, OneInputBitFlipsHalfTheOutput) {
  const keyed_hash<ipv4_key> h(hash_key{0x1234, 0x5678});
  std::uint64_t flipped = 0;
  std::uint64_t trials = 0;
  for (std::uint32_t i = 0; i < 200; ++i) {
    ipv4_key k{0x0a000000 + i, 0xc0a80001, static_cast<std::uint16_t>(i * 7), 17, 0};
    const std::uint64_t base = h(k);
    auto* bytes = reinterpret_cast<unsigned char*>(&k);
    for (std::size_t bit = 0; bit < 8 * sizeof k; ++bit) {
      bytes[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      flipped += static_cast<std::uint64_t>(std::popcount(base ^ h(k)));
      bytes[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      ++trials;
    }
  }
  const double mean = static_cast<double>(flipped) / static_cast<double>(trials);
  // 19200 trials of Binomial(64, 1/2): the mean's standard deviation is 0.03.
  EXPECT_NEAR(mean, 32.0, 0.3);
}

}  // namespace
}  // namespace hotpath::test
