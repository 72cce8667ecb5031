// SPDX-License-Identifier: MIT
// Runs a capture through one defrag::engine shared by N worker threads, as a NIC with
// RSS would feed them: each packet goes to the worker its hash picks, by 5-tuple where
// the ports are visible (unfragmented packets and first fragments), else by addresses,
// so the fragments of one datagram reach different workers. Time is capture time.
// Unless steering is off (--no-steer), the receiving worker then hands each fragment
// to the worker that owns its datagram (a hash of its addresses), as RPS steers packets
// to a cpu after RSS: one datagram's state stays on one core, the table stays shared.
// With RSS by addresses alone (rss_mode::addresses) every fragment arrives on its owner
// and nothing is steered.
//
// Each worker takes its packets in capture order (handed-off ones as they arrive). Workers keep
// within `window` packets and `skew_ns` of each other's position in the capture, as packets that
// arrived together in real time are handled together: capture time (the engine's clock) and the
// table's contents then mean nearly the same thing on every worker. Expiry is driven by capture
// time too: whichever worker first sees a tick pass (sweep_tick_ns()) sweeps a share of the
// buckets, so that every bucket is swept once per shorter timeout.
//
// Output order: by the capture position of the packet that completed each datagram
// (for an unfragmented packet, the packet itself). With one worker that is the order of
// completion; with several, which fragment of a datagram arrives last in real time may
// differ from run to run, so only the multiset of datagrams is reproducible.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/measure.hpp"
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

struct run_options {
  config cfg;
  rss_mode rss = rss_mode::ports;
  unsigned threads = 1;
  unsigned repeat = 0;       // passes after the first, each on a fresh engine, timed
  bool global_lock = false;  // one std::mutex around the engine: the baseline
  // Most packets a worker runs ahead of the slowest one. Small against what the budget
  // holds (about 1500 fragments at 4 MiB): in real time these packets arrived together,
  // and a worker far ahead would evict, under a flood, datagrams whose next fragments
  // a slower worker has yet to deliver.
  std::size_t window = 256;
  // Most capture time a worker runs ahead of the slowest one (the clock being the
  // latest timestamp seen up to a packet): in sparse traffic 256 packets can span
  // seconds, and a worker that far ahead would expire, by its clock, datagrams whose
  // fragments a slower worker has yet to deliver. On a host the cores' clocks agree.
  std::int64_t skew_ns = 1'000'000;
  // Hand each fragment that RSS gave to one worker over to the worker that owns its
  // datagram (a hash of its addresses picks it), as RPS steers packets to a cpu:
  // a datagram's table entry is then touched by one core only. Off: every worker
  // feeds the engine what RSS gave it (the table is shared either way).
  bool steer = true;
  // Timed passes at this many workers too (0: none), interleaved with the others two by
  // two in alternating order, so that both meet the same machine state: on a shared or
  // throttled machine one worker's speed moves 1.7x between runs and within one, and the
  // medians of two runs then compare machine states rather than worker counts.
  unsigned paired_threads = 0;
  // Called between passes of long runs with a line for stderr.
  std::function<void(const std::string&)> progress;
};

// A datagram delivered: bytes [offset, offset + length) of run_result::bytes.
struct delivered {
  std::uint64_t completed_by;  // capture index of the packet that completed it
  std::int64_t ts_ns;          // that packet's capture time
  std::size_t offset;
  std::uint32_t length;
};

struct run_result {
  std::vector<std::uint8_t> bytes;
  std::vector<delivered> out;       // first pass, ordered by completed_by
  stats first;                      // first pass, after the end-of-capture expiry
  std::int64_t pending_at_end = 0;  // datagrams still incomplete when the capture ended
  // When the capture ended, before the end-of-capture expiry: the pending datagrams'
  // charges summed one by one (engine::held_bytes()), and the table's charged().
  std::int64_t held_bytes_at_end = 0;
  std::int64_t memory_bytes_at_end = 0;
  std::int64_t handed_off = 0;  // first pass: packets handed to the worker owning their datagram
  std::vector<std::int64_t> pass_ns;      // wall time of every pass, the first one included
  std::vector<std::int64_t> pass_cpu_ns;  // CPU time of the workers, summed, every pass
  double ns_per_fragment = -1;  // median repeat pass (wall) / fragments in; -1 without repeat
  // The same from the workers' CPU time: what the work costs when other processes share
  // the cores (wall time then includes waiting for a core).
  double cpu_ns_per_fragment = -1;
  // The baseline beside it: one thread copying every packet of the capture once, in
  // capture order, from where the workers read it (their receive queues), into a small
  // buffer (CPU time of the median of as many passes), over fragments in.
  // Reassembly must read every payload at least once: when the capture is larger than
  // the caches, this is the floor under ns_per_fragment.
  double copy_ns_per_fragment = -1;
  // With run_options::paired_threads: ns_per_fragment at that many workers, and the
  // median over the pairs of passes that ran next to each other of (its pass's wall
  // time / this run's): how many times faster `threads` workers are.
  double paired_ns_per_fragment = -1;
  double paired_speedup = -1;
  // Wall time of every paired pass: the pair of pass_ns[i + 1] is at i.
  std::vector<std::int64_t> paired_pass_ns;

