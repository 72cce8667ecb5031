// SPDX-License-Identifier: MIT
// detail::table_budget: the memory budget of a bucket_table (bucket_table.hpp). It
// guarantees that the bytes taken and not given back never exceed the budget, at any
// instant and any thread count, and that taking and giving back touch no shared line
// while the table is far from its budget. The table decides what to charge and when to
// evict; this part only moves bytes.
//
// The bound is exact. The budget's bytes are conserved between four places: a
// shared pool, one reserve per cpu, the entries' charges and the hands of a thread
// moving them. A charge takes its delta from its cpu's reserve, else from the pool
// (with charge_batch more for later charges), else it gathers its cpu's reserve and
// those this thread filled last (on cpus it ran on before) and takes the rest from
// the pool; only then does it evict (the table's part). Every cpu's reserve is gathered only at the
// last attempt (before a refusal), and after an eviction that found nothing: at a full table each
// thread's gathers took what another had just put on its own cpu, a line moved between cores at
// every charge. (If a gather falls short, what it gathered goes to the pool, where a charger
// gathering at the same time finds it: of two racing for room for one, one wins.) What its
// evictions free stays in its hands until it has its delta (else another charger's gather could
// take it first, and the evicter, out of attempts, refuse: under a flood at two threads that
// refused a legit fragment now and then; the price: two chargers each short of two victims' worth
// may now both be refused, where one gathered both). An uncharge puts the bytes back in its cpu's
// reserve, and a reserve above 2 x charge_batch returns the excess to the pool. Every move is an
// atomic read-modify-write that takes from a place before adding to another, and no place goes
// below zero, so the bytes held by linked entries never exceed the budget, at any instant and any
// thread count; relaxed order suffices, since the bound rests on each word's modification order
// alone. (The kernel's percpu_counter_compare() bound, which an earlier version used, let each
// thread folding a batch at that instant add up to one batch.) The price: a charge may evict while
// room exists that it did not see, bytes in another thread's hands or given back to a reserve after
// its gather passed it (the gather is not a snapshot), the next charges find them; or another
// thread's spare bytes on another cpu (at most 2 x charge_batch a cpu), found by charges on that
// cpu and by last attempts, so a charge of more than one victim's worth may evict several. One
// thread alone (the only one to give bytes back) fills the budget exactly wherever it runs, so what
// it evicts does not depend on the cpus it ran on. charged() is the budget less the pool and the
// reserves: exact when no charge runs; while charges move bytes, it can read high (never above the
// budget) or low (even negative).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#include "hotpath/detail/config.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/percpu.hpp"

namespace hotpath::detail {

inline std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    return b > 0 ? std::numeric_limits<std::int64_t>::max()
                 : std::numeric_limits<std::int64_t>::min();
  return r;
}

// Policy gives the atomic template of the pool and the reserves, and may define
// current_cpu() (the reserve a charge uses); see detail/policy.hpp.
template <class Policy>
class table_budget {
  template <class U>
  using atomic = typename Policy::template atomic<U>;

 public:
  // budget >= 0 bytes; charge_batch: bytes a cpu takes from the pool at a time (it
  // keeps at most twice that); <= 0: budget / (32 x cpus), at least 64.
  table_budget(std::int64_t budget, std::int64_t charge_batch) noexcept : budget_(budget) {
    HOTPATH_ASSERT(budget >= 0, "bucket_table: negative budget");
    if (charge_batch <= 0)
      charge_batch =
          std::max<std::int64_t>(64, budget / (32 * static_cast<std::int64_t>(possible_cpus())));
    // A reserve holds up to two batches: keep 2 x batch + a charge within int64.
    batch_ = std::min(charge_batch, std::numeric_limits<std::int64_t>::max() / 4);
    free_.store(budget, std::memory_order_relaxed);
  }
  table_budget(const table_budget&) = delete;
  table_budget& operator=(const table_budget&) = delete;

  std::int64_t budget() const noexcept { return budget_; }
  std::int64_t batch() const noexcept { return batch_; }
  // Bytes taken and not given back: the budget less the pool and the reserves.
  std::int64_t charged() const noexcept {
    std::int64_t spare = free_.load(std::memory_order_relaxed);
    for (const reserve& r : reserves_)  // saturating: bytes on the move may count twice
      spare = saturating_add(spare, r.bytes.load(std::memory_order_relaxed));
    return budget_ - spare;
  }
  // Bytes in the shared pool: one load.
  std::int64_t pool_bytes() const noexcept { return free_.load(std::memory_order_relaxed); }

