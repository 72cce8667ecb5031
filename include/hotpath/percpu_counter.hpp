// SPDX-License-Identifier: MIT
// percpu_counter: the kernel's percpu_counter (lib/percpu_counter.c) in user space,
// and percpu_stats<N>: several plain per-cpu counters summed on demand (the
// kernel's bstats/qstats).
//
//   count_            the centre; read() returns it, O(1)
//   slot[cpu].fast    delta written ONLY by restartable sequences on that cpu
//   slot[cpu].slow    delta written ONLY by relaxed atomic RMWs, from any cpu
//
// add(v) on the fast path is one rseq (detail/rseq.hpp): load the current cpu's
// fast delta, add v, and commit with a plain store if the result stays within
// (-batch, batch). No locked instruction, no shared line. Otherwise it folds: a
// second rseq takes the current cpu's fast delta (and zeroes it), and the delta plus
// v go into the centre with one relaxed fetch_add, the only shared write, once per
// `batch` adds per cpu. The portable path (no rseq registered, sanitizer builds,
// other architectures, or set_rseq_fast_path(false)) does the same with a relaxed
// CAS loop on the slow word of the slot current_cpu() names: it stores the new
// delta if it stays within the batch, else swaps in 0 and puts the delta plus v
// into the centre. The two words never mix: a non-locked rseq store on cpu 0 would lose a
// locked add that a migrated thread made to the same word from cpu 1.
//
// No lock: the kernel folds under a spinlock with preemption off; in user space a
// fold lock whose holder is preempted convoys every other folder (an early version
// with a ticket lock there ran 8 threads on 2 cpus ~100x slower). The price is in
// the bound below. Nothing waits; the Policy parameter gives the atomic type of
// the portable words and the centre and may define current_cpu() (a test's
// deterministic scheduler does both, to explore migrations). The rseq words stay
// std::atomic<int64_t> for the assembly, and the rseq path is compiled only for a
// policy whose atomics are std::atomic.
//
// Cost (README, "Per-cpu counters"): one add is ~0.5x an uncontended fetch_add; with
// the default batch, two cpus adding at once pay a line transfer per fold (~20 ns
// per 32 adds here) for the shared centre; percpu_stats, which has no centre, does not.
//
// Error bound of read(). Every add that has returned leaves each word within
// (-batch, batch), where batch is the largest ever set (a word keeps what it holds
// when set_batch() lowers the batch), so with no add in progress
//   |read() - exact| <= error_bound() = words_per_slot * slots * (batch - 1)
// (words_per_slot is 2 where the rseq path is compiled in, else 1; in a process where
// rseq is registered, the slow words stay 0 and the kernel's batch * cpus holds).
// Each thread in the middle of an add() adds at most batch - 1 + |v| to that, as in
// the kernel: the word it has taken plus its own v, not yet put into the centre (a
// two-instruction window, so in practice only a thread preempted there). A folder
// never holds another thread's v: on both paths it takes a word that every
// returned add left within the batch. sum() reads the centre and every word
// (O(cpus)); it is exact whenever no add runs concurrently.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "hotpath/detail/config.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/detail/rseq.hpp"
#include "hotpath/percpu.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

namespace detail {
// |a - b| for any integral type, without overflow.
template <class T>
std::uint64_t distance(T a, T b) noexcept {
  const auto ua = static_cast<std::uint64_t>(a);
  const auto ub = static_cast<std::uint64_t>(b);
  return a > b ? ua - ub : ub - ua;
}
inline std::int64_t wrapping_add(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
inline bool beyond(std::int64_t n, std::int64_t batch) noexcept {
  return n >= batch || n <= -batch;
}
}  // namespace detail

template <class T = std::int64_t, class Policy = default_policy>
class percpu_counter {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                    sizeof(T) <= sizeof(std::int64_t),
                "percpu_counter<T>: T must be a non-bool integral type of at most 64 bits");

