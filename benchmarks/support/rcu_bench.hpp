// SPDX-License-Identifier: MIT
// Reader threads for grace-period benchmarks, shared by benchmarks/rcu.cpp and the
// showdown: idle registered readers (a grace period must still account for them)
// and busy ones (it must wait for their sections to end).
#pragma once

#include <atomic>
#include <thread>
#include <vector>

namespace hotpath::bench {

// Starts n threads that each run body(ready, stop): body calls ready() once set up,
// then works until stop reads true. The constructor returns once every thread has
// called ready(); the destructor stops and joins them.
class background_threads {
 public:
  template <class Body>
  background_threads(int n, Body body) {
    for (int i = 0; i < n; ++i)
      pool_.emplace_back([this, body] {
        body([this] { ready_.fetch_add(1, std::memory_order_release); },
             static_cast<const std::atomic<bool>&>(stop_));
      });
    while (ready_.load(std::memory_order_acquire) < n)
      std::this_thread::yield();
  }
  ~background_threads() {
    stop_.store(true, std::memory_order_release);
    stop_.notify_all();
    for (auto& t : pool_)
      t.join();
  }
  background_threads(const background_threads&) = delete;
  background_threads& operator=(const background_threads&) = delete;

 private:
  std::atomic<int> ready_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> pool_;
};

// n readers that register (reg()), then sleep until stopped, then unregister.
template <class Register, class Unregister>
background_threads idle_readers(int n, Register reg, Unregister unreg) {
  return background_threads(n, [reg, unreg](auto ready, const std::atomic<bool>& stop) {
    reg();
    ready();
    stop.wait(false, std::memory_order_acquire);
    unreg();
  });
}

}  // namespace hotpath::bench
