// SPDX-License-Identifier: MIT
// What the defrag engine's tests share (defrag_engine_test, defrag_reassembly_test,
// defrag_budget_test): IPv4 and IPv6 packet builders, fragment cutting, and a harness
// that runs every packet through three engines (input(), input_borrowed() and
// delivered views) which must agree packet after packet.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "engine.hpp"  // examples/defrag
#include "support/defrag_packets.hpp"

namespace hotpath::test::defrag_engine {

using bytes = std::vector<std::uint8_t>;
using defrag::counter;
using defrag::policy;

constexpr std::int64_t sec = 1'000'000'000;
const hotpath::hash_key fixed_key{0x0123456789abcdefull, 0xfedcba9876543210ull};

// ---------------------------------------------------------------- packet builders

using hotpath::test::defrag_packets::v4_packet;
using hotpath::test::defrag_packets::v4_spec;

struct v6_spec {
  std::uint8_t src[16] = {0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  std::uint8_t dst[16] = {0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  std::uint32_t id = 1;
  std::uint8_t upper = 17, tc = 0;
  bool dest_opts = false;            // a destination options header before the fragment header
  std::uint8_t dest_opts_units = 1;  // its length in 8-byte units
};

// With frag = false: the datagram as a host sees it (no fragment header).
inline bytes v6_packet(const v6_spec& s, bool frag, std::uint32_t offset, bool mf,
                       const bytes& payload) {
  bytes p(40);
  p[0] = static_cast<std::uint8_t>(0x60 | (s.tc >> 4));
  p[1] = static_cast<std::uint8_t>(s.tc << 4);
  p[7] = 64;
  std::memcpy(&p[8], s.src, 16);
  std::memcpy(&p[24], s.dst, 16);
  std::size_t nh_at = 6;
  if (s.dest_opts) {
    p[nh_at] = 60;
    nh_at = p.size();
    // Zeroed, then its length and one PadN option filling it. (Inserted from a braced
    // list, GCC 12 warned of a memcpy out of bounds that is not there: -Warray-bounds.)
    p.resize(nh_at + 8u * s.dest_opts_units, 0);
    p[nh_at + 1] = static_cast<std::uint8_t>(s.dest_opts_units - 1);
    p[nh_at + 2] = 1;  // PadN
    p[nh_at + 3] = static_cast<std::uint8_t>(s.dest_opts_units * 8 - 4);
  }
  if (frag) {
    p[nh_at] = 44;
    nh_at = p.size();
    p.insert(p.end(), 8, 0);
    defrag::store_be16(&p[nh_at + 2], static_cast<std::uint16_t>(offset | (mf ? 1 : 0)));
    for (int i = 0; i < 4; ++i)
      p[nh_at + 4 + i] = static_cast<std::uint8_t>(s.id >> (24 - 8 * i));
  }
  p[nh_at] = s.upper;
  p.insert(p.end(), payload.begin(), payload.end());
  defrag::store_be16(&p[4], static_cast<std::uint16_t>(p.size() - 40));
  return p;
}

inline bytes pattern(std::size_t n, std::uint32_t seed) {
  bytes b(n);
  std::mt19937 rng(seed);
  for (auto& x : b)
    x = static_cast<std::uint8_t>(rng());
  return b;
}

struct frag {
  std::uint32_t offset;
  bool mf;
  bytes data;
};

// Cuts payload into fragments of `size` bytes (a multiple of 8), the last one shorter.
inline std::vector<frag> cut(const bytes& payload, std::size_t size) {
  std::vector<frag> v;
  for (std::size_t o = 0; o < payload.size(); o += size) {
    const std::size_t n = std::min(size, payload.size() - o);
    v.push_back({static_cast<std::uint32_t>(o), o + n < payload.size(),
                 bytes(payload.begin() + static_cast<std::ptrdiff_t>(o),
                       payload.begin() + static_cast<std::ptrdiff_t>(o + n))});
  }
  return v;
}

// One family's way to turn fragments into packets and the expected datagram.
struct family {
  int v;
  v4_spec s4;
  v6_spec s6;
  bytes fragment(const frag& f) const {
    return v == 4 ? v4_packet(s4, f.offset, f.mf, f.data)
                  : v6_packet(s6, true, f.offset, f.mf, f.data);
  }
  bytes whole(const bytes& payload) const {
    return v == 4 ? v4_packet(s4, 0, false, payload) : v6_packet(s6, false, 0, false, payload);
  }
  void set_id(std::uint32_t id) {
    s4.id = static_cast<std::uint16_t>(id);
    s6.id = id;
  }
};
inline family fam(int v) {
  return family{v, {}, {}};
}

// An engine and what it delivered. Beside it a twin takes every packet through
// input_borrowed() (keeping pointers into packets the harness keeps alive): it must
// deliver the same bytes and count the same as input(), packet after packet.
struct harness {
  // Three engines: e (copies, delivers contiguous packets), twin (borrows, delivers
  // datagram_views), viewed (copies, delivers datagram_views): the same packets out.
  // twins = false: e alone. (Where evictions sample buckets at random, three engines
  // drawing from one thread's stream evict alike only while the samples agree.)
  explicit harness(defrag::config c = {}, bool twins = true)
      : e(c, fixed_key), twin(c, fixed_key), viewed(c, fixed_key), twins_(twins) {}
  void feed(const bytes& p, std::int64_t t = 0) {
    const std::size_t before = out.size();
    e.input(t, p, [&](std::span<const std::uint8_t> d) { out.emplace_back(d.begin(), d.end()); });
    if (!twins_) return;
    std::vector<bytes> borrowed_out, viewed_out;
    auto flatten = [](std::vector<bytes>& to) {
      return [&to](const defrag::datagram_view& d) {
        d.copy_to(to.emplace_back(d.size()).data());
        std::size_t n = 0;  // for_each_span() walks the same bytes
        d.for_each_span([&](std::span<const std::uint8_t> s) {
          EXPECT_TRUE(std::equal(s.begin(), s.end(), to.back().begin() + static_cast<long>(n)));
          n += s.size();
        });
        EXPECT_EQ(n, d.size());
      };
    };
    twin.input_borrowed(t, lent.emplace_back(p), flatten(borrowed_out));
    viewed.input(t, p, flatten(viewed_out));
    EXPECT_TRUE(std::equal(out.begin() + static_cast<std::ptrdiff_t>(before), out.end(),
                           borrowed_out.begin(), borrowed_out.end()))
        << "input_borrowed() delivered other packets than input()";
    EXPECT_TRUE(std::equal(out.begin() + static_cast<std::ptrdiff_t>(before), out.end(),
                           viewed_out.begin(), viewed_out.end()))
        << "datagram_views hold other packets than the contiguous ones";
    expect_twins();
  }
  // On both engines.
  std::size_t expire(std::int64_t now, std::size_t buckets) {
    const std::size_t n = e.expire(now, buckets);
    if (!twins_) return n;
    EXPECT_EQ(twin.expire(now, buckets), n);
    EXPECT_EQ(viewed.expire(now, buckets), n);
    expect_twins();
    return n;
  }
  void reconfigure(const defrag::config& c) {
    e.reconfigure(c);
    twin.reconfigure(c);
    viewed.reconfigure(c);
  }
  void expect_twins() const {
    const defrag::stats a = e.snapshot(), b = twin.snapshot(), v = viewed.snapshot();
    EXPECT_EQ(a.v, b.v) << "input_borrowed() counted otherwise than input()";
    EXPECT_EQ(a.memory_bytes, b.memory_bytes);
    EXPECT_EQ(a.v, v.v) << "delivering views counted otherwise than delivering packets";
    EXPECT_EQ(a.memory_bytes, v.memory_bytes);
  }
  void feed(const family& f, const std::vector<frag>& fs, std::int64_t t = 0) {
    for (const auto& x : fs)
      feed(f.fragment(x), t);
  }
  std::int64_t operator[](counter c) const { return e.snapshot()[c]; }
  defrag::engine e;
  std::deque<bytes> lent;  // outlives twin, which points into it
  defrag::engine twin;
  defrag::engine viewed;
  std::vector<bytes> out;
  bool twins_;
};

inline defrag::config with_policy(policy p) {
  defrag::config c;
  c.pol = p;
  return c;
}

const policy all_policies[] = {policy::linux,   policy::first,     policy::last,
                               policy::bsd,     policy::bsd_right, policy::linux_legacy,
                               policy::windows, policy::solaris};

}  // namespace hotpath::test::defrag_engine
