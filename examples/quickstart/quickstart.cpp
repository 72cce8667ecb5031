// SPDX-License-Identifier: MIT
// The README's quick start, compiled so that it stays true: four threads count
// into one map under an mcs_lock, and the total must balance. (10,000 each: a FIFO
// lock hands over to preempted waiters on a loaded machine, which under
// ThreadSanitizer took 16 minutes for 100,000.)
#include <hotpath/hotpath.hpp>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

int main() {
  hotpath::mcs_lock lock;  // or hotpath::ticket_lock: both are Lockable
  std::map<std::string, long> hits;

  std::vector<std::thread> workers;
  workers.reserve(4);
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        std::scoped_lock guard(lock);
        ++hits[t % 2 ? "odd" : "even"];
      }
    });
  }
  for (auto& w : workers)
    w.join();

  const long total = hits["odd"] + hits["even"];
  std::printf("even=%ld odd=%ld total=%ld\n", hits["even"], hits["odd"], total);
  return total == 40000 ? 0 : 1;
}
