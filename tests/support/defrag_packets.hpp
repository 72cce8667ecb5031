// SPDX-License-Identifier: MIT
// IPv4 packets for the defrag example's tests (defrag_engine_test, defrag_alloc_test).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "packet.hpp"  // examples/defrag

namespace hotpath::test::defrag_packets {

using bytes = std::vector<std::uint8_t>;

struct v4_spec {
  std::uint32_t src = 0x0a4d0001, dst = 0x0a4d0002;
  std::uint16_t id = 1;
  std::uint8_t proto = 17, tos = 0, ttl = 64;
  bool df = false;
  bytes options;  // a multiple of 4 bytes
};

bytes v4_packet(const v4_spec& s, std::uint32_t offset, bool mf, const bytes& payload) {
  const std::size_t ihl = 20 + s.options.size();
  bytes p(ihl + payload.size());
  p[0] = static_cast<std::uint8_t>(0x40 | (ihl / 4));
  p[1] = s.tos;
  defrag::store_be16(&p[2], static_cast<std::uint16_t>(p.size()));
  defrag::store_be16(&p[4], s.id);
  defrag::store_be16(
      &p[6], static_cast<std::uint16_t>((s.df ? 0x4000 : 0) | (mf ? 0x2000 : 0) | (offset / 8)));
  p[8] = s.ttl;
  p[9] = s.proto;
  for (int i = 0; i < 4; ++i) {
    p[12 + i] = static_cast<std::uint8_t>(s.src >> (24 - 8 * i));
    p[16 + i] = static_cast<std::uint8_t>(s.dst >> (24 - 8 * i));
  }
  std::copy(s.options.begin(), s.options.end(), p.begin() + 20);
  defrag::store_be16(&p[10], defrag::checksum_fold(defrag::checksum_add({p.data(), ihl})));
  std::copy(payload.begin(), payload.end(), p.begin() + static_cast<std::ptrdiff_t>(ihl));
  return p;
}

}  // namespace hotpath::test::defrag_packets
