// SPDX-License-Identifier: MIT
// hotpath-qdisc: the busylock experiment, 2010-2025. N sender threads enqueue
// packets into one qdisc, one transmit thread dequeues batches and "transmits"
// each packet at a simulated line rate (a calibrated per-packet cost, outside the
// lock). Every lock strategy of the kernel's history runs at every sender count;
// the table compares each against busylock, measured in the same run.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "qdisc.hpp"

namespace {

using namespace hotpath::sched;
using steady = std::chrono::steady_clock;

// ---------------------------------------------------------------- options

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

// ---------------------------------------------------------------- measuring

inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch())
          .count());
}

inline std::uint64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// Log-linear histogram of nanoseconds: 16 sub-buckets per power of two (<= 6% error).
class histogram {
 public:
  void add(std::uint64_t v) {
    ++counts_[index(v)];
    ++n_;
  }
  void merge(const histogram& o) {
    for (std::size_t i = 0; i < counts_.size(); ++i)
      counts_[i] += o.counts_[i];
    n_ += o.n_;
  }
  [[nodiscard]] std::uint64_t count() const { return n_; }
  // Upper edge of the bucket holding quantile q.
  [[nodiscard]] double quantile(double q) const {
    if (n_ == 0) return 0;
    const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(n_)));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= std::max<std::uint64_t>(rank, 1)) return upper(i);
    }
    return upper(counts_.size() - 1);
  }

 private:
  static constexpr std::size_t sub = 16;
  static std::size_t index(std::uint64_t v) {
    if (v < sub) return static_cast<std::size_t>(v);
    const unsigned e = 63u - static_cast<unsigned>(__builtin_clzll(v));  // v in [2^e, 2^e+1)
    const std::uint64_t m = (v >> (e - 4)) & (sub - 1);
    return std::min<std::size_t>((e - 3) * sub + m, buckets - 1);
  }
  static double upper(std::size_t i) {
    if (i < sub) return static_cast<double>(i);
    const std::size_t e = i / sub + 3, m = i % sub;
    return std::ldexp(static_cast<double>(sub + m + 1), static_cast<int>(e) - 4);
  }
  static constexpr std::size_t buckets = 61 * sub;
  std::vector<std::uint64_t> counts_ = std::vector<std::uint64_t>(buckets);
  std::uint64_t n_ = 0;
};

// The simulated transmit: a fixed amount of CPU work, calibrated once.
thread_local std::uint64_t burn_sink = 0;  // per thread: a shared sink would bounce a line
void burn(std::uint64_t iters) {
  std::uint64_t x = burn_sink;
  for (std::uint64_t i = 0; i < iters; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    asm volatile("" : "+r"(x));
  }
  burn_sink = x;
}
double calibrate_ns_per_iter() {
  constexpr std::uint64_t iters = 2000000;
  double best = 1e9;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = now_ns();
    burn(iters);
    best = std::min(best, static_cast<double>(now_ns() - t0) / iters);
  }
  return best;
}

// The 1-minute load average, so that a reader sees how busy the machine was.
std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string one;
  if (!(f >> one)) return "unknown";
  return one;
}

double jain(const std::vector<std::uint64_t>& x) {
  double s = 0, s2 = 0;
  for (auto v : x) {
    s += static_cast<double>(v);
    s2 += static_cast<double>(v) * static_cast<double>(v);
  }
  return s2 == 0 ? 1.0 : s * s / (static_cast<double>(x.size()) * s2);
}

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

// ---------------------------------------------------------------- one run

