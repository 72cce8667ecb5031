// SPDX-License-Identifier: MIT
// A qdisc as Linux's __dev_xmit_skb() sees it: many senders enqueue packet
// descriptors into one bounded FIFO, one transmit thread dequeues them in batches.
// What guards the FIFO is a template parameter, one strategy per era:
//
//   tas_strategy        test-and-set spinlock (before 2010)
//   ticket_strategy     ticket lock: FIFO among everyone, transmit thread included
//   busylock_strategy   2010: a sender that finds the transmit side running first
//                       serialises on a second lock ("busylock"), so the transmit
//                       thread competes for the qdisc lock with one sender, not all
//   queued_strategy     2016 proposal: drop busylock, rely on a queued (MCS) lock
//   priority_strategy   what the 2016 objection asked for: the transmit thread takes
//                       the lock ahead of every queued sender
//   defer_strategy      2025: senders push onto a lock-free list; only the one that
//                       found it empty takes the qdisc lock and moves the whole list in
//   defer_priority_strategy  the defer list with the transmit thread on the privileged
//                       side: it never waits behind a flusher's queue
//
// Library-like: only public hotpath headers, no program state. Counters are kept
// outside the lock (per-cpu stats), parameters (limit, batch) sit in a cell that a
// control thread may swap while traffic runs.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include <hotpath/percpu_counter.hpp>
#include <hotpath/priority_lock.hpp>
#include <hotpath/queued_lock.hpp>
#include <hotpath/rcu_cell.hpp>
#include <hotpath/ticket_lock.hpp>

namespace hotpath::sched {

// A packet descriptor, as an skb pointer would be: who sent it, its place in that
// sender's stream, its length, and a timestamp the program may use.
struct packet {
  std::uint32_t sender = 0;
  std::uint32_t seq = 0;
  std::uint32_t len = 0;
  std::uint64_t stamp = 0;
};

enum class verdict { ok, dropped };

// The swappable parameters: txqueuelen and dev_tx_weight.
struct params {
  std::size_t limit = 1000;  // packets the FIFO holds
  std::size_t batch = 64;    // most packets one dequeue_batch() takes
};

// Counter indices.
enum counter : std::size_t { enqueued, dropped, bytes, transmitted, counter_count };
using counters = std::array<std::int64_t, counter_count>;

// ---------------------------------------------------------------------------
// Strategies. Each provides
//   static constexpr std::string_view name;
//   static constexpr bool defers;              // enqueue through the defer list
//   token lock_sender(bool tx_running);        // sender side of the qdisc lock
//   void unlock_sender(token);
//   void lock_tx(); void unlock_tx();          // the transmit thread's side
//   void cede();                               // a flusher's break point in a long
//                                              // section: let a waiting transmit side in
// ---------------------------------------------------------------------------

// One step of waiting with a public hotpath waiting strategy, never sleeping
// (nobody would wake us): spin its budget, then yield.
template <class Wait>
inline void wait_step(unsigned& n) noexcept {
  if (!Wait::relax(n)) std::this_thread::yield();
}

// Test-and-test-and-set: one exchange to take it, no order among waiters. In user
// space a holder can be preempted, so after a spin budget a waiter yields its cpu
// (never sleeps: nobody would wake it).
template <class Wait = spin_then_yield<>>
class basic_tas_lock {
 public:
  void lock() noexcept {
    unsigned n = 0;
    // Acquire pairs with the release store in unlock().
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed))
        wait_step<Wait>(n);
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};
using tas_lock = basic_tas_lock<>;

struct no_token {};

// Senders and the transmit thread take one ordinary Lockable the same way. Each
// strategy is, to clang's thread-safety analysis, the qdisc lock itself: the qdisc's
// FIFO indices are guarded by it.
template <class Lock>
class HOTPATH_CAPABILITY("qdisc lock") plain_strategy {
 public:
  static constexpr bool defers = false;
  using token = no_token;
  token lock_sender(bool /*tx_running*/) noexcept HOTPATH_ACQUIRE() {
    lock_.lock();
    return {};
  }
  void unlock_sender(token) noexcept HOTPATH_RELEASE() { lock_.unlock(); }
  void lock_tx() noexcept HOTPATH_ACQUIRE() { lock_.lock(); }
  void unlock_tx() noexcept HOTPATH_RELEASE() { lock_.unlock(); }
  void cede() noexcept HOTPATH_REQUIRES(this) {}

