// SPDX-License-Identifier: MIT
// mcs_lock: the queue lock of Mellor-Crummey and Scott (1991).
//
//   tail_ == nullptr            free
//   tail_ == &n, n.next null    held (or being handed over), nobody queued behind n
//   tail_ == &m, m != owner     held, queue owner -> ... -> m linked through node::next
//
// Each waiter spins on its own node, so a handoff touches one remote line, and
// the queue is strictly FIFO. A node's state word:
//
//   waiting --(owner hands over)--> granted
//   waiting --(budget spent)--> sleeping --(owner hands over, sees sleeping, wakes)--> granted
//
// The owner learns whether to issue a wake-up from the exchange that grants the
// lock, so an uncontended or spinning handoff makes no system call.
//
// Transitions, in detail/queued_core.hpp's spirit: `tail: a -> b` for the lock's word and
// `n.state: a -> b` for a node's (null, &n for the caller's node, * any); each
// helper below is tagged with the ones it makes.
//   tail: * -> &n, then prev.next: null -> &n     lock(n): enqueue behind prev
//   tail: &n -> null                              unlock(n): nobody behind us
//   succ.state: waiting|sleeping -> granted       unlock(n): hand over (wake if sleeping)
//   n.state: waiting -> sleeping                  wait_granted(): budget spent
//
// Two ways in: an explicit node that the caller owns (lock(node&), or the guard,
// which keeps its node on the stack), and Lockable lock()/unlock() with
// per-thread nodes, for std::scoped_lock and std::condition_variable_any. A thread
// may hold several mcs_locks at once, in any nesting; the Lockable form records
// its node in the lock (owner_, written only by the holder) so unlock() finds it.
//
// sizeof(mcs_lock) == 16: the tail pointer and the owner's node.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "hotpath/detail/annotations.hpp"
#include "hotpath/detail/config.hpp"
#include "hotpath/detail/futex.hpp"
#include "hotpath/detail/policy.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

template <class Policy = default_policy>
class HOTPATH_CAPABILITY("mutex") basic_mcs_lock {
  using wait = typename Policy::wait;
  template <class T>
  using atomic = typename Policy::template atomic<T>;

  enum : std::uint32_t { waiting = 0, granted = 1, sleeping = 2 };

 public:
  // A queue entry. Alone on its cache line because its owner spins on it.
  struct alignas(cache_line_size) node {
    atomic<node*> next{nullptr};
    atomic<std::uint32_t> state{waiting};
    constexpr node() noexcept = default;
    node(const node&) = delete;
    node& operator=(const node&) = delete;
  };

  // Holds the lock for its lifetime with a node of its own.
  class HOTPATH_SCOPED_CAPABILITY guard {
   public:
    explicit guard(basic_mcs_lock& l) noexcept HOTPATH_ACQUIRE(l) : lock_(l) { lock_.lock(node_); }
    ~guard() HOTPATH_RELEASE() { lock_.unlock(node_); }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;

   private:
    basic_mcs_lock& lock_;
    node node_;
  };

  HOTPATH_LOCK_LIFETIME(basic_mcs_lock)
  basic_mcs_lock(const basic_mcs_lock&) = delete;
  basic_mcs_lock& operator=(const basic_mcs_lock&) = delete;

  // tail: * -> &n; prev.next: null -> &n (if there was a prev), then wait_granted()
  void lock(node& n) noexcept HOTPATH_ACQUIRE() {
    detail::tsan_lock_begin(this);
    n.next.store(nullptr, std::memory_order_relaxed);
    n.state.store(waiting, std::memory_order_relaxed);
    // acq_rel: release publishes n's initialisation to whoever links behind us;
    // acquire pairs with the release CAS in unlock() when the queue was empty.
    node* prev = tail_.exchange(&n, enqueue_order);
    if (prev != nullptr) {
      prev->next.store(&n, link_order);  // read (acquire) by prev's unlock
      wait_granted(n);
    }
    detail::tsan_lock_end(this);
  }

  // tail: null -> &n
  bool try_lock(node& n) noexcept HOTPATH_TRY_ACQUIRE(true) {
    detail::tsan_lock_begin(this, true);
    n.next.store(nullptr, std::memory_order_relaxed);
    n.state.store(waiting, std::memory_order_relaxed);
    node* expected = nullptr;
    // Same pairing as the exchange in lock().
    const bool ok = tail_.compare_exchange_strong(expected, &n, std::memory_order_acq_rel,
                                                  std::memory_order_relaxed);
    detail::tsan_lock_end(this, true, ok);
    return ok;
  }