  template <class U>
  using atomic = typename Policy::template atomic<U>;
  // The rseq path needs the words to be plain std::atomic (it writes them in asm).
  static constexpr bool rseq_path =
      HOTPATH_RSEQ && std::is_same_v<atomic<std::int64_t>, std::atomic<std::int64_t>>;

  struct slot {
    std::atomic<std::int64_t> fast{0};
    atomic<std::int64_t> slow{0};
  };
  using slots_type = percpu<slot>;
  static constexpr std::size_t stride = slots_type::stride;

 public:
  using value_type = T;
  static constexpr std::int64_t words_per_slot = HOTPATH_RSEQ ? 2 : 1;

  // The kernel's default batch: max(32, 2 x cpus).
  static std::int64_t default_batch() noexcept {
    return std::max<std::int64_t>(32, 2 * static_cast<std::int64_t>(possible_cpus()));
  }

  percpu_counter() : percpu_counter(T{0}) {}
  explicit percpu_counter(T initial)
      : batch_(default_batch()), max_batch_(default_batch()), count_(initial) {}
  percpu_counter(const percpu_counter&) = delete;
  percpu_counter& operator=(const percpu_counter&) = delete;

  void add(T v) noexcept {
    // Through the signed type: an unsigned T's -1 (dec()) is a delta of -1, not
    // 2^32 - 1 that would fold every time; the centre wraps modulo 2^bits either way.
    const auto d = static_cast<std::int64_t>(static_cast<std::make_signed_t<T>>(v));
#if HOTPATH_RSEQ
    if constexpr (rseq_path) {
      // Acquire pairs with set_batch()'s release: see max_batch_ there.
      const std::int64_t lm1 = batch_.load(std::memory_order_acquire) - 1;
      switch (detail::rseq_add_below<stride>(&slots_.data()->fast, n(), d, lm1,
                                             2 * static_cast<std::uint64_t>(lm1))) {
        case detail::rseq_status::done:
          return;
        case detail::rseq_status::over_limit:
          fold_fast(d);
          return;
        case detail::rseq_status::unavailable:
          break;
      }
    }
#endif
    add_portable(d);
  }
  void inc() noexcept {
    add(T{1});
  }
  void dec() noexcept {
    add(static_cast<T>(-1));
  }

  // The centre: O(1), off by at most error_bound() (see the header comment).
  T read() const noexcept {
    return count_.load(std::memory_order_relaxed);
  }

  // The centre plus every cpu's deltas: exact when no add runs concurrently.
  T sum() const noexcept {
    auto acc = static_cast<std::uint64_t>(count_.load(std::memory_order_relaxed));
    for (const slot& s : slots_) {
      acc += static_cast<std::uint64_t>(s.fast.load(std::memory_order_relaxed));
      acc += static_cast<std::uint64_t>(s.slow.load(std::memory_order_relaxed));
    }
    return static_cast<T>(acc);
  }

  // Sign of (value - rhs), as the kernel's __percpu_counter_compare: from read()
  // when it is further than error_bound() from rhs, else from the exact sum().
  // Relaxed loads suffice on any cpu: the answer is exact for every add that happens
  // before the call (coherence: such an add's writes, and set_batch()'s raise of the
  // bound before it, are visible to loads that happen after), and an add without
  // that order is in progress to this caller, which error_bound() does not cover,
  // as in the kernel.
  int compare(T rhs) const noexcept {
    const T approx = read();
    if (detail::distance(approx, rhs) > static_cast<std::uint64_t>(error_bound()))
      return approx > rhs ? 1 : -1;
    const T exact = sum();
    return exact > rhs ? 1 : (exact < rhs ? -1 : 0);
  }

