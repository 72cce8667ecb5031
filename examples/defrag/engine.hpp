// SPDX-License-Identifier: MIT
// defrag::engine: IPv4/IPv6 reassembly shared by many worker threads.
//
//   defrag::engine e;                                   // linux policy, 4 MiB, 30/60 s
//   e.input(capture_ns, ip_packet, [&](std::span<const std::uint8_t> pkt) { write(pkt); });
//   e.expire(capture_ns, 64);                           // now and then: bounded sweep
//
// - Datagrams live in a hotpath::bucket_table keyed (src, dst, id, protocol) for IPv4
//   and (src, dst, id) for IPv6; one lock per bucket, taken once per fragment. The
//   hash is SipHash-1-3 with a random 128-bit key (the key is attacker-chosen); with
//   config::queues, which share of the buckets (one per queue) comes from the unkeyed
//   address_hash() that the receive path picks a worker by.
// - Memory is charged as the kernel charges it: every kept fragment costs the truesize
//   of the skb that would hold it (truesize() below), every datagram its queue node;
//   all of it to the table against budget_bytes (ipfrag_high_thresh), exactly at any
//   worker count.
// - Over the budget, the table evicts stale datagrams (expired first, else the least
//   recently touched of a few sampled buckets) instead of refusing new ones, which is
//   what lets live traffic through a flood that blacks out Linux (docs/defrag.md).
// - A datagram's deadline is its creation + timeout (ipfrag_time; the kernel arms the
//   timer once, at queue creation), in the caller's clock (capture time).
// - Statistics are per-cpu counters (hotpath::percpu_stats), named after the kernel's
//   IPSTATS_MIB_REASM* where one exists. Policy, timeouts and max_fragments are read
//   through a hotpath::rcu_cell on every packet: reconfigure() changes them live.
// - out() runs on the calling thread after the bucket lock is released. An out that
//   takes std::span<const std::uint8_t> gets the packet contiguous, built then, in a
//   buffer of its own, from the fragments the datagram kept (copies, or with
//   input_borrowed() the caller's packets themselves); one that takes
//   const datagram_view& gets it as a rebuilt header and payload pieces pointing into
//   those fragments, not copied (as DPDK hands out a chain of mbufs), copy_to() when
//   it must be contiguous.
//   Unfragmented packets go out unchanged (cut to their IP length: no link padding);
//   an IPv6 atomic fragment, which Linux delivers, goes out without its fragment header.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "hotpath/bucket_table.hpp"
#include "hotpath/keyed_hash.hpp"
#include "hotpath/percpu_counter.hpp"
#include "hotpath/rcu_cell.hpp"
#include "packet.hpp"
#include "reassembly.hpp"

