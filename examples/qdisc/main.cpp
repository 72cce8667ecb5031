// SPDX-License-Identifier: MIT
// hotpath-qdisc: the busylock experiment, 2010-2025. N sender threads enqueue
// packets into one qdisc, one transmit thread dequeues batches and "transmits"
// each packet at a simulated line rate (a calibrated per-packet cost, outside the
// lock). Every lock strategy of the kernel's history runs at every sender count;
// the table compares each against busylock, measured in the same run.
//
// The parts: traffic.hpp drives the threads (the tests use it too), experiment.hpp
// turns one run into figures, report.hpp prints them; this file reads the command
// line and runs the rounds.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/measure.hpp"
#include "experiment.hpp"
#include "report.hpp"

namespace {

using namespace hotpath::sched;

constexpr std::string_view usage = R"(usage: hotpath-qdisc [options]

Many sender threads enqueue into one qdisc, one transmit thread dequeues in
batches and transmits each packet at a simulated line rate. Runs every lock
strategy at every sender count and prints a table with ratios against busylock.

options:
  --strategies LIST  comma-separated subset of: %s
                     (default: all)
  --senders LIST     sender thread counts, comma-separated (default: 1,2,4,8)
  --duration SEC     measured window per run (default: 0.25)
  --repeat N         rounds of every strategy, interleaved so that background load
                     hits them alike; the table shows each one's median round by
                     delivered packets/s (default: 5)
  --limit N          qdisc limit in packets, as txqueuelen (default: 1000)
  --batch N          most packets per dequeue, as dev_tx_weight (default: 64, at most 4096)
  --tx-ns NS         simulated transmit cost per packet, outside the lock (default: 200)
  --rate PPS         offered packets/s per sender; 0 = stream load (default: 0)
  --build-ns NS      sender work per packet before enqueue, outside the lock (default: 0)
  --len BYTES        packet length, for the byte counter (default: 1000)
  --swap-ms MS       a control thread swaps in a fresh parameter block (same values)
                     every MS milliseconds while traffic runs; 0 = never (default: 50)
  --sample N         time one enqueue in N for the latency percentiles (default: 8)
  --json FILE        also write every result to FILE as JSON
  --help             this text

Exit status: 0 on success, 1 if a run's packet accounting does not balance
(offered = enqueued + dropped, enqueued = transmitted + backlog), 2 on bad options.
)";

// ---------------------------------------------------------------- parsing

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto end = std::min(s.find(',', start), s.size());
    out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string k;
  for (auto& n : names)
    k += (k.empty() ? "" : ",") + n;
  return k;
}

template <class T>
bool parse_num(std::string_view s, T& out) {
  if (s.empty()) return false;
  if constexpr (std::is_floating_point_v<T>) {
    std::istringstream in{std::string(s)};
    in >> out;
    return in && in.peek() == EOF && std::isfinite(out);
  } else {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  }
}

// Parses `value` into `out` and checks lo <= out <= hi; the error, or empty.
template <class T>
std::string number(std::string_view value, T& out, T lo, T hi, const std::string& bad,
                   const char* range) {
  if (!parse_num(value, out) || out < lo || out > hi) return bad + " (" + range + ")";
  return {};
}

// Sets one option that takes a value; returns an error message, or empty.
std::string set_option(std::string_view arg, std::string_view value, options& o) {
  const std::string bad = "bad value '" + std::string(value) + "' for " + std::string(arg);
  constexpr double inf = HUGE_VAL;
  if (arg == "--strategies") {
    const auto known = names(all_strategies{});
    o.strategies = split(value);
    for (auto& s : o.strategies)
      if (std::find(known.begin(), known.end(), s) == known.end())
        return "unknown strategy '" + s + "' (known: " + joined(known) + ")";
    return {};
  }
  if (arg == "--senders") {
    o.senders.clear();
    for (auto& s : split(value)) {
      unsigned n = 0;
      if (const auto e = number(s, n, 1u, 256u, bad, "thread counts 1..256"); !e.empty()) return e;
      o.senders.push_back(n);
    }
    return {};
  }
  if (arg == "--duration") {
    if (!parse_num(value, o.duration) || o.duration <= 0 || o.duration > 3600)
      return bad + " (seconds, > 0)";
    return {};
  }
  if (arg == "--repeat") return number(value, o.repeat, 1u, 1000u, bad, "1..1000");
  if (arg == "--limit")
    return number(value, o.limit, std::size_t{1}, std::size_t{1} << 16, bad, "1..65536");
  if (arg == "--batch")
    return number(value, o.batch, std::size_t{1}, std::size_t{4096}, bad, "1..4096");
  if (arg == "--tx-ns") return number(value, o.tx_ns, 0.0, 1e7, bad, "0..1e7");
  if (arg == "--rate") return number(value, o.rate, 0.0, inf, bad, "packets/s, >= 0");
  if (arg == "--build-ns") return number(value, o.build_ns, 0.0, 1e7, bad, "0..1e7");
  if (arg == "--len") return number(value, o.len, 1u, 65535u, bad, "1..65535");
  if (arg == "--swap-ms") return number(value, o.swap_ms, 0.0, inf, bad, "milliseconds, >= 0");
  if (arg == "--sample") return number(value, o.sample, 1u, ~0u, bad, ">= 1");
  if (arg == "--json") {
    if (value.empty()) return bad;
    o.json = value;
    return {};
  }
  return "unknown option '" + std::string(arg) + "'";
}