 protected:
  Lock lock_;
};

struct tas_strategy : plain_strategy<tas_lock> {
  static constexpr std::string_view name = "test-and-set";
};
struct ticket_strategy : plain_strategy<ticket_lock> {
  static constexpr std::string_view name = "ticket";
};

// 2016 proposal: no busylock, the qdisc lock is a queued (MCS-style) lock.
struct queued_strategy : plain_strategy<queued_lock> {
  static constexpr std::string_view name = "queued";
};

// The transmit thread takes the lock on the privileged side: it waits for at most
// the critical section in progress, however many senders are queued.
struct priority_strategy : plain_strategy<priority_lock> {
  static constexpr std::string_view name = "priority";
  void lock_tx() noexcept HOTPATH_ACQUIRE() { lock_.lock_priority(); }
};

// 2010 ("net: add additional lock to qdisc to increase throughput"): a sender that
// finds the qdisc running (contended = qdisc_is_running(q)) takes busylock first
// and holds it across its qdisc-lock section, so at most one sender at a time
// queues on the qdisc lock behind the transmit side. "Running" here: the transmit
// thread's last dequeue found packets (it is transmitting them).
class HOTPATH_CAPABILITY("qdisc lock") busylock_strategy {
 public:
  static constexpr std::string_view name = "busylock";
  static constexpr bool defers = false;
  using token = bool;  // did we take busylock?
  token lock_sender(bool tx_running) noexcept HOTPATH_ACQUIRE() {
    if (tx_running) busy_.lock();
    root_.lock();
    return tx_running;
  }
  void unlock_sender(token contended) noexcept HOTPATH_RELEASE() {
    root_.unlock();
    if (contended) busy_.unlock();
  }
  void lock_tx() noexcept HOTPATH_ACQUIRE() { root_.lock(); }
  void unlock_tx() noexcept HOTPATH_RELEASE() { root_.unlock(); }
  void cede() noexcept HOTPATH_REQUIRES(this) {}

 private:
  ticket_lock root_;
  alignas(cache_line_size) ticket_lock busy_;
};

// 2025: a sender pushes onto a lock-free list; the one that found the list empty
// takes the qdisc lock, takes the whole list, restores FIFO order and enqueues it.
// Lock is the qdisc lock (a spinlock in the kernel: qspinlock, so queued_lock).
template <class Lock>
class basic_defer_strategy : public plain_strategy<Lock> {
 public:
  static constexpr bool defers = true;
};
struct defer_strategy : basic_defer_strategy<queued_lock> {
  static constexpr std::string_view name = "defer-list";
};
// Flushers take priority_lock's ordinary side; the transmit thread its privileged
// side, and a flusher moving a long list lets it in every cede_every packets, so the
// transmit thread waits for at most that stretch, never for a whole flush.
struct defer_priority_strategy : basic_defer_strategy<priority_lock> {
  static constexpr std::string_view name = "defer-priority";
  void lock_tx() noexcept HOTPATH_ACQUIRE() { this->lock_.lock_priority(); }
  // Holding this strategy is holding lock_, which the analysis cannot see through.
  void cede() noexcept HOTPATH_REQUIRES(this) HOTPATH_NO_THREAD_SAFETY_ANALYSIS {
    this->lock_.cede();
  }
};

// ---------------------------------------------------------------------------

template <class Strategy>
class qdisc {
 public:
  // `capacity` is the largest limit set_params() accepts (the FIFO's storage).
  explicit qdisc(params p = {}, std::size_t capacity = 8192)
      : ring_(round_up_pow2(std::max<std::size_t>(capacity, 1))),
        mask_(ring_.size() - 1),
        params_(check(p, ring_.size())) {
    if constexpr (Strategy::defers) {
      // In flight at once: what one flusher took (at most limit plus one per
      // racing sender beyond the defer count) and what is being pushed meanwhile;
      // 2x + slack makes waiting for a node a rare safety net.
      const std::size_t nodes = round_up_pow2(2 * ring_.size() + 1024);
      nodes_ = std::make_unique<defer_node[]>(nodes);
      node_mask_ = nodes - 1;
    }
  }
  qdisc(const qdisc&) = delete;
  qdisc& operator=(const qdisc&) = delete;