namespace defrag {

struct config {
  policy pol = policy::linux;
  std::int64_t budget_bytes = 4 << 20;          // high threshold, kernel truesize units
  std::int64_t timeout_v4_ns = 30'000'000'000;  // ipfrag_time
  std::int64_t timeout_v6_ns = 60'000'000'000;  // ip6frag_time
  // Per datagram. Linux has no such limit (its memory threshold bounds a datagram),
  // so the default admits the most a datagram can have: 65535 bytes in 8-byte pieces.
  std::uint32_t max_fragments = 8192;
  // Fixed at construction. 0: default_buckets(budget_bytes).
  std::size_t buckets = 0;
  // Fixed at construction: how many receive queues (workers) the caller spreads
  // datagrams over by pick_queue(address_hash(), queues), as RSS by addresses or
  // steering does. Each queue's datagrams then lie in a contiguous range of buckets of
  // their own (datagram_hash), so that two workers do not pass bucket lines back and
  // forth (only a line holding the last bucket of one range and the first of the next
  // is written by both). 1 (the least): no shares; at most `buckets` and max_queues.
  std::size_t queues = 1;
};

inline constexpr std::size_t max_queues = 64;

// One bucket per 2 KiB of budget, a power of two, at least 64: about as many buckets as
// the budget holds datagrams under a flood of first fragments (2.8 KiB each, queue
// included), 2048 for 4 MiB. The evictor samples buckets: in a table much larger than
// its population most probes find an empty bucket, so an eviction costs more probes
// and weighs fewer datagrams (git log of docs/defrag.md). Fewer buckets also make each sweep
// cheaper; a lookup walks about one entry more at most.
inline std::size_t default_buckets(std::int64_t budget_bytes) noexcept {
  const auto per = static_cast<std::uint64_t>(std::max<std::int64_t>(budget_bytes, 0) / 2048);
  return std::bit_ceil(std::clamp<std::uint64_t>(per, 64, std::uint64_t{1} << 24));
}

// The configuration an engine runs with: limits raised to their least, the bucket
// count resolved.
inline config resolved(config c) noexcept {
  if (c.max_fragments < 1) c.max_fragments = 1;
  if (c.buckets < 1) c.buckets = default_buckets(c.budget_bytes);
  c.buckets = std::bit_ceil(c.buckets);  // as the table rounds it
  c.queues = std::clamp<std::size_t>(c.queues, 1, std::min(c.buckets, max_queues));
  return c;
}

// A 64-bit mixer (the finaliser of MurmurHash3, both rounds): spreading, not security.
// (With its first round only, the top bit that picks one of two queues gave one 8.7%
// more of --synthetic's fragments than the other; with both, 0.5%.)
inline std::uint64_t mix64(std::uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccd;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53;
  h ^= h >> 33;
  return h;
}

// The hash a receive path spreads a datagram's fragments by (RSS by addresses, or the
// steering of a fragment, as the kernel's flow dissector hashes one: no ports, which
// only the first fragment has): the source and destination addresses, as they lie in
// the header (8 bytes for IPv4, 32 for IPv6; a datagram_key holds them the same way).
// Unkeyed, as RSS's Toeplitz key usually is not secret either: the table's own hash
// stays keyed (datagram_hash).
inline std::uint64_t address_hash(const std::uint8_t* addresses, bool v6) noexcept {
  auto at = [&](std::size_t k) {
    std::uint64_t v;
    std::memcpy(&v, addresses + k, 8);
    return v;
  };
  if (!v6) return mix64(at(0));
  return mix64(mix64(mix64(mix64(at(0)) ^ at(8)) ^ at(16)) ^ at(24));
}

// Which of n queues a hash picks: by its top bits (multiply and shift, no division),
// so that the queues of any n lie in contiguous ranges of hash values.
inline std::size_t pick_queue(std::uint64_t h, std::size_t n) noexcept {
  __extension__ using u128 = unsigned __int128;
  return static_cast<std::size_t>((static_cast<u128>(h) * n) >> 64);
}

// Drop reasons and other counters; the kernel's names where they exist.
enum class counter {
  packets_in,          // every input() call
  fragments_in,        // packets that carried a fragment (IPv4 MF/offset, IPv6 fragment header)
  datagrams_out,       // out() calls: reassembled + passthrough
  passthrough,         // unfragmented packets delivered unchanged
  reasm_reqds,         // ReasmReqds: fragments taken into reassembly
  reasm_oks,           // ReasmOKs: datagrams reassembled
  reasm_fails,         // ReasmFails: datagrams given up (timeouts and evictions included)
  reasm_timeout,       // ReasmTimeout: datagrams expired incomplete
  reasm_overlaps,      // ReasmOverlaps: linux: datagrams killed by an overlap; others: resolved
  duplicates,          // fragments dropped as lying inside received data
  evictions,           // incomplete datagrams evicted to make room (flood)
  malformed,           // unparsable headers
  too_long,            // datagram end beyond 65535
  odd_length,          // non-last fragment not a multiple of 8: IPv6 dropped, IPv4 trimmed
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

// Kernel truesize of the skb holding an IP packet of ip_len bytes received on
// Ethernet: the data buffer (NET_SKB_PAD headroom + frame, rounded up to the
// power-of-two size a driver's page fragment takes) plus struct sk_buff and
// skb_shared_info. A 1500-byte fragment costs 2816 bytes, so a 64 KiB datagram
// (45 fragments) about 127 KB, as measured on Linux (about 130 KB).
inline std::int64_t truesize(std::uint32_t ip_len) noexcept {
  return 768 + static_cast<std::int64_t>(std::bit_ceil(ip_len + 14u + 64u));
}

// The table's hash: SipHash-1-3 over the key bytes in use (16 for IPv4, 40 for IPv6).
// With queues (config::queues), it also places the bucket: a datagram's queue, the one
// pick_queue() gives its address_hash(), owns buckets [q B / n, (q + 1) B / n), and the
// keyed hash picks one of those (by its top bits, as pick_queue() does; the table takes
// the bucket from the low bits, and the top bits still tell keys apart). The keys of one
// address pair (one host's flood, or ids an attacker chooses) still spread over their
// queue's buckets; which queue's buckets they fill, an attacker can choose.
class datagram_hash {
 public:
  datagram_hash() : datagram_hash(hotpath::hash_key::random()) {}
  // buckets: the table's (rounded up to a power of two, as the table rounds it); queues:
  // at least 1, at most buckets and max_queues (clamped).
  explicit datagram_hash(hotpath::hash_key k, std::size_t buckets = 1, std::size_t queues = 1)
      : key_(k),
        buckets_(std::bit_ceil(std::max<std::size_t>(buckets, 1))),
        queues_(std::clamp<std::size_t>(queues, 1, std::min(buckets_, max_queues))) {
    // The ranges' bounds, computed once. With two divisions per packet instead, two
    // workers gained nothing from the ranges (1.43x one against 1.43x, 5 rounds far
    // apart); with the table, 1.55x against 1.42x (4 rounds).
    for (std::size_t q = 0; q <= queues_; ++q)
      bounds_[q] = q * buckets_ / queues_;
  }
  std::uint64_t operator()(const datagram_key& k) const noexcept {
    const std::uint64_t h = hotpath::siphash13(key_, &k, k.hashed_size());
    if (queues_ == 1) return h;
    const std::size_t q = pick_queue(address_hash(k.addr, k.family == 6), queues_);
    const std::size_t lo = bounds_[q];
    return (h & ~std::uint64_t{buckets_ - 1}) | (lo + pick_queue(h, bounds_[q + 1] - lo));
  }

