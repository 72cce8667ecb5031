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
// Each worker takes the packets it owns in capture order, so each datagram's fragments reach
// the engine in capture order, and otherwise runs at its own pace: nothing another worker does
// can change a datagram's fate while memory is plentiful. Expiry follows the slowest worker's
// capture time (the low watermark, worker.hpp): whichever worker first sees it pass a tick
// (sweep_tick_ns()) sweeps a share of the buckets, so that every bucket is swept once per
// shorter timeout, and no worker ahead expires what a slower one may still complete. Once a
// quarter of the budget is charged, eviction draws near, and what it takes depends on what the
// others have put in: then workers keep within `window` packets and `skew_ns` of each other's
// position in the capture, as packets that arrived together in real time are handled
// together, a worker that would run further sleeping until the slowest comes nearer.
//
// Output order: by the capture position of the packet that completed each datagram
// (for an unfragmented packet, the packet itself). With one worker that is the order of
// completion; with several, which fragment of a datagram arrives last in real time may
// differ from run to run, so only the multiset of datagrams is reproducible.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/measure.hpp"
#include "engine.hpp"
#include "pcap_io.hpp"
#include "rss.hpp"
#include "worker.hpp"

namespace defrag::driver {

struct run_options {
  config cfg;
  rss_mode rss = rss_mode::ports;
  unsigned threads = 1;
  unsigned repeat = 0;       // passes after the first, each on a fresh engine, timed
  bool global_lock = false;  // one std::mutex around the engine: the baseline
  // While memory is short (a quarter of the budget charged; always with --no-steer), most
  // packets a worker runs ahead of the slowest one; 0: half the 1500-byte fragments
  // the budget holds, from 64 to 1024 (744 at 4 MiB; window_for()). Small against what
  // the budget holds: in real time these packets arrived together, and a worker far
  // ahead would evict, under a flood, datagrams whose next fragments a slower worker
  // has yet to deliver. Each time it waits costs a wake-up when cores are shared, so not
  // smaller than that (256 made 3-8 workers on two cores 1.5-2x slower).
  std::size_t window = 0;
  // While memory is short, most capture time a worker runs ahead of the slowest one
  // (the clock being the latest timestamp seen up to a packet): in sparse traffic a
  // window of packets can span seconds, and a worker that far ahead would evict as
  // expired, by its clock, datagrams whose fragments a slower worker has yet to
  // deliver: 10 ms, a thousandth of the shortest default timeout. Positions are also
  // published at least this often in capture time, for the low watermark.
  std::int64_t skew_ns = 10'000'000;
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
  // An engine of its own per worker (its share of the budget and of the buckets), fed
  // its queue of RSS by addresses, nothing shared, no pacing: DPDK's per-core reassembly,
  // the ceiling that sharing one table is measured against (implies RSS by addresses).
  bool shared_nothing = false;
  // Called between passes of long runs with a line for stderr.
  std::function<void(const std::string&)> progress;
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
  // Every pass: how often a worker, blocked on another, slept until woken (see progress.hpp).
  std::int64_t sleeps = 0;
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

inline bool unsteered(const run_options& o) {
  return !o.steer && o.rss == rss_mode::ports && !o.shared_nothing;
}

// The pacing window run_options::window = 0 stands for. Without steering (--no-steer,
// RSS by ports) two workers feed one datagram's fragments to the engine, and only the
// pacing keeps them in capture order: there the window and skew stay as tight as before
// (256 packets, 1 ms; with 744 and 10 ms, three kernel-judged captures at 4 workers
// came out unlike Linux).
inline std::size_t window_for(const config& c, const run_options& o) {
  if (o.window) return o.window;
  const auto fragments = static_cast<std::size_t>(c.budget_bytes / truesize(1500));
  const std::size_t w = std::clamp<std::size_t>(fragments / 2, 64, 1024);
  return unsteered(o) ? std::min<std::size_t>(w, 256) : w;
}
inline std::int64_t skew_for(const run_options& o) {
  return unsteered(o) ? std::min<std::int64_t>(o.skew_ns, 1'000'000) : o.skew_ns;
}

namespace detail {

// One pass on a fresh engine, made in `engines` (one per worker with shared_nothing);
// returns its wall time (ns): from the first worker's start to the last worker's end, so
// that waking the workers up is not counted. Leaves results (and each worker's CPU time)
// in `slots`, and adds to `sleeps` how often a worker slept waiting for another.
inline std::int64_t pass(std::vector<std::unique_ptr<engine>>& engines, const pcap_io::capture& cap,
                         const rx_queues& rx, const std::vector<std::int64_t>& capture_clock,
                         const run_options& o, bool keep, std::vector<worker_slot>& slots,
                         std::int64_t& sleeps) {
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
           window_for(c, o),
           skew_for(o),
           capture_clock,
           sweep_period_ns(c),
           sweep_tick_ns(c),
           {},
           {},
           progress(lists.size())};
  s.always_paced = unsteered(o);
  std::int64_t first_ts = cap.packets.empty() ? 0 : cap.packets.front().ts_ns;
  s.next_tick.store(first_ts + s.tick_ns, std::memory_order_relaxed);
  // --shared-nothing: each worker runs alone on an engine of its own (parts[w], with
  // its one slot in own[w]); `s` only starts them together.
  const std::size_t n = lists.size();
  engines.clear();
  engines.resize(o.shared_nothing ? n : 1);
  std::vector<std::vector<worker_slot>> own(o.shared_nothing ? n : 0);
  std::vector<std::unique_ptr<shared>> parts(o.shared_nothing ? n : 0);
  std::mutex failing;
  // Spread by addresses, every fragment is already on its owner: nothing to hand over.
  if (o.steer && o.rss == rss_mode::ports && !o.shared_nothing && lists.size() > 1)
    for (std::size_t from = 0; from < lists.size(); ++from) {
      // Room for everything `from` may hand over (what RSS hashed with its ports), up to
      // handoff_ring::max_capacity: steering then rarely waits for an owner to drain.
      const auto l4 =
          static_cast<std::size_t>(std::count(rx.l4[from].begin(), rx.l4[from].end(), 1));
      for (std::size_t to = 0; to < lists.size(); ++to)
        s.rings.push_back(std::make_unique<handoff_ring>(to == from ? 1 : l4));
    }
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
      try {
        if (o.shared_nothing) {
          config part = c;
          part.budget_bytes = c.budget_bytes / static_cast<std::int64_t>(n);
          part.buckets = std::max<std::size_t>(1, resolved(c).buckets / n);
          part.queues = 1;
          engines[w] = std::make_unique<engine>(part);
          own[w] = std::vector<worker_slot>(1);
          parts[w].reset(new shared{engines[w].get(),
                                    nullptr,
                                    cap,
                                    rx,
                                    own[w],
                                    window_for(c, o),
                                    skew_for(o),
                                    capture_clock,
                                    sweep_period_ns(part),
                                    sweep_tick_ns(part),
                                    {},
                                    {},
                                    progress(1)});
          parts[w]->next_tick.store(first_ts + parts[w]->tick_ns, std::memory_order_relaxed);
          if (w == 0) s.eng = engines[0].get();
        } else if (w == 0) {
          s.eng = (engines[0] = std::make_unique<engine>(cfg)).get();
        }
      } catch (...) {
        std::lock_guard<std::mutex> g(failing);
        failed = std::current_exception();  // rethrown after the join; all leave
      }
      // Release and acquire: the others use the engine worker 0 made.
      arrived.fetch_add(1, std::memory_order_release);
      s.ev.advanced();
      // Relaxed abandoned: it carries no data, and a worker that leaves uses none.
      progress::waiting wst{w};
      while (arrived.load(std::memory_order_acquire) < lists.size()) {
        if (abandoned.load(std::memory_order_relaxed)) return s.ev.done(wst);
        s.ev.wait(wst, progress::any, arrived.load(std::memory_order_relaxed));
      }
      s.ev.done(wst);
      if (!s.eng || (o.shared_nothing && !parts[w])) return;
      slots[w].start_ns = clock::now().time_since_epoch().count();
      std::int64_t cpu = thread_cpu_ns();
      shared& mine = o.shared_nothing ? *parts[w] : s;
      const std::size_t me = o.shared_nothing ? 0 : w;
      if (keep)
        work<true>(mine, me, lists[w]);
      else
        work<false>(mine, me, lists[w]);
      slots[w].end_ns = clock::now().time_since_epoch().count();
      slots[w].cpu_ns = thread_cpu_ns() - cpu;
    });
  };
  try {
    for (std::size_t w = 0; w < lists.size(); ++w)
      launch(w);
  } catch (...) {  // std::system_error: out of threads or memory for a stack
    abandoned.store(true, std::memory_order_relaxed);
    s.ev.advanced();
    for (auto& t : threads)
      t.join();
    throw;
  }
  for (auto& t : threads)
    t.join();
  sleeps += s.ev.sleeps();
  if (failed) std::rethrow_exception(failed);
  for (std::size_t w = 0; w < own.size(); ++w) {  // what each worker alone left
    slots[w].delivered_count = own[w][0].delivered_count;
    slots[w].bytes = std::move(own[w][0].bytes);
    slots[w].out = std::move(own[w][0].out);
  }
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
  const std::vector<rx_queues> queues =
      receive(cap, counts, o.shared_nothing ? rss_mode::addresses : o.rss);
  const rx_queues& rx = queues.front();
  std::vector<std::int64_t> clock(cap.packets.size());
  for (std::size_t i = 0; i < clock.size(); ++i)
    clock[i] = i == 0 ? cap.packets[0].ts_ns : std::max(clock[i - 1], cap.packets[i].ts_ns);
  {
    std::vector<std::unique_ptr<engine>> engines;
    std::vector<detail::worker_slot> slots(workers);
    res.pass_ns.push_back(detail::pass(engines, cap, rx, clock, o, true, slots, res.sleeps));
    res.pass_cpu_ns.push_back(detail::cpu_sum(slots));
    // With --shared-nothing, the engines' figures summed (the peak: each engine's own
    // peak, summed, which bounds the peak of the whole from above).
    for (auto& eng : engines) {
      res.held_bytes_at_end += eng->held_bytes();
      res.memory_bytes_at_end += eng->snapshot().memory_bytes;
      res.pending_at_end += detail::expire_all(*eng, cap);
      const stats st = eng->snapshot();
      for (std::size_t k = 0; k < st.v.size(); ++k)
        res.first.v[k] += st.v[k];
      res.first.memory_bytes += st.memory_bytes;
      res.first.peak_memory_bytes += st.peak_memory_bytes;
    }
    for (const auto& sl : slots)
      res.handed_off += sl.handed_off;
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
    std::vector<std::unique_ptr<engine>> engines;
    std::vector<detail::worker_slot> slots(q.lists.size());
    const std::int64_t ns = detail::pass(engines, cap, q, clock, o, false, slots, res.sleeps);
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
