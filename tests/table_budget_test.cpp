// SPDX-License-Identifier: MIT
// bucket_table's budget on its own (detail/table_budget.hpp): it hands out exactly the
// budget, never a byte more at any thread count, and every byte given back can be taken
// again; a cpu's reserve keeps at most two batches.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "hotpath/detail/policy.hpp"
#include "hotpath/detail/table_budget.hpp"

namespace {

// Every charge on cpu 0's reserve, wherever the thread runs: the batch edges below
// depend on which reserve a call uses.
struct cpu0_policy : hotpath::default_policy {
  static unsigned current_cpu() noexcept { return 0; }
};
using budget = hotpath::detail::table_budget<hotpath::default_policy>;
using budget_on_cpu0 = hotpath::detail::table_budget<cpu0_policy>;

// At the budget, one under and one over.
TEST(TableBudget, HandsOutExactlyTheBudget) {
  budget over(1000, 64);
  EXPECT_FALSE(over.take(1001));
  EXPECT_EQ(over.charged(), 0);
  budget b(1000, 64);
  EXPECT_TRUE(b.take(999));
  EXPECT_TRUE(b.take(1));
  EXPECT_EQ(b.charged(), 1000);
  EXPECT_FALSE(b.take(1));
  EXPECT_EQ(b.charged(), 1000);  // a refusal takes nothing
  b.give_back(1);
  EXPECT_TRUE(b.take(1));
  EXPECT_FALSE(b.take(1));
  b.give_back(1000);
  EXPECT_EQ(b.charged(), 0);
  EXPECT_TRUE(b.take(1000));  // all of it again, wherever it was given back
}

// A reserve keeps what is given back up to two batches; one byte more and it returns
// all but one batch to the pool. A take from the pool brings a batch more for later.
TEST(TableBudget, AReserveKeepsAtMostTwoBatches) {
  constexpr std::int64_t batch = 64;
  budget_on_cpu0 b(10'000, batch);
  ASSERT_TRUE(b.take(3 * batch));  // from the pool, with a batch more in the reserve
  const std::int64_t pool = b.pool_bytes();
  EXPECT_EQ(pool, 10'000 - 4 * batch);
  EXPECT_EQ(b.charged(), 3 * batch);
  b.give_back(batch);  // the reserve at two batches, the edge: kept
  EXPECT_EQ(b.pool_bytes(), pool);
  EXPECT_EQ(b.charged(), 2 * batch);
  b.give_back(1);  // one over: down to one batch, the rest to the pool
  EXPECT_EQ(b.pool_bytes(), pool + batch + 1);
  EXPECT_EQ(b.charged(), 2 * batch - 1);
  EXPECT_TRUE(b.take(batch));  // all the reserve holds: the pool untouched
  EXPECT_EQ(b.pool_bytes(), pool + batch + 1);
  EXPECT_TRUE(b.take(1));  // one over what the reserve holds: from the pool, a batch more
  EXPECT_EQ(b.pool_bytes(), pool + batch + 1 - (1 + batch));
  EXPECT_EQ(b.charged(), 3 * batch);
}

// Four threads take and give back at random; what they hold, counted after each take
// and before each give-back, is a lower bound of what the budget handed out and must
// never pass it. At the end everything is back.
TEST(TableBudget, ThreadsNeverHoldMoreThanTheBudget) {
  constexpr std::int64_t total = 1024;  // binds one thread alone too (16 takes of up to 300)
  budget b(total, 64);
  std::atomic<std::int64_t> held{0};
  std::atomic<std::int64_t> most{0};
  std::atomic<std::int64_t> refused{0};
  constexpr int threads = 4;
  auto work = [&](int t) {
    std::mt19937_64 rng(static_cast<unsigned>(t) + 1);
    std::vector<std::int64_t> mine;
    for (int i = 0; i < 20000; ++i) {  // no deadline: counts only
      if (mine.size() < 16 && rng() % 3 != 0) {
        const auto d = static_cast<std::int64_t>(1 + rng() % 300);
        if (b.take(d, rng() % 2 == 0)) {
          const std::int64_t now = held.fetch_add(d) + d;
          std::int64_t m = most.load();
          while (now > m && !most.compare_exchange_weak(m, now)) {
          }
          mine.push_back(d);
        } else {
          refused.fetch_add(1);
        }
      } else if (!mine.empty()) {
        held.fetch_sub(mine.back());
        b.give_back(mine.back());
        mine.pop_back();
      }
    }
    for (const std::int64_t d : mine) {
      held.fetch_sub(d);
      b.give_back(d);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(work, t);
  for (auto& th : pool)
    th.join();
  EXPECT_LE(most.load(), total);
  EXPECT_GT(refused.load(), 0);  // the budget did bind
  EXPECT_EQ(held.load(), 0);
  EXPECT_EQ(b.charged(), 0);
  EXPECT_TRUE(b.take(total));
}

}  // namespace
