// SPDX-License-Identifier: MIT
// Reassembly (reassembly.hpp): clean traffic under every policy, IPv4 and IPv6; the
// linux policy's overlap, duplicate, length and limit cases; Novak/Sturges for every
// target-based policy; a policy changed on a live engine.
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

// ---------------------------------------------------------------- clean traffic, every policy

class DefragEveryPolicy : public ::testing::TestWithParam<std::tuple<policy, int>> {
 protected:
  policy pol() const { return std::get<0>(GetParam()); }
  family f() const { return fam(std::get<1>(GetParam())); }
};

TEST_P(DefragEveryPolicy, InOrderReversedShuffledDuplicated) {
  std::mt19937 rng(7);
  for (std::size_t size : {200u, 1500u, 2900u, 9000u, 30000u, 65000u}) {
    const bytes payload = pattern(size, static_cast<std::uint32_t>(size));
    auto fs = cut(payload, f().v == 4 ? 1480 : 1352);
    std::vector<std::vector<frag>> orders;
    orders.push_back(fs);
    orders.emplace_back(fs.rbegin(), fs.rend());
    auto sh = fs;
    std::shuffle(sh.begin(), sh.end(), rng);
    orders.push_back(sh);
    auto dup = fs;  // every fragment twice, the copies interleaved
    dup.insert(dup.begin() + 1, fs.begin(), fs.end() - 1);
    orders.push_back(dup);
    for (const auto& order : orders) {
      harness h(with_policy(pol()));
      h.feed(f(), order);
      ASSERT_EQ(h.out.size(), 1u) << size << " order " << (&order - orders.data());
      EXPECT_EQ(h.out[0], f().whole(payload)) << size;
      // One fragment with M = 0 at offset 0 is no fragment in IPv4 (atomic in IPv6).
      EXPECT_EQ(h[counter::reasm_oks], fs.size() > 1 || f().v == 6 ? 1 : 0);
      EXPECT_EQ(h[counter::datagrams_out], 1);
      EXPECT_EQ(h[counter::reasm_fails], 0);
      EXPECT_EQ(h.e.datagrams_pending(), 0);
      // Nothing stays charged once the datagram went out.
      EXPECT_EQ(h.e.snapshot().memory_bytes, 0);
    }
  }
}

TEST_P(DefragEveryPolicy, MissingFragmentDeliversNothingAndTimesOut) {
  const bytes payload = pattern(6000, 9);
  auto fs = cut(payload, 1480);
  fs.erase(fs.begin() + 2);
  harness h(with_policy(pol()));
  h.feed(f(), fs, 1 * sec);
  EXPECT_TRUE(h.out.empty());
  EXPECT_EQ(h.e.datagrams_pending(), 1);
  EXPECT_GT(h.e.snapshot().memory_bytes, 0);
  const std::int64_t timeout = f().v == 4 ? 30 * sec : 60 * sec;
  EXPECT_EQ(h.expire(1 * sec + timeout - 1, 1 << 20), 0u);
  EXPECT_EQ(h.expire(1 * sec + timeout, 1 << 20), 1u);
  EXPECT_EQ(h[counter::reasm_timeout], 1);
  EXPECT_EQ(h[counter::reasm_fails], 1);
  EXPECT_EQ(h.e.snapshot().memory_bytes, 0);
}

TEST_P(DefragEveryPolicy, InterleavedDatagramsSharingNothingButAddresses) {
  std::mt19937 rng(11);
  std::vector<bytes> payloads;
  std::vector<std::pair<family, frag>> all;
  for (std::uint32_t i = 0; i < 20; ++i) {
    family g = f();
    g.set_id(100 + i);
    payloads.push_back(pattern(3000 + 100 * i, i));
    for (auto& x : cut(payloads.back(), 1480))
      all.emplace_back(g, x);
  }
  std::shuffle(all.begin(), all.end(), rng);
  harness h(with_policy(pol()));
  for (auto& [g, x] : all)
    h.feed(g.fragment(x));
  ASSERT_EQ(h.out.size(), 20u);
  std::vector<bytes> want;
  for (std::uint32_t i = 0; i < 20; ++i) {
    family g = f();
    g.set_id(100 + i);
    want.push_back(g.whole(payloads[i]));
  }
  std::sort(want.begin(), want.end());
  std::sort(h.out.begin(), h.out.end());
  EXPECT_EQ(h.out, want);
}

