// SPDX-License-Identifier: MIT
// libFuzzer target: the link-layer stripping of hotpath-defrag, the packet parser and the
// reassembly engine, on fuzzer-chosen packet sequences (tests/fuzz/run.sh runs it).
//
// Input: one byte of setup (policy, link type, budget, input() or input_borrowed()), then records
// of [length: 2 bytes, big endian][time step: 1 byte][frame: length bytes]. A small table and
// budget make eviction and the budget limits easy to reach.
//
// Checked besides the sanitizers: every delivered packet is a whole IP packet that a
// second engine passes through unchanged; every packet is counted; memory never
// exceeds the budget; once everything has expired, no memory is left charged.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "engine.hpp"
#include "pcap_io.hpp"

namespace {

constexpr int link_types[] = {DLT_RAW,  DLT_EN10MB, DLT_LINUX_SLL, DLT_LINUX_SLL2,
                              DLT_NULL, DLT_LOOP,   DLT_IPV4,      DLT_IPV6};

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "defrag_fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t setup = data[0];
  defrag::config cfg;
  cfg.pol = static_cast<defrag::policy>(setup & 7);
  cfg.buckets = 16;
  cfg.budget_bytes = (setup & 0x40) ? 64 << 10 : 1 << 20;
  cfg.timeout_v4_ns = 30'000'000'000;
  cfg.timeout_v6_ns = 60'000'000'000;
  const int dlt = link_types[(setup >> 3) & 7];
  const bool borrowed = (setup & 0x80) != 0;  // input_borrowed(): pointers into `data`
  defrag::engine eng(cfg);
  defrag::engine again(cfg);  // delivered packets must pass through it unchanged

  std::int64_t now = 1'000'000'000, inputs = 0, delivered = 0;
  std::size_t at = 1;
  while (at + 3 <= size) {
    std::size_t len = std::size_t{data[at]} << 8 | data[at + 1];
    now += std::int64_t{data[at + 2]} * 100'000'000;  // up to 25.5 s a step
    at += 3;
    len = std::min(len, size - at);
    std::span<const std::uint8_t> frame(data + at, len);
    at += len;
    std::span<const std::uint8_t> ip;
    if (defrag::pcap_io::strip_link_layer(dlt, frame, ip) != defrag::pcap_io::link_verdict::ip)
      continue;
    check(ip.data() >= frame.data() && ip.data() + ip.size() <= frame.data() + frame.size(),
          "the IP packet lies inside its frame");
    ++inputs;
    // eng hands out datagram_views (no copy), again contiguous packets: both paths.
    auto out = [&](const defrag::datagram_view& pkt) {
      ++delivered;
      check(pkt.size() != 0 && pkt.size() <= 65535 + 40, "a delivered packet has a sane length");
      // Copy: the view points into the engine's fragments only during out().
      std::vector<std::uint8_t> copy(pkt.size());
      pkt.copy_to(copy.data());
      int passed = 0;
      again.input(now, copy, [&](std::span<const std::uint8_t> same) {
        ++passed;
        check(same.size() == copy.size() && std::memcmp(same.data(), copy.data(), same.size()) == 0,
              "a delivered packet passes through a second engine unchanged");
      });
      check(passed == 1, "a delivered packet is a whole, well-formed IP packet");
    };
    if (borrowed)
      eng.input_borrowed(now, ip, out);  // `data` outlives eng
    else
      eng.input(now, ip, out);
    if ((inputs & 7) == 0) eng.expire(now, 4);
  }
  defrag::stats s = eng.snapshot();
  check(s[defrag::counter::packets_in] == inputs, "every packet is counted");
  check(s[defrag::counter::datagrams_out] == delivered, "every delivery is counted");
  const std::int64_t held = eng.held_bytes();  // summed datagram by datagram
  check(held == s.memory_bytes, "no byte of the budget is made or lost");
  check(held <= cfg.budget_bytes, "memory stays within the budget");
  eng.expire(now + 61'000'000'000, cfg.buckets);
  check(eng.snapshot().memory_bytes == 0, "nothing is left charged once everything expired");
  return 0;
}
