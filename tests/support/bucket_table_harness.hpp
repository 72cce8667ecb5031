// SPDX-License-Identifier: MIT
// What tests/bucket_table_test.cpp and bucket_table_eviction_test.cpp share: a flow key,
// a value that counts its lives, the entries' charges summed, small options.
#pragma once

#include <atomic>
#include <cstdint>

#include "hotpath/bucket_table.hpp"

namespace hotpath::test {

struct flow_key {
  std::uint32_t src, dst;
  std::uint16_t id;
  std::uint8_t proto, pad;
  friend bool operator==(const flow_key&, const flow_key&) = default;
};

inline flow_key key_of(std::uint32_t i) {
  return {0x0a000000u + i, 0xc0a80001u, static_cast<std::uint16_t>(i * 2654435761u >> 16), 17, 0};
}

// A value that counts its constructions and destructions and knows whether it is
// alive; `inside` checks that visits of one entry never overlap.
struct tracked {
  static constexpr std::uint64_t alive = 0xa11fe5a11fe5a11full;
  static inline std::atomic<std::int64_t> made{0};
  static inline std::atomic<std::int64_t> destroyed{0};

  explicit tracked(std::uint32_t t = 0) : tag(t) { made.fetch_add(1, std::memory_order_relaxed); }
  tracked(const tracked&) = delete;
  ~tracked() {
    magic = 0;
    destroyed.fetch_add(1, std::memory_order_relaxed);
  }
  std::uint64_t magic = alive;
  std::uint32_t tag;
  int inside = 0;
  std::int64_t visits = 0;
  std::int64_t extra = 0;  // what the visitors charged beyond entry_charge
};

struct lifetime_guard {
  std::int64_t made0 = tracked::made.load();
  std::int64_t destroyed0 = tracked::destroyed.load();
  std::int64_t made() const { return tracked::made.load() - made0; }
  std::int64_t destroyed() const { return tracked::destroyed.load() - destroyed0; }
};

using table = bucket_table<flow_key, tracked>;

// The entries' charges, summed one bucket at a time: exact when nothing runs. The bound
// is checked on this, not on charged(), which is never above the budget by construction.
template <class Table>

std::int64_t held_bytes(Table& t) {
  std::int64_t sum = 0;
  t.for_each([&](auto& v) { sum += v.charged(); });
  return sum;
}

inline bucket_table_options small_options(std::size_t buckets, std::int64_t budget) {
  bucket_table_options o;
  o.buckets = buckets;
  o.budget = budget;
  o.entry_charge = 100;
  return o;
}

}  // namespace hotpath::test
