// SPDX-License-Identifier: MIT
// Runs a capture through one defrag::engine shared by N worker threads, as a NIC with
// RSS would feed them: each packet goes to the worker its hash picks, by 5-tuple where
// the ports are visible (unfragmented packets and first fragments), else by addresses,
// so the fragments of one datagram reach different workers. Time is capture time.
//
// Each worker takes its packets in capture order. Workers keep within `window` packets
// of each other's position in the capture, as packets that arrived together in real
// time are handled together: capture time (the engine's clock) and the table's
// contents then mean nearly the same thing on every worker. Expiry is driven by
// capture time too: whichever worker first sees a millisecond tick pass sweeps a share
// of the buckets, so that every bucket is swept once per second of capture time.
//
// Output order: by the capture position of the packet that completed each datagram
// (for an unfragmented packet, the packet itself). With one worker that is the order of
// completion; with several, which fragment of a datagram arrives last in real time may
// differ from run to run, so only the multiset of datagrams is reproducible.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <latch>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/measure.hpp"
#include "engine.hpp"
#include "pcap_io.hpp"

namespace defrag::driver {

struct run_options {
  config cfg;
  unsigned threads = 1;
  unsigned repeat = 0;       // passes after the first, each on a fresh engine, timed
  bool global_lock = false;  // one std::mutex around the engine: the baseline
  // Most packets a worker runs ahead of the slowest one. Small against what the budget
  // holds (about 1500 fragments at 4 MiB): in real time these packets arrived together,
  // and a worker far ahead would evict, under a flood, datagrams whose next fragments
  // a slower worker has yet to deliver.
  std::size_t window = 256;
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
  std::vector<delivered> out;             // first pass, ordered by completed_by
  stats first;                            // first pass, after the end-of-capture expiry
  std::int64_t pending_at_end = 0;        // datagrams still incomplete when the capture ended
  std::vector<std::int64_t> pass_ns;      // wall time of every pass, the first one included
  std::vector<std::int64_t> pass_cpu_ns;  // CPU time of the workers, summed, every pass
  double ns_per_fragment = -1;  // median repeat pass (wall) / fragments in; -1 without repeat
  // The same from the workers' CPU time: what the work costs when other processes share
  // the cores (wall time then includes waiting for a core).
  double cpu_ns_per_fragment = -1;

