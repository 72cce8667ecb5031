// SPDX-License-Identifier: MIT
// examples/qdisc/qdisc.hpp: every strategy keeps each sender's packets in order,
// accounts for every packet, drops only when full, and survives parameter swaps
// while traffic runs.
#include "qdisc.hpp"
#include "traffic.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "support/stress.hpp"

namespace hotpath::test {
namespace {

using namespace hotpath::sched;
using namespace std::chrono_literals;

template <class S>
class QdiscTest : public ::testing::Test {};
using strategies =
    ::testing::Types<tas_strategy, ticket_strategy, busylock_strategy, queued_strategy,
                     priority_strategy, defer_strategy, defer_priority_strategy>;
TYPED_TEST_SUITE(QdiscTest, strategies);

// Traffic through the program's own driver (examples/qdisc/traffic.hpp): `senders`
// threads each offer up to `per_sender` packets, stopping early once `budget` has
// passed (counted from when every thread runs, longer by HOTPATH_STRESS_FACTOR) and
// `during`, run on this thread meanwhile, has returned; the transmit thread drains the
// FIFO, checking each sender's order.
template <class S, class During>
traffic_result traffic(qdisc<S>& q, unsigned senders, std::int64_t per_sender,
                       std::chrono::milliseconds budget, During during) {
  traffic_options o;
  o.senders = senders;
  o.per_sender = stress_scaled(per_sender);
  o.window = stress_scaled(budget);
  o.drain = true;
  return run_traffic(q, o, during);
}

template <class S>
void expect_balanced(const qdisc<S>& q, const traffic_result& r) {
  std::int64_t offered = 0, accepted = 0, delivered = 0;
  for (std::size_t s = 0; s < r.offered.size(); ++s) {
    offered += r.offered[s];
    accepted += r.accepted[s];
    delivered += r.delivered[s];
    if (S::defers) {  // a deferred packet is "ok" when handed over; its flusher may drop it
      EXPECT_LE(r.delivered[s], r.accepted[s]) << "sender " << s;
    } else {
      EXPECT_EQ(r.delivered[s], r.accepted[s]) << "sender " << s;
    }
  }
  const counters c = q.stats();
  EXPECT_GT(offered, 0);
  EXPECT_EQ(offered, c[enqueued] + c[dropped]);
  EXPECT_EQ(c[enqueued], c[transmitted] + static_cast<std::int64_t>(q.backlog()));
  EXPECT_EQ(q.backlog(), 0u);  // the transmit thread drained it
  EXPECT_EQ(delivered, c[transmitted]);
  EXPECT_EQ(c[bytes], 100 * c[transmitted]);
  if (!S::defers) {
    EXPECT_EQ(accepted, c[enqueued]);
  }
  EXPECT_EQ(r.order_violations, 0);
}

TYPED_TEST(QdiscTest, SingleThreadFifoAndBatches) {
  qdisc<TypeParam> q(params{100, 8});
  for (std::uint32_t i = 0; i < 50; ++i)
    ASSERT_EQ(q.enqueue(packet{0, i, 10, 0}), verdict::ok);
  EXPECT_EQ(q.backlog(), 50u);
  std::vector<packet> out(64);
  std::uint32_t next = 0;
  while (const std::size_t n = q.dequeue_batch(out.data(), out.size())) {
    EXPECT_LE(n, 8u);  // params.batch caps the caller's max
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_EQ(out[i].seq, next++);
  }
  EXPECT_EQ(next, 50u);
  EXPECT_EQ(q.dequeue_batch(out.data(), 3), 0u);
}

TYPED_TEST(QdiscTest, DropsOnlyWhenFull) {
  qdisc<TypeParam> q(params{100, 64});
  for (std::uint32_t i = 0; i < 100; ++i)
    ASSERT_EQ(q.enqueue(packet{0, i, 1, 0}), verdict::ok) << i;
  for (std::uint32_t i = 100; i < 130; ++i)
    EXPECT_EQ(q.enqueue(packet{0, i, 1, 0}), verdict::dropped) << i;
  EXPECT_EQ(q.stat(enqueued), 100);
  EXPECT_EQ(q.stat(dropped), 30);
  // One slot free: the next packet goes in, the one after is dropped again.
  packet out[1];
  ASSERT_EQ(q.dequeue_batch(out, 1), 1u);
  EXPECT_EQ(out[0].seq, 0u);
  EXPECT_EQ(q.enqueue(packet{0, 130, 1, 0}), verdict::ok);
  EXPECT_EQ(q.enqueue(packet{0, 131, 1, 0}), verdict::dropped);
}

// Many senders, nobody dequeuing: whatever the interleaving, exactly `limit`
// packets get in and the excess is dropped, never more.
TYPED_TEST(QdiscTest, ConcurrentFillDropsExactlyTheExcess) {
  constexpr unsigned senders = 8;
  constexpr std::int64_t each = 160;
  for (const std::size_t limit : {1000u, 1280u, 1500u}) {  // over, exactly, under capacity
    qdisc<TypeParam> q(params{limit, 64});
    std::vector<std::thread> pool;
    for (unsigned s = 0; s < senders; ++s)
      pool.emplace_back([&, s] {
        for (std::int64_t i = 0; i < each; ++i)
          q.enqueue(packet{s, static_cast<std::uint32_t>(i), 1, 0});
      });
    for (auto& t : pool)
      t.join();
    const auto offered = static_cast<std::int64_t>(senders * each);
    const auto fits = std::min<std::int64_t>(offered, static_cast<std::int64_t>(limit));
    EXPECT_EQ(q.stat(enqueued), fits) << limit;
    EXPECT_EQ(q.stat(dropped), offered - fits) << limit;
    EXPECT_EQ(q.backlog(), static_cast<std::size_t>(fits));
  }
}

TYPED_TEST(QdiscTest, PerSenderFifoAndConservationUnderLoad) {
  for (const unsigned senders : {1u, 3u, 8u}) {
    SCOPED_TRACE(senders);
    qdisc<TypeParam> q(params{200, 64});
    const auto r = traffic(q, senders, 1000000, 300ms, [] {});
    expect_balanced(q, r);
  }
}

// A control thread swaps limit and batch while traffic runs: every swap takes
// effect without losing, duplicating or reordering a packet.
TYPED_TEST(QdiscTest, ParameterSwapDuringTraffic) {
  qdisc<TypeParam> q(params{1000, 64});
  const auto r = traffic(q, 4, std::int64_t{1} << 40, 100ms, [&] {
    const std::size_t swaps = 2 * stress_scaled(std::size_t{30});  // even: ends on {1000, 64}
    for (std::size_t i = 0; i < swaps; ++i) {
      q.set_params(i % 2 ? params{1000, 64} : params{50, 7});
      std::this_thread::sleep_for(200us);
    }
    // Senders stop only after this returns: every swap happened under traffic.
  });
  EXPECT_LE(r.largest_batch, 64u);  // no batch beyond the largest limit swapped in
  expect_balanced(q, r);
  // The last swap is what the qdisc now uses; a new one takes effect at once.
  EXPECT_EQ(q.current_params().limit, 1000u);
  q.set_params(params{5, 2});
  for (std::uint32_t i = 0; i < 7; ++i)
    EXPECT_EQ(q.enqueue(packet{0, i, 1, 0}), i < 5 ? verdict::ok : verdict::dropped);
  packet out[8];
  EXPECT_EQ(q.dequeue_batch(out, 8), 2u);
  EXPECT_THROW(q.set_params(params{0, 64}), std::invalid_argument);
  EXPECT_THROW(q.set_params(params{10, 0}), std::invalid_argument);
  EXPECT_THROW(q.set_params(params{std::size_t{1} << 20, 64}), std::invalid_argument);
}

// The defer list's hard case: many senders racing the empty/non-empty transition
// of the list (a small limit keeps the flushers short and the list often empty).
template <class S>
void senders_race_the_empty_transition() {
  for (const std::size_t limit : {4u, 64u}) {
    SCOPED_TRACE(limit);
    qdisc<S> q(params{limit, 64});
    const auto r = traffic(q, 16, 1000000, 400ms, [] {});
    expect_balanced(q, r);
  }
}
TEST(QdiscDeferList, ManySendersRaceTheEmptyTransition) {
  senders_race_the_empty_transition<defer_strategy>();
}
TEST(QdiscDeferList, ManySendersRaceTheEmptyTransitionPriority) {
  senders_race_the_empty_transition<defer_priority_strategy>();
}

}  // namespace
}  // namespace hotpath::test
