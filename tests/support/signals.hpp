// SPDX-License-Identifier: MIT
// Signal handlers for tests: one installed for a scope, and stalls, a handler that
// busy-waits sent to one thread again and again to stop it at random points and
// widen the windows a lock must not leave open.
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "hotpath/detail/config.hpp"

namespace hotpath::test {

// `handler` for `sig` (mask empty, `flags` such as SA_RESTART) until the end of the
// scope, which puts the previous disposition back.
class scoped_signal_handler {
 public:
  scoped_signal_handler(int sig, void (*handler)(int), int flags) noexcept : sig_(sig) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = flags;
    installed_ = sigaction(sig, &sa, &old_) == 0;
  }
  ~scoped_signal_handler() {
    if (installed_) sigaction(sig_, &old_, nullptr);
  }
  scoped_signal_handler(const scoped_signal_handler&) = delete;
  scoped_signal_handler& operator=(const scoped_signal_handler&) = delete;

  bool installed() const noexcept { return installed_; }

 private:
  int sig_;
  bool installed_;
  struct sigaction old_ {};
};

// Busy-waits Micros microseconds: a signal that stalls the thread it lands on.
template <unsigned Micros>
void stall_handler(int) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(Micros)) {
  }
}

// Stalls `target` for Micros microseconds with signal `sig` every 50 us, from a thread
// of its own, until stop() or the end of the scope. ThreadSanitizer defers signals to
// safe points, where a stall widens no window: under it no signal is sent. Join the
// target after stop() and before the scope ends: a signal sent while it was preempted
// is still pending until it runs, and delivered after the previous disposition is back
// (for SIGUSR1 and SIGUSR2, the default: terminate) it would kill the test.
template <unsigned Micros>
class signal_stalls {
 public:
  signal_stalls(int sig, pthread_t target)
      : handler_(sig, stall_handler<Micros>, SA_RESTART), sender_([this, sig, target] {
          // No handler, no signal: the default action would kill the test.
          while (!HOTPATH_TSAN && handler_.installed() && !stop_.load(std::memory_order_relaxed)) {
            pthread_kill(target, sig);
            std::this_thread::sleep_for(std::chrono::microseconds(50));
          }
        }) {}
  ~signal_stalls() { stop(); }
  signal_stalls(const signal_stalls&) = delete;
  signal_stalls& operator=(const signal_stalls&) = delete;

  bool installed() const noexcept { return handler_.installed(); }
  // No signal is sent after this returns.
  void stop() {
    stop_.store(true, std::memory_order_relaxed);
    if (sender_.joinable()) sender_.join();
  }

 private:
  scoped_signal_handler handler_;
  std::atomic<bool> stop_{false};
  std::thread sender_;
};

}  // namespace hotpath::test
