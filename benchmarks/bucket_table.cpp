// SPDX-License-Identifier: MIT
// bucket_table against general concurrent maps on a reassembly-like mix, and the
// keyed hash against unkeyed ones. Same binary, same run: quote ratios.
//
// bucket_table/mix/<map>/threads:N: 4096 datagrams in flight, split among the
// threads; each step takes a random one of the thread's datagrams and delivers its
// next fragment: find-or-create the entry, count the fragment (and charge it, for
// bucket_table), and erase the entry with the last one. A datagram has 3 to 5
// fragments: create, 2-4 visits, the last of which erases; then its slot takes a new
// key. Keys are IPv4 reassembly keys (12 bytes); every map hashes them with the same
// keyed_hash, as any table facing keys chosen by the network must. ops/s: fragments
// per second of wall time, all threads together, over a fixed window.
//
// Peers: std::unordered_map under one std::mutex; the same split over 64 shards
// with a std::mutex each (what parallel-hashmap does); tbb::concurrent_hash_map
// (libtbb-dev) and libcuckoo (libcuckoo-dev) where installed.
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
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "hotpath/bucket_table.hpp"
#include "hotpath/keyed_hash.hpp"
#include "support/measure.hpp"

#if defined(HOTPATH_HAVE_TBB)
#include <tbb/concurrent_hash_map.h>
#endif
#if defined(HOTPATH_HAVE_LIBCUCKOO)
#include <libcuckoo/cuckoohash_map.hh>
#endif

namespace hotpath::bench {
namespace {

struct ipv4_key {
  std::uint32_t src, dst;
  std::uint16_t id;
  std::uint8_t proto, pad;
  friend bool operator==(const ipv4_key&, const ipv4_key&) = default;
};
struct ipv6_key {
  std::array<std::uint32_t, 4> src, dst;
  std::uint32_t id;
};
static_assert(sizeof(ipv4_key) == 12 && sizeof(ipv6_key) == 36);

struct queue {
  std::uint32_t frags = 0;
  std::uint32_t bytes = 0;
};

constexpr std::uint32_t fragment_bytes = 1480;
constexpr unsigned in_flight = 4096;

// One hash object for every map: the same (fixed) key, so all pay the same hash.
struct shared_hash {
  std::size_t operator()(const ipv4_key& k) const noexcept {
    return static_cast<std::size_t>(h(k));
  }
  keyed_hash<ipv4_key> h{hash_key{0x243f6a8885a308d3ull, 0x13198a2e03707344ull}};
};

// Each adapter: fragment(key, n, now) delivers one fragment of a datagram of n.
struct hotpath_map {
  using table = bucket_table<ipv4_key, queue>;
  static bucket_table_options options() {
    bucket_table_options o;
    o.buckets = in_flight;
    o.budget = std::int64_t{1} << 30;  // no eviction here: the mix alone
    return o;
  }
  table t{options(), {}, keyed_hash<ipv4_key>(shared_hash{}.h.key())};
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t now) {
    t.find_or_create(k, now, [n](table::entry& e) {
      e.charge(fragment_bytes);
      queue& q = e.value();
      q.bytes += fragment_bytes;
      if (++q.frags == n) e.erase();
    });
  }
};

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

struct one_mutex_map {
  std::mutex m;
  std::unordered_map<ipv4_key, queue, shared_hash> map;
  one_mutex_map() { map.reserve(in_flight); }
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t) {
    std::scoped_lock g(m);
    auto it = map.try_emplace(k).first;
    it->second.bytes += fragment_bytes;
    if (++it->second.frags == n) map.erase(it);
  }
};

struct sharded_map {
  static constexpr unsigned shards = 64;
  struct alignas(cache_line_size) shard {
    std::mutex m;
    std::unordered_map<ipv4_key, queue, shared_hash> map;
  };
  std::unique_ptr<shard[]> s{new shard[shards]};
  shared_hash h;
  sharded_map() {
    for (unsigned i = 0; i < shards; ++i)
      s[i].map.reserve(in_flight / shards);
  }
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t) {
    // The top bits pick the shard; the map uses the low ones.
    shard& sh = s[h(k) >> 58];
    std::scoped_lock g(sh.m);
    auto it = sh.map.try_emplace(k).first;
    it->second.bytes += fragment_bytes;
    if (++it->second.frags == n) sh.map.erase(it);
  }
};

#if defined(HOTPATH_HAVE_TBB)
struct tbb_map {
  struct compare {
    shared_hash h;
    std::size_t hash(const ipv4_key& k) const { return h(k); }
    bool equal(const ipv4_key& a, const ipv4_key& b) const { return a == b; }
  };
  tbb::concurrent_hash_map<ipv4_key, queue, compare> map{in_flight};
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t) {
    decltype(map)::accessor a;
    map.insert(a, k);
    a->second.bytes += fragment_bytes;
    if (++a->second.frags == n) map.erase(a);
  }
};
#endif

#if defined(HOTPATH_HAVE_LIBCUCKOO)
struct cuckoo_map {
  libcuckoo::cuckoohash_map<ipv4_key, queue, shared_hash> map{in_flight};
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t) {
    map.uprase_fn(
        k,
        [n](queue& q) {
          q.bytes += fragment_bytes;
          return ++q.frags == n;
        },
        queue{1, fragment_bytes});
  }
};
#endif

std::uint64_t next_random(std::uint64_t& s) noexcept {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

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
        struct datagram {
          ipv4_key key;
          std::uint32_t n, sent;
        };
        std::uint64_t rng = 0x9e3779b97f4a7c15ull * (t + 1);
        std::uint32_t serial = 0;
        auto fresh = [&] {
          ++serial;
          return datagram{{0x0a000000u + t, 0xc0a80000u + (serial >> 16),
                           static_cast<std::uint16_t>(serial), 17, 0},
                          3 + static_cast<std::uint32_t>(next_random(rng) % 3),
                          0};
        };
        std::vector<datagram> flight(in_flight / threads);
        for (auto& d : flight)
          d = fresh();
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
            datagram& d = flight[next_random(rng) % flight.size()];
            map->fragment(d.key, d.n, static_cast<std::int64_t>(n));
            if (++d.sent == d.n) d = fresh();
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
