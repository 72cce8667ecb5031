// SPDX-License-Identifier: MIT
// hotpath-defrag: reassembles the IPv4/IPv6 fragments of a capture (or of traffic made in
// process) with worker threads sharing one defrag::engine, and writes every datagram a
// host would deliver.
#include <malloc.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "driver.hpp"
#include "engine.hpp"
#include "pcap_io.hpp"
#include "synthetic.hpp"
#include "verdict.hpp"

namespace {

constexpr std::string_view usage = R"(usage: hotpath-defrag [options] INPUT -w OUTPUT
       hotpath-defrag [options] --synthetic [-w OUTPUT]

Reassembles the IPv4 and IPv6 fragments of INPUT (pcap or pcapng: Ethernet with or
without VLAN tags, raw IPv4/IPv6, BSD loopback, Linux cooked SLL/SLL2) with worker
threads sharing one engine, and writes to OUTPUT (a pcap of LINKTYPE_RAW, nanosecond
timestamps) every packet a host would deliver: each reassembled datagram, rebuilt as the
host sees it, and each unfragmented IP packet unchanged. Time is capture time.

Packets are spread across workers as RSS would: by addresses, protocol and ports where
the ports are visible (unfragmented packets, first fragments), else by addresses alone,
so the fragments of one datagram reach different workers.

Output order: by the capture position of the packet that completed each datagram (for an
unfragmented packet, itself), stamped with that packet's time. With one worker this is
the order of completion and is reproducible; with several, which fragment of a datagram
completes it can vary from run to run, so compare outputs as multisets of datagrams.

options:
  -w, --write FILE   the output capture ("-": standard output); none if absent
  --policy P         overlap policy: linux (default: Linux 6.x), first, last, bsd,
                     bsd-right, linux-legacy, windows, solaris
  --threads N        worker threads sharing one engine, 1-64 (default: 1)
  --global-lock      one std::mutex around the whole engine: the baseline that the
                     per-bucket locking is measured against
  --rss MODE         what the NIC's RSS hash covers: `ports` (the default) hashes
                     addresses, protocol and ports where visible, so a datagram's first
                     fragment usually reaches another worker than the rest; `addresses`
                     hashes every packet by its addresses alone (`ethtool -N DEV
                     rx-flow-hash udp4 sd`, and so for each flow type): each datagram's
                     fragments reach the worker that owns it, and nothing is steered
  --shared-nothing   the ceiling for sharing: an engine of its own per worker (its
                     share of the budget and of the buckets), fed its queue of RSS by
                     addresses, nothing shared and no pacing, as DPDK's per-core
                     reassembly (not with --global-lock, --no-steer or --rss)
  --no-steer         each worker feeds the engine what RSS gave it; by default a
                     fragment is handed to the worker that owns its datagram (a hash
                     of its addresses picks it), as RPS steers packets to a cpu
  --budget BYTES     memory budget, in the kernel's truesize units (default: 4194304);
                     a suffix k or M multiplies by 1024 or 1048576
  --timeout S        reassembly timeout in seconds of capture time, IPv4 and IPv6
                     (default: 30 for IPv4, 60 for IPv6, as Linux)
  --buckets N        buckets of the engine's table (default: one per 2 KiB of
                     budget, a power of two: 2048 for 4 MiB)
  --window N         while a quarter of the budget is charged (always with --no-steer),
                     most packets (in capture order) a worker may run ahead of the
                     slowest one, as packets that arrive together are handled together
                     (default: half the 1500-byte fragments the budget holds, 64 to
                     1024: 744 for 4 MiB; 256 with --no-steer; workers then also stay
                     within 10 ms of capture time, 1 ms with --no-steer); otherwise
                     workers run apart, and expiry follows the slowest
  --repeat N         after the first pass (the one written), replay the capture from
                     memory N more times, each on a fresh engine, and report
                     ns_per_fragment: the median pass's wall time over fragments in
                     (reading and writing excluded), cpu_ns_per_fragment: the
                     same from the workers' CPU time, and copy_ns_per_fragment: the
                     baseline of one thread copying every packet once (CPU time)
                     (default: 0)
  --paired-with M    with --repeat: each timed pass is paired with one at M workers,
                     the two next to each other, in alternating order, and the
                     summary adds paired_ns_per_fragment and paired_speedup (median
                     over the pairs of the M-worker pass's time over this one's; the
                     upper middle one for an even N): worker counts compared in the
                     same machine state (M = --threads: an A/A check of the noise)
  --json FILE        also write the summary as JSON ("-": standard output)
  --expect FILE      judge the first pass against a kernel's verdict, FILE a
                     NAME.expected.json (tests/data/defrag/): the UDP datagrams
                     delivered must be exactly those the kernel delivered, byte for
                     byte (exit status 3 if not; each difference on standard error)
  --synthetic        make the traffic in process instead of reading INPUT: legit
                     fragmented UDP datagrams (IPv4 and IPv6, 1800 to 24000 bytes)
  --datagrams N      legit datagrams (default: 20000 / (1 + R); 300 with --blackout)
  --flood R          R bogus first fragments, never completed, per legit fragment
  --blackout         first 1766 bogus 1480-byte first fragments at once, then the
                     legit datagrams spread over the next 25 s of capture time
  --seed N           seed of the synthetic traffic (default: 1)
  --help             this text