INSTANTIATE_TEST_SUITE_P(All, DefragEveryPolicy,
                         ::testing::Combine(::testing::ValuesIn(all_policies),
                                            ::testing::Values(4, 6)),
                         [](const auto& i) {
                           std::string n(defrag::name(std::get<0>(i.param)));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n + "_v" + std::to_string(std::get<1>(i.param));
                         });

// ---------------------------------------------------------------- the linux policy

class DefragLinux : public ::testing::TestWithParam<int> {
 protected:
  family f() const { return fam(GetParam()); }
};

TEST_P(DefragLinux, PartialOverlapKillsTheDatagram) {
  const bytes payload = pattern(4000, 21);
  auto fs = cut(payload, 1480);
  harness h;
  h.feed(f(), {fs[0]});
  // 1480 bytes at 1416: partly over the first fragment (RFC 5722).
  h.feed(f().fragment({1416, true, pattern(1480, 22)}));
  EXPECT_EQ(h[counter::reasm_overlaps], 1);
  EXPECT_EQ(h[counter::reasm_fails], 1);
  EXPECT_EQ(h.e.datagrams_pending(), 0);
  EXPECT_EQ(h.e.snapshot().memory_bytes, 0);
  // The rest arrives: a fresh datagram that never completes.
  h.feed(f(), {fs[1], fs[2]});
  EXPECT_TRUE(h.out.empty());
  EXPECT_EQ(h.e.datagrams_pending(), 1);
}

TEST_P(DefragLinux, OverlapOfTheTailKillsAndOverlapBeforeTheHeadKills) {
  const bytes payload = pattern(4000, 23);
  auto fs = cut(payload, 1480);
  {
    harness h;  // in order, then a fragment reaching past the tail that starts inside it
    h.feed(f(), {fs[0], fs[1]});
    h.feed(f().fragment({2952, false, pattern(1048, 24)}));
    EXPECT_EQ(h[counter::reasm_overlaps], 1);
  }
  {
    harness h;  // reversed, then a fragment covering two separately received runs
    h.feed(f(), {fs[2], fs[1]});
    h.feed(f().fragment({1480, true, bytes(fs[1].data.begin(), fs[1].data.end())}));  // a dup
    EXPECT_EQ(h[counter::duplicates], 1);
    h.feed(f().fragment({2000, true, pattern(1480, 25)}));  // spans fs[1] and fs[2]
    EXPECT_EQ(h[counter::reasm_overlaps], 1);
    EXPECT_EQ(h.e.datagrams_pending(), 0);
  }
}

TEST_P(DefragLinux, FragmentWhollyInsideReceivedDataIsADuplicate) {
  // The "tear" case: 24 bytes at 24, inside the first fragment, with other bytes.
  const bytes payload = pattern(2000, 26);
  auto fs = cut(payload, 1480);
  harness h;
  h.feed(f(), {fs[0]});
  h.feed(f().fragment({24, true, pattern(24, 27)}));
  h.feed(f(), {fs[1]});
  ASSERT_EQ(h.out.size(), 1u);
  EXPECT_EQ(h.out[0], f().whole(payload));  // the first fragment's bytes kept
  EXPECT_EQ(h[counter::duplicates], 1);
  EXPECT_EQ(h[counter::reasm_overlaps], 0);
}

TEST_P(DefragLinux, InsideOneRunIsADuplicateAcrossTwoRunsAnOverlap) {
  // Linux compares with runs: fragments appended in order form one run, others not.
  const bytes payload = pattern(3000, 28);
  auto fs = cut(payload, 1000);
  const frag across{800, true, bytes(payload.begin() + 800, payload.begin() + 1200)};
  {
    harness h;
    h.feed(f(), {fs[0], fs[1]});  // one run [0, 2000)
    h.feed(f().fragment(across));
    EXPECT_EQ(h[counter::duplicates], 1);
    h.feed(f(), {fs[2]});
    ASSERT_EQ(h.out.size(), 1u);
    EXPECT_EQ(h.out[0], f().whole(payload));
  }
  {
    harness h;
    h.feed(f(), {fs[1], fs[0]});  // two runs [1000, 2000) and [0, 1000)
    h.feed(f().fragment(across));
    EXPECT_EQ(h[counter::reasm_overlaps], 1);
    h.feed(f(), {fs[2]});
    EXPECT_TRUE(h.out.empty());
  }
}