// Where the transmit thread sleeps while the FIFO is empty.
struct doorbell_t {
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

template <class Strategy>
result run(const options& o, unsigned nsenders, std::uint64_t tx_iters, std::uint64_t build_iters) {
  qdisc<Strategy> q(params{o.limit, o.batch}, std::max<std::size_t>(o.limit, 8192));
  std::atomic<unsigned> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::int64_t> offered(nsenders);
  std::vector<histogram> enq_hist(nsenders);
  doorbell_t doorbell;

  auto sender = [&](unsigned id) {
    const std::uint64_t period = o.rate > 0 ? static_cast<std::uint64_t>(1e9 / o.rate) : 0;
    histogram h;
    std::uint32_t seq = 0;
    std::int64_t n = 0;
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire))
      std::this_thread::yield();
    std::uint64_t next = now_ns();
    while (!stop.load(std::memory_order_relaxed)) {
      if (period != 0) {
        next += period;
        for (std::uint64_t t = now_ns(); t < next; t = now_ns()) {
          if (next - t > 200000)
            std::this_thread::sleep_for(std::chrono::nanoseconds(next - t - 100000));
          else
            std::this_thread::yield();
        }
      }
      burn(build_iters);
      packet p{id, seq++, o.len, 0};
      if (seq % o.sample == 0) {
        const auto t0 = now_ns();
        q.enqueue(p);
        h.add(now_ns() - t0);
      } else {
        q.enqueue(p);
      }
      // The transmit thread sleeps when the FIFO is empty; whoever finds it asleep
      // after an enqueue wakes it (__netif_schedule raising the tx softirq).
      if (doorbell.asleep.load(std::memory_order_relaxed)) doorbell.ring();
      ++n;
    }
    offered[id] = n;
    enq_hist[id] = std::move(h);
  };

  histogram wait_hist;
  std::vector<std::uint64_t> delivered(nsenders);
  std::int64_t order_violations = 0;
  std::uint64_t idle_ns = 0, busy_ns = 0, wait_ns = 0, tx_t0 = 0, tx_t1 = 0, tx_cpu = 0;
  auto transmitter = [&] {
    std::vector<packet> buf(4096);
    std::vector<std::int64_t> last(nsenders, -1);
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire))
      std::this_thread::yield();
    tx_t0 = now_ns();
    while (!stop.load(std::memory_order_relaxed)) {
      if (q.backlog() == 0) {
        // Idle: poll the backlog hint (not the lock) for a few microseconds, then
        // sleep until a sender rings (or 200 us pass: a ring can be missed in the
        // instant before we sleep).
        const auto i0 = now_ns();
        unsigned spins = 0;
        while (q.backlog() == 0 && now_ns() - i0 < 5000 && !stop.load(std::memory_order_relaxed))
          hotpath::spin_wait::relax(spins);
        if (q.backlog() == 0) doorbell.sleep([&] { return q.backlog() != 0; });
        idle_ns += now_ns() - i0;
        continue;
      }
      const auto t0 = now_ns();
      std::uint64_t t_acq = 0;
      const std::size_t n = q.dequeue_batch(buf.data(), buf.size(), [&] { t_acq = now_ns(); });
      wait_hist.add(t_acq - t0);
      wait_ns += t_acq - t0;
      if (n == 0) continue;
      const auto b0 = now_ns();
      for (std::size_t i = 0; i < n; ++i) {
        const packet& p = buf[i];
        if (static_cast<std::int64_t>(p.seq) <= last[p.sender]) ++order_violations;
        last[p.sender] = p.seq;
        ++delivered[p.sender];
        burn(tx_iters);
      }
      busy_ns += now_ns() - b0;
    }
    tx_t1 = now_ns();
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    tx_cpu = static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u +
             static_cast<std::uint64_t>(ts.tv_nsec);
  };

  std::uint64_t swaps = 0;
  auto control = [&] {
    const auto period = std::chrono::microseconds(static_cast<std::int64_t>(o.swap_ms * 1000));
    while (!go.load(std::memory_order_acquire))
      std::this_thread::yield();
    while (!stop.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(period);
      q.set_params(params{o.limit, o.batch});
      ++swaps;
    }
  };

  std::vector<std::thread> threads;
  for (unsigned i = 0; i < nsenders; ++i)
    threads.emplace_back(sender, i);
  threads.emplace_back(transmitter);
  std::optional<std::thread> ctl;
  if (o.swap_ms > 0) ctl.emplace(control);
  while (ready.load() < nsenders + 1)
    std::this_thread::yield();

  const auto cpu0 = process_cpu_ns();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.duration));
  stop.store(true, std::memory_order_relaxed);
  for (auto& t : threads)
    t.join();
  if (ctl) ctl->join();
  const auto cpu1 = process_cpu_ns();

  result r;
  r.strategy = std::string(Strategy::name);
  r.senders = nsenders;
  r.seconds = static_cast<double>(tx_t1 - tx_t0) / 1e9;
  const counters c = q.stats();
  for (auto v : offered)
    r.offered += v;
  r.enqueued = c[enqueued];
  r.dropped = c[dropped];
  r.transmitted = c[transmitted];
  r.backlog = static_cast<std::int64_t>(q.backlog());
  r.order_violations = order_violations;
  r.balanced = r.offered == r.enqueued + r.dropped && r.enqueued == r.transmitted + r.backlog &&
               order_violations == 0;
  r.delivered_pps = static_cast<double>(r.transmitted) / r.seconds;
  r.drop_pct =
      r.offered ? 100.0 * static_cast<double>(r.dropped) / static_cast<double>(r.offered) : 0;
  r.tx_util = static_cast<double>(busy_ns) / static_cast<double>(tx_t1 - tx_t0);
  r.tx_idle_share = static_cast<double>(idle_ns) / static_cast<double>(tx_t1 - tx_t0);
  r.tx_wait_share = static_cast<double>(wait_ns) / static_cast<double>(tx_t1 - tx_t0);
  r.tx_cpu_share = static_cast<double>(tx_cpu) / static_cast<double>(tx_t1 - tx_t0);
  r.tx_wait_p50 = wait_hist.quantile(0.50);
  r.tx_wait_p99 = wait_hist.quantile(0.99);
  histogram all;
  for (auto& h : enq_hist)
    all.merge(h);
  r.enq_p50 = all.quantile(0.50);
  r.enq_p99 = all.quantile(0.99);
  r.jain = jain(delivered);
  r.cpu_ns_per_pkt =
      r.transmitted ? static_cast<double>(cpu1 - cpu0) / static_cast<double>(r.transmitted) : 0;
  r.swaps = swaps;
  return r;
}