Exit status: 0 on success (also for a capture cut short inside a record: the records
before the cut are used, and the summary says so), 1 if the input cannot be read as a
capture or the output cannot be written, 2 on bad options, 3 if --expect finds a
difference.
)";

struct options {
  std::string input, output, json, expect;
  defrag::driver::run_options run;
  bool synthetic = false;
  defrag::synthetic::options syn;
  bool help = false;
  bool rss_given = false;
};

struct bad_option : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
T parse_number(std::string_view opt, std::string_view s, T lo, T hi) {
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty() || v < lo || v > hi) {
    std::ostringstream m;
    m << opt << ": expected a number from " << lo << " to " << hi << ", got '" << s << "'";
    throw bad_option(m.str());
  }
  return v;
}

double parse_real(std::string_view opt, std::string_view s, double lo, double hi) {
  std::string str(s);
  char* end = nullptr;
  double v = std::strtod(str.c_str(), &end);
  if (str.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) {
    std::ostringstream m;
    m << opt << ": expected a number from " << lo << " to " << hi << ", got '" << s << "'";
    throw bad_option(m.str());
  }
  return v;
}

std::int64_t parse_bytes(std::string_view opt, std::string_view s) {
  std::int64_t mult = 1;
  if (!s.empty() && (s.back() == 'k' || s.back() == 'K')) mult = 1024;
  if (!s.empty() && s.back() == 'M') mult = 1 << 20;
  if (mult != 1) s.remove_suffix(1);
  constexpr std::int64_t most = std::int64_t{1} << 40;
  return parse_number<std::int64_t>(opt, s, 1, most / mult) * mult;
}

