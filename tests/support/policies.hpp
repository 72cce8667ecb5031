// SPDX-License-Identifier: MIT
// Test policies: a waiting strategy that announces when a thread begins to wait,
// so a test knows a waiter has taken its place in a queue before starting the next.
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "hotpath/detail/policy.hpp"
#include "signals.hpp"

namespace hotpath::test {

inline std::atomic<unsigned> waiting_threads{0};
inline std::atomic<unsigned> signals_handled{0};  // by acquisition_order's handler

// Wraps strategy W; the first relax() of each thread counts it in waiting_threads.
// A lock calls relax() only after the waiter has taken its queue position.
template <class W>
struct announcing {
  static constexpr bool parks = W::parks;
  static bool relax(unsigned& n) noexcept {
    thread_local bool announced = false;
    if (!announced) {
      announced = true;
      waiting_threads.fetch_add(1, std::memory_order_release);
    }
    return W::relax(n);
  }
};

template <class W>
using announcing_policy = basic_policy<announcing<W>>;

inline bool wait_for_waiters(unsigned n, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (waiting_threads.load(std::memory_order_acquire) < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Lock on a fresh set of threads, one at a time in a known order, while the main
// thread holds it; returns the order in which they then acquired it. With
// `signalled` >= 0, that waiter then gets a SIGUSR1 (a no-op handler, installed
// without SA_RESTART, so its sleep ends with EINTR) before the lock is released.
template <class Lock>
std::vector<int> acquisition_order(Lock& lock, int waiters, int signalled = -1) {
  std::vector<int> order;
  std::vector<std::thread> pool;
  waiting_threads = 0;
  lock.lock();
  for (int i = 0; i < waiters; ++i) {
    pool.emplace_back([&lock, &order, i] {
      lock.lock();
      order.push_back(i);
      lock.unlock();
    });
    if (!wait_for_waiters(static_cast<unsigned>(i + 1))) break;
  }
  if (signalled >= 0 && signalled < static_cast<int>(pool.size())) {
    // Restored at the end of this block, once the handler has run: on a loaded machine
    // the waiter may be slow to take the signal, which SIG_DFL would make fatal.
    scoped_signal_handler handler(
        SIGUSR1, [](int) { signals_handled.fetch_add(1, std::memory_order_relaxed); }, 0);
    // Let it fall asleep first (the test does not depend on it: only its chance to
    // catch a waiter that a wake-up sends to the back does).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const unsigned handled = signals_handled.load(std::memory_order_relaxed);
    pthread_kill(pool[static_cast<std::size_t>(signalled)].native_handle(), SIGUSR1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (signals_handled.load(std::memory_order_relaxed) == handled &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  lock.unlock();
  for (auto& t : pool)
    t.join();
  return order;
}

}  // namespace hotpath::test
