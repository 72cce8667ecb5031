// SPDX-License-Identifier: MIT
// examples/qdisc/qdisc.hpp: every strategy keeps each sender's packets in order,
// accounts for every packet, drops only when full, and survives parameter swaps
// while traffic runs.
#include "qdisc.hpp"

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

struct traffic_result {
  std::vector<std::int64_t> offered, accepted, delivered;
  std::int64_t order_violations = 0;
  std::int64_t oversized_batches = 0;
  std::int64_t max_backlog_seen = 0;
};

// `senders` threads each offer up to `per_sender` packets (stopping early after
// `budget`, counted from when every thread runs, or once `during` has returned if
// that is later), while a transmit thread
// dequeues until everything offered is accounted for, checking per-sender order.
// `during` runs on the main thread while traffic flows.
template <class S, class During>
traffic_result traffic(qdisc<S>& q, unsigned senders, std::int64_t per_sender,
                       std::chrono::milliseconds budget, During during) {
  traffic_result r;
  r.offered.assign(senders, 0);
  r.accepted.assign(senders, 0);
  r.delivered.assign(senders, 0);
  std::atomic<unsigned> finished{0};
  std::atomic<bool> during_done{false};
  // The senders, the transmit thread and this one (which runs `during`).
  start_gate gate(senders + 2, budget);
  std::vector<std::thread> pool;
  for (unsigned s = 0; s < senders; ++s) {
    pool.emplace_back([&, s] {
      gate.arrive_and_wait();
      std::int64_t i = 0, ok = 0;
      for (; i < per_sender; ++i) {
        // Every sender offers at least one packet, however loaded the machine.
        if (i > 0 && (i & 63) == 0 && gate.expired() && during_done.load(std::memory_order_acquire))
          break;
        packet p{s, static_cast<std::uint32_t>(i), 100, 0};
        if (q.enqueue(p) == verdict::ok) ++ok;
      }
      r.offered[s] = i;
      r.accepted[s] = ok;
      finished.fetch_add(1, std::memory_order_release);
    });
  }
  std::thread tx([&] {
    std::vector<packet> buf(4096);
    std::vector<std::int64_t> last(senders, -1);
    gate.arrive_and_wait();
    for (;;) {
      const bool done = finished.load(std::memory_order_acquire) == senders;
      const std::size_t n = q.dequeue_batch(buf.data(), buf.size());
      r.oversized_batches += n > 64;
      for (std::size_t i = 0; i < n; ++i) {
        const packet& p = buf[i];
        if (static_cast<std::int64_t>(p.seq) <= last[p.sender]) ++r.order_violations;
        last[p.sender] = p.seq;
        ++r.delivered[p.sender];
      }
      if (n == 0) {
        if (done) break;  // all senders returned and the FIFO is empty
        std::this_thread::yield();
      }
    }
  });
  gate.arrive_and_wait();
  during();
  during_done.store(true, std::memory_order_release);
  for (auto& t : pool)
    t.join();
  tx.join();
  return r;
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
    for (std::size_t i = 0; i < 60; ++i) {
      q.set_params(i % 2 ? params{1000, 64} : params{50, 7});
      std::this_thread::sleep_for(200us);
    }
    // Senders stop only after this returns: every swap happened under traffic.
  });
  EXPECT_EQ(r.oversized_batches, 0);
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