options parse(int argc, char** argv) {
  options o;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= args.size()) throw bad_option(std::string(a) + ": needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "-w" || a == "--write") {
      o.output = value();
    } else if (a == "--policy") {
      std::string_view v = value();
      auto p = defrag::parse_policy(v);
      if (!p) throw bad_option("--policy: unknown policy '" + std::string(v) + "'");
      o.run.cfg.pol = *p;
    } else if (a == "--threads") {
      o.run.threads = parse_number<unsigned>(a, value(), 1, 64);
    } else if (a == "--global-lock") {
      o.run.global_lock = true;
    } else if (a == "--rss") {
      std::string_view v = value();
      const auto m = defrag::driver::parse_rss(v);
      if (!m) throw bad_option("--rss: unknown mode '" + std::string(v) + "' (ports or addresses)");
      o.run.rss = *m;
      o.rss_given = true;
    } else if (a == "--no-steer") {
      o.run.steer = false;
    } else if (a == "--shared-nothing") {
      o.run.shared_nothing = true;
    } else if (a == "--budget") {
      o.run.cfg.budget_bytes = parse_bytes(a, value());
    } else if (a == "--timeout") {
      double s = parse_real(a, value(), 0.001, 86400);
      o.run.cfg.timeout_v4_ns = o.run.cfg.timeout_v6_ns = static_cast<std::int64_t>(s * 1e9);
    } else if (a == "--buckets") {
      o.run.cfg.buckets = parse_number<std::size_t>(a, value(), 1, std::size_t{1} << 24);
    } else if (a == "--window") {
      o.run.window = parse_number<std::size_t>(a, value(), 1, std::size_t{1} << 40);
    } else if (a == "--repeat") {
      o.run.repeat = parse_number<unsigned>(a, value(), 0, 100000);
    } else if (a == "--paired-with") {
      o.run.paired_threads = parse_number<unsigned>(a, value(), 1, 64);
    } else if (a == "--json") {
      o.json = value();
    } else if (a == "--expect") {
      o.expect = value();
    } else if (a == "--synthetic") {
      o.synthetic = true;
    } else if (a == "--datagrams") {
      o.syn.datagrams = parse_number<std::uint64_t>(a, value(), 1, 100'000'000);
    } else if (a == "--flood") {
      o.syn.flood = parse_real(a, value(), 0, 1000);
    } else if (a == "--blackout") {
      o.syn.blackout = true;
    } else if (a == "--seed") {
      o.syn.seed = parse_number<std::uint64_t>(a, value(), 0, ~std::uint64_t{0});
    } else if (a.size() > 1 && a[0] == '-') {
      throw bad_option("unknown option '" + std::string(a) + "'");
    } else if (o.input.empty()) {
      o.input = a;
    } else {
      throw bad_option("more than one INPUT ('" + o.input + "', '" + std::string(a) + "')");
    }
  }
  if (o.help) return o;
  if (o.synthetic && !o.input.empty())
    throw bad_option("--synthetic makes its own traffic: no INPUT");
  if (!o.synthetic && o.input.empty()) throw bad_option("no INPUT (or --synthetic)");
  if (!o.synthetic && (o.syn.flood != 0 || o.syn.blackout || o.syn.datagrams != 0))
    throw bad_option("--datagrams, --flood and --blackout need --synthetic");
  if (o.run.shared_nothing && (o.run.global_lock || !o.run.steer || o.rss_given))
    throw bad_option(
        "--shared-nothing shares nothing and spreads by addresses: no --global-lock, "
        "--no-steer or --rss");
  if (o.run.shared_nothing) o.run.rss = defrag::driver::rss_mode::addresses;
  if (o.run.paired_threads != 0 && o.run.repeat == 0)
    throw bad_option("--paired-with needs --repeat");
  return o;
}

std::string link_name(int dlt) {
  if (dlt < 0) return "synthetic";
  const char* n = pcap_datalink_val_to_description(dlt);
  return n ? n : std::to_string(dlt);
}

struct legit_tally {
  std::uint64_t sent = 0, delivered = 0, repeated = 0, other = 0;
};

legit_tally tally_legit(const defrag::driver::run_result& r, std::uint64_t sent) {
  legit_tally t;
  t.sent = sent;
  std::vector<bool> seen(sent, false);
  for (const auto& d : r.out) {
    auto seq = defrag::synthetic::legit_sequence(r.datagram(d));
    if (!seq || *seq >= sent) {
      ++t.other;
    } else if (seen[*seq]) {
      ++t.repeated;
    } else {
      seen[*seq] = true;
      ++t.delivered;
    }
  }
  return t;
}

struct report {
  const options& o;
  const defrag::pcap_io::capture& cap;
  const defrag::driver::run_result& r;
  std::optional<legit_tally> legit;
  std::optional<defrag::verdict::result> verdict;
};

