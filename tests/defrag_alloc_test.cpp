// SPDX-License-Identifier: MIT
// The defrag engine when memory runs out: a fragment whose allocation fails is as if
// it never came. (A program of its own: it replaces operator new, which clang's TSan
// runtime does not allow; tests/CMakeLists.txt.)
#include "engine.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <new>
#include <random>
#include <span>
#include <vector>

#include "support/alloc_hook.hpp"
#include "support/defrag_packets.hpp"

namespace {

namespace hook = hotpath::test::alloc_hook;
using bytes = std::vector<std::uint8_t>;
using defrag::policy;

// An IPv4 packet from 10.77.0.1 to 10.77.0.2, UDP, id 1: payload at `offset`.
bytes v4(std::uint32_t offset, bool mf, std::span<const std::uint8_t> payload) {
  return hotpath::test::defrag_packets::v4_packet({}, offset, mf, {payload.begin(), payload.end()});
}

// A fragment the engine cannot take for want of memory (an allocation throws out of
// input()) is as if it never came, for every policy: its charge given back, the
// datagram's pieces and length as they were. Here a bogus last fragment that would
// have fixed the length (and killed the datagram when the next fragment passed it)
// fails as the ninth piece, when the piece list first needs the heap; the datagram then
// completes without it. (A new datagram's first fragment needs only buffer_pool's
// malloc, which the hook does not see: the engine's erasing of an entry left empty is
// not reached here.)
TEST(DefragAlloc, AFragmentNotTakenForWantOfMemoryIsAsIfItNeverCame) {
  bytes payload(1000);
  std::mt19937 rng(11);
  for (auto& x : payload)
    x = static_cast<std::uint8_t>(rng());
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

}  // namespace
