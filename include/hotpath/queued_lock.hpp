// SPDX-License-Identifier: MIT
// queued_lock: the Linux qspinlock in user space, in one 32-bit word.
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
// rs prio_slow, ph prio_held, c ceded. Every helper below is tagged with the
// transitions it makes; a queue node's own word goes waiting -> sleeping -> head.
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
//
// Waiting in user space (the pvqspinlock idea; policies with `parks`): queued waiters
// spin on their node a bounded time, then sleep on it until made head. The pending
// owner and the head spin on the word, then set `slow` and sleep on it; an unlock()
// that sees the flag before its release takes the RMW path and wakes them. The
// pending owner keeps pending until it has the lock (so a signal or a spurious
// wake-up never sends it behind later arrivals); past its bound it asks for the
// handoff. The kernel marks the locked byte itself (value 3) and so pays a cmpxchg in
// every pv unlock (a locked byte exchange costs 2x our store unlock here, a word CAS
// 4x: docs/locks.md). Here unlock stays a store: a sleeper also counts itself in a
// process-wide sleeper table (a padded counter per hash bucket of the lock's
// address), and an unlock() whose flag check came too early reads that counter after
// its store and wakes. The counter lives in static memory, so the lock may be
// destroyed by its next owner while that unlock() is still returning; the
// store-then-load race is closed by an asymmetric fence pair (detail/membarrier.hpp):
// the sleeper pays the heavy side.
//
// Fairness. Lock stealing: lock() makes one attempt at the free locked byte before
// it queues, so a running thread takes a lock that a sleeping (or waking) head would
// leave idle; that is what keeps an oversubscribed machine busy, as std::mutex's
// barging does. The pending owner and the queued waiters are FIFO among themselves
// (lock_fifo() alone is FIFO outright).
//
// Batches. The pending owner and the head load the word every 2, 4, ... up to 64
// relax() steps, not at every one (at every one again once past the bound). Loading
// at every step, the waiter saw each release at once and took the lock, so two
// threads trading it alternated strictly and moved the lock's line and the data's at
// every acquisition. Now the owner mostly re-takes the lock it releases before the
// waiter looks, and sections run in batches on warm lines. Cohort locks and CNA bound
// a batch by a count of handoffs; here the waiter bounds it by how long it has waited
// (the owner's fast path stays a byte CAS and a byte store). The cost: a lock released
// for good while the waiter is between loads sits free until its next load, up to 64
// steps (64 pauses, 2 us on this project's EPYC host; a pause costs 10x less on some
// CPUs), and at 2 threads an acquisition may wait a batch.
//
// Bounded wait: the pending owner, or with none the head, asks for the handoff once
// it has waited handoff_after (256) relax() steps or has slept and been woken,
// whichever comes first. With queued_default_policy that is its 256 pauses (about
// 7 us here), before the yields and the sleep. It sets `handoff`; from then on the
// next unlock() hands it the lock directly, so no thread can take it first. So a
// waiter that has claimed pending waits at most handoff_after steps (or one sleep),
// then the critical section in progress plus at most one more ordinary one (one that
// began in the instant between an owner's check of `handoff` and its store); with
// priority_lock also the privileged sections requested meanwhile, which unlock()
// serves first. The head asks only while nobody holds pending, so it waits for the
// pending owner's bounded wait and section first, then its own. Overflow waiters (no
// node) are not fair: they take the lock whenever it is free, as the kernel's
// fallback does.
//
// The algorithm lives in detail::queued_core<Policy, Requests>; queued_lock is the
// core without privileged requests, priority_lock (priority_lock.hpp) the core with
// them. Without Requests the request bits are never set and no path tests them.
//
// sizeof(queued_lock) == 4, constexpr-constructible.
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

  // *,*,* -> *,*,*  [+r];  *,*,0 [r] -> *,*,1 [-r -rs +ph], or unlock_slow() hands over
  // The privileged side (Requests only; priority_lock.hpp). Publish the request,
  // after which every ordinary way in fails, then take the lock when it is free or
  // when the owner's unlock() hands it over.
  void lock_request() noexcept requires Requests {
    // Relaxed: ownership is acquired below, by the CAS or the load that sees the handover.
    std::uint32_t val = word_.fetch_or(request, std::memory_order_relaxed);
    HOTPATH_ASSERT((val & (request | prio_held)) == 0,
                   "priority_lock: two threads on the privileged side at once");
    val |= request;
    unsigned n = 0;
    for (;;) {
      if ((val & request) == 0) {  // handed over by unlock_slow()
        count(path::privileged);
        return;
      }
      if ((val & locked_mask) == 0) {
        // Acquire pairs with the release store (or RMW) of the previous owner's unlock().
        if (word_.compare_exchange_weak(val,
                                        (val & ~(request | prio_slow)) | locked_val | prio_held,
                                        std::memory_order_acquire, std::memory_order_acquire)) {
          count(path::privileged);
          return;
        }
        continue;
      }
      if (!wait::relax(n)) {
        if constexpr (wait::parks) {
          park_privileged();
          n = 0;
        }
      }
      // Acquire pairs with the release RMW in unlock_slow() that hands the lock over.
      val = word_.load(std::memory_order_acquire);
    }
  }

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

  // *,*,1 [r] -> *,*,1 [-r -rs +ph +c]; back at the privileged unlock: [-c -ph]
  // Called by an ordinary owner in a long critical section: if a privileged request
  // is pending, lend the lock to the privileged thread and take it back when its
  // section ends, before any ordinary thread (the locked byte stays set throughout),
  // as the kernel's cond_resched_lock() breaks a long section. True if it ceded.
  bool cede() noexcept requires Requests {
    std::uint32_t val = word_.load(std::memory_order_relaxed);
    do {
      if ((val & request) == 0) return false;
      // Release hands our section's writes to the privileged thread's acquire load.
    } while (!word_.compare_exchange_weak(val, (val & ~(request | prio_slow)) | prio_held | ceded,
                                          std::memory_order_release, std::memory_order_relaxed));
    if constexpr (wait::parks) {
      if (val & prio_slow) detail::policy_unpark_channel<Policy>(word_, 2);
    }
    // Never sleeps (nobody would wake us): the privileged section is short.
    unsigned n = 0;
    // Acquire pairs with the release RMW of the privileged unlock() that returns it.
    while (word_.load(std::memory_order_acquire) & ceded)
      detail::relax_or_yield<wait>(n);
    return true;
  }

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

  //   *,*,1 [c] -> *,*,1 [-c -ph]         back to the owner that ceded
  //   *,*,1 [r] -> *,*,1 [-r -rs +ph]     to the privileged thread
  //   *,*,1 [h] -> *,*,1 [-h -s -ph]      to the pending owner or the head that asked
  //   *,*,1     -> *,*,0 [-s -p -ph]      released; wakes the sleepers it cleared
  // Word-wide unlock: a handoff to the privileged thread or the head, or release with
  // wake-ups. One RMW, so (single modification order) it sees every sleeper's flag
  // and every request set before it; after it succeeds the word is not touched
  // again (the lock may be gone).
  void unlock_slow() noexcept {
    std::uint32_t val = word_.load(std::memory_order_relaxed);
    std::uint32_t nv;
    do {
      if (Requests && (val & ceded)) {
        // The privileged section inside an ordinary one ends: the locked byte stays
        // set and goes back to the owner that ceded it (spinning in cede()).
        nv = val & ~(ceded | prio_held);
      } else if (Requests && (val & request)) {
        // To the privileged thread: the locked byte stays set; an ordinary handoff
        // asked for stays asked for, and is served by the privileged unlock().
        nv = (val & ~(request | prio_slow)) | prio_held;
      } else if (val & handoff) {
        // To the pending owner or the head: the locked byte stays set.
        nv = val & ~(handoff | slow | prio_held);
      } else {
        nv = val & ~(locked_mask | slow | parked | prio_held);
      }
      // Release pairs with the acquire load of the next owner.
    } while (!word_.compare_exchange_weak(val, nv, std::memory_order_release,
                                          std::memory_order_relaxed));
    if constexpr (wait::parks) {
      if (Requests && (val & (ceded | request)) != 0) {
        if ((val & ceded) == 0 && (val & prio_slow))
          detail::policy_unpark_channel<Policy>(word_, 2);
        return;
      }
      if (val & slow) detail::policy_unpark_channel<Policy>(word_, 0);
      if ((val & parked) && (nv & parked) == 0) detail::policy_unpark_channel<Policy>(word_, 1);
    }
  }

  // 0,0,* -> 0,1,* (we own pending: pending_wait), else queue.
  //
  // The claim is a CAS that succeeds only while there is no pending owner and no
  // queue. The kernel sets the bit with a fetch-or and withdraws it if a tail had
  // appeared; a thread preempted between the two would hold the queue head (which
  // waits for pending to clear) for its whole time slice. The kernel runs that window
  // with preemption off; user space cannot, so the bit is never set on a queue. (Our
  // fetch-or, whose whole result was used, already compiled to a CAS loop on x86;
  // the kernel's x86 claim is a `lock bts` and a load.)
  void lock_slow() noexcept {
    std::uint32_t val = word_.load(std::memory_order_relaxed);
    // Relaxed: the claim orders nothing; pending_wait()'s acquire takes the lock.
    while ((val & (pending | tail_mask)) == 0) {
      if (word_.compare_exchange_weak(val, val | pending, std::memory_order_relaxed,
                                      std::memory_order_relaxed)) {
        pending_wait();
        return;
      }
    }
    queue();
  }

  // *,1,0 -> *,0,1 [-h], or handed over: *,1,1 -> *,0,1
  // We own pending: wait until the locked byte clears and take it. Spin, then sleep
  // (flag `slow`). We never give pending up (a spurious wake, a signal, or losing the
  // free lock to a stealer would otherwise send us behind later arrivals): once past
  // the bound (handoff_after steps, or slept once) we ask for the handoff, as the
  // head does. The bit is ours alone: the head asks
  // only while pending is clear, and nobody takes pending while a queue exists.
  void pending_wait() noexcept {
    bounded_wait w;
    for (;;) {
      // Acquire pairs with the release store in unlock() or the handoff RMW.
      std::uint32_t val = word_.load(std::memory_order_acquire);
      if (w.asked && (val & handoff) == 0) {
        // Handed over: the locked byte is ours; now let the head contend.
        word_.fetch_and(~pending, std::memory_order_relaxed);
        count(path::handed_off);
        return;
      }
      if ((val & busy_mask) == 0) {
        // pending -> locked, and our handoff request (if any) withdrawn; slow stays
        // (the head may sleep too). Acquire pairs with the release store in unlock().
        if (word_.compare_exchange_weak(val, (val & ~(pending | handoff)) | locked_val,
                                        std::memory_order_acquire, std::memory_order_relaxed)) {
          count(path::pending);
          return;
        }
        continue;
      }
      wait_step(w, true);
    }
  }

  // *,*,* -> t,*,* (the tail swap), then wait_head() and head_acquire()
  void queue() noexcept {
    unsigned& d = depth();
    const std::uint32_t slot = this_slot();
    node_block* b = nullptr;
    if (slot != slots::no_slot && d < nodes_per_thread) b = table::find_or_create(slot);
    if (b == nullptr) {  // no slot, nested too deep, or out of memory
      lock_overflow();
      return;
    }
    node& me = b->nodes[d];
    const std::uint32_t my_tail = ((slot + 1) << slot_shift) | (d << idx_shift);
    ++d;
    me.next.store(nullptr, std::memory_order_relaxed);
    me.state.store(waiting, std::memory_order_relaxed);

    // Swap the tail. Release publishes me's initialisation to the successor that
    // decodes our tail; acquire pairs with the predecessor's release here.
    std::uint32_t old = word_.load(std::memory_order_relaxed);
    while (!word_.compare_exchange_weak(old, (old & ~tail_mask) | my_tail,
                                        std::memory_order_acq_rel, std::memory_order_relaxed)) {
    }
    bool slept = false;
    if (old & tail_mask) {
      node_of(old & tail_mask).next.store(&me, std::memory_order_release);  // read by prev
      slept = wait_head(me);
    }
    head_acquire(my_tail, me, slept);
    --d;
  }

  // t,0,0 -> 0,0,1 [-h -s] or n,0,0 -> n,0,1 [-h -s] (keeps p); handed over:
  // t,*,1 -> 0,*,1
  // Queue head: take the free lock, or, after the bound, have it handed over.
  // `slept`: it already slept in the queue, i.e. waited past the bound.
  void head_acquire(std::uint32_t my_tail, node& me, bool slept) noexcept {
    bounded_wait w;
    w.past_bound = slept;
    for (;;) {
      // Acquire pairs with the release store in unlock() or the handoff RMW.
      std::uint32_t val = word_.load(std::memory_order_acquire);
      if (w.asked && (val & handoff) == 0) {
        // Handed over: the locked byte is ours. Clear the tail if it is still ours.
        count(path::handed_off);
        while ((val & tail_mask) == my_tail) {
          if (word_.compare_exchange_weak(val, val & ~tail_mask, std::memory_order_relaxed,
                                          std::memory_order_relaxed)) {
            return;
          }
        }
        grant_next(me);
        return;
      }
      if ((val & (busy_mask | pending)) == 0) {
        // Take it; clear handoff and slow (only ours: pending is clear, so there is
        // no pending owner asleep) and the tail if it is ours.
        const bool last = (val & tail_mask) == my_tail;
        const std::uint32_t keep = parked | (last ? 0 : tail_mask);
        // Acquire pairs with the release store of the previous owner's unlock().
        if (!word_.compare_exchange_weak(val, (val & keep) | locked_val, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
          continue;
        }
        count(path::queued);
        if (!last) grant_next(me);
        return;
      }
      // Not while a pending owner waits: it came first, and no new one can appear
      // behind a queue.
      wait_step(w, (val & pending) == 0);
    }
  }

  // The bounded wait shared by the pending owner and the queue head.
  struct bounded_wait {
    unsigned n = 0, steps = 0;
    bool past_bound = false, asked = false;
  };

  // *,*,* -> *,*,* [+h] (the ask), or park_on_word() [+s]
  // One step of it: once past the bound (handoff_after steps, or slept once) and
  // `may_ask`, ask for the handoff so that from now on the lock comes to us;
  // otherwise spin, and with a parking policy sleep (flag slow).
  void wait_step(bounded_wait& w, bool may_ask) noexcept {
    if (!w.asked && w.past_bound && may_ask) {
      word_.fetch_or(handoff, std::memory_order_relaxed);
      w.asked = true;
      w.n = 0;  // a fresh spin budget for the handoff: it comes within two sections
      return;
    }
    // Spaced loads (see "Batches" above): the owner re-takes the lock it releases
    // while we do not look.
    unsigned gap = 1;
    if (!w.past_bound) {
      gap = std::min({2u + w.steps, poll_gap_max, handoff_after - w.steps});
      w.past_bound = (w.steps += gap) == handoff_after;
    }
    bool park_now = false;
    for (unsigned i = 0; i < gap && !park_now; ++i)
      park_now = !wait::relax(w.n);
    if (!park_now) return;
    if constexpr (wait::parks) {
      park_on_word(0, slow, w.asked);
      w.past_bound = true;  // slept once
      w.n = 0;
    }
  }

  // successor's node: waiting -> head, or sleeping -> head and a wake-up
  // Make our successor the queue head.
  void grant_next(node& me) noexcept {
    node* succ = me.next.load(std::memory_order_acquire);
    unsigned spins = 0;
    while (succ == nullptr) {
      // It swapped the tail but has not linked in yet; it cannot sleep before it does.
      detail::relax_or_yield<wait>(spins);
      succ = me.next.load(std::memory_order_acquire);
    }
    // Release/acquire with wait_head(); the old value says whether it sleeps.
    const std::uint32_t old = succ->state.exchange(head, std::memory_order_acq_rel);
    if constexpr (wait::parks) {
      // succ may be running and reuse its node: a spurious wake is then harmless.
      if (old == sleeping) detail::policy_unpark_one<Policy>(succ->state);
    }
  }

  // our node: waiting -> sleeping (then head, by grant_next())
  // Wait to be made head; true if we slept on the way.
  bool wait_head(node& me) noexcept {
    unsigned n = 0;
    for (;;) {
      // Acquire pairs with the exchange in the predecessor's grant_next().
      if (me.state.load(std::memory_order_acquire) == head) return false;
      if (wait::relax(n)) continue;
      if constexpr (wait::parks) {
        std::uint32_t expected = waiting;
        // Acquire on failure: it fails only because we were made head.
        if (me.state.compare_exchange_strong(expected, sleeping, std::memory_order_acquire,
                                             std::memory_order_acquire)) {
          do {
            count(path::parked);
            detail::policy_park<Policy>(me.state, sleeping);
          } while (me.state.load(std::memory_order_acquire) != head);
          return true;
        }
        return false;
      }
    }
  }

  // *,*,0 -> *,*,1, or park_on_word() [+p]
  // No node (overflow): trylock, spin, then sleep on the word.
  void lock_overflow() noexcept {
    unsigned n = 0;
    for (;;) {
      std::uint32_t val = word_.load(std::memory_order_relaxed);
      if ((val & busy_mask) == 0) {
        // Acquire pairs with the release store in unlock().
        if (word_.compare_exchange_weak(val, val | locked_val, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
          count(path::overflow);
          return;
        }
        continue;
      }
      if (wait::relax(n)) continue;
      if constexpr (wait::parks) {
        park_on_word(1, parked, false);
        n = 0;
      }
    }
  }

  // *,*,* -> *,*,* [+s] or [+p]; sleeps while the word stays as loaded
  // Announce a sleeper with `flag` (so that unlock() takes unlock_slow(), which
  // wakes precisely) and in the sleeper table (so that an unlock() already past its
  // flag check sees us), then sleep on `channel` while the lock is held (and, for a
  // head that asked for the handoff, not yet handed to it). Dekker with unlock(): we
  // count ourselves, fence, load the word; it stores the locked byte, fences, loads
  // the count (or does one RMW that sees the flag).
  void park_on_word(unsigned channel, std::uint32_t flag, bool asked) noexcept {
    word_.fetch_or(flag, std::memory_order_relaxed);
    sleep_on_word(channel, [&](std::uint32_t val) {
      if ((val & busy_mask) == 0 || (val & flag) == 0) return false;
      return !asked || (val & handoff) != 0;  // not handed over meanwhile
    });
  }

  // *,*,* -> *,*,* [+rs]; sleeps while *,*,1 [r rs]
  // The privileged thread sleeps while the lock is held and its request not yet
  // served. The request bit alone already sends every unlock() that sees it to
  // unlock_slow(), which wakes channel 2.
  void park_privileged() noexcept {
    word_.fetch_or(prio_slow, std::memory_order_relaxed);
    sleep_on_word(2, [](std::uint32_t val) {
      return (val & locked_mask) != 0 && (val & request) != 0 && (val & prio_slow) != 0;
    });
  }

  // Count ourselves in the sleeper table, fence, and sleep on `channel` if the word
  // (loaded after the fence) still says so.
  template <class Still>
  void sleep_on_word(unsigned channel, Still still_blocked) noexcept {
    atomic<std::uint32_t>& counted = sleepers::of(this);
    counted.fetch_add(1, std::memory_order_relaxed);
    detail::policy_heavy_fence<Policy>();  // pairs with light_fence() in unlock()
    const std::uint32_t val = word_.load(std::memory_order_relaxed);
    if (still_blocked(val)) {
      count(path::parked);
      detail::policy_park<Policy>(word_, val, channel);
    }
    counted.fetch_sub(1, std::memory_order_relaxed);
  }

  atomic<std::uint32_t> word_{0};
};

}  // namespace detail