void print_summary(std::ostream& os, const report& rep) {
  using defrag::counter;
  const auto& st = rep.r.first;
  const auto& o = rep.o;
  os << "hotpath-defrag: " << (o.synthetic ? "synthetic traffic" : o.input) << " ("
     << link_name(rep.cap.link_type) << "), policy " << defrag::name(o.run.cfg.pol) << ", "
     << o.run.threads << (o.run.threads == 1 ? " worker" : " workers") << ", "
     << (o.run.global_lock      ? "one global lock"
         : o.run.shared_nothing ? "shared nothing (an engine per worker)"
                                : "per-bucket locks")
     << "\n";
  auto line = [&](std::string_view what, std::int64_t v, std::string_view note = {}) {
    os << "  " << what << std::string(what.size() < 22 ? 22 - what.size() : 1, ' ') << v;
    if (!note.empty()) os << "  " << note;
    os << "\n";
  };
  line("frames in", rep.cap.frames_in);
  line("  not IP", rep.cap.not_ip);
  line("  snapped", rep.cap.snapped, "(cut short by the capture's snap length)");
  line("  short link header", rep.cap.short_link);
  if (rep.cap.truncated)
    os << "  the capture ends inside a record: " << rep.cap.truncation_message << "\n";
  line("packets in", st[counter::packets_in]);
  line("fragments in", st[counter::fragments_in]);
  line("datagrams out", st[counter::datagrams_out]);
  line("  reassembled", st[counter::reasm_oks]);
  line("  passed through", st[counter::passthrough]);
  os << "  drops and other counters:\n";
  for (std::size_t c = 0; c < static_cast<std::size_t>(counter::count_); ++c) {
    auto k = static_cast<counter>(c);
    if (k == counter::packets_in || k == counter::fragments_in || k == counter::datagrams_out ||
        k == counter::passthrough || k == counter::reasm_oks)
      continue;
    line("  " + std::string(defrag::name(k)), st[k]);
  }
  line("incomplete at end", rep.r.pending_at_end, "(expired once the capture ended)");
  if (rep.r.handed_off > 0)
    line("handed off", rep.r.handed_off, "(fragments steered to their datagram's worker)");
  if (rep.r.sleeps > 0)
    line("worker sleeps", rep.r.sleeps, "(a worker slept until another one caught up; all passes)");
  std::int64_t budget = o.run.cfg.budget_bytes;
  std::ostringstream pct;
  pct.precision(1);
  pct << std::fixed << "of " << budget << " budget ("
      << 100.0 * static_cast<double>(st.peak_memory_bytes) / static_cast<double>(budget) << "%)";
  line("peak memory bytes", st.peak_memory_bytes, pct.str());
  if (rep.legit) {
    std::ostringstream n;
    n.precision(2);
    n << std::fixed << "of " << rep.legit->sent << " ("
      << 100.0 * static_cast<double>(rep.legit->delivered) /
             static_cast<double>(std::max<std::uint64_t>(1, rep.legit->sent))
      << "%)";
    line("legit delivered", static_cast<std::int64_t>(rep.legit->delivered), n.str());
    line("  other datagrams", static_cast<std::int64_t>(rep.legit->other));
  }
  if (rep.verdict) {
    const auto& v = *rep.verdict;
    os << "  verdict               " << v.matched << " of " << v.expected
       << " datagrams exactly as the kernel delivered them"
       << (v.exact() ? "" : ", " + std::to_string(v.extra) + " it did not: DIFFERENT") << "\n";
  }
  if (rep.r.ns_per_fragment >= 0) {
    std::ostringstream n;
    n.precision(1);
    n << std::fixed << rep.r.ns_per_fragment;
    n << " (CPU time: " << rep.r.cpu_ns_per_fragment << ")";
    os << "  ns per fragment       " << n.str() << "  (median of " << o.run.repeat
       << " passes from memory)\n";
    std::ostringstream c;
    c.precision(1);
    c << std::fixed << rep.r.copy_ns_per_fragment;
    os << "  copy floor            " << c.str()
       << "  (CPU ns per fragment to copy every packet once, one thread)\n";
  }
  if (rep.r.paired_speedup >= 0) {
    auto workers = [](unsigned n) { return std::to_string(n) + (n == 1 ? " worker" : " workers"); };
    std::ostringstream n;
    n.precision(1);
    n << std::fixed << rep.r.paired_ns_per_fragment << " ns per fragment at "
      << workers(o.run.paired_threads) << "; " << workers(std::max(1u, o.run.threads));
    n.precision(2);
    n << " " << rep.r.paired_speedup << "x as fast";
    os << "  paired passes         " << n.str() << "  (median of " << o.run.repeat << " pairs)\n";
  }
}