TEST_P(DefragLinux, LastFragmentsThatDisagreeKill) {
  const bytes payload = pattern(3000, 29);
  auto fs = cut(payload, 1480);
  {
    harness h;  // two different ends
    h.feed(f(), {fs[2]});
    h.feed(f().fragment({2960, false, pattern(48, 30)}));
    EXPECT_EQ(h[counter::reasm_fails], 1);
  }
  {
    harness h;  // data beyond the end
    h.feed(f(), {fs[2]});
    h.feed(f().fragment({2960, true, pattern(1480, 31)}));
    EXPECT_EQ(h[counter::reasm_fails], 1);
  }
  {
    harness h;  // a last fragment ending before data already received
    h.feed(f(), {fs[1]});
    h.feed(f().fragment({8, false, pattern(800, 32)}));
    EXPECT_EQ(h[counter::reasm_fails], 1);
    EXPECT_EQ(h.e.datagrams_pending(), 0);
  }
}

TEST_P(DefragLinux, TooLong) {
  // Fragments reaching past 65535 (ping of death).
  std::vector<frag> fs = cut(pattern(66600, 33), 1480);
  harness h;
  h.feed(f(), fs);
  EXPECT_TRUE(h.out.empty());
  EXPECT_EQ(h[counter::too_long], 1);
  if (GetParam() == 4) {
    // IPv4: Linux finds it at reassembly (ip_frag_reasm) and drops the datagram.
    EXPECT_EQ(h[counter::reasm_fails], 1);
    EXPECT_EQ(h.e.datagrams_pending(), 0);
  } else {
    // IPv6: the fragment whose end passes 65535 is dropped alone (ip6_frag_queue).
    EXPECT_EQ(h[counter::reasm_fails], 0);
    EXPECT_EQ(h.e.datagrams_pending(), 1);
  }
  // The largest datagram that fits goes through.
  const std::size_t max_payload = GetParam() == 4 ? 65535 - 20 : 65535;
  const bytes big = pattern(max_payload, 34);
  harness ok;
  ok.feed(f(), cut(big, 1480));
  ASSERT_EQ(ok.out.size(), 1u);
  EXPECT_EQ(ok.out[0], f().whole(big));
}

TEST_P(DefragLinux, OddLengthNonLastFragment) {
  const bytes payload = pattern(3000, 35);
  if (GetParam() == 6) {
    // IPv6: dropped (RFC 8200), the datagram lives and completes with a good one.
    harness h;
    auto fs = cut(payload, 1480);
    h.feed(f().fragment({0, true, bytes(payload.begin(), payload.begin() + 1477)}));
    EXPECT_EQ(h[counter::odd_length], 1);
    h.feed(f(), fs);
    ASSERT_EQ(h.out.size(), 1u);
    EXPECT_EQ(h.out[0], f().whole(payload));
  } else {
    // IPv4: Linux rounds the end down to 8 (ip_frag_queue). Next fragment at 1480:
    // a hole, nothing delivered; next at 1472: delivered with the next one's bytes.
    harness hole;
    auto fs = cut(payload, 1480);
    hole.feed(f().fragment({0, true, bytes(payload.begin(), payload.begin() + 1477)}));
    hole.feed(f(), {fs[1], fs[2]});
    EXPECT_TRUE(hole.out.empty());
    EXPECT_EQ(hole[counter::odd_length], 1);
    harness trimmed;
    bytes first(payload.begin(), payload.begin() + 1477);
    first[1475] ^= 0xff;  // bytes past 1472 are cut off, so these never show
    trimmed.feed(f().fragment({0, true, first}));
    trimmed.feed(f().fragment({1472, false, bytes(payload.begin() + 1472, payload.end())}));
    ASSERT_EQ(trimmed.out.size(), 1u);
    EXPECT_EQ(trimmed.out[0], f().whole(payload));
  }
  // A zero-length fragment after rounding kills the datagram (end == offset).
  harness zero;
  zero.feed(f().fragment({0, true, pattern(1480, 36)}));
  zero.feed(f().fragment({1480, true, bytes{}}));
  EXPECT_EQ(zero[counter::reasm_fails], 1);
}

