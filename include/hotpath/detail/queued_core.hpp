// SPDX-License-Identifier: MIT
// detail::queued_core<Policy, Requests>: the algorithm of queued_lock (Requests false)
// and priority_lock (true). This header holds the word, its transitions and the
// uncontended paths; detail/queued_slowpath.hpp holds the contended ones (pending, the
// queue, the handoff, sleeping), as the kernel splits qspinlock.h from qspinlock.c.
// Without Requests the request bits are never set and no path tests them.
//
// The word:
//
//   bits 0-7   locked byte: 0 free, 1 held
//   bit  8     pending: the first contender's claim, waiting without a node
//   bit  9     slow: the pending owner or the queue head sleeps on the word; unlock
//              must wake it
//   bit  10    parked: an overflow waiter (no node) sleeps; unlock must wake it
//   bit  11    handoff: the pending owner, or else the queue head, has waited past
//              its bound; unlock passes the lock to it (clears this bit, leaves the
//              locked byte set)
//   bits 12-15 priority_lock only (zero in a queued_lock): request (the privileged
//              thread waits; every ordinary way in fails), prio_slow (it sleeps),
//              prio_held (it holds the lock), ceded (it holds it for an ordinary owner
//              that gets it back at its unlock). See priority_lock.hpp.
//   bits 16-17 tail nesting index (which of the tail thread's 4 nodes)
//   bits 18-31 tail thread slot + 1 (0: no queue)
//
// Transitions, in one notation for the whole word (qspinlock.c's, with the flags):
//
//   tail,pending,locked [flags]
//
// tail: 0 (no queue), t (the caller's own), n (another thread's), * (any); pending
// and locked: 0, 1 or * (locked 1: the byte is set). [flags] names the flag bits a
// transition tests (before the arrow) or changes (after it: +set, -clear); flags not
// named are left as they are. h handoff, s slow, p parked; priority_lock's r request,
// rs prio_slow, ph prio_held, c ceded. Every helper (here and in queued_slowpath.hpp) is tagged
// with the transitions it makes; a queue node's own word goes waiting -> sleeping -> head.
//
//   *,*,0 -> *,*,1               lock(): the byte CAS (try_lock)
//   *,*,1 -> *,*,0  [no h s p]   unlock(): one store (unlock)
//   0,0,* -> 0,1,*               2nd thread claims pending (lock_slow)
//   *,1,0 -> *,0,1  [-h]         the pending owner takes the free lock (pending_wait)
//   *,*,* -> t,*,*               3rd+ thread queues on a node (queue)
//   t,0,0 -> 0,0,1  [-h -s]      the queue head takes it, last in the queue
//   n,0,0 -> n,0,1  [-h -s]      ... or with successors, and makes the next head
//   *,*,* -> *,*,*  [+h]         the pending owner or head, past its bound, asks
//   *,*,1 [h] -> *,*,1 [-h -s]   and unlock() hands it the lock (unlock_slow)
//
// Uncontended, lock() is one compare-and-swap of the locked byte and unlock() one
// release store to it, as in the kernel, plus a load of the flag byte before the
// store and of a sleeper counter after it (no locked instruction). Both use the
// byte, not the word, because a byte store followed by a word CAS on the same address
// defeats store forwarding (2.8x the cost measured on x86). The owner holds no node:
// nodes are used only while waiting.
//
// Nodes: 4 per thread, as the kernel's 4 per cpu (task, softirq, hardirq, NMI). A
// thread uses a node only inside lock(), so in user space depth > 1 arises only when
// a waiter is interrupted (a signal handler, or a waiting policy) and takes another
// queued_lock. A thread is named in the tail by its slot (detail/thread_slots.hpp),
// taken on first contention, with the node block beside it, and returned at thread
// exit. That first contention takes a mutex and allocates, so it must not happen in
// a signal handler: a thread whose handler may contend calls prepare_thread()
// outside it first; after that no wait of the thread allocates or blocks on anything
// but the lock. Neither lock() nor unlock() changes errno (detail::errno_keeper).
// Beyond 4 nested waits, with no slot (more live threads than the tail can name:
// 16383), or with no memory for the nodes, a thread falls back to trylock-and-park on
// the word, as the kernel falls back to trylock spinning.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "hotpath/detail/annotations.hpp"
#include "hotpath/detail/config.hpp"
#include "hotpath/detail/futex.hpp"
#include "hotpath/detail/lock_stats.hpp"
#include "hotpath/detail/membarrier.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/detail/thread_slots.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

