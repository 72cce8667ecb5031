// SPDX-License-Identifier: MIT
// Uses every public header through the umbrella header; exits 0 when counts balance.
#include <hotpath/hotpath.hpp>

#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

int main() {
  hotpath::ticket_lock ticket;
  hotpath::mcs_lock mcs;
  long a = 0, b = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        std::scoped_lock g(ticket, mcs);
        ++a;
        ++b;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  std::printf("consumer: %ld %ld\n", a, b);
  return a == 40000 && b == 40000 ? 0 : 1;
}