// The core's ways in and out, told to clang's analysis and to TSan
// (detail/annotations.hpp); the core itself calls only its own, unannotated.
template <class Policy = queued_default_policy>
class HOTPATH_CAPABILITY("mutex") basic_queued_lock : public detail::queued_core<Policy, false> {
  using core = detail::queued_core<Policy, false>;

 public:
  HOTPATH_LOCK_LIFETIME(basic_queued_lock)

  void lock() noexcept HOTPATH_ACQUIRE() {
    detail::tsan_lock_begin(this);
    core::lock();
    detail::tsan_lock_end(this);
  }
  void lock_fifo() noexcept HOTPATH_ACQUIRE() {
    detail::tsan_lock_begin(this);
    core::lock_fifo();
    detail::tsan_lock_end(this);
  }
  bool try_lock() noexcept HOTPATH_TRY_ACQUIRE(true) {
    detail::tsan_lock_begin(this, true);
    const bool ok = core::try_lock();
    detail::tsan_lock_end(this, true, ok);
    return ok;
  }
  void unlock() noexcept HOTPATH_RELEASE() {
    detail::tsan_unlock_begin(this);
    core::unlock();
    detail::tsan_unlock_end(this);
  }
};

using queued_lock = basic_queued_lock<>;

}  // namespace hotpath
HOTPATH_VISIBILITY_END
