// SPDX-License-Identifier: MIT
// A lock, a counter and an rcu_cell, as a packaged hotpath is used: two workers read a
// step from an rcu_cell that the main thread keeps replacing, add it to a plain total
// under a queued_lock and to a per-cpu counter without one. Exits 0 when the two sums
// agree, no update under the lock was lost and every step read was one that was stored.
#include <hotpath/percpu_counter.hpp>
#include <hotpath/queued_lock.hpp>
#include <hotpath/rcu_cell.hpp>
#include <hotpath/version.hpp>

#include <atomic>
#include <cstdio>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

namespace {
struct settings {
  long step = 1;
};
constexpr int workers = 2;
constexpr long rounds = 1000000;
constexpr long max_step = 4;
}  // namespace

int main() {
  hotpath::queued_lock lock;
  hotpath::percpu_counter<> steps;
  hotpath::rcu_cell<settings> cfg;
  long total = 0;  // guarded by lock
  long adds = 0;   // guarded by lock
  std::vector<int> bad_reads(workers, 0);
  std::atomic<int> running{workers};
  std::latch start(workers + 1);  // everyone begins together, so the workers overlap

  std::vector<std::thread> threads;
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (long i = 0; i < rounds; ++i) {
        const long step = cfg.read()->step;
        if (step < 1 || step > max_step) ++bad_reads[t];
        {
          std::scoped_lock guard(lock);
          total += step;
          ++adds;
        }
        steps.add(step);
      }
      running.fetch_sub(1, std::memory_order_relaxed);
    });
  }
  start.arrive_and_wait();
  // Relaxed: the joins below order everything the check reads.
  for (long n = 0; running.load(std::memory_order_relaxed) > 0; ++n)
    cfg.store(settings{1 + n % max_step});
  for (auto& t : threads)
    t.join();
  hotpath::rcu_barrier();

  const bool ok =
      adds == workers * rounds && total == steps.sum() && bad_reads[0] == 0 && bad_reads[1] == 0;
  std::printf("hotpath %d.%d.%d: adds=%ld total=%ld counter=%lld %s\n", HOTPATH_VERSION_MAJOR,
              HOTPATH_VERSION_MINOR, HOTPATH_VERSION_PATCH, adds, total,
              static_cast<long long>(steps.sum()), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