// ---------------------------------------------------------------- strategies

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
                                unsigned senders, std::uint64_t tx_iters,
                                std::uint64_t build_iters) {
  std::optional<result> r;
  ((name == S::name ? (void)(r = run<S>(o, senders, tx_iters, build_iters)) : void()), ...);
  return r;
}

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

// Returns an error message, or empty on success; sets help if --help was given.
std::string parse(int argc, char** argv, options& o, bool& help) {
  const auto known = names(all_strategies{});
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
    std::string bad = "bad value '" + std::string(value) + "' for " + std::string(arg);
    if (arg == "--strategies") {
      o.strategies = split(value);
      for (auto& s : o.strategies)
        if (std::find(known.begin(), known.end(), s) == known.end())
          return "unknown strategy '" + s + "' (known: " + [&] {
            std::string k;
            for (auto& n : known)
              k += (k.empty() ? "" : ",") + n;
            return k;
          }() + ")";
    } else if (arg == "--senders") {
      o.senders.clear();
      for (auto& s : split(value)) {
        unsigned n = 0;
        if (!parse_num(s, n) || n == 0 || n > 256) return bad + " (thread counts 1..256)";
        o.senders.push_back(n);
      }
    } else if (arg == "--duration") {
      if (!parse_num(value, o.duration) || o.duration <= 0 || o.duration > 3600)
        return bad + " (seconds, > 0)";
    } else if (arg == "--repeat") {
      if (!parse_num(value, o.repeat) || o.repeat == 0 || o.repeat > 1000)
        return bad + " (1..1000)";
    } else if (arg == "--limit") {
      if (!parse_num(value, o.limit) || o.limit == 0 || o.limit > (1u << 16))
        return bad + " (1..65536)";
    } else if (arg == "--batch") {
      if (!parse_num(value, o.batch) || o.batch == 0 || o.batch > 4096) return bad + " (1..4096)";
    } else if (arg == "--tx-ns") {
      if (!parse_num(value, o.tx_ns) || o.tx_ns < 0 || o.tx_ns > 1e7) return bad + " (0..1e7)";
    } else if (arg == "--rate") {
      if (!parse_num(value, o.rate) || o.rate < 0) return bad + " (packets/s, >= 0)";
    } else if (arg == "--build-ns") {
      if (!parse_num(value, o.build_ns) || o.build_ns < 0 || o.build_ns > 1e7)
        return bad + " (0..1e7)";
    } else if (arg == "--len") {
      if (!parse_num(value, o.len) || o.len == 0 || o.len > 65535) return bad + " (1..65535)";
    } else if (arg == "--swap-ms") {
      if (!parse_num(value, o.swap_ms) || o.swap_ms < 0) return bad + " (milliseconds, >= 0)";
    } else if (arg == "--sample") {
      if (!parse_num(value, o.sample) || o.sample == 0) return bad + " (>= 1)";
    } else if (arg == "--json") {
      if (value.empty()) return bad;
      o.json = value;
    }
  }
  if (o.strategies.empty()) o.strategies = known;
  return {};
}