  std::span<const std::uint8_t> datagram(const delivered& d) const {
    return {bytes.data() + d.offset, d.length};
  }
};

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
// it (docs/defrag.md). One worker reads a queue too, not the capture, for that reason.
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

namespace detail {

inline constexpr std::size_t done = std::numeric_limits<std::size_t>::max();

inline std::int64_t thread_cpu_ns() {
  return hotpath::measure::thread_cpu_time().count();
}
// Every bucket is swept once per shorter timeout: a datagram that no fragment comes
// back for is reclaimed at most one timeout late (one that is looked up, or sampled
// for eviction when memory runs short, goes at its deadline). The cost is per second
// of capture time, not per packet, and it is the whole table's: on the kernel capture
// (469 fragments in 18 s) a sweep per quarter timeout cost a fifth of the pass.
inline std::int64_t sweep_period_ns(const config& c) {
  return std::max<std::int64_t>(1'000'000, std::min(c.timeout_v4_ns, c.timeout_v6_ns));
}
// Expiry runs at most once a tick of capture time, and a tick is long enough for its
// share to be a batch of buckets (or the whole table, if smaller), from 1 ms to a
// whole period: a sweep call has a cost of its own (the shared cursor), which a
// sparse capture would otherwise pay at every packet for a bucket or two (30 s / 2048
// buckets x 64: about 1 s by default). Divided first, so it cannot overflow.
inline constexpr std::size_t sweep_batch = 64;
inline std::int64_t sweep_tick_ns(const config& c) {
  const std::int64_t period = sweep_period_ns(c);
  const std::size_t buckets = resolved(c).buckets;
  const auto batches = static_cast<std::int64_t>(buckets / std::min(sweep_batch, buckets));
  return std::clamp<std::int64_t>(period / batches, 1'000'000, period);
}
// Packets ahead whose IP header is prefetched, as a NIC driver prefetches the
// descriptors and headers of the packets it is about to hand up.
inline constexpr std::size_t prefetch_ahead = 4;

// A single-producer single-consumer ring of capture indices, from one worker to
// another. The producer publishes its pushes once per batch and the consumer reloads
// what is published only when it has taken all it saw, so the index lines move between
// the cores once per batch, not once per packet.
class handoff_ring {
 public:
  static constexpr std::uint32_t capacity = 1024;

  // Producer: false when full.
  bool push(std::uint32_t v) noexcept {
    if (tail_ - head_seen_ == capacity) {
      // Acquire pairs with the release store in peek(): the slots it freed were read.
      head_seen_ = head_.load(std::memory_order_acquire);
      if (tail_ - head_seen_ == capacity) return false;
    }
    slots_[tail_ % capacity] = v;
    ++tail_;
    return true;
  }
  // Producer: makes the pushes so far visible to the consumer.
  void publish() noexcept {
    // Release pairs with the acquire load in peek(): the slots are written.
    if (tail_ != published_seen_)
      published_.store(published_seen_ = tail_, std::memory_order_release);
  }
  // Consumer: the oldest published index, not taken; false if none. On reloading, calls
  // ahead(index) for the first few new ones (prefetching); pop() for each one after.
  template <class Ahead>
  bool peek(std::uint32_t& v, Ahead&& ahead) noexcept {
    if (next_ == end_) {
      // Release pairs with the acquire load in push(): the slots read may be reused.
      if (next_ != freed_) head_.store(freed_ = next_, std::memory_order_release);
      // Acquire pairs with the release store in publish().
      end_ = published_.load(std::memory_order_acquire);
      for (std::uint32_t k = next_; k != end_ && k - next_ < prefetch; ++k)
        ahead(slots_[k % capacity]);
      if (next_ == end_) return false;
    }
    v = slots_[next_ % capacity];
    return true;
  }
  // Consumer: takes the index peek() gave.
  template <class Ahead>
  void pop(Ahead&& ahead) noexcept {
    ++next_;
    if (end_ - next_ >= prefetch) ahead(slots_[(next_ + prefetch - 1) % capacity]);
  }

