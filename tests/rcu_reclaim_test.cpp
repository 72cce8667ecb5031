// SPDX-License-Identifier: MIT
// Reclamation in bounded time and bounded memory (rcu.hpp): the reclaimer thread
// frees what was retired with nothing else happening; a batch closes by age at
// exactly max_batch_age and by size at exactly batch_size; the backlog stays
// within its byte limit (at the limit a retire returns at once, one byte over it
// reclaims or waits); the thread can be refused and comes back when allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "hotpath/rcu.hpp"
#include "hotpath/rcu_cell.hpp"
#include "support/process.hpp"
#include "support/stress.hpp"

namespace hotpath::test {
namespace {

using namespace std::chrono_literals;
using hotpath::test::eventually;

struct counted {
  static inline std::atomic<long> alive{0};
  counted() { alive.fetch_add(1, std::memory_order_relaxed); }
  ~counted() { alive.fetch_sub(1, std::memory_order_relaxed); }
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;
};

// A thread inside a read-side section of `d`, from construction until release(),
// after running `inside` there.
class section_holder {
 public:
  template <class Domain, class F = void (*)()>
  explicit section_holder(
      Domain& d, F inside = [] {}) {
    std::promise<void> entered;
    auto in = entered.get_future();
    thread_ = std::thread([&d, inside, &entered, leave = leave_.get_future()] {
      std::scoped_lock r(d);
      inside();
      entered.set_value();
      leave.wait();
    });
    in.wait();
  }
  void release() {
    leave_.set_value();
    thread_.join();
  }
  ~section_holder() {
    if (thread_.joinable()) release();
  }