  [[nodiscard]] static constexpr std::string_view name() noexcept { return Strategy::name; }

  // Offer one packet. ok: it is in the FIFO (or, with the defer list, handed to
  // the sender that will move it there; a drop there is counted, not returned).
  verdict enqueue(const packet& p) {
    if constexpr (Strategy::defers)
      return enqueue_deferred(p);
    else
      return enqueue_locked(p);
  }

  // Transmit side: take up to min(max, params.batch) packets in FIFO order.
  // Timing hook: if `acquired` is given, it is called once the lock is held (the
  // program measures the transmit thread's lock wait with it).
  std::size_t dequeue_batch(packet* out, std::size_t max = SIZE_MAX) {
    return dequeue_batch(out, max, [] {});
  }
  template <class OnAcquired>
  std::size_t dequeue_batch(packet* out, std::size_t max, OnAcquired&& acquired) {
    const std::size_t want = std::min(max, params_.read()->batch);
    strategy_.lock_tx();
    acquired();
    const std::size_t n = std::min(want, static_cast<std::size_t>(tail_ - head_));
    for (std::size_t i = 0; i < n; ++i)
      out[i] = ring_[(head_ + i) & mask_];
    head_ += n;
    // Relaxed: a hint for the program's idle loop and for busylock's "contended".
    qlen_.store(tail_ - head_, std::memory_order_relaxed);
    tx_running_.store(n != 0, std::memory_order_relaxed);
    strategy_.unlock_tx();
    if (n != 0) {
      std::int64_t b = 0;
      for (std::size_t i = 0; i < n; ++i)
        b += out[i].len;
      stats_.add(transmitted, static_cast<std::int64_t>(n));
      stats_.add(bytes, b);
    }
    return n;
  }

  // Swap in new parameters while traffic runs. A lower limit drops nothing already
  // queued; it only refuses new packets until the backlog is below it.
  void set_params(params p) { params_.store(check(p, ring_.size())); }
  [[nodiscard]] params current_params() const { return *params_.read(); }

  // Packets in the FIFO (a relaxed snapshot; exact once traffic has stopped).
  [[nodiscard]] std::size_t backlog() const noexcept {
    return qlen_.load(std::memory_order_relaxed);
  }
  // Is the transmit side holding packets it dequeued (qdisc_is_running)?
  [[nodiscard]] bool tx_running() const noexcept {
    return tx_running_.load(std::memory_order_relaxed);
  }

  [[nodiscard]] std::int64_t stat(counter c) const { return stats_.sum(c); }
  [[nodiscard]] counters stats() const { return stats_.snapshot(); }

  Strategy& strategy() noexcept { return strategy_; }

 private:
  struct defer_node {
    packet pkt;
    defer_node* next = nullptr;
    std::atomic<bool> busy{false};  // claimed by a sender, not yet moved into the FIFO
  };

  static std::size_t round_up_pow2(std::size_t v) {
    std::size_t p = 1;
    while (p < v)
      p <<= 1;
    return p;
  }
  static params check(params p, std::size_t capacity) {
    if (p.limit == 0 || p.limit > capacity)
      throw std::invalid_argument("qdisc: limit must be in 1..capacity");
    if (p.batch == 0) throw std::invalid_argument("qdisc: batch must be at least 1");
    return p;
  }

  verdict push_locked(const packet& p, std::size_t limit) noexcept HOTPATH_REQUIRES(strategy_) {
    if (tail_ - head_ >= limit) {
      stats_.inc(dropped);
      return verdict::dropped;
    }
    ring_[tail_ & mask_] = p;
    ++tail_;
    qlen_.store(tail_ - head_, std::memory_order_relaxed);  // a hint, see dequeue_batch
    stats_.inc(enqueued);
    return verdict::ok;
  }

  verdict enqueue_locked(const packet& p) {
    const std::size_t limit = params_.read()->limit;
    const auto t = strategy_.lock_sender(tx_running_.load(std::memory_order_relaxed));
    const verdict v = push_locked(p, limit);
    strategy_.unlock_sender(t);
    return v;
  }

