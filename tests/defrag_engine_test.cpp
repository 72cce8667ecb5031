// SPDX-License-Identifier: MIT
// The defrag engine as a whole: policy names and parsing, what passes through
// unfragmented, how a datagram is rebuilt (IPv4 options and flags, ECN, IPv6
// extension headers), and many threads feeding one engine.
#include "engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <latch>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/defrag_engine_harness.hpp"

namespace {

using namespace hotpath::test::defrag_engine;

// ---------------------------------------------------------------- names and parsing

TEST(DefragNames, PoliciesAndCountersRoundTrip) {
  for (policy p : all_policies)
    EXPECT_EQ(defrag::parse_policy(defrag::name(p)), p);
  EXPECT_EQ(defrag::parse_policy("bsd_right"), policy::bsd_right);
  EXPECT_EQ(defrag::parse_policy("linux-legacy"), policy::linux_legacy);
  EXPECT_FALSE(defrag::parse_policy("macos"));
  EXPECT_FALSE(defrag::parse_policy(""));
  EXPECT_EQ(defrag::name(counter::reasm_oks), "reasm_oks");
  EXPECT_EQ(defrag::name(counter::over_budget), "over_budget");
}

TEST(DefragParse, RejectsWhatTheHostRejects) {
  harness h;
  bytes good = v4_packet({}, 0, false, pattern(30, 1));
  bytes bad_sum = good;
  bad_sum[10] ^= 1;
  bytes short_ihl = good;
  short_ihl[0] = 0x44;
  bytes truncated(good.begin(), good.end() - 1);
  bytes v6 = v6_packet({}, false, 0, false, pattern(30, 1));
  bytes v6_trunc(v6.begin(), v6.end() - 1);
  bytes v6_jumbo = v6;
  v6_jumbo[4] = v6_jumbo[5] = 0;
  // A first fragment that does not hold the whole UDP header (RFC 8200 4.5).
  bytes v6_first_short = v6_packet({}, true, 0, true, pattern(4, 1));
  for (const bytes& p : {bad_sum, short_ihl, truncated, v6_trunc, v6_jumbo, v6_first_short, bytes{},
                         bytes{0x50, 0, 0}})
    h.feed(p);
  EXPECT_EQ(h[counter::malformed], 8);
  EXPECT_TRUE(h.out.empty());
  EXPECT_EQ(h[counter::packets_in], 8);
}

// ---------------------------------------------------------------- unfragmented

TEST(DefragPassthrough, UnfragmentedPacketsGoOutUnchanged) {
  harness h;
  bytes a = v4_packet({}, 0, false, pattern(100, 2));
  bytes b = v6_packet({}, false, 0, false, pattern(100, 3));
  bytes padded = v4_packet({}, 0, false, pattern(10, 4));
  bytes frame = padded;
  frame.resize(46, 0);  // Ethernet minimum-size padding after the IP packet
  h.feed(a);
  h.feed(b);
  h.feed(frame);
  ASSERT_EQ(h.out.size(), 3u);
  EXPECT_EQ(h.out[0], a);
  EXPECT_EQ(h.out[1], b);
  EXPECT_EQ(h.out[2], padded);
  EXPECT_EQ(h[counter::passthrough], 3);
  EXPECT_EQ(h[counter::datagrams_out], 3);
  EXPECT_EQ(h[counter::fragments_in], 0);
}

TEST(DefragPassthrough, Ipv6AtomicFragmentIsDeliveredWithoutItsHeader) {
  // Linux (ipv6_frag_rcv) delivers an offset-0, M=0 fragment at once (RFC 6946).
  for (bool dest_opts : {false, true}) {
    harness h;
    v6_spec s;
    s.dest_opts = dest_opts;
    const bytes payload = pattern(64, 5);
    h.feed(v6_packet(s, true, 0, false, payload));
    ASSERT_EQ(h.out.size(), 1u);
    EXPECT_EQ(h.out[0], v6_packet(s, false, 0, false, payload));
    EXPECT_EQ(h[counter::reasm_oks], 1);
    EXPECT_EQ(h[counter::passthrough], 0);
    EXPECT_EQ(h.e.datagrams_pending(), 0);
  }
}

// An IPv6 packet whose header names `nh` and whose payload is `rest` (headers and all).
bytes v6_raw(std::uint8_t nh, const bytes& rest) {
  bytes p = v6_packet({}, false, 0, false, {});
  p[6] = nh;
  p.insert(p.end(), rest.begin(), rest.end());
  defrag::store_be16(&p[4], static_cast<std::uint16_t>(p.size() - 40));
  return p;
}
bytes frag_header(std::uint8_t nh, std::uint32_t offset, bool mf, std::uint32_t id) {
  bytes f{nh, 0, 0, 0, 0, 0, 0, 0};
  defrag::store_be16(&f[2], static_cast<std::uint16_t>(offset | (mf ? 1 : 0)));
  for (int i = 0; i < 4; ++i)
    f[4 + i] = static_cast<std::uint8_t>(id >> (24 - 8 * i));
  return f;
}
bytes cat(bytes a, const bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(DefragPassthrough, WhatAFragmentHeaderReleasesGoesThroughIpv6InputAgain) {
  const bytes udp = pattern(40, 6);
  {
    // Atomic fragment, then a destination options header running past the packet:
    // Linux drops it when it parses that header.
    harness h;
    h.feed(v6_raw(44, cat(frag_header(60, 0, false, 1), bytes{17, 20, 0, 0, 0, 0, 0, 0})));
    EXPECT_TRUE(h.out.empty());
    EXPECT_EQ(h[counter::malformed], 1);
  }
  {
    // Two atomic fragment headers in a row: the first goes, the second drops the packet
    // (Linux: IP6SKB_FRAGMENTED, InHdrErrors; kernel-probes1's p6nestatom).
    harness h;
    h.feed(v6_raw(44, cat(cat(frag_header(44, 0, false, 1), frag_header(17, 0, false, 2)), udp)));
    EXPECT_TRUE(h.out.empty());
    EXPECT_EQ(h[counter::reasm_oks], 1);
    EXPECT_EQ(h[counter::malformed], 1);
    EXPECT_EQ(h[counter::fragments_in], 1);
  }
  {
    // A reassembled datagram that starts with a fragment header (nested fragmentation,
    // p6nestin): dropped, and the inner fragments that come later never complete.
    const bytes inner_a = cat(frag_header(17, 0, true, 9), bytes(udp.begin(), udp.begin() + 16));
    const bytes inner_b = cat(frag_header(17, 16, false, 9), bytes(udp.begin() + 16, udp.end()));
    // inner_a travels in two outer fragments (id 7); inner_b unfragmented.
    harness h;
    h.feed(
        v6_raw(44, cat(frag_header(44, 0, true, 7), bytes(inner_a.begin(), inner_a.begin() + 16))));
    h.feed(
        v6_raw(44, cat(frag_header(44, 16, false, 7), bytes(inner_a.begin() + 16, inner_a.end()))));
    EXPECT_EQ(h[counter::reasm_oks], 1);
    EXPECT_EQ(h[counter::malformed], 1);
    h.feed(v6_raw(44, inner_b));
    EXPECT_TRUE(h.out.empty());
    EXPECT_EQ(h[counter::reasm_oks], 1);
    EXPECT_GT(h.e.snapshot().memory_bytes, 0);  // inner_b waits for a first fragment
  }
  {
    // An atomic fragment whose upper-layer header is cut short: Linux lets it through
    // (the check for a truncated first fragment comes after) and UDP judges it.
    harness h;
    const bytes short_udp(udp.begin(), udp.begin() + 4);
    h.feed(v6_raw(44, cat(frag_header(17, 0, false, 3), short_udp)));
    ASSERT_EQ(h.out.size(), 1u);
    EXPECT_EQ(h.out[0], v6_raw(17, short_udp));
    EXPECT_EQ(h[counter::reasm_oks], 1);
    EXPECT_EQ(h[counter::malformed], 0);
    // First fragments (more to come) must hold the whole upper-layer header (RFC 8200
    // 4.5): UDP's 8 bytes are there (kept), TCP's 20 are not (dropped).
    harness g;
    g.feed(v6_raw(44, cat(frag_header(17, 0, true, 3), bytes(udp.begin(), udp.begin() + 8))));
    g.feed(v6_raw(44, cat(frag_header(6, 0, true, 4), bytes(udp.begin(), udp.begin() + 16))));
    EXPECT_EQ(g[counter::malformed], 1);  // TCP's 20 bytes are not all there
  }
  {
    // Hop-by-hop options anywhere but first: dropped.
    harness h;
    h.feed(
        v6_raw(60, cat(bytes{0, 0, 1, 4, 0, 0, 0, 0}, cat(bytes{17, 0, 1, 4, 0, 0, 0, 0}, udp))));
    EXPECT_EQ(h[counter::malformed], 1);
  }
  {
    // The same headers in a reassembled payload: destination options first, then
    // hop-by-hop. Parsed again once reassembled (a view must not skip that), dropped.
    const bytes payload =
        cat(bytes{0, 0, 1, 4, 0, 0, 0, 0}, cat(bytes{17, 0, 1, 4, 0, 0, 0, 0}, udp));
    harness h;
    h.feed(
        v6_raw(44, cat(frag_header(60, 0, true, 3), bytes(payload.begin(), payload.begin() + 24))));
    h.feed(
        v6_raw(44, cat(frag_header(60, 24, false, 3), bytes(payload.begin() + 24, payload.end()))));
    EXPECT_TRUE(h.out.empty());
    EXPECT_EQ(h[counter::reasm_oks], 1);
    EXPECT_EQ(h[counter::malformed], 1);
  }
  {
    // Hop-by-hop options right after the IPv6 header, but released by a fragment header
    // (reassembled, or an atomic fragment): Linux has no handler for it there, dropped.
    const bytes payload = cat(bytes{17, 0, 1, 4, 0, 0, 0, 0}, udp);
    harness h;
    h.feed(
        v6_raw(44, cat(frag_header(0, 0, true, 4), bytes(payload.begin(), payload.begin() + 24))));
    h.feed(
        v6_raw(44, cat(frag_header(0, 24, false, 4), bytes(payload.begin() + 24, payload.end()))));
    h.feed(v6_raw(44, cat(frag_header(0, 0, false, 5), payload)));
    EXPECT_TRUE(h.out.empty());
    EXPECT_EQ(h[counter::reasm_oks], 2);
    EXPECT_EQ(h[counter::malformed], 2);
  }
  {
    // Hop-by-hop before the fragment header is the unfragmentable part's: kept.
    const bytes hbh{44, 0, 1, 4, 0, 0, 0, 0};
    harness h;
    h.feed(v6_raw(
        0, cat(hbh, cat(frag_header(17, 0, true, 6), bytes(udp.begin(), udp.begin() + 16)))));
    h.feed(v6_raw(
        0, cat(hbh, cat(frag_header(17, 16, false, 6), bytes(udp.begin() + 16, udp.end())))));
    ASSERT_EQ(h.out.size(), 1u);
    EXPECT_EQ(h.out[0], v6_raw(0, cat(bytes{17, 0, 1, 4, 0, 0, 0, 0}, udp)));
  }
  {
    // Three atomic fragment headers around each fragment: the second one drops it
    // (above), counted malformed; nothing reaches the inner reassembly (a view too).
    auto wrapped = [&](std::uint32_t offset, bool mf, const bytes& part) {
      bytes inner = cat(frag_header(17, offset, mf, 5), part);
      for (std::uint32_t id : {1u, 2u, 3u})
        inner = cat(frag_header(44, 0, false, id), inner);
      return v6_raw(44, inner);
    };
    harness h;
    h.feed(wrapped(0, true, bytes(udp.begin(), udp.begin() + 16)));
    h.feed(wrapped(16, false, bytes(udp.begin() + 16, udp.end())));
    EXPECT_TRUE(h.out.empty());
    EXPECT_EQ(h[counter::malformed], 2);
    EXPECT_EQ(h[counter::reasm_oks], 2);
    EXPECT_EQ(h.e.snapshot().memory_bytes, 0);
  }
}

// ---------------------------------------------------------------- rebuilding

TEST(DefragRebuild, Ipv4KeepsTheFirstFragmentsOptionsAndFixesTheHeader) {
  v4_spec first;
  first.options = {0x94, 0x04, 0, 0};  // router alert: copied on fragmentation... or not
  first.tos = 0x10;
  first.ttl = 9;
  v4_spec rest;
  rest.tos = 0x10;
  rest.ttl = 200;  // header fields of later fragments are not used
  const bytes payload = pattern(3000, 41);
  auto fs = cut(payload, 1480);
  harness h;
  h.feed(v4_packet(rest, fs[2].offset, false, fs[2].data));
  h.feed(v4_packet(first, 0, true, fs[0].data));
  h.feed(v4_packet(rest, fs[1].offset, true, fs[1].data));
  ASSERT_EQ(h.out.size(), 1u);
  const bytes want = v4_packet(first, 0, false, payload);
  EXPECT_EQ(h.out[0], want);
  const bytes& got = h.out[0];
  EXPECT_EQ(got[0] & 0x0f, 6);
  EXPECT_EQ(defrag::load_be16(&got[2]), 24 + 3000);
  EXPECT_EQ(defrag::load_be16(&got[6]), 0);
  EXPECT_EQ(defrag::checksum_fold(defrag::checksum_add({got.data(), 24})), 0);
}

TEST(DefragRebuild, Ipv4DontFragmentOnlyIfTheLargestFragmentHadIt) {
  const bytes payload = pattern(2000, 42);
  auto fs = cut(payload, 1480);
  v4_spec df;
  df.df = true;
  v4_spec no;
  for (bool largest_df : {true, false}) {
    harness h;
    h.feed(v4_packet(largest_df ? df : no, 0, true, fs[0].data));
    h.feed(v4_packet(largest_df ? no : df, 1480, false, fs[1].data));
    ASSERT_EQ(h.out.size(), 1u);
    EXPECT_EQ(defrag::load_be16(&h.out[0][6]), largest_df ? 0x4000 : 0);
  }
}

TEST(DefragRebuild, EcnOfTheFragmentsCombinesOrKills) {
  const bytes payload = pattern(2000, 43);
  auto fs = cut(payload, 1480);
  struct row {
    std::uint8_t a, b;
    int want;  // -1: dropped
  };
  for (row r :
       {row{0, 0, 0}, row{2, 2, 2}, row{2, 3, 3}, row{3, 1, 3}, row{0, 3, -1}, row{1, 0, -1}}) {
    v4_spec sa, sb;
    sa.tos = r.a;
    sb.tos = r.b;
    harness h;
    h.feed(v4_packet(sa, 0, true, fs[0].data));
    h.feed(v4_packet(sb, 1480, false, fs[1].data));
    if (r.want < 0) {
      EXPECT_TRUE(h.out.empty());
      EXPECT_EQ(h[counter::reasm_fails], 1);
    } else {
      ASSERT_EQ(h.out.size(), 1u);
      EXPECT_EQ(h.out[0][1] & 3, r.want);
    }
  }
}

// Feeds `payload` as IPv6 fragments of `size` bytes with the headers of `s`, the first
// fragment arriving last (in reverse); expects one datagram, the unfragmented packet,
// and returns it.
bytes rebuilt_v6_in_reverse(const v6_spec& s, const bytes& payload, std::size_t size) {
  auto fs = cut(payload, size);
  std::reverse(fs.begin(), fs.end());
  harness h;
  h.feed(family{6, {}, s}, fs);
  EXPECT_EQ(h.out.size(), 1u);
  if (h.out.size() != 1) return {};
  EXPECT_EQ(h.out[0], v6_packet(s, false, 0, false, payload));
  return h.out[0];
}

TEST(DefragRebuild, Ipv6RemovesTheFragmentHeaderAfterExtensionHeaders) {
  v6_spec s;
  s.dest_opts = true;
  s.tc = 0xb8;
  const bytes d = rebuilt_v6_in_reverse(s, pattern(5000, 44), 1352);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d[6], 60);   // IPv6 header names the destination options
  EXPECT_EQ(d[40], 17);  // which now names UDP, not the fragment header
  EXPECT_EQ(defrag::load_be16(&d[4]), 8 + 5000);
}

TEST(DefragRebuild, Ipv6HeadersLongerThanTheHeadroom) {
  // 40 + 256 bytes of unfragmentable headers, the first fragment arriving last: the
  // payload already stored moves to make room in front of it.
  v6_spec s;
  s.dest_opts = true;
  s.dest_opts_units = 32;
  rebuilt_v6_in_reverse(s, pattern(4000, 47), 1200);
}

// ---------------------------------------------------------------- many threads

// Fragments of the same datagrams dealt across threads, each thread in its own
// order, with duplicates: every datagram comes out exactly once, byte for byte.
// borrowed: through input_borrowed(), so a datagram's fragments are read by whichever
// thread completes it, from the other threads' packets.
void many_threads(policy pol, bool reconfigure_meanwhile, bool borrowed = false) {
  constexpr unsigned threads = 4;
  constexpr std::uint32_t datagrams = 300;
  defrag::config c = with_policy(pol);
  c.buckets = 64;  // many datagrams per bucket: the bucket lock is contended
  c.max_fragments = 128;
  c.budget_bytes = std::int64_t{256} << 20;        // everything fits: no eviction here
  std::vector<std::vector<bytes>> share(threads);  // outlives e (input_borrowed)
  defrag::engine e(c, fixed_key);
  std::vector<bytes> want(datagrams);
  std::mt19937 rng(99);
  for (std::uint32_t d = 0; d < datagrams; ++d) {
    family f = fam(d % 2 ? 6 : 4);
    f.set_id(d);
    const bytes payload = pattern(1000 + 37 * d, d);
    want[d] = f.whole(payload);
    auto fs = cut(payload, 8 * (20 + d % 50));
    for (std::size_t i = 0; i < fs.size(); ++i) {
      share[rng() % threads].push_back(f.fragment(fs[i]));
      if (fs[i].mf && rng() % 2) share[rng() % threads].push_back(f.fragment(fs[i]));
    }
  }
  for (auto& s : share)
    std::shuffle(s.begin(), s.end(), rng);
  std::vector<std::vector<bytes>> got(threads);
  std::latch ready(threads);  // every worker starts once all run: they contend
  std::atomic<bool> stop{false};
  std::thread toggler;
  if (reconfigure_meanwhile) {
    toggler = std::thread([&] {
      defrag::config k = c;
      for (unsigned i = 0; !stop.load(std::memory_order_acquire); ++i) {
        k.pol = i % 2 ? policy::last : pol;
        k.timeout_v4_ns = (30 + i % 3) * sec;
        e.reconfigure(k);
        std::this_thread::yield();
      }
    });
  }
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.arrive_and_wait();
      auto out = [&](std::span<const std::uint8_t> d) { got[t].emplace_back(d.begin(), d.end()); };
      for (const bytes& p : share[t]) {
        if (borrowed)
          e.input_borrowed(0, p, out);
        else
          e.input(0, p, out);
      }
    });
  }
  for (auto& th : pool)
    th.join();
  stop.store(true, std::memory_order_release);
  if (toggler.joinable()) toggler.join();
  std::vector<bytes> all;
  for (auto& g : got)
    all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(all.size(), want.size());
  EXPECT_TRUE(all == want) << "a datagram came out twice, never, or with other bytes";
  const defrag::stats s = e.snapshot();
  EXPECT_EQ(s[counter::datagrams_out], datagrams);
  EXPECT_EQ(s[counter::reasm_fails], 0);
  std::int64_t fed = 0;
  for (auto& sh : share)
    fed += static_cast<std::int64_t>(sh.size());
  EXPECT_EQ(s[counter::packets_in], fed);
  // Duplicates that came after their datagram completed wait in new datagrams;
  // expiring them returns every byte charged.
  e.expire(3600 * sec, 1 << 20);
  EXPECT_EQ(e.datagrams_pending(), 0);
  EXPECT_EQ(e.snapshot().memory_bytes, 0);
}

TEST(DefragThreads, SameDatagramsFromManyThreadsLinux) {
  many_threads(policy::linux, false);
}
TEST(DefragThreads, SameDatagramsFromManyThreadsLast) {
  many_threads(policy::last, false);
}
TEST(DefragThreads, SameDatagramsWhileReconfiguring) {
  many_threads(policy::bsd, true);
}
TEST(DefragThreads, SameDatagramsFromManyThreadsBorrowed) {
  many_threads(policy::linux, false, true);
}
TEST(DefragThreads, SameDatagramsFromManyThreadsBorrowedLast) {
  many_threads(policy::last, false, true);
}

}  // namespace
