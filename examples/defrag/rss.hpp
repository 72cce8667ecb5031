// SPDX-License-Identifier: MIT
// What a NIC with RSS hands the workers: the hashes that pick each packet's worker (by
// 5-tuple where the ports are visible, else by addresses), the steering hash that names a
// fragment's owner, and the receive queues, cut once up front, that each worker reads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "engine.hpp"
#include "pcap_io.hpp"

namespace defrag::driver {

// What the simulated NIC's RSS hashes. `ports`: addresses, protocol and ports where the
// ports are visible, as NICs hash UDP and TCP by default, so a datagram's first fragment
// and the others usually reach different workers. `addresses`: addresses alone, for
// every packet (`ethtool -N <dev> rx-flow-hash udp4 sd`, and so for each flow type;
// DPDK's RTE_ETH_RSS_IP), the set-up DPDK's per-core reassembly requires: every fragment
// of a datagram then reaches the worker that owns it, in capture order, and nothing is
// steered.
enum class rss_mode { ports, addresses };

inline std::string_view name(rss_mode m) {
  return m == rss_mode::ports ? "ports" : "addresses";
}
inline std::optional<rss_mode> parse_rss(std::string_view s) {
  for (rss_mode m : {rss_mode::ports, rss_mode::addresses})
    if (s == name(m)) return m;
  return std::nullopt;
}

namespace detail {
// The addresses of an IPv4 (8 bytes at 12) or IPv6 (32 bytes at 8) header, hashed as the
// engine hashes a key's (defrag::address_hash), so that its queues' shares of buckets
// line up with the workers.
inline std::uint64_t address_hash(std::span<const std::uint8_t> ip, bool v6) {
  return defrag::address_hash(ip.data() + (v6 ? 8 : 12), v6);
}
inline std::uint64_t with_ports(std::uint64_t h, unsigned protocol, const std::uint8_t* ports) {
  std::uint32_t p;
  std::memcpy(&p, ports, 4);
  return defrag::mix64(h ^ (std::uint64_t{p} << 8 | protocol));
}
inline bool is_l4(unsigned p) {
  return p == 6 || p == 17 || p == 132;
}  // TCP, UDP, SCTP
// IPv6: walks the extension headers; returns the offset and type of the header after
// them, stopping at a fragment header that is not the first. `fragment` is set if it
// met any fragment header (first, atomic or not).
inline std::size_t v6_upper(std::span<const std::uint8_t> ip, unsigned& next, bool& fragment) {
  next = ip[6];
  std::size_t at = 40;
  for (int hops = 0; hops < 8 && at + 8 <= ip.size(); ++hops) {
    if (defrag::detail::is_v6_extension(static_cast<std::uint8_t>(next))) {  // packet.hpp's
      const std::uint32_t len =
          defrag::detail::v6_extension_len(static_cast<std::uint8_t>(next), ip.data() + at);
      next = ip[at];
      at += len;
    } else if (next == 44) {
      fragment = true;
      if ((pcap_io::load_be16(ip.data() + at + 2) & 0xfff8) != 0) break;  // not the first
      next = ip[at];
      at += 8;
    } else {
      break;
    }
  }
  return at;
}
}  // namespace detail

// The RSS hash of rss_mode::addresses: the addresses alone, for every packet; for a
// fragment it is the value steer_hash() gives (below), so it picks the owner.
inline std::uint64_t address_rss_hash(std::span<const std::uint8_t> ip) {
  if (ip.size() >= 20 && ip[0] >> 4 == 4) return detail::address_hash(ip, false);
  if (ip.size() >= 40 && ip[0] >> 4 == 6) return detail::address_hash(ip, true);
  return 0;
}

namespace detail {
// rss_hash(), and whether it took the ports in (`l4`).
inline std::uint64_t rss_hash(std::span<const std::uint8_t> ip, bool& l4) {
  const std::uint64_t h = address_rss_hash(ip);
  l4 = true;  // unless it returns below
  if (ip.size() >= 20 && ip[0] >> 4 == 4) {
    std::size_t ihl = std::size_t{ip[0] & 15u} * 4;
    bool first = (pcap_io::load_be16(ip.data() + 6) & 0x1fff) == 0;
    if (first && ihl >= 20 && is_l4(ip[9]) && ip.size() >= ihl + 4)
      return with_ports(h, ip[9], ip.data() + ihl);
  } else if (ip.size() >= 40 && ip[0] >> 4 == 6) {
    unsigned next = 0;
    bool fragment = false;
    const std::size_t at = v6_upper(ip, next, fragment);
    if (is_l4(next) && at + 4 <= ip.size()) return with_ports(h, next, ip.data() + at);
  }
  l4 = false;
  return h;
}
}  // namespace detail

// RSS-like hash of an IP packet: its address_rss_hash(), mixed with the protocol and
// ports when they are visible in this packet (unfragmented, or a first fragment).
inline std::uint64_t rss_hash(std::span<const std::uint8_t> ip) {
  bool l4;
  return detail::rss_hash(ip, l4);
}

// Which of n workers a hash picks (multiply and shift: a division costs tens of cycles).
inline std::size_t pick(std::uint64_t h, std::size_t n) {
  return pick_queue(h, n);
}

// Steering hash of a fragment: the RSS hash of its addresses alone, as the kernel's
// RPS hashes fragments (no ports, which only the first fragment carries). Every
// fragment of a datagram gets the same value, and it is the one RSS gave the
// fragments without ports: those are already on their owner, and only the first
// fragment, which RSS spread by its ports, is handed over. nullopt for anything else
// (unfragmented, or too short to tell), which stays where RSS put it. No validation:
// the engine parses what it is handed. (Not keyed, as RSS's Toeplitz key usually is not
// secret either: traffic between few hosts, or an attacker, can load one worker with
// all of it, which then does all the work, never wrong work.)
inline std::optional<std::uint64_t> steer_hash(std::span<const std::uint8_t> ip) {
  if (ip.size() >= 20 && ip[0] >> 4 == 4) {
    if ((pcap_io::load_be16(ip.data() + 6) & 0x3fff) == 0) return std::nullopt;  // MF, offset
    return address_rss_hash(ip);
  }
  if (ip.size() >= 40 && ip[0] >> 4 == 6) {
    unsigned next = 0;
    bool fragment = false;
    detail::v6_upper(ip, next, fragment);
    if (fragment) return address_rss_hash(ip);
  }
  return std::nullopt;
}

namespace detail {
// spread(), and in `l4` (unless null), beside each list, whether RSS took each packet's
// ports in (rx_queues::l4).
inline std::vector<std::vector<std::uint32_t>> spread(const pcap_io::capture& c, unsigned workers,
                                                      rss_mode mode,
                                                      std::vector<std::vector<std::uint8_t>>* l4) {
  std::vector<std::vector<std::uint32_t>> lists(workers);
  if (l4) l4->assign(workers, {});
  for (std::size_t i = 0; i < c.packets.size(); ++i) {
    const auto ip = c.ip(c.packets[i]);
    bool ports = false;
    const std::uint64_t h = mode == rss_mode::ports ? rss_hash(ip, ports) : address_rss_hash(ip);
    const std::size_t w = pick(h, workers);
    lists[w].push_back(static_cast<std::uint32_t>(i));
    if (l4) (*l4)[w].push_back(ports);
  }
  return lists;
}
}  // namespace detail

// Which packets each of `workers` workers receives, in capture order.
inline std::vector<std::vector<std::uint32_t>> spread(const pcap_io::capture& c, unsigned workers,
                                                      rss_mode mode = rss_mode::ports) {
  return detail::spread(c, workers, mode, nullptr);
}

// What RSS hands the workers: each one's packets (capture indices, in capture order),
// in a receive queue of its own. A NIC writes each queue's packets into buffers of that
// queue's ring, next to one another, and the core that serves the queue reads them there;
// so does each worker here (its packets copied once, back to back, before any pass).
// Reading its share out of the one capture instead, each worker would stream the
// whole capture through its cache to use a part of it, and two workers gained far less
// over one (docs/defrag.md). The engines borrow the packets where they lie, so the
// queues outlive them.
struct rx_queues {
  std::vector<std::vector<std::uint32_t>> lists;  // per worker
  std::vector<std::vector<std::uint8_t>> memory;  // per worker
  std::vector<const std::uint8_t*> at;            // per capture index: its bytes, in memory
  // Per worker, beside `lists`: 1 where RSS hashed the packet with its ports, as a NIC
  // says in its descriptor (Linux: skb->l4_hash). The others were hashed by their
  // addresses, as steering hashes a fragment, so steering knows their owner (the
  // worker that received them) without reading their headers.
  std::vector<std::vector<std::uint8_t>> l4;