namespace detail {

struct lock_test_access;  // tests' view of the word (tests/support/lock_test_access.hpp)

// How many threads sleep (or are about to) on the words that hash to each bucket.
// unlock() reads it after the store that releases the lock, when the lock may already
// be destroyed: a table with static storage, which outlives every lock, keeps that
// read safe. One per process (default visibility, see detail/config.hpp) and per
// atomic type (a test's instrumented atomics get their own). Buckets are padded so
// that one lock's sleepers do not make another's unlock() miss in its cache; locks
// sharing a bucket cost each other only spurious wake-ups while one of them has
// sleepers.
template <class Atomic>
struct sleeper_table {
  static constexpr std::size_t buckets = 256;
  struct alignas(cache_line_size) bucket {
    Atomic count{0};
  };
  static inline bucket table[buckets];

  static Atomic& of(const void* word) noexcept {
    // Fibonacci hashing of the address: neighbouring locks land far apart.
    const auto a = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(word));
    return table[(a * 0x9e3779b97f4a7c15ull) >> 56].count;
  }
};

// The algorithm, shared with priority_lock: Requests adds the privileged request
// bits (priority_lock.hpp); without it they are never set and cost nothing.
template <class Policy, bool Requests>
class queued_core {
  using wait = typename Policy::wait;
  template <class T>
  using atomic = typename Policy::template atomic<T>;
  using slots = detail::thread_slot_registry;

 public:
  static constexpr std::uint32_t locked_val = 1;
  static constexpr std::uint32_t locked_mask = 0xffu;
  static constexpr std::uint32_t pending = 1u << 8;
  static constexpr std::uint32_t slow = 1u << 9;
  static constexpr std::uint32_t parked = 1u << 10;
  static constexpr std::uint32_t handoff = 1u << 11;
  static constexpr std::uint32_t request = 1u << 12;
  static constexpr std::uint32_t prio_slow = 1u << 13;
  static constexpr std::uint32_t prio_held = 1u << 14;
  static constexpr std::uint32_t ceded = 1u << 15;
  static constexpr unsigned idx_shift = 16;
  static constexpr unsigned slot_shift = 18;
  static constexpr std::uint32_t tail_mask = ~std::uint32_t{0} << idx_shift;
  static constexpr unsigned nodes_per_thread = 4;
  // What keeps an ordinary thread out: the lock held, or a privileged request.
  static constexpr std::uint32_t busy_mask = locked_mask | (Requests ? request : 0u);
  // Flags that make unlock() take the RMW path.
  static constexpr std::uint32_t unlock_flags =
      handoff | slow | parked | (Requests ? request | prio_slow | prio_held : 0u);
  // What unlock()'s check before its store looks for.
  static constexpr std::uint32_t unlock_check_flags = unlock_flags;
  // The pending owner or the head asks for the handoff after this many relax()
  // steps of waiting (queued_default_policy's pauses, before its yields), or once it
  // has slept. A policy may set its own (`static constexpr unsigned handoff_after`):
  // longer batches for more throughput, shorter for a tighter wait.
  static constexpr unsigned handoff_after = [] {
    if constexpr (requires { Policy::handoff_after; }) {
      static_assert(Policy::handoff_after > 0);
      return unsigned{Policy::handoff_after};
    } else {
      return 256u;
    }
  }();
  // It loads the word every 2, 4, ... up to this many steps (every step once past the
  // bound).
  static constexpr unsigned poll_gap_max = 64;

