// SPDX-License-Identifier: MIT
// bucket_table against general concurrent maps on a reassembly-like mix, and the
// keyed hash against unkeyed ones. Same binary, same run: quote ratios.
//
// bucket_table/mix/<map>/threads:N: the reassembly-like mix of
// support/table_mix.hpp (fragments only: create, 2-4 visits, the last of which
// erases), 4096 datagrams in flight split among the threads. ops/s: fragments per
// second of wall time, all threads together, over a fixed window.
//
// Peers: std::unordered_map under one std::mutex; the same split over 64 shards
// with a std::mutex each (what parallel-hashmap does); tbb::concurrent_hash_map
// (libtbb-dev) and libcuckoo (libcuckoo-dev) where installed.
//
// bucket_table/flood/samples:K: one thread creating entries that never come back, in a
// full table: every creation evicts (K samples). Time per creation.
//
// bucket_table/hash/<hash>/<bytes>: one key hashed per iteration (the key changes
// every time), keyed SipHash-1-3 beside FNV-1a and std::hash<std::string_view>.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "hotpath/keyed_hash.hpp"
#include "support/measure.hpp"
#include "support/table_mix.hpp"

namespace hotpath::bench {
namespace {

using namespace tables;

struct ipv6_key {
  std::array<std::uint32_t, 4> src, dst;
  std::uint32_t id;
};
static_assert(sizeof(ipv6_key) == 36);

// The limit: the same table, one per thread (keys carry their thread in src), so
// that nothing is shared. What scaling costs is the gap between this and hotpath_map.
struct private_tables {
  std::array<std::unique_ptr<hotpath_map>, 8> per;
  private_tables() {
    for (auto& p : per)
      p = std::make_unique<hotpath_map>();
  }
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t now) {
    per[k.src % per.size()]->fragment(k, n, now);
  }
};

double thread_cpu_ns() {
  return static_cast<double>(thread_cpu_time().count());
}

// Nanoseconds this thread has spent runnable but waiting for a cpu (the second
// field of its schedstat), or -1 where that is not available.
class run_delay_clock {
 public:
  run_delay_clock() : fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}
  ~run_delay_clock() {
    if (fd_ >= 0) ::close(fd_);
  }
  run_delay_clock(const run_delay_clock&) = delete;
  run_delay_clock& operator=(const run_delay_clock&) = delete;
  double now() const {
    char buf[128];
    if (fd_ < 0) return -1;
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = 0;
    unsigned long long run = 0, wait = 0;
    if (std::sscanf(buf, "%llu %llu", &run, &wait) != 2) return -1;
    return static_cast<double>(wait);
  }

 private:
  int fd_;
};

// A timed chunk of fragments on one thread: its wall-clock interval and whether the
// thread ran unhindered (waited for its cpu, which other jobs on this machine had
// taken, for less than 5% of it). Sleeping on a lock is not waiting for the cpu:
// that is the cost being measured.
struct chunk_record {
  double t0, t1;  // ns since the run's start
  bool clean;
};

// The fragments `other` delivered in [t0, t1] (its chunks prorated), or -1 if a chunk
// overlapping the interval was not clean or the chunks do not cover it.
double ops_within(const std::vector<chunk_record>& other, double t0, double t1, int chunk) {
  auto it = std::upper_bound(other.begin(), other.end(), t0,
                             [](double t, const chunk_record& c) { return t < c.t0; });
  if (it == other.begin()) return -1;
  --it;  // the last chunk starting at or before t0
  double ops = 0, reach = t0;
  for (; it != other.end() && it->t0 < t1; ++it) {
    if (!it->clean || it->t0 > reach + 2000) return -1;  // allowed gaps: the clock reads
    const double overlap = std::min(t1, it->t1) - std::max(t0, it->t0);
    if (overlap > 0) ops += chunk * overlap / (it->t1 - it->t0);
    reach = std::max(reach, it->t1);
  }
  return reach >= t1 ? ops : -1;
}