 private:
  hotpath::hash_key key_;
  std::size_t buckets_;
  std::size_t queues_;
  std::array<std::size_t, max_queues + 1> bounds_{};
};

class engine {
  static constexpr std::size_t ncounters = static_cast<std::size_t>(counter::count_);
  using table_type = hotpath::bucket_table<datagram_key, datagram, datagram_hash>;

 public:
  // `hash` fixes the table's hash key (reproducible tests); by default it is random.
  explicit engine(config c = {}, std::optional<hotpath::hash_key> hash = std::nullopt)
      : initial_(resolved(c)),
        live_(initial_),
        table_(table_options(initial_),
               {.on_expire = [this](auto&) { count_loss(counter::reasm_timeout); },
                .on_evict = [this](auto&) { count_loss(counter::evictions); }},
               datagram_hash(hash ? *hash : hotpath::hash_key::random(), initial_.buckets,
                             initial_.queues)) {}

  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Thread-safe: many workers call input() at once. `ip` starts at the IPv4 or IPv6
  // header (link layer already stripped); now_ns is capture time. For every packet a
  // host would deliver (a reassembled datagram, rebuilt as the host sees it, or an
  // unfragmented packet unchanged) calls out(std::span<const std::uint8_t>), or
  // out(const datagram_view&) if out takes that, exactly once, from the calling thread,
  // outside any table lock; what it gets is valid during that call only. (Which of the
  // two is the callback's type: a generic `const auto&` callback gets views.) Anything
  // not delivered is counted.
  template <class Out>
  void input(std::int64_t now_ns, std::span<const std::uint8_t> ip, Out&& out) {
    inc(counter::packets_in);
    handle(now_ns, ip, out, 0, false);
  }

  // input() for a packet the caller lends: the engine keeps pointers into `ip` instead
  // of copying it, so the bytes must stay valid and unchanged until the engine is
  // destroyed (a capture held in memory; a receive ring whose buffers outlive the
  // engine). A fragment's payload is then read once, when its datagram completes,
  // and never if it does not (a flood's bogus fragments cost no copy).
  template <class Out>
  void input_borrowed(std::int64_t now_ns, std::span<const std::uint8_t> ip, Out&& out) {
    inc(counter::packets_in);
    handle(now_ns, ip, out, 0, true);
  }

  // Expires datagrams past their deadline, touching at most max_buckets buckets.
  std::size_t expire(std::int64_t now_ns, std::size_t max_buckets) {
    return table_.sweep(now_ns, max_buckets);
  }

