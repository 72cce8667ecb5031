// SPDX-License-Identifier: MIT
// Capture I/O for hotpath-defrag: reads pcap and pcapng with libpcap into memory (link
// layer stripped, IP packets only) and writes LINKTYPE_RAW pcap files.
//
// Link types read: Ethernet (with any number of 802.1Q/802.1ad VLAN tags), raw IP
// (DLT_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6), BSD loopback (DLT_NULL, DLT_LOOP), Linux
// cooked capture v1 and v2 (SLL, SLL2). Every frame read is counted: it becomes an IP
// packet for the engine, or is counted as not IP, as cut short by the capture's
// snap length, or as too short for its link header.
#pragma once

#include <pcap/pcap.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "packet.hpp"

namespace defrag::pcap_io {

// An IP packet of a capture: bytes [offset, offset + length) of capture::bytes.
struct record {
  std::int64_t ts_ns;
  std::size_t offset;
  std::uint32_t length;
};

struct capture {
  std::vector<std::uint8_t> bytes;
  std::vector<record> packets;  // IP packets, in capture order
  int link_type = -1;           // DLT_* of the input; -1 for a synthetic capture
  std::int64_t frames_in = 0;   // frames read = packets + the three drops below
  std::int64_t not_ip = 0;      // ARP, LLDP, other ethertypes and address families
  std::int64_t snapped = 0;     // cut short by the snap length: the IP packet is incomplete
  std::int64_t short_link = 0;  // shorter than its own link-layer header
  bool truncated = false;       // the file ends inside a record (the records before it are kept)
  std::string truncation_message;

  std::span<const std::uint8_t> ip(const record& r) const {
    return {bytes.data() + r.offset, r.length};
  }
  void add(std::int64_t ts_ns, std::span<const std::uint8_t> ip_packet) {
    packets.push_back({ts_ns, bytes.size(), static_cast<std::uint32_t>(ip_packet.size())});
    bytes.insert(bytes.end(), ip_packet.begin(), ip_packet.end());
  }
};

// Bad input that stops reading: not a capture, an unknown link type, an unreadable file.
struct input_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using defrag::load_be16;

inline bool supported_link_type(int dlt) {
  switch (dlt) {
    case DLT_EN10MB:
    case DLT_RAW:
    case DLT_IPV4:
    case DLT_IPV6:
    case DLT_NULL:
    case DLT_LOOP:
    case DLT_LINUX_SLL:
    case DLT_LINUX_SLL2:
      return true;
    default:
      return false;
  }
}

enum class link_verdict { ip, not_ip, short_link };

namespace detail {

constexpr std::uint16_t ethertype_ipv4 = 0x0800;
constexpr std::uint16_t ethertype_ipv6 = 0x86dd;

inline bool is_vlan(std::uint16_t type) {
  return type == 0x8100 || type == 0x88a8 || type == 0x9100;
}

// Given an ethertype and where the bytes after it start: skips VLAN tags (TCI, then
// the next ethertype), then says whether an IP packet follows.
inline link_verdict by_ethertype(std::span<const std::uint8_t> f, std::uint16_t type,
                                 std::size_t at, std::span<const std::uint8_t>& ip) {
  while (is_vlan(type)) {
    if (f.size() < at + 4) return link_verdict::short_link;
    type = load_be16(f.data() + at + 2);
    at += 4;
  }
  if (type != ethertype_ipv4 && type != ethertype_ipv6) return link_verdict::not_ip;
  ip = f.subspan(at);
  return link_verdict::ip;
}

// The ethertype sits at `type_at` and the payload follows it (Ethernet, SLL).
inline link_verdict after_ethertype(std::span<const std::uint8_t> f, std::size_t type_at,
                                    std::span<const std::uint8_t>& ip) {
  if (f.size() < type_at + 2) return link_verdict::short_link;
  return by_ethertype(f, load_be16(f.data() + type_at), type_at + 2, ip);
}

// BSD loopback: the address family in 4 bytes (host order for DLT_NULL, network order
// for DLT_LOOP); IPv6 has three values depending on the capturing OS.
inline link_verdict loopback(std::span<const std::uint8_t> f, bool network_order,
                             std::span<const std::uint8_t>& ip) {
  if (f.size() < 4) return link_verdict::short_link;
  std::uint32_t af;
  if (network_order) {
    af = std::uint32_t{f[0]} << 24 | std::uint32_t{f[1]} << 16 | std::uint32_t{f[2]} << 8 | f[3];
  } else {
    // Whichever byte order the writer had: the families are small numbers.
    af = f[0] | f[3];
  }
  if (af != 2 && af != 24 && af != 28 && af != 30) return link_verdict::not_ip;
  ip = f.subspan(4);
  return link_verdict::ip;
}

// Drops link-layer padding (Ethernet pads frames to 60 bytes): the host sees the IP
// packet its header declares. A header declaring more than there is stays as it is,
// for the engine to count as malformed.
inline std::span<const std::uint8_t> trim_to_ip_length(std::span<const std::uint8_t> ip) {
  if (ip.size() >= 20 && ip[0] >> 4 == 4) {
    std::size_t total = load_be16(ip.data() + 2);
    if (total >= 20 && total < ip.size()) return ip.first(total);
  } else if (ip.size() >= 40 && ip[0] >> 4 == 6) {
    std::size_t payload = load_be16(ip.data() + 4);  // 0: jumbogram, left alone
    if (payload != 0 && 40 + payload < ip.size()) return ip.first(40 + payload);
  }
  return ip;
}

}  // namespace detail

// The IP packet inside one frame of link type `dlt` (which supported_link_type accepts).
inline link_verdict strip_link_layer(int dlt, std::span<const std::uint8_t> frame,
                                     std::span<const std::uint8_t>& ip) {
  link_verdict v = link_verdict::not_ip;
  switch (dlt) {
    case DLT_EN10MB:  // dst(6) src(6) ethertype(2)
      v = detail::after_ethertype(frame, 12, ip);
      break;
    case DLT_LINUX_SLL:  // packet type(2) ARPHRD(2) address length(2) address(8) protocol(2)
      v = detail::after_ethertype(frame, 14, ip);
      break;
    case DLT_LINUX_SLL2:  // protocol(2) reserved(2) ifindex(4) ARPHRD(2) type(1) len(1) addr(8)
      if (frame.size() < 20) return link_verdict::short_link;
      v = detail::by_ethertype(frame, load_be16(frame.data()), 20, ip);
      break;
    case DLT_RAW:
    case DLT_IPV4:
    case DLT_IPV6:
      if (frame.empty()) return link_verdict::short_link;
      if (frame[0] >> 4 != 4 && frame[0] >> 4 != 6) return link_verdict::not_ip;
      ip = frame;
      v = link_verdict::ip;
      break;
    case DLT_NULL:
      v = detail::loopback(frame, false, ip);
      break;
    case DLT_LOOP:
      v = detail::loopback(frame, true, ip);
      break;
    default:
      return link_verdict::not_ip;
  }
  if (v == link_verdict::ip) ip = detail::trim_to_ip_length(ip);
  return v;
}

// Reads a whole pcap or pcapng file ("-": standard input) into memory. Throws
// input_error when the file cannot be read as a capture at all; a file cut short
// inside a record keeps the records before it and sets `truncated`.
inline capture read_capture(const std::string& path) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  std::unique_ptr<pcap_t, void (*)(pcap_t*)> p(
      pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf),
      pcap_close);
  if (!p) throw input_error(path + ": not a readable pcap or pcapng capture (" + errbuf + ")");
  capture c;
  c.link_type = pcap_datalink(p.get());
  if (!supported_link_type(c.link_type)) {
    const char* n = pcap_datalink_val_to_name(c.link_type);
    throw input_error(path + ": unsupported link type " + std::to_string(c.link_type) + " (" +
                      (n ? n : "unknown") +
                      "); supported: Ethernet, raw IPv4/IPv6, BSD loopback, Linux SLL/SLL2");
  }
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  for (;;) {
    int rc = pcap_next_ex(p.get(), &h, &data);
    if (rc == PCAP_ERROR_BREAK) break;  // end of file
    if (rc != 1) {
      c.truncated = true;
      c.truncation_message = pcap_geterr(p.get());
      break;
    }
    ++c.frames_in;
    std::int64_t ts_ns = std::int64_t{h->ts.tv_sec} * 1'000'000'000 + h->ts.tv_usec;
    std::span<const std::uint8_t> frame(data, h->caplen);
    std::span<const std::uint8_t> ip;
    switch (strip_link_layer(c.link_type, frame, ip)) {
      case link_verdict::not_ip:
        ++c.not_ip;
        continue;
      case link_verdict::short_link:
        ++c.short_link;
        continue;
      case link_verdict::ip:
        break;
    }
    if (h->caplen < h->len) {  // the capture kept only the first caplen bytes
      ++c.snapped;
      continue;
    }
    c.add(ts_ns, ip);
  }
  return c;
}