TEST_P(DefragLinux, SameIdDifferentKeysAreDifferentDatagrams) {
  const bytes a = pattern(3000, 37), b = pattern(3000, 38);
  family fa = f(), fb = f();
  fb.s4.src ^= 1;
  fb.s6.src[15] ^= 1;
  harness h;
  auto ca = cut(a, 1480), cb = cut(b, 1480);
  for (std::size_t i = 0; i < ca.size(); ++i) {
    h.feed(fa.fragment(ca[i]));
    h.feed(fb.fragment(cb[i]));
  }
  ASSERT_EQ(h.out.size(), 2u);
  EXPECT_EQ(h.out[0], fa.whole(a));
  EXPECT_EQ(h.out[1], fb.whole(b));
  if (GetParam() == 4) {  // IPv4 keys include the protocol
    family fc = f();
    fc.s4.proto = 6;
    harness p;
    p.feed(fa.fragment(ca[0]));
    p.feed(fc.fragment(ca[1]));
    p.feed(fa.fragment(ca[2]));
    EXPECT_TRUE(p.out.empty());
    EXPECT_EQ(p.e.datagrams_pending(), 2);
  }
}

TEST_P(DefragLinux, SixtyFourFragmentsAndTheLimit) {
  const bytes payload = pattern(64 * 8 * 10, 39);
  defrag::config c64;
  c64.max_fragments = 64;
  harness h(c64);
  auto fs = cut(payload, 80);  // 64 fragments
  ASSERT_EQ(fs.size(), 64u);
  std::reverse(fs.begin(), fs.end());
  h.feed(f(), fs);
  ASSERT_EQ(h.out.size(), 1u);
  EXPECT_EQ(h.out[0], f().whole(payload));
  harness over(c64);
  auto more = cut(pattern(65 * 80, 40), 80);  // 65 fragments
  over.feed(f(), more);
  EXPECT_TRUE(over.out.empty());
  EXPECT_EQ(over[counter::too_many_fragments], 1);
  defrag::config c;
  c.max_fragments = 200;
  harness raised(c);
  raised.feed(f(), more);
  EXPECT_EQ(raised.out.size(), 1u);
  // The default, like Linux, has no practical limit: the largest datagram in 8-byte
  // fragments (the memory budget bounds what a flood can queue).
  harness dflt;
  const bytes big = pattern(1000 * 8, 41);
  auto tiny = cut(big, 8);  // 1000 fragments
  std::reverse(tiny.begin(), tiny.end());
  dflt.feed(f(), tiny);
  ASSERT_EQ(dflt.out.size(), 1u);
  EXPECT_EQ(dflt.out[0], f().whole(big));
}

INSTANTIATE_TEST_SUITE_P(Family, DefragLinux, ::testing::Values(4, 6),
                         [](const auto& i) { return "v" + std::to_string(i.param); });

// ---------------------------------------------------------------- Novak/Sturges

// The overlap pattern of Novak & Sturges, "Target-Based Fragmentation Reassembly"
// (2005), as Snort's and Suricata's tests use it. In 8-byte units: originals
// A[0,3) B[4,6) C[6,9) D[10,11) E[13,15) F[15,18) G[18,20) H[20,22) I[22,23); then
// J[1,5) K[6,9) L[9,12) M[12,15) N[16,17) O[19,20) P[20,21); last Q[22,24) (M = 0).
struct piece {
  char c;
  std::uint32_t unit, units;
};
const piece novak[] = {{'A', 0, 3},  {'B', 4, 2},  {'C', 6, 3},  {'D', 10, 1}, {'E', 13, 2},
                       {'F', 15, 3}, {'G', 18, 2}, {'H', 20, 2}, {'I', 22, 1}, {'J', 1, 4},
                       {'K', 6, 3},  {'L', 9, 3},  {'M', 12, 3}, {'N', 16, 1}, {'O', 19, 1},
                       {'P', 20, 1}, {'Q', 22, 2}};