// ---------------------------------------------------------------- output

std::string fmt_rate(double v) {
  char b[32];
  if (v >= 1e6)
    std::snprintf(b, sizeof b, "%.2f M", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(b, sizeof b, "%.1f k", v / 1e3);
  else
    std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}

std::string fmt_ns(double v) {
  char b[32];
  if (v >= 1e6)
    std::snprintf(b, sizeof b, "%.1fms", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(b, sizeof b, "%.1fus", v / 1e3);
  else
    std::snprintf(b, sizeof b, "%.0fns", v);
  return b;
}

void print_group(const std::vector<result>& rs) {
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
        r.strategy.c_str(), fmt_rate(r.delivered_pps).c_str(), ratio,
        static_cast<long long>(r.dropped), r.drop_pct, 100 * r.tx_util, 100 * r.tx_wait_share,
        100 * r.tx_idle_share, 100 * r.tx_cpu_share, fmt_ns(r.tx_wait_p50).c_str(),
        fmt_ns(r.tx_wait_p99).c_str(), fmt_ns(r.enq_p50).c_str(), fmt_ns(r.enq_p99).c_str(), r.jain,
        fmt_ns(r.cpu_ns_per_pkt).c_str(), r.balanced ? "" : "  UNBALANCED");
  }
}

bool write_json(const std::string& path, const options& o, double ns_per_iter,
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
    const result& r = rs[i];
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
      << ", \"balanced\": " << (r.balanced ? "true" : "false") << "}"
      << (i + 1 < rs.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bool help = false;
  const std::string err = parse(argc, argv, o, help);
  std::string known;
  for (auto& n : names(all_strategies{}))
    known += (known.empty() ? "" : ",") + n;
  if (help) {
    std::printf(usage.data(), known.c_str());
    return 0;
  }
  if (!err.empty()) {
    std::fprintf(stderr, "hotpath-qdisc: %s\nTry 'hotpath-qdisc --help'.\n", err.c_str());
    return 2;
  }

  const double ns_per_iter = calibrate_ns_per_iter();
  const auto tx_iters = static_cast<std::uint64_t>(o.tx_ns / ns_per_iter);
  const auto build_iters = static_cast<std::uint64_t>(o.build_ns / ns_per_iter);
  const std::string load = loadavg();
  std::printf(
      "hotpath-qdisc: limit %zu, batch %zu, transmit %.0f ns/packet (line rate %s pps), %s, "
      "%u x %.2f s per run\n%u cores; load average before the run: %s (other work on the "
      "machine skews every figure)\n",
      o.limit, o.batch, o.tx_ns, o.tx_ns > 0 ? fmt_rate(1e9 / o.tx_ns).c_str() : "unbounded",
      o.rate > 0 ? ("offered " + fmt_rate(o.rate) + "pps per sender").c_str() : "stream load",
      o.repeat, o.duration, std::thread::hardware_concurrency(), load.c_str());
  if (o.build_ns > 0) std::printf("senders spend %.0f ns per packet before enqueue\n", o.build_ns);

  std::vector<result> all;
  bool balanced = true;
  for (unsigned n : o.senders) {
    std::vector<std::vector<result>> rounds(o.strategies.size());
    for (unsigned round = 0; round < o.repeat; ++round) {
      for (std::size_t i = 0; i < o.strategies.size(); ++i) {
        auto r = run_named(all_strategies{}, o.strategies[i], o, n, tx_iters, build_iters);
        r->round = round;
        if (!r->balanced) {
          balanced = false;
          std::fprintf(stderr,
                       "hotpath-qdisc: %s, %u senders: accounting violated: offered %lld, "
                       "enqueued %lld, dropped %lld, transmitted %lld, backlog %lld, "
                       "out-of-order %lld\n",
                       r->strategy.c_str(), n, static_cast<long long>(r->offered),
                       static_cast<long long>(r->enqueued), static_cast<long long>(r->dropped),
                       static_cast<long long>(r->transmitted), static_cast<long long>(r->backlog),
                       static_cast<long long>(r->order_violations));
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
    print_group(medians);
    std::fflush(stdout);
  }
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
  if (!o.json.empty() && !write_json(o.json, o, ns_per_iter, load, all)) {
    std::fprintf(stderr, "hotpath-qdisc: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return balanced ? 0 : 1;
}
