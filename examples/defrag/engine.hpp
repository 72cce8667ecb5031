// SPDX-License-Identifier: MIT
// defrag::engine: IPv4/IPv6 reassembly shared by many worker threads.
//
// API first (the program is written against it in parallel); the body follows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

// GNU dialects (-std=gnu++20, CMake's default) predefine `linux` as 1; the portable
// spelling is __linux__. Without this, `policy::linux` would not compile there.
#ifdef linux
#undef linux
#endif

namespace defrag {

// How overlapping fragments are resolved. `linux` is Linux 6.x (RFC 5722: a partial
// overlap kills the datagram); the others are the target-based policies of
// Novak/Sturges, "Target-Based Fragmentation Reassembly" (2005).
enum class policy { linux, first, last, bsd, bsd_right, linux_legacy, windows, solaris };

inline constexpr std::array<std::string_view, 8> policy_names = {
    "linux", "first", "last", "bsd", "bsd-right", "linux-legacy", "windows", "solaris"};

inline std::string_view name(policy p) {
  return policy_names[static_cast<std::size_t>(p)];
}

// Accepts the names above; '_' may stand for '-'.
inline std::optional<policy> parse_policy(std::string_view s) {
  for (std::size_t i = 0; i < policy_names.size(); ++i) {
    std::string_view n = policy_names[i];
    if (n.size() != s.size()) continue;
    bool same = true;
    for (std::size_t j = 0; j < n.size() && same; ++j)
      same = n[j] == s[j] || (n[j] == '-' && s[j] == '_');
    if (same) return static_cast<policy>(i);
  }
  return std::nullopt;
}

struct config {
  policy pol = policy::linux;
  std::int64_t budget_bytes = 4 << 20;          // high threshold, kernel truesize units
  std::int64_t timeout_v4_ns = 30'000'000'000;  // ipfrag_time
  std::int64_t timeout_v6_ns = 60'000'000'000;  // ip6frag_time
  std::uint32_t max_fragments = 64;             // per datagram (>= 64)
  std::size_t buckets = 4096;                   // fixed at construction
};

// Drop reasons and other counters; the kernel's names where they exist.
enum class counter {
  packets_in,          // every input() call
  fragments_in,        // packets that carried a fragment (IPv4 MF/offset, IPv6 fragment header)
  datagrams_out,       // out() calls: reassembled + passthrough
  passthrough,         // unfragmented packets delivered unchanged
  reasm_reqds,         // ReasmReqds: fragments taken into reassembly
  reasm_oks,           // ReasmOKs: datagrams reassembled
  reasm_fails,         // ReasmFails: datagrams (or fragments) given up
  reasm_timeout,       // ReasmTimeout: datagrams expired incomplete
  reasm_overlaps,      // ReasmOverlaps: datagrams killed by an overlap (linux policy)
  duplicates,          // fragments dropped as lying inside received data
  evictions,           // incomplete datagrams evicted to make room (flood)
  malformed,           // unparsable headers
  too_long,            // datagram end beyond 65535
  odd_length,          // non-last fragment whose payload is not a multiple of 8
  too_many_fragments,  // more than max_fragments
  over_budget,         // fragment refused: memory budget exhausted even after eviction
  count_
};

inline constexpr std::array<std::string_view, static_cast<std::size_t>(counter::count_)>
    counter_names = {"packets_in",     "fragments_in", "datagrams_out",      "passthrough",
                     "reasm_reqds",    "reasm_oks",    "reasm_fails",        "reasm_timeout",
                     "reasm_overlaps", "duplicates",   "evictions",          "malformed",
                     "too_long",       "odd_length",   "too_many_fragments", "over_budget"};

inline std::string_view name(counter c) {
  return counter_names[static_cast<std::size_t>(c)];
}

struct stats {
  std::array<std::int64_t, static_cast<std::size_t>(counter::count_)> v{};
  std::int64_t memory_bytes = 0;
  std::int64_t peak_memory_bytes = 0;
  std::int64_t operator[](counter c) const { return v[static_cast<std::size_t>(c)]; }
};

class engine {
 public:
  explicit engine(config c = {}) : cfg_(c) {}

  // Thread-safe: many workers call input() at once. `ip` starts at the IPv4 or IPv6
  // header (link layer already stripped); now_ns is capture time. For every packet a
  // host would deliver (a reassembled datagram, rebuilt as the host sees it, or an
  // unfragmented packet unchanged) calls out(std::span<const std::uint8_t>) exactly once,
  // from the calling thread, outside any table lock. Anything not delivered is counted.
  template <class Out>
  void input(std::int64_t now_ns, std::span<const std::uint8_t> ip, Out&& out) {
    (void)now_ns;
    out(ip);  // API placeholder
  }

  // Expires datagrams past their deadline, touching at most max_buckets buckets.
  std::size_t expire(std::int64_t now_ns, std::size_t max_buckets) {
    (void)now_ns;
    (void)max_buckets;
    return 0;
  }

  stats snapshot() const { return {}; }

  // Changes policy, timeouts and max_fragments while running; `buckets` and
  // `budget_bytes` are fixed at construction (ignored here).
  void reconfigure(const config& c) { (void)c; }

  const config& initial_config() const { return cfg_; }

 private:
  config cfg_;
};

}  // namespace defrag
