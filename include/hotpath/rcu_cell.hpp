// SPDX-License-Identifier: MIT
// rcu_cell<T>: a T published under RCU, for configuration that is read on every
// packet and replaced now and then (what tc actions do with their parameters).
//
//   read()    a guard: an open read-side section and a const T& that stays valid
//             until the guard goes; costs what rcu_domain::lock() costs plus a load.
//   store()   publishes a new T and retires the old one (reclaimed after every
//             reader that might hold it has left its section). A value counts
//             sizeof(T) against the domain's backlog limit, or what store(p, bytes)
//             says it owns; outside a read-side section, a store that would take
//             the backlog past the limit first waits for the grace period (at most
//             one) that makes room, before it unpublishes the old value.
//   update(f) publishes f(current); writers are serialised, so no update is lost.
//
// The pointer word is never null. Writers may call store()/update() from inside a
// read-side section: retiring never waits for a grace period.
//
// Allocation: the node that retires a value is allocated before the new value is
// published, so a store() or update() that throws (bad_alloc, or f's exception)
// has changed nothing and leaked nothing; one that returns has nothing left to
// fail. The node for the last value is allocated with the cell, so the destructor
// allocates nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>

#include "hotpath/detail/config.hpp"
#include "hotpath/rcu.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

template <class T, class Policy = default_policy>
class basic_rcu_cell {
  using domain = basic_rcu_domain<Policy>;

 public:
  // Keeps a read-side section open and the value it found alive.
  class guard {
   public:
    explicit guard(const basic_rcu_cell& c) noexcept : dom_(c.dom_) {
      dom_.lock();
      // Acquire pairs with the release exchange in publish(): the T is constructed.
      p_ = c.ptr_.load(std::memory_order_acquire);
    }
    ~guard() { dom_.unlock(); }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;

    const T& operator*() const noexcept { return *p_; }
    const T* operator->() const noexcept { return p_; }
    const T* get() const noexcept { return p_; }

   private:
    domain& dom_;
    const T* p_;
  };

  basic_rcu_cell() : basic_rcu_cell(std::make_unique<T>()) {}
  explicit basic_rcu_cell(std::unique_ptr<T> p)
      : ptr_(p.get()), last_(std::make_unique<retire_node>()) {
    HOTPATH_ASSERT(p != nullptr, "rcu_cell of a null pointer");
    (void)p.release();  // ours from here on
  }
  explicit basic_rcu_cell(T value) : basic_rcu_cell(std::make_unique<T>(std::move(value))) {}

  // Retires rather than deletes: a reader may still hold a guard on the last value.
  ~basic_rcu_cell() {
    last_->rcu_bytes = bytes_.load(std::memory_order_relaxed);
    retire(std::move(last_), ptr_.load(std::memory_order_relaxed), 0);
  }

  basic_rcu_cell(const basic_rcu_cell&) = delete;
  basic_rcu_cell& operator=(const basic_rcu_cell&) = delete;

  [[nodiscard]] guard read() const noexcept { return guard(*this); }

  void store(std::unique_ptr<T> p, std::size_t bytes = sizeof(T)) {
    HOTPATH_ASSERT(p != nullptr, "rcu_cell::store() of a null pointer");
    auto node = std::make_unique<retire_node>();  // before anything changes
    // The value this store retires, counted before it is unpublished, and before
    // writer_: a store that waits here must not hold up a writer inside a section
    // that the wait waits for. Another writer may retire it first: retire() settles
    // the difference.
    const std::size_t charged = bytes_.load(std::memory_order_relaxed);
    dom_.charge(charged);
    T* old;
    {
      uncharge_unless_published settle{dom_, charged};
      std::scoped_lock l(writer_);
      old = publish(p.release());
      node->rcu_bytes = bytes_.exchange(bytes, std::memory_order_relaxed);
      settle.published = true;
    }
    retire(std::move(node), old, charged);
  }
  void store(T value) { store(std::make_unique<T>(std::move(value))); }

  // f(const T&) -> T, called with writers excluded; readers carry on meanwhile. A
  // retire that f makes does not wait for the backlog limit (it would hold writer_
  // while waiting for readers, one of which may be a store() waiting for writer_).
  template <class F>
  void update(F f) {
    auto node = std::make_unique<retire_node>();  // before anything changes
    const std::size_t charged = bytes_.load(std::memory_order_relaxed);
    dom_.charge(charged);  // as in store()
    T* old;
    {
      uncharge_unless_published settle{dom_, charged};
      std::scoped_lock l(writer_);
      // Relaxed: only writers change ptr_, and we hold their lock.
      const T& current = *ptr_.load(std::memory_order_relaxed);
      bool& no_wait = domain::local().no_wait;
      const bool was = std::exchange(no_wait, true);
      const struct restore {
        bool& flag;
        bool value;
        ~restore() { flag = value; }
      } restore_no_wait{no_wait, was};
      old = publish(new T(f(current)));  // f(current) constructs the T in place
      node->rcu_bytes = bytes_.exchange(sizeof(T), std::memory_order_relaxed);
      settle.published = true;
    }
    retire(std::move(node), old, charged);
  }

 private:
  // Retires one value; allocated before that value is replaced.
  struct retire_node : detail::rcu_node {
    T* value = nullptr;
    static void reclaim(detail::rcu_node* n) noexcept {
      auto* self = static_cast<retire_node*>(n);
      delete self->value;
      delete self;
    }
  };

  T* publish(T* fresh) noexcept {
    // Release pairs with the acquire load in guard: readers see a constructed T.
    return ptr_.exchange(fresh, std::memory_order_acq_rel);
  }
  // A charge whose value was not published (f, new T or the mutex threw) is taken back.
  struct uncharge_unless_published {
    domain& dom;
    std::size_t bytes;
    bool published = false;
    ~uncharge_unless_published() {
      if (!published) dom.uncharge(bytes);
    }
  };

  // `charged`: the bytes charge() counted for it (node->rcu_bytes is its own).
  void retire(std::unique_ptr<retire_node> node, T* old, std::size_t charged) noexcept {
    node->value = old;
    node->rcu_reclaim = &retire_node::reclaim;
    dom_.retire_charged(node.release(), charged);
  }

  // Read on every packet (the domain beside it saves readers a static-init check);
  // writers' lock on a line of its own.
  alignas(cache_line_size) typename Policy::template atomic<T*> ptr_;
  domain& dom_ = domain::instance();
  std::unique_ptr<retire_node> last_;  // retires the value the destructor finds
  // The current value's bytes: written under writer_, read before it by charge().
  std::atomic<std::size_t> bytes_{sizeof(T)};
  alignas(cache_line_size) std::mutex writer_;
};

template <class T>
using rcu_cell = basic_rcu_cell<T>;

}  // namespace hotpath
HOTPATH_VISIBILITY_END
