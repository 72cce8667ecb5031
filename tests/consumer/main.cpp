// SPDX-License-Identifier: MIT
// Uses every public header through the umbrella header, as a consumer would; exits 0
// when the counts balance.
#include <hotpath/hotpath.hpp>

#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

namespace {
struct config {
  long step = 1;
};
}  // namespace

int main() {
  hotpath::ticket_lock ticket;
  hotpath::mcs_lock mcs;
  hotpath::queued_lock queued;
  hotpath::priority_lock prio;
  hotpath::percpu_counter<> hits;
  hotpath::rcu_cell<config> cfg;
  long a = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        std::scoped_lock g(ticket, mcs, queued, prio);
        a += cfg.read()->step;
        hits.inc();
      }
    });
  }
  {
    std::scoped_lock g(prio.privileged());
    cfg.update([](const config& c) { return config{c.step}; });  // same value, new object
  }
  for (auto& t : threads)
    t.join();
  hotpath::rcu_barrier();
  std::printf("consumer: %ld %lld\n", a, static_cast<long long>(hits.sum()));
  return a == 40000 && hits.sum() == 40000 ? 0 : 1;
}
