// SPDX-License-Identifier: MIT
// queued_lock: the Linux qspinlock in user space, in one 32-bit word.
//
//   bits 0-7   locked byte: 0 free, 1 held
//   bit  8     pending: the first contender's claim, waiting without a node
//   bit  9     slow: the pending owner or the queue head sleeps; unlock must wake it
//   bit  10    parked: an overflow waiter (no node) sleeps; unlock must wake it
//   bits 16-17 tail nesting index (which of the tail thread's 4 nodes)
//   bits 18-31 tail thread slot + 1 (0: no queue)
//
//   (tail, pending, locked)
//   (0,0,0) --lock: one CAS--> (0,0,1) --unlock: one release store--> (0,0,0)
//   (0,0,1) --2nd thread--> (0,1,1) --owner unlocks--> (0,1,0) --pending owner--> (0,0,1)
//   (*,1,*) or (n,*,*) --3rd+ thread--> queue on a node, tail = it; the queue head
//       spins on the word until locked and pending are clear, then takes it
//       (clearing the tail if it is still its own) and wakes its successor's node.
//
// Uncontended, lock() is one compare-and-swap and unlock() one release store to the
// locked byte (plus, with a parking policy, a load of the flag byte; no locked
// instruction). The owner holds no node: nodes are used only while waiting.
//
// Nodes: 4 per thread, as the kernel's 4 per cpu (task, softirq, hardirq, NMI). A
// thread uses a node only inside lock(), so in user space depth > 1 arises only when
// a waiter is interrupted (a signal handler, or a waiting policy) and takes another
// queued_lock. A thread is named in the tail by its slot (detail/thread_slots.hpp),
// taken on first contention and returned at thread exit. Beyond 4 nested waits, or
// with no slot (more live threads than the tail can name: 16383), a thread falls
// back to trylock-and-park on the word, as the kernel falls back to trylock spinning.
//
// Parking (the pvqspinlock idea; policies with `parks`): queued waiters spin on
// their node a bounded time, then sleep on it and are woken by the thread that makes
// them queue head. The pending owner and the head spin on the word, then set `slow`
// and sleep on the word; unlock() reads the flag byte after its store and wakes
// them. The kernel marks the locked byte itself (value 3) and so pays a cmpxchg in
// every pv unlock; keeping `slow` beside it keeps unlock a store, and the
// store-then-load race is closed by an asymmetric fence pair (detail/membarrier.hpp):
// the sleeper pays the heavy side.
//
// Fairness: waiters in the queue are FIFO, and the pending owner enters before the
// queue head. While the head sleeps (`slow` set) and the lock is free, a running
// thread may take it (one attempt in lock(), or try_lock()), so a sleeping head does
// not idle the lock; the unlock that wakes the head clears `slow`, which ends
// stealing. Once the head has slept and woken, it reserves the lock by taking the
// pending bit, which no stealer or newcomer passes: it then enters at the next
// release. So the head waits at most its spin budget, the critical section in
// progress, one stolen critical section per sleep (only the first sleep counts),
// and one wake-up. Overflow waiters (no node) are not fair: they take the lock
// whenever it is free and not reserved, as the kernel's fallback does.
//
// sizeof(queued_lock) == 4, constexpr-constructible.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

#include "hotpath/detail/config.hpp"
#include "hotpath/detail/futex.hpp"
#include "hotpath/detail/membarrier.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/detail/thread_slots.hpp"

namespace hotpath {

template <class Policy = default_policy>
class basic_queued_lock {
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
  static constexpr unsigned idx_shift = 16;
  static constexpr unsigned slot_shift = 18;
  static constexpr std::uint32_t tail_mask = ~std::uint32_t{0} << idx_shift;
  static constexpr unsigned nodes_per_thread = 4;

  constexpr basic_queued_lock() noexcept = default;
  basic_queued_lock(const basic_queued_lock&) = delete;
  basic_queued_lock& operator=(const basic_queued_lock&) = delete;

  void lock() noexcept {
    std::uint32_t val = 0;
    // Acquire pairs with the release store of the previous owner's unlock().
    if (word_.compare_exchange_strong(val, locked_val, std::memory_order_acquire,
                                      std::memory_order_relaxed)) [[likely]] {
      return;
    }
    lock_slow(val);
  }

  bool try_lock() noexcept {
    std::uint32_t val = word_.load(std::memory_order_relaxed);
    if (!can_steal(val)) return false;
    // Acquire pairs with the release store of the previous owner's unlock().
    return word_.compare_exchange_strong(val, val | locked_val, std::memory_order_acquire,
                                         std::memory_order_relaxed);
  }