  std::int64_t batch() const noexcept {
    return batch_.load(std::memory_order_relaxed);
  }
  // Deltas fold into the centre once they reach `b` (>= 1). Takes effect for
  // later adds (a word beyond a smaller new batch folds at its next add); may be
  // called concurrently with them. Words filled under a larger batch keep their
  // deltas until their cpu adds again, so error_bound() stays that of the largest
  // batch ever set.
  void set_batch(std::int64_t b) noexcept {
    HOTPATH_ASSERT(b >= 1, "percpu_counter: batch must be at least 1");
    // Raise the bound first: a word may fill up to b - 1 as soon as b is visible.
    // That order must hold for other threads too, and with relaxed accesses it need
    // not: on a weakly ordered cpu (ARM, POWER) the two stores may become visible in
    // either order, so a thread could add under the new batch while a thread that
    // later sees that add (joins the adder, say) still reads the old max_batch_, and
    // error_bound() and compare() would trust a bound the words exceed. The release
    // store below and the adds' acquire loads of batch_ make the raise happen before
    // every add that uses b, hence before whatever happens after such an add. (Free
    // on x86, where every load acquires and every store releases.) A reader with no
    // happens-before to an add may see its word without the raise; to it that add is
    // still in progress, which the bound allows for (header comment).
    std::int64_t m = max_batch_.load(std::memory_order_relaxed);
    while (m < b && !max_batch_.compare_exchange_weak(m, b, std::memory_order_relaxed,
                                                      std::memory_order_relaxed)) {
    }
    batch_.store(b, std::memory_order_release);
  }

  // The most read() can differ from the exact value while no add() is in progress,
  // from the largest batch ever set, saturating at INT64_MAX; each add() in progress
  // may add that batch - 1 + |v| (header comment).
  std::int64_t error_bound() const noexcept {
    const std::int64_t per_word = max_batch_.load(std::memory_order_relaxed) - 1;
    const std::int64_t words = words_per_slot * static_cast<std::int64_t>(slots_.size());
    std::int64_t bound = 0;
    if (__builtin_mul_overflow(words, per_word, &bound))
      return std::numeric_limits<std::int64_t>::max();
    return bound;
  }

  // Diagnostics: the deltas not yet folded into the centre, per path (the rseq words
  // and the portable words). Tests use it to see which path the adds took.
  struct unfolded_deltas {
    std::int64_t rseq = 0;
    std::int64_t portable = 0;
  };
  unfolded_deltas unfolded() const noexcept {
    unfolded_deltas u;
    for (const slot& s : slots_) {
      u.rseq = detail::wrapping_add(u.rseq, s.fast.load(std::memory_order_relaxed));
      u.portable = detail::wrapping_add(u.portable, s.slow.load(std::memory_order_relaxed));
    }
    return u;
  }

  // Number of per-cpu slots (possible_cpus()).
  std::size_t slots() const noexcept {
    return slots_.size();
  }

 private:
  unsigned n() const noexcept {
    return static_cast<unsigned>(slots_.size());
  }
  static unsigned cpu() noexcept {
    if constexpr (requires { Policy::current_cpu(); }) {
      return Policy::current_cpu();
    } else {
      return current_cpu();
    }
  }

#if HOTPATH_RSEQ
  void fold_fast(std::int64_t d) noexcept {
    std::int64_t taken = 0;
    // Whatever cpu we are on now: any cpu's delta may go to the centre.
    if (detail::rseq_take<stride>(&slots_.data()->fast, n(), &taken) != detail::rseq_status::done)
      taken = 0;
    // Relaxed: a statistic, ordered with nothing else.
    count_.fetch_add(static_cast<T>(detail::wrapping_add(taken, d)), std::memory_order_relaxed);
  }
#endif

  // A CAS loop rather than fetch_add then exchange: with those, a folder could
  // take other threads' deltas (already added, their add() returned) and be
  // preempted before putting them into the centre. Here a folder only ever holds
  // the word it replaced (|w| < batch) plus its own d, as the kernel's does.
  void add_portable(std::int64_t d) noexcept {
    atomic<std::int64_t>& w = slots_[slots_.index(cpu())].slow;
    // Acquire pairs with set_batch()'s release: see max_batch_ there.
    const std::int64_t batch = batch_.load(std::memory_order_acquire);
    // Relaxed throughout: the word is only a statistic; sum() after a join sees it
    // through the join's happens-before.
    std::int64_t old = w.load(std::memory_order_relaxed);
    for (;;) {
      const std::int64_t now = detail::wrapping_add(old, d);
      if (!detail::beyond(now, batch)) {
        if (w.compare_exchange_weak(old, now, std::memory_order_relaxed, std::memory_order_relaxed))
          return;
      } else if (w.compare_exchange_weak(old, 0, std::memory_order_relaxed,
                                         std::memory_order_relaxed)) {
        count_.fetch_add(static_cast<T>(now), std::memory_order_relaxed);
        return;
      }
    }
  }