  // Takes d > 0 bytes of the budget from what is near: this cpu's reserve, else the
  // pool (with a batch more). No other cpu's line is written.
  bool take_near(std::int64_t d) noexcept {
    atomic<std::int64_t>& mine = local_reserve();
    std::int64_t x = mine.load(std::memory_order_relaxed);
    while (x >= d)
      if (mine.compare_exchange_weak(x, x - d, std::memory_order_relaxed)) return true;
    return take_shared(d, batch_);
  }
  // take_near(), else gathers the spare bytes of every cpu (ours too: this thread may
  // have left some on a cpu it ran on before), or with `all` false only of this cpu and
  // of those this thread put there last; false if the pool and those reserves together
  // lack them (as far as this thread saw).
  bool take(std::int64_t d, bool all = true) noexcept {
    if (take_near(d)) return true;
    const std::uintptr_t me = thread_tag();
    const reserve* here = &local();
    std::int64_t got = 0;
    for (reserve& r : reserves_) {
      if (!all && &r != here && r.depositor.load(std::memory_order_relaxed) != me) continue;
      if (r.bytes.load(std::memory_order_relaxed) > 0)
        got += r.bytes.exchange(0, std::memory_order_relaxed);
    }
    if (got >= d) {
      if (got > d) give_back(got - d);
      return true;
    }
    if (take_shared(d - got, 0)) return true;  // what was gathered, and the rest from the pool
    // Short: what was gathered goes to the pool. Of chargers gathering at once, each
    // with part of the room, the last to deposit finds every part there.
    if (got > 0) free_.fetch_add(got, std::memory_order_relaxed);
    return take_shared(d, 0);
  }

  // Returns d >= 0 bytes to this cpu's reserve; what lifts it above 2 x charge_batch
  // goes back to the pool, down to one batch.
  void give_back(std::int64_t d) noexcept {
    if (d == 0) return;
    reserve& r = local();
    // Written only when the depositor changes (see reserve).
    const std::uintptr_t me = thread_tag();
    if (r.depositor.load(std::memory_order_relaxed) != me)
      r.depositor.store(me, std::memory_order_relaxed);
    atomic<std::int64_t>& mine = r.bytes;
    const std::int64_t batch = batch_;
    std::int64_t x = mine.load(std::memory_order_relaxed);
    std::int64_t spill = 0;
    for (;;) {
      std::int64_t n = x + d;
      spill = 0;
      if (n > 2 * batch) {
        spill = n - batch;
        n = batch;
      }
      if (mine.compare_exchange_weak(x, n, std::memory_order_relaxed)) break;
    }
    if (spill > 0) free_.fetch_add(spill, std::memory_order_relaxed);
  }

 private:
  // The budget's bytes (header comment, "Budget bound"). All relaxed: the bound needs
  // only that each word's read-modify-writes take from what the word holds.
  struct reserve {
    atomic<std::int64_t> bytes{0};
    // The thread that last put bytes here (thread_tag()): a hint, read by gathers. On
    // a line of its own, written only when the depositor changes: other cpus read it
    // at every charge of a full table, and beside `bytes` each read would take the line
    // the owning cpu writes at each of its charges.
    alignas(cache_line_size) atomic<std::uintptr_t> depositor{0};
  };
  // This thread's tag: the address of a thread's own object (the policy's, so that a
  // scheduler running threads as fibers gives each fiber its own), distinct among
  // running threads. (A copy of this header in each of two shared objects gives a
  // thread two tags; a tag is only a hint, see try_charge().)
  static std::uintptr_t thread_tag() noexcept {
    return reinterpret_cast<std::uintptr_t>(&policy_local<Policy, char>());
  }
  static unsigned cpu() noexcept {
    if constexpr (requires { Policy::current_cpu(); })
      return Policy::current_cpu();
    else
      return current_cpu();
  }
  reserve& local() noexcept { return reserves_[reserves_.index(cpu())]; }
  atomic<std::int64_t>& local_reserve() noexcept { return local().bytes; }

  // Takes d bytes from the pool, and up to `extra` more for this cpu's reserve.
  bool take_shared(std::int64_t d, std::int64_t extra) noexcept {
    std::int64_t f = free_.load(std::memory_order_relaxed);
    while (f >= d) {
      const std::int64_t n = d + std::min(extra, f - d);  // no d + extra: may overflow
      if (free_.compare_exchange_weak(f, f - n, std::memory_order_relaxed)) {
        if (n > d) give_back(n - d);
        return true;
      }
    }
    return false;
  }

  std::int64_t budget_;
  std::int64_t batch_ = 0;
  percpu<reserve> reserves_;
  alignas(cache_line_size) atomic<std::int64_t> free_{0};  // the shared pool
};

}  // namespace hotpath::detail
