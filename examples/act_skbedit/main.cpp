// SPDX-License-Identifier: MIT
// hotpath-act-skbedit: the act_skbedit experiment. In 2018 the tc skbedit action's
// packet path moved from one spinlock guarding parameters and statistics to RCU
// parameters plus per-cpu statistics (+14% at 2 threads, +52% at 4, pktgen, pps per
// thread).
//
//   (a) spinlock: lock; count packet and bytes; apply parameters; unlock
//   (b) rcu:      read section on rcu_cell<params>; apply; per-cpu stats add
//
// Each packet thread pushes "packets" through the action for a fixed window while a
// control thread replaces the parameters every 100 us. Figures: pps per thread (the
// kernel's), and per CPU-second the packet threads ran. Rounds alternate (a) and (b)
// so that background load hits both alike; the table shows each one's median round.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <hotpath/percpu_counter.hpp>
#include <hotpath/rcu_cell.hpp>

#include "common/measure.hpp"

namespace {

namespace measure = hotpath::measure;

// What tcf_skbedit_params carries, roughly.
struct skbedit_params {
  std::uint32_t flags = 1;
  std::uint32_t priority = 0;
  std::uint32_t mark = 0;
  std::uint32_t mask = 0xffffffff;
  std::uint16_t queue_mapping = 0;
  int action = 0;  // TC_ACT_PIPE
};

struct packet {
  std::uint32_t priority = 0;
  std::uint32_t mark = 0;
  std::uint16_t queue = 0;
  std::uint32_t len = 0;
};

int apply(const skbedit_params& p, packet& pkt) {
  if (p.flags & 1) pkt.priority = p.priority;
  pkt.mark = (pkt.mark & ~p.mask) | (p.mark & p.mask);
  pkt.queue = p.queue_mapping;
  return p.action;
}

// The kernel's spin_lock() fast path, and nothing more: test-and-set, no parking.
class spinlock {
 public:
  void lock() noexcept {
    unsigned n = 0;
    // Acquire pairs with the release in unlock().
    while (flag_.test_and_set(std::memory_order_acquire))
      while (flag_.test(std::memory_order_relaxed))
        hotpath::spin_wait::relax(n);
  }
  void unlock() noexcept { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_;
};

// (a) the pre-2018 action: everything under tcf_lock.
struct action_spinlock {
  alignas(64) spinlock lock;
  skbedit_params params;
  std::uint64_t packets = 0, bytes = 0;

  int act(packet& pkt) {
    const std::scoped_lock l(lock);
    ++packets;
    bytes += pkt.len;
    return apply(params, pkt);
  }
  void replace(const skbedit_params& p) {
    const std::scoped_lock l(lock);
    params = p;
  }
  std::uint64_t packet_count() const { return packets; }
};

// (b) the 2018 action: RCU parameters, per-cpu statistics.
struct action_rcu {
  enum : std::size_t { packets_field = 0, bytes_field = 1 };
  hotpath::rcu_cell<skbedit_params> params;
  hotpath::percpu_stats<2> stats;

  int act(packet& pkt) {
    int r;
    {
      auto p = params.read();
      r = apply(*p, pkt);
    }
    stats.inc(packets_field);
    stats.add(bytes_field, pkt.len);
    return r;
  }
  void replace(const skbedit_params& p) { params.store(p); }
  std::uint64_t packet_count() const {
    return static_cast<std::uint64_t>(stats.sum(packets_field));
  }
};

struct figures {
  double pps_per_thread = 0, pps_per_cpu = 0;
  bool counted = true;  // the action's statistics saw every packet
};

// One window of `threads` packet threads and the control thread on a fresh action.
template <class Action>
figures run(unsigned threads, std::chrono::milliseconds window) {
  Action action;
  std::atomic<unsigned> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::uint64_t> sent(threads);
  std::vector<std::chrono::nanoseconds> cpu(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1, std::memory_order_relaxed);
      while (!go.load(std::memory_order_acquire))  // pairs with the release below
        std::this_thread::yield();
      packet pkt;
      std::uint64_t n = 0;
      const auto cpu0 = measure::thread_cpu_time();
      for (; !stop.load(std::memory_order_relaxed); ++n) {
        pkt.len = 64 + static_cast<std::uint32_t>(n & 1023);
        const int verdict = action.act(pkt);
        asm volatile("" : : "r"(verdict));  // the compiler must compute it
      }
      cpu[t] = measure::thread_cpu_time() - cpu0;
      sent[t] = n;
    });
  pool.emplace_back([&] {  // the control path
    while (!go.load(std::memory_order_acquire))
      std::this_thread::yield();
    for (std::uint32_t i = 1; !stop.load(std::memory_order_relaxed); ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      action.replace(skbedit_params{1, i, i * 7, 0xffffffff, static_cast<std::uint16_t>(i & 7), 0});
    }
  });
  while (ready.load(std::memory_order_relaxed) < threads)
    std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(window);
  stop.store(true, std::memory_order_relaxed);
  for (auto& th : pool)
    th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::uint64_t total = 0;
  double cpu_secs = 0;
  for (unsigned t = 0; t < threads; ++t) {
    total += sent[t];
    cpu_secs += std::chrono::duration<double>(cpu[t]).count();
  }
  hotpath::rcu_barrier();
  return {static_cast<double>(total) / secs / threads, static_cast<double>(total) / cpu_secs,
          action.packet_count() == total};
}

