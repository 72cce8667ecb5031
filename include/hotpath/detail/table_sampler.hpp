// SPDX-License-Identifier: MIT
// Random bucket indices for bucket_table's eviction sampling (detail/table_eviction.hpp
// says what it does with them). sample_indices draws each index from a policy's
// random() where the policy has one (the deterministic scheduler's), else index_bits
// at a time from one 64-bit splitmix64 draw of a per-thread stream: one draw serves
// 64 / index_bits probes. scale() maps an index of 2^bits onto a range of any size
// (a share of the buckets) by a multiply and a shift: every value of the range gets
// floor or ceil of 2^bits / size of the indices, in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace hotpath::detail {

// i * size / 2^bits for i < 2^bits (a random index scaled to a range), without a
// division and without overflow.
inline std::size_t scale(std::size_t i, std::size_t size, unsigned bits) noexcept {
  __extension__ using wide = unsigned __int128;  // GCC and clang; __extension__: -Wpedantic
  return static_cast<std::size_t>((static_cast<wide>(i) * size) >> bits);
}
// A per-thread splitmix64 stream for eviction sampling.
inline std::uint64_t sample_random() noexcept {
  thread_local std::uint64_t state =
      reinterpret_cast<std::uintptr_t>(&state) * 0x9e3779b97f4a7c15ull ^
      static_cast<std::uint64_t>(std::hash<const void*>{}(&state));
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Bucket indices for eviction sampling: a policy's random() per index; else
// index_bits at a time from each 64-bit draw of the thread's generator.
template <class Policy>
class sample_indices {
 public:
  explicit sample_indices(unsigned index_bits) noexcept : bits_(index_bits) {}
  std::size_t next() noexcept {
    if constexpr (requires { Policy::random(); }) {
      return static_cast<std::size_t>(Policy::random());
    } else {
      if (left_ < bits_) {
        r_ = detail::sample_random();
        left_ = 64;
      }
      const auto i = static_cast<std::size_t>(r_);
      r_ >>= bits_;  // bits_ < 64: the table has 2^bits_ buckets
      left_ -= bits_;
      return i;
    }
  }

 private:
  unsigned bits_;
  unsigned left_ = 0;
  std::uint64_t r_ = 0;
};

}  // namespace hotpath::detail
