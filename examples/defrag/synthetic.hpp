// SPDX-License-Identifier: MIT
// In-process traffic for hotpath-defrag: legit fragmented UDP datagrams (IPv4 and IPv6,
// several sizes, a few in flight at once, some in reverse order), optionally mixed with a
// flood of bogus first fragments that never complete, or preceded by the 2021 blackout
// burst (1766 bogus 1480-byte first fragments at once, then the legit datagrams spread
// over the next 25 s of capture time).
//
// Every legit datagram carries a marker, its sequence number and bytes derived from it,
// so that a delivered datagram can be recognised and checked byte for byte
// (legit_sequence()).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "pcap_io.hpp"

namespace defrag::synthetic {

struct options {
  std::uint64_t datagrams = 0;  // legit datagrams; 0: the default for the pattern
  double flood = 0;             // bogus fragments per legit fragment (may be fractional)
  bool blackout = false;        // the 1766-fragment burst first, legit over the next 25 s
  std::uint64_t seed = 1;       // for the bogus keys and the order of fragments
  std::uint32_t mtu = 1500;     // fragments are cut to fit it
  unsigned in_flight = 4;       // legit datagrams whose fragments interleave
  std::int64_t gap_ns = 1000;   // capture time between packets outside the blackout burst
  std::int64_t start_ns = 1'000'000'000;

