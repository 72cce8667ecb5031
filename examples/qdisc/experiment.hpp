// SPDX-License-Identifier: MIT
// hotpath-qdisc's experiment: one run of one strategy at one sender count on the
// traffic driver (traffic.hpp), boiled down to the figures the report prints.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/measure.hpp"
#include "qdisc.hpp"
#include "traffic.hpp"

namespace hotpath::sched {

struct options {
  std::vector<std::string> strategies;  // empty: all
  std::vector<unsigned> senders{1, 2, 4, 8};
  double duration = 0.25;  // seconds per run
  unsigned repeat = 5;     // rounds; the table shows each strategy's median round
  std::size_t limit = 1000;
  std::size_t batch = 64;
  double tx_ns = 200;   // simulated transmit cost per packet
  double rate = 0;      // packets/s per sender; 0: stream (as fast as possible)
  double build_ns = 0;  // sender work per packet outside the lock
  std::uint32_t len = 1000;
  double swap_ms = 50;  // swap the parameter block this often (same values)
  unsigned sample = 8;  // time one enqueue in `sample`
  std::string json;
};

// What one run showed.
struct result {
  std::string strategy;
  unsigned senders = 0;
  double seconds = 0;
  std::int64_t offered = 0, enqueued = 0, dropped = 0, transmitted = 0, backlog = 0;
  std::int64_t order_violations = 0;
  double delivered_pps = 0, drop_pct = 0, tx_util = 0;
  double tx_wait_share = 0;  // share of the window spent waiting for the qdisc lock
  double tx_idle_share = 0;  // share spent finding the FIFO empty (polling, then yielding)
  double tx_cpu_share = 0;   // the transmit thread's CPU time over the window
  double tx_wait_p50 = 0, tx_wait_p99 = 0, enq_p50 = 0, enq_p99 = 0;
  double jain = 0, cpu_ns_per_pkt = 0;
  std::uint64_t swaps = 0;
  unsigned round = 0;
  bool median = false;  // the round the table shows
  bool balanced = true;
};

// The calibrated spin steps for the simulated costs.
struct work {
  double ns_per_iter = 1;
  std::uint64_t tx_iters = 0, build_iters = 0;
};

inline traffic_options traffic_for(const options& o, unsigned senders, const work& w) {
  traffic_options t;
  t.senders = senders;
  t.window = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(o.duration));
  t.rate = o.rate;
  t.build_iters = w.build_iters;
  t.tx_iters = w.tx_iters;
  t.len = o.len;
  t.sample = o.sample;
  return t;
}

// The figures of one run: packet accounting from the qdisc's counters, the rest from
// what the driver measured.
template <class S>
result summarise(const qdisc<S>& q, const traffic_result& t) {
  result r;
  r.strategy = std::string(S::name);
  r.senders = static_cast<unsigned>(t.offered.size());
  const auto window = static_cast<double>(t.window_ns);
  r.seconds = window / 1e9;
  const counters c = q.stats();
  for (auto v : t.offered)
    r.offered += v;
  r.enqueued = c[enqueued];
  r.dropped = c[dropped];
  r.transmitted = c[transmitted];
  r.backlog = static_cast<std::int64_t>(q.backlog());
  r.order_violations = t.order_violations;
  r.balanced = r.offered == r.enqueued + r.dropped && r.enqueued == r.transmitted + r.backlog &&
               r.order_violations == 0;
  const auto sent = static_cast<double>(r.transmitted);
  r.delivered_pps = sent / r.seconds;
  r.drop_pct =
      r.offered ? 100.0 * static_cast<double>(r.dropped) / static_cast<double>(r.offered) : 0;
  r.tx_util = static_cast<double>(t.busy_ns) / window;
  r.tx_idle_share = static_cast<double>(t.idle_ns) / window;
  r.tx_wait_share = static_cast<double>(t.wait_ns) / window;
  r.tx_cpu_share = static_cast<double>(t.tx_cpu_ns) / window;
  r.tx_wait_p50 = t.tx_wait.percentile(0.50);
  r.tx_wait_p99 = t.tx_wait.percentile(0.99);
  r.enq_p50 = t.enqueue.percentile(0.50);
  r.enq_p99 = t.enqueue.percentile(0.99);
  r.jain = measure::jain_index(t.delivered);
  r.cpu_ns_per_pkt = r.transmitted ? static_cast<double>(t.process_cpu_ns) / sent : 0;
  return r;
}

// One run: a fresh qdisc, traffic for o.duration while this thread swaps in a fresh
// parameter block (the same values) every o.swap_ms, as a control path would.
template <class S>
result run_once(const options& o, unsigned senders, const work& w) {
  qdisc<S> q(params{o.limit, o.batch}, std::max<std::size_t>(o.limit, 8192));
  std::uint64_t swaps = 0;
  const auto t = run_traffic(q, traffic_for(o, senders, w), [&] {
    if (o.swap_ms <= 0) return;
    const auto period = std::chrono::microseconds(static_cast<std::int64_t>(o.swap_ms * 1000));
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.duration);
    for (auto next = std::chrono::steady_clock::now() + period; next < end; next += period) {
      std::this_thread::sleep_until(next);
      q.set_params(params{o.limit, o.batch});
      ++swaps;
    }
  });
  result r = summarise(q, t);
  r.swaps = swaps;
  return r;
}

template <class... S>
struct strategy_list {};
using all_strategies =
    strategy_list<tas_strategy, ticket_strategy, busylock_strategy, queued_strategy,
                  priority_strategy, defer_strategy, defer_priority_strategy>;

template <class... S>
std::vector<std::string> names(strategy_list<S...>) {
  return {std::string(S::name)...};
}

template <class... S>
std::optional<result> run_named(strategy_list<S...>, const std::string& name, const options& o,
                                unsigned senders, const work& w) {
  std::optional<result> r;
  ((name == S::name ? (void)(r = run_once<S>(o, senders, w)) : void()), ...);
  return r;
}

}  // namespace hotpath::sched