struct options {
  std::vector<unsigned> threads{1, 2, 4};
  unsigned ms = 300, repeat = 5;
  std::string json;  // also write the table here, when set
};

// Returns false on a bad command line.
bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) return false;
    std::istringstream value(argv[++i]);
    if (arg == "--json") {
      o.json = value.str();
      if (o.json.empty()) return false;
    } else if (arg == "--threads") {
      o.threads.clear();
      for (std::string item; std::getline(value, item, ',');) {
        char* end = nullptr;
        const unsigned long n = std::strtoul(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || n == 0 || n > 256) return false;
        o.threads.push_back(static_cast<unsigned>(n));
      }
    } else if (arg == "--ms" || arg == "--repeat") {
      unsigned& out = arg == "--ms" ? o.ms : o.repeat;
      if (!(value >> out) || !value.eof() || out == 0 || out > 100000) return false;
    } else {
      return false;
    }
  }
  return !o.threads.empty();
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (argc == 2 && std::string_view(argv[1]) == "--help") {
    std::printf(
        "usage: hotpath-act-skbedit [--threads 1,2,4] [--ms 300] [--repeat 5] [--json FILE]\n"
        "Runs (a) the spinlock action and (b) the RCU + per-cpu action for MS ms per\n"
        "round, REPEAT alternating rounds at each thread count; prints each one's median\n"
        "(and writes the same rows to FILE as JSON).\n"
        "Exit status: 0, 1 if a packet went missing from the statistics or FILE cannot be\n"
        "written, 2 on bad options.\n");
    return 0;
  }
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "hotpath-act-skbedit: bad options; try --help\n");
    return 2;
  }
  std::printf("hotpath-act-skbedit: %u rounds of %u ms, %u cores, load average %s\n", o.repeat,
              o.ms, std::thread::hardware_concurrency(), measure::load_average().c_str());
  std::printf("%7s %16s %16s %7s %14s %14s %7s\n", "threads", "(a) pps/thread", "(b) pps/thread",
              "b/a", "(a) pps/cpu", "(b) pps/cpu", "b/a");
  bool counted = true;
  std::ostringstream rows;
  for (unsigned threads : o.threads) {
    std::vector<double> a_wall, b_wall, a_cpu, b_cpu;
    for (unsigned r = 0; r < o.repeat; ++r) {
      const figures a = run<action_spinlock>(threads, std::chrono::milliseconds(o.ms));
      const figures b = run<action_rcu>(threads, std::chrono::milliseconds(o.ms));
      counted = counted && a.counted && b.counted;
      a_wall.push_back(a.pps_per_thread);
      b_wall.push_back(b.pps_per_thread);
      a_cpu.push_back(a.pps_per_cpu);
      b_cpu.push_back(b.pps_per_cpu);
    }
    const double aw = measure::median(a_wall), bw = measure::median(b_wall);
    const double ac = measure::median(a_cpu), bc = measure::median(b_cpu);
    std::printf("%7u %14.1f M %14.1f M %6.2fx %12.1f M %12.1f M %6.2fx\n", threads, aw / 1e6,
                bw / 1e6, bw / aw, ac / 1e6, bc / 1e6, bc / ac);
    rows << (rows.tellp() > 0 ? ",\n" : "") << "    {\"threads\": " << threads
         << ", \"spinlock_pps_per_thread\": " << aw << ", \"rcu_pps_per_thread\": " << bw
         << ", \"spinlock_pps_per_cpu\": " << ac << ", \"rcu_pps_per_cpu\": " << bc << "}";
  }
  if (!counted) std::fprintf(stderr, "hotpath-act-skbedit: packets lost from the statistics\n");
  if (!o.json.empty()) {
    std::FILE* f = std::fopen(o.json.c_str(), "w");
    const std::string body = "{\n  \"ms\": " + std::to_string(o.ms) +
                             ",\n  \"repeat\": " + std::to_string(o.repeat) + ",\n  \"rows\": [\n" +
                             rows.str() + "\n  ]\n}\n";
    if (!f || std::fputs(body.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "hotpath-act-skbedit: cannot write %s\n", o.json.c_str());
      return 1;
    }
  }
  return counted ? 0 : 1;
}