  verdict enqueue_deferred(const packet& p) {
    const std::size_t limit = params_.read()->limit;
    defer_node* node = &nodes_[node_ticket_.fetch_add(1, std::memory_order_relaxed) & node_mask_];
    // Claim the node (a sender that drew the same slot one lap ago may still hold
    // it). Acquire pairs with the release that freed it, after its packet was read.
    for (unsigned n = 0;;) {
      bool free = false;
      if (node->busy.compare_exchange_weak(free, true, std::memory_order_acquire,
                                           std::memory_order_relaxed))
        break;
      wait_step<spin_then_yield<>>(n);
    }
    node->pkt = p;

    // As the kernel does: count only pushes onto a non-empty list, and drop once
    // the list holds more than `limit` (the flusher cannot keep up).
    bool counted = false;
    defer_node* first = defer_head_.load(std::memory_order_relaxed);
    do {
      if (first != nullptr && !counted) {
        counted = true;
        if (defer_count_.fetch_add(1, std::memory_order_relaxed) + 1 >
            static_cast<std::int64_t>(limit)) {
          node->busy.store(false, std::memory_order_release);  // pairs with the claim
          stats_.inc(dropped);
          return verdict::dropped;
        }
      }
      node->next = first;
      // Release publishes the node (packet and next) to the flusher's exchange.
    } while (!defer_head_.compare_exchange_weak(first, node, std::memory_order_release,
                                                std::memory_order_relaxed));
    if (first != nullptr) return verdict::ok;  // its flusher will move it

    // We found the list empty: we flush, ours is the oldest entry.
    const auto t = strategy_.lock_sender(tx_running_.load(std::memory_order_relaxed));
    // Acquire pairs with the release CAS of every push in the list.
    defer_node* list = defer_head_.exchange(nullptr, std::memory_order_acquire);
    defer_count_.store(0, std::memory_order_relaxed);
    HOTPATH_ASSERT(list != nullptr, "a flusher's own node is on the list");
    defer_node* fifo = nullptr;  // reverse: the list is newest-first
    while (list != nullptr) {
      defer_node* next = list->next;
      list->next = fifo;
      fifo = list;
      list = next;
    }
    HOTPATH_ASSERT(fifo == node, "the flusher's own node is the oldest");
    verdict mine = verdict::ok;
    std::size_t moved = 0;
    for (defer_node* n = fifo; n != nullptr;) {
      defer_node* next = n->next;  // read before release: the owner may reuse n at once
      const verdict v = push_locked(n->pkt, limit);
      if (n == node) mine = v;
      n->busy.store(false, std::memory_order_release);  // pairs with the claim
      n = next;
      // We keep the lock across a cede, so no later flush overtakes the rest of ours.
      if (++moved % cede_every == 0) strategy_.cede();
    }
    strategy_.unlock_sender(t);
    return mine;
  }

  // A flusher's break points: every this many packets moved (dev_tx_weight).
  static constexpr std::size_t cede_every = 64;

  Strategy strategy_;  // the qdisc lock
  // The slots between head_ and tail_ are guarded by the qdisc lock too; the ring's
  // size and mask_ never change.
  std::vector<packet> ring_;
  std::size_t mask_;
  std::size_t head_ HOTPATH_GUARDED_BY(strategy_) = 0;
  std::size_t tail_ HOTPATH_GUARDED_BY(strategy_) = 0;

  alignas(cache_line_size) std::atomic<std::size_t> qlen_{0};
  std::atomic<bool> tx_running_{false};
  alignas(cache_line_size) rcu_cell<params> params_;
  percpu_stats<counter_count> stats_;

  // The defer list (defer_strategy only).
  alignas(cache_line_size) std::atomic<defer_node*> defer_head_{nullptr};
  alignas(cache_line_size) std::atomic<std::int64_t> defer_count_{0};
  alignas(cache_line_size) std::atomic<std::uint64_t> node_ticket_{0};
  std::unique_ptr<defer_node[]> nodes_;
  std::size_t node_mask_ = 0;
};

}  // namespace hotpath::sched
