// SPDX-License-Identifier: MIT
// One worker's loop: takes its packets in capture order, steers fragments to their owners,
// feeds the engine, sweeps at the low watermark, and keeps within the window of the others
// while memory is short.
#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/measure.hpp"
#include "engine.hpp"
#include "handoff_ring.hpp"
#include "pcap_io.hpp"
#include "progress.hpp"
#include "rss.hpp"

namespace defrag::driver {

// A datagram delivered: bytes [offset, offset + length) of run_result::bytes.
struct delivered {
  std::uint64_t completed_by;  // capture index of the packet that completed it
  std::int64_t ts_ns;          // that packet's capture time
  std::size_t offset;
  std::uint32_t length;
};

namespace detail {

inline constexpr std::size_t done = std::numeric_limits<std::size_t>::max();
// reached(done) wakes every sleeper: no need is above it (progress.hpp).

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
  // Where a blocked worker sleeps, and every progress it may wait for is reported.
  progress ev;
  // Pace whatever the memory (--no-steer: only pacing keeps a datagram's fragments in
  // capture order); otherwise only while memory is short (maybe_pace in work()).
  bool always_paced = false;

  handoff_ring& ring(std::size_t from, std::size_t to) { return *rings[from * slots.size() + to]; }
  // The position the slowest other worker must reach before `index` is within reach,
  // or, with `slack`, within half the window and half the skew: a worker that sleeps
  // at the window's edge is woken once the slowest has closed half the gap, and then
  // has half a window to go before it waits again (woken at the edge, it waited again
  // after a few packets: a wake-up per position published).
  std::size_t reach(std::size_t index, bool slack = false) const {
    const std::size_t w = slack ? window / 2 : window;
    const std::int64_t k = slack ? skew_ns / 2 : skew_ns;
    const auto by_time =
        std::lower_bound(clock.begin(), clock.end(), clock[index] - k) - clock.begin();
    return std::max<std::size_t>(index > w ? index - w : 0, static_cast<std::size_t>(by_time));
  }
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

// The least capture time at which any worker may still feed the engine: `now` for this
// one; for another still running, the clock up to the packet before its position (it
// has taken every packet of its below it, and takes the rest in capture order).
// Relaxed: a position only grows, so an old one is a lower bound too.
inline std::int64_t low_watermark(const shared& s, std::size_t me, std::int64_t now) {
  std::int64_t low = now;
  for (std::size_t w = 0; w < s.slots.size(); ++w) {
    const std::size_t at = w == me ? done : s.slots[w].position.load(std::memory_order_relaxed);
    if (at != done) low = std::min(low, s.clock[at > 0 ? at - 1 : 0]);
  }
  return low;
}

// Sweeps a share of the buckets if the low watermark passed the next tick and this
// worker wins the race to advance it. Swept at the watermark, not at this worker's own
// clock, so that a worker ahead never expires a datagram that a slower one may still
// bring a fragment for in time. While a slower worker holds the tick back, the others
// look again only every 64 packets (`skip`): each look reads every worker's line.
inline void maybe_expire(shared& s, std::size_t me, std::int64_t now, unsigned& skip) {
  // Relaxed: the tick only spaces sweeps out; the engine's locks order what they touch.
  std::int64_t tick = s.next_tick.load(std::memory_order_relaxed);
  if (now < tick) return;
  if (skip > 0) {
    --skip;
    return;
  }
  const std::int64_t low = low_watermark(s, me, now);
  if (low < tick) {
    skip = 63;
    return;
  }
  if (!s.next_tick.compare_exchange_strong(tick, low + s.tick_ns, std::memory_order_relaxed))
    return;
  now = low;
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
  progress::waiting wst{me};
  for (int round = 0; !within(seen); ++round) {
    if (round > 0) {
      // Still steering, it may wait for room in a ring as well: any progress wakes it.
      const bool steering = meanwhile();
      s.ev.wait(wst, steering ? progress::any : s.reach(index, true), seen);
    }
    std::size_t slowest = done;
    for (std::size_t w = 0; w < s.slots.size(); ++w)
      // Relaxed: pacing only; no data is published through a position (progress's
      // fences order the positions against a sleeper's registration).
      if (w != me) slowest = std::min(slowest, s.slots[w].position.load(std::memory_order_relaxed));
    seen = slowest;
  }
  s.ev.done(wst);
}

// A worker steers everything it received before it processes anything, in bursts of
// steer_first_burst that each publish, as far as its rings hold (work()). What a full
// ring stopped it steers later, steer_burst at a time, and at least steer_ahead capture
// indices ahead of the packet it processes, so that the others rarely find it has not
// yet steered what they wait for (with bursts of 16, two workers were 10-20% slower).
inline constexpr std::size_t steer_first_burst = 1024;
inline constexpr std::size_t steer_ahead = 512;
inline constexpr std::size_t steer_burst = 64;

template <bool Keep>
void work(shared& s, std::size_t me, std::span<const std::uint32_t> mine) {
  worker_slot& slot = s.slots[me];
  const std::size_t workers = s.slots.size();
  [[maybe_unused]] std::size_t next = 0;  // least capture index this worker may take next
  unsigned sweep_skip = 0;                // see maybe_expire()
  auto process = [&](std::uint32_t i) {
    // A worker takes its packets in capture order (with steering: all those it owns).
    assert(i >= next);
#ifndef NDEBUG
    next = std::size_t{i} + 1;
#endif
    const pcap_io::record& r = s.cap.packets[i];
    maybe_expire(s, me, r.ts_ns, sweep_skip);
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
  // Publishes its position every 64 packets, and before capture time passes skew_ns
  // beyond the last time (in sparse traffic 64 packets span seconds), for pace() and
  // the low watermark; then paces, if memory is short (driver.hpp, run_options::window).
  std::size_t n = 0;
  std::int64_t paced_at = std::numeric_limits<std::int64_t>::min();
  std::size_t seen = 0;  // see pace()
  auto maybe_pace = [&](std::uint32_t i, auto&& meanwhile) {
    if ((n++ & 63) != 0 && s.clock[i] <= paced_at + s.skew_ns) return;
    paced_at = s.clock[i];
    // Positions only grow: pace() relies on it. (Ours: only this thread stores it.)
    assert(i >= slot.position.load(std::memory_order_relaxed));
    slot.position.store(i, std::memory_order_relaxed);  // see pace(), low_watermark()
    s.ev.reached(i);
    if (s.always_paced || s.eng->memory_short()) pace(s, me, i, seen, meanwhile);
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
      maybe_pace(mine[k], [] { return false; });
      process(mine[k]);
    }
    slot.position.store(done, std::memory_order_relaxed);
    s.ev.reached(done);
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
    s.ev.advanced();
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
    bool freed = false;  // room in a ring, whose producer may be blocked on it
    for (std::size_t w = 0; w < workers; ++w) {
      if (w == me) continue;
      std::uint32_t v;
      if (s.ring(w, me).peek(v, prefetch) && v < x) x = v, from = w;
      freed |= s.ring(w, me).take_freed();
    }
    if (freed) s.ev.advanced();
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
  auto meanwhile = [&] {
    steer(steer_burst);
    return r < mine.size();  // more to steer
  };
  // Given no packet, it has steered them all: steer() never moves, so say it here. (The
  // others wait for it before they take anything: review, a worker given nothing and
  // owning a handed-off packet, the other waiting for it in pace().)
  if (mine.empty()) {
    slot.received.store(done, std::memory_order_release);
    s.ev.advanced();
  }
  // Everything first: an owner then never waits for this worker's steering while it
  // has no core (512 ahead of its processing, one descheduled worker held every owner
  // back when workers outnumbered cores). The headers of the packets handed over are
  // read twice, here and by their owner.
  while (r < mine.size() && steer(steer_first_burst) != 0) {
  }
  std::size_t ahead_at = 0;  // own packets' headers prefetched before mine[ahead_at]
  unsigned ahead = 0;        // after mine[p]
  progress::waiting wst{me};
  for (;;) {
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
      s.ev.done(wst);
      continue;
    }
    if (x == none && r == mine.size()) {
      reload();
      // All steered (ours said so by the steer() that reached the end, or at the
      // start), all taken.
      if (horizon == done && first_handed(from) == none) {
        s.ev.done(wst);
        break;
      }
    }
    // Blocked: what comes first may still be steered by another worker (which may wait
    // for ours), or there is nothing yet.
    if (steer(steer_burst) != 0) {
      s.ev.done(wst);
      continue;
    }
    // Nothing to steer either (done, or a ring full): say how far this worker has come,
    // (A sleeper in pace() counts on this: the position a blocked worker publishes is
    // above everything it waits on, which lies ahead of the sleeper, so it is at least
    // the sleeper's need and wakes it.)
    // for pace(). The next packet it processes is at least the first it holds, its own
    // next one to steer and every other worker's `received`. (Left at the last packet
    // processed, a worker that owns little held back, in pace(), the one it was handing
    // packets to, which then never drained its full ring: review, 10000 datagrams
    // between two hosts at 2-4 workers.)
    reload();
    // (next_own() is mine[r] when everything steered is taken.)
    x = std::min(first_handed(from), next_own());  // after the load, as above
    const std::size_t bound = std::min<std::size_t>(x == none ? done : x, horizon);
    if (bound != done && bound > slot.position.load(std::memory_order_relaxed)) {
      slot.position.store(bound, std::memory_order_relaxed);  // see pace(), low_watermark()
      s.ev.reached(bound);
    }
    s.ev.wait(wst, progress::any, horizon + bound);
  }
  slot.position.store(done, std::memory_order_relaxed);
  s.ev.reached(done);
}

}  // namespace detail
}  // namespace defrag::driver
