// SPDX-License-Identifier: MIT
// What tests may see of queued_lock, priority_lock and ticket_lock beyond their
// public API: the lock word, the calling thread's nodes in use, the ticket counters. The headers
// befriend this struct and declare nothing else for tests.
#pragma once

#include <atomic>
#include <cstdint>

#include "hotpath/priority_lock.hpp"
#include "hotpath/queued_lock.hpp"
#include "hotpath/ticket_lock.hpp"

namespace hotpath::detail {

struct lock_test_access {
  // The whole word (a snapshot).
  template <class Policy, bool Requests>
  static std::uint32_t state(const queued_core<Policy, Requests>& l) noexcept {
    return l.word_.load(std::memory_order_relaxed);
  }
  template <class Policy, bool Fifo>
  static std::uint32_t state(const basic_priority_lock<Policy, Fifo>& l) noexcept {
    return state(l.core_);
  }
  // The word's address: the object a test's instrumented atomic watches.
  template <class Policy, bool Requests>
  static const void* word(const queued_core<Policy, Requests>& l) noexcept {
    return &l.word_;
  }
  template <class Policy, bool Fifo>
  static const void* word(const basic_priority_lock<Policy, Fifo>& l) noexcept {
    return word(l.core_);
  }
  // Moves a free ticket lock's dispenser and turn to `ticket` (a test of the wrap
  // starts them just short of 2^32). sleepers_ stays a true count.
  template <class Policy>
  static void set_next_ticket(basic_ticket_lock<Policy>& l, std::uint32_t ticket) noexcept {
    l.next_.store(ticket, std::memory_order_relaxed);
    l.serving_.store(ticket, std::memory_order_relaxed);
  }
  // How many of the calling thread's nodes are in use (waits in progress).
  template <class Lock>
  static unsigned nodes_in_use() noexcept {
    return Lock::depth();
  }
};

}  // namespace hotpath::detail

namespace hotpath::test {
using lock_test_access = detail::lock_test_access;
}  // namespace hotpath::test