// Counters: ops/s, fragments per second of wall time over the window, all threads;
// cpu_ns/op, the worker threads' CPU time per fragment. With no more threads than
// cpus, each thread is pinned to its own cpu and times chunks of 512 fragments.
// This machine is shared and loaded (other jobs take turns on our cores), so the
// threads of a run are often not all running, which ops/s cannot see. Hence
// ops/s_all_running: each clean chunk of any thread, during which every other
// thread was clean too, is a window; the fragments all threads delivered in it
// (the others' chunks prorated) over its length is the window's rate, and the
// counter is the median window. A thread asleep on a lock is clean: a contended
// lock shows as the sleeper delivering nothing meanwhile. all_running_share: the
// fraction of chunks that made windows.
template <class Map>
void mix(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  const auto window = std::chrono::milliseconds(state.range(1));
  const std::vector<unsigned> cpus = allowed_cpus();
  const bool pin = threads <= cpus.size();
  constexpr int chunk = 512;
  for (auto _ : state) {
    auto map = std::make_unique<Map>();
    struct alignas(cache_line_size) side {
      std::uint64_t ops = 0;
      double cpu_ns = 0;
      std::vector<chunk_record> chunks;
    };
    std::vector<side> sides(threads);
    std::atomic<unsigned> ready{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> pool;
    const auto epoch = std::chrono::steady_clock::now();
    auto since = [epoch] {
      return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - epoch)
          .count();
    };
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        if (pin) {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(cpus[t], &one);
          sched_setaffinity(0, sizeof one, &one);
        }
        tables::flight flight(t, threads);
        side& me = sides[t];
        if (pin) me.chunks.reserve(static_cast<std::size_t>(window.count()) * 100);
        const run_delay_clock delay;
        ready.fetch_add(1);
        while (ready.load() < threads)
          std::this_thread::yield();
        const double cpu_start = thread_cpu_ns();
        double w0 = pin ? delay.now() : 0;
        std::uint64_t n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          const double t0 = pin ? since() : 0;
          for (int i = 0; i < chunk; ++i) {
            flight.fragment(*map, static_cast<std::int64_t>(n));
            ++n;
          }
          if (!pin) continue;
          const double t1 = since(), w1 = delay.now();
          me.chunks.push_back({t0, t1, w0 >= 0 && w1 >= 0 && w1 - w0 < 0.05 * (t1 - t0)});
          w0 = w1;
        }
        me.cpu_ns = thread_cpu_ns() - cpu_start;
        me.ops = n;
      });
    }
    const double secs = run_window(pool, ready, threads, stop, window);
    state.SetIterationTime(secs);
    double total = 0, cpu = 0, chunks = 0;
    std::vector<double> rates;  // fragments per ns in each window
    for (unsigned t = 0; t < threads; ++t) {
      total += static_cast<double>(sides[t].ops);
      cpu += sides[t].cpu_ns;
      chunks += static_cast<double>(sides[t].chunks.size());
      for (const chunk_record& c : sides[t].chunks) {
        if (!c.clean) continue;
        double ops = chunk;
        for (unsigned o = 0; ops >= 0 && o < threads; ++o) {
          if (o == t) continue;
          const double d = ops_within(sides[o].chunks, c.t0, c.t1, chunk);
          ops = d < 0 ? -1 : ops + d;
        }
        if (ops >= 0) rates.push_back(ops / (c.t1 - c.t0));
      }
    }
    state.counters["ops/s"] = total / secs;
    state.counters["cpu_ns/op"] = cpu / total;
    if (pin && rates.size() >= 10) {
      state.counters["all_running_share"] = static_cast<double>(rates.size()) / chunks;
      state.counters["ops/s_all_running"] = 1e9 * median(rates);
    }
  }
}

void mix_args(benchmark::internal::Benchmark* b) {
  windowed(b, {1, 2, 8}, 500);
}

BENCHMARK(mix<hotpath_map>)->Name("bucket_table/mix/hotpath")->Apply(mix_args);
BENCHMARK(mix<private_tables>)->Name("bucket_table/mix/limit_table_per_thread")->Apply(mix_args);
BENCHMARK(mix<one_mutex_map>)->Name("bucket_table/mix/std_mutex_unordered_map")->Apply(mix_args);
BENCHMARK(mix<sharded_map>)->Name("bucket_table/mix/sharded64_unordered_map")->Apply(mix_args);
#if defined(HOTPATH_HAVE_TBB)
BENCHMARK(mix<tbb_map>)->Name("bucket_table/mix/tbb_concurrent_hash_map")->Apply(mix_args);
#endif
#if defined(HOTPATH_HAVE_LIBCUCKOO)
BENCHMARK(mix<cuckoo_map>)->Name("bucket_table/mix/libcuckoo")->Apply(mix_args);
#endif