  // Read on every add: kept apart from the centre, which folds write.
  slots_type slots_;
  atomic<std::int64_t> batch_;
  atomic<std::int64_t> max_batch_;  // never decreases; for error_bound()
  alignas(cache_line_size) atomic<T> count_;
};

// N counters per cpu updated together (packets, bytes, drops), with the same fast
// path as percpu_counter but no centre: add() never folds, and sum() / snapshot()
// visit every cpu. For counters that are written often and read rarely.
//
//   enum { packets, bytes, drops };
//   hotpath::percpu_stats<3> stats;        // one line per cpu for N <= 4
//   stats.inc(packets); stats.add(bytes, len);
//   std::array<std::int64_t, 3> now = stats.snapshot();
//
// snapshot() reads all fields in one pass over the cpus; while adds run, the fields
// are each a recent value, not one instant (a packet may be counted in packets but
// not yet in bytes). Exact when no add runs concurrently.
template <std::size_t N>
class percpu_stats {
  static_assert(N >= 1, "percpu_stats<N>: N >= 1");
  // Aligned to a power of two so the slot stride is one (a shift in the sequence).
  struct alignas(std::bit_ceil(2 * N * sizeof(std::int64_t))) slot {
    std::atomic<std::int64_t> fast[N];  // rseq only
    std::atomic<std::int64_t> slow[N];  // relaxed atomics only
  };
  using slots_type = percpu<slot>;
  static constexpr std::size_t stride = slots_type::stride;

 public:
  static constexpr std::size_t fields = N;

  percpu_stats() = default;
  percpu_stats(const percpu_stats&) = delete;
  percpu_stats& operator=(const percpu_stats&) = delete;

  void add(std::size_t field, std::int64_t v) noexcept {
    HOTPATH_ASSERT(field < N, "percpu_stats: field out of range");
#if HOTPATH_RSEQ
    if (detail::rseq_add<stride>(&slots_.data()->fast[field], static_cast<unsigned>(slots_.size()),
                                 v) == detail::rseq_status::done)
      return;
#endif
    // Relaxed: a statistic; readers are ordered by whatever made them read.
    slots_[slots_.index(current_cpu())].slow[field].fetch_add(v, std::memory_order_relaxed);
  }
  void inc(std::size_t field) noexcept {
    add(field, 1);
  }

  // Exact when no add runs concurrently.
  std::int64_t sum(std::size_t field) const noexcept {
    HOTPATH_ASSERT(field < N, "percpu_stats: field out of range");
    std::uint64_t acc = 0;
    for (const slot& s : slots_) {
      acc += static_cast<std::uint64_t>(s.fast[field].load(std::memory_order_relaxed));
      acc += static_cast<std::uint64_t>(s.slow[field].load(std::memory_order_relaxed));
    }
    return static_cast<std::int64_t>(acc);
  }

  // All fields in one pass over the cpus.
  std::array<std::int64_t, N> snapshot() const noexcept {
    std::array<std::uint64_t, N> acc{};
    for (const slot& s : slots_) {
      for (std::size_t f = 0; f < N; ++f) {
        acc[f] += static_cast<std::uint64_t>(s.fast[f].load(std::memory_order_relaxed));
        acc[f] += static_cast<std::uint64_t>(s.slow[f].load(std::memory_order_relaxed));
      }
    }
    std::array<std::int64_t, N> out{};
    for (std::size_t f = 0; f < N; ++f)
      out[f] = static_cast<std::int64_t>(acc[f]);
    return out;
  }

 private:
  slots_type slots_;
};

}  // namespace hotpath
HOTPATH_VISIBILITY_END
