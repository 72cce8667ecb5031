// SPDX-License-Identifier: MIT
// keyed_hash: SipHash-1-3 (Aumasson & Bernstein, "SipHash: a fast short-input PRF",
// 2012; 1 compression round, 3 finalization rounds) with a 128-bit secret key.
//
// Keys that arrive from the network are chosen by whoever sends them. A table
// indexed by an unkeyed or merely seeded hash (CRC32C, jhash, FNV) can be flooded:
// CRC is affine in its seed, so keys that collide under one seed collide under every
// seed, and the attacker precomputes them once. A keyed PRF with a key the attacker
// never sees leaves nothing to precompute. Every bucket_table draws its own key from
// the OS (getrandom) unless it is given one (reproducible tests, replay).
//
//   hotpath::keyed_hash<flow_key> h;                       // random key
//   hotpath::keyed_hash<flow_key> r(hotpath::hash_key{1, 2});  // fixed key
//   std::uint64_t x = h(k);
//
// Keys: any trivially copyable type with unique object representations (no padding,
// no floating point: equal values are equal bytes), hashed as its bytes; and byte
// sequences (std::string, std::string_view, std::span<const std::byte>,
// std::span<const unsigned char>). siphash13() hashes any byte range.
//
// Cost: about 7.5 ns per 12-byte key on this machine (docs/bucket_table.md).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#if defined(__linux__)
#include <sys/random.h>
#endif

namespace hotpath {

// The 128-bit key: k0 is bytes 0-7 and k1 bytes 8-15 of the paper's key, read
// little-endian.
struct hash_key {
  std::uint64_t k0 = 0;
  std::uint64_t k1 = 0;

  friend bool operator==(const hash_key&, const hash_key&) = default;

  // 16 bytes from the OS: getrandom() on Linux, std::random_device elsewhere (or if
  // getrandom fails, e.g. under a seccomp filter).
  static hash_key random() {
    std::array<std::uint64_t, 2> w{};
#if defined(__linux__)
    std::size_t got = 0;
    auto* p = reinterpret_cast<unsigned char*>(w.data());
    while (got < sizeof(w)) {
      const ssize_t n = ::getrandom(p + got, sizeof(w) - got, 0);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    if (got == sizeof(w)) return {w[0], w[1]};
#endif
    std::random_device rd;
    auto word = [&rd] { return (std::uint64_t{rd()} << 32) ^ rd(); };
    return {word(), word()};
  }
};

namespace detail {

inline std::uint64_t load_le64(const unsigned char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

struct sip_state {
  std::uint64_t v0, v1, v2, v3;

  void round() noexcept {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  }
};

}  // namespace detail

// SipHash-c-d of n bytes at p. C and D are parameters so that the tests can check
// the code against the paper's SipHash-2-4 vectors; hotpath uses 1-3.
template <int C, int D>
std::uint64_t siphash(hash_key key, const void* data, std::size_t n) noexcept {
  // The initialization constants: "somepseudorandomlygeneratedbytes".
  detail::sip_state s{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull,
                      key.k0 ^ 0x6c7967656e657261ull, key.k1 ^ 0x7465646279746573ull};
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t whole = n & ~std::size_t{7};
  auto compress = [&s](std::uint64_t m) {
    s.v3 ^= m;
    for (int i = 0; i < C; ++i)
      s.round();
    s.v0 ^= m;
  };
  for (std::size_t i = 0; i < whole; i += 8)
    compress(detail::load_le64(p + i));
  // Last block: the remaining 0-7 bytes little-endian, the length mod 256 on top.
  std::uint64_t b = static_cast<std::uint64_t>(n) << 56;
  for (std::size_t i = 0; i < (n & 7); ++i)
    b |= std::uint64_t{p[whole + i]} << (8 * i);
  compress(b);
  s.v2 ^= 0xff;
  for (int i = 0; i < D; ++i)
    s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

inline std::uint64_t siphash13(hash_key key, const void* data, std::size_t n) noexcept {
  return siphash<1, 3>(key, data, n);
}

namespace detail {
template <class Key>
inline constexpr bool hashable_as_bytes =
    std::is_trivially_copyable_v<Key>&& std::has_unique_object_representations_v<Key>;

template <class Key>
inline constexpr bool byte_sequence =
    std::is_same_v<Key, std::string> || std::is_same_v<Key, std::string_view> ||
    std::is_same_v<Key, std::span<const std::byte>> ||
    std::is_same_v<Key, std::span<const unsigned char>>;
}  // namespace detail

// A keyed hash object, for bucket_table (and any unordered container: it is a
// Hash with a const operator() returning std::size_t-convertible values).
template <class Key>
class keyed_hash {
  static_assert(detail::hashable_as_bytes<Key> || detail::byte_sequence<Key>,
                "keyed_hash<Key>: Key must be trivially copyable with unique object "
                "representations (no padding, no floating point), or a byte sequence "
                "(std::string, std::string_view, std::span<const std::byte>, "
                "std::span<const unsigned char>)");

 public:
  // A fresh random key from the OS.
  keyed_hash() : key_(hash_key::random()) {}
  // A fixed key: the same keys land in the same places in every run.
  explicit keyed_hash(hash_key k) noexcept : key_(k) {}

  std::uint64_t operator()(const Key& k) const noexcept {
    if constexpr (detail::byte_sequence<Key>) {
      return siphash13(key_, std::data(k), std::size(k) * sizeof(*std::data(k)));
    } else {
      return siphash13(key_, &k, sizeof(Key));
    }
  }

  hash_key key() const noexcept { return key_; }

 private:
  hash_key key_;
};

}  // namespace hotpath
