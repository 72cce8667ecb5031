// SPDX-License-Identifier: MIT
// hotpath-qdisc's report: the table on stdout, the JSON file, the accounting
// complaint on stderr. Reads results only; runs nothing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "experiment.hpp"

namespace hotpath::sched::report {

// v in the largest of three units that keeps it >= 1: {1e6, 1e3, 1}, with the
// printf formats for each.
inline std::string scaled(double v, const char* mega, const char* kilo, const char* one) {
  char b[32];
  if (v >= 1e6)
    std::snprintf(b, sizeof b, mega, v / 1e6);
  else if (v >= 1e3)
    std::snprintf(b, sizeof b, kilo, v / 1e3);
  else
    std::snprintf(b, sizeof b, one, v);
  return b;
}
inline std::string rate(double v) {
  return scaled(v, "%.2f M", "%.1f k", "%.0f");
}
inline std::string ns(double v) {
  return scaled(v, "%.1fms", "%.1fus", "%.0fns");
}

inline void header(const options& o, const std::string& load) {
  std::printf(
      "hotpath-qdisc: limit %zu, batch %zu, transmit %.0f ns/packet (line rate %s pps), %s, "
      "%u x %.2f s per run\n%u cores; load average before the run: %s (other work on the "
      "machine skews every figure)\n",
      o.limit, o.batch, o.tx_ns, o.tx_ns > 0 ? rate(1e9 / o.tx_ns).c_str() : "unbounded",
      o.rate > 0 ? ("offered " + rate(o.rate) + "pps per sender").c_str() : "stream load", o.repeat,
      o.duration, std::thread::hardware_concurrency(), load.c_str());
  if (o.build_ns > 0) std::printf("senders spend %.0f ns per packet before enqueue\n", o.build_ns);
}

// One table: every strategy's median row at one sender count, against busylock's.
inline void group(const std::vector<result>& rs) {
  if (rs.empty()) return;
  const result* base = nullptr;
  for (auto& r : rs)
    if (r.strategy == busylock_strategy::name) base = &r;
  std::printf("\n%u sender%s + 1 transmit thread, %u cores\n", rs[0].senders,
              rs[0].senders == 1 ? "" : "s", std::thread::hardware_concurrency());
  std::printf("%-12s %11s %7s %9s %6s %4s %5s %5s %4s %17s %17s %5s %8s\n", "strategy",
              "delivered/s", "vs busy", "dropped", "drop%", "tx%", "wait%", "idle%", "cpu%",
              "tx wait p50/p99", "enqueue p50/p99", "Jain", "CPU/pkt");
  for (auto& r : rs) {
    char ratio[16] = "-";
    if (base && base->delivered_pps > 0)
      std::snprintf(ratio, sizeof ratio, "%.2fx", r.delivered_pps / base->delivered_pps);
    std::printf(
        "%-12s %11s %7s %9lld %5.1f%% %3.0f%% %4.0f%% %4.0f%% %3.0f%% %8s/%-8s %8s/%-8s %5.2f "
        "%8s%s\n",
        r.strategy.c_str(), rate(r.delivered_pps).c_str(), ratio, static_cast<long long>(r.dropped),
        r.drop_pct, 100 * r.tx_util, 100 * r.tx_wait_share, 100 * r.tx_idle_share,
        100 * r.tx_cpu_share, ns(r.tx_wait_p50).c_str(), ns(r.tx_wait_p99).c_str(),
        ns(r.enq_p50).c_str(), ns(r.enq_p99).c_str(), r.jain, ns(r.cpu_ns_per_pkt).c_str(),
        r.balanced ? "" : "  UNBALANCED");
  }
  std::fflush(stdout);
}

// What the columns mean, and how often the parameters were swapped.
inline void footer(const options& o, const std::vector<result>& all) {
  std::printf(
      "\nEach row is that strategy's median of %u rounds (by delivered/s); vs busy: its ratio to\n"
      "busylock's median row. delivered/s: packets transmitted per second. The transmit thread's\n"
      "window: tx%% transmitting, wait%% waiting for the qdisc lock, idle%% finding the FIFO "
      "empty;\n"
      "cpu%% its CPU time over the window; tx wait: its lock wait per batch (p50/p99);\n"
      "enqueue: one enqueue() call as a sender sees it; Jain: fairness of delivered packets "
      "across\n"
      "senders; CPU/pkt: process CPU per delivered packet (includes the %.0f ns simulated "
      "transmit).\n",
      o.repeat, o.tx_ns);
  std::uint64_t swaps = 0;
  for (auto& r : all)
    swaps += r.swaps;
  if (swaps != 0)
    std::printf("Parameters (limit, batch) were swapped %llu times while traffic ran (rcu_cell).\n",
                static_cast<unsigned long long>(swaps));
}

inline void unbalanced(const result& r) {
  std::fprintf(stderr,
               "hotpath-qdisc: %s, %u senders: accounting violated: offered %lld, enqueued %lld, "
               "dropped %lld, transmitted %lld, backlog %lld, out-of-order %lld\n",
               r.strategy.c_str(), r.senders, static_cast<long long>(r.offered),
               static_cast<long long>(r.enqueued), static_cast<long long>(r.dropped),
               static_cast<long long>(r.transmitted), static_cast<long long>(r.backlog),
               static_cast<long long>(r.order_violations));
}

inline void json_run(std::ostream& f, const result& r) {
  f << R"(    {"strategy": ")" << r.strategy << R"(", "senders": )" << r.senders
    << ", \"seconds\": " << r.seconds << ", \"offered\": " << r.offered
    << ", \"enqueued\": " << r.enqueued << ", \"dropped\": " << r.dropped
    << ", \"transmitted\": " << r.transmitted << ", \"backlog\": " << r.backlog
    << ", \"delivered_pps\": " << r.delivered_pps << ", \"drop_pct\": " << r.drop_pct
    << ", \"tx_utilisation\": " << r.tx_util << ", \"tx_lock_wait_share\": " << r.tx_wait_share
    << ", \"tx_idle_share\": " << r.tx_idle_share << ", \"tx_cpu_share\": " << r.tx_cpu_share
    << ", \"tx_lock_wait_p50_ns\": " << r.tx_wait_p50
    << ", \"tx_lock_wait_p99_ns\": " << r.tx_wait_p99 << ", \"enqueue_p50_ns\": " << r.enq_p50
    << ", \"enqueue_p99_ns\": " << r.enq_p99 << ", \"jain\": " << r.jain
    << ", \"cpu_ns_per_delivered\": " << r.cpu_ns_per_pkt << ", \"param_swaps\": " << r.swaps
    << ", \"order_violations\": " << r.order_violations << ", \"round\": " << r.round
    << ", \"median\": " << (r.median ? "true" : "false")
    << ", \"balanced\": " << (r.balanced ? "true" : "false") << "}";
}

// Every round of every run, with the settings and the machine's state.
inline bool json(const std::string& path, const options& o, double ns_per_iter,
                 const std::string& load, const std::vector<result>& rs) {
  std::ofstream f(path);
  if (!f) return false;
  f << "{\n  \"cores\": " << std::thread::hardware_concurrency() << ",\n  \"loadavg_1min\": \""
    << load << "\",\n  \"duration_s\": " << o.duration << ",\n  \"repeat\": " << o.repeat
    << ",\n  \"limit\": " << o.limit << ",\n  \"batch\": " << o.batch
    << ",\n  \"tx_ns\": " << o.tx_ns << ",\n  \"build_ns\": " << o.build_ns
    << ",\n  \"rate_per_sender\": " << o.rate << ",\n  \"burn_ns_per_iter\": " << ns_per_iter
    << ",\n  \"runs\": [\n";
  for (std::size_t i = 0; i < rs.size(); ++i) {
    json_run(f, rs[i]);
    f << (i + 1 < rs.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
  return static_cast<bool>(f);
}

}  // namespace hotpath::sched::report