// One letter per 8-byte unit of the datagram each policy delivers. Derived by hand
// from each policy's rule (reassembly.hpp), and equal to the published results for
// first, last, bsd, linux (our linux-legacy), windows and solaris.
const std::pair<policy, const char*> novak_expected[] = {
    {policy::first, "AAAJBBCCCLDLMEEFFFGGHHIQ"},
    {policy::last, "AJJJJBKKKLLLMMMFNFGOPHQQ"},
    {policy::bsd, "AAAJJBCCCLLLMMMFFFGGHHIQ"},
    {policy::bsd_right, "AJJJBBKKKLLLMMMFFFGGHHQQ"},
    {policy::linux_legacy, "AAAJJBKKKLLLMMMFFFGGPHQQ"},
    {policy::windows, "AAAJBBCCCLLLMEEFFFGGHHIQ"},
    {policy::solaris, "AAAJBBCCCLLLMMMFFFGGHHIQ"},
};

std::vector<frag> novak_fragments() {
  std::vector<frag> v;
  for (const piece& p : novak)
    v.push_back({p.unit * 8, p.c != 'Q', bytes(p.units * 8, static_cast<std::uint8_t>(p.c))});
  return v;
}

class DefragNovak : public ::testing::TestWithParam<int> {};

TEST_P(DefragNovak, EveryTargetBasedPolicy) {
  const family f = fam(GetParam());
  for (const auto& [pol, units] : novak_expected) {
    harness h(with_policy(pol));
    h.feed(f, novak_fragments());
    ASSERT_EQ(h.out.size(), 1u) << defrag::name(pol);
    bytes want;
    for (const char* u = units; *u; ++u)
      want.insert(want.end(), 8, static_cast<std::uint8_t>(*u));
    EXPECT_EQ(h.out[0], f.whole(want)) << defrag::name(pol) << ": want " << units;
    EXPECT_GT(h[counter::reasm_overlaps], 0);
    EXPECT_EQ(h.e.snapshot().memory_bytes, 0);
  }
}

TEST_P(DefragNovak, LinuxDropsTheWholeDatagram) {
  const family f = fam(GetParam());
  harness h;
  h.feed(f, novak_fragments());
  EXPECT_TRUE(h.out.empty());
  // J partly overlaps A: the datagram dies. K..Q then start a new one, which has no
  // overlap of its own but misses A..I's bytes, so it waits for its timeout.
  EXPECT_EQ(h[counter::reasm_overlaps], 1);
  EXPECT_EQ(h[counter::reasm_fails], 1);
  EXPECT_EQ(h[counter::reasm_oks], 0);
  EXPECT_EQ(h.e.datagrams_pending(), 1);
}

INSTANTIATE_TEST_SUITE_P(Family, DefragNovak, ::testing::Values(4, 6),
                         [](const auto& i) { return "v" + std::to_string(i.param); });

TEST(DefragPolicies, ReconfigureChangesThePolicyOfTheNextFragment) {
  const family f = fam(4);
  const bytes payload = pattern(2000, 45);
  auto fs = cut(payload, 1480);
  harness h;
  h.feed(f, {fs[0]});
  defrag::config c = h.e.initial_config();
  c.pol = policy::last;
  h.reconfigure(c);
  EXPECT_EQ(h.e.current_config().pol, policy::last);
  EXPECT_EQ(h.e.initial_config().pol, policy::linux);
  // A partial overlap that linux would reject: under last, the new bytes win.
  bytes over = pattern(1480, 46);
  h.feed(f.fragment({1416, true, over}));
  h.feed(f.fragment({2896, false, bytes(payload.begin(), payload.begin() + 8)}));
  ASSERT_EQ(h.out.size(), 1u);
  bytes want(payload.begin(), payload.begin() + 1416);
  want.insert(want.end(), over.begin(), over.end());
  want.insert(want.end(), payload.begin(), payload.begin() + 8);
  EXPECT_EQ(h.out[0], f.whole(want));
}

}  // namespace
