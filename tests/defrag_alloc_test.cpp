// SPDX-License-Identifier: MIT
// The defrag engine when memory runs out: a fragment whose allocation fails is as if
// it never came. (A program of its own: it replaces operator new, which clang's TSan
// runtime does not allow; tests/CMakeLists.txt.)
#include "engine.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <random>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "support/alloc_hook.hpp"
#include "support/defrag_packets.hpp"

namespace {

namespace hook = hotpath::test::alloc_hook;
using bytes = std::vector<std::uint8_t>;
using defrag::counter;
using defrag::policy;

bytes random_bytes(std::size_t n, unsigned seed) {
  bytes b(n);
  std::mt19937 rng(seed);
  for (auto& x : b)
    x = static_cast<std::uint8_t>(rng());
  return b;
}

// Runs f on a thread of its own: buffer_pool's cache is per thread, so there every
// buffer the engine takes is a fresh allocation, which the hook can fail.
template <class F>
void on_fresh_thread(F&& f) {
  std::thread(std::forward<F>(f)).join();
}

// An IPv4 packet from 10.77.0.1 to 10.77.0.2, UDP, id 1: payload at `offset`.
bytes v4(std::uint32_t offset, bool mf, std::span<const std::uint8_t> payload) {
  return hotpath::test::defrag_packets::v4_packet({}, offset, mf, {payload.begin(), payload.end()});
}

// A fragment the engine cannot take for want of memory (an allocation throws out of
// input()) is as if it never came, for every policy: its charge given back, the
// datagram's pieces and length as they were. Here a bogus last fragment that would
// have fixed the length (and killed the datagram when the next fragment passed it)
// fails as the ninth piece, when the piece list first needs the heap; the datagram then
// completes without it.
TEST(DefragAlloc, AFragmentNotTakenForWantOfMemoryIsAsIfItNeverCame) {
  const bytes payload = random_bytes(1000, 11);
  const std::span<const std::uint8_t> all(payload);
  std::vector<bytes> small;  // 8 fragments of 64 bytes, more to come
  for (std::uint32_t o = 0; o < 512; o += 64)
    small.push_back(v4(o, true, all.subspan(o, 64)));
  const bytes bogus = v4(512, false, bytes(8, 0xEE));  // a last fragment ending at 520
  const bytes rest = v4(512, false, all.subspan(512));
  const bytes whole = v4(0, false, all);
  for (const policy pol : {policy::linux, policy::first, policy::bsd}) {
    SCOPED_TRACE(static_cast<int>(pol));
    defrag::config c;
    c.pol = pol;
    bool failed = false;
    for (std::int64_t k = 0; !failed && k < 16; ++k) {
      defrag::engine e(c, hotpath::hash_key{1, 2});
      std::vector<bytes> out;
      auto keep = [&](std::span<const std::uint8_t> d) { out.emplace_back(d.begin(), d.end()); };
      for (const bytes& p : small)
        e.input(0, p, keep);
      const std::int64_t before = e.snapshot().memory_bytes;
      const std::uint64_t failures = hook::failures();
      hook::fail_after(k);  // the engine's allocations only: the packets are made
      try {
        e.input(0, bogus, [](std::span<const std::uint8_t>) { ADD_FAILURE(); });
      } catch (const std::bad_alloc&) {
      }
      hook::no_failure();
      failed = hook::failures() != failures;
      if (!failed) continue;  // taken: it needed fewer than k + 1 allocations
      EXPECT_EQ(e.snapshot().memory_bytes, before);
      EXPECT_EQ(e.held_bytes(), before);
      e.input(0, rest, keep);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0], whole);
      EXPECT_EQ(e.snapshot().memory_bytes, 0);
    }
    EXPECT_TRUE(failed) << "no allocation to fail: the test proves nothing";
  }
}

// A new datagram whose first fragment cannot be kept leaves no entry behind, whichever
// of its allocations fails (the table's node, the copy of the packet): nothing
// pending, nothing charged; the same fragment taken later starts the datagram anew.
TEST(DefragAlloc, ANewDatagramWhoseFirstFragmentFailsLeavesNothing) {
  const bytes payload = random_bytes(600, 12);
  const std::span<const std::uint8_t> all(payload);
  const bytes first = v4(0, true, all.first(304));
  const bytes last = v4(304, false, all.subspan(304));
  const bytes whole = v4(0, false, all);
  int thrown = 0;
  for (std::int64_t k = 0; k < 16; ++k) {
    bool failed = false;
    on_fresh_thread([&] {
      defrag::engine e(defrag::config{}, hotpath::hash_key{1, 2});
      std::vector<bytes> out;
      auto keep = [&](std::span<const std::uint8_t> d) { out.emplace_back(d.begin(), d.end()); };
      // The thread's RCU reader slot, taken now (without memory its first read takes a
      // reserve slot: tests/rcu_alloc_test.cpp).
      (void)e.current_config();
      bool threw = false;
      hook::fail_after(k);
      try {
        e.input(0, first, keep);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      hook::no_failure();
      failed = hook::failures() != 0;
      if (!failed) return;
      ASSERT_TRUE(threw) << k;
      ++thrown;
      EXPECT_EQ(e.datagrams_pending(), 0) << k;
      EXPECT_EQ(e.snapshot().memory_bytes, 0) << k;
      EXPECT_EQ(e.held_bytes(), 0) << k;
      e.input(0, last, keep);
      e.input(0, first, keep);
      ASSERT_EQ(out.size(), 1u) << k;
      EXPECT_EQ(out[0], whole) << k;
      EXPECT_EQ(e.snapshot().memory_bytes, 0) << k;
      EXPECT_EQ(e.snapshot()[counter::reasm_oks], 1) << k;
    });
    if (!failed) break;  // taken: it needed fewer than k + 1 allocations
  }
  // The node and the packet's copy at least.
  EXPECT_GE(thrown, 2) << "too few allocations failed: the test proves little";
}

// A datagram complete but not rebuilt for want of memory is lost, counted ReasmFails
// as Linux counts it (ip_frag_reasm), not ReasmOKs: the table holds nothing of it and
// bad_alloc reaches the caller. Borrowed fragments: the rebuilt packet is the only
// allocation of the last fragment.
TEST(DefragAlloc, ADatagramNotRebuiltForWantOfMemoryIsCountedAFailure) {
  const bytes payload = random_bytes(600, 13);
  const std::span<const std::uint8_t> all(payload);
  const bytes first = v4(0, true, all.first(304));
  const bytes last = v4(304, false, all.subspan(304));
  on_fresh_thread([&] {
    defrag::engine e(defrag::config{}, hotpath::hash_key{1, 2});
    e.input_borrowed(0, first, [](std::span<const std::uint8_t>) { ADD_FAILURE(); });
    hook::fail_after(0);
    EXPECT_THROW(e.input_borrowed(0, last, [](std::span<const std::uint8_t>) { ADD_FAILURE(); }),
                 std::bad_alloc);
    hook::no_failure();
    EXPECT_EQ(hook::failures(), 1u);
    const defrag::stats st = e.snapshot();
    EXPECT_EQ(st[counter::reasm_fails], 1);
    EXPECT_EQ(st[counter::reasm_oks], 0);
    EXPECT_EQ(st[counter::datagrams_out], 0);
    EXPECT_EQ(st.memory_bytes, 0);
    EXPECT_EQ(e.datagrams_pending(), 0);
  });
}

}  // namespace