  stats snapshot() const {
    stats s;
    for (std::size_t g = 0; g < stats_.size(); ++g) {
      const auto part = stats_[g].snapshot();
      for (std::size_t f = 0; f < stats_group && g * stats_group + f < ncounters; ++f)
        s.v[g * stats_group + f] = part[f];
    }
    // Every fragment in is taken into reassembly, as in the kernel's ipv4/ipv6 input:
    // one per-cpu add per fragment, not two.
    s.v[static_cast<std::size_t>(counter::reasm_reqds)] = s[counter::fragments_in];
    s.memory_bytes = table_.charged();
    note_peak(s.memory_bytes);
    // Relaxed: a statistic (see note_peak).
    s.peak_memory_bytes = peak_.load(std::memory_order_relaxed);
    return s;
  }

  // Changes policy, timeouts and max_fragments while running (datagrams already
  // queued keep their deadline). `buckets`, `budget_bytes` and `queues` are fixed at
  // construction; the values given for them are ignored.
  void reconfigure(const config& c) {
    config n = resolved(c);
    n.buckets = initial_.buckets;
    n.budget_bytes = initial_.budget_bytes;
    n.queues = initial_.queues;
    live_.store(n);
  }

  const config& initial_config() const { return initial_; }
  config current_config() const { return *live_.read(); }
  // Whether a quarter of the budget may be charged: the table's pool (one load) has less
  // than three quarters left. Below that no eviction is near, whatever the workers do.
  bool memory_short() const noexcept {
    return table_.pool_bytes() < table_.budget() - table_.budget() / 4;
  }
  // Datagrams being reassembled (exact when no input() runs).
  std::int64_t datagrams_pending() const { return table_.size(); }
  // The bucket a datagram lives in (tests of the queues' shares).
  std::size_t bucket_index(const datagram_key& k) const noexcept { return table_.bucket_index(k); }
  // Their charges, summed datagram by datagram, one bucket at a time (exact when no
  // input() runs). snapshot().memory_bytes is the table's charged(), never above the
  // budget by construction; this is the independent count that tests compare with it.
  std::int64_t held_bytes() {
    std::int64_t sum = 0;
    table_.for_each([&](auto& v) { sum += v.charged(); });
    return sum;
  }

 private:
  // Linux hands the packet that an IPv6 fragment header released (an atomic fragment,
  // or a reassembled datagram) back to the IPv6 input path: a malformed header after
  // it drops it, and so does another fragment header (ipv6_frag_rcv() refuses a packet
  // marked IP6SKB_FRAGMENTED, counting InHdrErrors: here, malformed). So do we: what a
  // fragment header released is handled at depth 1 and never deeper. max_depth stays
  // a bound on the recursion should that rule change (beyond it: malformed).
  static constexpr unsigned max_depth = 4;