  constexpr queued_core() noexcept = default;
  queued_core(const queued_core&) = delete;
  queued_core& operator=(const queued_core&) = delete;

  void lock() noexcept {
    if (try_lock()) [[likely]]
      return;
    lock_slow();
  }

  // 0,0,0 -> 0,0,1  [no flags]
  // lock() without the steal attempt: the kernel's fast path, a CAS of the whole word
  // from 0. If every thread enters through it (try_lock() aside), nobody passes the
  // pending owner or the queue: the lock is FIFO (fifo_priority_lock's ordinary side).
  void lock_fifo() noexcept {
    std::uint32_t val = 0;
    // Acquire pairs with the release store of the previous owner's unlock().
    if (word_.compare_exchange_strong(val, locked_val, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
      count(path::fast);
      return;
    }
    lock_slow();
  }

  // *,*,0 -> *,*,1; priority_lock, seeing [r] after it: *,*,1 -> *,*,0 (backs off)
  // One attempt at the free locked byte (the steal attempt of lock()).
  bool try_lock() noexcept {
    if constexpr (split_ops) {
      if (!cas_locked_byte()) return false;
      if constexpr (Requests) {
        // The byte CAS cannot see the request bit. Both are RMWs of this word, so a
        // request published before our CAS is seen by this load; then we back off
        // before any critical section begins: unlock() hands the lock to the
        // privileged thread. A request after our CAS waits for our section.
        if (flag_bits() & request) [[unlikely]] {
          unlock();
          return false;
        }
      }
      if constexpr (detail::lock_stats_enabled) {
        count_steal(word_.load(std::memory_order_relaxed));  // a snapshot: who waited
      }
      return true;
    } else {
      std::uint32_t val = word_.load(std::memory_order_relaxed);
      if (val & busy_mask) return false;
      // Acquire pairs with the release of the previous owner's unlock().
      if (!word_.compare_exchange_strong(val, val | locked_val, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
        return false;
      }
      count_steal(val);
      return true;
    }
  }

  // *,*,1 -> *,*,0  [no h s p r rs ph c]; any of them: unlock_slow()
  // Safe to destroy the lock once unlocked, even while the unlock() that released it
  // to us is still returning: after its release, unlock() neither writes nor reads
  // the lock (it reads the sleeper table, which never dies, and may issue a futex
  // wake-up, harmless on an address whose object has ended).
  void unlock() noexcept {
    HOTPATH_ASSERT(is_locked(), "queued_lock::unlock() of a free lock");
    if constexpr (split_ops) {
      // A handoff is asked for (the byte must stay set), or somebody sleeps: release
      // and clear the flags in one RMW, then only wake.
      if (flag_bits() & unlock_check_flags) [[unlikely]] {
        unlock_slow();
        return;
      }
      // *,*,1 -> *,*,0. Release hands the critical section to the next acquire of
      // the lock. Only the owner writes the locked byte, so a plain store suffices,
      // as in the kernel.
      release_locked_byte();
      if constexpr (wait::parks) {
        // A sleeper that announced itself between our check and our store. The lock
        // may already be retaken, released and destroyed, so we read the sleeper
        // table, not the word: Dekker with park_on_word()'s (count++, heavy_fence,
        // load word). A sleeper counted before our store is seen here and woken; one
        // counted after it sees the byte clear (or a new owner's word, whose unlock
        // sees its flag) and does not sleep on our release. It left its flag in the
        // word: the next unlock() takes unlock_slow(), which clears it. A count from
        // another lock of the bucket costs a spurious wake-up (sleepers loop).
        detail::policy_light_fence<Policy>();  // pairs with heavy_fence() in park_on_word()
        if (sleepers::of(this).load(std::memory_order_relaxed) != 0) [[unlikely]]
          detail::policy_unpark_all<Policy>(word_);
      }
    } else {
      unlock_slow();
    }
  }

  // The privileged side (Requests only; priority_lock.hpp). Publish the request,
  // after which every ordinary way in fails, then take the lock when it is free or
  // when the owner's unlock() hands it over.
  void lock_request() noexcept requires Requests;

  // *,*,0 -> *,*,1  [+ph]
  bool try_lock_request() noexcept requires Requests {
    std::uint32_t val = word_.load(std::memory_order_relaxed);
    HOTPATH_ASSERT((val & (request | prio_held)) == 0,
                   "priority_lock: two threads on the privileged side at once");
    while ((val & locked_mask) == 0) {
      // Acquire pairs with the release store (or RMW) of the previous owner's unlock().
      if (word_.compare_exchange_weak(val, val | locked_val | prio_held, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        count(path::privileged);
        return true;
      }
    }
    return false;
  }

  // Called by an ordinary owner in a long critical section: if a privileged request
  // is pending, lend the lock to the privileged thread and take it back when its
  // section ends, before any ordinary thread (the locked byte stays set throughout),
  // as the kernel's cond_resched_lock() breaks a long section. True if it ceded.
  bool cede() noexcept requires Requests;

  // True if some thread holds the lock (a snapshot).
  bool is_locked() const noexcept {
    return (word_.load(std::memory_order_relaxed) & locked_mask) != 0;
  }
  // True while a privileged request is published and not yet granted (a snapshot).
  bool request_pending() const noexcept requires Requests {
    return (word_.load(std::memory_order_relaxed) & request) != 0;
  }
  // Takes this thread's slot and creates its nodes, so that no later lock() of this
  // thread allocates or takes a mutex: call it before a signal handler of this
  // thread may contend (a first wait in a queue, outside a handler, does the same).
  // False if no slot or no memory was to be had: lock() then waits without a node.
  static bool prepare_thread() noexcept {
    (void)depth();
    const std::uint32_t slot = this_slot();
    return slot != slots::no_slot && table::find_or_create(slot) != nullptr;
  }

 private:
  friend struct detail::lock_test_access;

  enum : std::uint32_t { waiting = 0, head = 1, sleeping = 2 };

  struct alignas(cache_line_size) node {
    atomic<node*> next{nullptr};
    atomic<std::uint32_t> state{waiting};
  };
  struct node_block {
    node nodes[nodes_per_thread];
  };
  using table = detail::slot_table<node_block>;

  // Mixed-size access to the word, as the kernel does: the locked byte alone (CAS,
  // store) and the flag byte (load). For the real std::atomic<uint32_t>, whose object
  // representation is the value, these are byte operations (mixed-size atomics on
  // one object, which GCC and Clang compile to plain byte instructions). A policy
  // atomic that offers store_bits() (the deterministic scheduler's) gets word
  // operations with the same effect on the other bytes; other atomics take the
  // word-wide paths (the RMW unlock).
#if defined(__GNUC__)
  // Exactly std::atomic: a test's atomic derived from it (which may sleep on the raw
  // futex) overrides the RMWs to watch the word, so it must take the word-wide paths.
  static constexpr bool byte_ops =
      std::is_same_v<atomic<std::uint32_t>, std::atomic<std::uint32_t>> &&
      detail::raw_futex_ok<atomic<std::uint32_t>>;
#else
  static constexpr bool byte_ops = false;
#endif
  static constexpr bool split_ops = byte_ops || requires(atomic<std::uint32_t> & a) {
    a.store_bits(locked_mask, 0u, std::memory_order_release);
  };

  // Byte i of the value (0 = bits 0-7), whatever the byte order.
  std::uint8_t* byte_at(unsigned i) noexcept {
    const unsigned off = std::endian::native == std::endian::little ? i : 3 - i;
    return reinterpret_cast<std::uint8_t*>(&word_) + off;
  }

  // (*,*,0) -> (*,*,1), whatever the other bytes hold; false if the byte was set.
  bool cas_locked_byte() noexcept {
    if constexpr (byte_ops) {
      std::uint8_t expected = 0;
      // Acquire pairs with the release store (or handoff RMW) of the previous owner.
      return __atomic_compare_exchange_n(byte_at(0), &expected, std::uint8_t{1}, false,
                                         __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
    } else {
      std::uint32_t val = word_.load(std::memory_order_relaxed);
      do {
        if (val & locked_mask) return false;
        // Acquire: as above.
      } while (!word_.compare_exchange_weak(val, val | locked_val, std::memory_order_acquire,
                                            std::memory_order_relaxed));
      return true;
    }
  }
  // The flag byte (bits 8-15 of the word, in place; the rest zero).
  std::uint32_t flag_bits() noexcept {
    if constexpr (byte_ops) {
      return std::uint32_t{__atomic_load_n(byte_at(1), __ATOMIC_RELAXED)} << 8;
    } else {
      return word_.load(std::memory_order_relaxed) & 0xff00u;
    }
  }
  // The owner's release of the locked byte, leaving the other bytes alone.
  void release_locked_byte() noexcept {
    if constexpr (byte_ops) {
      __atomic_store_n(byte_at(0), std::uint8_t{0}, __ATOMIC_RELEASE);
    } else {
      word_.store_bits(locked_mask, 0u, std::memory_order_release);
    }
  }

  // Path counters (detail/lock_stats.hpp): nothing unless HOTPATH_LOCK_STATS=1.
  using path = detail::lock_path;
  static void count(path p) noexcept {
    detail::count_lock_path(p);
  }
  // The fast CAS succeeded on a word that held `val`: stolen if somebody waited.
  static void count_steal(std::uint32_t val) noexcept {
    count((val & (pending | tail_mask)) != 0 ? path::stolen : path::fast);
  }

  // Sleepers on the word, counted outside the lock (unlock() reads the count after
  // its release store, when the lock may be gone).
  using sleepers = detail::sleeper_table<atomic<std::uint32_t>>;

  // This thread's nodes in use (waits in progress).
  struct nesting {
    unsigned depth = 0;
  };
  static unsigned& depth() noexcept {
    return detail::policy_local<Policy, nesting>().depth;
  }

  // This thread's slot: the registry's, unless the policy names threads itself (the
  // deterministic scheduler runs its threads as fibers of one OS thread).
  static std::uint32_t this_slot() noexcept {
    if constexpr (requires { Policy::thread_slot(); }) {
      return Policy::thread_slot();
    } else {
      return slots::this_thread_slot();
    }
  }

  static node& node_of(std::uint32_t tail) noexcept {
    return table::get((tail >> slot_shift) - 1).nodes[(tail >> idx_shift) & 3u];
  }

  // The contended paths, defined and described in detail/queued_slowpath.hpp.
  void unlock_slow() noexcept;
  void lock_slow() noexcept;
  void pending_wait() noexcept;
  void queue() noexcept;
  void head_acquire(std::uint32_t my_tail, node& me, bool slept) noexcept;

  // The bounded wait shared by the pending owner and the queue head.
  struct bounded_wait {
    unsigned n = 0, steps = 0;
    bool past_bound = false, asked = false;
  };

  void wait_step(bounded_wait& w, bool may_ask) noexcept;
  void grant_next(node& me) noexcept;
  bool wait_head(node& me) noexcept;
  void lock_overflow() noexcept;
  void park_on_word(unsigned channel, std::uint32_t flag, bool asked) noexcept;
  void park_privileged() noexcept;
  template <class Still>
  void sleep_on_word(unsigned channel, Still still_blocked) noexcept;

  atomic<std::uint32_t> word_{0};
};

}  // namespace detail

}  // namespace hotpath
HOTPATH_VISIBILITY_END