 private:
  static constexpr std::uint32_t prefetch = 4;
  // Producer's own line, then the two shared words, then the consumer's own line.
  alignas(64) std::uint32_t tail_ = 0;
  std::uint32_t head_seen_ = 0;
  std::uint32_t published_seen_ = 0;
  alignas(64) std::atomic<std::uint32_t> published_{0};
  alignas(64) std::atomic<std::uint32_t> head_{0};
  alignas(64) std::uint32_t next_ = 0;
  std::uint32_t end_ = 0;    // published, as last loaded
  std::uint32_t freed_ = 0;  // head_, as last stored
  alignas(64) std::uint32_t slots_[capacity];
};

struct alignas(64) worker_slot {
  // What the other workers read (pace(), reload()), on a line of its own: the
  // counters below change per packet and would drag it back and forth between cores.
  std::atomic<std::size_t> position{0};  // capture index of the next packet; done at the end
  // Steering: every packet this worker received below this capture index went to its
  // owner (handoffs published); done once all did.
  std::atomic<std::size_t> received{0};
  alignas(64) std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t cpu_ns = 0;
  std::int64_t delivered_count = 0;
  std::int64_t handed_off = 0;  // packets given to the worker owning their datagram
  std::vector<std::uint8_t> bytes;
  std::vector<delivered> out;
};

struct shared {
  engine* eng;         // made by worker 0 before the start (pass())
  std::mutex* global;  // null: the engine's own per-bucket locking only
  const pcap_io::capture& cap;
  const rx_queues& rx;  // where each packet lies
  std::vector<worker_slot>& slots;
  std::size_t window;
  std::int64_t skew_ns;
  const std::vector<std::int64_t>& clock;  // per packet: the latest timestamp up to it
  std::int64_t sweep_ns;
  std::int64_t tick_ns;
  std::atomic<std::int64_t> next_tick;
  // rings[from * workers + to]; empty when not steering.
  std::vector<std::unique_ptr<handoff_ring>> rings;

