// SPDX-License-Identifier: MIT
#include "hotpath/rcu_cell.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "support/stress.hpp"

namespace hotpath::test {
namespace {

using namespace std::chrono_literals;

// Two fields that must always agree, and counts of every construction and
// destruction (copies and moves included).
struct params {
  static inline std::atomic<long> constructed{0};
  static inline std::atomic<long> destroyed{0};
  long a = 0;
  long b = 0;  // always -a
  std::string tag = "params";
  params() { constructed.fetch_add(1, std::memory_order_relaxed); }
  params(long x) : a(x), b(-x) { constructed.fetch_add(1, std::memory_order_relaxed); }
  params(const params& o) : a(o.a), b(o.b), tag(o.tag) {
    constructed.fetch_add(1, std::memory_order_relaxed);
  }
  params(params&& o) noexcept : a(o.a), b(o.b), tag(std::move(o.tag)) {
    constructed.fetch_add(1, std::memory_order_relaxed);
  }
  params& operator=(const params&) = default;
  ~params() {
    a = 1;  // breaks the invariant: a reader of freed memory would notice (and ASan)
    b = 1;
    destroyed.fetch_add(1, std::memory_order_relaxed);
  }
};

long balance() {
  return params::constructed.load() - params::destroyed.load();
}

TEST(RcuCell, ConstructReadStore) {
  rcu_cell<params> d;
  EXPECT_EQ(d.read()->a, 0);
  rcu_cell<params> v(params(5));
  EXPECT_EQ((*v.read()).b, -5);
  rcu_cell<params> u(std::make_unique<params>(6));
  EXPECT_EQ(u.read().get()->a, 6);
  u.store(params(7));
  EXPECT_EQ(u.read()->a, 7);
  u.store(std::make_unique<params>(8));
  u.update([](const params& p) { return params(p.a + 1); });
  EXPECT_EQ(u.read()->a, 9);
  EXPECT_EQ(u.read()->b, -9);
}

TEST(RcuCell, GuardKeepsOldValueAliveAcrossStore) {
  rcu_barrier();
  const long before = params::destroyed.load();
  rcu_cell<params> cell(params(1));
  std::promise<void> entered, leave;
  std::shared_future<void> leave_f = leave.get_future().share();
  long seen = 0;
  std::thread reader([&] {
    auto g = cell.read();
    entered.set_value();
    leave_f.wait();
    seen = g->a + g->b;  // 0 if still the value we read
  });
  entered.get_future().wait();
  const long after_ctor = params::destroyed.load();  // the temporary params(1)
  cell.store(params(2));
  for (int i = 0; i < 3; ++i)
    cell.update([](const params& p) { return params(p.a + 1); });
  auto barrier = std::async(std::launch::async, [] { rcu_barrier(); });
  EXPECT_EQ(barrier.wait_for(100ms), std::future_status::timeout);
  // Only the temporaries are gone; every published value is alive.
  EXPECT_EQ(params::destroyed.load() - after_ctor, 1);  // the params(2) temporary
  leave.set_value();
  reader.join();
  ASSERT_EQ(barrier.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(seen, 0);
  EXPECT_EQ(cell.read()->a, 5);
  EXPECT_GT(params::destroyed.load(), before);
}

// Readers (more threads than cores) check the invariant inside the object while
// writers update() continuously; every object made is destroyed exactly once.
TEST(RcuCell, StressReadersAndUpdaters) {
  rcu_barrier();
  const long start_balance = balance();
  constexpr unsigned readers = 4, writers = 2;
  const long updates_per_writer = stress_scaled(300000L);
  std::atomic<long> violations{0}, reads{0}, updates{0};
  std::atomic<bool> writers_done{false};
  {
    rcu_cell<params> cell(params(0));
    // The writers' time budget starts once every thread runs.
    start_gate gate(readers + writers, 2s);
    std::vector<std::thread> pool;
    for (unsigned r = 0; r < readers; ++r) {
      pool.emplace_back([&] {
        gate.arrive_and_wait();
        long n = 0, last = 0;
        do {  // at least one read, however late this reader first runs
          auto g = cell.read();
          if (g->a != -g->b || g->a < last || g->tag != "params")
            violations.fetch_add(1, std::memory_order_relaxed);
          last = g->a;  // values only grow: no stale object after a newer one
          ++n;
        } while (!writers_done.load(std::memory_order_relaxed));
        reads.fetch_add(n, std::memory_order_relaxed);
      });
    }
    std::vector<std::thread> wpool;
    for (unsigned w = 0; w < writers; ++w) {
      wpool.emplace_back([&] {
        gate.arrive_and_wait();
        long i = 0;
        for (; i < updates_per_writer && (i == 0 || !gate.expired()); ++i)
          cell.update([](const params& p) { return params(p.a + 1); });
        updates.fetch_add(i, std::memory_order_relaxed);
      });
    }
    for (auto& t : wpool)
      t.join();
    writers_done = true;
    for (auto& t : pool)
      t.join();
    EXPECT_EQ(cell.read()->a, updates.load());  // serialised writers lose nothing
  }
  rcu_barrier();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(balance(), start_balance);
}

// A writer that stores from inside its own read-side section does not deadlock.
TEST(RcuCell, StoreInsideReadSection) {
  rcu_cell<params> cell(params(1));
  {
    auto g = cell.read();
    for (int i = 0; i < 3 * static_cast<int>(rcu_domain::batch_size); ++i)
      cell.update([](const params& p) { return params(p.a + 1); });
    EXPECT_EQ(g->a, 1);
  }
  EXPECT_EQ(cell.read()->a, 1 + 3 * static_cast<long>(rcu_domain::batch_size));
}

}  // namespace
}  // namespace hotpath::test
