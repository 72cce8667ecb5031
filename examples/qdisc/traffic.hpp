// SPDX-License-Identifier: MIT
// The qdisc's traffic driver, used by hotpath-qdisc and by its tests: N sender
// threads offer packets to one qdisc, one transmit thread dequeues them in batches and
// "transmits" each at a simulated cost, checking every sender's order and counting
// what each sender got through. Measurement rides along (sampled enqueue latency, the
// transmit thread's lock wait, busy and idle time, CPU time); what a run means is the
// caller's business (examples/qdisc/experiment.hpp for the program, the tests' checks).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "common/measure.hpp"
#include "qdisc.hpp"

namespace hotpath::sched {

struct traffic_options {
  unsigned senders = 1;
  // Each sender offers at most this many packets, and stops once the window has
  // passed (counted from when every thread runs) and `during` has returned; every
  // sender offers at least one, however loaded the machine.
  std::int64_t per_sender = std::numeric_limits<std::int64_t>::max();
  std::chrono::nanoseconds window{std::chrono::milliseconds(250)};
  double rate = 0;                // packets/s per sender; 0: as fast as possible
  std::uint64_t build_iters = 0;  // measure::spin() steps per packet before enqueue
  std::uint64_t tx_iters = 0;     // measure::spin() steps per packet transmitted
  std::uint32_t len = 100;        // every packet's length
  unsigned sample = 8;            // time one enqueue in `sample`
  bool drain = false;             // after the senders stop, transmit until the FIFO is empty
  std::size_t max_batch = 4096;   // the transmit thread's buffer
};

struct traffic_result {
  std::vector<std::int64_t> offered, accepted, delivered;  // per sender
  std::int64_t order_violations = 0;  // a sender's packet delivered after a later one
  std::size_t largest_batch = 0;
  measure::latency_histogram enqueue;  // sampled enqueue() calls, all senders
  measure::latency_histogram tx_wait;  // the transmit thread's wait for the lock, per batch
  // The transmit thread's window, from the start until it stopped, and its parts.
  std::uint64_t window_ns = 0, busy_ns = 0, idle_ns = 0, wait_ns = 0;
  std::uint64_t tx_cpu_ns = 0;       // the transmit thread's CPU time
  std::uint64_t process_cpu_ns = 0;  // every thread's, from the start until all joined
};

// Where the transmit thread sleeps while the FIFO is empty.
struct doorbell {
  alignas(64) std::atomic<bool> asleep{false};  // read by every sender after each enqueue
  std::mutex m;
  std::condition_variable cv;

  template <class Ready>
  void sleep(Ready ready) {
    std::unique_lock lk(m);
    asleep.store(true, std::memory_order_relaxed);  // ordered by m for a ringer that sees it
    cv.wait_for(lk, std::chrono::microseconds(200), ready);
    asleep.store(false, std::memory_order_relaxed);
  }
  void ring() {
    // One ringer per sleep. Taking m orders our enqueue before the sleeper's next
    // look at the FIFO, or our notify after it has started to wait.
    if (!asleep.exchange(false, std::memory_order_relaxed)) return;
    const std::scoped_lock g(m);
    cv.notify_one();
  }
};

namespace traffic_detail {

// What the threads of one run share.
template <class S>
struct shared {
  shared(qdisc<S>& queue, const traffic_options& opts, traffic_result& res)
      : q(queue), o(opts), r(res), enq(opts.senders) {}

  qdisc<S>& q;
  const traffic_options& o;
  traffic_result& r;
  std::atomic<unsigned> ready{0}, finished{0};
  std::atomic<bool> go{false}, stop{false};
  doorbell bell;
  std::vector<measure::latency_histogram> enq;  // per sender, merged after the run