  std::span<const std::uint8_t> datagram(const delivered& d) const {
    return {bytes.data() + d.offset, d.length};
  }
};

// RSS-like hash of an IP packet: addresses, plus protocol and ports when they are
// visible in this packet. (FNV-1a, then a finaliser: spreading, not security.)
inline std::uint64_t rss_hash(std::span<const std::uint8_t> ip) {
  std::uint64_t h = 0xcbf29ce484222325;
  auto add = [&](std::span<const std::uint8_t> b) {
    for (std::uint8_t x : b)
      h = (h ^ x) * 0x100000001b3;
  };
  auto is_l4 = [](unsigned p) { return p == 6 || p == 17 || p == 132; };  // TCP, UDP, SCTP
  if (ip.size() >= 20 && ip[0] >> 4 == 4) {
    std::size_t ihl = std::size_t{ip[0] & 15u} * 4;
    add(ip.subspan(12, 8));
    bool first = (pcap_io::load_be16(ip.data() + 6) & 0x1fff) == 0;
    if (first && ihl >= 20 && is_l4(ip[9]) && ip.size() >= ihl + 4) {
      add(ip.subspan(9, 1));
      add(ip.subspan(ihl, 4));
    }
  } else if (ip.size() >= 40 && ip[0] >> 4 == 6) {
    add(ip.subspan(8, 32));
    unsigned next = ip[6];
    std::size_t at = 40;
    for (int hops = 0; hops < 8 && at + 8 <= ip.size(); ++hops) {
      if (next == 0 || next == 43 || next == 60) {  // hop-by-hop, routing, destination
        next = ip[at];
        at += (std::size_t{ip[at + 1]} + 1) * 8;
      } else if (next == 51) {  // authentication header
        next = ip[at];
        at += (std::size_t{ip[at + 1]} + 2) * 4;
      } else if (next == 44) {  // fragment: ports only in the first one
        if ((pcap_io::load_be16(ip.data() + at + 2) & 0xfff8) != 0) break;
        next = ip[at];
        at += 8;
      } else {
        break;
      }
    }
    if (is_l4(next) && at + 4 <= ip.size()) {
      std::uint8_t p = static_cast<std::uint8_t>(next);
      add({&p, 1});
      add(ip.subspan(at, 4));
    }
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccd;
  h ^= h >> 33;
  return h;
}

// Which packets each of `workers` workers receives, in capture order.
inline std::vector<std::vector<std::uint32_t>> spread(const pcap_io::capture& c, unsigned workers) {
  std::vector<std::vector<std::uint32_t>> lists(workers);
  for (std::size_t i = 0; i < c.packets.size(); ++i)
    lists[rss_hash(c.ip(c.packets[i])) % workers].push_back(static_cast<std::uint32_t>(i));
  return lists;
}

namespace detail {

inline constexpr std::size_t done = std::numeric_limits<std::size_t>::max();

inline std::int64_t thread_cpu_ns() {
  return hotpath::measure::thread_cpu_time().count();
}
inline constexpr std::int64_t tick_ns = 1'000'000;       // expiry runs at most once a tick
inline constexpr std::int64_t sweep_ns = 1'000'000'000;  // every bucket once a second

struct alignas(64) worker_slot {
  std::atomic<std::size_t> position{0};  // capture index of the next packet; done at the end
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t cpu_ns = 0;
  std::int64_t delivered_count = 0;
  std::vector<std::uint8_t> bytes;
  std::vector<delivered> out;
};

struct shared {
  engine& eng;
  std::mutex* global;  // null: the engine's own per-bucket locking only
  const pcap_io::capture& cap;
  std::vector<worker_slot>& slots;
  std::size_t window;
  std::atomic<std::int64_t> next_tick;
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
  if (!s.next_tick.compare_exchange_strong(tick, now + tick_ns, std::memory_order_relaxed)) return;
  std::int64_t since = now - (tick - tick_ns);
  std::size_t buckets = s.eng.initial_config().buckets;
  std::size_t share = since >= sweep_ns
                          ? buckets
                          : static_cast<std::size_t>(static_cast<double>(buckets) *
                                                     static_cast<double>(since) / sweep_ns);
  share = std::clamp<std::size_t>(share, 1, buckets);
  locked(s, [&] { s.eng.expire(now, share); });
}

// Waits while this worker is more than `window` packets ahead of the slowest other one:
// yields a while, then sleeps in short steps, so that a slower worker preempted on the
// same core gets it back (yielding alone may hand the core straight back to us).
inline void pace(shared& s, std::size_t me, std::size_t index) {
  for (int round = 0;; ++round) {
    std::size_t slowest = done;
    for (std::size_t w = 0; w < s.slots.size(); ++w)
      if (w != me) slowest = std::min(slowest, s.slots[w].position.load(std::memory_order_relaxed));
    if (slowest == done || index <= slowest + s.window) return;
    if (round < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

template <bool Keep>
void work(shared& s, std::size_t me, std::span<const std::uint32_t> mine) {
  worker_slot& slot = s.slots[me];
  std::size_t n = 0;
  for (std::uint32_t i : mine) {
    if ((n++ & 15) == 0) {
      // Relaxed: a pacing hint only; no data is published through it.
      slot.position.store(i, std::memory_order_relaxed);
      pace(s, me, i);
    }
    const pcap_io::record& r = s.cap.packets[i];
    maybe_expire(s, r.ts_ns);
    auto out = [&](std::span<const std::uint8_t> d) {
      if constexpr (Keep) {
        slot.out.push_back({i, r.ts_ns, slot.bytes.size(), static_cast<std::uint32_t>(d.size())});
        slot.bytes.insert(slot.bytes.end(), d.begin(), d.end());
      } else {
        slot.delivered_count += static_cast<std::int64_t>(d.size() != 0);
      }
    };
    locked(s, [&] { s.eng.input(r.ts_ns, s.cap.ip(r), out); });
  }
  slot.position.store(done, std::memory_order_relaxed);
}

// One pass on a fresh engine; returns its wall time (ns): from the first worker's
// start to the last worker's end, so that waking the workers up is not counted.
// Leaves results (and each worker's CPU time) in `slots`.
inline std::int64_t pass(engine& eng, const pcap_io::capture& cap,
                         const std::vector<std::vector<std::uint32_t>>& lists, const run_options& o,
                         bool keep, std::vector<worker_slot>& slots) {
  std::mutex global;
  shared s{eng, o.global_lock ? &global : nullptr, cap, slots, o.window, {}};
  std::int64_t first_ts = cap.packets.empty() ? 0 : cap.packets.front().ts_ns;
  s.next_tick.store(first_ts + tick_ns, std::memory_order_relaxed);
  using clock = std::chrono::steady_clock;
  std::latch ready(static_cast<std::ptrdiff_t>(lists.size()));
  std::latch go(1);
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < lists.size(); ++w) {
    threads.emplace_back([&, w] {
      ready.count_down();
      go.wait();
      slots[w].start_ns = clock::now().time_since_epoch().count();
      std::int64_t cpu = thread_cpu_ns();
      if (keep)
        work<true>(s, w, lists[w]);
      else
        work<false>(s, w, lists[w]);
      slots[w].end_ns = clock::now().time_since_epoch().count();
      slots[w].cpu_ns = thread_cpu_ns() - cpu;
    });
  }
  ready.wait();
  go.count_down();
  for (auto& t : threads)
    t.join();
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
  auto lists = spread(cap, workers);
  {
    auto eng = std::make_unique<engine>(o.cfg);
    std::vector<detail::worker_slot> slots(workers);
    res.pass_ns.push_back(detail::pass(*eng, cap, lists, o, true, slots));
    res.pass_cpu_ns.push_back(detail::cpu_sum(slots));
    res.pending_at_end = detail::expire_all(*eng, cap);
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
  auto started = std::chrono::steady_clock::now();
  for (unsigned p = 0; p < o.repeat; ++p) {
    auto eng = std::make_unique<engine>(o.cfg);
    std::vector<detail::worker_slot> slots(workers);
    std::int64_t ns = detail::pass(*eng, cap, lists, o, false, slots);
    res.pass_ns.push_back(ns);
    res.pass_cpu_ns.push_back(detail::cpu_sum(slots));
    timed.push_back(ns);
    timed_cpu.push_back(res.pass_cpu_ns.back());
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
  }
  return res;
}

}  // namespace defrag::driver
