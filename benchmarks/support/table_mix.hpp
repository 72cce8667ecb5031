// SPDX-License-Identifier: MIT
// The reassembly-like table workload, shared by hotpath-bench (benchmarks/
// bucket_table.cpp: bucket_table/mix/...) and the showdown (benchmarks/peers/
// tables.cpp: table/...): the keys, the maps under test behind one interface, and
// each thread's datagrams in flight.
//
// in_flight datagrams are split among the threads; a thread takes a random one of
// its own and delivers the datagram's next fragment: find-or-create the entry, count
// the fragment (and charge it, for bucket_table), and erase the entry with the last
// one. A datagram has 3 to 5 fragments; then its slot takes a new key. Keys are IPv4
// reassembly keys (12 bytes); every map hashes them with the same keyed_hash, as any
// table facing keys chosen by the network must. A lookup finds a random datagram of
// the thread's without changing it: absent until its first fragment has come.
//
// Each map adapter: fragment(key, n, now) delivers one fragment of a datagram of n;
// lookup(key, now) returns the fragments counted so far, or 0 if the key is absent.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hotpath/bucket_table.hpp"
#include "hotpath/keyed_hash.hpp"

#if defined(HOTPATH_HAVE_TBB)
#include <tbb/concurrent_hash_map.h>
#endif
#if defined(HOTPATH_HAVE_LIBCUCKOO)
#include <libcuckoo/cuckoohash_map.hh>
#endif
#if defined(HOTPATH_HAVE_ABSL_TABLES)
#include <absl/container/flat_hash_map.h>
#include <absl/synchronization/mutex.h>
#endif

namespace hotpath::bench::tables {

struct ipv4_key {
  std::uint32_t src, dst;
  std::uint16_t id;
  std::uint8_t proto, pad;
  friend bool operator==(const ipv4_key&, const ipv4_key&) = default;
};
static_assert(sizeof(ipv4_key) == 12);

struct queue {
  std::uint32_t frags = 0;
  std::uint32_t bytes = 0;
};

inline constexpr std::uint32_t fragment_bytes = 1480;
inline constexpr unsigned in_flight = 4096;

// One hash object for every map: the same (fixed) key, so all pay the same hash.
struct shared_hash {
  std::size_t operator()(const ipv4_key& k) const noexcept {
    return static_cast<std::size_t>(h(k));
  }
  keyed_hash<ipv4_key> h{hash_key{0x243f6a8885a308d3ull, 0x13198a2e03707344ull}};
};

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
  std::uint32_t lookup(const ipv4_key& k, std::int64_t now) {
    return t.visit(k, now, [](table::entry& e) { return e.value().frags; }).value_or(0);
  }
};

// std::unordered_map with its own hash behind Lock (std::mutex, absl::Mutex, ...).
template <class Lock>
struct locked_unordered_map {
  Lock m;
  std::unordered_map<ipv4_key, queue, shared_hash> map;
  locked_unordered_map() { map.reserve(in_flight); }
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t) {
    std::scoped_lock g(m);
    auto it = map.try_emplace(k).first;
    it->second.bytes += fragment_bytes;
    if (++it->second.frags == n) map.erase(it);
  }
  std::uint32_t lookup(const ipv4_key& k, std::int64_t) {
    std::scoped_lock g(m);
    const auto it = map.find(k);
    return it == map.end() ? 0 : it->second.frags;
  }
};
using one_mutex_map = locked_unordered_map<std::mutex>;

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
  // The top bits pick the shard; the map uses the low ones.
  shard& of(const ipv4_key& k) { return s[h(k) >> 58]; }
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t) {
    shard& sh = of(k);
    std::scoped_lock g(sh.m);
    auto it = sh.map.try_emplace(k).first;
    it->second.bytes += fragment_bytes;
    if (++it->second.frags == n) sh.map.erase(it);
  }
  std::uint32_t lookup(const ipv4_key& k, std::int64_t) {
    shard& sh = of(k);
    std::scoped_lock g(sh.m);
    const auto it = sh.map.find(k);
    return it == sh.map.end() ? 0 : it->second.frags;
  }
};

#if defined(HOTPATH_HAVE_TBB)
struct tbb_map {
  struct compare {
    shared_hash h;
    std::size_t hash(const ipv4_key& k) const { return h(k); }
    bool equal(const ipv4_key& a, const ipv4_key& b) const { return a == b; }
  };
  using map_type = tbb::concurrent_hash_map<ipv4_key, queue, compare>;
  map_type map{in_flight};
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t) {
    map_type::accessor a;
    map.insert(a, k);
    a->second.bytes += fragment_bytes;
    if (++a->second.frags == n) map.erase(a);
  }
  std::uint32_t lookup(const ipv4_key& k, std::int64_t) {
    map_type::const_accessor a;  // a reader lock on the element
    return map.find(a, k) ? a->second.frags : 0;
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
  std::uint32_t lookup(const ipv4_key& k, std::int64_t) {
    std::uint32_t frags = 0;
    map.find_fn(k, [&frags](const queue& q) { frags = q.frags; });
    return frags;
  }
};
#endif

#if defined(HOTPATH_HAVE_ABSL_TABLES)
// absl::flat_hash_map (open addressing) under one absl::Mutex, lookups in reader mode.
struct absl_map {
  absl::Mutex m;
  absl::flat_hash_map<ipv4_key, queue, shared_hash> map;
  absl_map() { map.reserve(in_flight); }
  void fragment(const ipv4_key& k, std::uint32_t n, std::int64_t) {
    absl::MutexLock g(&m);
    auto it = map.try_emplace(k).first;
    it->second.bytes += fragment_bytes;
    if (++it->second.frags == n) map.erase(it);
  }
  std::uint32_t lookup(const ipv4_key& k, std::int64_t) {
    absl::ReaderMutexLock g(&m);
    const auto it = map.find(k);
    return it == map.end() ? 0 : it->second.frags;
  }
};
#endif

inline std::uint64_t next_random(std::uint64_t& s) noexcept {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// One thread's datagrams in flight (in_flight / threads of them); keys carry the
// thread in src, so threads never share a datagram.
class flight {
 public:
  flight(unsigned thread, unsigned threads)
      : thread_(thread), rng_(0x9e3779b97f4a7c15ull * (thread + 1)), d_(in_flight / threads) {
    for (auto& d : d_)
      d = fresh();
  }
  // Delivers the next fragment of a random datagram.
  template <class Map>
  void fragment(Map& map, std::int64_t now) {
    datagram& d = pick();
    map.fragment(d.key, d.n, now);
    if (++d.sent == d.n) d = fresh();
  }
  // Looks a random datagram up; returns false if the map's count is not what this
  // thread delivered (a broken map).
  template <class Map>
  bool lookup(Map& map, std::int64_t now) {
    const datagram& d = pick();
    return map.lookup(d.key, now) == d.sent;
  }

 private:
  struct datagram {
    ipv4_key key;
    std::uint32_t n, sent;
  };
  datagram& pick() noexcept { return d_[next_random(rng_) % d_.size()]; }
  datagram fresh() noexcept {
    ++serial_;
    return {{0x0a000000u + thread_, 0xc0a80000u + (serial_ >> 16),
             static_cast<std::uint16_t>(serial_), 17, 0},
            3 + static_cast<std::uint32_t>(next_random(rng_) % 3),
            0};
  }
  std::uint32_t thread_;
  std::uint64_t rng_;
  std::uint32_t serial_ = 0;
  std::vector<datagram> d_;
};

}  // namespace hotpath::bench::tables