  rx_queues() = default;
  rx_queues(rx_queues&&) = default;
  rx_queues& operator=(rx_queues&&) = default;
  rx_queues(const rx_queues&) = delete;  // a copy's `at` would point into this one
  rx_queues& operator=(const rx_queues&) = delete;

  std::span<const std::uint8_t> ip(const pcap_io::capture& c, std::uint32_t i) const {
    return {at[i], c.packets[i].length};
  }
};

// The queues of each worker count in `counts`, one rx_queues each. They are written
// together, packet by packet in capture order, so that the counts' packets lie in memory
// allocated alike (a large reservation is mapped, and its pages are allocated as they
// are first touched): the speed of a pass over fresh memory can depend on where that
// memory came from, and worker counts compared with --paired-with must not differ by
// it (git log of docs/defrag.md). One worker reads a queue too, not the capture, for that reason.
inline std::vector<rx_queues> receive(const pcap_io::capture& c, std::span<const unsigned> counts,
                                      rss_mode mode = rss_mode::ports) {
  std::vector<rx_queues> qs(counts.size());
  std::vector<std::vector<std::uint32_t>> worker(counts.size());  // per count, per packet
  for (std::size_t k = 0; k < counts.size(); ++k) {
    rx_queues& q = qs[k];
    q.lists = detail::spread(c, std::max(1u, counts[k]), mode, &q.l4);
    q.at.resize(c.packets.size());
    q.memory.resize(q.lists.size());
    worker[k].resize(c.packets.size());
    for (std::size_t w = 0; w < q.lists.size(); ++w) {
      std::size_t total = 0;
      for (std::uint32_t i : q.lists[w]) {
        total += c.packets[i].length;
        worker[k][i] = static_cast<std::uint32_t>(w);
      }
      // Reserved, not written: written below. (At least a byte: a worker given only
      // empty packets still has an address to prefetch from.)
      q.memory[w].reserve(std::max<std::size_t>(total, 1));
    }
  }
  for (std::size_t i = 0; i < c.packets.size(); ++i) {
    const auto ip = c.ip(c.packets[i]);
    for (std::size_t k = 0; k < counts.size(); ++k) {
      std::vector<std::uint8_t>& m = qs[k].memory[worker[k][i]];
      m.insert(m.end(), ip.begin(), ip.end());  // within the reservation: nothing moves
      qs[k].at[i] = m.data() + (m.size() - ip.size());
    }
  }
  return qs;
}

}  // namespace defrag::driver
