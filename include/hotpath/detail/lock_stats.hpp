// SPDX-License-Identifier: MIT
// Path counters for queued_lock and priority_lock, as the kernel's qstat counters:
// which way each acquisition went, so that a benchmark or a program can see where its
// time goes. Built only with HOTPATH_LOCK_STATS=1 (the CMake option of that name sets
// it); otherwise every count is an empty inline function and read_lock_stats()
// returns zeros. Like any macro that changes inline bodies, build every translation
// unit of a program the same way (config.hpp's build-mode check stops a program that
// mixes them; the default, 0, is set there too).
//
// Each acquisition is counted exactly once, under one of
//   fast        the first CAS of lock(), lock_fifo() or try_lock(), nobody waiting
//   stolen      the same CAS while a pending owner or a queue waited
//   pending     the pending owner took the free lock
//   queued      the queue head took the free lock
//   handed_off  the pending owner or the head got it by the handoff it asked for
//   overflow    a waiter without a node (trylock-and-park) took it
//   privileged  priority_lock's privileged side took it or was handed it
// and `parked` counts sleeps (futex waits) on the word or on a node, not acquisitions.
// Counters are sharded per thread (a thread's own cache line, 64 shards, so threads
// rarely share one): one relaxed RMW per acquisition when on.
#pragma once

#include <atomic>
#include <cstdint>

#include "hotpath/detail/config.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

// A snapshot of the counters (sums over every thread since the process started).
struct lock_stats {
  std::uint64_t fast = 0, stolen = 0, pending = 0, queued = 0, handed_off = 0, overflow = 0,
                privileged = 0, parked = 0;
  // Acquisitions of every kind (parked excluded).
  std::uint64_t acquisitions() const noexcept {
    return fast + stolen + pending + queued + handed_off + overflow + privileged;
  }
};

namespace detail {

enum class lock_path : unsigned {
  fast,
  stolen,
  pending,
  queued,
  handed_off,
  overflow,
  privileged,
  parked,
  count
};

inline constexpr bool lock_stats_enabled = HOTPATH_LOCK_STATS != 0;

struct alignas(cache_line_size) lock_stat_shard {
  std::atomic<std::uint64_t> n[static_cast<unsigned>(lock_path::count)] = {};
};

struct lock_stat_shards {
  static constexpr unsigned shards = 64;
  using shard = lock_stat_shard;
  static inline shard table[shards];
  static inline std::atomic<unsigned> next_shard{0};

  static shard& mine() noexcept {
    thread_local const unsigned s = next_shard.fetch_add(1, std::memory_order_relaxed) % shards;
    return table[s];
  }
};

inline void count_lock_path(lock_path p) noexcept {
  if constexpr (lock_stats_enabled) {
    // Relaxed: a statistic, ordered with nothing.
    lock_stat_shards::mine().n[static_cast<unsigned>(p)].fetch_add(1, std::memory_order_relaxed);
  } else {
    (void)p;
  }
}

}  // namespace detail

// The counters now (all zero unless built with HOTPATH_LOCK_STATS=1).
inline lock_stats read_lock_stats() noexcept {
  lock_stats r;
  if constexpr (detail::lock_stats_enabled) {
    std::uint64_t sum[static_cast<unsigned>(detail::lock_path::count)] = {};
    for (const auto& s : detail::lock_stat_shards::table)
      for (unsigned i = 0; i < static_cast<unsigned>(detail::lock_path::count); ++i)
        sum[i] += s.n[i].load(std::memory_order_relaxed);
    using p = detail::lock_path;
    auto at = [&](p x) { return sum[static_cast<unsigned>(x)]; };
    r.fast = at(p::fast);
    r.stolen = at(p::stolen);
    r.pending = at(p::pending);
    r.queued = at(p::queued);
    r.handed_off = at(p::handed_off);
    r.overflow = at(p::overflow);
    r.privileged = at(p::privileged);
    r.parked = at(p::parked);
  }
  return r;
}

}  // namespace hotpath
HOTPATH_VISIBILITY_END