  void unlock() noexcept {
    HOTPATH_ASSERT(is_locked(), "queued_lock::unlock() of a free lock");
    if constexpr (byte_ops) {
      // Release hands the critical section to the next acquire of the word. Only the
      // owner writes the locked byte, so a plain store suffices, as in the kernel.
      __atomic_store_n(byte_at(0), std::uint8_t{0}, __ATOMIC_RELEASE);
      if constexpr (wait::parks) {
        detail::light_fence();  // pairs with heavy_fence() in park_on_word()
        if (__atomic_load_n(byte_at(1), __ATOMIC_RELAXED) & ((slow | parked) >> 8)) wake();
      }
    } else {
      // Instrumented atomics cannot be addressed by byte: clear the byte with an RMW,
      // which also tells us (single modification order) whether anyone sleeps.
      const std::uint32_t old = word_.fetch_and(~locked_mask, std::memory_order_release);
      if constexpr (wait::parks) {
        if (old & (slow | parked)) wake();
      }
    }
  }

  // True if some thread holds the lock (a snapshot).
  bool is_locked() const noexcept {
    return (word_.load(std::memory_order_relaxed) & locked_mask) != 0;
  }
  // The whole word (a snapshot), for tests and diagnostics.
  std::uint32_t state() const noexcept { return word_.load(std::memory_order_relaxed); }
  // How many of this thread's nodes are in use (waits in progress), for tests.
  static unsigned nodes_in_use() noexcept { return depth(); }

 private:
  enum : std::uint32_t { waiting = 0, head = 1, sleeping = 2 };

  struct alignas(cache_line_size) node {
    atomic<node*> next{nullptr};
    atomic<std::uint32_t> state{waiting};
  };
  struct node_block {
    node nodes[nodes_per_thread];
  };
  using table = detail::slot_table<node_block>;

  // Byte access to the word, as the kernel does (mixed-size atomics on one object,
  // which GCC and Clang compile to plain byte loads and stores); only for the real
  // std::atomic<uint32_t>, whose object representation is the value.
#if defined(__GNUC__)
  static constexpr bool byte_ops = detail::raw_futex_ok<atomic<std::uint32_t>>;
#else
  static constexpr bool byte_ops = false;
#endif
  // Byte i of the value (0 = bits 0-7), whatever the byte order.
  std::uint8_t* byte_at(unsigned i) noexcept {
    const unsigned off = std::endian::native == std::endian::little ? i : 3 - i;
    return reinterpret_cast<std::uint8_t*>(&word_) + off;
  }

  // A free lock that nobody has a claim on, or whose queue head sleeps.
  static bool can_steal(std::uint32_t val) noexcept {
    return (val & (locked_mask | pending)) == 0 && ((val & tail_mask) == 0 || (val & slow));
  }

  static unsigned& depth() noexcept {
    thread_local unsigned d = 0;
    return d;
  }

  static node& node_of(std::uint32_t tail) noexcept {
    return table::get((tail >> slot_shift) - 1).nodes[(tail >> idx_shift) & 3u];
  }