  void arrive() {
    ready.fetch_add(1, std::memory_order_relaxed);
    // Acquire pairs with the release in run_traffic: the start is published.
    while (!go.load(std::memory_order_acquire))
      std::this_thread::yield();
  }
};

// Waits until the next packet is due at o.rate (sleeps if far, yields if near).
inline void pace(std::uint64_t& next, std::uint64_t period) {
  next += period;
  for (std::uint64_t t = measure::now_ns(); t < next; t = measure::now_ns()) {
    if (next - t > 200000)
      std::this_thread::sleep_for(std::chrono::nanoseconds(next - t - 100000));
    else
      std::this_thread::yield();
  }
}

template <class S>
void sender(shared<S>& s, unsigned id) {
  const std::uint64_t period = s.o.rate > 0 ? static_cast<std::uint64_t>(1e9 / s.o.rate) : 0;
  measure::latency_histogram& h = s.enq[id];
  std::int64_t i = 0, ok = 0;
  s.arrive();
  std::uint64_t next = measure::now_ns();
  for (; i < s.o.per_sender; ++i) {
    if (i > 0 && s.stop.load(std::memory_order_relaxed)) break;
    if (period != 0) pace(next, period);
    measure::spin(s.o.build_iters);
    const packet p{id, static_cast<std::uint32_t>(i), s.o.len, 0};
    verdict v;
    if ((i + 1) % s.o.sample == 0) {
      const auto t0 = measure::now_ns();
      v = s.q.enqueue(p);
      h.record(measure::now_ns() - t0);
    } else {
      v = s.q.enqueue(p);
    }
    ok += v == verdict::ok;
    // The transmit thread sleeps when the FIFO is empty; whoever finds it asleep
    // after an enqueue wakes it (__netif_schedule raising the tx softirq).
    if (s.bell.asleep.load(std::memory_order_relaxed)) s.bell.ring();
  }
  s.r.offered[id] = i;
  s.r.accepted[id] = ok;
  // Release: with drain, the transmit thread's acquire sees every enqueue of ours.
  s.finished.fetch_add(1, std::memory_order_release);
}

// Idle: poll the backlog hint (not the lock) for a few microseconds, then sleep until
// a sender rings (or 200 us pass: a ring can be missed in the instant before we sleep).
template <class S>
void idle(shared<S>& s) {
  const auto i0 = measure::now_ns();
  unsigned spins = 0;
  while (s.q.backlog() == 0 && measure::now_ns() - i0 < 5000 &&
         !s.stop.load(std::memory_order_relaxed))
    hotpath::spin_wait::relax(spins);
  if (s.q.backlog() == 0) s.bell.sleep([&] { return s.q.backlog() != 0; });
  s.r.idle_ns += measure::now_ns() - i0;
}

template <class S>
void transmitter(shared<S>& s) {
  traffic_result& r = s.r;
  std::vector<packet> buf(s.o.max_batch);
  std::vector<std::int64_t> last(s.o.senders, -1);
  s.arrive();
  const auto t_start = measure::now_ns();
  for (;;) {
    if (!s.o.drain && s.stop.load(std::memory_order_relaxed)) break;
    // Acquire pairs with each sender's release: once all are done, the FIFO holds
    // everything they enqueued, and an empty dequeue means it is drained.
    const bool done = s.o.drain && s.finished.load(std::memory_order_acquire) == s.o.senders;
    if (!done && s.q.backlog() == 0) {
      idle(s);
      continue;
    }
    const auto t0 = measure::now_ns();
    std::uint64_t t_acq = 0;
    const std::size_t n =
        s.q.dequeue_batch(buf.data(), buf.size(), [&] { t_acq = measure::now_ns(); });
    r.tx_wait.record(t_acq - t0);
    r.wait_ns += t_acq - t0;
    if (n == 0) {
      if (done) break;
      continue;
    }
    r.largest_batch = std::max(r.largest_batch, n);
    const auto b0 = measure::now_ns();
    for (std::size_t i = 0; i < n; ++i) {
      const packet& p = buf[i];
      if (static_cast<std::int64_t>(p.seq) <= last[p.sender]) ++r.order_violations;
      last[p.sender] = p.seq;
      ++r.delivered[p.sender];
      measure::spin(s.o.tx_iters);
    }
    r.busy_ns += measure::now_ns() - b0;
  }
  r.window_ns = measure::now_ns() - t_start;
  r.tx_cpu_ns = static_cast<std::uint64_t>(measure::thread_cpu_time().count());
}

}  // namespace traffic_detail

// Runs o.senders senders and one transmit thread against q. `during` runs on the
// calling thread while traffic flows (a control path swapping parameters, say); the
// senders stop once both it has returned and o.window has passed since every thread
// was running.
template <class S, class During>
traffic_result run_traffic(qdisc<S>& q, const traffic_options& o, During&& during) {
  traffic_result r;
  r.offered.assign(o.senders, 0);
  r.accepted.assign(o.senders, 0);
  r.delivered.assign(o.senders, 0);
  traffic_detail::shared<S> s(q, o, r);
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < o.senders; ++i)
    threads.emplace_back([&s, i] { traffic_detail::sender(s, i); });
  threads.emplace_back([&s] { traffic_detail::transmitter(s); });
  while (s.ready.load(std::memory_order_relaxed) < o.senders + 1)
    std::this_thread::yield();

  const auto cpu0 = measure::process_cpu_time();
  const auto deadline = std::chrono::steady_clock::now() + o.window;
  s.go.store(true, std::memory_order_release);
  during();
  std::this_thread::sleep_until(deadline);
  s.stop.store(true, std::memory_order_relaxed);
  for (auto& t : threads)
    t.join();
  r.process_cpu_ns = static_cast<std::uint64_t>((measure::process_cpu_time() - cpu0).count());
  for (auto& h : s.enq)
    r.enqueue.merge(h);
  return r;
}

template <class S>
traffic_result run_traffic(qdisc<S>& q, const traffic_options& o) {
  return run_traffic(q, o, [] {});
}

}  // namespace hotpath::sched