  // The default legit count: 20000, divided by 1 + flood so that the capture stays near
  // 130k packets (about 200 MB) whatever the flood; 300 for the blackout.
  std::uint64_t legit_count() const {
    if (datagrams != 0) return datagrams;
    if (blackout) return 300;
    return std::max<std::uint64_t>(100, static_cast<std::uint64_t>(20000 / (1 + flood)));
  }
};

struct traffic {
  pcap_io::capture cap;
  std::uint64_t legit_datagrams = 0;
  std::uint64_t legit_fragments = 0;
  std::uint64_t bogus_fragments = 0;
};

inline constexpr std::array<std::uint32_t, 6> legit_sizes = {1800, 2900, 4400, 7000, 12000, 24000};
inline constexpr std::uint32_t blackout_burst = 1766;
inline constexpr std::int64_t blackout_span_ns = 25'000'000'000;
inline constexpr std::uint16_t legit_port = 4739;
inline constexpr std::array<std::uint8_t, 8> legit_marker = {'H', 'P', 'L', 'E', 'G', 'I', 'T', 0};

namespace detail {

// splitmix64: the generator for bogus keys and fragment order (reproducible by seed).
struct rng {
  std::uint64_t s;
  std::uint64_t operator()() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }
};

inline void store16(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
inline void store32(std::uint8_t* p, std::uint32_t v) {
  store16(p, v >> 16);
  store16(p + 2, v & 0xffff);
}

// The payload byte at position i of legit datagram `seq` (after marker and sequence).
inline std::uint8_t pattern(std::uint64_t seq, std::size_t i) {
  return static_cast<std::uint8_t>((seq * 131 + i * 7 + (i >> 8)) & 0xff);
}

struct address {
  bool v6;
  std::array<std::uint8_t, 16> src{}, dst{};
};

// A UDP datagram (header + payload), checksum over the pseudo header included.
inline std::vector<std::uint8_t> udp(const address& a, std::uint16_t sport, std::uint16_t dport,
                                     std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> d(8 + payload.size());
  store16(&d[0], sport);
  store16(&d[2], dport);
  store16(&d[4], static_cast<std::uint32_t>(d.size() & 0xffff));  // 0 for IPv6 jumbo sizes
  std::copy(payload.begin(), payload.end(), d.begin() + 8);
  std::size_t alen = a.v6 ? 16 : 4;
  std::uint32_t acc = checksum_add({a.src.data(), alen});
  acc = checksum_add({a.dst.data(), alen}, acc);
  acc += 17 + static_cast<std::uint32_t>(d.size() & 0xffff) +
         static_cast<std::uint32_t>(d.size() >> 16);
  std::uint16_t c = checksum_fold(checksum_add(d, acc));
  store16(&d[6], c == 0 ? 0xffff : c);
  return d;
}

// One fragment: `part` is [offset, offset + len) of the fragmentable part.
inline void emit_fragment(pcap_io::capture& cap, std::int64_t ts, const address& a,
                          std::uint32_t id, std::span<const std::uint8_t> part,
                          std::uint32_t offset, bool more) {
  std::uint8_t buf[60];
  if (!a.v6) {
    std::memset(buf, 0, 20);
    buf[0] = 0x45;
    store16(buf + 2, static_cast<std::uint32_t>(20 + part.size()));
    store16(buf + 4, id & 0xffff);
    store16(buf + 6, (more ? 0x2000u : 0u) | offset / 8);
    buf[8] = 64;
    buf[9] = 17;
    std::memcpy(buf + 12, a.src.data(), 4);
    std::memcpy(buf + 16, a.dst.data(), 4);
    store16(buf + 10, checksum_fold(checksum_add({buf, 20})));
    std::vector<std::uint8_t> pkt(buf, buf + 20);
    pkt.insert(pkt.end(), part.begin(), part.end());
    cap.add(ts, pkt);
  } else {
    std::memset(buf, 0, 48);
    buf[0] = 0x60;
    store16(buf + 4, static_cast<std::uint32_t>(8 + part.size()));
    buf[6] = 44;  // fragment header
    buf[7] = 64;
    std::memcpy(buf + 8, a.src.data(), 16);
    std::memcpy(buf + 24, a.dst.data(), 16);
    buf[40] = 17;
    store16(buf + 42, offset | (more ? 1u : 0u));  // offset is a multiple of 8
    store32(buf + 44, id);
    std::vector<std::uint8_t> pkt(buf, buf + 48);
    pkt.insert(pkt.end(), part.begin(), part.end());
    cap.add(ts, pkt);
  }
}

// The most fragmentable bytes per fragment at this MTU (a multiple of 8).
inline std::uint32_t fragment_room(bool v6, std::uint32_t mtu) {
  return ((mtu - (v6 ? 48 : 20)) / 8) * 8;
}

}  // namespace detail

// Legit datagram `seq`: its addresses, ports, IP id and UDP payload.
struct legit_datagram {
  detail::address addr;
  std::uint16_t sport;
  std::uint32_t id;
  std::vector<std::uint8_t> payload;
};

inline legit_datagram make_legit(std::uint64_t seq) {
  legit_datagram d;
  d.addr.v6 = seq % 4 == 3;
  std::uint32_t host = static_cast<std::uint32_t>(seq % 4093);  // many sources: RSS spreads them
  if (!d.addr.v6) {
    d.addr.src = {10, 1, static_cast<std::uint8_t>(host >> 8), static_cast<std::uint8_t>(host)};
    d.addr.dst = {10, 2, 0, 1};
  } else {
    d.addr.src = {0xfd,
                  0x00,
                  0,
                  1,
                  0,
                  0,
                  0,
                  0,
                  0,
                  0,
                  0,
                  0,
                  0,
                  0,
                  static_cast<std::uint8_t>(host >> 8),
                  static_cast<std::uint8_t>(host)};
    d.addr.dst = {0xfd, 0x00, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  }
  d.sport = static_cast<std::uint16_t>(20000 + seq % 40000);
  d.id = static_cast<std::uint32_t>(seq / 4093 + 1);  // distinct per source
  d.payload.resize(legit_sizes[seq % legit_sizes.size()]);
  std::copy(legit_marker.begin(), legit_marker.end(), d.payload.begin());
  for (int i = 0; i < 8; ++i)
    d.payload[8 + i] = static_cast<std::uint8_t>(seq >> (56 - 8 * i));
  for (std::size_t i = 16; i < d.payload.size(); ++i)
    d.payload[i] = detail::pattern(seq, i);
  return d;
}

// If `ip` is a whole legit datagram as a host would see it (IPv4 unfragmented, or IPv6
// without a fragment header), byte for byte what make_legit() built: its sequence number.
inline std::optional<std::uint64_t> legit_sequence(std::span<const std::uint8_t> ip) {
  std::size_t hdr;
  if (ip.size() >= 20 && ip[0] == 0x45) {
    if (pcap_io::load_be16(ip.data() + 2) != ip.size() || ip[9] != 17) return std::nullopt;
    if ((pcap_io::load_be16(ip.data() + 6) & 0x3fff) != 0) return std::nullopt;
    if (checksum_fold(checksum_add(ip.first(20))) != 0) return std::nullopt;
    hdr = 20;
  } else if (ip.size() >= 40 && ip[0] >> 4 == 6) {
    if (40u + pcap_io::load_be16(ip.data() + 4) != ip.size() || ip[6] != 17) return std::nullopt;
    hdr = 40;
  } else {
    return std::nullopt;
  }
  auto l4 = ip.subspan(hdr);
  if (l4.size() < 24 || pcap_io::load_be16(l4.data() + 2) != legit_port) return std::nullopt;
  if (!std::equal(legit_marker.begin(), legit_marker.end(), l4.begin() + 8)) return std::nullopt;
  std::uint64_t seq = 0;
  for (int i = 0; i < 8; ++i)
    seq = seq << 8 | l4[16 + i];
  legit_datagram d = make_legit(seq);
  auto expect = detail::udp(d.addr, d.sport, legit_port, d.payload);
  if (!std::equal(l4.begin(), l4.end(), expect.begin(), expect.end())) return std::nullopt;
  std::size_t alen = d.addr.v6 ? 16 : 4;
  std::size_t src_at = d.addr.v6 ? 8 : 12;
  if (!std::equal(d.addr.src.begin(), d.addr.src.begin() + static_cast<std::ptrdiff_t>(alen),
                  ip.begin() + static_cast<std::ptrdiff_t>(src_at)))
    return std::nullopt;
  return seq;
}

namespace detail {

// Addresses for a bogus first fragment from the random word r (and, for IPv6, one more
// from rnd): a source no legit datagram uses, the legit destination.
inline address bogus_address(bool v6, std::uint64_t r, rng& rnd) {
  address a;
  a.v6 = v6;
  if (!v6) {
    a.src = {198, static_cast<std::uint8_t>(18 + (r & 1)), static_cast<std::uint8_t>(r >> 8),
             static_cast<std::uint8_t>(r >> 16)};
    a.dst = {10, 2, 0, 1};
  } else {
    a.src = {0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff};
    std::uint64_t low = rnd();  // the last 8 bytes; the 2 before them from r
    a.src[6] = static_cast<std::uint8_t>(r >> 40);
    a.src[7] = static_cast<std::uint8_t>(r >> 48);
    for (int i = 8; i < 16; ++i)
      a.src[i] = static_cast<std::uint8_t>(low >> (8 * (i - 8)));
    a.dst = {0xfd, 0x00, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  }
  return a;
}

// Legit datagram `seq` cut to fit the MTU: (offset, bytes) per fragment in sending
// order (every fifth datagram in reverse), and how many of them are sent so far.
struct legit_in_flight {
  legit_datagram d;
  std::size_t total;  // bytes of the UDP datagram
  std::vector<std::pair<std::uint32_t, std::vector<std::uint8_t>>> parts;
  std::size_t sent = 0;
};

inline legit_in_flight cut_legit(std::uint64_t seq, std::uint32_t mtu) {
  legit_in_flight f{make_legit(seq), 0, {}};
  auto whole = udp(f.d.addr, f.d.sport, legit_port, f.d.payload);
  f.total = whole.size();
  std::uint32_t room = fragment_room(f.d.addr.v6, mtu);
  for (std::uint32_t off = 0; off < whole.size(); off += room) {
    std::size_t len = std::min<std::size_t>(room, whole.size() - off);
    f.parts.emplace_back(off,
                         std::vector<std::uint8_t>(whole.begin() + off, whole.begin() + off + len));
  }
  if (seq % 5 == 2) std::reverse(f.parts.begin(), f.parts.end());
  return f;
}

// generate()'s steps, writing one capture: its clock, the random keys and the flood
// still owed.
class traffic_writer {
 public:
  explicit traffic_writer(const options& o)
      : o_(o), rnd_{o.seed * 0x2545f4914f6cdd1d + 1}, ts_(o.start_ns) {}

  // A bogus first fragment: a random key that no other packet completes (MF set, and no
  // other fragment of it is ever sent). The UDP header makes its ports visible to RSS.
  void bogus(bool v6, std::uint32_t payload_bytes) {
    std::uint64_t r = rnd_();
    const address a = bogus_address(v6, r, rnd_);
    std::vector<std::uint8_t> part(payload_bytes, 0x5a);
    store16(&part[0], static_cast<std::uint32_t>(1024 + (r >> 24) % 60000));
    store16(&part[2], legit_port);
    store16(&part[4], 0);
    std::uint32_t id = static_cast<std::uint32_t>(r >> 32);
    emit_fragment(t_.cap, ts_, a, v6 ? id : (id & 0xffff), part, 0, true);
    ++t_.bogus_fragments;
  }

  // The blackout burst, "at once": 1766 fragments in 0.18 ms.
  void blackout() {
    for (std::uint32_t i = 0; i < synthetic::blackout_burst; ++i) {
      bogus(false, 1480);
      ts_ += 100;
    }
  }

  // Legit datagrams [first, last): their fragments interleave round robin, each
  // followed by the bogus fragments the flood owes by then.
  void legit_group(std::uint64_t first, std::uint64_t last) {
    std::vector<legit_in_flight> group;
    for (std::uint64_t seq = first; seq < last; ++seq)
      group.push_back(cut_legit(seq, o_.mtu));
    for (bool any = true; any;) {
      any = false;
      for (legit_in_flight& f : group) {
        if (f.sent == f.parts.size()) continue;
        any = true;
        auto& [off, part] = f.parts[f.sent++];
        bool more = off + part.size() < f.total;
        emit_fragment(t_.cap, ts_, f.d.addr, f.d.id, part, off, more);
        ++t_.legit_fragments;
        ts_ += o_.gap_ns;
        flood(f.d.addr.v6);
      }
    }
  }

  void advance(std::int64_t ns) { ts_ += ns; }
  traffic& result() { return t_; }

 private:
  void flood(bool v6) {
    for (flood_debt_ += o_.flood; flood_debt_ >= 1; flood_debt_ -= 1) {
      bogus(v6, fragment_room(v6, o_.mtu));
      ts_ += o_.gap_ns;
    }
  }

  const options& o_;
  traffic t_;
  rng rnd_;
  std::int64_t ts_;
  double flood_debt_ = 0;
};

}  // namespace detail

// Builds the traffic. `progress(done, total)` is called now and then for long runs.
inline traffic generate(const options& o,
                        const std::function<void(std::uint64_t, std::uint64_t)>& progress = {}) {
  detail::traffic_writer w(o);
  const std::uint64_t n = o.legit_count();
  w.result().legit_datagrams = n;
  std::int64_t legit_gap = o.gap_ns;
  if (o.blackout) {
    w.blackout();
    // Each datagram's fragments stay gap_ns apart; datagrams start evenly over 25 s.
    legit_gap = std::max<std::int64_t>(o.gap_ns, blackout_span_ns / static_cast<std::int64_t>(n));
  }
  std::uint64_t next_report = 1;
  for (std::uint64_t first = 0; first < n; first += o.in_flight) {
    const std::uint64_t last = std::min<std::uint64_t>(n, first + o.in_flight);
    w.legit_group(first, last);
    if (o.blackout) w.advance(legit_gap * static_cast<std::int64_t>(last - first));
    if (progress && first >= next_report * 100000) {
      progress(first, n);
      ++next_report;
    }
  }
  return std::move(w.result());
}

}  // namespace defrag::synthetic