 private:
  std::promise<void> leave_;
  std::thread thread_;
};

// Three retires and then nothing: the reclaimer frees them without a barrier,
// without another retire, without a read-side section. A build that waits for a
// batch of 64 (no reclaimer, or no age) never does. Twice: the first round may
// start the thread; the second finds it asleep and must wake it. (Asleep, not about
// to sleep: the second round waits until one of the threads the first one started,
// the reclaimer, is parked on a futex, so that a reclaimer nobody wakes cannot pass
// by polling once more; after a fixed 20 ms it was not always there on a loaded
// machine.)
TEST(RcuReclaim, RetiredObjectsGoWithNothingElseHappening) {
  rcu_barrier();
  ASSERT_EQ(counted::alive.load(), 0);
  const std::set<long> before = hotpath::test::thread_ids();
  std::vector<long> started;
  for (int round = 0; round < 2; ++round) {
    if (round > 0) {
      for (const long tid : hotpath::test::thread_ids())
        if (!before.count(tid)) started.push_back(tid);
      if (started.empty()) std::this_thread::sleep_for(20ms);  // it was there before
      // One of them (a sanitizer may start a thread of its own, which naps) parks.
      EXPECT_TRUE(
          started.empty() ||
          eventually(
              [&] { return std::any_of(started.begin(), started.end(), hotpath::test::parked); },
              10s))
          << "the reclaimer never parked";
    }
    for (int i = 0; i < 3; ++i)
      rcu_retire(new counted);
    const auto retired = std::chrono::steady_clock::now();  // the deadline starts here
    EXPECT_TRUE(eventually([] { return counted::alive.load() == 0; }, 10s))
        << counted::alive.load() << " of 3 still alive in round " << round;
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - retired)
                        .count();
    std::printf("round %d: retire to free %lld us (max_batch_age %lld us)\n", round,
                static_cast<long long>(us),
                static_cast<long long>(rcu_domain::max_batch_age.count()));
  }
  EXPECT_TRUE(rcu_default_domain().reclaimer_running());
  // The bytes are uncounted once the whole batch has run.
  EXPECT_TRUE(eventually([] { return rcu_default_domain().backlog_bytes() == 0; }));
}

// A reader's section holds the batch; once it ends, the reclaimer finishes the
// grace period it started (nobody retires again to poll it).
TEST(RcuReclaim, ABatchHeldByAReaderGoesWhenTheReaderLeaves) {
  rcu_barrier();
  section_holder reader(rcu_default_domain());
  rcu_retire(new counted);
  std::this_thread::sleep_for(5 * rcu_domain::max_batch_age);  // its grace period starts
  EXPECT_EQ(counted::alive.load(), 1) << "freed under a reader's section";
  reader.release();
  EXPECT_TRUE(eventually([] { return counted::alive.load() == 0; }));
}

// A batch closed by size in a retiring thread while a reader holds its grace period,
// and then no retire at all: the reclaimer, asleep or not, finishes it.
TEST(RcuReclaim, ABatchClosedBySizeUnderAReaderGoesWithoutALaterRetire) {
  rcu_barrier();
  section_holder reader(rcu_default_domain());
  std::this_thread::sleep_for(20ms);  // the reclaimer goes to sleep
  for (std::size_t i = 0; i < rcu_domain::batch_size; ++i)
    rcu_retire(new counted);  // the last one starts the batch's grace period
  std::this_thread::sleep_for(5 * rcu_domain::max_batch_age);
  EXPECT_EQ(counted::alive.load(), static_cast<long>(rcu_domain::batch_size));
  reader.release();
  EXPECT_TRUE(eventually([] { return counted::alive.load() == 0; }));
}

// A policy whose clock the test moves, and with no reclaimer thread: the retiring
// thread closes batches by age and by size, deterministically.
struct manual_clock_policy {
  using wait = spin_then_park<>;
  template <class T>
  using atomic = std::atomic<T>;
  static constexpr bool reclaimer_thread = false;
  static inline std::atomic<std::uint64_t> clock{1'000'000'000};
  static std::uint64_t now_ns() noexcept { return clock.load(std::memory_order_relaxed); }
};
using manual_domain = basic_rcu_domain<manual_clock_policy>;

void retire_in(manual_domain& d, std::size_t bytes = sizeof(counted)) {
  rcu_retire(new counted, std::default_delete<counted>(), d, bytes);
}

constexpr std::uint64_t age_ns =
    std::chrono::duration_cast<std::chrono::nanoseconds>(manual_domain::max_batch_age).count();

TEST(RcuReclaim, ABatchClosesByAgeAtExactlyMaxBatchAge) {
  manual_domain& d = manual_domain::instance();
  rcu_barrier(d);
  ASSERT_FALSE(d.reclaimer_running());
  const std::uint64_t t0 = manual_clock_policy::clock.load();
  retire_in(d);  // the batch's first: its age counts from here
  manual_clock_policy::clock = t0 + age_ns - 1;
  retire_in(d);  // one nanosecond under the age
  EXPECT_EQ(counted::alive.load(), 2);
  manual_clock_policy::clock = t0 + age_ns;
  retire_in(d);  // at the age: closed, and with no reader freed at once
  EXPECT_EQ(counted::alive.load(), 0);
  // The next batch's age counts from its own first retire, not from t0.
  manual_clock_policy::clock = t0 + 2 * age_ns;
  retire_in(d);
  manual_clock_policy::clock = t0 + 3 * age_ns - 1;
  retire_in(d);
  EXPECT_EQ(counted::alive.load(), 2);
  manual_clock_policy::clock = t0 + 3 * age_ns;
  retire_in(d);
  EXPECT_EQ(counted::alive.load(), 0);
}

TEST(RcuReclaim, ABatchClosesBySizeAtExactlyBatchSize) {
  manual_domain& d = manual_domain::instance();
  rcu_barrier(d);
  for (std::size_t i = 0; i + 1 < manual_domain::batch_size; ++i)
    retire_in(d);  // the clock stands still: no batch is old
  EXPECT_EQ(counted::alive.load(), static_cast<long>(manual_domain::batch_size) - 1);
  retire_in(d);
  EXPECT_EQ(counted::alive.load(), 0);
}

// The backlog limit at its edge: a retire that brings the backlog to exactly the
// limit returns with everything still pending; one byte more reclaims first.
TEST(RcuReclaim, BacklogAtTheLimitWaitsNotOneByteOverIt) {
  manual_domain& d = manual_domain::instance();
  rcu_barrier(d);
  constexpr std::size_t limit = 1000;
  d.set_backlog_limit(limit);
  retire_in(d, 400);
  retire_in(d, 599);  // one under
  EXPECT_EQ(d.backlog_bytes(), limit - 1);
  retire_in(d, 1);  // at
  EXPECT_EQ(d.backlog_bytes(), limit);
  EXPECT_EQ(counted::alive.load(), 3);
  retire_in(d, 1);  // one over: the three go first
  EXPECT_EQ(counted::alive.load(), 1);
  EXPECT_EQ(d.backlog_bytes(), 1u);
  // One object larger than the limit goes alone.
  retire_in(d, 5 * limit);
  EXPECT_EQ(counted::alive.load(), 1);
  EXPECT_EQ(d.backlog_bytes(), 5 * limit);
  rcu_barrier(d);
  EXPECT_EQ(d.backlog_bytes(), 0u);
  d.set_backlog_limit(manual_domain::default_backlog_limit);
}

// Over the limit with a reader inside its section, a retire outside any section
// waits for that reader; one inside a section does not wait (it cannot) and takes
// the backlog over the limit until its section ends.
TEST(RcuReclaim, OverTheLimitARetireWaitsForTheGracePeriod) {
  manual_domain& d = manual_domain::instance();
  rcu_barrier(d);
  d.set_backlog_limit(100);
  section_holder reader(d, [&d] {
    retire_in(d, 60);
    retire_in(d, 60);  // inside a section: over the limit, and returns
  });
  EXPECT_EQ(d.backlog_bytes(), 120u);
  auto over = std::async(std::launch::async, [&] { retire_in(d, 1); });
  EXPECT_EQ(over.wait_for(50ms), std::future_status::timeout)
      << "returned over the limit while a reader held the grace period";
  EXPECT_EQ(d.backlog_bytes(), 120u);
  reader.release();
  EXPECT_EQ(over.wait_for(30s), std::future_status::ready);
  // The two 60s are gone. The reader's unlock reclaims too (it went over the limit
  // inside its section) and may take the 1 once the grace period let it be retired.
  EXPECT_LE(d.backlog_bytes(), 1u);
  EXPECT_EQ(counted::alive.load(), static_cast<long>(d.backlog_bytes()));
  rcu_barrier(d);
  EXPECT_EQ(counted::alive.load(), 0);
  d.set_backlog_limit(manual_domain::default_backlog_limit);
}

// rcu_cell over the limit waits before it unpublishes the old value, so that the
// value in its hands is counted too: readers still see the old value meanwhile.
TEST(RcuReclaim, ACellStoreOverTheLimitWaitsBeforePublishing) {
  manual_domain& d = manual_domain::instance();
  rcu_barrier(d);
  d.set_backlog_limit(10);
  {
    basic_rcu_cell<int, manual_clock_policy> cell(1);
    cell.store(std::make_unique<int>(2), 4);
    section_holder reader(d);
    cell.store(std::make_unique<int>(3), 4);  // 4 + 4 bytes retired: within
    EXPECT_EQ(d.backlog_bytes(), 8u);
    auto over = std::async(std::launch::async, [&] { cell.store(std::make_unique<int>(4), 4); });
    EXPECT_EQ(over.wait_for(50ms), std::future_status::timeout);
    EXPECT_EQ(*cell.read(), 3) << "published before the backlog had room for the old value";
    reader.release();
    EXPECT_EQ(over.wait_for(30s), std::future_status::ready);
    EXPECT_EQ(*cell.read(), 4);
    EXPECT_EQ(d.backlog_bytes(), 4u);
  }
  rcu_barrier(d);
  EXPECT_EQ(d.backlog_bytes(), 0u);
  d.set_backlog_limit(manual_domain::default_backlog_limit);
}

// A 64 KiB value that counts its lives.
struct big {
  static inline std::atomic<long> alive{0};
  std::array<char, 64 * 1024> bytes{};
  big() { alive.fetch_add(1, std::memory_order_relaxed); }
  big(const big&) : big() {}
  ~big() { alive.fetch_sub(1, std::memory_order_relaxed); }
};

// rcu_cell swapping a 64 KiB value as fast as it can, beside readers: the retired
// values never hold more than the limit (sampled by another thread, counting live
// values: the current one and the writer's next one are not retired).
TEST(RcuReclaim, StoreLoopOfLargeValuesStaysWithinTheLimit) {
  rcu_domain& d = rcu_default_domain();
  rcu_barrier();
  constexpr std::size_t values = 16;  // under batch_size: the limit, not the size, binds
  const std::size_t limit = values * sizeof(big);
  d.set_backlog_limit(limit);
  const int stores = stress_scaled(20000);
  std::atomic<bool> stop{false};
  std::atomic<long> most_alive{0};
  std::atomic<std::size_t> most_backlog{0};
  {
    rcu_cell<big> cell;
    std::thread reader([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        auto g = cell.read();
        EXPECT_EQ(g->bytes[0], 0);
      }
    });
    std::thread sampler([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        long a = big::alive.load(std::memory_order_relaxed);
        std::size_t b = d.backlog_bytes();
        if (a > most_alive.load()) most_alive.store(a);
        if (b > most_backlog.load()) most_backlog.store(b);
        std::this_thread::yield();
      }
    });
    for (int i = 0; i < stores; ++i)
      cell.store(std::make_unique<big>());
    stop.store(true);
    reader.join();
    sampler.join();
  }
  std::printf("most alive %ld (limit: %zu retired + current + next), most backlog %zu of %zu\n",
              most_alive.load(), values, most_backlog.load(), limit);
  EXPECT_LE(most_backlog.load(), limit);
  EXPECT_LE(most_alive.load(), static_cast<long>(values) + 2);
  rcu_barrier();
  EXPECT_EQ(big::alive.load(), 0);
  EXPECT_EQ(d.backlog_bytes(), 0u);
  d.set_backlog_limit(rcu_domain::default_backlog_limit);
}

// Refused, the thread stops and is not started again; what is retired then waits
// (nothing else reclaims it); allowed again, the next retire starts it.
TEST(RcuReclaim, TheThreadCanBeRefusedAndAllowedAgain) {
  rcu_domain& d = rcu_default_domain();
  rcu_retire(new counted);
  ASSERT_TRUE(eventually([] { return counted::alive.load() == 0; }));
  ASSERT_TRUE(d.reclaimer_running());
  const int with = threads_now();
  d.set_reclaimer_thread(false);
  EXPECT_FALSE(d.reclaimer_running());
  // Detached: it returns from its function just after it lets us return.
  EXPECT_TRUE(eventually([&] { return threads_now() == with - 1; }));
  rcu_retire(new counted);  // one: a batch's first retire never closes it by age
  std::this_thread::sleep_for(20 * rcu_domain::max_batch_age);
  EXPECT_EQ(counted::alive.load(), 1);
  EXPECT_EQ(threads_now(), with - 1);
  d.set_reclaimer_thread(true);
  rcu_retire(new counted);
  EXPECT_TRUE(d.reclaimer_running());
  EXPECT_TRUE(eventually([] { return counted::alive.load() == 0; }));
}

}  // namespace
}  // namespace hotpath::test