// --- flood --------------------------------------------------------------------------

// bucket_table/flood/samples:K: one thread creating entries for new keys that never
// come back, as bogus first fragments do, in a table of 2048 buckets whose budget
// holds about one entry per bucket (each is charged its fragment and its node): once
// it is full, every creation evicts (samples K buckets, removes the oldest entry seen). Time per creation; `evictions` per creation
// checks that it evicted throughout.
void flood(benchmark::State& state) {
  using table = bucket_table<ipv4_key, queue>;
  constexpr std::size_t buckets = 2048;
  bucket_table_options o;
  o.buckets = buckets;
  o.budget = std::int64_t{fragment_bytes} * buckets;
  o.eviction_samples = static_cast<unsigned>(state.range(0));
  std::int64_t evicted = 0;
  table t{o,
          {.on_evict = [&](table::entry_view&) { ++evicted; }},
          keyed_hash<ipv4_key>(shared_hash{}.h.key())};
  std::uint32_t i = 0;
  auto create = [&] {
    const ipv4_key k{i, ~i, static_cast<std::uint16_t>(i), 17, 0};
    ++i;
    t.find_or_create(k, std::int64_t{i}, [](table::entry& e) { e.charge(fragment_bytes); });
  };
  while (i < 4 * buckets)  // full, and evicting
    create();
  const std::int64_t before = evicted;
  for (auto _ : state)
    create();
  state.counters["evictions"] = benchmark::Counter(static_cast<double>(evicted - before) /
                                                   static_cast<double>(state.iterations()));
}
BENCHMARK(flood)->Name("bucket_table/flood")->ArgName("samples")->Arg(8)->Arg(16);

// --- hash cost ----------------------------------------------------------------------

std::uint64_t fnv1a(const void* p, std::size_t n) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

template <class Key>
Key make_key(std::uint32_t i) {
  Key k{};
  if constexpr (std::is_same_v<Key, ipv4_key>) {
    k = {0x0a000001u, 0xc0a80001u, static_cast<std::uint16_t>(i), 17, 0};
    k.src ^= i >> 16;
  } else {
    k.src = {0x20010db8u, 0, 0, i};
    k.dst = {0x20010db8u, 0, 0, 1};
    k.id = i;
  }
  return k;
}

template <class Key, class H>
void hash_cost(benchmark::State& state, H h) {
  std::uint32_t i = 0;
  std::uint64_t acc = 0;
  for (auto _ : state) {
    const Key k = make_key<Key>(++i);
    acc += h(k);
    benchmark::DoNotOptimize(acc);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

template <class Key>
void keyed(benchmark::State& state) {
  const keyed_hash<Key> h;
  hash_cost<Key>(state, [&h](const Key& k) { return h(k); });
}
template <class Key>
void fnv(benchmark::State& state) {
  hash_cost<Key>(state, [](const Key& k) { return fnv1a(&k, sizeof k); });
}
template <class Key>
void std_string_view(benchmark::State& state) {
  hash_cost<Key>(state, [](const Key& k) {
    return std::hash<std::string_view>{}(
        std::string_view(reinterpret_cast<const char*>(&k), sizeof k));
  });
}

BENCHMARK(keyed<ipv4_key>)->Name("bucket_table/hash/siphash13_keyed/12");
BENCHMARK(keyed<ipv6_key>)->Name("bucket_table/hash/siphash13_keyed/36");
BENCHMARK(fnv<ipv4_key>)->Name("bucket_table/hash/fnv1a_unkeyed/12");
BENCHMARK(fnv<ipv6_key>)->Name("bucket_table/hash/fnv1a_unkeyed/36");
BENCHMARK(std_string_view<ipv4_key>)->Name("bucket_table/hash/std_hash_string_view/12");
BENCHMARK(std_string_view<ipv6_key>)->Name("bucket_table/hash/std_hash_string_view/36");

}  // namespace
}  // namespace hotpath::bench