void write_json(std::ostream& os, const report& rep) {
  using defrag::counter;
  const auto& st = rep.r.first;
  const auto& o = rep.o;
  auto str = [](std::string_view s) {
    std::string q = "\"";
    for (char ch : s) {
      if (ch == '"' || ch == '\\') {
        q += '\\';
        q += ch;
      } else if (static_cast<unsigned char>(ch) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", ch);
        q += buf;
      } else {
        q += ch;
      }
    }
    return q + "\"";
  };
  os << "{\n";
  os << "  \"input\": " << str(o.synthetic ? "synthetic" : o.input) << ",\n";
  os << "  \"link_type\": " << str(link_name(rep.cap.link_type)) << ",\n";
  os << "  \"policy\": " << str(defrag::name(o.run.cfg.pol)) << ",\n";
  os << "  \"threads\": " << o.run.threads << ",\n";
  os << "  \"global_lock\": " << (o.run.global_lock ? "true" : "false") << ",\n";
  os << "  \"shared_nothing\": " << (o.run.shared_nothing ? "true" : "false") << ",\n";
  os << "  \"rss\": " << str(defrag::driver::name(o.run.rss)) << ",\n";
  os << "  \"frames_in\": " << rep.cap.frames_in << ",\n";
  os << "  \"not_ip\": " << rep.cap.not_ip << ",\n";
  os << "  \"snapped\": " << rep.cap.snapped << ",\n";
  os << "  \"short_link\": " << rep.cap.short_link << ",\n";
  os << "  \"truncated_records\": " << (rep.cap.truncated ? 1 : 0) << ",\n";
  for (std::size_t c = 0; c < static_cast<std::size_t>(counter::count_); ++c)
    os << "  " << str(defrag::name(static_cast<counter>(c))) << ": " << st[static_cast<counter>(c)]
       << ",\n";
  os << "  \"pending_at_end\": " << rep.r.pending_at_end << ",\n";
  os << "  \"handed_off\": " << rep.r.handed_off << ",\n";
  os << "  \"sleeps\": " << rep.r.sleeps << ",\n";
  os << "  \"peak_memory_bytes\": " << st.peak_memory_bytes << ",\n";
  os << "  \"budget_bytes\": " << o.run.cfg.budget_bytes << ",\n";
  if (rep.legit) {
    os << "  \"legit_sent\": " << rep.legit->sent << ",\n";
    os << "  \"legit_delivered\": " << rep.legit->delivered << ",\n";
    os << "  \"other_delivered\": " << rep.legit->other << ",\n";
  }
  os << "  \"pass_ns\": [";
  for (std::size_t i = 0; i < rep.r.pass_ns.size(); ++i)
    os << (i ? ", " : "") << rep.r.pass_ns[i];
  os << "],\n";
  os << "  \"pass_cpu_ns\": [";
  for (std::size_t i = 0; i < rep.r.pass_cpu_ns.size(); ++i)
    os << (i ? ", " : "") << rep.r.pass_cpu_ns[i];
  os << "],\n";
  if (rep.verdict) {
    os << "  \"expect\": " << str(o.expect) << ",\n";
    os << "  \"expect_datagrams\": " << rep.verdict->expected << ",\n";
    os << "  \"expect_matched\": " << rep.verdict->matched << ",\n";
    os << "  \"expect_extra\": " << rep.verdict->extra << ",\n";
    os << "  \"expect_exact\": " << (rep.verdict->exact() ? "true" : "false") << ",\n";
  }
  os << "  \"repeat\": " << o.run.repeat << ",\n";
  if (rep.r.paired_speedup >= 0) {
    os << "  \"paired_threads\": " << o.run.paired_threads << ",\n";
    os << "  \"paired_ns_per_fragment\": " << rep.r.paired_ns_per_fragment << ",\n";
    os << "  \"paired_speedup\": " << rep.r.paired_speedup << ",\n";
    os << "  \"paired_pass_ns\": [";
    for (std::size_t i = 0; i < rep.r.paired_pass_ns.size(); ++i)
      os << (i ? ", " : "") << rep.r.paired_pass_ns[i];
    os << "],\n";
  }
  if (rep.r.cpu_ns_per_fragment >= 0) {
    os << "  \"cpu_ns_per_fragment\": " << rep.r.cpu_ns_per_fragment << ",\n";
    os << "  \"copy_ns_per_fragment\": " << rep.r.copy_ns_per_fragment << ",\n";
  }
  os << "  \"ns_per_fragment\": ";
  if (rep.r.ns_per_fragment >= 0)
    os << rep.r.ns_per_fragment;
  else
    os << "null";
  os << "\n}\n";
}

