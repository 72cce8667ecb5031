// SPDX-License-Identifier: MIT
#include "hotpath/ticket_lock.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <type_traits>

#include "support/lock_suite.hpp"
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
constinit ticket_lock constant_initialised;  // constexpr default constructor

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

}  // namespace
}  // namespace hotpath::test