  void lock_slow(std::uint32_t val) noexcept {
    // The one steal attempt (also the retry when only flag bits made the CAS fail).
    if (can_steal(val) &&
        word_.compare_exchange_strong(val, val | locked_val, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
      return;
    }
    // Pending path: only the owner is there, so claim pending and wait without a node.
    if ((val & (pending | tail_mask)) == 0) {
      val = word_.fetch_or(pending, std::memory_order_relaxed);
      if ((val & (pending | tail_mask)) == 0) {
        wait_clear(locked_mask);
        // pending -> locked; nobody else writes these bits now, the RMW keeps the
        // flags and the tail. Acquire pairs with the owner's release store in unlock().
        word_.fetch_sub(pending - locked_val, std::memory_order_acquire);
        return;
      }
      // Someone beat us to it; withdraw the bit if it was we who set it.
      if ((val & pending) == 0) word_.fetch_and(~pending, std::memory_order_relaxed);
    }
    queue();
  }

  void queue() noexcept {
    unsigned& d = depth();
    const std::uint32_t slot = slots::this_thread_slot();
    if (slot == slots::no_slot || d >= nodes_per_thread) {
      lock_overflow();
      return;
    }
    node& me = table::get_or_create(slot).nodes[d];
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
    if (old & tail_mask) {
      node_of(old & tail_mask).next.store(&me, std::memory_order_release);  // read by prev
      wait_head(me);
    }

    head_acquire(my_tail, me);
    --d;
  }

  // Queue head: wait for locked and pending to clear, then take the lock.
  void head_acquire(std::uint32_t my_tail, node& me) noexcept {
    unsigned n = 0;
    bool slept = false, reserved = false;
    for (;;) {
      std::uint32_t val = word_.load(std::memory_order_acquire);
      const std::uint32_t busy = reserved ? locked_mask : (locked_mask | pending);
      if ((val & busy) == 0) {
        // Take it, clearing pending (ours if set) and slow (nobody else can be asleep
        // on channel 0: pending is clear or ours); clear the tail if it is ours.
        const bool last = (val & tail_mask) == my_tail;
        const std::uint32_t nv = (val & (last ? parked : (tail_mask | parked))) | locked_val;
        // Acquire pairs with the release store of the previous owner's unlock().
        if (!word_.compare_exchange_weak(val, nv, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
          continue;
        }
        if (!last) grant_next(me);
        return;
      }
      if (slept && !reserved && (val & pending) == 0) {
        // Woken once already: reserve the lock so that nobody steals it again.
        if (word_.compare_exchange_weak(val, val | pending, std::memory_order_relaxed,
                                        std::memory_order_relaxed)) {
          reserved = true;
        }
        continue;
      }
      if (wait::relax(n)) continue;
      if constexpr (wait::parks) {
        park_on_word(busy, 0, slow);
        slept = true;
        n = 0;
      }
    }
  }

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
      if (old == sleeping) detail::unpark_one(succ->state);
    }
  }

  void wait_head(node& me) noexcept {
    unsigned n = 0;
    for (;;) {
      // Acquire pairs with the exchange in the predecessor's grant_next().
      if (me.state.load(std::memory_order_acquire) == head) return;
      if (wait::relax(n)) continue;
      if constexpr (wait::parks) {
        std::uint32_t expected = waiting;
        // Acquire on failure: it fails only because we were made head.
        if (me.state.compare_exchange_strong(expected, sleeping, std::memory_order_acquire,
                                             std::memory_order_acquire)) {
          do {
            detail::park(me.state, sleeping);
          } while (me.state.load(std::memory_order_acquire) != head);
        }
        return;
      }
    }
  }

  // Spin, then sleep on the word, until (word & mask) == 0 (pending owner).
  void wait_clear(std::uint32_t mask) noexcept {
    unsigned n = 0;
    for (;;) {
      // Acquire pairs with the release store in unlock().
      if ((word_.load(std::memory_order_acquire) & mask) == 0) return;
      if (wait::relax(n)) continue;
      if constexpr (wait::parks) {
        park_on_word(mask, 0, slow);
        n = 0;
      }
    }
  }

  // No node (overflow): trylock, spin, then sleep on the word.
  void lock_overflow() noexcept {
    unsigned n = 0;
    for (;;) {
      std::uint32_t val = word_.load(std::memory_order_relaxed);
      if ((val & (locked_mask | pending)) == 0) {
        // Acquire pairs with the release store in unlock().
        if (word_.compare_exchange_weak(val, val | locked_val, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
          return;
        }
        continue;
      }
      if (wait::relax(n)) continue;
      if constexpr (wait::parks) {
        park_on_word(locked_mask | pending, 1, parked);
        n = 0;
      }
    }
  }

  // Announce a sleeper with `flag`, then sleep on channel `channel` while the word
  // still has a bit of `mask` and the flag. Dekker with unlock(): we store the flag,
  // fence, load the locked byte; it stores the byte, fences, loads the flag.
  void park_on_word(std::uint32_t mask, unsigned channel, std::uint32_t flag) noexcept {
    word_.fetch_or(flag, std::memory_order_relaxed);
    detail::heavy_fence();  // pairs with light_fence() in unlock()
    const std::uint32_t val = word_.load(std::memory_order_acquire);
    if ((val & mask) != 0 && (val & flag) != 0) detail::park(word_, val, channel);
  }

  // Slow half of unlock(): somebody sleeps on the word.
  void wake() noexcept {
    const std::uint32_t old = word_.fetch_and(~(slow | parked), std::memory_order_relaxed);
    if (old & slow) detail::unpark_channel(word_, 0);
    if (old & parked) detail::unpark_channel(word_, 1);
  }

  atomic<std::uint32_t> word_{0};
};

using queued_lock = basic_queued_lock<>;

}  // namespace hotpath
