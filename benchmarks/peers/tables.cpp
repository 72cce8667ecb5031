// SPDX-License-Identifier: MIT
// Tables: hotpath's bucket_table against the peers of its issue (9) on the
// reassembly-like workload of benchmarks/support/table_mix.hpp, with lookups mixed
// in: a thread's calls alternate a fragment (find-or-insert, update, erase with the
// datagram's last fragment) and a lookup of a random datagram of its own (a miss
// until the datagram's first fragment has come, about a quarter of them).
// Peers: std::unordered_map under one std::mutex, the same over 64 mutex-guarded
// shards (what parallel-hashmap does), tbb::concurrent_hash_map, libcuckoo, and
// absl::flat_hash_map under one absl::Mutex, each where installed.
// table/uncontended/NAME: one thread, Google Benchmark's loop, ns per call (the
// same alternation).
// table/contended/NAME: every thread on one map for the window; every lookup must
// see the fragments its thread delivered.
#include <cstdint>
#include <memory>
#include <string>

#include "showdown.hpp"
#include "support/table_mix.hpp"

namespace {

namespace tables = hotpath::bench::tables;

// Call number i: a fragment when i is even, a lookup when odd. False if the
// lookup did not see what this thread delivered.
template <class Map>
bool call(Map& map, tables::flight& f, std::int64_t i) {
  if (i % 2 == 0) {
    f.fragment(map, i);
    return true;
  }
  return f.lookup(map, i);
}

template <class Map>
void uncontended(benchmark::State& state) {
  auto map = std::make_unique<Map>();
  tables::flight f(0, 1);
  std::int64_t i = 0;
  bool ok = true;
  for (auto _ : state)
    ok &= call(*map, f, i++);
  if (!ok) hotpath::bench::fail(state, "a lookup missed what its thread delivered");
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

template <class Map>
void contended(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  for (auto _ : state) {
    auto map = std::make_unique<Map>();
    std::atomic<bool> wrong{false};
    // 64 calls between looks at the stop flag.
    hotpath::showdown::run_chunks(state, 64, [&](unsigned t) {
      return [&map, &wrong, f = tables::flight(t, threads)](std::uint64_t i) mutable {
        if (!call(*map, f, static_cast<std::int64_t>(i)))
          wrong.store(true, std::memory_order_relaxed);
      };
    });
    if (wrong.load(std::memory_order_relaxed))
      hotpath::bench::fail(state, "a lookup missed what its thread delivered");
  }
}

template <class Map>
void register_table(const std::string& name, const hotpath::showdown::options& o) {
  hotpath::showdown::register_pair("table", "contended", name, uncontended<Map>, contended<Map>, o);
}

void register_tables(const hotpath::showdown::options& o) {
  register_table<tables::one_mutex_map>("std::mutex+unordered_map", o);
  register_table<tables::sharded_map>("64 x std::mutex+unordered_map", o);
#if defined(HOTPATH_HAVE_TBB)
  register_table<tables::tbb_map>("tbb::concurrent_hash_map", o);
#endif
#if defined(HOTPATH_HAVE_LIBCUCKOO)
  register_table<tables::cuckoo_map>("libcuckoo", o);
#endif
#if defined(HOTPATH_HAVE_ABSL_TABLES)
  register_table<tables::absl_map>("absl::Mutex+flat_hash_map", o);
#endif
  register_table<tables::hotpath_map>("hotpath::bucket_table", o);
}
HOTPATH_SHOWDOWN(register_tables);

}  // namespace
