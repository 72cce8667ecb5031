// SPDX-License-Identifier: MIT
// IPv4/IPv6 header parsing for the defragmenter: what a Linux host checks before a
// packet reaches reassembly (ip_rcv, ipv6_rcv, ipv6_frag_rcv), the datagram key, and
// the Internet checksum.
//
// parse() never reads outside the span it is given and never allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace defrag {

inline std::uint16_t load_be16(const std::uint8_t* p) noexcept {
  return static_cast<std::uint16_t>((p[0] << 8) | p[1]);
}
inline std::uint32_t load_be32(const std::uint8_t* p) noexcept {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         p[3];
}
inline void store_be16(std::uint8_t* p, std::uint16_t v) noexcept {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}

// RFC 1071 one's-complement sum of `data` (big-endian 16-bit words), not inverted.
inline std::uint32_t checksum_add(std::span<const std::uint8_t> data, std::uint32_t sum = 0) {
  std::size_t i = 0;
  for (; i + 1 < data.size(); i += 2)
    sum += load_be16(data.data() + i);
  if (i < data.size()) sum += std::uint32_t{data[i]} << 8;
  return sum;
}
inline std::uint16_t checksum_fold(std::uint32_t sum) noexcept {
  while (sum >> 16)
    sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

// Datagram identity: (src, dst, id, protocol) for IPv4, (src, dst, id) for IPv6 (the
// kernel's ipq and frag_v6_compare_key without the interface). One type for both
// families so both share one table and one budget. IPv4 puts its two addresses in
// addr[0..8) and leaves the rest zero, so comparing the whole object is exact and a
// hash of its first hashed_size() bytes is enough.
struct datagram_key {
  std::uint8_t family = 0;    // 4 or 6
  std::uint8_t protocol = 0;  // IPv4 only
  std::uint8_t pad_[2] = {};
  std::uint32_t id = 0;        // IPv4: 16 bits
  std::uint8_t addr[32] = {};  // source then destination

  std::size_t hashed_size() const noexcept { return family == 4 ? 16 : sizeof(*this); }
  friend bool operator==(const datagram_key& a, const datagram_key& b) noexcept {
    return std::memcmp(&a, &b, sizeof a) == 0;
  }
};
static_assert(sizeof(datagram_key) == 40);

enum class parse_status {
  ok,
  malformed,  // the host would drop it before reassembly (bad header, checksum, truncated)
};

// One parsed packet. Offsets are from the start of the IP header.
struct packet_info {
  std::uint8_t family = 0;
  bool fragment = false;          // takes part in reassembly
  bool atomic = false;            // IPv6 fragment header with offset 0 and M = 0 (RFC 6946)
  bool more = false;              // MF / M flag
  bool dont_fragment = false;     // IPv4 DF
  std::uint8_t ecn = 0;           // the two ECN bits of TOS / traffic class
  std::uint32_t offset = 0;       // fragment offset in bytes
  std::uint32_t length = 0;       // IP packet length (total length; 40 + payload length)
  std::uint32_t header_len = 0;   // IPv4: IHL * 4; IPv6: 40 + headers before the fragment header
  std::uint32_t payload_off = 0;  // first byte of the fragment's data
  std::uint32_t prev_nexthdr_off = 0;  // IPv6: the next-header byte naming the fragment header
  std::uint8_t frag_nexthdr = 0;       // IPv6: next header inside the fragment header
  datagram_key key;

  std::uint32_t payload_len() const noexcept { return length - payload_off; }
};

namespace detail {

inline parse_status parse_v4(std::span<const std::uint8_t> ip, packet_info& pi) noexcept {
  // ip_rcv_core: version, IHL >= 5, checksum, total length within the frame.
  if (ip.size() < 20) return parse_status::malformed;
  const std::uint8_t* h = ip.data();
  const std::uint32_t ihl = (h[0] & 0x0fu) * 4;
  if (ihl < 20 || ip.size() < ihl) return parse_status::malformed;
  const std::uint32_t tot = load_be16(h + 2);
  if (tot < ihl || tot > ip.size()) return parse_status::malformed;
  if (checksum_fold(checksum_add(ip.first(ihl))) != 0) return parse_status::malformed;
  const std::uint16_t frag = load_be16(h + 6);
  pi.family = 4;
  pi.length = tot;  // bytes past total length are link padding (pskb_trim_rcsum)
  pi.header_len = ihl;
  pi.payload_off = ihl;
  pi.more = (frag & 0x2000) != 0;
  pi.dont_fragment = (frag & 0x4000) != 0;
  pi.offset = std::uint32_t{frag & 0x1fffu} * 8;
  pi.fragment = pi.more || pi.offset != 0;
  pi.ecn = h[1] & 3;
  pi.key.family = 4;
  pi.key.protocol = h[9];
  pi.key.id = load_be16(h + 4);
  std::memcpy(pi.key.addr, h + 12, 8);
  return parse_status::ok;
}

inline bool is_v6_extension(std::uint8_t nh) noexcept {
  return nh == 0 || nh == 43 || nh == 60 || nh == 51;  // hop-by-hop, routing, dest opts, AH
}
// Length of the extension header at p (which has at least 2 bytes).
inline std::uint32_t v6_extension_len(std::uint8_t nh, const std::uint8_t* p) noexcept {
  return nh == 51 ? (std::uint32_t{p[1]} + 2) * 4 : (std::uint32_t{p[1]} + 1) * 8;
}

// ipv6frag_thdr_truncated(): a first fragment must hold every header up to and
// including the upper-layer header (RFC 8200 4.5), else it is discarded.
inline bool v6_first_fragment_truncated(std::span<const std::uint8_t> ip, std::uint32_t pos,
                                        std::uint8_t nh) noexcept {
  while (is_v6_extension(nh) || nh == 44) {
    if (pos + 8 > ip.size()) return false;  // unparsable: the kernel does not call it truncated
    std::uint32_t len = nh == 44 ? 8 : v6_extension_len(nh, ip.data() + pos);
    nh = ip[pos];
    pos += len;
  }
  if (nh == 59) return false;  // no next header
  std::uint32_t need = nh == 6 ? 20 : (nh == 17 || nh == 58) ? 8 : 1;
  return pos + need > ip.size();
}

inline parse_status parse_v6(std::span<const std::uint8_t> ip, packet_info& pi,
                             std::uint32_t released_at) noexcept {
  if (ip.size() < 40) return parse_status::malformed;
  const std::uint8_t* h = ip.data();
  const std::uint32_t plen = load_be16(h + 4);
  if (plen == 0 || 40 + plen > ip.size()) return parse_status::malformed;  // jumbograms unsupported
  ip = ip.first(40 + plen);
  pi.family = 6;
  pi.length = 40 + plen;
  pi.ecn = (h[1] >> 4) & 3;
  // Walk the headers of the unfragmentable part up to a fragment header.
  std::uint8_t nh = h[6];
  std::uint32_t pos = 40, prev = 6;
  while (is_v6_extension(nh)) {
    // Hop-by-hop options anywhere but first: Linux drops the packet (RFC 8200 4.1).
    // In what a fragment header released, even right after the IPv6 header: Linux
    // parses hop-by-hop in ipv6_rcv only, and has no protocol handler for it after.
    const bool released = released_at != 0 && pos >= released_at;
    if (pos + 8 > ip.size() || (nh == 0 && (pos != 40 || released))) return parse_status::malformed;
    const std::uint32_t len = v6_extension_len(nh, h + pos);
    if (pos + len > ip.size()) return parse_status::malformed;
    prev = pos;
    nh = h[pos];
    pos += len;
  }
  pi.header_len = pos;
  pi.payload_off = pos;
  if (nh != 44) return parse_status::ok;  // not fragmented
  if (pos + 8 > ip.size()) return parse_status::malformed;
  const std::uint16_t off = load_be16(h + pos + 2);
  pi.prev_nexthdr_off = prev;
  pi.frag_nexthdr = h[pos];
  pi.offset = off & 0xfff8u;
  pi.more = (off & 1) != 0;
  pi.payload_off = pos + 8;
  pi.fragment = pi.offset != 0 || pi.more;
  pi.atomic = !pi.fragment;
  // RFC 8200 4.5: a first fragment must hold every header up to the upper-layer one.
  // Not an atomic fragment: ipv6_frag_rcv() lets it through before that check, and the
  // upper layer judges it.
  if (pi.more && pi.offset == 0 && v6_first_fragment_truncated(ip, pos, 44))
    return parse_status::malformed;
  pi.key.family = 6;
  pi.key.id = load_be32(h + pos + 4);
  std::memcpy(pi.key.addr, h + 8, 32);
  return parse_status::ok;
}

}  // namespace detail

// Parses the IP header at the start of `ip` (version from the first nibble).
// released_at: for an IPv6 packet that a fragment header released (a reassembled
// datagram, an atomic fragment without its fragment header), where the released part
// starts (its header length); 0 for a packet as received.
inline parse_status parse(std::span<const std::uint8_t> ip, packet_info& pi,
                          std::uint32_t released_at = 0) noexcept {
  pi = packet_info{};
  if (ip.empty()) return parse_status::malformed;
  switch (ip[0] >> 4) {
    case 4:
      return detail::parse_v4(ip, pi);
    case 6:
      return detail::parse_v6(ip, pi, released_at);
    default:
      return parse_status::malformed;
  }
}

}  // namespace defrag