  template <class Out>
  void handle(std::int64_t now_ns, std::span<const std::uint8_t> ip, Out& out, unsigned depth,
              bool borrowed, std::uint32_t released_at = 0) {
    packet_info pi;
    if (parse(ip, pi, released_at) != parse_status::ok) return inc(counter::malformed);
    // A fragment header after one already processed (see max_depth); not ReasmReqds.
    if (depth > 0 && (pi.atomic || pi.fragment)) return inc(counter::malformed);
    if (pi.atomic) {               // ipv6_frag_rcv lets it through, counted ReasmOKs
      inc(counter::fragments_in);  // and ReasmReqds (snapshot())
      std::span<const std::uint8_t> pkt;
      byte_buffer b;
      try {
        b = strip_atomic_fragment(pi, ip, pkt);
      } catch (...) {  // out of memory: lost, as below
        inc(counter::reasm_fails);
        throw;
      }
      inc(counter::reasm_oks);
      return deliver(now_ns, pkt, out, depth, pi.header_len);
    }
    if (!pi.fragment) {
      if (depth == 0) inc(counter::passthrough);
      return emit(ip.first(pi.length), out);  // without link-layer padding
    }
    inc(counter::fragments_in);  // and ReasmReqds (snapshot())
    policy pol;
    std::int64_t timeout;
    std::uint32_t max_fragments;
    {
      auto cfg = live_.read();
      pol = cfg->pol;
      timeout = pi.family == 4 ? cfg->timeout_v4_ns : cfg->timeout_v6_ns;
      max_fragments = cfg->max_fragments;
    }
    const std::int64_t cost = truesize(pi.length);
    datagram done;  // the completed datagram, carried out of the bucket lock
    auto visit = [&](table_type::entry& e) -> add_result {
      if (e.created()) e.set_deadline(hotpath::detail::saturating_add(now_ns, timeout));
      if (!e.charge(cost)) {  // over budget even after evicting
        if (e.value().fragments() == 0) e.erase();
        return {outcome::dropped, why::none};
      }
      // The fragment is not kept: its charge back, and an entry holding nothing goes.
      auto not_kept = [&] {
        e.charge(-cost);
        if (e.value().fragments() == 0) e.erase();
      };
      add_result r;
      try {
        r = e.value().add(pi, ip, pol, max_fragments, borrowed);
      } catch (...) {  // out of memory: the datagram is as it was (add())
        not_kept();
        throw;
      }
      switch (r.what) {
        case outcome::queued:
          break;
        case outcome::complete:
          done = std::move(e.value());  // built once the lock is released
          e.erase();
          break;
        case outcome::duplicate:
        case outcome::dropped:
          not_kept();
          break;
        case outcome::killed:
          e.erase();
          break;
      }
      return r;
    };
    std::optional<add_result> r = table_.find_or_create(pi.key, now_ns, visit);
    if (!r) return inc(counter::over_budget);  // no room for a new datagram
    sample_peak();
    if (r->trimmed) inc(counter::odd_length);
    if (r->overlapped) inc(counter::reasm_overlaps);
    switch (r->what) {
      case outcome::queued:
        return;
      case outcome::complete: {
        datagram_view v;
        bool viewed = false;
        std::span<const std::uint8_t> pkt;
        byte_buffer b;
        try {
          if constexpr (takes_view<Out>) {
            // Handed out as header + pieces, no copy, when the host would deliver it
            // as it is: IPv4, or IPv6 whose payload starts with an upper-layer header
            // (one that parse() would not walk into: see deliver()).
            viewed = (done.family() == 4 ||
                      (!reparsed_v6(done.payload_nexthdr()) && depth + 1 < max_depth)) &&
                     done.view(v);
          }
          if (!viewed) b = done.build(pkt);
        } catch (...) {
          // Out of memory: the datagram, out of the table, is lost. Linux counts
          // ReasmFails when it cannot allocate the reassembled packet (ip_frag_reasm).
          inc(counter::reasm_fails);
          throw;
        }
        inc(counter::reasm_oks);
        if constexpr (takes_view<Out>) {
          if (viewed) {
            inc(counter::datagrams_out);
            out(std::as_const(v));
            return;
          }
        }
        return deliver(now_ns, pkt, out, depth, done.header_len());
      }
      case outcome::duplicate:
        return inc(counter::duplicates);
      case outcome::dropped:
        return inc(drop_counter(r->reason));
      case outcome::killed:
        if (r->reason == why::overlap) inc(counter::reasm_overlaps);
        if (r->reason == why::too_long) inc(counter::too_long);
        return inc(counter::reasm_fails);
    }
  }

  template <class Out>
  // pkt: what a fragment header released, its first released_at bytes the header.
  void deliver(std::int64_t now_ns, std::span<const std::uint8_t> pkt, Out& out, unsigned depth,
               std::uint32_t released_at) {
    if (pkt[0] >> 4 == 6) {
      if (depth + 1 >= max_depth) return inc(counter::malformed);
      return handle(now_ns, pkt, out, depth + 1, false, released_at);  // pkt dies on return
    }
    emit(pkt, out);
  }

  template <class Out>
  static constexpr bool takes_view = std::is_invocable_v<Out&, const datagram_view&>;

  // Next headers that make parse() read on into an IPv6 packet's payload: extension
  // headers (the fragment header too). Any other one, and parse() of a reassembled
  // datagram stops at its header: it is delivered unchanged.
  static bool reparsed_v6(std::uint8_t nh) noexcept {
    return detail::is_v6_extension(nh) || nh == 44;
  }

  template <class Out>
  void emit(std::span<const std::uint8_t> pkt, Out& out) {
    inc(counter::datagrams_out);
    if constexpr (takes_view<Out>) {
      const datagram_view v(pkt);
      out(v);
    } else {
      out(pkt);
    }
  }

