// SPDX-License-Identifier: MIT
#include "hotpath/ticket_lock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <type_traits>

#include "support/lock_suite.hpp"
#include "support/lock_test_access.hpp"
#include "support/policies.hpp"
#include "support/stress.hpp"

namespace hotpath::test {
namespace {

using ticket_types =
    ::testing::Types<ticket_lock, basic_ticket_lock<spin_policy>, basic_ticket_lock<yield_policy>>;
INSTANTIATE_TYPED_TEST_SUITE_P(ticket, lockable_suite, ticket_types);

static_assert(!std::is_copy_constructible_v<ticket_lock>);
static_assert(!std::is_move_constructible_v<ticket_lock>);
static_assert(sizeof(ticket_lock) == 12);
[[maybe_unused]] constinit ticket_lock constant_initialised;  // constexpr default constructor

TEST(TicketLock, IsFifo) {
  basic_ticket_lock<announcing_policy<spin_then_park<>>> lock;
  std::vector<int> expected(8);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(acquisition_order(lock, 8), expected);
}

TEST(TicketLock, IsLockedReflectsState) {
  ticket_lock lock;
  EXPECT_FALSE(lock.is_locked());
  lock.lock();
  EXPECT_TRUE(lock.is_locked());
  lock.unlock();
  EXPECT_FALSE(lock.is_locked());
}

TEST(TicketLock, WaitersParkInsteadOfBurningCpu) {
  expect_waiters_park<ticket_lock, basic_ticket_lock<spin_policy>>();
}

// Wrap-around: tickets that start 8 short of 2^32, so a short run crosses the wrap.
// Only the dispenser and the turn move: an offset sleeper count (as an earlier
// version of this test had) reads 0 when exactly 8 threads sleep, and unlock() then
// rightly skips the wake-up that the test's own bookkeeping lost.
constexpr std::uint32_t near_wrap = 0u - 8u;

TEST(TicketLock, FifoAndExclusiveAcrossTheCounterWrap) {
  {
    basic_ticket_lock<announcing_policy<spin_then_park<>>> lock;
    lock_test_access::set_next_ticket(lock, near_wrap);
    std::vector<int> expected(12);  // tickets 2^32 - 8 .. 2^32 + 4
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(acquisition_order(lock, 12), expected);
    EXPECT_FALSE(lock.is_locked());
    EXPECT_TRUE(lock.try_lock());
    EXPECT_TRUE(lock.is_locked());
    EXPECT_FALSE(lock.try_lock());
    lock.unlock();
  }
  for (std::uint32_t k = 0; k < 3; ++k) {  // the wrap lands somewhere else in each run
    basic_ticket_lock<yield_policy> lock;
    lock_test_access::set_next_ticket(lock, near_wrap + 5 + k);  // 3 - k tickets left
    // A FIFO spinning lock convoys on a loaded machine: bounded in time too. Each of
    // the 4 threads gets its first section whatever the time: the wrap is crossed.
    const stress_result r = stress_lock(lock, 4, 200, std::chrono::seconds(2));
    EXPECT_EQ(r.violations, 0u);
    EXPECT_EQ(r.counter, r.total);
    EXPECT_GE(r.total, 4u);
    EXPECT_FALSE(lock.is_locked());
  }
}

}  // namespace
}  // namespace hotpath::test
