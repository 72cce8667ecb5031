// SPDX-License-Identifier: MIT
#include "hotpath/percpu.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "support/cpus.hpp"
#include "support/stress.hpp"

namespace hotpath::test {
namespace {

bool pin_self(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

TEST(PerCpu, ParsesCpuLists) {
  EXPECT_EQ(detail::parse_cpu_list("0-1\n"), 2u);
  EXPECT_EQ(detail::parse_cpu_list("0"), 1u);
  EXPECT_EQ(detail::parse_cpu_list("0-3,8-11\n"), 12u);
  EXPECT_EQ(detail::parse_cpu_list("0,5"), 6u);
  EXPECT_EQ(detail::parse_cpu_list(""), 0u);
}

TEST(PerCpu, PossibleCoversEveryCpuWeMayRunOn) {
  const unsigned n = possible_cpus();
  EXPECT_GE(n, std::thread::hardware_concurrency());
  for (unsigned c : allowed_cpus())
    EXPECT_LT(c, n);
}

// Pinned to one cpu, current_cpu() (from the rseq area where registered) must name
// it: the kernel updates the area on every return to user space after a migration.
TEST(PerCpu, CurrentCpuFollowsThePin) {
  const auto cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  std::thread([&] {
    for (int round = 0; round < 3; ++round) {
      for (unsigned c : cpus) {
        ASSERT_TRUE(pin_self(c));
        EXPECT_EQ(current_cpu(), c);
        EXPECT_EQ(sched_getcpu(), static_cast<int>(c));
        if (detail::rseq_cpu_id() >= 0) {
          EXPECT_EQ(detail::rseq_cpu_id(), static_cast<int>(c));
        }
      }
    }
  }).join();
  std::printf("rseq area registered: %s; rseq fast path compiled in: %s\n",
              detail::rseq_cpu_id() >= 0 ? "yes" : "no", HOTPATH_RSEQ ? "yes" : "no");
}

TEST(PerCpu, SlotsSitOnTheirOwnLinesAndIterate) {
  percpu<std::uint32_t> p;
  ASSERT_EQ(p.size(), possible_cpus());
  static_assert(percpu<std::uint32_t>::stride % cache_line_size == 0);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const auto addr = reinterpret_cast<std::uintptr_t>(&p[i]);
    EXPECT_EQ(addr % cache_line_size, 0u);
    if (i > 0) {
      EXPECT_EQ(addr - reinterpret_cast<std::uintptr_t>(&p[i - 1]), percpu<std::uint32_t>::stride);
    }
    EXPECT_EQ(p[i], 0u);  // value-initialised
    p[i] = static_cast<std::uint32_t>(i + 1);
  }
  std::uint32_t total = 0;
  std::size_t visited = 0;
  for (auto v : p) {
    total += v;
    ++visited;
  }
  EXPECT_EQ(visited, p.size());
  EXPECT_EQ(total, p.size() * (p.size() + 1) / 2);
  const percpu<int> filled(7);
  for (int v : filled)
    EXPECT_EQ(v, 7);
}

TEST(PerCpu, LocalIsThePinnedCpusSlot) {
  percpu<int> p;
  std::thread([&] {
    for (unsigned c : allowed_cpus()) {
      ASSERT_TRUE(pin_self(c));
      EXPECT_EQ(&p.local(), &p[c]);
    }
  }).join();
}

// local() is a hint, so slots need atomics; the total must still balance with more
// threads than cpus.
TEST(PerCpu, AtomicSlotsBalanceUnderConcurrency) {
  percpu<std::atomic<std::int64_t>> p;
  constexpr int threads = 6;
  const int iters = stress_scaled(20000);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < iters; ++i)
        p.local().fetch_add(1, std::memory_order_relaxed);
    });
  }
  for (auto& th : pool)
    th.join();
  std::int64_t total = 0;
  for (auto& slot : p)
    total += slot.load(std::memory_order_relaxed);
  EXPECT_EQ(total, std::int64_t{threads} * iters);
}

}  // namespace
}  // namespace hotpath::test