  static hotpath::bucket_table_options table_options(const config& c) {
    hotpath::bucket_table_options o;
    o.buckets = c.buckets;
    o.budget = c.budget_bytes;
    // A flood from one host fills one queue's buckets: while the others are empty,
    // probes enough to find it as surely as if it filled them all (with 8 queues and the
    // default 8 k probes, 1 eviction in 5000 found none of it and took what it found: a
    // live datagram). Probing stops at k non-empty buckets, so this does not help where
    // live datagrams fill the other queues' buckets (docs/defrag.md): those draw
    // samples away from the crowd. A one-host flood at 1:1 beside 300 live hosts cost
    // 27-39 of 18,000 legit datagrams at 1 and 2 queues, 46-67 at 3 and 4, 233-282 at 8;
    // with 16 samples, 0-2 at every count. 16 samples make a flood of random keys
    // 1.2-1.7x as dear, so only above 2 queues.
    if (c.queues > 2) o.eviction_samples = 16;
    // Each queue's datagrams lie in its own range of buckets (datagram_hash), the
    // table's shares: a worker evicts mostly what it wrote (docs/bucket_table.md).
    o.shares = c.queues;
    // At most 8 x 16 x max_queues; the table lowers it to 8 per bucket.
    o.eviction_probes = 8 * o.eviction_samples * static_cast<unsigned>(c.queues);
    return o;
  }
  static counter drop_counter(why w) noexcept {
    switch (w) {
      case why::odd_length:
        return counter::odd_length;
      case why::too_long:
        return counter::too_long;
      case why::too_many_fragments:
        return counter::too_many_fragments;
      default:
        return counter::over_budget;  // why::none: the charge was refused
    }
  }

  void inc(counter c) noexcept {
    const auto i = static_cast<std::size_t>(c);
    stats_[i / stats_group].inc(i % stats_group);
  }
  // A datagram given up: the kernel counts ReasmFails beside the reason.
  void count_loss(counter c) noexcept {
    inc(c);
    inc(counter::reasm_fails);
  }
  // The peak is sampled (and read at snapshot()): charged() reads every cpu's reserve,
  // a line the other workers write at each charge, too dear for every fragment. Every
  // 64th fragment of each thread; after 16 samples in a row found no new peak, half as
  // often, down to every 256th; a new peak brings it back to every 64th. (Every 64th
  // was a third of what two workers far apart paid per packet beyond one; a fixed
  // coarser period blurred small captures' peaks 3-4x, where this one backs off only
  // after 1024 fragments of a thread: measured 2026-12-03 and -04, in the git log.)
  void sample_peak() {
    struct sampler {
      std::uint64_t of = 0;  // the engine's serial_ (an address can be reused)
      unsigned left = 64;    // fragments to the next sample
      unsigned shift = 6;    // its period: 1 << shift
      unsigned misses = 0;   // samples in a row that found no new peak
    };
    thread_local sampler t;
    if (t.of != serial_) {
      // Another engine: every 64th again. The count goes on, so that a thread feeding
      // engines by turns still samples each of them.
      t.of = serial_;
      t.left = std::min(t.left, 64u);
      t.shift = 6;
      t.misses = 0;
    }
    if (--t.left != 0) return;
    if (note_peak(table_.charged())) {
      t.shift = 6;
      t.misses = 0;
    } else if (++t.misses == 16 && t.shift < 8) {
      ++t.shift;
      t.misses = 0;
    }
    t.left = 1u << t.shift;
  }
  // True if m is a new peak.
  bool note_peak(std::int64_t m) const noexcept {
    // Relaxed: a statistic; the CAS only keeps the maximum.
    std::int64_t p = peak_.load(std::memory_order_relaxed);
    while (m > p)
      if (peak_.compare_exchange_weak(p, m, std::memory_order_relaxed)) return true;
    return false;
  }

  const config initial_;
  hotpath::rcu_cell<config> live_;
  // Groups of 4: percpu_stats<N> aligns its per-cpu slot to 16 N bytes, and clang
  // rejects percpu's cache-line-aligned cell around a slot aligned beyond a line.
  static constexpr std::size_t stats_group = 4;
  std::array<hotpath::percpu_stats<stats_group>, (ncounters + stats_group - 1) / stats_group>
      stats_;
  alignas(hotpath::cache_line_size) mutable std::atomic<std::int64_t> peak_{0};
  // Tells engines apart for sample_peak()'s per-thread state.
  const std::uint64_t serial_ = [] {
    static std::atomic<std::uint64_t> made{0};
    return made.fetch_add(1, std::memory_order_relaxed) + 1;  // relaxed: only distinct
  }();
  table_type table_;
};

}  // namespace defrag