// Returns an error message, or empty on success; sets help if --help was given.
std::string parse(int argc, char** argv, options& o, bool& help) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    if (arg == "--help" || arg == "-h") {
      help = true;
      continue;
    }
    static constexpr std::string_view with_value[] = {
        "--strategies", "--senders",  "--duration", "--repeat",  "--limit",  "--batch", "--tx-ns",
        "--rate",       "--build-ns", "--len",      "--swap-ms", "--sample", "--json"};
    if (std::find(std::begin(with_value), std::end(with_value), arg) == std::end(with_value))
      return "unknown option '" + std::string(argv[i]) + "'";
    if (!has_value) {
      if (i + 1 >= argc) return "option " + std::string(arg) + " needs a value";
      value = argv[++i];
    }
    if (auto err = set_option(arg, value, o); !err.empty()) return err;
  }
  if (o.strategies.empty()) o.strategies = names(all_strategies{});
  return {};
}

// ---------------------------------------------------------------- the rounds

// Every strategy at `senders`, o.repeat rounds interleaved so that background load
// hits them alike. Appends every round to `all`; returns each strategy's median
// round by delivered packets/s. Clears `balanced` if a run's accounting failed.
std::vector<result> rounds_at(const options& o, unsigned senders, const work& w,
                              std::vector<result>& all, bool& balanced) {
  std::vector<std::vector<result>> rounds(o.strategies.size());
  for (unsigned round = 0; round < o.repeat; ++round) {
    for (std::size_t i = 0; i < o.strategies.size(); ++i) {
      auto r = run_named(all_strategies{}, o.strategies[i], o, senders, w);
      r->round = round;
      if (!r->balanced) {
        balanced = false;
        report::unbalanced(*r);
      }
      rounds[i].push_back(*r);
    }
  }
  std::vector<result> medians;
  for (auto& rs : rounds) {
    std::sort(rs.begin(), rs.end(),
              [](const result& a, const result& b) { return a.delivered_pps < b.delivered_pps; });
    rs[rs.size() / 2].median = true;
    medians.push_back(rs[rs.size() / 2]);
    all.insert(all.end(), rs.begin(), rs.end());
  }
  return medians;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bool help = false;
  const std::string err = parse(argc, argv, o, help);
  if (help) {
    std::printf(usage.data(), joined(names(all_strategies{})).c_str());
    return 0;
  }
  if (!err.empty()) {
    std::fprintf(stderr, "hotpath-qdisc: %s\nTry 'hotpath-qdisc --help'.\n", err.c_str());
    return 2;
  }

  work w;
  w.ns_per_iter = hotpath::measure::spin_ns_per_iter();
  w.tx_iters = static_cast<std::uint64_t>(o.tx_ns / w.ns_per_iter);
  w.build_iters = static_cast<std::uint64_t>(o.build_ns / w.ns_per_iter);
  const std::string load = hotpath::measure::load_average();
  report::header(o, load);

  std::vector<result> all;
  bool balanced = true;
  for (unsigned n : o.senders)
    report::group(rounds_at(o, n, w, all, balanced));
  report::footer(o, all);
  if (!o.json.empty() && !report::json(o.json, o, w.ns_per_iter, load, all)) {
    std::fprintf(stderr, "hotpath-qdisc: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return balanced ? 0 : 1;
}