// Writes IP packets as a LINKTYPE_RAW pcap with nanosecond timestamps ("-": stdout).
class writer {
 public:
  static constexpr int snap_length = 262144;

  explicit writer(const std::string& path)
      : dead_(
            pcap_open_dead_with_tstamp_precision(DLT_RAW, snap_length, PCAP_TSTAMP_PRECISION_NANO),
            pcap_close),
        dump_(nullptr, pcap_dump_close) {
    if (!dead_) throw input_error("cannot set up a pcap writer");
    dump_.reset(pcap_dump_open(dead_.get(), path.c_str()));
    if (!dump_) throw input_error(path + ": cannot write: " + pcap_geterr(dead_.get()));
  }

  void write(std::int64_t ts_ns, std::span<const std::uint8_t> ip) {
    pcap_pkthdr h{};
    h.ts.tv_sec = static_cast<time_t>(ts_ns / 1'000'000'000);
    h.ts.tv_usec = static_cast<suseconds_t>(ts_ns % 1'000'000'000);  // nanoseconds here
    h.caplen = h.len = static_cast<bpf_u_int32>(ip.size());
    pcap_dump(reinterpret_cast<u_char*>(dump_.get()), &h, ip.data());
  }

  // Flushes; throws if anything could not be written.
  void close() {
    if (!dump_) return;
    bool ok = pcap_dump_flush(dump_.get()) == 0 && !std::ferror(pcap_dump_file(dump_.get()));
    dump_.reset();
    if (!ok) throw input_error("error while writing the output capture");
  }

 private:
  std::unique_ptr<pcap_t, void (*)(pcap_t*)> dead_;
  std::unique_ptr<pcap_dumper_t, void (*)(pcap_dumper_t*)> dump_;
};

}  // namespace defrag::pcap_io
