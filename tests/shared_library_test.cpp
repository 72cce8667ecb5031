// SPDX-License-Identifier: MIT
// Two shared libraries built with -fvisibility=hidden (the usual setting for a
// shared library), each instantiating hotpath's headers, share one queued_lock and
// one rcu_cell. hotpath's process-wide state (thread slots, the node table, the
// RCU domain and each thread's reader state) must be one per process, not one per
// library: otherwise a queue tail names different nodes in each library (threads
// hang) and a grace period in one library ignores the other's readers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include "hotpath/queued_lock.hpp"
#include "shared_library/api.hpp"
#include "support/stress.hpp"

namespace hotpath::test {
namespace {

using namespace std::chrono_literals;
using shared_library::api;

const api& lib(int i) {
  return *(i == 0 ? hotpath_test_lib_a() : hotpath_test_lib_b());
}

// 6 threads, each taking the lock alternately through one library and releasing it
// through the other. Bounded by iterations; a hang (the failure this catches) is
// reported after 60 s of running rather than waited out.
TEST(SharedLibraries, OneQueuedLockAcrossHiddenLibraries) {
  constexpr unsigned threads = 6;
  const int iters = stress_scaled(100000);
  queued_lock lock;
  std::uint64_t counter = 0;
  int inside = 0;
  std::atomic<std::uint64_t> violations{0};
  std::atomic<unsigned> finished{0};
  start_gate gate(threads + 1, 60s);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      gate.arrive_and_wait();
      for (int i = 0; i < iters; ++i) {
        const int side = static_cast<int>((t + static_cast<unsigned>(i)) % 2);
        lib(side).lock(lock);
        if (++inside != 1) violations.fetch_add(1, std::memory_order_relaxed);
        ++counter;
        // A longer section makes waiters queue on nodes (the third contender on).
        for (int k = 0; k < 200; ++k)
          std::atomic_signal_fence(std::memory_order_seq_cst);
        --inside;
        lib(1 - side).unlock(lock);
      }
      finished.fetch_add(1, std::memory_order_release);
    });
  }
  gate.arrive_and_wait();
  while (finished.load(std::memory_order_acquire) < threads) {
    if (gate.expired()) {
      std::fprintf(stderr, "hung: %u of %u threads finished; lock word %#x\n", finished.load(),
                   threads, lock.state());
      std::_Exit(1);  // the others wait forever: do not join them
    }
    std::this_thread::sleep_for(1ms);
  }
  for (auto& th : pool)
    th.join();
  EXPECT_EQ(violations.load(), 0u);
  EXPECT_EQ(counter, std::uint64_t{threads} * iters);
  EXPECT_FALSE(lock.is_locked());
}

// A reader in one library; the other waits for a grace period, which must wait for it.
struct hold {
  std::atomic<bool> inside{false}, release{false};
  static void wait(void* p) {
    auto* h = static_cast<hold*>(p);
    h->inside.store(true, std::memory_order_release);
    while (!h->release.load(std::memory_order_acquire))
      std::this_thread::sleep_for(100us);
  }
};

TEST(SharedLibraries, GracePeriodInOneLibraryWaitsForAReaderInTheOther) {
  for (int reader_side : {0, 1}) {
    SCOPED_TRACE(reader_side);
    hold h;
    std::thread reader([&] { lib(reader_side).read_section(&hold::wait, &h); });
    while (!h.inside.load(std::memory_order_acquire))
      std::this_thread::sleep_for(100us);
    auto sync = std::async(std::launch::async, lib(1 - reader_side).synchronize);
    // A wrong result (returning under the reader) cannot be hidden by a slow machine.
    EXPECT_EQ(sync.wait_for(200ms), std::future_status::timeout)
        << "rcu_synchronize() returned while the other library's reader was inside";
    h.release.store(true, std::memory_order_release);
    reader.join();
    EXPECT_EQ(sync.wait_for(60s), std::future_status::ready);
  }
}

// One rcu_cell: made and read in library A, stored to and reclaimed in B.
TEST(SharedLibraries, RcuCellAcrossHiddenLibraries) {
  std::atomic<int> destroyed{0};
  const api& a = lib(0);
  const api& b = lib(1);
  void* cell = a.make_cell(&destroyed);
  hold h;
  int seen = 0;
  std::thread reader([&] { seen = a.read_cell(cell, &hold::wait, &h); });
  while (!h.inside.load(std::memory_order_acquire))
    std::this_thread::sleep_for(100us);
  b.store_cell(cell, &destroyed);
  auto barrier = std::async(std::launch::async, b.barrier);
  EXPECT_EQ(barrier.wait_for(200ms), std::future_status::timeout)
      << "rcu_barrier() returned while a reader held the old value";
  EXPECT_EQ(destroyed.load(), 0);
  h.release.store(true, std::memory_order_release);
  reader.join();
  EXPECT_EQ(seen, shared_library::tracked::alive);
  ASSERT_EQ(barrier.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(destroyed.load(), 1) << "B's rcu_barrier() did not reclaim what B retired";
  b.destroy_cell(cell);
  a.barrier();
  EXPECT_EQ(destroyed.load(), 2);
}

}  // namespace
}  // namespace hotpath::test