  // tail: &n -> null, or succ.state: waiting|sleeping -> granted
  void unlock(node& n) noexcept HOTPATH_RELEASE() {
    detail::tsan_unlock_begin(this);
    node* succ = n.next.load(std::memory_order_acquire);
    if (succ == nullptr) {
      node* expected = &n;
      // Release: the next owner's exchange (acquire) sees our critical section.
      if (tail_.compare_exchange_strong(expected, nullptr, std::memory_order_release,
                                        std::memory_order_relaxed)) {
        detail::tsan_unlock_end(this);
        return;
      }
      // A successor swapped the tail but has not linked in yet. It cannot sleep
      // before linking, so wait for it by spinning, then yielding.
      unsigned spins = 0;
      while ((succ = n.next.load(std::memory_order_acquire)) == nullptr) {
        detail::relax_or_yield<wait>(spins);
      }
    }
    // Release hands the critical section over; the old value says if it sleeps.
    const std::uint32_t old = succ->state.exchange(granted, handover_order);
    if constexpr (wait::parks) {
      // succ may already be running and have reused its node: a futex wake on the
      // address is then a harmless spurious wake-up (see detail/futex.hpp).
      if (old == sleeping) detail::policy_unpark_one<Policy>(succ->state);
    }
    detail::tsan_unlock_end(this);
  }

  // Lockable, with a per-thread node (TSan is told in the node forms).
  void lock() noexcept HOTPATH_ACQUIRE() {
    node& n = acquire_node();
    lock(n);
    owner_ = &n;
  }

  bool try_lock() noexcept HOTPATH_TRY_ACQUIRE(true) {
    node& n = acquire_node();
    if (!try_lock(n)) {
      release_node(n);
      return false;
    }
    owner_ = &n;
    return true;
  }

  void unlock() noexcept HOTPATH_RELEASE() {
    node* n = owner_;
    HOTPATH_ASSERT(n != nullptr, "mcs_lock::unlock() without lock()");
    unlock(*n);
    release_node(*n);
  }

  // True if some thread holds or waits for the lock (a snapshot).
  [[nodiscard]] bool is_locked() const noexcept {
    return tail_.load(std::memory_order_relaxed) != nullptr;
  }

 private:
  // The orders of the queue's three publishing operations (see their comments).
  static constexpr auto enqueue_order = std::memory_order_acq_rel;
  static constexpr auto link_order = std::memory_order_release;
  static constexpr auto handover_order = std::memory_order_release;

  // n.state: waiting -> sleeping (then granted, by the predecessor's unlock())
  void wait_granted(node& n) noexcept {
    unsigned spins = 0;
    for (;;) {
      // Acquire pairs with the release exchange in the predecessor's unlock().
      if (n.state.load(std::memory_order_acquire) == granted) return;
      if (wait::relax(spins)) continue;
      if constexpr (wait::parks) {
        std::uint32_t expected = waiting;
        // Acquire on failure: the failure can only be because we were granted
        // (pairs with the release exchange in unlock()).
        if (n.state.compare_exchange_strong(expected, sleeping, std::memory_order_acquire,
                                            std::memory_order_acquire)) {
          do {
            detail::policy_park<Policy>(n.state, sleeping);
          } while (n.state.load(std::memory_order_acquire) != granted);
        }
        return;
      }
    }
  }

  // Per-thread nodes for the Lockable form: a few inline (enough for ordinary
  // nesting), heap-allocated beyond that.
  static constexpr unsigned inline_nodes = 4;
  struct thread_nodes {
    node nodes[inline_nodes];
    unsigned used = 0;  // bit i: nodes[i] is in use
  };
  static thread_nodes& local_nodes() noexcept {
    return detail::policy_local<Policy, thread_nodes>();
  }
  static node& acquire_node() noexcept {
    thread_nodes& t = local_nodes();
    for (unsigned i = 0; i < inline_nodes; ++i) {
      if ((t.used & (1u << i)) == 0) {
        t.used |= 1u << i;
        return t.nodes[i];
      }
    }
    // More than inline_nodes mcs_locks held at once. Out of memory here ends the
    // process, as it would for a std::mutex that cannot be created.
    return *new node;  // NOLINT(bugprone-unhandled-exception-at-new)
  }
  static void release_node(node& n) noexcept {
    thread_nodes& t = local_nodes();
    if (&n >= t.nodes && &n < t.nodes + inline_nodes) {
      t.used &= ~(1u << static_cast<unsigned>(&n - t.nodes));
    } else {
      delete &n;
    }
  }

  atomic<node*> tail_{nullptr};
  node* owner_ = nullptr;  // the Lockable holder's node; only the holder touches it
};

using mcs_lock = basic_mcs_lock<>;

}  // namespace hotpath
HOTPATH_VISIBILITY_END