  handoff_ring& ring(std::size_t from, std::size_t to) { return *rings[from * slots.size() + to]; }
};

template <class F>
void locked(shared& s, F&& f) {
  if (s.global) {
    std::lock_guard<std::mutex> g(*s.global);
    f();
  } else {
    f();
  }
}

// Sweeps a share of the buckets if capture time passed the next tick and this worker
// wins the race to advance it.
inline void maybe_expire(shared& s, std::int64_t now) {
  // Relaxed: the tick only spaces sweeps out; the engine's locks order what they touch.
  std::int64_t tick = s.next_tick.load(std::memory_order_relaxed);
  if (now < tick) return;
  if (!s.next_tick.compare_exchange_strong(tick, now + s.tick_ns, std::memory_order_relaxed))
    return;
  std::int64_t since = now - (tick - s.tick_ns);
  std::size_t buckets = s.eng->initial_config().buckets;
  std::size_t share =
      since >= s.sweep_ns
          ? buckets
          : static_cast<std::size_t>(static_cast<double>(buckets) * static_cast<double>(since) /
                                     static_cast<double>(s.sweep_ns));
  share = std::clamp<std::size_t>(share, 1, buckets);
  locked(s, [&] { s.eng->expire(now, share); });
}

// One step of waiting for another worker: spins first, up to about 0.8 ms here
// (the other worker is usually running, a few packets from letting us go: a system
// call per check cost more than the wait, and a sleep lets another process onto the
// core, whose run can evict our cache and leave us the slower worker, which the other
// one then waits for), then yields a while, then sleeps in short steps, so that a worker
// preempted on the same core gets it back (yielding alone may hand the core straight
// back to us).
inline void back_off(int round) {
  if (round < 2048) {
    for (int k = 0; k < 16; ++k)
      hotpath::detail::cpu_relax();
  } else if (round < 2112) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Waits while this worker is more than `window` packets or `skew_ns` of capture time
// ahead of the slowest other one, calling meanwhile() at every step (steering its own
// packets, which the others may be waiting for). The clock never goes back along the
// capture, so two workers cannot wait for each other.
// `seen` is the slowest position this worker last loaded. Positions only grow, so a
// packet within reach of it is within reach of the current one, and the others' lines
// are read only when it is not: each read fetches a line another core wrote, which
// costs hundreds of nanoseconds between distant cores (docs/defrag.md).
template <class F>
void pace(shared& s, std::size_t me, std::size_t index, std::size_t& seen, F&& meanwhile) {
  auto within = [&](std::size_t slowest) {
    return slowest == done ||
           (index <= slowest + s.window && s.clock[index] <= s.clock[slowest] + s.skew_ns);
  };
  for (int round = 0; !within(seen); ++round) {
    if (round > 0) {
      meanwhile();
      back_off(round - 1);
    }
    std::size_t slowest = done;
    for (std::size_t w = 0; w < s.slots.size(); ++w)
      // Relaxed: pacing only; no data is published through a position.
      if (w != me) slowest = std::min(slowest, s.slots[w].position.load(std::memory_order_relaxed));
    seen = slowest;
  }
}

// Capture indices a worker steers ahead of the packet it processes, so that the others
// rarely find it has not yet steered what they wait for. In bursts of 64: each burst's
// end publishes to the other cores (with bursts of 16, two workers were 10-20% slower).
inline constexpr std::size_t steer_ahead = 512;
inline constexpr std::size_t steer_burst = 64;

template <bool Keep>
void work(shared& s, std::size_t me, std::span<const std::uint32_t> mine) {
  worker_slot& slot = s.slots[me];
  const std::size_t workers = s.slots.size();
  [[maybe_unused]] std::size_t next = 0;  // least capture index this worker may take next
  auto process = [&](std::uint32_t i) {
    // A worker takes its packets in capture order (with steering: all those it owns).
    assert(i >= next);
#ifndef NDEBUG
    next = std::size_t{i} + 1;
#endif
    const pcap_io::record& r = s.cap.packets[i];
    maybe_expire(s, r.ts_ns);
    // Datagrams come as header + pieces: the kept pass copies them once, into the
    // output; the timed passes count them (DPDK's reassembly is timed the same way:
    // it hands out a chain of mbufs, and the copy belongs to whoever needs it flat).
    auto out = [&](const datagram_view& d) {
      if constexpr (Keep) {
        const std::size_t at = slot.bytes.size();
        slot.out.push_back({i, r.ts_ns, at, static_cast<std::uint32_t>(d.size())});
        slot.bytes.resize(at + d.size());
        d.copy_to(slot.bytes.data() + at);
      } else {
        slot.delivered_count += static_cast<std::int64_t>(d.size() != 0);
      }
    };
    locked(s, [&] { s.eng->input_borrowed(r.ts_ns, {s.rx.at[i], r.length}, out); });
  };
  // Both lines the headers can span: parse() reads up to 56 bytes (IPv6, its fragment
  // header, the ports), which straddle a line unless the packet starts a line's first
  // 8 bytes (with one line prefetched, parse() was a tenth of a worker's time).
  auto prefetch = [&](std::uint32_t i) {
    const std::uint8_t* p = s.rx.at[i];
    __builtin_prefetch(p);
    __builtin_prefetch(p + 63);
  };
  // Paces every 64 packets, and before capture time passes skew_ns beyond the last
  // time: in sparse traffic 64 packets span seconds.
  std::size_t n = 0;
  std::int64_t paced_at = std::numeric_limits<std::int64_t>::min();
  std::size_t seen = 0;  // see pace()
  auto maybe_pace = [&](std::uint32_t i, auto&& meanwhile) {
    if ((n++ & 63) != 0 && s.clock[i] <= paced_at + s.skew_ns) return;
    paced_at = s.clock[i];
    // Positions only grow: pace() relies on it. (Ours: only this thread stores it.)
    assert(i >= slot.position.load(std::memory_order_relaxed));
    slot.position.store(i, std::memory_order_relaxed);  // pacing only, see pace()
    pace(s, me, i, seen, meanwhile);
  };

  if (s.rings.empty()) {  // not steering: each packet where RSS put it
    for (std::size_t k = 0; k < mine.size(); ++k) {
      // The record (time, length) and where the packet lies first, then its headers.
      // (Written out: GCC 12 at -O3 dropped these prefetches from a lambda or function
      // called here, and parse() stalled on every packet.)
      if (k + 4 * prefetch_ahead < mine.size()) {
        __builtin_prefetch(&s.cap.packets[mine[k + 4 * prefetch_ahead]]);
        __builtin_prefetch(&s.rx.at[mine[k + 4 * prefetch_ahead]]);
      }
      if (k + prefetch_ahead < mine.size()) prefetch(mine[k + prefetch_ahead]);
      maybe_pace(mine[k], [] {});
      process(mine[k]);
    }
    slot.position.store(done, std::memory_order_relaxed);
    return;
  }

  // Steering, in two steps that keep capture order. Each worker steers the packets
  // RSS gave it, some way ahead: it reads the header of each one RSS hashed with its
  // ports and hands those that another worker owns to it, through a ring; the rest are
  // its own, left where they lie in its queue. It processes the packets it owns, its own
  // and those handed to it, in capture order: the next one only once every other worker
  // has steered past it, so that nothing before it can still come (`received`). Handing
  // off as it went and taking handoffs when they came, an owner could take a first
  // fragment after a later fragment of its datagram, and Linux judges overlaps by
  // arrival order: a fragment lying inside an earlier one is a duplicate, the earlier one
  // arriving second is an overlap that kills the datagram.
  // Its own packets are taken in runs: every one below the next handed-off packet and
  // below every other worker's `received` (as last loaded) goes without another check,
  // as without steering. (Queued into a list of its own and checked one by one, the
  // worker that never waited spent about a sixth of its time on that bookkeeping.)
  std::vector<std::uint8_t> gone(mine.size());        // 1: handed off to its owner
  std::size_t r = 0;                                  // mine[r]: the next packet to steer
  std::size_t p = 0;                                  // mine[p]: the next one to process, if own
  std::size_t at = 0;                                 // the capture index processed last
  const std::vector<std::uint8_t>& l4 = s.rx.l4[me];  // beside mine
  // Steers up to `budget` packets (fewer if a ring is full), then publishes, if it
  // steered any.
  auto steer = [&](std::size_t budget) {
    const std::size_t from = r, end = std::min(mine.size(), r + budget);
    for (; r < end; ++r) {
      // Only a packet RSS hashed with its ports can belong to another worker; only
      // its header is read (prefetched as when processing, but a burst ahead: steering
      // a packet takes a few nanoseconds, not the hundred that processing one does).
      if (r + 4 * steer_burst < mine.size() && l4[r + 4 * steer_burst]) {
        __builtin_prefetch(&s.cap.packets[mine[r + 4 * steer_burst]]);
        __builtin_prefetch(&s.rx.at[mine[r + 4 * steer_burst]]);
      }
      if (r + steer_burst < mine.size() && l4[r + steer_burst]) prefetch(mine[r + steer_burst]);
      if (!l4[r]) continue;
      const std::uint32_t i = mine[r];
      const auto h = steer_hash(s.rx.ip(s.cap, i));
      const std::size_t owner = h ? pick(*h, workers) : me;
      if (owner == me) continue;
      if (!s.ring(me, owner).push(i)) break;  // full: its owner is behind; try again later
      gone[r] = 1;
      ++slot.handed_off;
    }
    if (r == from) return std::size_t{0};
    for (std::size_t w = 0; w < workers; ++w)
      if (w != me) s.ring(me, w).publish();
    // Release pairs with the acquire in reload(): the handoffs below it are published.
    slot.received.store(r < mine.size() ? mine[r] : done, std::memory_order_release);
    return r - from;
  };
  std::size_t horizon = 0;  // the least of the others' `received`, as last loaded
  auto reload = [&] {
    horizon = done;
    for (std::size_t w = 0; w < workers; ++w)
      if (w != me) horizon = std::min(horizon, s.slots[w].received.load(std::memory_order_acquire));
  };
  constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  // The first in capture order of the packets handed to this worker (`from`: whose).
  auto first_handed = [&](std::size_t& from) {
    std::uint32_t x = none;
    for (std::size_t w = 0; w < workers; ++w) {
      std::uint32_t v;
      if (w != me && s.ring(w, me).peek(v, prefetch) && v < x) x = v, from = w;
    }
    return x;
  };
  // Skips what was handed off. Then mine[p] is this worker's next own packet if p < r;
  // if p == r, it is not steered yet, and may be another worker's, but nothing of this
  // worker's own comes before it (so no packet handed to it after it may go first).
  auto next_own = [&] {
    while (p < r && gone[p])
      ++p;
    return p < mine.size() ? mine[p] : none;
  };
  auto meanwhile = [&] { steer(steer_burst); };
  // Given no packet, it has steered them all: steer() never moves, so say it here. (The
  // others wait for it before they take anything: review, a worker given nothing and
  // owning a handed-off packet, the other waiting for it in pace().)
  if (mine.empty()) slot.received.store(done, std::memory_order_release);
  std::size_t ahead_at = 0;  // own packets' headers prefetched before mine[ahead_at]
  unsigned ahead = 0;        // after mine[p]
  for (int round = 0;;) {
    if (r < mine.size() && (r == p || mine[r] < at + steer_ahead)) steer(steer_burst);
    std::size_t from = me;
    std::uint32_t y = first_handed(from);
    std::uint32_t own = next_own();
    std::uint32_t x = std::min(y, own);
    if (x != none && x >= horizon) {
      reload();
      y = first_handed(from);  // after the load: what was handed off before it shows
      x = std::min(y, own);
    }
    if (x != none && x < horizon && (x == y || p < r)) {
      if (x == y) {
        at = x;
        s.ring(from, me).pop(prefetch);
        maybe_pace(x, meanwhile);
        process(x);
      } else {
        // A run of its own packets, below the next handed-off one and the horizon.
        const std::size_t limit = std::min<std::size_t>(y, horizon);
        do {
          // As without steering: the record and where the packet lies, then its headers.
          if (p + 4 * prefetch_ahead < r) {
            __builtin_prefetch(&s.cap.packets[mine[p + 4 * prefetch_ahead]]);
            __builtin_prefetch(&s.rx.at[mine[p + 4 * prefetch_ahead]]);
          }
          // Headers: of its own packets only (under a flood, half of them are handed off).
          if (ahead_at <= p) ahead_at = p + 1, ahead = 0;
          for (; ahead_at < r && ahead < prefetch_ahead; ++ahead_at)
            if (!gone[ahead_at]) prefetch(mine[ahead_at]), ++ahead;
          const std::uint32_t i = mine[p++];
          at = i;
          maybe_pace(i, meanwhile);
          process(i);
          // Steering keeps its lead, or the others would wait for it at the run's end.
          if (r < mine.size() && mine[r] < at + steer_ahead) steer(steer_burst);
          own = next_own();
          if (p < ahead_at && ahead > 0) --ahead;  // mine[p] was one of them
        } while (p < r && own < limit);
      }
      round = 0;
      continue;
    }
    if (x == none && r == mine.size()) {
      reload();
      // All steered (ours said so by the steer() that reached the end, or at the
      // start), all taken.
      if (horizon == done && first_handed(from) == none) break;
    }
    // Blocked: what comes first may still be steered by another worker (which may wait
    // for ours), or there is nothing yet.
    if (steer(steer_burst) != 0) continue;
    // Nothing to steer either (done, or a ring full): say how far this worker has come,
    // for pace(). The next packet it processes is at least the first it holds, its own
    // next one to steer and every other worker's `received`. (Left at the last packet
    // processed, a worker that owns little held back, in pace(), the one it was handing
    // packets to, which then never drained its full ring: review, 10000 datagrams
    // between two hosts at 2-4 workers.)
    reload();
    // (next_own() is mine[r] when everything steered is taken.)
    x = std::min(first_handed(from), next_own());  // after the load, as above
    const std::size_t bound = std::min<std::size_t>(x == none ? done : x, horizon);
    if (bound != done && bound > slot.position.load(std::memory_order_relaxed))
      slot.position.store(bound, std::memory_order_relaxed);  // pacing only, see pace()
    back_off(round++);
  }
  slot.position.store(done, std::memory_order_relaxed);
}

// One pass on a fresh engine, made in `eng`; returns its wall time (ns): from the first
// worker's start to the last worker's end, so that waking the workers up is not counted.
// Leaves results (and each worker's CPU time) in `slots`.
inline std::int64_t pass(std::unique_ptr<engine>& eng, const pcap_io::capture& cap,
                         const rx_queues& rx, const std::vector<std::int64_t>& capture_clock,
                         const run_options& o, bool keep, std::vector<worker_slot>& slots) {
  std::mutex global;
  const config& c = o.cfg;
  const auto& lists = rx.lists;
  // Each worker's datagrams in buckets of their own: every fragment a worker processes
  // is one RSS by addresses or steering gave it, by the hash the engine shares buckets by
  // (with --no-steer, first fragments are processed where RSS put them by their ports,
  // and share the other workers' buckets).
  config cfg = o.cfg;
  cfg.queues = lists.size();
  // Steering reads rx.l4 beside each list; receive() fills both.
  assert(rx.l4.size() == lists.size() &&
         std::equal(lists.begin(), lists.end(), rx.l4.begin(),
                    [](const auto& a, const auto& b) { return a.size() == b.size(); }));
  shared s{nullptr,
           o.global_lock ? &global : nullptr,
           cap,
           rx,
           slots,
           o.window,
           o.skew_ns,
           capture_clock,
           sweep_period_ns(c),
           sweep_tick_ns(c),
           {},
           {}};
  std::int64_t first_ts = cap.packets.empty() ? 0 : cap.packets.front().ts_ns;
  s.next_tick.store(first_ts + s.tick_ns, std::memory_order_relaxed);
  // Spread by addresses, every fragment is already on its owner: nothing to hand over.
  if (o.steer && o.rss == rss_mode::ports && lists.size() > 1)
    for (std::size_t k = 0; k < lists.size() * lists.size(); ++k)
      s.rings.push_back(std::make_unique<handoff_ring>());
  using clock = std::chrono::steady_clock;
  // The workers start together: each waits, spinning first, until all have arrived.
  // (Woken from a futex, the second one started tens of microseconds after the first,
  // which spent them waiting for it in pace(): counted in the pass.)
  std::atomic<std::size_t> arrived{0};
  // Set when a worker could not be started: those started leave the start barrier,
  // which the missing ones would never reach, and the error goes to the caller.
  std::atomic<bool> abandoned{false};
  std::exception_ptr failed;
  std::vector<std::thread> threads;
  threads.reserve(lists.size());
  auto launch = [&](std::size_t w) {
    threads.emplace_back([&, w] {
      pthread_setname_np(pthread_self(), "defrag-worker");  // for perf --comm, top -H
      // Worker 0 makes the engine, so that its table is in a worker's cache, not in the
      // cache of the core the main thread ran on (a miss per bucket on the kernel
      // capture's short passes), as a table lives where it is used.
      if (w == 0) {
        try {
          s.eng = (eng = std::make_unique<engine>(cfg)).get();
        } catch (...) {
          failed = std::current_exception();  // rethrown after the join; all leave
        }
      }
      // Release and acquire: the others use the engine worker 0 made.
      arrived.fetch_add(1, std::memory_order_release);
      // Relaxed abandoned: it carries no data, and a worker that leaves uses none.
      for (int round = 0; arrived.load(std::memory_order_acquire) < lists.size(); ++round) {
        if (abandoned.load(std::memory_order_relaxed)) return;
        back_off(round);
      }
      if (!s.eng) return;
      slots[w].start_ns = clock::now().time_since_epoch().count();
      std::int64_t cpu = thread_cpu_ns();
      if (keep)
        work<true>(s, w, lists[w]);
      else
        work<false>(s, w, lists[w]);
      slots[w].end_ns = clock::now().time_since_epoch().count();
      slots[w].cpu_ns = thread_cpu_ns() - cpu;
    });
  };
  try {
    for (std::size_t w = 0; w < lists.size(); ++w)
      launch(w);
  } catch (...) {  // std::system_error: out of threads or memory for a stack
    abandoned.store(true, std::memory_order_relaxed);
    for (auto& t : threads)
      t.join();
    throw;
  }
  for (auto& t : threads)
    t.join();
  if (failed) std::rethrow_exception(failed);
  std::int64_t start = slots.front().start_ns, end = slots.front().end_ns;
  for (auto& sl : slots) {
    start = std::min(start, sl.start_ns);
    end = std::max(end, sl.end_ns);
  }
  return end - start;
}

inline std::int64_t cpu_sum(const std::vector<worker_slot>& slots) {
  std::int64_t t = 0;
  for (const auto& sl : slots)
    t += sl.cpu_ns;
  return t;
}

// One copy_ns_per_fragment pass (see run_result): its CPU time.
inline std::int64_t copy_pass(const pcap_io::capture& cap, const rx_queues& rx,
                              std::vector<std::uint8_t>& scratch) {
  const std::int64_t start = thread_cpu_ns();
  for (std::uint32_t i = 0; i < cap.packets.size(); ++i) {
    const auto ip = rx.ip(cap, i);
    std::memcpy(scratch.data(), ip.data(), std::min(ip.size(), scratch.size()));
    // The compiler must not drop the copies: what they wrote is read.
    asm volatile("" : : "r"(scratch.data()) : "memory");
  }
  return thread_cpu_ns() - start;
}

// Expires whatever is left once the capture has ended (as the host's timers would).
inline std::int64_t expire_all(engine& eng, const pcap_io::capture& cap) {
  const config& c = eng.initial_config();
  std::int64_t last = cap.packets.empty() ? 0 : cap.packets.back().ts_ns;
  for (const auto& r : cap.packets)
    last = std::max(last, r.ts_ns);
  return static_cast<std::int64_t>(
      eng.expire(last + std::max(c.timeout_v4_ns, c.timeout_v6_ns) + 1, c.buckets));
}

}  // namespace detail

// The first pass (output kept), then o.repeat timed passes, each on a fresh engine.
inline run_result run(const pcap_io::capture& cap, const run_options& o) {
  run_result res;
  unsigned workers = std::max(1u, o.threads);
  // Before the first pass's engine: the engines borrow the packets where they lie.
  std::vector<unsigned> counts{workers};
  if (o.paired_threads) counts.push_back(o.paired_threads);
  const std::vector<rx_queues> queues = receive(cap, counts, o.rss);
  const rx_queues& rx = queues.front();
  std::vector<std::int64_t> clock(cap.packets.size());
  for (std::size_t i = 0; i < clock.size(); ++i)
    clock[i] = i == 0 ? cap.packets[0].ts_ns : std::max(clock[i - 1], cap.packets[i].ts_ns);
  {
    std::unique_ptr<engine> eng;
    std::vector<detail::worker_slot> slots(workers);
    res.pass_ns.push_back(detail::pass(eng, cap, rx, clock, o, true, slots));
    res.pass_cpu_ns.push_back(detail::cpu_sum(slots));
    res.held_bytes_at_end = eng->held_bytes();
    res.memory_bytes_at_end = eng->snapshot().memory_bytes;
    res.pending_at_end = detail::expire_all(*eng, cap);
    for (const auto& sl : slots)
      res.handed_off += sl.handed_off;
    res.first = eng->snapshot();
    // Merge the workers' outputs by completing packet.
    std::vector<std::pair<const detail::worker_slot*, const delivered*>> all;
    for (auto& sl : slots)
      for (auto& d : sl.out)
        all.emplace_back(&sl, &d);
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return a.second->completed_by < b.second->completed_by;
    });
    for (auto& [sl, d] : all) {
      res.out.push_back({d->completed_by, d->ts_ns, res.bytes.size(), d->length});
      res.bytes.insert(res.bytes.end(), sl->bytes.begin() + static_cast<std::ptrdiff_t>(d->offset),
                       sl->bytes.begin() + static_cast<std::ptrdiff_t>(d->offset + d->length));
    }
  }
  std::vector<std::int64_t> timed, timed_cpu;
  std::vector<double> speedups;
  const rx_queues& paired_rx = queues.back();  // rx itself without paired_threads
  auto timed_pass = [&](const rx_queues& q, std::int64_t& cpu) {
    std::unique_ptr<engine> eng;
    std::vector<detail::worker_slot> slots(q.lists.size());
    const std::int64_t ns = detail::pass(eng, cap, q, clock, o, false, slots);
    cpu = detail::cpu_sum(slots);
    return ns;
  };
  auto started = std::chrono::steady_clock::now();
  for (unsigned p = 0; p < o.repeat; ++p) {
    std::int64_t cpu = 0, paired_cpu = 0, other = 0;
    // Pairs alternate which goes first: neither gets the warmer start every time.
    if (o.paired_threads && p % 2 == 1) other = timed_pass(paired_rx, paired_cpu);
    const std::int64_t ns = timed_pass(rx, cpu);
    if (o.paired_threads && p % 2 == 0) other = timed_pass(paired_rx, paired_cpu);
    if (o.paired_threads) {
      res.paired_pass_ns.push_back(other);
      speedups.push_back(static_cast<double>(other) /
                         static_cast<double>(std::max<std::int64_t>(ns, 1)));
    }
    res.pass_ns.push_back(ns);
    res.pass_cpu_ns.push_back(cpu);
    timed.push_back(ns);
    timed_cpu.push_back(cpu);
    if (o.progress && std::chrono::steady_clock::now() - started > std::chrono::seconds(2)) {
      std::int64_t frags = res.first[counter::fragments_in];
      o.progress("pass " + std::to_string(p + 1) + "/" + std::to_string(o.repeat) + ": " +
                 std::to_string(frags ? ns / frags : 0) + " ns per fragment");
    }
  }
  std::int64_t frags = res.first[counter::fragments_in];
  if (!timed.empty() && frags > 0) {
    res.ns_per_fragment = hotpath::measure::median(timed) / static_cast<double>(frags);
    res.cpu_ns_per_fragment = hotpath::measure::median(timed_cpu) / static_cast<double>(frags);
    if (!speedups.empty()) {
      res.paired_ns_per_fragment =
          hotpath::measure::median(res.paired_pass_ns) / static_cast<double>(frags);
      res.paired_speedup = hotpath::measure::median(speedups);
    }
    std::vector<std::uint8_t> scratch(std::size_t{1} << 16);
    std::vector<std::int64_t> copies;
    for (unsigned p = 0; p < o.repeat; ++p)
      copies.push_back(detail::copy_pass(cap, rx, scratch));
    res.copy_ns_per_fragment = hotpath::measure::median(copies) / static_cast<double>(frags);
  }
  return res;
}

}  // namespace defrag::driver