int run(const options& o) {
  using namespace defrag;
  // Read first: a missing verdict file fails before the work, not after it.
  std::optional<std::vector<verdict::expected_datagram>> expected;
  if (!o.expect.empty()) expected = verdict::read_expected(o.expect);
  pcap_io::capture cap;
  synthetic::traffic syn;
  if (o.synthetic) {
    syn = synthetic::generate(o.syn, [](std::uint64_t done, std::uint64_t total) {
      std::cerr << "hotpath-defrag: generating traffic: " << done << "/" << total
                << " legit datagrams\n";
    });
    cap = std::move(syn.cap);
    cap.frames_in = static_cast<std::int64_t>(cap.packets.size());
  } else {
    cap = pcap_io::read_capture(o.input);
    if (cap.truncated)
      std::cerr << "hotpath-defrag: warning: " << o.input << " is truncated ("
                << cap.truncation_message << "); using the " << cap.frames_in
                << " complete records before the cut\n";
  }
  driver::run_options ro = o.run;
  ro.progress = [](const std::string& s) { std::cerr << "hotpath-defrag: " << s << "\n"; };
  driver::run_result r = driver::run(cap, ro);

  if (!o.output.empty()) {
    pcap_io::writer w(o.output);
    for (const auto& d : r.out)
      w.write(d.ts_ns, r.datagram(d));
    w.close();
  }
  report rep{o, cap, r, std::nullopt, std::nullopt};
  if (o.synthetic) rep.legit = tally_legit(r, syn.legit_datagrams);
  if (expected) {
    verdict::judge j(*expected);
    for (const auto& d : r.out)
      j.add(r.datagram(d));
    rep.verdict = j.finish();
    for (const auto& line : rep.verdict->differences)
      std::cerr << "hotpath-defrag: --expect: " << line << "\n";
  }
  bool summary_on_stdout = o.output != "-" && o.json != "-";
  print_summary(summary_on_stdout ? std::cout : std::cerr, rep);
  if (!o.json.empty()) {
    if (o.json == "-") {
      write_json(std::cout, rep);
    } else {
      std::ofstream f(o.json);
      write_json(f, rep);
      f.close();
      if (!f) throw pcap_io::input_error(o.json + ": cannot write the JSON summary");
    }
  }
  return rep.verdict && !rep.verdict->exact() ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Reassembly buffers come and go by the million: keep freed memory in the process
  // (as the kernel's slab caches do) rather than giving it back to the OS and faulting
  // it in again, and never mmap a buffer of a 64 KiB datagram on its own.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  options o;
  try {
    o = parse(argc, argv);
  } catch (const bad_option& e) {
    std::cerr << "hotpath-defrag: " << e.what() << "\n(try --help)\n";
    return 2;
  }
  if (o.help) {
    std::cout << usage;
    return 0;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "hotpath-defrag: " << e.what() << "\n";
    return 1;
  }
}
