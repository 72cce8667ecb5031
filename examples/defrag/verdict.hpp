// SPDX-License-Identifier: MIT
// A kernel's verdict on a capture, and ours beside it: NAME.expected.json (made by
// scripts/kernel-judge) lists the sha256 of every UDP payload a Linux kernel delivered
// after reassembly; judge() compares what this program delivered with it, as multisets.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/sha256.hpp"
#include "packet.hpp"
#include "pcap_io.hpp"

namespace defrag::verdict {

struct expected_datagram {
  std::string sha256;
  std::size_t len = 0;
  std::string name;  // the case name, for messages
};

// The "delivered" array of NAME.expected.json: every object's sha256, len and case.
// A reader for that one file's shape, not for JSON at large: empty if it has no array.
inline std::vector<expected_datagram> parse_expected(const std::string& t) {
  std::vector<expected_datagram> v;
  std::size_t at = t.find("\"delivered\"");
  if (at == std::string::npos) return v;
  auto string_after = [&](std::size_t from, std::size_t end, std::string_view key) {
    std::size_t k = t.find("\"" + std::string(key) + "\"", from);
    if (k == std::string::npos || k > end) return std::string();
    std::size_t q1 = t.find('"', t.find(':', k) + 1);
    std::size_t q2 = t.find('"', q1 + 1);
    if (q1 == std::string::npos || q2 == std::string::npos) return std::string();
    return t.substr(q1 + 1, q2 - q1 - 1);
  };
  for (;;) {
    std::size_t open = t.find('{', at);
    if (open == std::string::npos) break;
    std::size_t close = t.find('}', open);
    if (close == std::string::npos) break;
    expected_datagram d;
    d.sha256 = string_after(open, close, "sha256");
    d.name = string_after(open, close, "case");
    std::size_t l = t.find("\"len\"", open);
    if (l < close) d.len = std::strtoul(t.c_str() + t.find(':', l) + 1, nullptr, 10);
    if (d.sha256.size() == 64) v.push_back(d);
    at = close + 1;
  }
  return v;
}

inline std::vector<expected_datagram> read_expected(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw pcap_io::input_error(path + ": cannot read the expected verdict");
  std::stringstream s;
  s << f.rdbuf();
  auto v = parse_expected(s.str());
  if (v.empty()) throw pcap_io::input_error(path + ": no \"delivered\" datagram with a sha256");
  return v;
}

// The UDP payload of a whole (unfragmented) IPv4 or IPv6 UDP datagram.
inline std::optional<std::span<const std::uint8_t>> udp_payload(std::span<const std::uint8_t> ip) {
  std::size_t at = 0;
  unsigned proto = 0;
  if (ip.size() >= 20 && ip[0] >> 4 == 4) {
    if ((load_be16(ip.data() + 6) & 0x3fff) != 0) return std::nullopt;
    at = std::size_t{ip[0] & 15u} * 4;
    proto = ip[9];
  } else if (ip.size() >= 40 && ip[0] >> 4 == 6) {
    at = 40;
    proto = ip[6];
    while ((proto == 0 || proto == 43 || proto == 60 || proto == 44) && at + 8 <= ip.size()) {
      if (proto == 44 && (load_be16(ip.data() + at + 2) & 0xfff9) != 0)
        return std::nullopt;  // a fragment that is not atomic
      std::size_t len = proto == 44 ? 8 : (std::size_t{ip[at + 1]} + 1) * 8;
      proto = ip[at];
      at += len;
    }
  } else {
    return std::nullopt;
  }
  if (proto != 17 || at + 8 > ip.size()) return std::nullopt;
  std::size_t ulen = load_be16(ip.data() + at + 4);
  if (ulen < 8 || at + ulen > ip.size()) return std::nullopt;
  return ip.subspan(at + 8, ulen - 8);
}

struct result {
  std::size_t expected = 0;              // datagrams the kernel delivered
  std::size_t matched = 0;               // of those, delivered here byte for byte
  std::size_t extra = 0;                 // UDP datagrams delivered here that the kernel did not
  std::vector<std::string> differences;  // one line per missing or extra datagram
  bool exact() const { return matched == expected && extra == 0; }
};

// Compares the UDP payloads delivered here (each whole IP datagram given to add())
// with the kernel's list, as multisets of sha256.
class judge {
 public:
  explicit judge(const std::vector<expected_datagram>& want) {
    for (const auto& e : want) {
      ++want_[e.sha256];
      names_[e.sha256] = e.name + " (" + std::to_string(e.len) + " bytes)";
    }
    expected_ = want.size();
  }
  // False when `ip` is not a whole UDP datagram (not judged).
  bool add(std::span<const std::uint8_t> ip) {
    auto payload = udp_payload(ip);
    if (!payload) return false;
    std::string h = hotpath::common::sha256_hex(*payload);
    ++got_[h];
    if (!names_.count(h)) {
      std::size_t n = std::min<std::size_t>(12, payload->size());
      names_[h] = std::string(payload->begin(), payload->begin() + static_cast<std::ptrdiff_t>(n)) +
                  " (" + std::to_string(payload->size()) + " bytes)";
    }
    return true;
  }
  result finish() const {
    result r;
    r.expected = expected_;
    for (const auto& [h, n] : want_) {
      auto g = got_.find(h);
      std::size_t have = g == got_.end() ? 0 : g->second;
      r.matched += std::min(n, have);
      if (have < n)
        r.differences.push_back("missing: " + names_.at(h) + " x" + std::to_string(n - have));
    }
    for (const auto& [h, n] : got_) {
      auto w = want_.find(h);
      std::size_t want = w == want_.end() ? 0 : w->second;
      if (n > want) {
        r.extra += n - want;
        r.differences.push_back("not delivered by the kernel: " + names_.at(h) + " x" +
                                std::to_string(n - want));
      }
    }
    return r;
  }

 private:
  std::map<std::string, std::size_t> want_, got_;
  std::map<std::string, std::string> names_;
  std::size_t expected_ = 0;
};

}  // namespace defrag::verdict
